package check

import (
	"math"

	"github.com/sparseattn/msa/cuda"
)

// Tolerances: what a kernel that follows the contract may differ from the
// exact (float64) result, bounded per element from the arithmetic it is
// allowed to do. kernels/cuda/GPU_CHECK.md gives the same derivation with
// worked numbers.
//
// Unit roundoffs u (round to nearest: |fl(x) - x| <= u |x| for x in the
// normal range): a format with p significand bits (the implicit one
// included) has u = 2^-p. Half an ulp is 2^-p relative to the bottom of a
// binade and 2^-(p+1) only at its top, so BF16 (p = 8) is u = 2^-8, not
// 2^-9.
const (
	uF32  = 0x1p-24 // float32, p = 24
	uBF16 = 0x1p-8  // bfloat16, p = 8
	uF16  = 0x1p-11 // float16, p = 11
	uE4M3 = 0x1p-4  // e4m3fn, p = 4
	// fE4M3 is the absolute error floor of e4m3 below its smallest normal
	// 2^-6: subnormals are spaced 2^-9, half a spacing is 2^-10.
	fE4M3 = 0x1p-10
	// fF16 is the same floor for float16 (subnormal spacing 2^-24).
	fF16 = 0x1p-25
	// fBF16 bounds half the smallest bfloat16 subnormal (2^-133) with room.
	fBF16 = 0x1p-133

	// uFP8MMA is the relative error of a dot product on FP8 tensor cores
	// (E4M3 x E4M3, Hopper wgmma and Blackwell tcgen05), relative to the sum
	// of the magnitudes of its terms. Their accumulator keeps about 14
	// significant bits per k-group of 32 products before the float32
	// accumulation (NVIDIA does not document it; DeepSeek-V3 technical
	// report, section 3.3.2, measured it on H800): truncation to 14 bits
	// is 2^-13 of the running magnitude per group; 2^-11 allows four such
	// truncations along one chain (D <= 256 is 8 groups, whose truncation
	// errors do not all reach the same bound). This is a model of the
	// hardware, not a proof: on an H200 the score errors are 1.4e-4 of the
	// magnitude sum (the LSE's 9.7e-5 relative error at D 128 in
	// docs/gpucheck-h200.md), below 2^-12.
	uFP8MMA = 0x1p-11

	// uExp bounds the relative error of the exponentials and logarithms a
	// GPU kernel evaluates (ex2.approx / lg2.approx: 2 ulps of float32 each,
	// plus the rounding of the argument's multiplication by log2(e)).
	uExp = 0x1p-21
)

// arith is the arithmetic a problem's kernels may use: what the contract
// rounds and where a conforming implementation may differ.
type arith struct {
	uQK   float64 // relative error of a score, of the sum of |q_d k_d| scale
	uP    float64 // rounding of P before P.V (relative)
	fP    float64 // absolute floor of that rounding (in units of the row max)
	uPV   float64 // accumulation of P.V (relative to sum P |v|; forRow)
	uPart float64 // rounding of the block-normalised partial O
	fPart float64 // absolute floor of that rounding, in output units
	uComb float64 // the combine's float32 arithmetic (relative to sum w |O_s|)
	nSum  float64 // float32 roundings of one row sum (forRow)
	nPV   float64 // float32 roundings of a product's way into P.V (forRow)
	nComb float64 // float32 roundings of an LSE-sized value (partial LSEs, combine)
	// The statistical model (stat.go) also needs to know which errors are
	// coherent and how the row sum is split.
	fp8QK   bool    // Q.K on the FP8 tensor cores (truncating accumulator)
	fp8PV   bool    // P.V on the FP8 tensor cores
	pPart   int     // significand bits of the partial dtype
	minPart int     // log2 of its subnormal spacing
	gV      float64 // V's global scale (partials are stored without it)
	acc     accumModel
	fp8Walk float64 // uFP8Walk when P.V accumulates over the whole walk on the FP8 tensor cores (Prefill.PV8Walk), else 0
	onePart bool    // the row's one BF16 partial is the output's rounding (row, reference.go)
	// exactP: every kernel rounds the row's P against its final max (one
	// visit, one partial), so the reference knows each rounded value.
	exactP bool
	visits int // the row's visits (accum.go), set with exactP
	pP     int // significand bits of P's rounding before P.V (BF16 8, E4M3 4)
	minP   int // log2 of its subnormal spacing
}

