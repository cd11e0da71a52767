package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// profile starts a CPU profile of one case's timed op loop when
// -cpuprofile is set, written to <cpuprofile>.<case>, and returns the
// function that stops it.
func profile(cfg *config, name string) func() {
	if cfg.cpuProfile == "" {
		return func() {}
	}
	f, err := os.Create(cfg.cpuProfile + "." + name)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: cpuprofile:", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
