//go:build !amd64 || purego

package grad

// haveAsm reports assembly kernels; there are none on this build.
const haveAsm = false

func dot4AVX2(a, b0, b1, b2, b3 *float32, n int, out *[4]float32) {
	panic("grad: dot4AVX2 without assembly")
}

func axpy4AVX2(y, x0, x1, x2, x3 *float32, n int, a *[4]float32) {
	panic("grad: axpy4AVX2 without assembly")
}

// useAsm is false: the portable Go kernels run.
func useAsm(d int) bool { return false }

func dot2x4AVX2(a0, a1, b0, b1, b2, b3 *float32, n int, out *[8]float32) {
	panic("grad: dot2x4AVX2 without assembly")
}

func axpy4x2AVX2(y0, y1, x0, x1, x2, x3 *float32, n int, w *[8]float32) {
	panic("grad: axpy4x2AVX2 without assembly")
}

func expSubAVX2(s *float32, n int, sub float32) {
	panic("grad: expSubAVX2 without assembly")
}
