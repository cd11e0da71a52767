//go:build ignore

// Command gen writes lanes_avx512_amd64.s, the AVX-512 kernels of
// tile.Lanes (rows in SIMD lanes: one zmm holds one value of each of the 16
// query rows), and lanes_avx2_amd64.s, the AVX2 kernels (rows in the two
// halves of a ymm pair, on the transposed layout, see genAVX2):
//
//	cd kernels/tile && go run asmgen/lanes/gen.go
//
// Kernels (contracts in lanes_amd64.go). The AVX-512 kernels hold Q and O
// in "4 rows x 4 columns" tiles (tile.qIdx, tile.oIdx), so that 4
// consecutive columns of a row-major K or V row are one VBROADCASTF32X4
// shared by the 4 row groups: 10 loads per 24 register-register
// multiply-adds instead of one broadcast operand per multiply-add.
//
//   - lanesQK{6,4,2,1}: S^T[i] = sum over c of K[i][c] * Q^T[c] for B
//     consecutive keys: 4B accumulators (key, row group), each lane holding
//     the partial sum over c = j mod 4 of one row, then an in-register
//     4-lane reduction ((p0+p2)+(p1+p3)) that lands row r in lane r.
//   - lanesSoftmax: vertical online softmax over n score vectors: scale,
//     prefix mask (key i visible in lane r iff i < valid[r]), running max,
//     alpha, exp2, row sums, temperature sums and P rounding; a last pass
//     expands each P^T[i] into the 4 tile vectors of lanesPV (VPERMPS).
//   - lanesPV{24,16,8}: O = alpha*O + sum over keys i of P[r][i] * V[i][c]
//     for a chunk of C output columns kept in C zmm accumulators (4 row
//     groups x C/4 column quads) across all keys.
//
// The exp2 and the bf16/e4m3 rounding are emitted by package emit (Exp2,
// RoundBF16, RoundE4M3 and their AVX2 forms), the same code asmgen/gen.go
// uses for the Acc softmax kernels.
package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/sparseattn/msa/kernels/tile/asmgen/emit"
)

type asm struct{ bytes.Buffer }

func (a *asm) f(format string, args ...any) {
	fmt.Fprintf(&a.Buffer, format, args...)
	a.WriteByte('\n')
}

// constant table lanesc: 4-byte entries, broadcast by the kernels.
var cnames = []string{"ninf", "c0", "c1", "c2", "c3", "c4", "c5", "c6", "one", "r7fff", "hi16", "r7ffff", "hi12", "c16384", "sub", "c448"}

func cval(n string) uint32 {
	v, ok := emit.Const(n)
	if !ok {
		panic(n)
	}
	return v
}

func c(n string) string {
	for i, x := range cnames {
		if x == n {
			return fmt.Sprintf("·lanesc+%d(SB)", 4*i)
		}
	}
	panic(n)
}

