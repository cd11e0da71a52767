package merge

import (
	"math"

	"github.com/sparseattn/msa/kernels/lowp"
)

// Scratch holds the buffers of one merge: the per-source LSEs,
// weights and row offsets of one row and the float32 accumulator of one
// output row. Reused across calls, so a merge of known size allocates
// nothing.
type Scratch struct {
	l, w []float32
	off  []int // the offset of each source's row (Row)
	acc  []float32
}

// Reserve sizes s for k sources of rows of d values.
func (s *Scratch) Reserve(k, d int) {
	if cap(s.w) < k {
		s.l, s.w, s.off = make([]float32, k), make([]float32, k), make([]int, k)
	}
	if cap(s.acc) < d {
		s.acc = make([]float32, d)
	}
	s.l, s.w, s.off, s.acc = s.l[:k], s.w[:k], s.off[:k], s.acc[:d]
}

// Source sets source i's LSE and the offset of its row for Row.
func (s *Scratch) Source(i int, lse float32, off int) { s.l[i], s.off[i] = lse, off }

// Weights computes the merge of one row's partial LSEs l (natural
// log): m is the largest non-NaN LSE, S = the sum over sources of
// e^(l_i - m), taken in float64 in source order (a NaN LSE weighs 0), the
// merged LSE is m + ln S rounded once to float32, and w[i] = e^(l_i - m) / S
// rounded to float32. ok is false when nothing is visible (every LSE -inf,
// some LSE +inf, or S not positive and finite): the row is then O = 0,
// LSE = -inf, the rule of the prefill combine (docs/contract.md section 5).
// A source with LSE -inf gets weight exactly 0.
func Weights(l, w []float32) (lse float32, ok bool) {
	m := math.Inf(-1)
	for _, x := range l {
		if float64(x) > m {
			m = float64(x)
		}
	}
	if math.IsInf(m, 0) {
		return float32(math.Inf(-1)), false
	}
	s := 0.0
	for _, x := range l {
		if x == x {
			s += math.Exp(float64(x) - m)
		}
	}
	if !(s > 0) || math.IsInf(s, 0) {
		return float32(math.Inf(-1)), false
	}
	for i, x := range l {
		w[i] = 0
		if x == x {
			w[i] = float32(math.Exp(float64(x)-m) / s)
		}
	}
	return float32(m + math.Log(s)), true
}

// Elem is an element type of merged outputs: the BF16 outputs of the
// attention ops and the float32 outputs of the training path.
type Elem interface{ lowp.BFloat16 | float32 }

// Into merges len(srcs) partial results of the same rows into dst:
// srcs[i] and dst hold rows of d values, lses[i] and dstLSE (nil: not
// written) one LSE per row. The order of the sources is fixed, so the
// result depends on nothing but the inputs (Row).
func Into[T Elem](dst []T, dstLSE []float32, srcs [][]T, lses [][]float32, d int, sc *Scratch) {
	sc.Reserve(len(srcs), d)
	rows := len(lses[0])
	for r := 0; r < rows; r++ {
		for i := range lses {
			sc.l[i], sc.off[i] = lses[i][r], r*d
		}
		lse := Row(dst[r*d:(r+1)*d], srcs, sc)
		if dstLSE != nil {
			dstLSE[r] = lse
		}
	}
}

// Row merges one row: partial i's LSE is sc.l[i] and its O row
// srcs[i][sc.off[i]:][:len(out)]. The sources are added in slice order with
// float32 accumulation (a source of weight 0 is skipped, so the O of a
// fully masked partial is never read), then rounded once to T; it returns
// the merged LSE.
func Row[T Elem](out []T, srcs [][]T, sc *Scratch) float32 {
	k, d := len(srcs), len(out)
	w := sc.w[:k]
	lse, ok := Weights(sc.l[:k], w)
	if !ok {
		clear(out)
		return lse
	}
	acc := sc.acc[:d]
	clear(acc)
	for i, s := range srcs {
		if w[i] != 0 {
			axpy(acc, w[i], s[sc.off[i]:sc.off[i]+d])
		}
	}
	store(out, acc)
	return lse
}

// axpy adds w*src to acc in float32.
func axpy[T Elem](acc []float32, w float32, src []T) {
	switch s := any(src).(type) {
	case []float32:
		for j, x := range s[:len(acc)] {
			acc[j] += w * x
		}
	case []lowp.BFloat16:
		for j, x := range s[:len(acc)] {
			acc[j] += w * x.Float32()
		}
	}
}

// store rounds acc into out (round to nearest even for BF16).
func store[T Elem](out []T, acc []float32) {
	switch o := any(out).(type) {
	case []float32:
		copy(o, acc)
	case []lowp.BFloat16:
		lowp.EncodeBF16(o, acc)
	}
}
