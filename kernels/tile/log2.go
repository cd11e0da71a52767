package tile

import "math"

// log2Sum returns log2(x) for a finite x >= 1 (a softmax sum: the row's
// maximum contributes exp2(0) = 1), in float64, with absolute error below
// 1e-12. It replaces math.Log2, whose assembly log costs as much per row as
// the whole normalisation. x is split as 2^e * m with m in [sqrt(1/2),
// sqrt(2)), and log2(m) = (2/ln 2) * atanh(t), t = (m-1)/(m+1), |t| < 0.1716,
// summed to t^13/13 (the next term is below 2e-12 relative).
func log2Sum(x float32) float64 {
	b := math.Float32bits(x)
	e := int(b>>23) - 127
	m := float64(math.Float32frombits(b&0x007fffff | 0x3f800000)) // [1, 2)
	if m > math.Sqrt2 {
		m *= 0.5
		e++
	}
	t := (m - 1) / (m + 1)
	t2 := t * t
	s := t * (1 + t2*(1.0/3+t2*(1.0/5+t2*(1.0/7+t2*(1.0/9+t2*(1.0/11+t2*(1.0/13)))))))
	return float64(e) + s*(2/math.Ln2)
}
