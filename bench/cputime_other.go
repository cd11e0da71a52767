//go:build !unix

package main

// processCPUSeconds: no getrusage here, so the bench knows no CPU time of
// its own and the backward group's per-CPU-second columns read 0 (the
// other processes' share comes from /proc/stat, which such systems lack
// anyway).
func processCPUSeconds() float64 { return 0 }