// newArith derives the arithmetic of Q/K/V dtypes q, kv, head dim d,
// partials of dtype part (F32 for decode's split partials) merged over up
// to slots partials, with V global scale gV, accumulated as acc says (the
// worst of the kernels that may run the problem, accum.go). The terms that
// depend on a row's key count (the P.V chain and the row sum) are set per
// row by forRow.
//
//   - Scores: BF16 and converted inputs (BF16 Q with FP8 or NVFP4 K/V, E4M3
//     Q with NVFP4 K/V) multiply exactly and accumulate D products in
//     float32: |error| <= D u32 sum |q_d k_d| (the standard gamma_D bound).
//     E4M3 Q and K use the FP8 tensor cores: uFP8MMA.
//   - P before P.V: the contract rounds P to BF16 (BF16 P.V) or E4M3 (FP8
//     P.V); the CPU path keeps BF16 P.V's P in float32 on its float32
//     kernel tiers and rounds it to BF16 on its bf16-product ones. The
//     bound covers both, and an E4M3 rounding relative to any running row max <= the
//     final one: |dP| <= u P + floor, the floor (2^-10 of the running max,
//     at most 2^-10 of the final one) for each token.
//   - P.V: float32 accumulation along the kernel's chain (forRow), or
//     uFP8MMA when a kernel that may run the problem multiplies E4M3 P and
//     V on the FP8 tensor cores (the larger of the two).
//   - Partials: one rounding of each slot's normalised O to the partial
//     dtype; weighted by the combine, |dO| <= u_part sum_s w_s |O_s| <=
//     u_part sum P |v| / sum P, plus the floor of subnormal partials.
func newArith(q, kv, part cuda.Dtype, d, slots int, gV float64, acc accumModel) arith {
	a := arith{uQK: float64(d) * uF32, uP: uBF16, pP: 8, minP: -133, uComb: float64(slots+2) * uF32, nComb: float64(slots + 4), acc: acc}
	if q == cuda.E4M3 && kv == cuda.E4M3 {
		a.uQK = uFP8MMA
		a.fp8QK, a.fp8PV = true, acc.pvFP8
	}
	if q == cuda.E4M3 && (kv == cuda.E4M3 || kv == cuda.NVFP4) { // FP8 P.V (docs/semantics.md)
		a.uP, a.fP, a.pP, a.minP = uE4M3, fE4M3, 4, -9
	}
	a.gV = gV
	switch part {
	case cuda.F32:
		a.uPart, a.pPart, a.minPart = uF32, 24, -149
	case cuda.BF16:
		a.uPart, a.pPart, a.minPart = uBF16, 8, -133
	case cuda.F16:
		a.uPart, a.fPart, a.pPart, a.minPart = uF16, fF16*gV, 11, -24
	case cuda.E4M3:
		a.uPart, a.fPart, a.pPart, a.minPart = uE4M3, fE4M3*gV, 4, -9
	}
	return a
}

// forRow is the arithmetic of a row of n attended keys folded in
// a.visits visits (accum.go): a row of n keys has at most n products in a
// P.V chain (the chain's own length when shorter: a block) and one rescale
// per visit (pvTerms), and at most sumTerms roundings in its row sum.
func (a arith) forRow(n int) arith {
	a.nPV = float64(a.acc.pvTerms(n, a.visits))
	a.uPV = a.nPV * uF32
	if a.fp8PV {
		chain := a.uPV
		if a.acc.pvFP8Span {
			chain += uFP8Span
		}
		a.uPV = math.Max(chain, math.Max(uFP8MMA, a.fp8Walk))
	}
	a.nSum = float64(a.acc.sumTerms(n, a.visits))
	return a
}

