package check

import (
	"math"

	"github.com/sparseattn/msa/kernels/lowp"
)

// The statistical criterion, next to the per-element bound of
// tolerance.go. The bound adds every rounding at its worst with the same
// sign; a kernel's roundings are independent and mostly cancel, so its
// errors sit far inside the bound and a kernel with a small systematic
// fault (a biased exponential, P rounded to a coarser format, a scale off
// by a small factor) can still pass it. The criterion models the error of
// every element as
//
//	e = r + b + n
//
// where n is the sum of independent roundings (standard deviation sigma,
// the roundings adding in quadrature), b the coherent part (roundings that
// move every term of a sum the same way, adding linearly) and r the final
// rounding of the result to its output format (BF16 for O, float32 for
// the LSEs), which the reference computes exactly. A case passes it when
//
//   - max: every element is the rounding of a value in [o - t, o + t]
//     around the exact value o: rnd(o - t) <= got <= rnd(o + t), rounding
//     being monotone (against the CPU path, whose result is such a
//     rounding too: |got - cpu| at most rnd(o + t) - rnd(o - t)); t =
//     z_N sigma + b, the
//     LSE's few own roundings allowed at most their sum (lseRounding), and
//     t never beyond the per-element bound's pre-rounding part; and
//   - RMS: the root mean square of the errors over the case's N elements is
//     at most k_N times the model's expected RMS, sqrt(mean(rho^2 + v +
//     ulp sqrt(v) / 2)), v = sigma^2 + b^2, rho = |rnd(o) - o|: rho^2 is
//     the rounding error of an unperturbed result, v the pre-rounding
//     error, and ulp sqrt(v) / 2 bounds what crossing a rounding midpoint
//     adds (a perturbation d crosses one only where o lies within |d| of
//     it, turning rho into ulp - rho: at most 2 |d| ulp, and E|d| <=
//     sqrt(v); with sigma >> ulp the three terms exceed sigma^2 + ulp^2/12).
//
// Both criteria apply to the comparison with the CPU path too, with the
// max criterion's width and twice the expected RMS (each side within its
// own).

// Rounding model: a rounding to nearest of x is uniform on +-spacing/2
// with spacing <= 2u|x| (u = 2^-p, tolerance.go), so its standard
// deviation is at most u|x|/sqrt(3), and exactly spacing(x)/sqrt(12)
// where the reference knows x (sdRound).

const (
	// uEx2 is the relative error of ex2.approx.f32 (2 ulps of float32);
	// the argument's rounding adds 2^-24 |s - max| relative (the exponent
	// (s - max) log2(e) is off by 2^-24 of itself, and ln(2) log2(e) = 1).
	uEx2 = 0x1p-22
	// uLg2 bounds the absolute error of lg2.approx.f32 in the LSE's units
	// (2^-22.6 in log2 units, the CUDA C++ Programming Guide's bound for
	// __log2f, times ln 2: 1.1e-7 < 2^-23).
	uLg2 = 0x1p-23

	// alphaMax is the probability, under the model, that a correct kernel
	// fails the max criterion on one case: z_N = sqrt(2 ln(2N / alphaMax))
	// for N elements. A sum of independent uniform roundings is
	// sub-Gaussian with its own variance (sinh(x)/x <= exp(x^2/6)), so
	// P(|n| > z sigma) <= 2 exp(-z^2/2) for each element and the union over
	// N elements is alphaMax. N = 10^6 gives z = 7.5.
	alphaMax = 1e-6
	// tailX sets the RMS criterion's sampling allowance: the mean of N
	// squared sub-Gaussian errors exceeds its expectation by more than
	// 2 sqrt(x/N) + 2x/N relative with probability at most e^-x
	// (Laurent-Massart's chi-square bound); x = 14 is e^-14 < 10^-6.
	tailX = 14
	// kModel is the safety factor on the expected RMS: the model is first
	// order (products of two relative errors, below 2^-7 of the terms at
	// BF16's u, are left out) and assumes the roundings of one row
	// independent; 1.25 covers both with room, and is small enough that
	// P rounded to E4M3 instead of BF16 (16 times the P term) or an
	// exponential biased by 2^-19 of its argument fails (mutation_test.go).
	kModel = 1.25
)

