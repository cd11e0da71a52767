// Package allocs measures the heap bytes one call allocates, for tests that
// bound the memory of an entry point.
package allocs

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// Bytes returns the heap bytes one call of f allocates: the fewest over
// runs calls (at least 1), each measured as the growth of
// runtime.MemStats.TotalAlloc across the call, with GOMAXPROCS set to 1
// while it measures (as testing.AllocsPerRun does).
//
// TotalAlloc counts the whole process: a goroutine that allocates during a
// measurement (the testing framework, the fuzzing engine, a parallel test,
// a background worker) adds to it, and can only add. f must allocate the
// same bytes on every call (a repeatable call), so the minimum is f's own
// allocation unless foreign allocations overlap every one of the runs;
// with one P the other goroutines run inside a measurement only when f
// blocks or is preempted. testing.AllocsPerRun counts allocations, not
// bytes, so it cannot tell a 2^31-row buffer from an error message.
func Bytes(runs int, f func()) uint64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	best := ^uint64(0)
	var a, b runtime.MemStats
	for i := 0; i < max(runs, 1); i++ {
		runtime.ReadMemStats(&a)
		f()
		runtime.ReadMemStats(&b)
		best = min(best, b.TotalAlloc-a.TotalAlloc)
	}
	return best
}

// Within is Bytes(1, f) for a bound check: when the count exceeds bound,
// f runs once more and the smaller count is returned. One run costs what
// the call costs, and the rare foreign allocation (the fuzzing engine's
// goroutines, seen adding over 100 MB to one measurement) does not fail
// the check unless it overlaps both runs. f must be repeatable, as for
// Bytes.
func Within(bound uint64, f func()) uint64 {
	got := Bytes(1, f)
	if got > bound {
		got = min(got, Bytes(1, f))
	}
	return got
}

// churnSink keeps Churn's blocks reachable until the next one replaces
// them, so that the compiler cannot drop the allocations.
var churnSink atomic.Pointer[[]byte]

// Churn starts a goroutine that allocates 64 KiB blocks without pause until
// stop is called: the load of a parallel test or of the fuzzing engine,
// under which a bound on one call's bytes must still hold.
func Churn() (stop func()) {
	var done atomic.Bool
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for !done.Load() {
			b := make([]byte, 64<<10)
			churnSink.Store(&b)
		}
	}()
	return func() { done.Store(true); <-exited }
}

// Warm is testing.AllocsPerRun(runs, f), the least of three tries: the
// allocations per warm call of a call that must allocate nothing. A
// per-call allocation of f shows in every try; one try can also count an
// allocation made meanwhile by another goroutine of the test process
// (seen on a loaded CI host as 1 allocation per run in one try out of
// several), which a second try does not repeat.
func Warm(runs int, f func()) float64 {
	least := testing.AllocsPerRun(runs, f)
	for try := 1; try < 3 && least > 0; try++ {
		least = min(least, testing.AllocsPerRun(runs, f))
	}
	return least
}
