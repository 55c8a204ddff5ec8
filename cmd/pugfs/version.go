package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
)

func versionCommand() *command {
	return &command{
		name:     "version",
		synopsis: "pugfs version",
		short:    "print the version and the Go version",
		long: `
Prints pugfs's version (set at build time with
-ldflags "-X main.version=..."; "dev" otherwise, with the VCS revision when
the binary was built from a checkout), the Go version and the platform.`,
		examples: `  pugfs version
  go build -ldflags "-X main.version=v0.3.0" ./cmd/pugfs && ./pugfs version`,
		setup: func(fs *flag.FlagSet) func(context.Context, *stdio, []string) error {
			return func(_ context.Context, sio *stdio, args []string) error {
				if len(args) != 0 {
					return usagef("takes no arguments")
				}
				fmt.Fprintf(sio.out, "pugfs %s %s %s/%s\n", versionString(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
				return nil
			}
		},
	}
}

// versionString is the -X version, or "dev" plus the VCS revision the
// binary was built from, so that two dev builds can be told apart.
func versionString() string {
	if version != "dev" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return version
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return version
	}
	return version + "+" + rev + dirty
}
