package emit

// Printf writes one line of assembly (the generators' a.f).
type Printf func(format string, args ...any)

// The AVX-512 softmax kernels of both generators share one register plan
// for what Exp2 and the rounding emitters read:
//
//	Z17+i  ExpC[i] broadcast (i = 0..6, so Z23 holds ExpC[6])
//	Z8     "one"    Z9  "r7fff"  Z10 "hi16"
//	Z11    "r7ffff" Z12 "hi12"   Z13 "c16384"
//	Z6     "sub"    Z7  "c448"
//
// and use Z1, Z2 (and K2 for E4M3) as scratch.

// Exp2 emits Z(out) = 2^Z(in), using Z(t1), Z(t2) as scratch: the degree-6
// polynomial of ExpC on f = x - round(x) in [-0.5, 0.5], scaled by 2^n,
// n = x - f, with VSCALEFPS (exact, gradual underflow). With mask (e.g.
// "K1"), lanes outside the mask are zeroed. No clamp is needed:
// VREDUCEPS(-inf) = 0, so n = -inf and VSCALEFPS(p, -inf) = 0; finite
// x <= -150 underflow to 0; NaN propagates (as in the generic tier; a
// zeroing mask removes it from lanes outside the mask).
func Exp2(f Printf, in, out, t1, t2 int, mask string) {
	f("\tVREDUCEPS $8, Z%d, Z%d // f = x - round(x) in [-0.5, 0.5] (AVX512DQ)", in, t2)
	f("\tVSUBPS Z%d, Z%d, Z%d // n = x - f (exact)", t2, in, t1)
	f("\tVMOVAPS Z23, Z%d", out)
	for i := len(ExpC) - 2; i >= 0; i-- {
		f("\tVFMADD213PS Z%d, Z%d, Z%d", 17+i, t2, out)
	}
	if mask != "" {
		f("\tVSCALEFPS.Z Z%d, Z%d, %s, Z%d // p * 2^n, 0 in lanes outside the mask", t1, out, mask, out)
	} else {
		f("\tVSCALEFPS Z%d, Z%d, Z%d // p * 2^n (exact, gradual underflow)", t1, out, out)
	}
}

// RoundBF16 emits Z(p) = Z(p) rounded to bfloat16, nearest even, kept as
// float32 (the low 16 bits cleared); Z1 is scratch.
func RoundBF16(f Printf, p int) {
	f("\tVPSRLD $16, Z%d, Z1", p)
	f("\tVPANDD Z8, Z1, Z1")
	f("\tVPADDD Z9, Z%d, Z%d", p, p)
	f("\tVPADDD Z1, Z%d, Z%d", p, p)
	f("\tVPANDD Z10, Z%d, Z%d // bf16 round to nearest even", p, p)
}

// RoundE4M3 emits Z(p) = Z(p) (p >= 0) rounded to float8 e4m3fn, nearest
// even, saturating at 448, kept as float32; Z1, Z2 and K2 are scratch.
func RoundE4M3(f Printf, p int) {
	f("\tVADDPS Z13, Z%d, Z1", p)
	f("\tVSUBPS Z13, Z1, Z1 // subnormal e4m3: nearest multiple of 2^-9")
	f("\tVPSRLD $20, Z%d, Z2", p)
	f("\tVPANDD Z8, Z2, Z2")
	f("\tVPADDD Z11, Z2, Z2")
	f("\tVPADDD Z%d, Z2, Z2", p)
	f("\tVPANDD Z12, Z2, Z2 // normal e4m3: 3 mantissa bits, nearest even")
	f("\tVCMPPS $1, Z6, Z%d, K2 // p < 2^-6", p)
	f("\tVBLENDMPS Z1, Z2, K2, Z%d", p)
	f("\tVMINPS Z7, Z%d, Z%d // saturate at 448", p, p)
}
