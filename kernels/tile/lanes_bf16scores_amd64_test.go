//go:build amd64 && !purego

package tile

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"unsafe"

	"github.com/sparseattn/msa/kernels/lowp"
)

// bf16Bytes rounds x to bf16 in place and returns its bf16 values as bytes
// (the rows a WideningStager offers as RawBF16).
func bf16Bytes(x []float32) []byte {
	b := make([]lowp.BFloat16, len(x))
	lowp.EncodeBF16(b, x)
	lowp.DecodeBF16(x, b)
	return unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), 2*len(b))
}

// TestLanesBF16Scores: on the avx512 tier, with the in-place route and
// AVX512_BF16, a Lanes asked for VDPBF16PS scores (SetBF16Scores) on bf16
// queries and keys
//   - takes them (LanesBF16Scores; d a multiple of 32 only, not on the
//     widening route), and its result differs in some bit from the float32
//     Q.K kernels' (the other summation order), so the kernels did run;
//   - gives the same bits whether the key chunks are read in place, all
//     staged, or some of each (the staged ones are converted exactly);
//   - stays within the float32 tolerance of TestLanes of the generic Acc
//     tier, the reference;
//   - falls back to the float32 kernels bit for bit when one query is not
//     a bf16 value (its pairs would round it).
func TestLanesBF16Scores(t *testing.T) {
	useTier(t, "avx512")
	if !haveBF16 {
		t.Skip("CPU lacks AVX512_BF16")
	}
	defer withInPlace512(true)()
	for d, want := range map[int]bool{16: false, 48: false, 64: true, 128: true} {
		if got := LanesBF16Scores(d); got != want {
			t.Errorf("LanesBF16Scores(%d) = %v, want %v", d, got, want)
		}
	}
	func() {
		defer withInPlace512(false)()
		if LanesBF16Scores(128) {
			t.Errorf("LanesBF16Scores(128) on the widening route")
		}
	}()
	rng := rand.New(rand.NewSource(23))
	for _, d := range []int{32, 128} {
		for _, n := range []int{5, 64, 100, 128} {
			p := newProblem(rng, d, n, 16, 3, RoundNone, n == 100, 1)
			bf16Bytes(p.q)
			ks, vs := make([][]byte, len(p.k)), make([][]byte, len(p.k))
			for u := range p.k {
				ks[u], vs[u] = bf16Bytes(p.k[u]), bf16Bytes(p.v[u])
			}
			run := func(scores bool, q []float32, noRaw map[int]bool, hide bool) result {
				l := NewLanes(d)
				l.SetBF16Scores(scores)
				l.Reset(p.m, p.scale, p.round, p.invT)
				for r := 0; r < p.m; r++ {
					l.SetQ(r, q[r*d:(r+1)*d])
				}
				st := &rawStager{f: RawBF16, d: d, kb: make([]float32, BlockN*d), vb: make([]float32, BlockN*d), noRaw: noRaw, hide: hide}
				for u := range ks {
					st.k, st.v = ks[u], vs[u]
					l.UpdateStaged(n, p.valid[u], st)
				}
				return p.lanesResult(l)
			}
			t.Run(fmt.Sprintf("d%d/n%d", d, n), func(t *testing.T) {
				f32 := run(false, p.q, nil, false)
				got := run(true, p.q, nil, false)
				if _, same := sameResult(got, f32); same {
					t.Errorf("VDPBF16PS scores gave the float32 kernels' bits: not taken")
				}
				for _, c := range []struct {
					name  string
					noRaw map[int]bool
					hide  bool
				}{{"staged", nil, true}, {"first chunk staged", map[int]bool{0: true}, false}} {
					if msg, ok := sameResult(run(true, p.q, c.noRaw, c.hide), got); !ok {
						t.Errorf("%s: differs from the keys read in place: %s", c.name, msg)
					}
				}
				useTier(t, "generic")
				want := p.run()
				useTier(t, "avx512")
				compare(t, "VDPBF16PS scores vs generic Acc", got, want, p.tolerance(math.Ldexp(1, -22), math.Ldexp(1, -20)))
				q := append([]float32(nil), p.q...)
				q[len(q)-1] = math.Nextafter32(q[len(q)-1], 10) // not a bf16 value
				if msg, ok := sameResult(run(true, q, nil, false), run(false, q, nil, false)); !ok {
					t.Errorf("a query that is not a bf16 value: differs from the float32 kernels: %s", msg)
				}
			})
		}
	}
}
