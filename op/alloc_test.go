package op

import "github.com/sparseattn/msa/internal/allocs"

// allocDuring returns the heap bytes allocated while f runs once, with one
// P so that other goroutines rarely run meanwhile (allocs.Bytes). f builds
// graph nodes or runs a call once, so it cannot be repeated for the
// fewest-of-several measure: a goroutine that allocates meanwhile still
// counts, and callers use caps far above their bound's error message.
func allocDuring(f func()) uint64 { return allocs.Bytes(1, f) }
