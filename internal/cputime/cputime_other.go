//go:build !unix

package cputime

import "time"

// process reports that this OS has no getrusage.
func process() (time.Duration, bool) { return 0, false }
