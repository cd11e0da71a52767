// Package emit holds what the assembly generators of package tile share:
// the exp2 polynomial, the named 32-bit constants of the softmax kernels,
// and the AVX-512 instruction sequences of exp2 and of the bf16 / e4m3
// rounding of P (avx512.go).
// asmgen/gen.go (Acc/Block kernels) and asmgen/lanes/gen.go (Lanes
// kernels) lay their constant tables out differently but must agree on
// these values, so that both softmax implementations compute the same exp2
// and the same P rounding.
package emit

import "math"

// ExpC are the coefficients of the exp2 polynomial: 2^f on [-0.5, 0.5],
// degree 6, ExpC[i] multiplies f^i.
var ExpC = []float32{1.0, 0.6931471824645996, 0.24022646248340607, 0.05550328642129898, 0.009618489071726799, 0.0013399932067841291, 0.0001534576585981995}

// Const returns the bits of a named constant and whether the name is known:
// "c0".."c6" (ExpC), "ninf" (-inf), "lo256" (-127.0, the exp2 input floor),
// "one" (1), "r7fff" and "hi16" (bf16 round-to-nearest-even bias and mask),
// "r7ffff" and "hi12" (the same for e4m3's 3 mantissa bits), "c16384"
// (2^14), "sub" (2^-6, the e4m3 subnormal threshold), "c448" (e4m3 max),
// "b127" (the float32 exponent bias), "eight" (8), "abs" (the float32
// magnitude mask), "pinf" (+inf, the first non-finite magnitude), and two
// pairs of 16-bit words for bf16 values: "w7fff" (the magnitude mask) and
// "w80" (0x80, which makes a finite magnitude a positive int16 and an
// infinite or NaN one negative).
func Const(n string) (uint32, bool) {
	switch n {
	case "ninf":
		return math.Float32bits(float32(math.Inf(-1))), true
	case "lo256":
		return math.Float32bits(-127), true
	case "one":
		return 1, true
	case "r7fff":
		return 0x7fff, true
	case "hi16":
		return 0xffff0000, true
	case "r7ffff":
		return 0x7ffff, true
	case "hi12":
		return 0xfff00000, true
	case "c16384":
		return math.Float32bits(16384), true
	case "sub":
		return math.Float32bits(1.0 / 64), true
	case "c448":
		return math.Float32bits(448), true
	case "b127":
		return 127, true
	case "eight":
		return 8, true
	case "abs":
		return 0x7fffffff, true
	case "pinf":
		return math.Float32bits(float32(math.Inf(1))), true
	case "w7fff":
		return 0x7fff7fff, true
	case "w80":
		return 0x00800080, true
	}
	if len(n) == 2 && n[0] == 'c' && n[1] >= '0' && int(n[1]-'0') < len(ExpC) {
		return math.Float32bits(ExpC[n[1]-'0']), true
	}
	return 0, false
}

// RoundTempLoops emits the second pass of a softmax kernel as one loop per
// (P rounding, temperature) pair, so no loop branches per vector: with the
// rounding mode in DX (0 none, 1 bf16, 2 e4m3; labels no, bf, e4) and
// temperature tracking on when the 32-bit operand invT is non-zero (label
// suffix tt, else nt), body(rnd, temp, lbl) emits the loop labelled lbl,
// including its closing jump back to lbl; each loop then jumps to exit.
func RoundTempLoops(f Printf, invT, exit string, body func(rnd string, temp bool, lbl string)) {
	f("\t// One loop per (rounding, temperature) pair: no branches per vector.")
	f("\tCMPQ DX, $1")
	f("\tJEQ bf")
	f("\tCMPQ DX, $2")
	f("\tJEQ e4")
	for _, rnd := range []string{"no", "bf", "e4"} {
		f("%s:", rnd)
		f("\tCMPL %s, $0", invT)
		f("\tJNE %stt", rnd)
		for _, temp := range []bool{false, true} {
			lbl := rnd + "nt"
			if temp {
				lbl = rnd + "tt"
			}
			f("%s:", lbl)
			body(rnd, temp, lbl)
			f("\tJMP %s", exit)
		}
	}
}

// RoundP emits the AVX-512 rounding of P in Z(p) that RoundTempLoops' label
// rnd names: "bf" RoundBF16, "e4" RoundE4M3, "no" nothing.
func RoundP(f Printf, rnd string, p int) {
	switch rnd {
	case "bf":
		RoundBF16(f, p)
	case "e4":
		RoundE4M3(f, p)
	}
}

// RoundPAVX2 is RoundP for Y(p) with the AVX2 sequences.
func RoundPAVX2(f Printf, c func(string) string, rnd string, p int) {
	switch rnd {
	case "bf":
		RoundBF16AVX2(f, c, p)
	case "e4":
		RoundE4M3AVX2(f, c, p)
	}
}
