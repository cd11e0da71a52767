// Package blas is a gorgonia.org/tensor BLAS implementation whose float32
// matrix product (Sgemm) runs the register-blocked SIMD GEMM tiles of
// kernels/grad on all cores: the matrix multiplications of a Gorgonia
// graph (a model's Q/K/V/O projections) then run near the CPU's FMA peak
// instead of at the speed of Gonum's pure-Go BLAS. Every other routine,
// Dgemm included, is Gonum's pure-Go implementation
// (gonum.org/v1/gonum/blas/gonum), as are Sgemm calls the tiles cannot
// take (CPUs without AVX2+FMA, purego builds, the portable tile tier,
// tiny products). Pure Go and assembly; no cgo.
//
// One Sgemm runs on the calling goroutine and up to Workers-1 helper
// goroutines (GOMAXPROCS-1 by default), which pack the column panels of B
// in parallel and then share C's blocks. The helpers are started by the
// first call that needs them and stay parked between calls; the packing
// buffers are pooled, so a warm call allocates nothing.
//
// Select it for both Gorgonia and tensor with one call:
//
//	gorgonia.Use(blas.New())
//
// Built with -tags openblas (cgo, OpenBLAS's development files), OpenBLAS
// returns gonum's netlib binding to the system's OpenBLAS instead, for
// gorgonia.Use the same way; without the tag it returns ErrNoOpenBLAS.
// docs/performance.md ("Whole graphs") compares the three.
//
// Invalid arguments panic with Gonum's messages, as the blas.Float32
// interface prescribes (it has no error results).
package blas
