package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// profileEnv names a file that receives a CPU profile of the whole
// command (a mount: from start to unmount), for `go tool pprof`. It is a
// developer's tool, so an environment variable rather than a flag.
const profileEnv = "PUGFS_CPUPROFILE"

// startProfile starts the CPU profile profileEnv asks for and returns
// what stops it; a profile that cannot start is reported and skipped.
func startProfile() (stop func()) {
	path := os.Getenv(profileEnv)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "pugfs: %s: %v\n", profileEnv, err)
		if f != nil {
			f.Close()
		}
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
