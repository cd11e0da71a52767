//go:build !amd64 || purego

package grad

// haveAsm reports assembly kernels; there are none on this build.
const haveAsm = false

func dot4AVX2(a, b0, b1, b2, b3 *float32, n int, out *[4]float32) {
	panic("grad: dot4AVX2 without assembly")
}

// useAsm is false: the portable Go kernels run.
func useAsm(d int) bool { return false }

func dot2x4AVX2(a0, a1, b0, b1, b2, b3 *float32, n int, out *[8]float32) {
	panic("grad: dot2x4AVX2 without assembly")
}

func expSubAVX2(s *float32, n int, sub, scale float32) {
	panic("grad: expSubAVX2 without assembly")
}

func dsAVX2(dp, s *float32, n int, scale, dl float32) {
	panic("grad: dsAVX2 without assembly")
}

func gemm8x32RowAVX512(c, a *[8]*float32, b *float32, ldb, k, load int) {
	panic("grad: gemm8x32RowAVX512 without assembly")
}

func gemm8x16RowAVX512(c, a *[8]*float32, b *float32, ldb, k, load int) {
	panic("grad: gemm8x16RowAVX512 without assembly")
}

func gemm8x32ColAVX512(c *[8]*float32, a *float32, csA int, b *float32, ldb, k, load int) {
	panic("grad: gemm8x32ColAVX512 without assembly")
}

func gemm8x16ColAVX512(c *[8]*float32, a *float32, csA int, b *float32, ldb, k, load int) {
	panic("grad: gemm8x16ColAVX512 without assembly")
}

func gemm4x24RowAVX2(c, a *[4]*float32, b *float32, ldb, k, load int) {
	panic("grad: gemm4x24RowAVX2 without assembly")
}

func gemm4x16RowAVX2(c, a *[4]*float32, b *float32, ldb, k, load int) {
	panic("grad: gemm4x16RowAVX2 without assembly")
}

func gemm4x24ColAVX2(c *[4]*float32, a *float32, csA int, b *float32, ldb, k, load int) {
	panic("grad: gemm4x24ColAVX2 without assembly")
}

func gemm4x16ColAVX2(c *[4]*float32, a *float32, csA int, b *float32, ldb, k, load int) {
	panic("grad: gemm4x16ColAVX2 without assembly")
}

// useAsm512 is false: the portable Go kernels run.
func useAsm512(d int) bool { return false }

func maxAVX2(x *float32, n int) float32 { panic("grad: maxAVX2 without assembly") }

func sumAVX2(x *float32, n int) float32 { panic("grad: sumAVX2 without assembly") }

func scaleAVX2(x *float32, n int, f float32) { panic("grad: scaleAVX2 without assembly") }
