//go:build amd64 && !purego

package tile

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"unsafe"
)

// bf16In is a bf16 operand of VDPBF16PS as float32: subnormal inputs
// read as a signed zero.
func bf16In(b uint16) float32 {
	if b&0x7f80 == 0 {
		b &= 0x8000
	}
	return math.Float32frombits(uint32(b) << 16)
}

// ftz flushes a subnormal float32 result to a signed zero.
func ftz(x float32) float32 {
	if u := math.Float32bits(x); u&0x7f800000 == 0 {
		return math.Float32frombits(u & 0x80000000)
	}
	return x
}

// dpbf16Go is one lane of VDPBF16PS: acc plus the product of the odd bf16
// elements of the pairs a and b, then of the even ones, each addition
// rounded to float32 (the products of two bf16 values are exact) with
// subnormal inputs and results flushed to zero.
func dpbf16Go(acc float32, a, b uint32) float32 {
	acc = ftz(acc + float32(bf16In(uint16(a>>16))*bf16In(uint16(b>>16))))
	return ftz(acc + float32(bf16In(uint16(a))*bf16In(uint16(b))))
}

// lanesQKBF16Go is the reference of lanesQKBF16: s[16i+r] = the VDPBF16PS
// sum over the pairs column pairs p of qb[16p+r] and key i's pair p (k[i*ldk
// + 2p], k[i*ldk + 2p + 1] as the low and high halves), for n keys.
func lanesQKBF16Go(qb []uint32, k []uint16, ldk, pairs int, s []float32, n int) {
	for i := 0; i < n; i++ {
		for r := 0; r < 16; r++ {
			acc := float32(0)
			for p := 0; p < pairs; p++ {
				kp := uint32(k[i*ldk+2*p]) | uint32(k[i*ldk+2*p+1])<<16
				acc = dpbf16Go(acc, qb[16*p+r], kp)
			}
			s[16*i+r] = acc
		}
	}
}

// lanesPVBF16Go is the reference of lanesPVBF16: o[16c+r] = alpha[r] *
// o[16c+r] (alpha nil: as it is), then the VDPBF16PS sums over the key
// pairs j of pp[16j+r] and vb[j*ldv+c], for d columns.
func lanesPVBF16Go(pp, vb []uint32, ldv, pairs int, o, alpha []float32, d int) {
	for c := 0; c < d; c++ {
		for r := 0; r < 16; r++ {
			x := o[16*c+r]
			if alpha != nil {
				x *= alpha[r]
			}
			for j := 0; j < pairs; j++ {
				x = dpbf16Go(x, pp[16*j+r], vb[j*ldv+c])
			}
			o[16*c+r] = x
		}
	}
}

// randBF16 returns a bf16 value with an exponent near 1 (2^-6 to 2^5,
// so that no product or sum of the tests is subnormal or overflows),
// either sign, or zero one time in 16.
func randBF16(rng *rand.Rand) uint16 {
	if rng.Intn(16) == 0 {
		return uint16(rng.Intn(2)) << 15
	}
	return uint16(rng.Intn(2))<<15 | uint16(127-6+rng.Intn(12))<<7 | uint16(rng.Intn(128))
}

func randPairs(rng *rand.Rand, n int) []uint32 {
	x := make([]uint32, n)
	for i := range x {
		x[i] = uint32(randBF16(rng)) | uint32(randBF16(rng))<<16
	}
	return x
}

