// Package tile holds the CPU block kernel of the attention paths: an online
// (flash-style) softmax of M query rows against one block of at most BlockN
// keys, P.V accumulation, and the final normalisation.
//
// Scores are computed in base 2: Acc.Reset takes softmax_scale*log2(e) and
// every score is s = scale * (q . k). Finish converts the log-sum-exp back to
// natural log. Masks are always a prefix of the block, so the mask of row
// r is one integer valid[r] in [0, n].
//
// # Tiers
//
// The arithmetic is implemented in tiers, chosen once at start-up in
// dispatch.go with golang.org/x/sys/cpu, overridable with the environment
// variable MSA_CPU_TIER and with SetTier (Tier and Tiers report them).
// The choice is a pair: the active tier, a float32 one, for float32 work
// and decode, and its bf16 twin (BF16InputTier) for the blocks,
// accumulators and lane groups whose caller asks for bf16 products
// (Block, Acc and Lanes SetBF16Products: attn's prefill calls whose Q, K
// and V are values bf16 holds exactly). Automatically the twin is
// amxbf16 where the CPU has AMX and Linux grants the tile state, else
// avx512bf16 where the CPU has AVX512_BF16 and VDPBF16PS outruns its
// float32 multiply-adds (AMD Zen 4; not Intel cores, where it issues at
// half their rate), else the active tier itself. MSA_CPU_TIER (or SetTier)
// naming a float32 tier makes it both, so every call keeps float32
// products; naming a bf16 tier makes it both too, so every call rounds to
// bf16. The choice changes only with SetTier; each block, accumulator and
// lane group keeps the tier of its last Load or Reset, so calls of both
// precisions run concurrently.
//
//   - "avx512" (default on CPUs with AVX-512F, VL, DQ and BW): float32. K is
//     transposed once per Block.Load ([d][BlockN], 16x16 register
//     transposes); per group of 6 query rows Q.K^T runs as a 6x64
//     register-tiled FMA micro-kernel (24 zmm accumulators), the softmax is
//     vectorised (masking, row max, exp2 by VREDUCEPS, a degree-6
//     polynomial and VSCALEFPS: < 1 ulp, gradual underflow, exact 0 for
//     -inf and arguments below -150, NaN propagated; P rounding), and
//     O = alpha*O + P.V runs as a 6x64 micro-kernel.
//   - "avx512bf16" (the automatic bf16 twin on AMD Zen 4; active only when
//     named; needs AVX512_BF16):
//     Q.K^T and P.V with VDPBF16PS. Q, K and V are rounded to bfloat16
//     (nearest even), P is rounded to bfloat16 after the optional e4m3
//     rounding; products are exact and accumulate in float32, the row sums
//     use the unrounded float32 P. Relative to the float32 tiers a score
//     moves by at most 2^-8 * scale * sum_c |q_c k_c| and P.V by about 2^-8
//     relative to max |V|; it equals the generic tier run on bf16-rounded Q,
//     K, V with RoundBF16 up to float32 reassociation (both are tested).
//     P is packed with VCVTNE2PS2BF16. Denormal bf16 inputs and outputs
//     (below 2^-126) are flushed to zero by these instructions. Blocks
//     are packed as bf16 pairs (K [d/2][BlockN][2], V [BlockN/2][d][2]).
//     Callers whose queries are bf16 already hand them over with
//     Acc.SetQBF16, which skips the round trip through float32.
//     "avx512bf16-emulated" is the same data path with VDPBF16PS replaced
//     by two AVX-512F FMAs (same results up to denormals), for tests on
//     CPUs without AVX512_BF16; it is slow. Like avx512bf16 it runs the
//     avx512 tier's float32 helper kernels (VectorISA reports ISAAVX512),
//     so attn's epilogues and grad's kernels take their AVX-512 code under
//     it too (before VectorISA they took the portable code under this
//     tier only).
//   - "amxbf16" (the automatic bf16 twin where it runs; active only when
//     named; needs the avx512bf16
//     tier's features, AMX-TILE and AMX-BF16, and Linux's permission for
//     the tile state, requested with arch_prctl when the tier is first
//     asked about): the avx512bf16 data path (same roundings, layouts and
//     softmax) with Q.K^T and P.V on AMX tiles (TDPBF16PS, 16 query rows
//     per tile, 32 keys per step of P.V), for d a multiple of 32 (other
//     head dimensions run the avx512bf16 kernels). TDPBF16PS sums a tile
//     row in an order of its own, so results equal the avx512bf16 tier's
//     only up to float32 reassociation (tested against the generic tier
//     on bf16-rounded inputs, as avx512bf16 is). Lanes asking for bf16
//     products, and decode's Lanes when the tier is active, run both
//     of their products on AMX tiles too (the AMX lane path,
//     lanes_amx_amd64.go: S^T = K.Q^T with the key rows as the A operand,
//     P.V with P's rows transposed from the softmax's key vectors), for d
//     a multiple of 32; their operands are bf16 values decode stores
//     exactly (e4m3fn and bf16 K/V, P rounded to e4m3 or bf16), so only
//     the order of the additions differs from the float32 lane kernels.
//   - "avx2" (AVX2 and FMA): the same float32 kernel with ymm registers
//     (6x16 tiles, 8x8 transposes); its exp2 builds 2^n in the exponent
//     field and flushes results below 2^-126 to zero.
//   - "generic": portable Go, the reference (always available; the only
//     tier on non-amd64 and with the purego build tag).
//
// The SIMD tiers need the head dimension d to be a multiple of 16 and fall
// back to the generic code otherwise. They differ from the generic tier by
// reassociation only (dot products and sums in another order, FMA
// contraction, exp2 within 1 ulp); the tests state the tolerances.
//
// # Lanes
//
// Lanes is a second accumulator for the few rows of decode (up to 16: one
// query times its group of query heads). The rows sit in SIMD lanes (one
// zmm, or a pair of ymm) and K/V are read row-major, so no block is
// transposed. Its kernels come from asmgen/lanes/gen.go and keep Q and O
// transposed (one 16-float vector per column), so that a column of Q or a
// key's P^T feeds the scalar broadcasts of a group of keys or columns: the
// AVX-512 kernels use one zmm and the embedded broadcast of each
// multiply-add (12 keys or 24 columns per group), the AVX2 ones two ymm
// shared by explicit broadcasts (6 keys or columns, 12 accumulators, 8
// loads per 12 FMAs); the generic tier uses the portable lanes code. Same
// semantics as Acc (same masking, rounding and LSE rules). UpdateStaged
// takes the block from a Stager a few rows at a time, so that a caller
// converting K and V from a narrow format converts into a buffer that stays
// in cache; a WideningStager instead hands the kernels the e4m3fn or bf16
// rows themselves (bit-identical): the AVX2 kernels read both in place
// (e4m3fn through a 256-entry float32 table, bf16 widened in registers);
// the AVX-512 kernels do the same on AMD cores and otherwise widen
// e4m3fn (with AVX512_VBMI) and bf16 rows chunk by chunk between their
// multiply-adds. The environment variable MSA_AVX512_IN_PLACE=1 or 0
// forces the AVX-512 route either way, to measure both on a new CPU. PrefetchNext lets the kernels prefetch
// the following block while they compute, and WidenNext lets them widen
// its first key rows ahead. Acc.Prefetch is the same kind of hint for the block
// kernel (prefill: the next tile's query rows).
//
// Block.Load keeps the caller's V rows in place for the float32 layouts
// (no copy); the caller leaves them unchanged while the block is in use.
//
// The assembly is generated by asmgen/gen.go (go generate) and committed.
// PeakLoop gives each tier's calibration kernel, a loop of its multiply-add
// instruction on registers only; package internal/calib times it for the
// percent-of-peak reports. This package holds kernels only: measuring
// (timing, bandwidth, the bench's reference rates) is internal/calib's and
// internal/calib/updatemeter's, and nothing here may import them outside
// tests.
package tile
