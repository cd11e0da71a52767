// Command bench benchmarks the CPU block-sparse prefill, NVFP4 K/V prefill
// and paged decode attention ops of package op on an embedded suite, beside
// a dense-attention baseline built from Gorgonia ops and, when importable,
// PyTorch; it reports effective GFLOP/s against a peak and a read bandwidth
// calibrated in the same run. README.md in this directory explains every
// column, the baselines' extrapolation and the verification.
//
// Usage:
//
//	go run ./bench [-quick] [-tiny] [-verify] [-out DIR] [flags]
//	go run ./bench -targets [-out DIR]
//
// The second form checks the CPU performance targets: it runs the first
// form on every supported tier among avx512, avx2 and avx512bf16, on 2
// workers and on 1, and writes a table of the targets met (targets.go).
package main
