//go:build unix

package main

import (
	"syscall"
	"time"
)

// processCPUSeconds returns the CPU time (user + system) this process has
// used so far, 0 when the system does not say.
func processCPUSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
