//go:build ignore

// Command gen writes lanes_avx512_amd64.s, the AVX-512 kernels of
// tile.Lanes (rows in SIMD lanes: one zmm holds one value of each of the 16
// query rows):
//
//	cd kernels/tile && go run asmgen/lanes/gen.go
//
// Kernels (contracts in lanes_amd64.go):
//
//   - lanesQK{16,8,4,2,1}: S^T[i] = sum over c of K[i][c] * Q^T[c] for B
//     consecutive keys, c in increasing order (one FMA chain per key and
//     lane, like the generic dot product). K[i][c] is an embedded {1to16}
//     broadcast from the row-major K; Q^T[c] is one zmm, loaded once per c
//     and shared by the B key accumulators.
//   - lanesSoftmax: vertical online softmax over n score vectors: scale,
//     prefix mask (key i visible in lane r iff i < valid[r]), running max,
//     alpha, exp2, row sums, temperature sums and P rounding.
//   - lanesPV{24,16,8}: O^T[c0+j] = alpha*O^T[c0+j] + sum over keys i of
//     V[i][c0+j] * P^T[i] for a chunk of C output columns kept in C zmm
//     accumulators across all keys.
//
// The exp2 and the bf16/e4m3 rounding are those of asmgen/gen.go
// (genSoftmax512): same polynomial, same instruction sequence.
package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
)

type asm struct{ bytes.Buffer }

func (a *asm) f(format string, args ...any) {
	fmt.Fprintf(&a.Buffer, format, args...)
	a.WriteByte('\n')
}

// expC is the exp2 polynomial of asmgen/gen.go: 2^f on [-0.5, 0.5], degree 6.
var expC = []float32{1.0, 0.6931471824645996, 0.24022646248340607, 0.05550328642129898, 0.009618489071726799, 0.0013399932067841291, 0.0001534576585981995}

// constant table lanesc: 4-byte entries, broadcast by the kernels.
var cnames = []string{"ninf", "c0", "c1", "c2", "c3", "c4", "c5", "c6", "one", "r7fff", "hi16", "r7ffff", "hi12", "c16384", "sub", "c448"}

func cval(n string) uint32 {
	switch n {
	case "ninf":
		return math.Float32bits(float32(math.Inf(-1)))
	case "one":
		return 1
	case "r7fff":
		return 0x7fff
	case "hi16":
		return 0xffff0000
	case "r7ffff":
		return 0x7ffff
	case "hi12":
		return 0xfff00000
	case "c16384":
		return math.Float32bits(16384)
	case "sub":
		return math.Float32bits(1.0 / 64)
	case "c448":
		return math.Float32bits(448)
	}
	if n[0] == 'c' && len(n) == 2 {
		return math.Float32bits(expC[n[1]-'0'])
	}
	panic(n)
}

func c(n string) string {
	for i, x := range cnames {
		if x == n {
			return fmt.Sprintf("·lanesc+%d(SB)", 4*i)
		}
	}
	panic(n)
}