// TestLanesBF16Kernels checks lanesQKBF16 and lanesPVBF16 against their Go
// references bit for bit on every small shape: 0 to 40 keys (the 12-, 4-
// and 1-key groups of Q.K and all their mixes), 1 to 24 column pairs, key
// rows with padding after them (ldk beyond the pairs), 0 to 20 key pairs
// of P.V over 16 to 96 columns (its groups of 16) with padded value rows,
// with and without alpha; the bytes after each output are checked
// untouched.
func TestLanesBF16Kernels(t *testing.T) {
	useTier(t, "avx512bf16")
	rng := rand.New(rand.NewSource(21))
	const guard = 1234.5
	for pairs := 1; pairs <= 24; pairs++ {
		for n := 0; n <= 40; n++ {
			ldk := 2*pairs + 2*rng.Intn(3)
			qb := randPairs(rng, 16*pairs)
			k := make([]uint16, n*ldk+1)
			for i := range k {
				k[i] = randBF16(rng)
			}
			got, want := make([]float32, 16*n+16), make([]float32, 16*n+16)
			for i := range got {
				got[i], want[i] = guard, guard
			}
			lanesQKBF16(&qb[0], unsafe.Pointer(&k[0]), uintptr(2*ldk), pairs, &got[0], n)
			lanesQKBF16Go(qb, k, ldk, pairs, want, n)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("lanesQKBF16 pairs %d n %d: s[%d] = %g, want %g", pairs, n, i, got[i], want[i])
				}
			}
		}
	}
	for d := 16; d <= 96; d += 16 {
		for pairs := 0; pairs <= 20; pairs++ {
			for _, withAlpha := range []bool{false, true} {
				ldv := d + 16*rng.Intn(2)
				pp := randPairs(rng, 16*pairs+1)
				vb := randPairs(rng, pairs*ldv+1)
				o := make([]float32, 16*d+16)
				for i := range o {
					o[i] = float32(rng.NormFloat64())
				}
				for i := 16 * d; i < len(o); i++ {
					o[i] = guard
				}
				var alpha []float32
				var ap *float32
				if withAlpha {
					alpha = make([]float32, 16)
					for r := range alpha {
						alpha[r] = float32(rng.Float64())
					}
					ap = &alpha[0]
				}
				want := append([]float32(nil), o...)
				lanesPVBF16(&pp[0], unsafe.Pointer(&vb[0]), uintptr(4*ldv), pairs, &o[0], ap, d)
				lanesPVBF16Go(pp, vb, ldv, pairs, want, alpha, d)
				for i := range o {
					if math.Float32bits(o[i]) != math.Float32bits(want[i]) {
						t.Fatalf("lanesPVBF16 d %d pairs %d alpha %v: o[%d] = %g, want %g", d, pairs, withAlpha, i, o[i], want[i])
					}
				}
			}
		}
	}
}

// TestLanesBF16Reference checks that the Go reference is VDPBF16PS and not
// an exact or even-first dot product, on sums where those differ: after a
// first column pair that leaves 1 in both lanes, lane 0 adds -1 (odd
// element) and 2^-24 (even): 2^-24 odd first, 0 even first; lane 1 adds
// 2^-24 twice: 1 with each addition rounded (to even), 1 + 2^-23 exact.
func TestLanesBF16Reference(t *testing.T) {
	useTier(t, "avx512bf16")
	const one, mone, tiny = 0x3f80, 0xbf80, 0x3380 // 1, -1, 2^-24
	k := []uint16{one, one, one, one}              // one key: pairs (1, 1), (1, 1)
	qb := make([]uint32, 32)
	qb[0], qb[1] = one, one // pair 0: (1, 0) in lanes 0 and 1
	qb[16] = tiny | mone<<16
	qb[17] = tiny | tiny<<16
	var s, want [16]float32
	lanesQKBF16(&qb[0], unsafe.Pointer(&k[0]), 8, 2, &s[0], 1)
	lanesQKBF16Go(qb, k, 4, 2, want[:], 1)
	if s != want || s[0] != 0x1p-24 || s[1] != 1 {
		t.Fatalf("lanesQKBF16 %v, reference %v, want lane 0 = 2^-24, lane 1 = 1", s[:2], want[:2])
	}
}

// TestLanesBF16 runs the Lanes test grid on the avx512bf16 tier with bf16
// products asked for (checkLanesBF16Path: the bf16-product kernels for d
// a multiple of 32).
func TestLanesBF16(t *testing.T) {
	useTier(t, "avx512bf16")
	lanes := map[int]*Lanes{}
	lanesCases(t, func(t *testing.T, p *problem) { checkLanesBF16Path(t, lanes, p, "avx512bf16", lanesBF16) })
}

// TestLanesBF16Tails covers the bf16-product kernels' splits: key groups
// of 12, 4 and 1, odd key counts (a P pair and a value pair with a zero
// partner), the staging chunk boundaries (64 rows) and the column groups
// of 16 (d = 32, 96, 160), with all 16 rows.
func TestLanesBF16Tails(t *testing.T) {
	useTier(t, "avx512bf16")
	lanes := map[int]*Lanes{}
	lanesTailCases(t, 17, func(t *testing.T, p *problem) { checkLanesBF16Path(t, lanes, p, "avx512bf16", lanesBF16) })
}

