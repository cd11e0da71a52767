//go:build amd64 && !purego

package lowp

// The BF16 slice conversions run 16 elements per step with AVX-512
// (F, BW, DQ) where the CPU and the OS support it, and the portable loops
// of bf16.go elsewhere and on the tail. The package must not depend on
// anything outside the standard library, so it reads the CPU's features
// itself (CPUID and XGETBV, as golang.org/x/sys/cpu does).

// haveAVX512 reports AVX512F, AVX512BW and AVX512DQ with the ZMM and mask
// registers enabled by the OS (XCR0 bits 1, 2, 5, 6, 7).
var haveAVX512 = detectAVX512()

func detectAVX512() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	if ecx1&(1<<27) == 0 { // OSXSAVE: XGETBV is available
		return false
	}
	if xcr0, _ := xgetbv0(); xcr0&0xe6 != 0xe6 {
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	const f, dq, bw = 1 << 16, 1 << 17, 1 << 30
	return ebx7&(f|dq|bw) == f|dq|bw
}

// cpuid executes CPUID with EAX = leaf, ECX = sub.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// xgetbv0 reads XCR0.
func xgetbv0() (eax, edx uint32)

// encodeBF16AVX512 writes BF16(src[i]) to dst[i] for n (a multiple of 16)
// elements.
//
//go:noescape
func encodeBF16AVX512(dst *BFloat16, src *float32, n int)

// decodeBF16AVX512 widens n (a multiple of 16) BF16 values to float32.
//
//go:noescape
func decodeBF16AVX512(dst *float32, src *BFloat16, n int)

// encodeBF16SIMD converts the longest prefix of src whose length is a
// multiple of 16 (len(dst) >= len(src)) and returns its length (0 without
// AVX-512).
func encodeBF16SIMD(dst []BFloat16, src []float32) int {
	n := len(src) &^ 15
	if !haveAVX512 || n == 0 {
		return 0
	}
	encodeBF16AVX512(&dst[0], &src[0], n)
	return n
}

// decodeBF16SIMD is encodeBF16SIMD for the widening.
func decodeBF16SIMD(dst []float32, src []BFloat16) int {
	n := len(src) &^ 15
	if !haveAVX512 || n == 0 {
		return 0
	}
	decodeBF16AVX512(&dst[0], &src[0], n)
	return n
}
