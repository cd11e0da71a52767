// Package overlap measures whether the AVX2 e4m3 -> float32 conversion of
// decode (attn.decodeE4M3AVX2's instruction sequence) can run alongside the
// lane kernels' multiply-adds on the same core, i.e. whether fusing the
// conversion into the kernels would hide it. BenchmarkOverlap times three
// loops over data in L1: the multiply-adds of the AVX2 Q.K kernel alone
// (5 keys x 16 rows per column, 10 FMAs), the conversion of 16 e4m3 values
// alone, and both interleaved in one loop body, and reports
// overlap = (fma + conv - both) / min(fma, conv): 1 when the shorter one
// is fully hidden, 0 when the two simply add up.
//
//	go test ./kernels/attn/internal/overlap -bench . -benchtime 3x
//
// Measured on AMD EPYC Zen 3 (2026-12-02, a noisy host), six runs: fma
// 1.6-2.4 ns, conv 1.4-2.2 ns, both 2.9-5.7 ns per step, overlap between
// -0.5 and +0.2, i.e. none. The conversion competes with the multiply-adds
// for the vector pipes, so decode's FP8 ceiling is set by the sum of the
// two, not by their maximum, and fusing the conversion into the kernels
// would not raise it on this core.
//
// BenchmarkOverlap512 does the same for the AVX-512 Q.K lane kernel
// (tile.lanesQKT512: 48 multiply-adds with embedded broadcasts per
// iteration) and the AVX512_VBMI e4m3 conversion of 64 values, 4 FMA
// iterations per 3 conversions (one FMA per converted K element, as in
// decode at 16 query heads per KV head). Measured on AMD EPYC Zen 4
// (2026-12-03), three runs: fma 13.4 ns, conv 2.0-2.6 ns, both 13.6-13.8
// ns per step, overlap 0.80-0.89: on this core the conversion runs on pipes
// the multiply-adds leave free, which is why the AVX-512 lane kernels widen
// the next e4m3 chunk between their multiply-adds (tile.WideningStager).
package overlap
