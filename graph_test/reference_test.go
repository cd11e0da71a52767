package graphtest

import (
	"math"

	"github.com/sparseattn/msa/kernels/lowp"
)

// A float64 reference of the transformer block of transformer_test.go:
// the same math, written with plain loops, from the same float32 weights.
// Only the attention inputs are rounded to bf16 (as the graph's CastToBF16
// does); everything else stays float64.

// blockDims are the sizes of one attention block.
type blockDims struct {
	model, hq, hkv, d int
}

// blockWeights are the float32 weights of one block, row-major:
// wq [model][hq*d], wk and wv [model][hkv*d], wo [hq*d][model].
type blockWeights struct {
	wq, wk, wv, wo []float32
}

// matmul64 returns x [rows][n] . w [n][m] in float64.
func matmul64(x []float64, w []float32, rows, n, m int) []float64 {
	out := make([]float64, rows*m)
	for r := 0; r < rows; r++ {
		o := out[r*m : (r+1)*m]
		for i := 0; i < n; i++ {
			a := x[r*n+i]
			for j, wv := range w[i*m : (i+1)*m] {
				o[j] += a * float64(wv)
			}
		}
	}
	return out
}

// roundBF16 rounds every element to the nearest bf16 (through float32, as
// the graph's float32 activations are).
func roundBF16(x []float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(lowp.BF16(float32(v)).Float32())
	}
	return out
}

func widen(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// refProjections returns the bf16-rounded q [T][hq][d], k, v [T][hkv][d]
// of x64 [T][model].
func refProjections(x64 []float64, t int, dm blockDims, w blockWeights) (q, k, v []float64) {
	q = roundBF16(matmul64(x64, w.wq, t, dm.model, dm.hq*dm.d))
	k = roundBF16(matmul64(x64, w.wk, t, dm.model, dm.hkv*dm.d))
	v = roundBF16(matmul64(x64, w.wv, t, dm.model, dm.hkv*dm.d))
	return
}

// refBlockScores is BlockScores in float64 (max over the group's heads):
// [hkv][T][maxBlocks], -inf for invisible blocks. Self-attention: every
// sequence has seqlen_q = seqlen_k.
func refBlockScores(q, k []float64, cu []int32, dm blockDims, blk, maxBlocks int, causal bool, scale float64) []float64 {
	t := int(cu[len(cu)-1])
	qpk := dm.hq / dm.hkv
	out := make([]float64, dm.hkv*t*maxBlocks)
	for i := range out {
		out[i] = math.Inf(-1)
	}
	for b := 0; b+1 < len(cu); b++ {
		n := int(cu[b+1] - cu[b])
		for h := 0; h < dm.hkv; h++ {
			for j := 0; j*blk < n; j++ {
				mean := make([]float64, dm.d)
				cnt := min(blk, n-j*blk)
				for tk := j * blk; tk < j*blk+cnt; tk++ {
					for c := range mean {
						mean[c] += k[((int(cu[b])+tk)*dm.hkv+h)*dm.d+c] / float64(cnt)
					}
				}
				for i := 0; i < n; i++ {
					if causal && j*blk > i {
						continue
					}
					best := math.Inf(-1)
					for g := 0; g < qpk; g++ {
						dot := 0.0
						for c := range mean {
							dot += q[((int(cu[b])+i)*dm.hq+h*qpk+g)*dm.d+c] * mean[c]
						}
						best = math.Max(best, dot*scale)
					}
					out[(h*t+int(cu[b])+i)*maxBlocks+j] = best
				}
			}
		}
	}
	return out
}

// refAttention is softmax attention of every query head over the keys that
// keys(b, i, h) lists (batch-local), in float64: out [T][hq][d].
func refAttention(q, k, v []float64, cu []int32, dm blockDims, scale float64, keys func(b, i, h int) []int) []float64 {
	t := int(cu[len(cu)-1])
	qpk := dm.hq / dm.hkv
	out := make([]float64, t*dm.hq*dm.d)
	for b := 0; b+1 < len(cu); b++ {
		base := int(cu[b])
		for i := 0; i < int(cu[b+1])-base; i++ {
			for hq := 0; hq < dm.hq; hq++ {
				h := hq / qpk
				ks := keys(b, i, h)
				qr := q[((base+i)*dm.hq+hq)*dm.d:][:dm.d]
				s := make([]float64, len(ks))
				m := math.Inf(-1)
				for n, tk := range ks {
					kr := k[((base+tk)*dm.hkv+h)*dm.d:][:dm.d]
					for c := range qr {
						s[n] += qr[c] * kr[c]
					}
					s[n] *= scale
					m = math.Max(m, s[n])
				}
				sum := 0.0
				for n := range s {
					s[n] = math.Exp(s[n] - m)
					sum += s[n]
				}
				o := out[((base+i)*dm.hq+hq)*dm.d:][:dm.d]
				for n, tk := range ks {
					vr := v[((base+tk)*dm.hkv+h)*dm.d:][:dm.d]
					for c := range o {
						o[c] += s[n] / sum * vr[c]
					}
				}
			}
		}
	}
	return out
}

// causalKeys lists keys 0..i (self-attention, seqlen_q = seqlen_k).
func causalKeys(b, i, h int) []int {
	ks := make([]int, i+1)
	for n := range ks {
		ks[n] = n
	}
	return ks
}

// blockKeys lists the causally visible keys of the blocks a q2k list names.
func blockKeys(q2k []int32, t, topK, blk int, cu []int32) func(b, i, h int) []int {
	return func(b, i, h int) []int {
		var ks []int
		for _, j := range q2k[(h*t+int(cu[b])+i)*topK:][:topK] {
			for tk := int(j) * blk; j >= 0 && tk < (int(j)+1)*blk && tk <= i; tk++ {
				ks = append(ks, tk)
			}
		}
		return ks
	}
}

// refDecodeAttention is causal attention of rows [rows][hq][d] over a
// per-request float64 key/value history kv[b] ([pos][hkv][d] each),
// query row b*seqlenQ+i at position len(kv[b]) - seqlenQ + i.
func refDecodeAttention(q []float64, ks, vs [][]float64, batch, seqlenQ int, dm blockDims, scale float64) []float64 {
	qpk := dm.hq / dm.hkv
	out := make([]float64, batch*seqlenQ*dm.hq*dm.d)
	for b := 0; b < batch; b++ {
		n := len(ks[b]) / (dm.hkv * dm.d)
		for i := 0; i < seqlenQ; i++ {
			pos := n - seqlenQ + i
			for hq := 0; hq < dm.hq; hq++ {
				h := hq / qpk
				row := (b*seqlenQ+i)*dm.hq + hq
				qr := q[row*dm.d:][:dm.d]
				s := make([]float64, pos+1)
				m := math.Inf(-1)
				for tk := range s {
					kr := ks[b][(tk*dm.hkv+h)*dm.d:][:dm.d]
					for c := range qr {
						s[tk] += qr[c] * kr[c]
					}
					s[tk] *= scale
					m = math.Max(m, s[tk])
				}
				sum := 0.0
				for tk := range s {
					s[tk] = math.Exp(s[tk] - m)
					sum += s[tk]
				}
				o := out[row*dm.d:][:dm.d]
				for tk := range s {
					vr := vs[b][(tk*dm.hkv+h)*dm.d:][:dm.d]
					for c := range o {
						o[c] += s[tk] / sum * vr[c]
					}
				}
			}
		}
	}
	return out
}