func (c *Prefill) arith() arith {
	gV := 1.0
	if c.KVD == cuda.NVFP4 {
		gV = float64(c.V.Global)
	}
	a := newArith(c.QD, c.KVD, c.PD, c.D, c.TopK, gV, mustModel(modelOf(true, c.QD, c.KVD, c.D, c.Blk)))
	if c.PV8Walk && a.fp8PV {
		a.fp8Walk = uFP8Walk(c.walkGroups())
	}
	return a
}

// uFP8Span is the error of one 64-key span's P.V on the FP8 tensor cores
// (sm90_decode_pipe.cu's fp8pv kernels): two k-groups of 32 products, each
// truncating the running sum to about 14 bits (2^-13 of its magnitude,
// uFP8MMA's model), relative to the span's sum P |v|. The span's result is
// added to O in float32, so this adds to the float32 chain's nPV * u32;
// over the spans the truncations sum to at most 2^-12 of the row's
// magnitude (the spans' magnitudes, rescaled by alpha <= 1, sum to at most
// the row's).
const uFP8Span = 2 * 0x1p-13

// uFP8Walk is uPV for the sm_90a query-major fp8pv kernels, which keep
// O in the e4m3 wgmma's accumulator over the whole walk of a query tile
// (as FlashAttention-3 does) instead of one block: every k-group of 32
// keys of the walk (masked keys included: the accumulator passes through
// the truncating adder whatever the products) may truncate the running
// sum to about 14 bits, 2^-13 of its magnitude <= sum P |v| (P relative
// to the running max, rescaled by alpha <= 1 between blocks). Truncation
// has one sign, so the errors add: groups * 2^-13, the worst case, which
// the DeepSeek-V3 measurement (about 2% at K = 4096, 128 groups: 128 *
// 2^-13 = 1.6%) shows is reached. The P rounding is unchanged (uP, fP:
// the kernel converts the unrounded P with the same cvt.rn.satfinite
// round_p applies, no scale), so only this term differs from the widened-V
// kernel, whose float32 accumulation uFP8MMA more than covers.
func uFP8Walk(groups int) float64 { return max(uFP8MMA, float64(groups)*0x1p-13) }

// walkGroups bounds the k-groups (32 keys) of a query tile's walk: the
// union of its tokens' blocks is at most every block of the longest
// sequence.
func (c *Prefill) walkGroups() int {
	n := 0
	for _, s := range c.SeqK {
		n = max(n, (int(s)+c.Blk-1)/c.Blk)
	}
	return n * ((c.Blk + 31) / 32)
}

func (c *Decode) arith() arith {
	gV := 1.0
	if c.KVD == cuda.NVFP4 {
		gV = float64(c.V.Global)
	}
	var n int32
	for _, s := range c.SeqUsed {
		n = max(n, s)
	}
	slots := (int(n) + c.PageSize - 1) / c.PageSize // at most one split per page
	blk := 0                                        // dense decode: no blocks, tiles from the chunk's start
	if c.TopK > 0 {
		blk = c.Blk
	}
	a := newArith(c.QD, c.KVD, cuda.F32, c.D, slots, gV, mustModel(modelOf(false, c.QD, c.KVD, c.D, blk)))
	if c.PV8Walk && a.fp8PV {
		a.fp8Walk = uFP8Walk(c.walkGroups())
	}
	return a
}

// walkGroups bounds the k-groups (32 keys) one decode work item passes
// through the FP8 accumulator (sm100_decode.cu: visits of at most
// kBlockKeys = 128 keys, four K = 32 products each, masked keys included):
// a dense item visits its chunk in steps of 128 keys from the chunk's
// start, at most the longest request; a sparse item visits each block of
// the union its rows selected (at most every block of the longest
// request) in steps of 128 keys from the block's (or chunk's) start.
func (c *Decode) walkGroups() int {
	var n int
	for _, s := range c.SeqUsed {
		n = max(n, int(s))
	}
	visits := (n + 127) / 128
	if c.TopK > 0 {
		visits = (n + c.Blk - 1) / c.Blk * ((c.Blk + 127) / 128)
	}
	return 4 * max(visits, 1)
}

