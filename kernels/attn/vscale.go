package attn

import (
	"math"

	"github.com/sparseattn/msa/kernels/tile"
)

// V overflow guard.
//
// The block kernel accumulates the unnormalised O = sum_i p_i*v_i in
// float32 with p_i <= 1 (the row maximum has p = 1), so |O| <= l*max|v|
// where l = sum_i p_i is at most the number of keys a row has seen
// (< 2^31). With V near the BF16/float32 maximum (3.39e38) that sum
// overflows although the normalised result O/l is finite. vScale keeps
// every V value the kernel sees at most vScaleLimit = 2^96 in magnitude, so
// |O| <= 2^31 * 2^96 = 2^127 stays finite: when a loaded V block has a
// finite value above the limit, the block (and every later block of the same
// accumulation) is multiplied by 2^-e, the accumulated O so far is rescaled
// to the new e, and the epilogue multiplies the normalisation factor by
// 2^e. Powers of two are exact, so blocks with max |v| <= 2^96 (all
// ordinary inputs) give bit-identical results, in every tile tier; only
// values that become subnormal under 2^-e (|v| < 2^(e-126), e <= 32) lose
// precision. Non-finite V values are left to propagate.

// vScaleLimitBits is the float32 bit pattern of vScaleLimit = 2^96.
const vScaleLimitBits = tile.GuardLimitBits

// vScale is the V exponent shift of one accumulation (e = 0: unscaled).
type vScale struct{ e int }

// maxFiniteBits returns the largest |x| bit pattern among the finite values
// of v (0 when there is none).
func maxFiniteBits(v []float32, lv vec) uint32 {
	var m uint32
	n := simdLen(len(v), lv)
	switch {
	case n == 0:
	case lv == vecAVX512:
		m = maxFiniteBitsAVX512(&v[0], n)
	default:
		m = maxFiniteBitsAVX2(&v[0], n)
	}
	for _, x := range v[n:] {
		b := math.Float32bits(x) &^ (1 << 31)
		if b >= 0x7f800000 {
			b = 0 // Inf and NaN: left to propagate
		}
		m = max(m, b)
	}
	return m
}

// vBounded reports whether every finite value operand o can hold is at
// most 2^96 in magnitude, so that vScale never has to look at its blocks:
// E4M3 is bounded by 448; NVFP4 by 6 * 448 * |global scale|. BF16 can
// reach 3.39e38 and must be scanned.
func vBounded(o *Operand) bool {
	switch o.Dtype {
	case E4M3:
		return true
	case NVFP4:
		g := math.Abs(float64(o.Global))
		return g*6*448 <= 0x1p96
	}
	return false
}

// oScaler rescales the output an accumulator holds so far.
type oScaler interface{ scaleO(f float32) }

// block prepares a loaded V block v for the accumulation: it raises e when
// v holds a finite value above 2^96, rescaling the O accumulated so far in
// acc by 2^(old e - new e) (acc nil: nothing accumulated yet), and
// multiplies v by 2^-e in place. vop is the V operand the block was
// decoded from: a bounded one (vBounded) skips the scan, since its blocks
// never raise e (and apply does nothing); its vec level selects the SIMD
// scan. Decode's staged path guards each chunk instead (kvStager.StageV).
func (s *vScale) block(v []float32, acc oScaler, vop *Operand) {
	if !vBounded(vop) {
		s.raise(maxFiniteBits(v, vop.vec), acc)
	}
	s.apply(v)
}

// raise raises e for a block whose largest finite |v| has float32 bits m.
func (s *vScale) raise(m uint32, acc oScaler) {
	if m <= vScaleLimitBits {
		return
	}
	// The smallest e with m*2^-e <= 2^96: the exponent difference, plus one
	// when m has mantissa bits.
	e := int(m>>23) - (127 + 96)
	if m&(1<<23-1) != 0 {
		e++
	}
	if e > s.e {
		if acc != nil {
			acc.scaleO(float32(math.Ldexp(1, s.e-e)))
		}
		s.e = e
	}
}

// apply multiplies decoded V values by 2^-e (nothing when e = 0).
func (s *vScale) apply(v []float32) {
	if s.e != 0 {
		scaleInPlace(v, float32(math.Ldexp(1, -s.e)))
	}
}

// factor returns 2^e, the factor the epilogue applies to the normalised O.
func (s *vScale) factor() float32 { return float32(math.Ldexp(1, s.e)) }
