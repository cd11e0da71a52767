// Package workload makes the synthetic inputs that the CPU benchmark
// (bench) and the GPU check's timing rows (cuda/gpucheck) share, so that
// both time the same selection patterns: a fast splitmix64 stream, a
// table of standard-normal values, rows whose neighbouring tokens are
// correlated (an AR(1) process), the block selection op's BlockScores and
// TopKBlocks make on them (through op/causalselect, so that the GPU check
// can use it without linking package op), the bench's random causal
// selection, and the mean union of selected blocks per query tile of a
// selection.
package workload

import (
	"math/rand/v2"
	"sync"
)

// SplitMix is splitmix64: a tiny, fast generator whose stream is fixed by
// its seed (the benchmark's inputs are reproducible from their seeds).
type SplitMix struct{ s uint64 }

// NewSplitMix returns the stream of seed.
func NewSplitMix(seed uint64) SplitMix { return SplitMix{seed} }

// Next returns the stream's next 64 bits.
func (r *SplitMix) Next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Intn returns an integer in [0, n) for n >= 1 (the top 53 bits modulo
// n: uniform to within n / 2^53).
func (r *SplitMix) Intn(n int) int { return int((r.Next() >> 11) % uint64(n)) }

// NormalBits is the log2 of the number of values Normals returns.
const NormalBits = 12

var (
	normalsOnce sync.Once
	normals     []float32
)

// Normals returns 1 << NormalBits standard-normal float32 values drawn
// once from a fixed PCG stream; inputs index it with SplitMix bits, which
// fills gigabytes far faster than drawing each value. The slice is shared:
// callers must not modify it.
func Normals() []float32 {
	normalsOnce.Do(func() {
		r := rand.New(rand.NewPCG(1, 2))
		normals = make([]float32, 1<<NormalBits)
		for i := range normals {
			normals[i] = float32(r.NormFloat64())
		}
	})
	return normals
}
