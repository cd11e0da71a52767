package op

import "runtime"

// allocDuring returns the bytes allocated on the heap while f runs
// (runtime.MemStats.TotalAlloc; other goroutines' allocations count too,
// so callers use generous caps).
func allocDuring(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}
