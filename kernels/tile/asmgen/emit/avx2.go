package emit

import "fmt"

// The AVX2 softmax kernels of both generators address their constants as
// 32-byte vectors through c (a constant name -> memory operand of 8
// replicated copies, see Const).

// Exp2AVX2 emits Y(out) = 2^Y(in), using Y(t1), Y(t2) as scratch: x is
// clamped at -127 (2^-127 builds as 0, so every x <= -127, -inf included,
// gives 0) with x as VMAXPS's second source, which is the one returned when
// either is NaN (a NaN stays NaN); n = round(x), f = x - n, the degree-6
// polynomial of ExpC on f times 2^n built from the exponent bits.
func Exp2AVX2(f Printf, c func(string) string, in, out, t1, t2 int) {
	f("\tVMOVUPS %s, Y%d", c("lo256"), t1)
	f("\tVMAXPS Y%d, Y%d, Y%d // clamp at -127, NaN kept", in, t1, t1)
	f("\tVROUNDPS $0, Y%d, Y%d // n = round(x)", t1, t2)
	f("\tVSUBPS Y%d, Y%d, Y%d // f = x - n", t2, t1, t1)
	f("\tVMOVUPS %s, Y%d", c("c6"), out)
	for i := len(ExpC) - 2; i >= 0; i-- {
		f("\tVFMADD213PS %s, Y%d, Y%d", c(fmt.Sprintf("c%d", i)), t1, out)
	}
	f("\tVCVTPS2DQ Y%d, Y%d", t2, t2)
	f("\tVPADDD %s, Y%d, Y%d", c("b127"), t2, t2)
	f("\tVPSLLD $23, Y%d, Y%d // 2^n", t2, t2)
	f("\tVMULPS Y%d, Y%d, Y%d", t2, out, out)
}

// RoundBF16AVX2 emits Y(p) = Y(p) rounded to bfloat16, nearest even, kept
// as float32; Y1 is scratch.
func RoundBF16AVX2(f Printf, c func(string) string, p int) {
	f("\tVPSRLD $16, Y%d, Y1", p)
	f("\tVPAND %s, Y1, Y1", c("one"))
	f("\tVPADDD %s, Y%d, Y%d", c("r7fff"), p, p)
	f("\tVPADDD Y1, Y%d, Y%d", p, p)
	f("\tVPAND %s, Y%d, Y%d // bf16 round to nearest even", c("hi16"), p, p)
}

// RoundE4M3AVX2 emits Y(p) = Y(p) (p >= 0) rounded to float8 e4m3fn,
// nearest even, saturating at 448, kept as float32; Y1, Y2 and Y4 are
// scratch.
func RoundE4M3AVX2(f Printf, c func(string) string, p int) {
	f("\tVADDPS %s, Y%d, Y1", c("c16384"), p)
	f("\tVSUBPS %s, Y1, Y1 // subnormal e4m3: nearest multiple of 2^-9", c("c16384"))
	f("\tVPSRLD $20, Y%d, Y2", p)
	f("\tVPAND %s, Y2, Y2", c("one"))
	f("\tVPADDD %s, Y2, Y2", c("r7ffff"))
	f("\tVPADDD Y%d, Y2, Y2", p)
	f("\tVPAND %s, Y2, Y2 // normal e4m3: 3 mantissa bits, nearest even", c("hi12"))
	f("\tVCMPPS $1, %s, Y%d, Y4 // p < 2^-6", c("sub"), p)
	f("\tVBLENDVPS Y4, Y1, Y2, Y%d", p)
	f("\tVMINPS %s, Y%d, Y%d // saturate at 448", c("c448"), p, p)
}
