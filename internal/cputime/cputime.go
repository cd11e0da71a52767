// Package cputime reads the CPU time this process has used, for benchmarks
// that report it next to wall time: on a host shared with other work it
// counts only this process's cycles.
package cputime

import "time"

// Process returns the CPU time (user and system, all threads) this process
// has used so far, and true; false where the OS does not report it.
func Process() (time.Duration, bool) { return process() }
