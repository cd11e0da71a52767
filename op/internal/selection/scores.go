package selection

import (
	"math"
	"runtime"
	"sync"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// Scorer is a validated BlockScores request (op.BlockScoresFunc): the
// shapes, sequences, block size and score rules; Run computes the scores.
type Scorer struct {
	TotalQ, HQ, Hkv, D, Blk, MaxBlocks int
	CuQ, CuK                           []int32
	Q, K                               *tensor.Dense
	Causal                             bool
	Scale                              float32
	Mean                               bool // average the group's heads (else their maximum)
	Workers                            int
}

// float32s decodes a float32, BFloat16 or Float8E4M3FN tensor.
func float32s(t *tensor.Dense) []float32 {
	switch t.Dtype() {
	case tensor.Float32:
		return validate.Backing[float32](t)
	case validate.BFloat16:
		src := validate.Backing[lowp.BFloat16](t)
		dst := make([]float32, len(src))
		lowp.DecodeBF16(dst, src)
		return dst
	default:
		src := validate.Backing[lowp.Float8E4M3FN](t)
		dst := make([]float32, len(src))
		lowp.DecodeE4M3(dst, src)
		return dst
	}
}

// Run computes the scores [Hkv][total_q][max_blocks].
func (s *Scorer) Run() []float32 {
	out := make([]float32, s.Hkv*s.TotalQ*s.MaxBlocks)
	ninf := float32(math.Inf(-1))
	for i := range out {
		out[i] = ninf
	}
	q, k := float32s(s.Q), float32s(s.K)
	d, hkv, hq, blk := s.D, s.Hkv, s.HQ, s.Blk
	qpk := hq / hkv
	batch := len(s.CuQ) - 1
	// Mean keys per (sequence, block, head): [b][j][h][D], float32 sums in
	// token order (deterministic).
	meanOff := make([]int, batch+1)
	for b := 0; b < batch; b++ {
		nb := (int(s.CuK[b+1]-s.CuK[b]) + blk - 1) / blk
		meanOff[b+1] = meanOff[b] + nb
	}
	means := make([]float32, meanOff[batch]*hkv*d)
	for b := 0; b < batch; b++ {
		sk := int(s.CuK[b+1] - s.CuK[b])
		for j := 0; j*blk < sk; j++ {
			n := min(blk, sk-j*blk)
			inv := 1 / float32(n)
			for h := 0; h < hkv; h++ {
				m := means[((meanOff[b]+j)*hkv+h)*d:][:d]
				for t := j * blk; t < j*blk+n; t++ {
					row := k[((int(s.CuK[b])+t)*hkv+h)*d:][:d]
					for c, x := range row {
						m[c] += x
					}
				}
				for c := range m {
					m[c] *= inv
				}
			}
		}
	}
	// One task per (sequence, query row); rows are independent.
	type task struct{ b, gq int }
	tasks := make(chan task, 256)
	var wg sync.WaitGroup
	nw := max(1, min(s.Workers, runtime.GOMAXPROCS(0), s.TotalQ))
	for w := 0; w < nw; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tk := range tasks {
				s.scoreRow(out, q, means[meanOff[tk.b]*hkv*d:], tk.b, tk.gq, qpk)
			}
		}()
	}
	for b := 0; b < batch; b++ {
		for gq := int(s.CuQ[b]); gq < int(s.CuQ[b+1]); gq++ {
			tasks <- task{b, gq}
		}
	}
	close(tasks)
	wg.Wait()
	return out
}

// scoreRow fills the scores of one query row for every KV head.
func (s *Scorer) scoreRow(out, q, means []float32, b, gq, qpk int) {
	d, hkv, blk := s.D, s.Hkv, s.Blk
	sq := int(s.CuQ[b+1] - s.CuQ[b])
	sk := int(s.CuK[b+1] - s.CuK[b])
	nb := (sk + blk - 1) / blk
	visible := nb
	if s.Causal {
		last := gq - int(s.CuQ[b]) + sk - sq // last visible key
		if last < 0 {
			visible = 0
		} else {
			visible = min(nb, last/blk+1)
		}
	}
	for h := 0; h < hkv; h++ {
		dst := out[(h*s.TotalQ+gq)*s.MaxBlocks:][:s.MaxBlocks]
		for j := 0; j < visible; j++ {
			m := means[(j*hkv+h)*d:][:d]
			var acc float32
			if !s.Mean {
				acc = float32(math.Inf(-1))
			}
			for g := 0; g < qpk; g++ {
				qr := q[(gq*s.HQ+h*qpk+g)*d:][:d]
				var dot float32
				for c, x := range qr {
					dot += x * m[c]
				}
				dot *= s.Scale
				if !s.Mean {
					// NaN propagates: a NaN score is never selected.
					if dot > acc || dot != dot {
						acc = dot
					}
				} else {
					acc += dot
				}
			}
			if s.Mean {
				acc /= float32(qpk)
			}
			dst[j] = acc
		}
	}
}