// zMax is the number of standard deviations the max criterion allows over
// n elements.
func zMax(n int) float64 { return math.Sqrt(2 * math.Log(2*float64(max(n, 1))/alphaMax)) }

// kRMS is the factor on the expected RMS over n elements.
func kRMS(n int) float64 {
	x := float64(tailX) / float64(max(n, 1))
	return kModel * math.Sqrt(1+2*math.Sqrt(x)+2*x)
}

// rounding is the final rounding of a quantity: to BF16 (O) or float32
// (LSE), the spacing of its values around x, and the neighbours of a
// value of the format (next toward -inf and toward +inf).
type rounding struct {
	round func(x float64) float64
	ulp   func(x float64) float64
	next  func(g float64) (down, up float64)
}

var (
	roundO = rounding{
		round: func(x float64) float64 { return float64(lowp.BF16(float32(x)).Float32()) },
		ulp:   func(x float64) float64 { return spacing(x, 8, -133) },
		next: func(g float64) (float64, float64) {
			f := float32(g)
			step := func(toward float32) float64 { // BF16 is float32's upper half: step its bits
				n := math.Nextafter32(f, toward)
				b := math.Float32bits(n)
				if math.Abs(float64(n)) > math.Abs(float64(f)) { // away from zero: up to the next BF16
					b = (b + 0xffff) &^ 0xffff
				} else {
					b &^= 0xffff
				}
				return float64(math.Float32frombits(b))
			}
			return step(float32(math.Inf(-1))), step(float32(math.Inf(1)))
		},
	}
	roundLSE = rounding{
		round: func(x float64) float64 { return float64(float32(x)) },
		ulp:   func(x float64) float64 { return spacing(x, 24, -149) },
		next: func(g float64) (float64, float64) {
			f := float32(g)
			return float64(math.Nextafter32(f, float32(math.Inf(-1)))), float64(math.Nextafter32(f, float32(math.Inf(1))))
		},
	}
)

// need is the smallest deviation from the exact value o of a pre-rounding
// value that rounds to g: 0 when g is o's own rounding, else the distance
// from o to g's rounding interval (half-way to each neighbour). The max
// criterion's margin is the allowed deviation over this.
func (r rounding) need(o, g float64) float64 {
	down, up := r.next(g)
	lo, hi := (g+down)/2, (g+up)/2
	return math.Max(0, math.Max(lo-o, o-hi))
}

// spacing is the distance between neighbouring values of a format with p
// significand bits around x, at least 2^minExp (the subnormal spacing).
func spacing(x float64, p, minExp int) float64 {
	_, e := math.Frexp(math.Abs(x)) // |x| in [2^(e-1), 2^e)
	return math.Ldexp(1, max(e-p, minExp))
}

// maxErr is the max criterion's tolerance of an element with exact value
// o, pre-rounding deviation at most t.
func (r rounding) maxErr(o, t float64) float64 {
	return math.Max(math.Abs(r.round(o-t)-o), math.Abs(r.round(o+t)-o))
}

// width is the most two roundings of values in [o - t, o + t] differ:
// rnd(o + t) - rnd(o - t).
func (r rounding) width(o, t float64) float64 { return r.round(o+t) - r.round(o-t) }

// meanSq is the model's expected squared error of an element with exact
// value o, independent deviation sigma and coherent deviation b.
func (r rounding) meanSq(o, sigma, b float64) float64 {
	rho := r.round(o) - o
	v := sigma*sigma + b*b
	return rho*rho + v + r.ulp(o)*math.Sqrt(v)/2
}

// stats holds, for one row, the standard deviation and the coherent part
// of the pre-rounding error of each O channel and of the LSEs.
type stats struct {
	sigO, biasO     []float64
	sigLSE, biasLSE float64
	sigTLS, biasTLS float64
	rndLSE, rndTLS  lseRounding
}

