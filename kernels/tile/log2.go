package tile

import "math"

// log2Sum returns log2(x) for a finite x >= 1 (a softmax sum: the row's
// maximum contributes exp2(0) = 1), in float64, with absolute error below
// 1e-12. It replaces math.Log2, whose assembly log costs as much per row as
// the whole normalisation. x is split as 2^e * m with m in [sqrt(1/2),
// sqrt(2)), and log2(m) = (2/ln 2) * atanh(t), t = (m-1)/(m+1), |t| < 0.1716,
// summed to t^13/13 (the next term is below 2e-12 relative). Every product
// is rounded by an explicit conversion, so no build fuses a multiply-add
// and the SIMD kernels of log2Sums (which fuse nothing) give the same bits.
func log2Sum(x float32) float64 {
	b := math.Float32bits(x)
	e := float64(int(b>>23) - 127)
	m := float64(math.Float32frombits(b&0x007fffff | 0x3f800000)) // [1, 2)
	if m > math.Sqrt2 {
		m *= 0.5
		e++
	}
	t := (m - 1) / (m + 1)
	t2 := t * t
	p := float64(t2 * (1.0 / 13))
	p = float64(t2 * (1.0/11 + p))
	p = float64(t2 * (1.0/9 + p))
	p = float64(t2 * (1.0/7 + p))
	p = float64(t2 * (1.0/5 + p))
	p = float64(t2 * (1.0/3 + p))
	s := float64(t * (1 + p))
	return e + float64(s*(2/math.Ln2))
}

// log2Consts are the constants of the log2Sums kernels (layout fixed by
// asmgen/gen.go): float64 values and 32-bit masks, each repeated 4 times
// so that the AVX2 kernel reads them as ymm operands.
type log2Consts struct {
	f [10][4]float64 // sqrt2, 0.5, 1, 1/3, 1/5, 1/7, 1/9, 1/11, 1/13, 2/ln2
	u [3][4]uint32   // mantissa mask, the bits of 1.0, 127
}

var log2Tab = func() (c log2Consts) {
	f := [10]float64{math.Sqrt2, 0.5, 1, 1.0 / 3, 1.0 / 5, 1.0 / 7, 1.0 / 9, 1.0 / 11, 1.0 / 13, 2 / math.Ln2}
	u := [3]uint32{0x007fffff, 0x3f800000, 127}
	for i := range 4 {
		for j, x := range f {
			c.f[j][i] = x
		}
		for j, x := range u {
			c.u[j][i] = x
		}
	}
	return c
}()

// log2Sums writes dst[i] = log2Sum(src[i]) for every i (dst at least as long
// as src), with the active tier's SIMD kernel where it has one. Values of
// src that log2Sum does not accept (below 1, non-finite) give unspecified
// results and no fault.
func log2Sums(dst []float64, src []float32) {
	dst = dst[:len(src)]
	i := log2SumsSIMD(dst, src)
	for ; i < len(src); i++ {
		dst[i] = log2Sum(src[i])
	}
}

// rowLSEs is the epilogue of the online softmax that Acc and Lanes share:
// for the rows with running maximum mx (base 2), sum and temperature sum
// tsum it writes lse, the natural-log LSE (-inf for a row that saw no key,
// see sawNoKey), tlse when temp (the temperature LSE with invT = 1/T), and
// inv, the factor that normalises the row (1/sum, 0 for a row that saw no
// key). The log2 of all sums is taken at once (log2Sums); l2 is scratch
// for 2*len(mx) values.
func rowLSEs(mx, sum, tsum []float32, invT float32, temp bool, lse, tlse, inv []float32, l2 []float64) {
	const ln2 = math.Ln2
	ninf := float32(math.Inf(-1))
	m := len(mx)
	l2, tl2 := l2[:m], l2[m:2*m]
	log2Sums(l2, sum[:m])
	if temp {
		log2Sums(tl2, tsum[:m])
	}
	for r := range m {
		s := sum[r]
		if sawNoKey(s, mx[r]) {
			inv[r] = 0
			lse[r] = ninf
			if temp {
				tlse[r] = ninf
			}
			continue
		}
		inv[r] = 1 / s
		x := float64(mx[r])
		lse[r] = float32((x + l2[r]) * ln2)
		if temp {
			tlse[r] = float32((x*float64(invT) + tl2[r]) * ln2)
		}
	}
}

// sawNoKey reports whether a row with running sum and maximum mx saw no
// visible key (its O is zero and its LSE -inf).
func sawNoKey(sum, mx float32) bool { return !(sum > 0) || math.IsInf(float64(mx), -1) }
