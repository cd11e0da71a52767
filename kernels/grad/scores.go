package grad

import "math"

// The recompute code shared by the forward and both backward passes.

// exp32 returns e^x in float32 arithmetic within 2 ulp (Cody-Waite
// reduction x = k ln2 + r, |r| <= ln2/2, and a degree-7 Taylor polynomial,
// whose truncation error is below 6e-9 relative). It returns 0 for -inf
// and x < -104 (below the smallest subnormal), +inf above 88.72, NaN for
// NaN; subnormal results are gradual.
func exp32(x float32) float32 {
	if !(x >= -104) {
		if x != x {
			return x
		}
		return 0
	}
	if x > 88.72 {
		return float32(math.Inf(1))
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	t := x * log2e
	var k int32
	if t >= 0 {
		k = int32(t + 0.5)
	} else {
		k = int32(t - 0.5)
	}
	kf := float32(k)
	r := x - kf*ln2hi - kf*ln2lo
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040)))))))
	if k < -126 {
		p *= 0x1p-64
		k += 64
	} else if k > 127 {
		p *= 2
		k--
	}
	return p * math.Float32frombits(uint32(k+127)<<23)
}

// expSub sets x[i] = e^(scale*x[i] - sub): with simd the AVX2 kernel on
// whole groups of eight (exp32's algorithm with FMAs, the argument fused;
// results below 2^-125 flush to 0), exp32 on the rest. With scale = 1 the
// argument is x[i] - sub exactly on both paths.
func expSub(simd bool, x []float32, sub, scale float32) {
	n := 0
	if simd && haveAsm {
		if n = len(x) &^ 7; n > 0 {
			expSubAVX2(&x[0], n, sub, scale)
		}
	}
	for i := n; i < len(x); i++ {
		x[i] = exp32(scale*x[i] - sub)
	}
}

// dScores sets dp[i] = (scale * s[i]) * (dp[i] - dl): with simd the AVX2
// kernel on whole groups of eight, the same operations in Go on the rest.
func dScores(simd bool, dp, s []float32, scale, dl float32) {
	s = s[:len(dp)]
	n := 0
	if simd && haveAsm {
		if n = len(dp) &^ 7; n > 0 {
			dsAVX2(&dp[0], &s[0], n, scale, dl)
		}
	}
	for i := n; i < len(dp); i++ {
		dp[i] = scale * s[i] * (dp[i] - dl)
	}
}

// finite reports whether x is neither infinite nor NaN.
func finite(x float32) bool { return !math.IsInf(float64(x), 0) && !math.IsNaN(float64(x)) }

// gradProbs recomputes, for m rows (tile rows q and dO, [m][d]) against a
// block of n keys (kb, vb, [n][d]; on the SIMD tiers their transposes
// kt, vt, [d][ld], else nil), with row r seeing keys i < cnt[r]:
//
//	wk.s[r][i]  = P  = exp(scale*q_r.k_i - lse[r])
//	wk.dp[r][i] = dS' = scale * P * (dO_r.v_i - dlt[r])
//
// where dlt[r] = Delta_r - dLSE_r; both are 0 for i in [cnt[r], n). dS' is
// the scaled dS of the package doc, ready for dQ += dS' K and dK += dS'^T Q.
func (wk *worker) gradProbs(q, do []float32, m int, kb, vb, kt, vt []float32, n int, lse, dlt []float32, cnt []int32, scale float32) {
	d, ld := wk.d, wk.ld
	escale := float32(1) // scale applied inside the exponential
	if kt != nil {
		wk.scoresT(wk.s, ld, q, m, kt, ld, n, d)
		wk.scoresT(wk.dp, ld, do, m, vt, ld, n, d)
		escale = scale
	} else {
		scoresNT(wk.simd, wk.s, ld, q, m, kb, d, cnt, scale)
		scoresNT(wk.simd, wk.dp, ld, do, m, vb, d, cnt, 1)
	}
	for r := 0; r < m; r++ {
		c := int(cnt[r])
		s := wk.s[r*ld : r*ld+n]
		dp := wk.dp[r*ld : r*ld+n]
		l, dl := lse[r], dlt[r]
		expSub(wk.simd, s[:c], l, escale)
		dScores(wk.simd, dp[:c], s[:c], scale, dl)
		clear(s[c:])
		clear(dp[c:])
	}
}

// onlineSoftmax folds one block of scores (wk.s, rows r < m with cnt[r]
// visible keys, not yet multiplied by scale) into the running max wk.mx,
// sum wk.sum and the output accumulator wk.acc ([m][d]), replacing the
// scores by their probabilities exp(scale*s - max). The caller then adds
// P V to wk.acc. With scale > 0 the max of the scaled scores is scale
// times the max of the raw ones (rounding is monotone), and the scale is
// applied inside the exponential; otherwise the scores are scaled first.
func (wk *worker) onlineSoftmax(m int, cnt []int32, scale float32) {
	d, ld := wk.d, wk.ld
	ninf := float32(math.Inf(-1))
	for r := 0; r < m; r++ {
		s := wk.s[r*ld : r*ld+int(cnt[r])]
		if len(s) == 0 {
			continue
		}
		escale := scale
		if !(scale > 0) {
			vscale(wk.simd, s, scale)
			escale = 1
		}
		old := wk.mx[r]
		mx := max(old, escale*vmax(wk.simd, s, ninf))
		if mx != old {
			alpha := exp32(old - mx) // 0 when old = -inf
			wk.sum[r] *= alpha
			vscale(wk.simd, wk.acc[r*d:(r+1)*d], alpha)
			wk.mx[r] = mx
		}
		expSub(wk.simd, s, mx, escale)
		wk.sum[r] += vsum(wk.simd, s)
	}
}

// vmax returns max(init, max(x)) like Go's max (NaN if any is NaN): with
// simd the AVX2 kernel on whole groups of eight.
func vmax(simd bool, x []float32, init float32) float32 {
	m, n := init, 0
	if simd && haveAsm {
		if n = len(x) &^ 7; n > 0 {
			m = max(m, maxAVX2(&x[0], n))
		}
	}
	for _, v := range x[n:] {
		m = max(m, v)
	}
	return m
}

// vsum returns the sum of x: with simd eight lane sums over whole groups
// of eight (added pairwise) plus the rest in order.
func vsum(simd bool, x []float32) float32 {
	var t float32
	n := 0
	if simd && haveAsm {
		if n = len(x) &^ 7; n > 0 {
			t = sumAVX2(&x[0], n)
		}
	}
	for _, v := range x[n:] {
		t += v
	}
	return t
}

// vscale multiplies x by f: with simd the AVX2 kernel on whole groups of
// eight.
func vscale(simd bool, x []float32, f float32) {
	n := 0
	if simd && haveAsm {
		if n = len(x) &^ 7; n > 0 {
			scaleAVX2(&x[0], n, f)
		}
	}
	for i := n; i < len(x); i++ {
		x[i] *= f
	}
}
