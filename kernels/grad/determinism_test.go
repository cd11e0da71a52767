package grad

import (
	"math"
	"testing"
)

// TestDeterminism checks that Forward and Backward give bit-identical
// results across runs and for 1, 2 and 3 workers, dense and paged (with a
// shared page), causal and not.
func TestDeterminism(t *testing.T) {
	shapes := []shape{
		{seqQ: []int{150, 0, 90}, seqK: []int{300, 40, 200}, hq: 8, hkv: 2, d: 64, topK: 6, blk: 32, causal: true, pad: 0.1, seed: 11},
		{seqQ: []int{120, 70}, seqK: []int{250, 180}, hq: 16, hkv: 1, d: 128, topK: 4, blk: 32, paged: true, pageSize: 16, shared: true, seed: 12},
	}
	for _, s := range shapes {
		in := newInstance(t, s)
		var first [5][]float32
		for run, workers := range []int{1, 2, 3, 2, 1} {
			o, lse, dq, dk, dv := run32(t, in, workers, true)
			got := [5][]float32{o, lse, dq, dk, dv}
			if run == 0 {
				first = got
				continue
			}
			for j, name := range []string{"O", "LSE", "dQ", "dK", "dV"} {
				for i := range got[j] {
					if math.Float32bits(got[j][i]) != math.Float32bits(first[j][i]) {
						t.Fatalf("%v: %s[%d] with %d workers (run %d) = %v, first run %v", s, name, i, workers, run, got[j][i], first[j][i])
					}
				}
			}
		}
	}
}