// genQK emits lanesQK<B>(qT *float32, k *float32, ldk uintptr, d int, s *float32)
// over the 4x4 layout: Q vector (c4, g) holds lane (q, j) = Q[4q+g][4*c4+j]
// (qT + 256*c4 + 64*g), K[i][4*c4..4*c4+3] is one VBROADCASTF32X4 (lane (q,
// j) = K[i][4*c4+j]), so accumulator (i, g) collects in lane (q, j) the
// partial dot product of row 4q+g over the columns c = j mod 4. The final
// in-register reduction sums the four partials of each 128-bit lane, as
// (p0+p2)+(p1+p3), and lands row 4q+g in lane 4q+g: S^T[i] needs no
// permutation.
// Register plan: Z(4i+g) accumulators, Z24-Z27 Q (c4, g), Z28-Z31 K
// broadcasts. GP: AX Q, SI/DI rows 0/4 of K, R8 ldk, R9 3*ldk, CX d/8, BX s.
func genQK(a *asm, B int) {
	name := fmt.Sprintf("lanesQK%d", B)
	a.f("// func %s(qT *float32, k *float32, ldk uintptr, d int, s *float32)", name)
	a.f("// %d keys x 16 rows: per 4 columns 4 loads of Q, %d 128-bit broadcasts of K, %d multiply-adds.", B, B, 4*B)
	a.f("TEXT ·%s(SB), NOSPLIT, $0-40", name)
	a.f("\tMOVQ qT+0(FP), AX")
	a.f("\tMOVQ k+8(FP), SI")
	a.f("\tMOVQ ldk+16(FP), R8")
	a.f("\tMOVQ d+24(FP), CX")
	a.f("\tMOVQ s+32(FP), BX")
	a.f("\tLEAQ (R8)(R8*2), R9")
	if B > 4 {
		a.f("\tLEAQ (SI)(R8*4), DI")
	}
	for j := 0; j < 4*B; j++ {
		a.f("\tVXORPS Z%d, Z%d, Z%d", j, j, j)
	}
	a.f("\tSHRQ $3, CX // d/8 (d is a multiple of 8): two 4-column steps per iteration")
	a.f("loop:")
	rows := []string{"(SI)", "(SI)(R8*1)", "(SI)(R8*2)", "(SI)(R9*1)", "(DI)", "(DI)(R8*1)"}
	kr := 0
	for u := 0; u < 2; u++ {
		for g := 0; g < 4; g++ {
			a.f("\tVMOVUPS %d(AX), Z%d // Q rows 4q+%d, columns c+%d..", 256*u+64*g, 24+g, g, 4*u)
		}
		for i := 0; i < B; i++ {
			z := 28 + kr%4
			kr++
			a.f("\tVBROADCASTF32X4 %d%s, Z%d // K[%d][c+%d..c+%d]", 16*u, rows[i], z, i, 4*u, 4*u+3)
			for g := 0; g < 4; g++ {
				a.f("\tVFMADD231PS Z%d, Z%d, Z%d", z, 24+g, 4*i+g)
			}
		}
	}
	a.f("\tADDQ $512, AX")
	a.f("\tADDQ $32, SI")
	if B > 4 {
		a.f("\tADDQ $32, DI")
	}
	a.f("\tDECQ CX")
	a.f("\tJNZ loop")
	for i := 0; i < B; i++ {
		a0 := 4 * i
		a.f("\t// key %d: lane 4q+g = sum over j of Z%d+g lane (q, j)", i, a0)
		a.f("\tVUNPCKLPS Z%d, Z%d, Z24", a0+1, a0)
		a.f("\tVUNPCKHPS Z%d, Z%d, Z25", a0+1, a0)
		a.f("\tVUNPCKLPS Z%d, Z%d, Z26", a0+3, a0+2)
		a.f("\tVUNPCKHPS Z%d, Z%d, Z27", a0+3, a0+2)
		a.f("\tVADDPS Z25, Z24, Z24 // g=0,1: j=0+2, j=1+3")
		a.f("\tVADDPS Z27, Z26, Z26 // g=2,3")
		a.f("\tVSHUFPS $0x44, Z26, Z24, Z28")
		a.f("\tVSHUFPS $0xee, Z26, Z24, Z29")
		a.f("\tVADDPS Z29, Z28, Z28")
		a.f("\tVMOVUPS Z28, %d(BX)", 64*i)
	}
	a.f("\tVZEROUPPER")
	a.f("\tRET\n")
}

