//go:build ignore

// Command gen writes lanes_avx512_amd64.s and lanes_avx2_amd64.s, the
// AVX-512 and AVX2 kernels of tile.Lanes, and lanes_bf16_amd64.s, its
// bf16-product kernels (genQKBF16, genPVBF16):
//
//	cd kernels/tile && go run asmgen/lanes/gen.go
//
// Both kernel sets work on the transposed layout of tile.Lanes (q[r][c] at
// 16c+r, likewise O): the 16 query rows sit in the SIMD lanes, so one
// column of Q^T or O^T, or one key's S^T or P^T (the softmax's output,
// lane = row), is one zmm or two ymm halves, shared by the scalar
// broadcasts of several keys or columns of the row-major K or V rows. No
// horizontal reduction is needed, P needs no expansion, and each lane sums
// its row's dot product in column order and its P.V sums in key order, one
// FMA per product. Contracts in lanes_amd64.go.
//
//   - Q.K (lanesQKT512, lanesQKT): S^T[i] = sum over c of K[i][c] * Q^T[c]
//     for a chunk of keys, in groups of 12 (AVX-512; then 8, 4, 2, 1) or 6
//     (AVX2; then 4, 2, 1; bf16 keys 5, 4, 2, 1) keys, one accumulator per
//     key.
//   - Softmax (lanesSoftmax512, lanesSoftmaxAVX2): vertical online softmax
//     over n score vectors: scale, prefix mask (key i visible in lane r iff
//     i < valid[r]), running max, alpha, exp2, row sums, temperature sums
//     and P rounding; P^T stays in s.
//   - P.V (lanesPVT512, lanesPVT): O^T[c] = alpha*O^T[c] + sum over keys i
//     of P^T[i] * V[i][c] for all columns, in groups of 24, 16 or 8
//     (AVX-512) or 6 and 4 (AVX2) columns kept in registers across the
//     chunk's keys.
//
// Q.K and P.V are one loop shape (colBody), parametrised by the ISA
// (vecISA): with AVX-512 the broadcast is the embedded broadcast of the
// multiply-add (one load per multiply-add, which Zen 4's three load pipes
// sustain next to its one zmm FMA per cycle); with AVX2 one broadcast
// feeds the two halves (8 loads per 12 multiply-adds). The same shape
// reads bf16 (vecISA.bf16) and e4m3fn (vecISA.e4m3) K/V rows in place, on
// both ISAs. Every loop
// iteration also prefetches one line of the next block, two in the AVX-512
// Q.K loop (Lanes.PrefetchNext).
//
// The exp2 and the bf16/e4m3 rounding are emitted by package emit (Exp2,
// RoundBF16, RoundE4M3 and their AVX2 forms), the same code asmgen/gen.go
// uses for the Acc softmax kernels.
package main

import (
	"bytes"
	"fmt"
	"math"
	"math/bits"
	"os"
	"strings"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/tile/asmgen/emit"
)

type asm struct{ bytes.Buffer }

func (a *asm) f(format string, args ...any) {
	fmt.Fprintf(&a.Buffer, format, args...)
	a.WriteByte('\n')
}

// constant table lanesc: 4-byte entries, broadcast by the kernels.
var cnames = []string{"ninf", "c0", "c1", "c2", "c3", "c4", "c5", "c6", "one", "r7fff", "hi16", "r7ffff", "hi12", "c16384", "sub", "c448", "abs", "pinf"}

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

