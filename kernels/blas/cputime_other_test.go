//go:build !unix

package blas

import "time"

// processCPU reports that this OS has no getrusage.
func processCPU() (time.Duration, bool) { return 0, false }
