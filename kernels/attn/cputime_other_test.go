//go:build !unix

package attn

import "time"

// processCPU reports that the process's CPU time is not available here.
func processCPU() (time.Duration, bool) { return 0, false }