// mustModel panics on a problem no table entry covers: the matrices are
// fixed and TestAccumCoversFatbin proves every kernel has an entry, so
// this is a bug of the table, not an input error.
func mustModel(m accumModel, err error) accumModel {
	if err != nil {
		panic(err)
	}
	return m
}

// scoreError bounds the absolute error of every score of a row whose
// largest sum of |q_d k_d| * scale is maxSA and largest |score| maxAbsS:
// the dot product's accumulation, the float32 rounding of each input
// conversion (an NVFP4 value times its global scale, 2^-24 each for q and
// k) and the scale's multiplication (2^-24 of the score, with room).
func (a arith) scoreError(maxSA, maxAbsS float64) float64 {
	return (a.uQK+2*uF32)*maxSA + 2*uF32*maxAbsS
}

// oSums are the sums over a row's keys that bound one O element (P
// relative to the row max, l = sum P).
type oSums struct {
	absSum float64 // sum P |v| / l
	sumAbs float64 // sum |v| / l
	// maxPV and maxV: the least P |v| / l and |v| / l of a key that may hold
	// the row max in the kernel's arithmetic (its score within 2 errS of the
	// max). That key's P is exp(0) = 1 (within the exponential's error,
	// which eps covers) when it is rounded before P.V: exact in BF16 and
	// E4M3, so its share leaves the P rounding's terms.
	maxPV, maxV float64
}

// tolO bounds |O_gpu - O| for an element with exact value o and sums w,
// when every score may be off by errS:
//
//   - scores off by errS move each P = exp(s - max) by a factor within
//     exp(+-2 errS) (the max moves too), and the exponentials are evaluated
//     to uExp: eps = exp(2 errS) - 1 + uExp relative on every P; O =
//     sum P v / sum P then moves by at most 2 eps/(1 - eps) * absSum;
//   - rounding P (uP, floor fP per token) adds uP (absSum - maxPV) and
//     fP (sumAbs - maxV): the row max's own P is 1, exact;
//   - accumulating P.V (uPV), rounding the partials (uPart, floor fPart)
//     and the combine (uComb) add u * absSum each;
//   - the output is rounded to BF16, monotonically: the result lies
//     between bf16(o - R) and bf16(o + R), so |O_gpu - o| is at most the
//     larger of |bf16(o -+ R) - o| (exactly: no 2^-8 (|o| + R) allowance
//     for the rounding, whose actual size the reference knows).
func (a arith) tolO(o float64, w oSums, errS float64) float64 {
	return roundO.maxErr(o, a.preO(w, errS))
}

// preO is R of tolO: the bound on an element's error before its rounding
// to BF16 (the statistical criterion's deviation never exceeds it).
func (a arith) preO(w oSums, errS float64) float64 {
	eps := math.Expm1(2*errS) + uExp
	return w.absSum*(2*eps/(1-eps)+a.uPV+a.uPart+a.uComb) + a.uP*(1+eps)*(w.absSum-w.maxPV) + a.fP*(w.sumAbs-w.maxV) + a.fPart
}

// tolLSE bounds |LSE_gpu - LSE|: scores off by errS move the
// log-sum-exp by at most errS; the exponentials and the logarithm add
// 2 uExp and the row sum's nSum float32 additions nSum * u32 (relative
// errors of the row sum, absolute on its logarithm); nComb float32
// roundings of LSE-sized values (the partial LSEs, the combine's max, sum
// and result) add nComb * u32 * (1 + |lse|).
func (a arith) tolLSE(lse, errS float64) float64 {
	return errS + 2*uExp + a.nSum*uF32 + a.nComb*uF32*(1+math.Abs(lse))
}
