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
//	go run ./bench -tables DIR [-into FILE]
//
// The second form checks the CPU performance targets: it runs the first
// form on every supported tier among avx512, avx2 and avx512bf16, on 2
// workers and on 1, and writes a table of the targets met, as Markdown and
// as CSV (targets.go, targets_csv.go). The third renders the result CSV
// files of DIR (those targets.csv files and the GPU check's timing.csv) as
// Markdown tables (tables.go); the directive below regenerates the tables
// of docs/performance.md from docs/results/.
package main

//go:generate go run . -tables ../docs/results -into ../docs/performance.md
