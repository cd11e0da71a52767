package op

import "github.com/sparseattn/msa/internal/allocs"

// allocDuring returns the heap bytes allocated while f runs once, with one
// P so that other goroutines rarely run meanwhile (allocs.Bytes). f builds
// graph nodes or runs a call once, so it cannot be repeated for the
// fewest-of-several measure: a goroutine that allocates meanwhile still
// counts, and callers use caps far above their bound's error message.
func allocDuring(f func()) uint64 { return allocs.Bytes(1, f) }

// allocWithin is allocDuring for a call that may be repeated (the same
// arguments give the same state and results: an eager call, a wrapper's
// Plan or Run): when the first count exceeds bound, f runs once more and
// the smaller count is returned. The counter is process-wide, and under
// -fuzz the engine's own goroutines add to it now and then, by more than
// any bound here (a 156 MB count for a Plan that allocates a few KiB,
// seen once in minutes of fuzzing and not again on the same input).
func allocWithin(f func(), bound uint64) uint64 {
	got := allocDuring(f)
	if got > bound {
		got = min(got, allocDuring(f))
	}
	return got
}
