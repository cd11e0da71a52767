package selection

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/tile"
)

// scorerCase is a ragged batch: a sequence longer than two row chunks
// with more blocks than one GEMM column group, a partial last block, an
// empty key sequence, an empty query sequence, seqlen_q > seqlen_k, and
// two rows past cu_seqlens_q[B]. q and k are stored as dt ("f32", "bf16"
// or "e4m3"); the returned slices hold their float32 values.
func scorerCase(t *testing.T, dt string, causal, mean bool) (*Scorer, []float32, []float32) {
	t.Helper()
	seqQ := []int{150, 5, 0, 40, 9}
	seqK := []int{330, 0, 40, 20, 50}
	const hq, hkv, d, blk = 8, 2, 24, 16
	cuQ, cuK := []int32{0}, []int32{0}
	for b := range seqQ {
		cuQ = append(cuQ, cuQ[b]+int32(seqQ[b]))
		cuK = append(cuK, cuK[b]+int32(seqK[b]))
	}
	totalQ, totalK := int(cuQ[len(seqQ)])+2, int(cuK[len(seqK)])
	rng := rand.New(rand.NewPCG(7, 11))
	q, k := make([]float32, totalQ*hq*d), make([]float32, totalK*hkv*d)
	for i := range q {
		q[i] = float32(rng.NormFloat64())
	}
	for i := range k {
		k[i] = float32(rng.NormFloat64())
	}
	s := &Scorer{TotalQ: totalQ, HQ: hq, Hkv: hkv, D: d, Blk: blk, MaxBlocks: (330 + blk - 1) / blk,
		CuQ: cuQ, CuK: cuK, Causal: causal, Scale: 0.3, Mean: mean, Workers: 3,
		Q: stored(dt, q), K: stored(dt, k)}
	return s, q, k
}

// stored returns x as an operand of dtype dt ("f32", "bf16" or "e4m3"),
// rounding x in place to the values the operand holds.
func stored(dt string, x []float32) Operand {
	switch dt {
	case "bf16":
		b := make([]lowp.BFloat16, len(x))
		lowp.EncodeBF16(b, x)
		lowp.DecodeBF16(x, b)
		return Operand{BF16: b}
	case "e4m3":
		b := make([]lowp.Float8E4M3FN, len(x))
		for i, f := range x {
			b[i] = lowp.E4M3(f)
		}
		lowp.DecodeE4M3(x, b)
		return Operand{E4M3: b}
	}
	return Operand{F32: x}
}

// refScores is Run's formula in float64 from the float32 block means
// (summed in token order as Run sums them), and the bound on each score's
// float32 error. A score's every term passes through at most D+qpk+2
// float32 roundings (D multiply-adds, the scale, the qpk-term head sum,
// the division by qpk), in any order and with or without FMA, so
//
//	|score - exact| <= gamma(D+qpk+2) * scale * sum_g sum_c |q_gc| |m_c| (/ qpk for the mean),
//
// gamma(n) = n u / (1 - n u), u = 2^-24; the maximum of the heads' scores
// is exact, so the same sum bounds it.
func refScores(s *Scorer, q, k []float32) (want, bound []float64) {
	n := s.Hkv * s.TotalQ * s.MaxBlocks
	want, bound = make([]float64, n), make([]float64, n)
	for i := range want {
		want[i] = math.Inf(-1)
	}
	d, qpk := s.D, s.HQ/s.Hkv
	nu := float64(d+qpk+2) * 0x1p-24
	gamma := nu / (1 - nu)
	for b := 0; b+1 < len(s.CuQ); b++ {
		sq, sk := int(s.CuQ[b+1]-s.CuQ[b]), int(s.CuK[b+1]-s.CuK[b])
		for j := 0; j*s.Blk < sk; j++ {
			keys := min(s.Blk, sk-j*s.Blk)
			for h := 0; h < s.Hkv; h++ {
				m := make([]float32, d)
				for t := j * s.Blk; t < j*s.Blk+keys; t++ {
					for c := range m {
						m[c] += k[((int(s.CuK[b])+t)*s.Hkv+h)*d+c]
					}
				}
				for c := range m {
					m[c] *= 1 / float32(keys)
				}
				for i := 0; i < sq; i++ {
					gq := int(s.CuQ[b]) + i
					if s.Causal && j*s.Blk > i+sk-sq {
						continue
					}
					acc, abs := math.Inf(-1), 0.0
					if s.Mean {
						acc = 0
					}
					for g := 0; g < qpk; g++ {
						dot := 0.0
						for c := range m {
							x := float64(q[(gq*s.HQ+h*qpk+g)*d+c]) * float64(m[c])
							dot += x
							abs += math.Abs(x)
						}
						dot *= float64(s.Scale)
						if s.Mean {
							acc += dot / float64(qpk)
						} else {
							acc = math.Max(acc, dot)
						}
					}
					at := (h*s.TotalQ+gq)*s.MaxBlocks + j
					want[at], bound[at] = acc, gamma*float64(s.Scale)*abs
				}
			}
		}
	}
	return want, bound
}

