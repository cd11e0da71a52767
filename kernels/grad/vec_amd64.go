//go:build amd64 && !purego

package grad

import "github.com/sparseattn/msa/kernels/tile"

// haveAsm reports the AVX2+FMA kernels of vec_amd64.s.
const haveAsm = true

// dot4AVX2 sets out[j] = sum_c a[c]*bj[c] over n elements (n % 16 == 0).
//
//go:noescape
func dot4AVX2(a, b0, b1, b2, b3 *float32, n int, out *[4]float32)

// axpy4AVX2 adds a[0]*x0 + a[1]*x1 + a[2]*x2 + a[3]*x3 to y over n
// elements (n % 8 == 0).
//
//go:noescape
func axpy4AVX2(y, x0, x1, x2, x3 *float32, n int, a *[4]float32)

// useAsm reports whether a call with head dimension d runs the AVX2
// kernels: when tile's active tier (the one dispatch point, tile.SetTier)
// is a SIMD tier, all of which imply AVX2 and FMA, and d % 16 == 0.
func useAsm(d int) bool { return d%16 == 0 && tile.Tier() != "generic" }

// dot2x4AVX2 sets out[4*i+j] = sum_c ai[c]*bj[c] over n elements
// (n % 8 == 0) for rows a0, a1 and keys b0..b3.
//
//go:noescape
func dot2x4AVX2(a0, a1, b0, b1, b2, b3 *float32, n int, out *[8]float32)

// axpy4x2AVX2 is axpy4AVX2 on rows y0 (weights w[0:4]) and y1 (weights
// w[4:8]) sharing x0..x3, over n elements (n % 8 == 0).
//
//go:noescape
func axpy4x2AVX2(y0, y1, x0, x1, x2, x3 *float32, n int, w *[8]float32)

// expSubAVX2 sets s[i] = e^(s[i] - sub) for i < n (n % 8 == 0).
//
//go:noescape
func expSubAVX2(s *float32, n int, sub float32)
