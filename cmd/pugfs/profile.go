package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// profileEnv names a file that receives a CPU profile of the whole
// command (a mount: from start to unmount), for `go tool pprof`, and
// allocsEnv one that receives the allocations of the whole command. They
// are a developer's tools, so environment variables rather than flags.
const (
	profileEnv = "PUGFS_CPUPROFILE"
	allocsEnv  = "PUGFS_ALLOCSPROFILE"
)

// startProfile starts the profiles profileEnv and allocsEnv ask for and
// returns what stops them and writes them; a profile that cannot start is
// reported and skipped.
func startProfile() (stop func()) {
	stopCPU := startCPUProfile()
	writeAllocs := startAllocsProfile()
	return func() {
		stopCPU()
		writeAllocs()
	}
}

// startCPUProfile starts the CPU profile profileEnv asks for.
func startCPUProfile() (stop func()) {
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

// startAllocsProfile samples every 4 KiB allocated (the default is every
// 512 KiB, too coarse for one listing) and returns what writes the
// profile allocsEnv asks for.
func startAllocsProfile() (write func()) {
	path := os.Getenv(allocsEnv)
	if path == "" {
		return func() {}
	}
	runtime.MemProfileRate = 4 << 10
	return func() {
		// The profile shows allocations as of the last collection.
		runtime.GC()
		f, err := os.Create(path)
		if err == nil {
			err = pprof.Lookup("allocs").WriteTo(f, 0)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "pugfs: %s: %v\n", allocsEnv, err)
		}
	}
}
