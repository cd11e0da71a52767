package attn

import "testing"

// warmAllocs is testing.AllocsPerRun(runs, f), the least of three tries. A
// per-call allocation of the code under test shows in every try; one try
// can also count an allocation made meanwhile by another goroutine of the
// test process (seen on a loaded CI host as 1 allocation per run in one
// try out of several), which a second try does not repeat.
func warmAllocs(runs int, f func()) float64 {
	least := testing.AllocsPerRun(runs, f)
	for try := 1; try < 3 && least > 0; try++ {
		least = min(least, testing.AllocsPerRun(runs, f))
	}
	return least
}