// genQK emits lanesQK<B>(qT *float32, k *float32, ldk uintptr, d int, s *float32).
// Register plan: Z0..Z(B-1) accumulators, Z16-Z19 Q^T[c..c+3]. GP: AX Q^T,
// SI/DI/R11/R12 rows 0/4/8/12 of K, R8 ldk, R9 3*ldk, CX d/4, BX s.
func genQK(a *asm, B int) {
	name := fmt.Sprintf("lanesQK%d", B)
	a.f("// func %s(qT *float32, k *float32, ldk uintptr, d int, s *float32)", name)
	a.f("// %d keys: per c one load of Q^T[c] and %d broadcast multiply-adds; c unrolled by 4.", B, B)
	a.f("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	a.f("\tMOVQ qT+0(FP), AX")
	a.f("\tMOVQ k+8(FP), SI")
	a.f("\tMOVQ ldk+16(FP), R8")
	a.f("\tMOVQ d+24(FP), CX")
	a.f("\tMOVQ s+32(FP), BX")
	a.f("\tLEAQ (R8)(R8*2), R9")
	bases := []string{"SI", "DI", "R11", "R12"}
	nb := (B + 3) / 4
	for b := 1; b < nb; b++ {
		a.f("\tLEAQ (%s)(R8*4), %s", bases[b-1], bases[b])
	}
	for j := 0; j < B; j++ {
		a.f("\tVXORPS Z%d, Z%d, Z%d", j, j, j)
	}
	a.f("\tSHRQ $2, CX // d/4 (d is a multiple of 8)")
	a.f("loop:")
	for u := 0; u < 4; u++ {
		a.f("\tVMOVUPS %d(AX), Z%d // Q^T[c+%d]", 64*u, 16+u, u)
	}
	idx := []string{"", "(R8*1)", "(R8*2)", "(R9*1)"}
	for u := 0; u < 4; u++ {
		for j := 0; j < B; j++ {
			a.f("\tVFMADD231PS.BCST %d(%s)%s, Z%d, Z%d // key %d += K[%d][c+%d] * Q^T[c+%d]", 4*u, bases[j/4], idx[j%4], 16+u, j, j, j, u, u)
		}
	}
	a.f("\tADDQ $256, AX")
	for b := 0; b < nb; b++ {
		a.f("\tADDQ $16, %s", bases[b])
	}
	a.f("\tDECQ CX")
	a.f("\tJNZ loop")
	for j := 0; j < B; j++ {
		a.f("\tVMOVUPS Z%d, %d(BX)", j, 64*j)
	}
	a.f("\tVZEROUPPER")
	a.f("\tRET\n")
}

// genPV emits lanesPV<C>(p *float32, v *float32, ldv uintptr, n int, o *float32, alpha *float32).
// Register plan: Z0..Z(C-1) accumulators O^T[c0..c0+C), Z31 alpha then
// P^T[i], Z30 P^T[i+1]. GP: SI P^T, DX V row i, R9 V row i+1, R8 2*ldv,
// CX key pairs, DI O^T.
func genPV(a *asm, C int) {
	name := fmt.Sprintf("lanesPV%d", C)
	a.f("// func %s(p *float32, v *float32, ldv uintptr, n int, o *float32, alpha *float32)", name)
	a.f("// %d output columns in registers across all keys: per key one load of P^T[i] and %d broadcast multiply-adds.", C, C)
	a.f("TEXT ·%s(SB), NOSPLIT, $0-48", name)
	a.f("\tMOVQ p+0(FP), SI")
	a.f("\tMOVQ v+8(FP), DX")
	a.f("\tMOVQ ldv+16(FP), R8")
	a.f("\tMOVQ n+24(FP), CX")
	a.f("\tMOVQ o+32(FP), DI")
	a.f("\tMOVQ alpha+40(FP), AX")
	a.f("\tLEAQ (DX)(R8*1), R9 // V row i+1 (no indexed addressing in the loop: it would un-laminate)")
	a.f("\tADDQ R8, R8 // two rows")
	a.f("\tVMOVUPS (AX), Z31")
	for j := 0; j < C; j++ {
		a.f("\tVMULPS %d(DI), Z31, Z%d // alpha * O^T[c0+%d]", 64*j, j, j)
	}
	a.f("\tSHRQ $1, CX // pairs of keys")
	a.f("\tJZ one")
	a.f("loop:")
	a.f("\tVMOVUPS (SI), Z31")
	a.f("\tVMOVUPS 64(SI), Z30")
	for j := 0; j < C; j++ {
		a.f("\tVFMADD231PS.BCST %d(DX), Z31, Z%d", 4*j, j)
	}
	for j := 0; j < C; j++ {
		a.f("\tVFMADD231PS.BCST %d(R9), Z30, Z%d", 4*j, j)
	}
	a.f("\tADDQ $128, SI")
	a.f("\tADDQ R8, DX")
	a.f("\tADDQ R8, R9")
	a.f("\tDECQ CX")
	a.f("\tJNZ loop")
	a.f("one:")
	a.f("\tTESTQ $1, n+24(FP)")
	a.f("\tJZ store")
	a.f("\tVMOVUPS (SI), Z31")
	for j := 0; j < C; j++ {
		a.f("\tVFMADD231PS.BCST %d(DX), Z31, Z%d", 4*j, j)
	}
	a.f("store:")
	for j := 0; j < C; j++ {
		a.f("\tVMOVUPS Z%d, %d(DI)", j, 64*j)
	}
	a.f("\tVZEROUPPER")
	a.f("\tRET\n")
}

// lanesState offsets (lanes_amd64.go checks them in a test).
const (
	offValid = 0
	offMx    = 64
	offSum   = 128
	offTsum  = 192
	offAlpha = 256
	offScale = 320
	offInvT  = 324
	offRound = 328
)

// genSoftmax emits lanesSoftmax(s *float32, n int, st *lanesState), n >= 1.
// Register plan: Z31 scale, Z30 valid, Z29 key index, Z28 int 1, Z27 -inf,
// Z26 max, Z24 invT, Z17-Z23 polynomial, Z16 sum, Z15 tsum, Z6-Z13 rounding
// constants, Z0-Z5 scratch. GP: SI s, CX n, BX state, DI running pointer,
// DX count.
func genSoftmax(a *asm) {
	exp2 := func(in, out, t1, t2 int, mask string) {
		// VREDUCEPS(-inf) = 0, so n = -inf and VSCALEFPS(p, -inf) = 0;
		// NaN (lanes whose max is still -inf) is removed by the zeroing mask.
		a.f("\tVREDUCEPS $8, Z%d, Z%d // f = x - round(x) in [-0.5, 0.5]", in, t2)
		a.f("\tVSUBPS Z%d, Z%d, Z%d // n = x - f (exact)", t2, in, t1)
		a.f("\tVMOVAPS Z23, Z%d", out)
		for i := 5; i >= 0; i-- {
			a.f("\tVFMADD213PS Z%d, Z%d, Z%d", 17+i, t2, out)
		}
		if mask != "" {
			a.f("\tVSCALEFPS.Z Z%d, Z%d, %s, Z%d // p * 2^n, 0 in lanes that do not see the key", t1, out, mask, out)
		} else {
			a.f("\tVSCALEFPS Z%d, Z%d, Z%d // p * 2^n (exact, gradual underflow)", t1, out, out)
		}
	}
	a.f("// func lanesSoftmax(s *float32, n int, st *lanesState)")
	a.f("TEXT ·lanesSoftmax(SB), NOSPLIT, $0-24")
	a.f("\tMOVQ s+0(FP), SI")
	a.f("\tMOVQ n+8(FP), CX")
	a.f("\tMOVQ st+16(FP), BX")
	a.f("\tVBROADCASTSS %d(BX), Z31 // scale", offScale)
	a.f("\tVBROADCASTSS %d(BX), Z24 // invT", offInvT)
	a.f("\tVMOVDQU32 %d(BX), Z30 // valid", offValid)
	a.f("\tVPBROADCASTD %s, Z28", c("one"))
	a.f("\tVBROADCASTSS %s, Z27", c("ninf"))
	for i := 0; i <= 6; i++ {
		a.f("\tVBROADCASTSS %s, Z%d", c(fmt.Sprintf("c%d", i)), 17+i)
	}
	for i, n := range []string{"one", "r7fff", "hi16", "r7ffff", "hi12", "c16384"} {
		a.f("\tVPBROADCASTD %s, Z%d", c(n), 8+i)
	}
	a.f("\tVBROADCASTSS %s, Z6", c("sub"))
	a.f("\tVBROADCASTSS %s, Z7", c("c448"))
	a.f("\t// Pass 1: s = scale*s, keys i >= valid[r] set to -inf in lane r, running max.")
	a.f("\tVMOVUPS %d(BX), Z26 // max starts at mx", offMx)
	a.f("\tVMOVAPS Z27, Z5 // second max accumulator")
	a.f("\tVPXORD Z29, Z29, Z29")
	a.f("\tMOVQ SI, DI")
	a.f("\tMOVQ CX, DX")
	a.f("\tSHRQ $1, DX")
	a.f("\tJZ max1")
	a.f("max2:")
	for u, acc := range []int{26, 5} {
		a.f("\tVMULPS %d(DI), Z31, Z%d", 64*u, u)
		a.f("\tVPCMPGTD Z29, Z30, K%d // valid > key", u+1)
		a.f("\tVBLENDMPS Z%d, Z27, K%d, Z%d", u, u+1, u)
		a.f("\tVMOVUPS Z%d, %d(DI)", u, 64*u)
		a.f("\tVMAXPS Z%d, Z%d, Z%d", u, acc, acc)
		a.f("\tVPADDD Z28, Z29, Z29")
	}
	a.f("\tADDQ $128, DI")
	a.f("\tDECQ DX")
	a.f("\tJNZ max2")
	a.f("max1:")
	a.f("\tTESTQ $1, CX")
	a.f("\tJZ maxdone")
	a.f("\tVMULPS (DI), Z31, Z0")
	a.f("\tVPCMPGTD Z29, Z30, K1")
	a.f("\tVBLENDMPS Z0, Z27, K1, Z0")
	a.f("\tVMOVUPS Z0, (DI)")
	a.f("\tVMAXPS Z0, Z26, Z26")
	a.f("maxdone:")
	a.f("\tVMAXPS Z5, Z26, Z26 // new mx")
	a.f("\t// alpha = exp2(mxold - mx), 1 in lanes whose max is still -inf.")
	a.f("\tVCMPPS $4, Z27, Z26, K2 // mx != -inf")
	a.f("\tVMOVUPS %d(BX), Z0", offMx)
	a.f("\tVSUBPS.Z Z26, Z0, K2, Z0 // mxold - mx, 0 where mx = -inf")
	a.f("\tVMOVUPS Z26, %d(BX)", offMx)
	exp2(0, 3, 1, 2, "")
	a.f("\tVMOVUPS Z3, %d(BX) // alpha", offAlpha)
	a.f("\tVMULPS %d(BX), Z3, Z3", offSum)
	a.f("\tVMOVUPS Z3, %d(BX) // sum *= alpha", offSum)
	a.f("\tCMPL %d(BX), $0", offInvT)
	a.f("\tJEQ pass2")
	a.f("\tVMULPS Z24, Z0, Z4")
	exp2(4, 5, 1, 2, "")
	a.f("\tVMULPS %d(BX), Z5, Z5", offTsum)
	a.f("\tVMOVUPS Z5, %d(BX) // tsum *= exp2((mxold - mx)*invT)", offTsum)
	a.f("pass2:")
	a.f("\t// Pass 2: p = exp2(s - mx) (0 for keys a lane does not see), sums, rounding.")
	a.f("\tVXORPS Z16, Z16, Z16")
	a.f("\tVXORPS Z15, Z15, Z15")
	a.f("\tVPXORD Z29, Z29, Z29")
	a.f("\tMOVQ SI, DI")
	a.f("\tMOVL %d(BX), DX // round", offRound)
	a.f("\tCMPL DX, $1")
	a.f("\tJEQ bf")
	a.f("\tCMPL DX, $2")
	a.f("\tJEQ e4")
	for _, rnd := range []string{"no", "bf", "e4"} {
		a.f("%s:", rnd)
		a.f("\tCMPL %d(BX), $0", offInvT)
		a.f("\tJNE %stt", rnd)
		for _, temp := range []bool{false, true} {
			lbl := rnd + "nt"
			if temp {
				lbl = rnd + "tt"
			}
			a.f("%s:", lbl)
			a.f("\tVMOVUPS (DI), Z0")
			a.f("\tVSUBPS Z26, Z0, Z0")
			a.f("\tVPCMPGTD Z29, Z30, K1 // valid > key")
			exp2(0, 3, 1, 2, "K1")
			a.f("\tVADDPS Z3, Z16, Z16")
			if temp {
				a.f("\tVMULPS Z24, Z0, Z4")
				exp2(4, 5, 1, 2, "K1")
				a.f("\tVADDPS Z5, Z15, Z15")
			}
			switch rnd {
			case "bf":
				a.f("\tVPSRLD $16, Z3, Z1")
				a.f("\tVPANDD Z8, Z1, Z1")
				a.f("\tVPADDD Z9, Z3, Z3")
				a.f("\tVPADDD Z1, Z3, Z3")
				a.f("\tVPANDD Z10, Z3, Z3 // bf16 round to nearest even")
			case "e4":
				a.f("\tVADDPS Z13, Z3, Z1")
				a.f("\tVSUBPS Z13, Z1, Z1 // subnormal e4m3: nearest multiple of 2^-9")
				a.f("\tVPSRLD $20, Z3, Z2")
				a.f("\tVPANDD Z8, Z2, Z2")
				a.f("\tVPADDD Z11, Z2, Z2")
				a.f("\tVPADDD Z3, Z2, Z2")
				a.f("\tVPANDD Z12, Z2, Z2 // normal e4m3: 3 mantissa bits, nearest even")
				a.f("\tVCMPPS $1, Z6, Z3, K2 // p < 2^-6")
				a.f("\tVBLENDMPS Z1, Z2, K2, Z3")
				a.f("\tVMINPS Z7, Z3, Z3 // saturate at 448")
			}
			a.f("\tVMOVUPS Z3, (DI)")
			a.f("\tVPADDD Z28, Z29, Z29")
			a.f("\tADDQ $64, DI")
			a.f("\tDECQ CX")
			a.f("\tJNZ %s", lbl)
			a.f("\tJMP done")
		}
	}
	a.f("done:")
	a.f("\tVADDPS %d(BX), Z16, Z16", offSum)
	a.f("\tVMOVUPS Z16, %d(BX)", offSum)
	a.f("\tVADDPS %d(BX), Z15, Z15", offTsum)
	a.f("\tVMOVUPS Z15, %d(BX)", offTsum)
	a.f("\tVZEROUPPER")
	a.f("\tRET\n")
}

func main() {
	a := &asm{}
	a.f("// Code generated by asmgen/lanes/gen.go; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\n#include \"textflag.h\"\n")
	for i, n := range cnames {
		a.f("DATA ·lanesc+%d(SB)/4, $0x%08x // %s", 4*i, cval(n), n)
	}
	a.f("GLOBL ·lanesc(SB), RODATA|NOPTR, $%d\n", 4*len(cnames))
	for _, B := range []int{16, 8, 4, 2, 1} {
		genQK(a, B)
	}
	genSoftmax(a)
	for _, C := range []int{24, 16, 8} {
		genPV(a, C)
	}
	if err := os.WriteFile("lanes_avx512_amd64.s", a.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