// lseRounding is the part of an LSE's error that is a few float32
// roundings of LSE-sized values and logarithms (each partial's m + ln l_s,
// the combine's ln and sum): standard deviation sd and hard bound bound
// (the sum of the half spacings and uLg2). A few bounded terms stay within
// their sum, which for them is less than z_N standard deviations.
type lseRounding struct{ sd, bound float64 }

// sdRound is the standard deviation of a rounding to nearest of a value x
// known to the reference, in a format with p significand bits and
// subnormal spacing 2^minExp: uniform on +-spacing/2.
func sdRound(x float64, p, minExp int) float64 { return spacing(x, p, minExp) * 0.28867513459481287 } // 1/sqrt(12)

// rowStats derives the statistical model of one row from the same
// arithmetic as the bound (arith, tolerance.go). Per attended token j with
// score s_j, P_j = exp(s_j - m), l = sum P, O = sum P v / l:
//
//   - score: float32 accumulation of D products (sequential, the worst
//     order: rounding k adds an error of its partial sum S_k, and sum_k
//     S_k^2 is D/2 sum_d p_d^2 for random-signed products p_d), two input
//     conversions (NVFP4 times its global scale) and the scale product:
//     sigma_s^2 = u32^2/3 ((D/2 + 2) sum_d p_d^2 + s^2). Coherent: the
//     float32 constants scale and log2(e) are one rounding each, shared by
//     every score: b_s = 2 u32 |s|; E4M3 Q.K on the FP8 tensor cores
//     truncates (toward zero, the same way for every large score), so its
//     whole model error uFP8MMA * sum_d |p_d| is coherent.
//   - exponential: sigma_e^2 = (uEx2^2 + (u32 |s - m|)^2) / 3 relative.
//   - a score or exponential error d_j moves O by sum_j P_j d_j (v_j - O) / l
//     (the max cancels) and the LSE by sum_j P_j d_j / l.
//   - P rounded before P.V: u_P P / sqrt(3) (P is rounded against a
//     running max, so its spacing is only bounded by 2 u_P P), with the
//     floor f_P / sqrt(3) below 2^-6 (E4M3's subnormals); where every
//     kernel folds the row in one visit and one partial (exactP), P is
//     rounded against the final max and its spacing is known:
//     spacing(P) / sqrt(12); the row max's own P is 1, exact; it moves the
//     numerator only, sum_j dP_j v_j / l; the model takes max(v^2,
//     (v - O)^2) so that a kernel that sums the rounded P is covered too.
//   - P.V accumulation: u32^2/3 n_PV A^2 (partial sums at most l A; n_PV
//     the row's chain terms, accum.go pvTerms), and at least one FP8
//     tensor-core truncation uFP8MMA A / sqrt(3) where a kernel runs E4M3
//     P.V there. A row in one BF16 partial has no partial rounding of its
//     own: it is the output's (onePart).
//   - partials: slot s (a selected block; a page in decode) with weight
//     w_s = l_s / l holds the normalised O_s, a value the reference knows:
//     its rounding to the partial dtype has standard deviation
//     spacing(O_s) / sqrt(12), weighted by w_s; its merge weight (an
//     exponential of lse_s - lse, in the combine or a running rescale) is
//     off by sdMerge relative, moving O by w_s (O_s - O) and the LSE by
//     w_s; the combine's float32 sums add (slots + 2) u32^2 A^2 / 3.
//   - LSE: every kernel sums P by tiles of at most sumTile keys (the
//     accumulation table, accum.go: the longest of the kernels that may
//     run the problem, never across a block) and then adds the tiles'
//     sums. A float32 sum of n positive terms of similar size has
//     sum_k S_k^2 = n l^2 / 3 in any order: u32^2 n / 9 on its logarithm,
//     for each tile's n_t (weighted w_t = l_t / l) and for the tiles'
//     sum. Each partial's
//     LSE and the combine's are computed in log2 units: log2 l
//     (lg2.approx, uLg2), m log2(e) + log2 l and the product by ln 2, three
//     float32 roundings of known values (log2 l_s at most log2 n_s), the
//     partials' weighted w_s. These few bounded roundings are kept apart
//     (lseRounding): the max criterion allows them at most their sum. A
//     running max rescales the sum by an exponential each time a slot
//     raises it (1 + ln(slots) times in no particular order): uEx2 each.
//
// BF16 P rounding does not enter the LSE: the contract accumulates the row
// sum from unrounded P. It is the largest pre-rounding term of BF16 O.
func (a arith) rowStats(st *stats, s, sa, ssq []float64, p []float64, slot, tile []int, v []float64, kv []int, o []float64, l, m, temp float64) {
	d := len(o)
	nSlots, nTiles := 0, 0
	for j := range slot {
		nSlots, nTiles = max(nSlots, slot[j]+1), max(nTiles, tile[j]+1)
	}
	sig2S := make([]float64, len(s))
	biasS := make([]float64, len(s))
	for j := range s {
		sig2S[j] = uF32 * uF32 / 3 * ((float64(d)/2+2)*ssq[j] + s[j]*s[j])
		biasS[j] = 2 * uF32 * math.Abs(s[j])
		if a.fp8QK {
			biasS[j] += uFP8MMA * sa[j]
		}
	}
	// Per slot: row sum and numerator.
	ls := make([]float64, nSlots)
	num := make([]float64, nSlots*d)
	for j, r := range kv {
		ls[slot[j]] += p[j]
		vr := v[r*d : (r+1)*d]
		for c, x := range vr {
			num[slot[j]*d+c] += p[j] * x
		}
	}
	for i := range st.sigO {
		st.sigO[i], st.biasO[i] = 0, 0
	}
	absV := make([]float64, d)
	for j, r := range kv {
		vr := v[r*d : (r+1)*d]
		w := p[j] / l
		e := uF32 * (s[j] - m)
		se := (uEx2*uEx2 + e*e) / 3
		sp := (a.uP * a.uP * p[j] * p[j]) / 3
		if a.exactP {
			// P = exp(s - m) against the final max: the spacing of its
			// rounding is known, taken at P (1 + 2^-12) so that a P the
			// scores' and the exponential's errors move across a binade edge
			// rounds with the coarser one.
			sd := sdRound(p[j]*(1+0x1p-12), a.pP, a.minP)
			sp = sd * sd
		} else if p[j] < 0x1p-6 {
			sp += a.fP * a.fP / 3
		}
		if s[j] == m { // the row max has P = 1 (its tile sets the running max), exact in every format
			sp = 0
		}
		ks, kp, kb := w*w*(sig2S[j]+se), sp/(l*l), w*biasS[j]
		for c, x := range vr {
			dv := x - o[c]
			x2, d2 := x*x, dv*dv
			st.sigO[c] += ks*d2 + kp*max(x2, d2)
			st.biasO[c] += kb * math.Abs(dv)
			absV[c] += w * math.Abs(x)
		}
	}
	pv := uF32 * uF32 / 3 * a.nPV
	if a.fp8PV {
		// uFP8MMA, or uFP8Walk (coherent truncations, their bound taken as the width)
		u := math.Max(uFP8MMA, a.fp8Walk)
		pv = math.Max(pv, u*u/3)
	}
	comb := uF32 * uF32 / 3 * float64(nSlots+2)
	for c := range o {
		part := 0.0
		for sl := range ls {
			if ls[sl] == 0 {
				continue
			}
			w, os := ls[sl]/l, num[sl*d+c]/ls[sl]
			sd := a.gV * sdRound(os/a.gV, a.pPart, a.minPart)
			if a.onePart { // that rounding is the output's, which the criterion takes exactly
				sd = 0
			}
			dw := os - o[c]
			part += w * w * (sd*sd + sdMerge(w)*dw*dw)
		}
		st.sigO[c] = math.Sqrt(st.sigO[c] + (pv+comb)*absV[c]*absV[c] + part)
	}
	st.sigLSE, st.biasLSE, st.rndLSE = lseStats(s, sig2S, biasS, slot, nSlots, tile, nTiles, m, 1)
	if temp > 0 {
		st.sigTLS, st.biasTLS, st.rndTLS = lseStats(s, sig2S, biasS, slot, nSlots, tile, nTiles, m, temp)
	}
}

