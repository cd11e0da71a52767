//go:build unix

package attn

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) this process has used
// so far, and true. Benchmarks report it next to wall time: on a host
// shared with other work it counts only this process's cycles.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
