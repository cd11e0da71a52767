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
// That loop converts 1.6 values per multiply-add, three times what decode
// needs. BenchmarkOverlapDecode measures at decode's ratio instead: a step
// is four columns of the AVX2 Q.K lane kernel for six keys (48
// multiply-adds, one broadcast register, as tile.lanesQKT) and the staging
// of 24 e4m3 values in the one vector register such a kernel leaves free
// (attn.decodeE4M3x32AVX2's per-value sequence in groups of 8, with its
// 2^8 multiply and its NaN check), i.e. two multiply-adds per converted
// value, as in decode at 16 query heads per KV head. It reports fma% (the
// FMA-only loop's time over the interleaved loop's: the share of the
// kernel's rate that would survive a conversion inside its loop), the same
// without the 2^8 multiply (fma%-nomul: the multiply folded into a scale,
// which would no longer be bit-identical in underflow corners), and
// staged% (the FMA loop's time over the sum of the two: the conversion
// run beside the kernel, as today), at two offsets of the conversion's
// buffers from the key rows (off=0 shares their low address bits). A
// first probe with a single load at the key rows' offset ran 30% slower
// than with it 68 bytes on, from L1 bank conflicts alone; the benchmark's
// buffers keep that effect visible but small.
//
// Measured on AMD EPYC Zen 3 (2026-12-04, quiet host), seven runs: fma%
// 70-83, fma%-nomul 74-91, staged% 67-69, overlap 0.11-0.58. The
// in-kernel conversion would keep at most 70-83% of the lane kernels'
// rate (86% of the FMA peak in cache, attn BenchmarkDecodeBlock kernel),
// i.e. 60-71% of the peak, against 69% for the staged path measured in
// the same session (DecodeBlock staged=e4m3; its 32-value conversion is
// faster than this loop's 8-value groups, so it keeps 84% of the kernel's
// rate where staged% says 67-69%): at most two points, within the host's
// spread, before the countdown and the rest loop a real kernel would add.
// Decode's FP8 ceiling on this core stays the staged one.
//
// On AMD EPYC Zen 4 (2026-12-06) the same loop gives fma% 75.4-79.5,
// fma%-nomul 79.0-82.4, staged% 67.5-68.7, about the Zen 3 figures, while
// the in-kernel form the AVX2 lane kernels then shipped (16 values per
// step with one ymm word widening, no multiply, the NaN test in a scan
// apart) kept 86% of the kernels' rate in attn's BenchmarkDecodeBlock
// where caller staging kept 83% (staged=e4m3 75.8%, callerstaged=e4m3
// 72.8%, kernel 87.7% of the peak): this loop underrates that form.
//
// The AVX2 decode no longer converts e4m3 with vector instructions at all
// (twenty-third session): its E4M3 lane kernels (tile.lanesQKTE4M3,
// lanesPVTE4M3) look each byte up in a float32 table through a general
// register and broadcast the entry, two loads per value and no vector
// instruction besides the multiply-adds (staged=e4m3 86.0-86.4% on Zen 4).
// This probe measures the vector conversion they replaced; it is kept for
// the AVX-512 side below and as the record of why.
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