// genPV emits lanesPV<C>(p *float32, v *float32, ldv uintptr, n int, o *float32, alpha *float32)
// (alpha nil: O is not rescaled, for a block's later value chunks)
// over the 4x4 layout: O vector (c4, g) (o + 256*c4 + 64*g) holds lane (q,
// j) = O[4g+q][c0+4*c4+j]; P vector (i, g) (p + 256*i + 64*g, written by
// lanesSoftmax) holds lane (q, j) = P[4g+q][i]; V[i][c0+4*c4..+3] is one
// VBROADCASTF32X4. Keys in increasing order, one FMA per key and element.
// Register plan: Z(4*c4+g) accumulators, Z24-Z27 P (i, g), Z28-Z31 V
// broadcasts (alpha and its expansion in the prologue). GP: SI P, DX V row
// i, R8 ldv, CX n, DI O.
func genPV(a *asm, C int) {
	C4 := C / 4
	name := fmt.Sprintf("lanesPV%d", C)
	a.f("// func %s(p *float32, v *float32, ldv uintptr, n int, o *float32, alpha *float32)", name)
	a.f("// %d output columns x 16 rows in %d registers across all keys: per key 4 loads of P, %d 128-bit broadcasts of V, %d multiply-adds.", C, 4*C4, C4, 4*C4)
	a.f("TEXT ·%s(SB), NOSPLIT, $0-48", name)
	a.f("\tMOVQ p+0(FP), SI")
	a.f("\tMOVQ v+8(FP), DX")
	a.f("\tMOVQ ldv+16(FP), R8")
	a.f("\tMOVQ n+24(FP), CX")
	a.f("\tMOVQ o+32(FP), DI")
	a.f("\tMOVQ alpha+40(FP), AX")
	a.f("\tTESTQ AX, AX")
	a.f("\tJZ noalpha // nil alpha: O is continued as it is")
	a.f("\tVMOVUPS (AX), Z31")
	for g := 0; g < 4; g++ {
		a.f("\tVMOVDQU32 ·lanesx+%d(SB), Z30", 64*g)
		a.f("\tVPERMPS Z31, Z30, Z%d // alpha of rows 4*%d+q in lanes (q, j)", 24+g, g)
	}
	for c4 := 0; c4 < C4; c4++ {
		for g := 0; g < 4; g++ {
			a.f("\tVMULPS %d(DI), Z%d, Z%d // alpha * O", 256*c4+64*g, 24+g, 4*c4+g)
		}
	}
	a.f("\tJMP keys")
	a.f("noalpha:")
	for c4 := 0; c4 < C4; c4++ {
		for g := 0; g < 4; g++ {
			a.f("\tVMOVUPS %d(DI), Z%d", 256*c4+64*g, 4*c4+g)
		}
	}
	a.f("keys:")
	key := func(off int) {
		for g := 0; g < 4; g++ {
			a.f("\tVMOVUPS %d(SI), Z%d // P rows 4*%d+q, key i", off+64*g, 24+g, g)
		}
		for c4 := 0; c4 < C4; c4++ {
			z := 28 + c4%4
			a.f("\tVBROADCASTF32X4 %d(DX), Z%d // V[i][c0+%d..c0+%d]", 16*c4, z, 4*c4, 4*c4+3)
			for g := 0; g < 4; g++ {
				a.f("\tVFMADD231PS Z%d, Z%d, Z%d", z, 24+g, 4*c4+g)
			}
		}
		a.f("\tADDQ R8, DX")
	}
	a.f("\tSHRQ $1, CX // pairs of keys")
	a.f("\tJZ one")
	a.f("loop:")
	key(0)
	key(256)
	a.f("\tADDQ $512, SI")
	a.f("\tDECQ CX")
	a.f("\tJNZ loop")
	a.f("one:")
	a.f("\tTESTQ $1, n+24(FP)")
	a.f("\tJZ store")
	key(0)
	a.f("store:")
	for c4 := 0; c4 < C4; c4++ {
		for g := 0; g < 4; g++ {
			a.f("\tVMOVUPS Z%d, %d(DI)", 4*c4+g, 256*c4+64*g)
		}
	}
	a.f("\tVZEROUPPER")
	a.f("\tRET\n")
}