// TestRunWithinBound: on every tile tier this CPU has (the GEMM tiles and
// the generic multiply-add loop), q and k in float32, bfloat16 and
// e4m3fn, causal and not, both head reductions, every score is within the derived bound of the float64 formula, -inf
// exactly where the block is invisible, and the bits do not depend on the
// worker count.
func TestRunWithinBound(t *testing.T) {
	prev := tile.TierSetting()
	t.Cleanup(func() { _ = tile.SetTier(prev) })
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for _, tier := range tile.Tiers() {
		if err := tile.SetTier(tier); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			dt           string
			causal, mean bool
		}{{"f32", false, false}, {"f32", true, true}, {"bf16", true, false}, {"bf16", false, true}, {"e4m3", true, true}} {
			dt, causal, mean := c.dt, c.causal, c.mean
			s, q, k := scorerCase(t, dt, causal, mean)
			{
				got := s.Run()
				want, bound := refScores(s, q, k)
				for i, w := range want {
					x := float64(got[i])
					if math.IsInf(w, -1) != math.IsInf(x, -1) || math.Abs(x-w) > bound[i] {
						t.Fatalf("%s %s causal=%v mean=%v: score %d = %v, want %v ± %.3g", tier, dt, causal, mean, i, x, w, bound[i])
					}
				}
				for _, w := range []int{1, 2, 5} {
					s.Workers = w
					for i, x := range s.Run() {
						if math.Float32bits(x) != math.Float32bits(got[i]) {
							t.Fatalf("%s %s causal=%v mean=%v: workers=%d differs at %d", tier, dt, causal, mean, w, i)
						}
					}
				}
			}
		}
	}
}

// TestRunNaN: a NaN in one query head makes every visible score of its
// row and KV head NaN under both reductions, and a NaN key makes its
// block's scores NaN for every row of the sequence that sees it.
func TestRunNaN(t *testing.T) {
	for _, mean := range []bool{false, true} {
		s, q, k := scorerCase(t, "f32", false, mean)
		const row, kvh = 70, 1 // a row of the second row chunk of sequence 0
		qpk := s.HQ / s.Hkv
		q[(row*s.HQ+kvh*qpk+qpk-1)*s.D+3] = float32(math.NaN()) // the group's last head
		k[((35)*s.Hkv+0)*s.D+5] = float32(math.NaN())           // key 35: block 2 of sequence 0, KV head 0
		got := s.Run()
		for j := 0; j < s.MaxBlocks; j++ {
			if x := got[(kvh*s.TotalQ+row)*s.MaxBlocks+j]; x == x {
				t.Fatalf("mean=%v: NaN query head: score of block %d = %v, want NaN", mean, j, x)
			}
			if x := got[(kvh*s.TotalQ+row+1)*s.MaxBlocks+j]; x != x {
				t.Fatalf("mean=%v: the next row's block %d is NaN", mean, j)
			}
		}
		for gq := 0; gq < 150; gq++ {
			if x := got[gq*s.MaxBlocks+2]; x == x {
				t.Fatalf("mean=%v: NaN key: row %d block 2 = %v, want NaN", mean, gq, x)
			}
			if x := got[gq*s.MaxBlocks+3]; x != x {
				t.Fatalf("mean=%v: row %d block 3 is NaN", mean, gq)
			}
		}
	}
}