// sdMerge is the variance of the relative error of a slot's merge weight
// w = exp(lse_s - lse) (the combine's, or a running rescale's): the
// exponential's uEx2 and the rounding of its argument, 2^-24 |ln w|.
func sdMerge(w float64) float64 {
	e := uF32 * math.Log(w)
	return (uEx2*uEx2 + e*e) / 3
}

// lseStats is the LSE part of rowStats for scores s / temp: the
// independent many-term part (scores, exponentials, row sums), the
// coherent part and the roundings. Token j is in partial slot[j] (of
// nSlots) and row-sum tile tile[j] (of nTiles, accum.go).
func lseStats(s, sig2S, biasS []float64, slot []int, nSlots int, tile []int, nTiles int, m, temp float64) (sigma, bias float64, rnd lseRounding) {
	mt := m / temp
	pt := make([]float64, len(s))
	ls := make([]float64, nSlots) // slot sums
	ns := make([]float64, nSlots) // slot token counts
	lt := make([]float64, nTiles) // tile sums
	nt := make([]float64, nTiles) // tile token counts
	var l float64
	for j, x := range s {
		pt[j] = math.Exp(x/temp - mt)
		l += pt[j]
		ls[slot[j]] += pt[j]
		ns[slot[j]]++
		lt[tile[j]] += pt[j]
		nt[tile[j]]++
	}
	var v float64
	for j, x := range s {
		w := pt[j] / l
		e := uF32 * (x - m) / temp
		se := (uEx2*uEx2 + e*e) / 3
		v += w * w * (sig2S[j]/(temp*temp) + se)
		bias += w * biasS[j] / temp
	}
	v += uF32 * uF32 * float64(nTiles) / 9 // the sum of the tiles' sums
	for t, x := range lt {
		w := x / l
		v += w * w * uF32 * uF32 * nt[t] / 9 // each tile's own float32 sum
	}
	// Kernels work in log2 units: log2 x (lg2.approx, rounded), m log2(e) +
	// log2 x (rounded) and the product by ln 2 (rounded), weighted by w:
	// the combine's (w = 1) and each partial's (x = l_s, log2 l_s at most
	// log2 n_s). In the LSE's units a rounding of a log2-unit value y is
	// ln 2 times its spacing around y.
	var rv float64
	round := func(w, lnX, lse float64) {
		y1, y2 := lnX*math.Log2E, lse*math.Log2E
		a, b, c := math.Ln2*sdRound(y1, 24, -149), math.Ln2*sdRound(y2, 24, -149), sdRound(lse, 24, -149)
		rv += w * w * (a*a + b*b + c*c + uLg2*uLg2/3)
		rnd.bound += w * (math.Ln2*(spacing(y1, 24, -149)+spacing(y2, 24, -149))/2 + spacing(lse, 24, -149)/2 + uLg2)
	}
	round(1, math.Log(l), mt+math.Log(l))
	for sl, x := range ls {
		if x == 0 {
			continue
		}
		w := x / l
		round(w, math.Log(ns[sl]), mt+math.Log(x))
		v += w * w * sdMerge(w)
	}
	// A running max rescales the sum so far by exp2(m_old - m_new): one
	// exponential's error on a part of l each time a tile raises the max,
	// about 1 + ln(tiles) times for tiles in no particular order.
	v += uEx2 * uEx2 / 3 * (1 + math.Log(float64(max(nTiles, nSlots))))
	rnd.sd = math.Sqrt(rv)
	return math.Sqrt(v), bias, rnd
}