// genSoftmax emits lanesSoftmax512(s *float32, n int, st *lanesState), n >= 1.
// Register plan: Z31 scale, Z30 valid, Z29 key index, Z28 int 1, Z27 -inf,
// Z26 max, Z24 invT, Z17-Z23 polynomial, Z16 sum, Z15 tsum, Z6-Z13 rounding
// constants, Z0-Z5 scratch. GP: SI s, CX n, BX state, DI running pointer,
// DX count.
func genSoftmax(a *asm) {
	exp2 := func(in, out, t1, t2 int, mask string) { emit.Exp2(a.f, in, out, t1, t2, mask) }
	a.f("// func lanesSoftmax512(s *float32, n int, st *lanesState)")
	a.f("TEXT ·lanesSoftmax512(SB), NOSPLIT, $0-24")
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
	genQKT(a, isaAVX512)
	for _, d := range fixedD {
		genQKT(a, isaAVX512.withRowStride(4*d))
	}
	genSoftmax(a)
	genPVT512(a, isaAVX512)
	genConvRest(a)
	genQKT(a, isaAVX512E4M3)
	genPVT512(a, isaAVX512E4M3)
	genQKT(a, isaAVX512BF16)
	genPVT512(a, isaAVX512BF16)
	a2 := &asm{}
	genAVX2(a2)
	ab := &asm{}
	ab.f("// Code generated by asmgen/lanes/gen.go; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\n#include \"textflag.h\"\n")
	genQKBF16(ab, false)
	genQKBF16(ab, true)
	genPVBF16(ab)
	for file, b := range map[string]*asm{"lanes_avx512_amd64.s": a, "lanes_avx2_amd64.s": a2, "lanes_bf16_amd64.s": ab} {
		if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// AVX2 kernels: each 16-row vector is two ymm halves (rows 0-7, 8-15), so
// that 16 ymm registers hold 12 accumulators (6 keys or columns), the two
// halves of Q^T or P^T and the broadcast registers Y14 and Y15:
//
//   - lanesQKT: per column 2 loads of Q, 6 scalar broadcasts of K and 12
//     multiply-adds.
//   - lanesSoftmaxAVX2: lanesSoftmax512 on two halves per vector with the
//     AVX2 exp2 of the avx2 Acc tier (emit.Exp2AVX2).
//   - lanesPVT: per key 2 loads of P^T, 6 scalar broadcasts of V and 12
//     multiply-adds.
//   - lanesQKTBF16, lanesPVTBF16: the same on bf16 rows read in place
//     (vecISA.bf16): one dword broadcast per two columns, widened by a
//     shift and a mask; Q.K in groups of 5 keys, as Q^T of both columns
//     takes four registers. They spare the stager's float32 stores, at
//     94% of the float32 Q.K kernel's rate (`go test ./kernels/tile -run
//     '^$' -bench LanesUpdate`).
//   - lanesQKTE4M3, lanesPVTE4M3: the same on e4m3fn rows read in place
//     (vecISA.e4m3): each byte indexes a 256-entry float32 table
//     (lanesE4M3Div256, value / 256, the form attn's AVX2 decode stages)
//     and the broadcast reads the entry, so the conversion costs two loads
//     and no vector instruction, which on Zen 4 keeps a 128-key FP8
//     decode block in cache at about 86% of the FMA peak (`go test
//     ./kernels/attn -run '^$' -bench 'DecodeBlock/tier=avx2/staged=e4m3'`),
//     where an F16C conversion (VCVTPH2PS through float16) between the
//     multiply-adds would compete with them for the FP pipes; the table
//     also maps the two NaN bytes to NaN, so no chunk needs a NaN scan.
//   - lanesBF16MaxAVX2: the V guard's finite-maximum scan of bf16 rows
//     read in place.
//
// One call covers a whole chunk of keys or all columns, so the Go side
// pays one call per chunk.

// cnames8: the constant table lanesc8, 8 copies of each (32 bytes).
var cnames8 = []string{"ninf", "lo256", "c0", "c1", "c2", "c3", "c4", "c5", "c6", "b127", "one", "r7fff", "hi16", "r7ffff", "hi12", "c16384", "sub", "c448", "w7fff", "w80"}

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
	genQKT(a, isaAVX2)
	genSoftmax2(a)
	genPVT(a, isaAVX2)
	genQKT(a, isaAVX2BF16)
	genPVT(a, isaAVX2BF16)
	genBF16Max(a)
	genQKT(a, isaAVX2E4M3)
	genPVT(a, isaAVX2E4M3)
	genE4M3Table(a)
}

// genE4M3Table emits the float32 tables of the e4m3 kernels (vecISA.e4m3):
// lanesE4M3Div256 (AVX2), whose entry b is the float32 bits of e4m3fn byte
// b's value / 256, as attn's AVX2 decode stages e4m3fn rows (exact; the
// two NaN bytes keep the sign and payload of lowp's NaN, which a multiply
// by 1/256 leaves as they are), and lanesE4M3F32 (AVX-512), the value.
func genE4M3Table(a *asm) {
	for b := range 256 {
		x := lowp.Float8E4M3FN(b).Float32()
		bits := math.Float32bits(x)
		if !math.IsNaN(float64(x)) {
			bits = math.Float32bits(x / 256)
		}
		a.f("DATA ·lanesE4M3Div256+%d(SB)/4, $0x%08x", 4*b, bits)
	}
	a.f("GLOBL ·lanesE4M3Div256(SB), RODATA|NOPTR, $1024\n")
	for b := range 256 {
		a.f("DATA ·lanesE4M3F32+%d(SB)/4, $0x%08x", 4*b, math.Float32bits(lowp.Float8E4M3FN(b).Float32()))
	}
	a.f("GLOBL ·lanesE4M3F32(SB), RODATA|NOPTR, $1024\n")
}

// genBF16Max emits lanesBF16MaxAVX2(p unsafe.Pointer, n int, mx
// *[16]int16), n > 0 a multiple of 8: the scan of V's overflow guard over
// n bf16 values read in place. Lane w of mx ends as the largest |x| + 0x80
// (16-bit patterns as int16) over the finite values in word lane w of the
// 16-value steps (8 in the last step when n is odd in 8s), where infinities
// and NaNs become negative and so never win; 0 where a lane saw none. The
// caller takes the maximum over the lanes and subtracts 0x80.
func genBF16Max(a *asm) {
	a.f("// func lanesBF16MaxAVX2(p unsafe.Pointer, n int, mx *[16]int16)")
	a.f("TEXT ·lanesBF16MaxAVX2(SB), NOSPLIT, $0-24")
	a.f("\tMOVQ p+0(FP), SI")
	a.f("\tMOVQ n+8(FP), CX")
	a.f("\tMOVQ mx+16(FP), DI")
	a.f("\tVMOVDQU %s, Y14 // |x| mask", c8("w7fff"))
	a.f("\tVMOVDQU %s, Y15 // finite bias", c8("w80"))
	a.f("\tVPXOR Y0, Y0, Y0")
	a.f("\tVPXOR Y1, Y1, Y1")
	a.f("max32:")
	a.f("\tCMPQ CX, $32")
	a.f("\tJLT max16")
	for r := 0; r < 2; r++ {
		a.f("\tVPAND %d(SI), Y14, Y%d", 32*r, 2+r)
		a.f("\tVPADDW Y15, Y%d, Y%d", 2+r, 2+r)
		a.f("\tVPMAXSW Y%d, Y%d, Y%d", 2+r, r, r)
	}
	a.f("\tADDQ $64, SI")
	a.f("\tSUBQ $32, CX")
	a.f("\tJMP max32")
	a.f("max16:")
	a.f("\tCMPQ CX, $16")
	a.f("\tJLT max8")
	a.f("\tVPAND (SI), Y14, Y2")
	a.f("\tVPADDW Y15, Y2, Y2")
	a.f("\tVPMAXSW Y2, Y0, Y0")
	a.f("\tADDQ $32, SI")
	a.f("\tSUBQ $16, CX")
	a.f("max8:")
	a.f("\tTESTQ CX, CX")
	a.f("\tJZ maxdone")
	a.f("\tVPAND (SI), X14, X2 // the last 8 values (the upper lanes stay 0)")
	a.f("\tVPADDW X15, X2, X2")
	a.f("\tVPMAXSW Y2, Y1, Y1")
	a.f("maxdone:")
	a.f("\tVPMAXSW Y1, Y0, Y0")
	a.f("\tVMOVDQU Y0, (DI)")
	a.f("\tVZEROUPPER")
	a.f("\tRET\n")
}

// lanesConv offsets (lanes_amd64_test.go checks them), its source
// formats (kind: e4m3fn, bf16, bf16 with the finite-maximum scan) and e4m3
// table offsets (E4M3Tables: byte 2 and byte 3 tables, 128 bytes each, the
// dword permutation, the sign mask).
const (
	offCvSrc   = 0
	offCvDst   = 8
	offCvUnits = 16
	offCvCd    = 24
	offCvPer   = 32
	offCvTab   = 40
	offCvKind  = 48
	offCvMax   = 64
	kindE4M3   = 0
	kindBF16   = 1
	kindBF16M  = 2
	offTabB3   = 128
	offTabPerm = 256
	offTabSign = 320
)

// convRegs are the registers an AVX-512 kernel gives its side conversion
// (lanesConv): job the job pointer (the kernel's last argument), tmp a
// scratch GP register, perm the dword permutation, zero a zero vector and
// five scratch vectors t.
type convRegs struct {
	job, tmp   string
	perm, zero int
	t          [5]int
}

var (
	// Q.K: Z0-Z11 accumulators and Z28-Z31 Q^T leave Z12-Z27; DX is free
	// once the prefetch cursor is loaded.
	qkConv = convRegs{job: "R15", tmp: "DX", perm: 12, zero: 13, t: [5]int{14, 15, 16, 17, 18}}
	// P.V: Z0-Z23 accumulators and Z24 P^T leave Z25-Z31 (alpha, Z25, is
	// used before the loop).
	pvConv = convRegs{job: "R15", tmp: "BX", perm: 25, zero: 26, t: [5]int{27, 28, 29, 30, 31}}
)

// convSetup loads the job pointer from arg and the conversion's constant
// vectors.
func convSetup(a *asm, arg string, r convRegs) {
	a.f("\tMOVQ %s, %s // side conversion job", arg, r.job)
	a.f("\tMOVQ %d(%s), %s", offCvTab, r.job, r.tmp)
	a.f("\tVMOVDQU64 %d(%s), Z%d // e4m3 dword permutation", offTabPerm, r.tmp, r.perm)
	a.f("\tVPXORD Z%d, Z%d, Z%d", r.zero, r.zero, r.zero)
}

// orNothing returns load, or a function that emits nothing when load is
// nil (the conversion's sources and destination already in registers).
func orNothing(load func(off int, what string)) func(off int, what string) {
	if load == nil {
		return func(int, string) {}
	}
	return load
}

// convCore emits the widening of 64 e4m3fn bytes at register src into 64
// float32 at register dst with the tables at register tab (the instruction
// sequence of tile.WidenE4M3x64 and the side conversion: two 128-entry byte tables give
// bytes 2 and 3 of each float32, the sign is ORed into byte 3, in-lane
// unpacks build the dwords after a dword permutation of the input). When
// the three are one scratch register, load (non-nil) emits the loads of
// each from the job before its use.
func convCore(a *asm, r convRegs, src, tab, dst string, load func(off int, what string)) {
	z := func(i int) string { return fmt.Sprintf("Z%d", r.t[i]) }
	ld := orNothing(load)
	ld(offCvSrc, "e4m3 source")
	a.f("\tVPERMD (%s), Z%d, %s // bytes in unpack order", src, r.perm, z(0))
	ld(offCvTab, "tables")
	a.f("\tVMOVDQU64 (%s), %s", tab, z(1))
	a.f("\tVPERMT2B 64(%s), %s, %s // byte 2 of each float32", tab, z(0), z(1))
	a.f("\tVMOVDQU64 %d(%s), %s", offTabB3, tab, z(2))
	a.f("\tVPERMT2B %d(%s), %s, %s // byte 3 without the sign", offTabB3+64, tab, z(0), z(2))
	a.f("\tVPTERNLOGD.BCST $0xf8, %d(%s), %s, %s // |= the sign", offTabSign, tab, z(0), z(2))
	a.f("\tVPUNPCKLBW %s, %s, %s // words b2 | b3 << 8", z(2), z(1), z(3))
	a.f("\tVPUNPCKHBW %s, %s, %s", z(2), z(1), z(4))
	ld(offCvDst, "float32 destination")
	a.f("\tVPUNPCKLWD %s, Z%d, %s // dwords word << 16", z(3), r.zero, z(0))
	a.f("\tVPUNPCKHWD %s, Z%d, %s", z(3), r.zero, z(1))
	a.f("\tVPUNPCKLWD %s, Z%d, %s", z(4), r.zero, z(2))
	a.f("\tVPUNPCKHWD %s, Z%d, %s", z(4), r.zero, z(3))
	for i := 0; i < 4; i++ {
		a.f("\tVMOVDQU64 %s, %d(%s)", z(i), 64*i, dst)
	}
}

// bf16Core emits the widening of 64 bf16 values at register src into 64
// float32 at register dst (a zero extension and a shift by 16 per 16
// values: the plain widening, bit for bit). With scan it also folds the
// largest finite |x| bits of the 64 values into the 16 dwords at maxMem
// (K1 the finiteness mask). When src and dst are one scratch register,
// load (non-nil) emits the loads of each from the job before its use.
func bf16Core(a *asm, r convRegs, src, dst string, scan bool, maxMem string, load func(off int, what string)) {
	z := func(i int) string { return fmt.Sprintf("Z%d", r.t[i]) }
	ld := orNothing(load)
	ld(offCvSrc, "bf16 source")
	for i := 0; i < 4; i++ {
		a.f("\tVPMOVZXWD %d(%s), %s", 32*i, src, z(i))
	}
	ld(offCvDst, "float32 destination")
	for i := 0; i < 4; i++ {
		a.f("\tVPSLLD $16, %s, %s", z(i), z(i))
		a.f("\tVMOVDQU64 %s, %d(%s)", z(i), 64*i, dst)
	}
	if !scan {
		return
	}
	a.f("\tVMOVDQU32 %s, %s // running finite maximum", maxMem, z(4))
	for i := 0; i < 4; i++ {
		a.f("\tVPANDD.BCST %s, %s, %s // |x| bits", c("abs"), z(i), z(i))
		a.f("\tVPCMPUD.BCST $1, %s, %s, K1 // finite", c("pinf"), z(i))
		a.f("\tVPMAXUD %s, %s, K1, %s", z(i), z(4), z(4))
	}
	a.f("\tVMOVDQU32 %s, %s", z(4), maxMem)
}

// convUnit emits one countdown step of the side conversion inside a kernel
// loop: when the job's countdown reaches zero (then reset to its period)
// and units are left, 64 values at the job's src are widened to float32 at
// its dst (convCore for e4m3fn, bf16Core for bf16, with the job in memory
// and one scratch register) and both addresses advanced; label names the
// skip target.
func convUnit(a *asm, r convRegs, label string) {
	j, t := r.job, r.tmp
	a.f("\tDECQ %d(%s) // side conversion: countdown", offCvCd, j)
	a.f("\tJNZ %s", label)
	a.f("\tMOVQ %d(%s), %s", offCvPer, j, t)
	a.f("\tMOVQ %s, %d(%s) // next unit after per iterations", t, offCvCd, j)
	a.f("\tCMPQ %d(%s), $0", offCvUnits, j)
	a.f("\tJEQ %s", label)
	a.f("\tDECQ %d(%s)", offCvUnits, j)
	load := func(off int, what string) { a.f("\tMOVQ %d(%s), %s // %s", off, j, t, what) }
	maxMem := fmt.Sprintf("%d(%s)", offCvMax, j)
	a.f("\tCMPQ %d(%s), $%d", offCvKind, j, kindE4M3)
	a.f("\tJNE %sbf", label)
	convCore(a, r, t, t, t, load)
	a.f("\tADDQ $64, %d(%s)", offCvSrc, j)
	a.f("\tJMP %sadv", label)
	a.f("%sbf:", label)
	a.f("\tCMPQ %d(%s), $%d", offCvKind, j, kindBF16)
	a.f("\tJNE %sbm", label)
	bf16Core(a, r, t, t, false, maxMem, load)
	a.f("\tJMP %sbadv", label)
	a.f("%sbm:", label)
	bf16Core(a, r, t, t, true, maxMem, load)
	a.f("%sbadv:", label)
	a.f("\tADDQ $128, %d(%s)", offCvSrc, j)
	a.f("%sadv:", label)
	a.f("\tADDQ $256, %d(%s)", offCvDst, j)
	a.f("%s:", label)
}

// genConvRest emits lanesConvRest512(cv *lanesConv): when the job has
// units left, one loop per source format (tables in BX) with the count in
// CX and the addresses in SI and DI, then the advanced addresses and no
// units left stored back in the job.
func genConvRest(a *asm) {
	r := convRegs{job: "R15", tmp: "BX", perm: 0, zero: 1, t: [5]int{2, 3, 4, 5, 6}}
	maxMem := fmt.Sprintf("%d(%s)", offCvMax, r.job)
	a.f("// func lanesConvRest512(cv *lanesConv)")
	a.f("TEXT ·lanesConvRest512(SB), NOSPLIT, $0-8")
	convSetup(a, "cv+0(FP)", r) // leaves the tables' address in BX
	a.f("\tMOVQ %d(%s), CX", offCvUnits, r.job)
	a.f("\tTESTQ CX, CX")
	a.f("\tJEQ restdone")
	a.f("\tMOVQ %d(%s), SI", offCvSrc, r.job)
	a.f("\tMOVQ %d(%s), DI", offCvDst, r.job)
	a.f("\tMOVQ %d(%s), DX", offCvKind, r.job)
	a.f("\tCMPQ DX, $%d", kindBF16)
	a.f("\tJEQ restbf")
	a.f("\tCMPQ DX, $%d", kindBF16M)
	a.f("\tJEQ restbm")
	// One loop per kind: its label, the unit's bytes of source (256 of
	// float32 destination each), its body.
	for _, k := range []struct {
		lbl  string
		step int
		body func()
	}{
		{"rest", 64, func() { convCore(a, r, "SI", "BX", "DI", nil) }},
		{"restbf", 128, func() { bf16Core(a, r, "SI", "DI", false, maxMem, nil) }},
		{"restbm", 128, func() { bf16Core(a, r, "SI", "DI", true, maxMem, nil) }},
	} {
		a.f("%s:", k.lbl)
		k.body()
		a.f("\tADDQ $%d, SI", k.step)
		a.f("\tADDQ $256, DI")
		a.f("\tDECQ CX")
		a.f("\tJNZ %s", k.lbl)
		a.f("\tJMP reststore")
	}
	a.f("reststore:")
	a.f("\tMOVQ SI, %d(%s)", offCvSrc, r.job)
	a.f("\tMOVQ DI, %d(%s)", offCvDst, r.job)
	a.f("\tMOVQ $0, %d(%s)", offCvUnits, r.job)
	a.f("restdone:")
	a.f("\tVZEROUPPER")
	a.f("\tRET\n")
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

// pvtPrologue emits the head of a P.V kernel of the transposed layout
// (lanesPVT, lanesPVT512: the same arguments): the prefetch cursor in
// R14/R9/R10/R13, V column R12, ldv R8, O^T DI, alpha AX, columns left R11.
func pvtPrologue(a *asm, name string, isa vecISA) {
	if isa.conv() {
		a.f("// func %s(p *float32, v *float32, ldv uintptr, n int, o *float32, alpha *float32, d int, pf *lanesPrefetch, cv *lanesConv)", name)
		a.f("TEXT ·%s(SB), NOSPLIT, $0-72", name)
	} else {
		a.f("// func %s(p *float32, v %s, ldv uintptr, n int, o *float32, alpha *float32, d int, pf *lanesPrefetch)", name, isa.rowsType())
		a.f("TEXT ·%s(SB), NOSPLIT, $0-64", name)
	}
	loadPf(a, "pf+56(FP)", "R14", pvPf)
	if isa.conv() {
		convSetup(a, "cv+64(FP)", pvConv)
	}
	prologueTables(a, isa, true)
	a.f("\tMOVQ v+8(FP), R12")
	a.f("\tMOVQ ldv+16(FP), R8")
	a.f("\tMOVQ o+32(FP), DI")
	a.f("\tMOVQ alpha+40(FP), AX")
	a.f("\tMOVQ d+48(FP), R11")
}

// qktEpilogue emits the end of a Q.K kernel of the transposed layout
// (label keys0): the advanced prefetch cursor stored back through the pf
// argument (DX is the side conversion's scratch in the loop).
func qktEpilogue(a *asm) {
	a.f("keys0:")
	a.f("\tMOVQ pf+48(FP), DX")
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
func genPVT(a *asm, isa vecISA) {
	pvtPrologue(a, "lanesPVT"+isa.suffix, isa)
	a.f("cols:")
	a.f("\tCMPQ R11, $8")
	a.f("\tJEQ cols4")
	a.f("\tCMPQ R11, $6")
	a.f("\tJLT cols4")
	for _, C := range []int{6, 4} {
		if C == 4 {
			a.f("cols4:")
		}
		pvtGroup(a, isa, C)
	}
	a.f("")
}

// vecISA is the vector ISA of a kernel of the transposed layout: how a
// 16-row vector (one column of Q^T or O^T, one key's S^T or P^T) is held,
// and how the rows of a key group are addressed.
type vecISA struct {
	avx512 bool
	suffix string // kernel name suffix: "" (AVX2), "512"
	groups []int  // Q.K key-group sizes, largest first (the first a multiple of 3, the others 8, 4, 2 or 1)
	// Q.K: key rows of a group as memory operands (base register and
	// index), columns per loop iteration.
	rows    []string
	perBase int // rows per base register (SI, DI, R10)
	qkCols  int
	// qkPrefetch is the number of prefetch steps per Q.K iteration (P.V:
	// one): AVX-512 runs 4x fewer Q.K iterations per key than AVX2 and
	// takes two steps, so that a BF16 key block (512 lines at d = 128) is
	// covered by the ~350 iterations of a 128-key update.
	qkPrefetch int
	// ld, when non-zero, is the key rows' stride in bytes, fixed in the
	// kernel (suffix "d" and the head dimension): row j of a group is a
	// displacement from SI alone. Without it the rows are SI, DI, R10
	// plus an index (R8, 2*R8, R9 = 3*R8), and on Intel cores with two
	// 512-bit FMA units an indexed memory operand lowers the broadcast
	// multiply-add rate.
	ld int
	// bf16: the K or V rows are bfloat16, read in place. One dword holds
	// the values of two adjacent columns c (low half) and c+1 (high half);
	// a shift left by 16 widens the first and an AND with the high-half
	// mask the second, exactly (a bf16 is the high half of its float32).
	// AVX2 broadcasts the dword once and widens the copy in registers;
	// Q.K then keeps Q^T of both columns in Y10-Y13, so a group has at most
	// 5 keys (Y0-Y9). AVX-512 makes the dword the embedded broadcast of
	// the shift and of the AND (VPSLLD.BCST, VPANDD.BCST with the mask in
	// bf16Mask), each into a register of its own (bf16Tmp) that the
	// multiply-add then reads: one load and one vector logic operation
	// per multiply-add.
	bf16 bool
	// e4m3: the K or V rows are e4m3fn bytes, read in place. Each byte
	// is zero-extended into a GP register (MOVBLZX) and indexes a
	// 256-entry float32 table (e4m3Table: value / 256 for AVX2, the value
	// for AVX-512; NaN bytes as NaN), whose entry is the broadcast operand:
	// two loads per value and no vector instruction besides the
	// multiply-adds.
	e4m3 bool
}

// e4m3Regs are the GP registers of an e4m3 kernel's table lookups: tab the
// table's address, idx the byte registers, used in turn.
type e4m3Regs struct {
	tab string
	idx []string
}

// e4m3Regs returns the registers of isa's Q.K (pv false) or P.V e4m3
// kernel. AVX2 Q.K: R10 (a third row base only with AVX-512), DX (the
// prefetch argument's pointer, reloaded at the end) and R15 are free in
// the loop; AVX-512 Q.K: R15 (the side conversion's job in the float32
// kernels) and DX. P.V: R15 and BX (the conversion's job and scratch in
// the AVX-512 float32 kernel).
func (isa vecISA) e4m3Regs(pv bool) e4m3Regs {
	switch {
	case pv:
		return e4m3Regs{tab: "R15", idx: []string{"BX"}}
	case isa.avx512:
		return e4m3Regs{tab: "R15", idx: []string{"DX"}}
	}
	return e4m3Regs{tab: "R10", idx: []string{"DX", "R15"}}
}

// e4m3Table is the table of isa's e4m3 kernels: value / 256 for AVX2 (the
// form attn's AVX2 decode stages), the value for AVX-512.
func (isa vecISA) e4m3Table() string {
	if isa.avx512 {
		return "lanesE4M3F32"
	}
	return "lanesE4M3Div256"
}

// conv reports whether the ISA's kernels run a side conversion (their
// last argument cv *lanesConv): the AVX-512 float32 ones.
func (isa vecISA) conv() bool { return isa.avx512 && !isa.e4m3 && !isa.bf16 }

// bf16Mask is the zmm register of the AVX-512 bf16 kernels' high-half
// mask (0xffff0000 in every lane), loaded in their prologue.
const bf16Mask = 27

// bf16Tmp returns the zmm registers the AVX-512 bf16 Q.K (pv false) or
// P.V kernel widens its broadcasts into, used in turn: Q.K keeps Z0-Z11
// (accumulators) and Z28-Z31 (Q^T), P.V Z0-Z23 (accumulators) and Z24
// (P^T); neither runs a side conversion.
func (isa vecISA) bf16Tmp(pv bool) []int {
	if pv {
		return []int{25, 26, 28, 29, 30, 31}
	}
	return []int{12, 13, 14, 15, 16, 17, 18, 19}
}

// prologueTables emits the loads of the constants isa's kernels keep in
// registers through the loop (pv: the P.V kernel): an e4m3 kernel's table
// address, an AVX-512 bf16 kernel's high-half mask.
func prologueTables(a *asm, isa vecISA, pv bool) {
	switch {
	case isa.e4m3:
		a.f("\tLEAQ ·%s(SB), %s // the e4m3fn table", isa.e4m3Table(), isa.e4m3Regs(pv).tab)
	case isa.bf16 && isa.avx512:
		a.f("\tVPBROADCASTD %s, Z%d // high-half mask", c("hi16"), bf16Mask)
	}
}

// elem is the size in bytes of one K or V value.
func (isa vecISA) elem() int {
	switch {
	case isa.bf16:
		return 2
	case isa.e4m3:
		return 1
	}
	return 4
}

// rowsType is the Go type of a kernel's K or V row argument.
func (isa vecISA) rowsType() string {
	if isa.elem() < 4 {
		return "unsafe.Pointer"
	}
	return "*float32"
}

// fixedD are the head dimensions whose AVX-512 Q.K kernel has the key
// row stride (4*d bytes) as a constant (vecISA.ld): lanesQKT512d64,
// lanesQKT512d128, lanesQKT512d256.
var fixedD = []int{64, 128, 256}

// withRowStride returns isa with the key rows ld bytes apart, fixed.
func (isa vecISA) withRowStride(ld int) vecISA {
	isa.ld = ld
	isa.suffix += fmt.Sprintf("d%d", ld/4)
	isa.perBase = len(isa.rows) // one base register
	return isa
}

// row returns the memory operand of key row j of a group, disp bytes on.
func (isa vecISA) row(j, disp int) string {
	if isa.ld > 0 {
		return fmt.Sprintf("%d(SI)", disp+j*isa.ld)
	}
	return fmt.Sprintf("%d%s", disp, isa.rows[j])
}

var (
	isaAVX2 = vecISA{
		groups:  []int{6, 4, 2, 1},
		rows:    []string{"(SI)", "(SI)(R8*1)", "(SI)(R8*2)", "(DI)", "(DI)(R8*1)", "(DI)(R8*2)"},
		perBase: 3,
		qkCols:  2,
	}
	isaAVX2BF16 = vecISA{
		suffix:  "BF16",
		groups:  []int{5, 4, 2, 1},
		rows:    isaAVX2.rows[:5],
		perBase: 3,
		qkCols:  2,
		bf16:    true,
	}
	isaAVX2E4M3 = vecISA{
		suffix:  "E4M3",
		groups:  isaAVX2.groups,
		rows:    isaAVX2.rows,
		perBase: 3,
		qkCols:  2,
		e4m3:    true,
	}
	isaAVX512 = vecISA{
		avx512: true,
		suffix: "512",
		groups: []int{12, 8, 4, 2, 1},
		rows: []string{"(SI)", "(SI)(R8*1)", "(SI)(R8*2)", "(SI)(R9*1)",
			"(DI)", "(DI)(R8*1)", "(DI)(R8*2)", "(DI)(R9*1)",
			"(R10)", "(R10)(R8*1)", "(R10)(R8*2)", "(R10)(R9*1)"},
		perBase:    4,
		qkCols:     4,
		qkPrefetch: 2,
	}
	isaAVX512E4M3 = func() vecISA {
		isa := isaAVX512
		isa.suffix, isa.e4m3 = "512E4M3", true
		return isa
	}()
	isaAVX512BF16 = func() vecISA {
		isa := isaAVX512
		isa.suffix, isa.bf16 = "512BF16", true
		return isa
	}()
)

// reg is the vector register prefix of the ISA.
func (isa vecISA) reg() string {
	if isa.avx512 {
		return "Z"
	}
	return "Y"
}

// colBody emits the loop of a kernel of the transposed layout with B
// output vectors j (16 rows each, already initialised): out^T[j] += sum
// over t < T of A^T[t] * b(j, t), t increasing, one FMA per product, A^T[t]
// = 16 floats, b(j, t) one float broadcast from memory.
//
//   - AVX2: output vector j is Y(2j) (rows 0-7) and Y(2j+1) (rows 8-15),
//     A^T[t] is Y12, Y13, b(j, t) is broadcast into Y14 / Y15 in turn.
//   - AVX-512: output vector j is Z(j), A^T[t] is one zmm (Z28-Z31, Q.K;
//     Z24, P.V) and b(j, t) the embedded broadcast of the multiply-add.
//   - Q.K (pv false): A = Q^T at AX + 64t, T = d (CX = d/qkCols iterations
//     of qkCols columns), b(j, t) = K[j][t] at isa.rows[j] + 4t.
//   - P.V (pv true): A = P^T at SI + 64t, T = n (CX), b(j, t) = V[t][j] at
//     DX + 4j + t*ldv.
//
// Q.K and P.V are one shape: an output vector per key or per column, summed
// over columns or over keys. Every iteration first prefetches the line at
// the cursor pf and advances it (Lanes.PrefetchNext), isa.qkPrefetch times
// in the AVX-512 Q.K loop. AVX-512 iterations then run the side
// conversion's countdown (convUnit): every per-th iteration widens 64
// e4m3 values of the next chunk between the multiply-adds.
func colBody(a *asm, isa vecISA, B int, pv bool, label string, pf [3]string) {
	cv := qkConv
	if pv {
		cv = pvConv
	}
	// fma accumulates A^T (vector av) times the float at mem into output j;
	// u alternates the AVX2 broadcast register.
	fma := func(j, av, u int, mem, what string) {
		if isa.e4m3 {
			r := isa.e4m3Regs(pv)
			x := r.idx[u%len(r.idx)]
			a.f("\tMOVBLZX %s, %s // %s", mem, x, what)
			mem = fmt.Sprintf("(%s)(%s*4)", r.tab, x)
			what = "its float32 / 256"
		}
		if isa.avx512 {
			a.f("\tVFMADD231PS.BCST %s, Z%d, Z%d // %s", mem, av, j, what)
			return
		}
		b := 14 + u%2 // broadcast registers in turn
		a.f("\tVBROADCASTSS %s, Y%d // %s", mem, b, what)
		a.f("\tVFMADD231PS Y%d, Y12, Y%d", b, 2*j)
		a.f("\tVFMADD231PS Y%d, Y13, Y%d", b, 2*j+1)
	}
	// loadA loads A^T at mem into vector av (AVX2: Y12, Y13).
	loadA := func(off int, base string, av int, what string) {
		if isa.avx512 {
			a.f("\tVMOVUPS %d(%s), Z%d // %s", off, base, av, what)
			return
		}
		a.f("\tVMOVUPS %d(%s), Y12 // %s, rows 0-7", off, base, what)
		a.f("\tVMOVUPS %d(%s), Y13 // rows 8-15", off+32, base)
	}
	// pair accumulates the two columns in the dword at mem into outputs j
	// (column c, A^T in ylo) and k (column c+1, A^T in yhi) of a bf16
	// kernel (AVX2: ylo and yhi are ymm halves; AVX-512: one zmm each).
	pair := func(j, k int, ylo, yhi [2]int, mem, what string) {
		if isa.avx512 {
			t := isa.bf16Tmp(pv)
			t0, t1 := t[(2*j)%len(t)], t[(2*j+1)%len(t)]
			a.f("\tVPSLLD.BCST $16, %s, Z%d // %s: the first widened", mem, t0, what)
			a.f("\tVFMADD231PS Z%d, Z%d, Z%d", t0, ylo[0], j)
			a.f("\tVPANDD.BCST %s, Z%d, Z%d // the second", mem, bf16Mask, t1)
			a.f("\tVFMADD231PS Z%d, Z%d, Z%d", t1, yhi[0], k)
			return
		}
		a.f("\tVBROADCASTSS %s, Y14 // %s", mem, what)
		a.f("\tVPSLLD $16, Y14, Y15")
		a.f("\tVFMADD231PS Y15, Y%d, Y%d", ylo[0], 2*j)
		a.f("\tVFMADD231PS Y15, Y%d, Y%d", ylo[1], 2*j+1)
		a.f("\tVPAND %s, Y14, Y14", c8("hi16"))
		a.f("\tVFMADD231PS Y14, Y%d, Y%d", yhi[0], 2*k)
		a.f("\tVFMADD231PS Y14, Y%d, Y%d", yhi[1], 2*k+1)
	}
	a.f("%s:", label)
	pfSteps := 1
	if isa.avx512 && !pv {
		pfSteps = isa.qkPrefetch
	}
	for range pfSteps {
		a.f("\tPREFETCHT1 (%s) // the following block into L2, spread over the iterations", pf[0])
		a.f("\tADDQ %s, %s", pf[1], pf[0])
		a.f("\tCMPQ %s, %s", pf[0], pf[2])
		a.f("\tCMOVQGT %s, %s // stay on the last line", pf[2], pf[0])
	}
	if isa.conv() {
		convUnit(a, cv, label+"cv")
	}
	if pv {
		loadA(0, "SI", 24, "P^T[i]")
		if isa.bf16 {
			for j := 0; j < B; j += 2 {
				pt := [2]int{12, 13}
				if isa.avx512 {
					pt = [2]int{24}
				}
				pair(j, j+1, pt, pt, fmt.Sprintf("%d(DX)", 2*j), fmt.Sprintf("V[i][c0+%d], V[i][c0+%d]", j, j+1))
			}
		} else {
			for j := 0; j < B; j++ {
				fma(j, 24, j, fmt.Sprintf("%d(DX)", isa.elem()*j), fmt.Sprintf("V[i][c0+%d]", j))
			}
		}
		a.f("\tADDQ $64, SI")
		a.f("\tADDQ R8, DX")
	} else {
		U := isa.qkCols
		switch {
		case isa.bf16 && isa.avx512:
			for u := 0; u < U; u++ {
				loadA(64*u, "AX", 28+u, fmt.Sprintf("Q^T[c+%d]", u))
			}
			for x := 0; x < U; x += 2 {
				for j := 0; j < B; j++ {
					pair(j, j, [2]int{28 + x}, [2]int{29 + x}, isa.row(j, 2*x), fmt.Sprintf("K[%d][c+%d], K[%d][c+%d]", j, x, j, x+1))
				}
			}
		case isa.bf16:
			a.f("\tVMOVUPS 0(AX), Y10 // Q^T[c], rows 0-7")
			a.f("\tVMOVUPS 32(AX), Y11 // rows 8-15")
			a.f("\tVMOVUPS 64(AX), Y12 // Q^T[c+1], rows 0-7")
			a.f("\tVMOVUPS 96(AX), Y13 // rows 8-15")
			for j := 0; j < B; j++ {
				pair(j, j, [2]int{10, 11}, [2]int{12, 13}, isa.row(j, 0), fmt.Sprintf("K[%d][c], K[%d][c+1]", j, j))
			}
		default:
			for u := 0; u < U; u++ {
				loadA(64*u, "AX", 28+u, fmt.Sprintf("Q^T[c+%d]", u))
				if isa.avx512 && u < U-1 {
					continue // all columns' Q^T first, then the multiply-adds
				}
				for x := 0; x <= u; x++ {
					if !isa.avx512 && x < u {
						continue
					}
					for j := 0; j < B; j++ {
						fma(j, 28+x, x*B+j, isa.row(j, isa.elem()*x), fmt.Sprintf("K[%d][c+%d]", j, x))
					}
				}
			}
		}
		a.f("\tADDQ $%d, AX", 64*U)
		for b := 0; b*isa.perBase < B; b++ {
			a.f("\tADDQ $%d, %s", isa.elem()*U, []string{"SI", "DI", "R10"}[b])
		}
	}
	a.f("\tDECQ CX")
	a.f("\tJNZ %s", label)
}

// AVX-512 kernels: one zmm per 16-row vector, the K or V scalar of each
// product the embedded broadcast of its multiply-add.
//
//   - lanesQKT512: per iteration 4 loads of Q^T (4 columns) and 4 x B
//     multiply-adds into the B accumulators of a key group.
//   - lanesSoftmax512 (genSoftmax).
//   - lanesPVT512: per key one load of P^T and C multiply-adds into the C
//     accumulators of a column group.
//   - lanesQKT512E4M3, lanesPVT512E4M3: the same on e4m3fn rows read in
//     place (vecISA.e4m3): each byte indexes the float32 table
//     lanesE4M3F32 and the entry is the embedded broadcast, two loads per
//     multiply-add and no conversion on the vector pipes (the float32
//     kernels' side conversion of the next chunk needs AVX512_VBMI and
//     runs on a shuffle port; tile's lanesInPlace512 picks the route).
//   - lanesQKT512BF16, lanesPVT512BF16: the same on bf16 rows read in
//     place (vecISA.bf16): each dword of two adjacent columns is the
//     embedded broadcast of a shift (the first column) and of an AND with
//     the high-half mask (the second), which the multiply-adds then read;
//     the vector logic runs on the two pipes Zen 4's multiply-adds leave
//     free (the float32 kernels' side conversion of bf16 chunks is the
//     other route).

// genQKT emits the Q.K kernel of isa (lanesQKT, lanesQKT512: qT *float32,
// k *float32, ldk uintptr, d int, s *float32, n int, pf *lanesPrefetch):
// the score vectors of n >= 1 consecutive keys in groups of isa.groups[0]
// keys, then one group of each smaller size as the rest needs (colBody).
// d is a multiple of 8.
// GP: AX Q^T, SI/DI/R10 the group's key rows in runs of isa.perBase, R8
// ldk, R9 3*ldk, CX column steps, BX s, R11 keys left, DX/R12-R14 the
// prefetch cursor.
func genQKT(a *asm, isa vecISA) {
	name := "lanesQKT" + isa.suffix
	if isa.conv() {
		a.f("// func %s(qT *float32, k *float32, ldk uintptr, d int, s *float32, n int, pf *lanesPrefetch, cv *lanesConv)", name)
		a.f("TEXT ·%s(SB), NOSPLIT, $0-64", name)
	} else {
		a.f("// func %s(qT *float32, k %s, ldk uintptr, d int, s *float32, n int, pf *lanesPrefetch)", name, isa.rowsType())
		a.f("TEXT ·%s(SB), NOSPLIT, $0-56", name)
	}
	loadPf(a, "pf+48(FP)", "DX", qkPf)
	if isa.conv() {
		convSetup(a, "cv+56(FP)", qkConv)
	}
	prologueTables(a, isa, false)
	a.f("\tMOVQ k+8(FP), SI")
	a.f("\tMOVQ ldk+16(FP), R8")
	a.f("\tMOVQ s+32(FP), BX")
	a.f("\tMOVQ n+40(FP), R11")
	a.f("\tLEAQ (R8)(R8*2), R9 // 3*ldk")
	bases := []string{"SI", "DI", "R10"}
	// next base = base + perBase*ldk
	step := map[int]string{3: "(R9*1)", 4: "(R8*4)"}[isa.perBase]
	vecs, width := 1, 64 // registers per 16-row vector, bytes per register
	if !isa.avx512 {
		vecs, width = 2, 32
	}
	groups := isa.groups
	for x, B := range groups {
		next := "keys0"
		if x+1 < len(groups) {
			next = fmt.Sprintf("keys%d", groups[x+1])
		}
		a.f("keys%d:", B)
		a.f("\tCMPQ R11, $%d", B)
		a.f("\tJLT %s", next)
		a.f("\tMOVQ qT+0(FP), AX")
		a.f("\tMOVQ d+24(FP), CX")
		a.f("\tSHRQ $%d, CX // column steps of %d", bits.TrailingZeros(uint(isa.qkCols)), isa.qkCols)
		for b := 1; b*isa.perBase < B; b++ {
			a.f("\tLEAQ (%s)%s, %s // key %d", bases[b-1], step, bases[b], b*isa.perBase)
		}
		for y := 0; y < vecs*B; y++ {
			a.f("\tVXORPS %s%d, %s%d, %s%d", isa.reg(), y, isa.reg(), y, isa.reg(), y)
		}
		colBody(a, isa, B, false, fmt.Sprintf("qk%d", B), qkPf)
		a.f("\tMOVQ d+24(FP), CX")
		if sh := bits.TrailingZeros(uint(isa.elem())); sh > 0 {
			a.f("\tSHLQ $%d, CX", sh)
		}
		a.f("\tSUBQ CX, SI // back to the group's first key")
		for y := 0; y < vecs*B; y++ {
			a.f("\tVMOVUPS %s%d, %d(BX)", isa.reg(), y, width*y)
		}
		a.f("\tADDQ $%d, BX", 64*B)
		a.f("\tSUBQ $%d, R11", B)
		switch {
		case x == 0 && B%3 == 0:
			a.f("\tLEAQ (SI)(R9*%d), SI // %d keys on", B/3, B)
			a.f("\tJMP keys%d", B)
		case x == 0 && B == 5:
			a.f("\tLEAQ (SI)(R8*4), SI // 5 keys on")
			a.f("\tADDQ R8, SI")
			a.f("\tJMP keys%d", B)
		case x == 0:
			panic(fmt.Sprintf("no row step for a first key group of %d", B))
		default:
			a.f("\tLEAQ (SI)(R8*%d), SI", B)
		}
	}
	qktEpilogue(a)
}

// genPVT512 emits lanesPVT512(p *float32, v *float32, ldv uintptr, n int, o
// *float32, alpha *float32, d int, pf *lanesPrefetch): all d columns (a
// multiple of 8) of O in groups of 24 columns while at least 40 or exactly
// 24 are left, then 16, then 8, each group over all n >= 1 keys (colBody).
// GP: SI P^T, DX V row, R8 ldv, CX keys left, DI O^T, AX alpha, R11
// columns left, R12 V column, R14/R9/R10/R13 the prefetch cursor.
func genPVT512(a *asm, isa vecISA) {
	pvtPrologue(a, "lanesPVT"+isa.suffix, isa)
	a.f("cols:")
	a.f("\tCMPQ R11, $24")
	a.f("\tJEQ cols24")
	a.f("\tCMPQ R11, $40")
	a.f("\tJGE cols24")
	a.f("\tCMPQ R11, $16")
	a.f("\tJGE cols16")
	a.f("\tJMP cols8")
	for _, C := range []int{24, 16, 8} {
		a.f("cols%d:", C)
		pvtGroup(a, isa, C)
	}
	a.f("")
}

// pvtGroup emits one column group of a P.V kernel (after pvtPrologue, at
// its label colsC): C columns of O^T loaded (times alpha unless alpha is
// nil; AVX2 alpha in Y12/Y13, AVX-512 in Z25) into the accumulators, every
// key added by colBody, stored back; then the next group (label cols) or,
// when no column is left, the prefetch cursor stored and return.
func pvtGroup(a *asm, isa vecISA, C int) {
	r := isa.reg()
	vecs, width := 1, 64 // registers per 16-row vector, bytes per register
	if !isa.avx512 {
		vecs, width = 2, 32
	}
	a.f("\tMOVQ p+0(FP), SI")
	a.f("\tMOVQ R12, DX")
	a.f("\tMOVQ n+24(FP), CX")
	a.f("\tTESTQ AX, AX")
	a.f("\tJZ noalpha%d // nil alpha: O is continued as it is", C)
	alpha := func(y int) int { return 25 }
	if isa.avx512 {
		a.f("\tVMOVUPS (AX), Z25 // alpha, lane = row")
	} else {
		a.f("\tVMOVUPS (AX), Y12 // alpha, rows 0-7")
		a.f("\tVMOVUPS 32(AX), Y13 // rows 8-15")
		alpha = func(y int) int { return 12 + y%2 }
	}
	for y := 0; y < vecs*C; y++ {
		a.f("\tVMULPS %d(DI), %s%d, %s%d // alpha * O", width*y, r, alpha(y), r, y)
	}
	a.f("\tJMP pvgo%d", C)
	a.f("noalpha%d:", C)
	for y := 0; y < vecs*C; y++ {
		a.f("\tVMOVUPS %d(DI), %s%d", width*y, r, y)
	}
	a.f("pvgo%d:", C)
	if isa.conv() {
		a.f("\tMOVQ %d(%s), %s", offCvTab, pvConv.job, pvConv.tmp)
		a.f("\tVMOVDQU64 %d(%s), Z%d // the conversion's permutation again (alpha was in Z25)", offTabPerm, pvConv.tmp, pvConv.perm)
	}
	colBody(a, isa, C, true, fmt.Sprintf("pv%d", C), pvPf)
	for y := 0; y < vecs*C; y++ {
		a.f("\tVMOVUPS %s%d, %d(DI)", r, y, width*y)
	}
	a.f("\tADDQ $%d, R12", isa.elem()*C)
	a.f("\tADDQ $%d, DI", 64*C)
	a.f("\tSUBQ $%d, R11", C)
	a.f("\tJNZ cols")
	a.f("\tMOVQ R9, %d(R14)", offPfAddr)
	a.f("\tVZEROUPPER")
	a.f("\tRET")
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

// The bf16-product lane kernels (lanes_bf16_amd64.go; avx512bf16 tier):
// the lane layout with both products on VDPBF16PS, one bf16 pair per
// 32-bit lane and one instruction per two multiply-adds. The pair operand
// that is shared by all lanes is a dword broadcast (VPBROADCASTD from
// memory: the Go assembler does not know VDPBF16PS, whose register form is
// emitted as BYTE directives by emit.DPBF16Bytes), the per-lane operand
// one zmm of 16 pairs:
//
//   - lanesQKBF16: S^T[i] = sum over column pairs p of Q pair p (16 lanes,
//     amxLanes.qb) . K[i] pair p broadcast (bf16 key rows, row-major), in
//     groups of 12, 4 and 1 keys, one accumulator per key;
//   - lanesPVBF16: O^T[c] = alpha*O^T[c] + sum over key pairs j of P pair
//     j (16 lanes: P[r][2j], P[r][2j+1], amxLanes.pt) . V pair (j, c)
//     broadcast (V rows 2j and 2j+1 interleaved column by column,
//     amxLanes.vb), 16 columns in registers across the pairs.
//
// VDPBF16PS adds the odd elements' product, then the even elements', each
// rounded to float32 (the products of two bf16 values are exact), with
// bf16 subnormal inputs read as zero and subnormal results flushed to zero.

// bf16Key returns the broadcast address of key g of a 12-key group: keys
// 0-3, 4-7 and 8-11 from R10, R11 and R12, each ldk (BX) apart (R9 = 3*ldk).
func bf16Key(g int) emit.Mem {
	m := emit.Mem{Base: []string{"R10", "R11", "R12"}[g/4]}
	switch g % 4 {
	case 1, 2:
		m.Index, m.Scale = "BX", g%4
	case 3:
		m.Index, m.Scale = "R9", 1
	}
	return m
}

// dpbf16Bcst emits VDPBF16PS with its src2 broadcast from m (one bf16
// pair to all lanes), commented in Go operand order like the register
// forms (TestBF16Encoding reads the comment).
func dpbf16Bcst(a *asm, dst, src1 int, m emit.Mem) {
	a.f("\t%s // VDPBF16PS.BCST %s, Z%d, Z%d", emit.DPBF16BcstBytes(dst, src1, m), m, src1, dst)
}

// genQKBF16 emits lanesQKBF16(qb *uint32, k unsafe.Pointer, ldk uintptr,
// pairs int, s *float32, n int): the transposed scores of n keys (rows of
// pairs bf16 pairs, ldk bytes apart) into s, 64 bytes a key. Z0-Z11
// accumulators, Z31 the query pairs of one column pair; each key pair is
// broadcast by its VDPBF16PS's memory operand (dpbf16Bcst), which on Zen 4
// takes the kernel from 2326-2332 to 2277-2300 ns per 128 keys at d =
// 128 (BenchmarkBF16LanesPhases/qk, best of batches), the VDPBF16PS
// bound being 2220. GP: SI qb, R8 the group's first key, BX ldk, R9 3*ldk, CX pairs,
// DI s, DX keys left; AX, R10-R13 loop cursors.
//
// With pairs, it emits lanesQKBF16Pairs(..., job *pairsJob): the same
// scores while it interleaves bf16 value rows into key pairs as
// bf16PairsMax does (job, lanes_bf16_amd64.go): one unit of 32 columns of
// a row pair per iteration of the 12-key loop, whose VDPBF16PS leave the
// load, store and shuffle ports mostly idle, the units left over after the
// scores in a loop of their own. R14 the job, R15 its cursors; Z24 the
// word order, Z25 and Z26 the magnitude mask and the Inf bound, Z27 and Z28
// the maxima of the even and odd rows, Z12-Z17 a unit's rows.
func genQKBF16(a *asm, pairs bool) {
	if pairs {
		a.f("// func lanesQKBF16Pairs(qb *uint32, k unsafe.Pointer, ldk uintptr, pairs int, s *float32, n int, job *pairsJob)")
		a.f("TEXT ·lanesQKBF16Pairs(SB), NOSPLIT, $0-56")
		a.f("\tMOVQ job+48(FP), R14")
		a.f("\tVMOVDQU64 ·bf16PairPerm(SB), Z24")
		a.f("\tMOVL $0x7fff7fff, R15")
		a.f("\tVPBROADCASTD R15, Z25")
		a.f("\tMOVL $0x7f807f80, R15")
		a.f("\tVPBROADCASTD R15, Z26")
		a.f("\tVMOVDQU16 %d(R14), Z27", jobMax)
		a.f("\tVMOVDQA64 Z27, Z28")
	} else {
		a.f("// func lanesQKBF16(qb *uint32, k unsafe.Pointer, ldk uintptr, pairs int, s *float32, n int)")
		a.f("TEXT ·lanesQKBF16(SB), NOSPLIT, $0-48")
	}
	lb := func(l string) string {
		if pairs {
			return "qkbp" + strings.TrimPrefix(l, "qkbf")
		}
		return l
	}
	a.f("\tMOVQ qb+0(FP), SI")
	a.f("\tMOVQ k+8(FP), R8")
	a.f("\tMOVQ ldk+16(FP), BX")
	a.f("\tMOVQ pairs+24(FP), CX")
	a.f("\tMOVQ s+32(FP), DI")
	a.f("\tMOVQ n+40(FP), DX")
	a.f("\tLEAQ (BX)(BX*2), R9")
	a.f("\tTESTQ CX, CX")
	a.f("\tJZ   %s", lb("qkbfdone"))
	for _, G := range []int{12, 4, 1} {
		a.f("%s%dgroup:", lb("qkbf"), G)
		a.f("\tCMPQ DX, $%d", G)
		a.f("\tJLT  %s%dend", lb("qkbf"), G)
		for g := 0; g < G; g++ {
			a.f("\tVPXORD Z%d, Z%d, Z%d", g, g, g)
		}
		a.f("\tMOVQ SI, AX")
		a.f("\tMOVQ R8, R10")
		if G > 4 {
			a.f("\tLEAQ (R8)(BX*4), R11")
			a.f("\tLEAQ (R11)(BX*4), R12")
		}
		a.f("\tMOVQ CX, R13")
		a.f("%s%dloop:", lb("qkbf"), G)
		a.f("\tVMOVDQU32 (AX), Z31")
		for g := 0; g < G; g++ {
			dpbf16Bcst(a, g, 31, bf16Key(g))
		}
		if pairs && G == 12 {
			a.f("\tCMPQ %d(R14), $0", jobLeft)
			a.f("\tJEQ  qkbpunit%d", G)
			pairUnit(a, fmt.Sprintf("qkbpunit%d", G))
			a.f("qkbpunit%d:", G)
		}
		a.f("\tADDQ $64, AX")
		a.f("\tADDQ $4, R10")
		if G > 4 {
			a.f("\tADDQ $4, R11")
			a.f("\tADDQ $4, R12")
		}
		a.f("\tDECQ R13")
		a.f("\tJNZ  %s%dloop", lb("qkbf"), G)
		for g := 0; g < G; g++ {
			a.f("\tVMOVUPS Z%d, %d(DI)", g, 64*g)
		}
		a.f("\tADDQ $%d, DI", 64*G)
		switch G {
		case 12, 4:
			for range G / 4 {
				a.f("\tLEAQ (R8)(BX*4), R8")
			}
		case 1:
			a.f("\tADDQ BX, R8")
		}
		a.f("\tSUBQ $%d, DX", G)
		a.f("\tJMP  %s%dgroup", lb("qkbf"), G)
		a.f("%s%dend:", lb("qkbf"), G)
	}
	a.f("%s:", lb("qkbfdone"))
	if pairs {
		a.f("qkbprest:")
		a.f("\tCMPQ %d(R14), $0", jobLeft)
		a.f("\tJEQ  qkbprestdone")
		pairUnit(a, "qkbprest")
		a.f("\tJMP  qkbprest")
		a.f("qkbprestdone:")
		a.f("\tVPMAXUW Z28, Z27, Z27")
		a.f("\tVMOVDQU16 Z27, %d(R14)", jobMax)
	}
	a.f("\tVZEROUPPER")
	a.f("\tRET\n")
}

// The offsets in pairsJob (lanes_bf16_amd64.go; lanes_bf16_amd64_test.go
// checks them).
const (
	jobSrc, jobDst, jobLds, jobSkip, jobCol, jobCols, jobLeft, jobMax, jobPF = 0, 8, 16, 24, 32, 40, 48, 56, 120
)

// pairUnit emits one unit of the pairs job at R14 (one left): the next 32
// columns of its row pair interleaved into 32 key pairs at its destination
// and their finite magnitudes folded into Z27 and Z28, and two lines of
// the job's prefetch cursor (a lanesPrefetch: addr, step, last) fetched,
// as bf16PairsMax does; then the cursors move on, to the next row pair
// (skip, after the last unit of a pair) through next, the label right
// after the unit.
func pairUnit(a *asm, next string) {
	for range 2 {
		a.f("\tMOVQ %d(R14), R15", jobPF)
		a.f("\tPREFETCHT1 (R15)")
		a.f("\tADDQ %d(R14), R15", jobPF+8)
		a.f("\tCMPQ R15, %d(R14)", jobPF+16)
		a.f("\tCMOVQGT %d(R14), R15", jobPF+16)
		a.f("\tMOVQ R15, %d(R14)", jobPF)
	}
	a.f("\tMOVQ %d(R14), R15", jobSrc)
	a.f("\tVPERMQ (R15), Z24, Z12")
	a.f("\tADDQ %d(R14), R15", jobLds)
	a.f("\tVPERMQ (R15), Z24, Z13")
	a.f("\tVPANDD Z25, Z12, Z14")
	a.f("\tVPANDD Z25, Z13, Z15")
	a.f("\tVPCMPUW $1, Z26, Z14, K1")
	a.f("\tVPCMPUW $1, Z26, Z15, K2")
	a.f("\tVPMAXUW Z14, Z27, K1, Z27")
	a.f("\tVPMAXUW Z15, Z28, K2, Z28")
	a.f("\tVPUNPCKLWD Z13, Z12, Z16")
	a.f("\tVPUNPCKHWD Z13, Z12, Z17")
	a.f("\tMOVQ %d(R14), R15", jobDst)
	a.f("\tVMOVDQU64 Z16, (R15)")
	a.f("\tVMOVDQU64 Z17, 64(R15)")
	a.f("\tADDQ $128, R15")
	a.f("\tMOVQ R15, %d(R14)", jobDst)
	a.f("\tADDQ $64, %d(R14)", jobSrc)
	a.f("\tDECQ %d(R14)", jobLeft)
	a.f("\tDECQ %d(R14)", jobCol)
	a.f("\tJNZ  %s", next)
	a.f("\tMOVQ %d(R14), R15", jobSkip)
	a.f("\tADDQ R15, %d(R14)", jobSrc)
	a.f("\tMOVQ %d(R14), R15", jobCols)
	a.f("\tMOVQ R15, %d(R14)", jobCol)
}

// genPVBF16 emits lanesPVBF16(pp *uint32, vb unsafe.Pointer, ldv uintptr,
// pairs int, o *float32, alpha *float32, d int): O^T (d columns of 16
// floats at o; d a multiple of 16) = alpha*O^T (alpha nil: O^T as it is)
// plus the pairs key pairs of P (16 lanes each, 64 bytes apart at pp) times
// their value pairs (rows of d pairs, ldv bytes apart at vb). Z0-Z15 the
// accumulators of 16 columns, Z30 alpha, Z31 one P pair, each value
// pair broadcast by its VDPBF16PS's memory operand as in genQKBF16. GP: SI pp, R8 the group's first value pair, BX ldv, CX pairs, DI
// the group's O^T, AX alpha, DX groups left; R10-R12 loop cursors.
func genPVBF16(a *asm) {
	a.f("// func lanesPVBF16(pp *uint32, vb unsafe.Pointer, ldv uintptr, pairs int, o *float32, alpha *float32, d int)")
	a.f("TEXT ·lanesPVBF16(SB), NOSPLIT, $0-56")
	a.f("\tMOVQ pp+0(FP), SI")
	a.f("\tMOVQ vb+8(FP), R8")
	a.f("\tMOVQ ldv+16(FP), BX")
	a.f("\tMOVQ pairs+24(FP), CX")
	a.f("\tMOVQ o+32(FP), DI")
	a.f("\tMOVQ alpha+40(FP), AX")
	a.f("\tMOVQ d+48(FP), DX")
	a.f("\tSHRQ $4, DX")
	a.f("\tJZ   pvbfdone")
	a.f("\tTESTQ AX, AX")
	a.f("\tJZ   pvbfgroup")
	a.f("\tVMOVUPS (AX), Z30")
	a.f("pvbfgroup:")
	for g := 0; g < 16; g++ {
		a.f("\tVMOVUPS %d(DI), Z%d", 64*g, g)
	}
	a.f("\tTESTQ AX, AX")
	a.f("\tJZ   pvbfkeys")
	for g := 0; g < 16; g++ {
		a.f("\tVMULPS Z30, Z%d, Z%d", g, g)
	}
	a.f("pvbfkeys:")
	a.f("\tMOVQ SI, R10")
	a.f("\tMOVQ R8, R11")
	a.f("\tMOVQ CX, R12")
	a.f("\tTESTQ R12, R12")
	a.f("\tJZ   pvbfstore")
	a.f("pvbfloop:")
	a.f("\tVMOVDQU32 (R10), Z31")
	for g := 0; g < 16; g++ {
		dpbf16Bcst(a, g, 31, emit.Mem{Base: "R11", Disp: 4 * g})
	}
	a.f("\tADDQ $64, R10")
	a.f("\tADDQ BX, R11")
	a.f("\tDECQ R12")
	a.f("\tJNZ  pvbfloop")
	a.f("pvbfstore:")
	for g := 0; g < 16; g++ {
		a.f("\tVMOVUPS Z%d, %d(DI)", g, 64*g)
	}
	a.f("\tADDQ $1024, DI")
	a.f("\tADDQ $64, R8")
	a.f("\tDECQ DX")
	a.f("\tJNZ  pvbfgroup")
	a.f("pvbfdone:")
	a.f("\tVZEROUPPER")
	a.f("\tRET")
}