// lanesTailCases runs check on the tail shapes of the bf16 lane paths
// (TestLanesBF16Tails, TestLanesAMXTails): key counts 1-35 and around
// the 16-, 32- and 64-key boundaries up to 128, d = 32, 96 and 160 (the
// 16- and 32-column steps), 16 rows, the rounding and causality drawn
// from seed.
func lanesTailCases(t *testing.T, seed int64, check func(*testing.T, *problem)) {
	rng := rand.New(rand.NewSource(seed))
	var ns []int
	for n := 1; n <= 35; n++ {
		ns = append(ns, n)
	}
	ns = append(ns, 47, 48, 49, 63, 64, 65, 79, 80, 81, 97, 127, 128)
	for _, d := range []int{32, 96, 160} {
		for _, n := range ns {
			round := []Round{RoundNone, RoundBF16, RoundE4M3}[rng.Intn(3)]
			p := newProblem(rng, d, n, 16, 2, round, rng.Intn(2) == 0, 1)
			t.Run(fmt.Sprintf("d%d/n%d/r%d", d, n, round), func(t *testing.T) { check(t, p) })
		}
	}
}

// TestLanesBF16Raw runs the pipelined-widening cases on the bf16-product
// kernels: bf16 keys read in place, bf16 value chunks interleaved from
// their storage (with the V guard's scan; chunks above its limit staged),
// e4m3fn rows staged, must give what the staged float32 rows give, bit
// for bit.
func TestLanesBF16Raw(t *testing.T) {
	useTier(t, "avx512bf16")
	rng := rand.New(rand.NewSource(6))
	ch := lanesChunks[lanesBF16]
	for _, f := range []RawFormat{RawE4M3, RawBF16} {
		for _, d := range []int{32, 64, 128, 256} {
			for _, n := range []int{1, 12, 13, 16, 17, 47, 63, 64, 65, 100, 127, 128} {
				for _, noRaw := range []map[int]bool{nil, {0: true}, {ch.k: true, -1: true}, {-1 - ch.v: true}} {
					for _, hugeV := range []int{0, 200} {
						nan := hugeV > 0 && noRaw == nil && rng.Intn(2) == 0
						pipelinedCase(t, rng, "avx512bf16", f, d, n, noRaw, nan, f == RawBF16 && rng.Intn(4) != 0, 0, hugeV)
					}
				}
			}
		}
	}
}

// TestLanesBF16Selection: on the avx512bf16 tier a Lanes keeps the float32
// lane kernels unless asked for bf16 products (decode's selection), takes
// the bf16-product kernels from the next Reset when asked, for d a
// multiple of 32 only, and goes back when asked to.
func TestLanesBF16Selection(t *testing.T) {
	useTier(t, "avx512bf16")
	for _, d := range []int{16, 32, 48, 64, 128} {
		l := NewLanes(d)
		l.Reset(4, 1, RoundNone, 0)
		if l.kern != lanesAVX512 || l.BF16Lanes() {
			t.Fatalf("d %d: kernel set %d by default, want the float32 lane kernels", d, l.kern)
		}
		l.SetBF16Products(true)
		if l.BF16Lanes() {
			t.Fatalf("d %d: the kernel set changed before Reset", d)
		}
		l.Reset(4, 1, RoundNone, 0)
		if l.BF16Lanes() != (d%32 == 0) {
			t.Fatalf("d %d: BF16Lanes %v after asking", d, l.BF16Lanes())
		}
		l.SetBF16Products(false)
		l.Reset(4, 1, RoundNone, 0)
		if l.kern != lanesAVX512 {
			t.Fatalf("d %d: kernel set %d after asking off", d, l.kern)
		}
	}
	useTier(t, "avx512")
	l := NewLanes(64)
	l.SetBF16Products(true)
	l.Reset(4, 1, RoundNone, 0)
	if l.kern != lanesAVX512 {
		t.Fatalf("avx512 tier: kernel set %d with bf16 products asked for, want the float32 lane kernels", l.kern)
	}
}

// TestPairsJobLayout checks the pairsJob offsets that asmgen/lanes/gen.go
// hard-codes (jobSrc ... jobMax).
func TestPairsJobLayout(t *testing.T) {
	var j pairsJob
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"src", unsafe.Offsetof(j.src), 0},
		{"dst", unsafe.Offsetof(j.dst), 8},
		{"lds", unsafe.Offsetof(j.lds), 16},
		{"skip", unsafe.Offsetof(j.skip), 24},
		{"col", unsafe.Offsetof(j.col), 32},
		{"cols", unsafe.Offsetof(j.cols), 40},
		{"left", unsafe.Offsetof(j.left), 48},
		{"max", unsafe.Offsetof(j.max), 56},
		{"pf", unsafe.Offsetof(j.pf), 120},
	} {
		if f.got != f.want {
			t.Errorf("pairsJob.%s at offset %d, want %d", f.name, f.got, f.want)
		}
	}
}
