package attn

import "math"

// mergeLSE combines the log-sum-exps lses (natural log) of the partial
// results of one output row: with m the largest of them and S the sum of
// e^(l - m) over the slots, the merged LSE is m + ln S and slot s gets the
// weight e^(l_s - m) / S, written to ws (same length). NaN LSEs weigh 0.
// It reports ok = false when nothing is visible (every LSE -inf, or S is 0,
// infinite or NaN); the caller then writes O = 0 and LSE = -inf.
//
// lv selects the weights' kernel: the portable loop takes e^x in float64
// and rounds it (within half an ulp); the SIMD kernels take it in float32
// (mergeWeightsAVX512, mergeWeightsAVX2: within 2 ulp, gradual underflow)
// and sum the weights lane by lane, so their weights and LSE differ from the
// portable ones by a few ulp. In a prefill combine the portable loop's 16
// float64 exponentials per row were half of the combine's time.
func mergeLSE(lses, ws []float32, lv vec) (lse float32, ok bool) {
	if len(lses) == 0 {
		return float32(math.Inf(-1)), false
	}
	ws = ws[:len(lses)]
	var m, s float32
	switch lv {
	case vecAVX512:
		m, s = mergeWeightsAVX512(&lses[0], &ws[0], len(lses))
	case vecAVX2:
		m, s = mergeWeightsAVX2(&lses[0], &ws[0], len(lses))
	default:
		m, s = mergeWeights(lses, ws)
	}
	// m = +inf: some e^(l - m) is e^NaN in exact arithmetic, S is NaN.
	if math.IsInf(float64(m), 0) || !(s > 0) || math.IsInf(float64(s), 0) {
		return float32(math.Inf(-1)), false
	}
	return m + float32(math.Log(float64(s))), true
}

// mergeTLSE merges the temperature LSEs of a row's partials, with the
// weights of mergeLSE in ws: as mergeLSE, -inf where no partial saw a key,
// except that a partial of +inf makes the merge +inf. A partial's
// temperature LSE is +inf only when its value (scores over a small T) lies
// beyond float32 (a unit with an undefined softmax has -inf), and the
// merge, at least as large, rounds to +inf too; mergeLSE would read the
// +inf maximum as an undefined sum.
func mergeTLSE(lses, ws []float32, lv vec) float32 {
	for _, l := range lses {
		if math.IsInf(float64(l), 1) {
			return l
		}
	}
	l, ok := mergeLSE(lses, ws, lv)
	if !ok {
		return float32(math.Inf(-1))
	}
	return l
}

// mergeWeights is the portable kernel of mergeLSE: m = the largest non-NaN
// LSE, s = the sum of e^(l_s - m) in slot order (0 for a NaN l_s), and,
// when m is finite, ws[s] = e^(l_s - m) * (1/s) (mergeLSE rejects an s
// that is not positive and finite, as for the SIMD kernels).
func mergeWeights(lses, ws []float32) (m, s float32) {
	m = float32(math.Inf(-1))
	for _, l := range lses {
		if l > m {
			m = l
		}
	}
	if math.IsInf(float64(m), 0) {
		return m, 0
	}
	for i, l := range lses {
		w := float32(math.Exp(float64(l - m)))
		if l != l {
			w = 0
		}
		ws[i] = w
		s += w
	}
	inv := 1 / s
	for i := range ws {
		ws[i] *= inv
	}
	return m, s
}
