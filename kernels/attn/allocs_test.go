package attn

import "github.com/sparseattn/msa/internal/allocs"

// warmAllocs is allocs.Warm: testing.AllocsPerRun, the least of three tries.
func warmAllocs(runs int, f func()) float64 { return allocs.Warm(runs, f) }