// lanesPrefetch offsets (lanes_test.go checks them).
const (
	offPfAddr = 0
	offPfStep = 8
	offPfLast = 16
)

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
	exp2 := func(in, out, t1, t2 int, mask string) { emit.Exp2(a.f, in, out, t1, t2, mask) }
	a.f("// func lanesSoftmax(s *float32, n int, st *lanesState, p4 *float32)")
	a.f("TEXT ·lanesSoftmax(SB), NOSPLIT, $0-32")
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
	emit.RoundTempLoops(a.f, fmt.Sprintf("%d(BX)", offInvT), "done", func(rnd string, temp bool, lbl string) {
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
		emit.RoundP(a.f, rnd, 3)
		a.f("\tVMOVUPS Z3, (DI)")
		a.f("\tVPADDD Z28, Z29, Z29")
		a.f("\tADDQ $64, DI")
		a.f("\tDECQ CX")
		a.f("\tJNZ %s", lbl)
	})
	a.f("done:")
	a.f("\tVADDPS %d(BX), Z16, Z16", offSum)
	a.f("\tVMOVUPS Z16, %d(BX)", offSum)
	a.f("\tVADDPS %d(BX), Z15, Z15", offTsum)
	a.f("\tVMOVUPS Z15, %d(BX)", offTsum)
	a.f("\t// Pass 3: expand P^T[i] into the 4 vectors of lanesPV (lane (q, j) of vector g = P[4g+q][i]).")
	a.f("\tMOVQ n+8(FP), CX")
	a.f("\tMOVQ p4+24(FP), DI")
	for g := 0; g < 4; g++ {
		a.f("\tVMOVDQU32 ·lanesx+%d(SB), Z%d", 64*g, 8+g)
	}
	a.f("expand:")
	a.f("\tVMOVUPS (SI), Z0")
	for g := 0; g < 4; g++ {
		a.f("\tVPERMPS Z0, Z%d, Z%d", 8+g, 1+g)
		a.f("\tVMOVUPS Z%d, %d(DI)", 1+g, 64*g)
	}
	a.f("\tADDQ $64, SI")
	a.f("\tADDQ $256, DI")
	a.f("\tDECQ CX")
	a.f("\tJNZ expand")
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
	a.f("// lanesx: VPERMPS indices that expand a row vector (lane r = row r) into")
	a.f("// the 4x4 layout of lanesPV: vector g, lane 4q+j = row 4g+q.")
	for g := 0; g < 4; g++ {
		for l := 0; l < 16; l++ {
			a.f("DATA ·lanesx+%d(SB)/4, $%d", 4*(16*g+l), 4*g+l/4)
		}
	}
	a.f("GLOBL ·lanesx(SB), RODATA|NOPTR, $256\n")
	for _, B := range []int{6, 4, 2, 1} {
		genQK(a, B)
	}
	genSoftmax(a)
	for _, C := range []int{24, 16, 8} {
		genPV(a, C)
	}
	a2 := &asm{}
	genAVX2(a2)
	for file, b := range map[string]*asm{"lanes_avx512_amd64.s": a, "lanes_avx2_amd64.s": a2} {
		if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// AVX2 kernels. A zmm vector of the 4x4 layout (16 floats) is two ymm
// halves: half h holds the 128-bit lanes q = 2h, 2h+1, i.e. rows 4q+g of a Q
// or O tile vector (c4, g), and rows 8h..8h+7 of a score or P^T vector.
// The AVX2 kernels use another layout: with 16 ymm registers the 4x4 tiles
// leave room for one key (Q.K) or one column quad (P.V) in 8 accumulators,
// with the other operand read from memory by every multiply-add (9 loads
// per 8 multiply-adds, which holds Zen 3 near 65% of its FMA peak). Q and O
// are instead stored transposed, one 16-float vector per column (tile.Lanes
// layout "transposed": q[r][c] at 16c+r), so that one column of Q, or one
// key's P^T (the softmax's output, already lane = row), is two ymm halves
// shared by the broadcast scalars of several keys or columns:
//
//   - lanesQKT: S^T[i] = sum over c of K[i][c] * Q^T[c] for n keys, six at
//     a time (then 4, 2, 1): per column 2 loads of Q, 6 scalar broadcasts
//     of K and 12 multiply-adds into 12 accumulators (row halves); no
//     reduction, each lane sums its row's products in column order.
//   - lanesSoftmaxAVX2: lanesSoftmax on two halves per vector with the AVX2
//     exp2 of the avx2 Acc tier (emit.Exp2AVX2); P^T stays in s.
//   - lanesPVT: O^T[c] = alpha*O^T[c] + sum over keys i of P^T[i] * V[i][c]
//     for all columns, six at a time (fours at the end): per key 2 loads
//     of P^T, 6 scalar broadcasts of V and 12 multiply-adds, keys in
//     increasing order.
//
// Q.K and P.V are one loop shape (colBody): an output vector per key or
// column, summed over columns or keys. One call covers a whole chunk of
// keys or all columns, so the Go side pays one call per chunk.

// cnames8: the constant table lanesc8, 8 copies of each (32 bytes).
var cnames8 = []string{"ninf", "lo256", "c0", "c1", "c2", "c3", "c4", "c5", "c6", "b127", "one", "r7fff", "hi16", "r7ffff", "hi12", "c16384", "sub", "c448"}

func c8(n string) string {
	for i, x := range cnames8 {
		if x == n {
			return fmt.Sprintf("·lanesc8+%d(SB)", 32*i)
		}
	}
	panic(n)
}

func genAVX2(a *asm) {
	a.f("// Code generated by asmgen/lanes/gen.go; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\n#include \"textflag.h\"\n")
	for i, n := range cnames8 {
		for r := 0; r < 8; r++ {
			a.f("DATA ·lanesc8+%d(SB)/4, $0x%08x // %s", 32*i+4*r, cval(n), n)
		}
	}
	a.f("GLOBL ·lanesc8(SB), RODATA|NOPTR, $%d\n", 32*len(cnames8))
	genQKT(a)
	genSoftmax2(a)
	genPVT(a)
}

// The prefetch cursor registers (address, step, last line) of lanesQKT and
// lanesPVT.
var (
	qkPf = [3]string{"R12", "R13", "R14"}
	pvPf = [3]string{"R9", "R10", "R13"}
)

// loadPf loads the lanesPrefetch argument arg into ptr and the cursor into
// regs; the kernel stores the advanced address back through ptr at the end.
func loadPf(a *asm, arg, ptr string, regs [3]string) {
	a.f("\tMOVQ %s, %s", arg, ptr)
	a.f("\tMOVQ %d(%s), %s // prefetch cursor", offPfAddr, ptr, regs[0])
	a.f("\tMOVQ %d(%s), %s // its step per iteration", offPfStep, ptr, regs[1])
	a.f("\tMOVQ %d(%s), %s // its last line", offPfLast, ptr, regs[2])
}

// genQKT emits lanesQKT(qT *float32, k *float32, ldk uintptr, d int, s
// *float32, n int): the score vectors of n >= 1 consecutive keys, six at a
// time, then one 4-, 2- and 1-key group as the rest needs (colBody).
// GP: AX Q^T, SI keys 0-2 of a group, DI keys 3-5, R8 ldk, R9 6*ldk, CX
// column pairs, BX s, R11 keys left.
func genQKT(a *asm) {
	a.f("// func lanesQKT(qT *float32, k *float32, ldk uintptr, d int, s *float32, n int, pf *lanesPrefetch)")
	a.f("TEXT ·lanesQKT(SB), NOSPLIT, $0-56")
	loadPf(a, "pf+48(FP)", "DX", qkPf)
	a.f("\tMOVQ k+8(FP), SI")
	a.f("\tMOVQ ldk+16(FP), R8")
	a.f("\tMOVQ s+32(FP), BX")
	a.f("\tMOVQ n+40(FP), R11")
	a.f("\tLEAQ (R8)(R8*2), R9")
	a.f("\tADDQ R9, R9 // 6*ldk")
	for _, B := range []int{6, 4, 2, 1} {
		a.f("keys%d:", B)
		a.f("\tCMPQ R11, $%d", B)
		if B == 6 {
			a.f("\tJLT keys4")
		} else {
			a.f("\tJLT keys%d", map[int]int{4: 2, 2: 1, 1: 0}[B])
		}
		a.f("\tMOVQ qT+0(FP), AX")
		a.f("\tMOVQ d+24(FP), CX")
		a.f("\tSHRQ $1, CX // column pairs")
		if B > 3 {
			a.f("\tLEAQ (R8)(R8*2), DI")
			a.f("\tADDQ SI, DI // key 3")
		}
		for y := 0; y < 2*B; y++ {
			a.f("\tVXORPS Y%d, Y%d, Y%d", y, y, y)
		}
		a.f("\tMOVQ SI, R10")
		colBody(a, B, false, fmt.Sprintf("qk%d", B), qkPf)
		a.f("\tMOVQ R10, SI")
		for y := 0; y < 2*B; y++ {
			a.f("\tVMOVUPS Y%d, %d(BX)", y, 32*y)
		}
		a.f("\tADDQ $%d, BX", 64*B)
		a.f("\tSUBQ $%d, R11", B)
		if B == 6 {
			a.f("\tADDQ R9, SI")
			a.f("\tJMP keys6")
		} else {
			for t := 0; t < B; t++ {
				a.f("\tADDQ R8, SI")
			}
		}
	}
	a.f("keys0:")
	a.f("\tMOVQ R12, %d(DX)", offPfAddr)
	a.f("\tVZEROUPPER")
	a.f("\tRET\n")
}

// genPVT emits lanesPVT(p *float32, v *float32, ldv uintptr, n int, o
// *float32, alpha *float32, d int): all d columns (a multiple of 8) of O,
// six at a time, and two groups of four where six would leave two (d mod 6
// is 0, 2 or 4), each group over all n >= 1 keys (colBody).
// GP: SI P^T, DX V row, R8 ldv, CX keys left, DI O^T, AX alpha, R11
// columns left, R12 V column.
func genPVT(a *asm) {
	a.f("// func lanesPVT(p *float32, v *float32, ldv uintptr, n int, o *float32, alpha *float32, d int, pf *lanesPrefetch)")
	a.f("TEXT ·lanesPVT(SB), NOSPLIT, $0-64")
	loadPf(a, "pf+56(FP)", "R14", pvPf)
	a.f("\tMOVQ v+8(FP), R12")
	a.f("\tMOVQ ldv+16(FP), R8")
	a.f("\tMOVQ o+32(FP), DI")
	a.f("\tMOVQ alpha+40(FP), AX")
	a.f("\tMOVQ d+48(FP), R11")
	a.f("cols:")
	a.f("\tCMPQ R11, $8")
	a.f("\tJEQ cols4")
	a.f("\tCMPQ R11, $6")
	a.f("\tJLT cols4")
	for _, C := range []int{6, 4} {
		if C == 4 {
			a.f("cols4:")
		}
		a.f("\tMOVQ p+0(FP), SI")
		a.f("\tMOVQ R12, DX")
		a.f("\tMOVQ n+24(FP), CX")
		a.f("\tTESTQ AX, AX")
		a.f("\tJZ noalpha%d // nil alpha: O is continued as it is", C)
		a.f("\tVMOVUPS (AX), Y12 // alpha, rows 0-7")
		a.f("\tVMOVUPS 32(AX), Y13 // rows 8-15")
		for y := 0; y < 2*C; y++ {
			a.f("\tVMULPS %d(DI), Y%d, Y%d // alpha * O", 32*y, 12+y%2, y)
		}
		a.f("\tJMP pv%d", C)
		a.f("noalpha%d:", C)
		for y := 0; y < 2*C; y++ {
			a.f("\tVMOVUPS %d(DI), Y%d", 32*y, y)
		}
		colBody(a, C, true, fmt.Sprintf("pv%d", C), pvPf)
		for y := 0; y < 2*C; y++ {
			a.f("\tVMOVUPS Y%d, %d(DI)", y, 32*y)
		}
		a.f("\tADDQ $%d, R12", 4*C)
		a.f("\tADDQ $%d, DI", 64*C)
		a.f("\tSUBQ $%d, R11", C)
		a.f("\tJNZ cols")
		a.f("\tMOVQ R9, %d(R14)", offPfAddr)
		a.f("\tVZEROUPPER")
		a.f("\tRET")
	}
	a.f("")
}

// colBody emits the loop of an AVX2 kernel of the transposed layout with B
// output vectors j (16 rows each, accumulators Y(2j) rows 0-7 and Y(2j+1)
// rows 8-15, already initialised): out^T[j] += sum over t < T of A^T[t] *
// b(j, t), t increasing, one FMA per product, A^T[t] = 16 floats (Y12,
// Y13), b(j, t) one float broadcast from memory (Y14 / Y15 in turn).
//
//   - Q.K (pv false): A = Q^T at AX + 64t, T = d (CX = d/2 iterations of
//     two columns), b(j, t) = K[j][t] at SI + j*ldk + 4t (keys 3-5 from DI).
//   - P.V (pv true): A = P^T at SI + 64t, T = n (CX), b(j, t) = V[t][j] at
//     DX + 4j + t*ldv.
//
// Q.K and P.V are one shape: an output vector per key or per column, summed
// over columns or over keys.
func colBody(a *asm, B int, pv bool, label string, pf [3]string) {
	fma := func(j, b int) {
		a.f("\tVFMADD231PS Y%d, Y12, Y%d", b, 2*j)
		a.f("\tVFMADD231PS Y%d, Y13, Y%d", b, 2*j+1)
	}
	a.f("%s:", label)
	a.f("\tPREFETCHT1 (%s) // the following block into L2, spread over the iterations", pf[0])
	a.f("\tADDQ %s, %s", pf[1], pf[0])
	a.f("\tCMPQ %s, %s", pf[0], pf[2])
	a.f("\tCMOVQGT %s, %s // stay on the last line", pf[2], pf[0])
	if pv {
		a.f("\tVMOVUPS (SI), Y12 // P^T[i], rows 0-7")
		a.f("\tVMOVUPS 32(SI), Y13 // rows 8-15")
		for j := 0; j < B; j++ {
			b := 14 + j%2
			a.f("\tVBROADCASTSS %d(DX), Y%d // V[i][c0+%d]", 4*j, b, j)
			fma(j, b)
		}
		a.f("\tADDQ $64, SI")
		a.f("\tADDQ R8, DX")
	} else {
		rows := []string{"(SI)", "(SI)(R8*1)", "(SI)(R8*2)", "(DI)", "(DI)(R8*1)", "(DI)(R8*2)"}
		for u := 0; u < 2; u++ {
			a.f("\tVMOVUPS %d(AX), Y12 // Q^T[c+%d], rows 0-7", 64*u, u)
			a.f("\tVMOVUPS %d(AX), Y13 // rows 8-15", 64*u+32)
			for j := 0; j < B; j++ {
				b := 14 + (u*B+j)%2
				a.f("\tVBROADCASTSS %d%s, Y%d // K[%d][c+%d]", 4*u, rows[j], b, j, u)
				fma(j, b)
			}
		}
		a.f("\tADDQ $128, AX")
		a.f("\tADDQ $8, SI")
		if B > 3 {
			a.f("\tADDQ $8, DI")
		}
	}
	a.f("\tDECQ CX")
	a.f("\tJNZ %s", label)
}

// genSoftmax2 emits lanesSoftmaxAVX2(s *float32, n int, st *lanesState),
// n >= 1: lanesSoftmax with two halves per vector and the AVX2 exp2; P^T
// stays in s for lanesPVT, alpha in the state.
// Registers, pass 1: Y15 scale, Y14 -inf, Y13/Y12 valid (rows 0-7 / 8-15),
// Y11 key index, Y10/Y9 running max; pass 2: Y15 invT, Y5/Y6 sums, Y7/Y8
// temperature sums, Y2 visibility mask, Y0 Y1 Y3 Y4 scratch. GP: SI s, BX
// state, DI running pointer, CX/DX counts.
func genSoftmax2(a *asm) {
	exp2 := func(in, out, t1, t2 int) { emit.Exp2AVX2(a.f, c8, in, out, t1, t2) }
	a.f("// func lanesSoftmaxAVX2(s *float32, n int, st *lanesState)")
	a.f("TEXT ·lanesSoftmaxAVX2(SB), NOSPLIT, $0-24")
	a.f("\tMOVQ s+0(FP), SI")
	a.f("\tMOVQ st+16(FP), BX")
	a.f("\tVBROADCASTSS %d(BX), Y15 // scale", offScale)
	a.f("\tVMOVUPS %s, Y14", c8("ninf"))
	a.f("\tVMOVDQU %d(BX), Y13 // valid, rows 0-7", offValid)
	a.f("\tVMOVDQU %d(BX), Y12 // valid, rows 8-15", offValid+32)
	a.f("\tVPXOR Y11, Y11, Y11 // key index")
	a.f("\tVMOVUPS %d(BX), Y10 // max starts at mx", offMx)
	a.f("\tVMOVUPS %d(BX), Y9", offMx+32)
	a.f("\t// Pass 1: s = scale*s, keys i >= valid[r] set to -inf in lane r, running max.")
	a.f("\tMOVQ SI, DI")
	a.f("\tMOVQ n+8(FP), DX")
	a.f("max:")
	for u := 0; u < 2; u++ {
		a.f("\tVMULPS %d(DI), Y15, Y%d", 32*u, u)
		a.f("\tVPCMPGTD Y11, Y%d, Y2 // valid > key", 13-u)
		a.f("\tVBLENDVPS Y2, Y%d, Y14, Y%d", u, u)
		a.f("\tVMOVUPS Y%d, %d(DI)", u, 32*u)
		a.f("\tVMAXPS Y%d, Y%d, Y%d", u, 10-u, 10-u)
	}
	a.f("\tVPADDD %s, Y11, Y11", c8("one"))
	a.f("\tADDQ $64, DI")
	a.f("\tDECQ DX")
	a.f("\tJNZ max")
	a.f("\t// alpha = exp2(mxold - mx), 1 in lanes whose max is still -inf.")
	for u := 0; u < 2; u++ {
		mx := 10 - u
		a.f("\tVCMPPS $4, Y14, Y%d, Y2 // mx != -inf", mx)
		a.f("\tVMOVUPS %d(BX), Y0", offMx+32*u)
		a.f("\tVSUBPS Y%d, Y0, Y0", mx)
		a.f("\tVANDPS Y2, Y0, Y0 // mxold - mx, 0 where mx = -inf")
		a.f("\tVMOVUPS Y%d, %d(BX)", mx, offMx+32*u)
		exp2(0, 3, 1, 4)
		a.f("\tVMOVUPS Y3, %d(BX) // alpha", offAlpha+32*u)
		a.f("\tVMULPS %d(BX), Y3, Y3", offSum+32*u)
		a.f("\tVMOVUPS Y3, %d(BX) // sum *= alpha", offSum+32*u)
		a.f("\tCMPL %d(BX), $0", offInvT)
		a.f("\tJEQ nott%d", u)
		a.f("\tVBROADCASTSS %d(BX), Y5", offInvT)
		a.f("\tVMULPS Y5, Y0, Y0")
		exp2(0, 3, 1, 4)
		a.f("\tVMULPS %d(BX), Y3, Y3", offTsum+32*u)
		a.f("\tVMOVUPS Y3, %d(BX) // tsum *= exp2((mxold - mx)*invT)", offTsum+32*u)
		a.f("nott%d:", u)
	}
	a.f("\t// Pass 2: p = exp2(s - mx) (0 for keys a lane does not see), sums, rounding.")
	a.f("\tVBROADCASTSS %d(BX), Y15 // invT", offInvT)
	for _, y := range []int{5, 6, 7, 8} {
		a.f("\tVXORPS Y%d, Y%d, Y%d", y, y, y)
	}
	a.f("\tVPXOR Y11, Y11, Y11")
	a.f("\tMOVQ SI, DI")
	a.f("\tMOVQ n+8(FP), CX")
	a.f("\tMOVL %d(BX), DX // round", offRound)
	emit.RoundTempLoops(a.f, fmt.Sprintf("%d(BX)", offInvT), "done", func(rnd string, temp bool, lbl string) {
		for u := 0; u < 2; u++ {
			a.f("\tVMOVUPS %d(DI), Y0", 32*u)
			a.f("\tVSUBPS Y%d, Y0, Y0", 10-u)
			a.f("\tVPCMPGTD Y11, Y%d, Y2 // valid > key", 13-u)
			exp2(0, 3, 1, 4)
			a.f("\tVANDPS Y2, Y3, Y3")
			a.f("\tVADDPS Y3, Y%d, Y%d", 5+u, 5+u)
			if temp {
				a.f("\tVMULPS Y15, Y0, Y0")
				exp2(0, 0, 1, 4)
				a.f("\tVANDPS Y2, Y0, Y0")
				a.f("\tVADDPS Y0, Y%d, Y%d", 7+u, 7+u)
			}
			emit.RoundPAVX2(a.f, c8, rnd, 3)
			a.f("\tVMOVUPS Y3, %d(DI)", 32*u)
		}
		a.f("\tVPADDD %s, Y11, Y11", c8("one"))
		a.f("\tADDQ $64, DI")
		a.f("\tDECQ CX")
		a.f("\tJNZ %s", lbl)
	})
	a.f("done:")
	for u := 0; u < 2; u++ {
		a.f("\tVADDPS %d(BX), Y%d, Y%d", offSum+32*u, 5+u, 5+u)
		a.f("\tVMOVUPS Y%d, %d(BX)", 5+u, offSum+32*u)
		a.f("\tVADDPS %d(BX), Y%d, Y%d", offTsum+32*u, 7+u, 7+u)
		a.f("\tVMOVUPS Y%d, %d(BX)", 7+u, offTsum+32*u)
	}
	a.f("\tVZEROUPPER")
	a.f("\tRET\n")
}
