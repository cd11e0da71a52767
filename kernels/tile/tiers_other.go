//go:build !amd64 || purego

package tile

// simdTiers: only the generic tier exists on this platform or build.
func simdTiers() []*tier { return nil }

// amxRefused: no AMX tier on this platform or build.
func amxRefused() string { return "" }

// log2SumsSIMD: no SIMD kernels; log2Sums computes every value in Go.
func log2SumsSIMD(dst []float64, src []float32) int { return 0 }

// prefetchLines: no prefetch instruction in portable Go.
func prefetchLines(p uintptr, lines int) {}
