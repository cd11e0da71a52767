// Package attn executes the attention algorithms on the CPU: sparse prefill
// partials driven by the forward schedule's work items, the combine of
// per-slot partials, and paged decode with split-KV.
//
// The package takes plain slices (storage bits of BF16 / FP8 / NVFP4 tensors
// and int32 metadata) that the op package has already validated; it never
// allocates in the steady state when given a reused Workspace. Every work
// item runs on a goroutine of a fixed pool and writes a disjoint part of the
// output, so results are bit-identical for any worker count.
//
// A prefill call's products run on package tile's bf16 twin of the active
// tier where its Q, K and V are all bf16 values (precision.go:
// BF16Products, PrefillTier); decode and calls of other dtypes run on the
// active tier.
//
// The block-level arithmetic lives in package tile; this package owns
// addressing (dense and paged K/V), masking limits, dtype decoding and the
// epilogues (partial stores, combine). Decoding and the epilogues have
// AVX-512 (epilogue_amd64.s) and AVX2 + F16C (epilogue_avx2_amd64.s)
// kernels next to the Go loops they are tested against bit for bit; the
// set in use follows the vector ISA of package tile's tier (vecLevel,
// tile.VectorISA). On CPUs with AVX512_VBMI the AVX-512 e4m3 decoder is
// package tile's byte-table kernel
// (tile.WidenE4M3x64, the conversion the lane kernels also run between
// their multiply-adds). The combine's slot weights (mergeLSE) have their
// own SIMD kernels (merge_amd64.s), which take e^x in float32 within 2 ulp
// where the portable loop takes it in float64.
//
// Decode hands each K/V block to its accumulator through kvStager, which
// decodes the rows the accumulator asks for into the start of the worker's
// block buffers: tile.Lanes (AVX-512 and AVX2 tiers) asks for a few key or
// value rows at a time (64 and 64); the block accumulator (generic tier,
// or d not a multiple of 8) takes whole blocks. kvStager is also a
// tile.WideningStager: it offers the raw rows of a chunk that is one
// contiguous run, and the lane kernels widen them themselves (AVX-512:
// e4m3 with AVX512_VBMI, and bf16, between their multiply-adds; AVX2:
// e4m3 read in place as tile.RawE4M3Div256, through a table of the values
// staging folds, and bf16 read in place). V's
// overflow guard scans each V chunk (vScale.raise; for BF16 the widening
// itself returns the chunk's largest finite magnitude: decodeBF16Max, or
// the lane kernels' scan handed to kvStager.GuardV). Before each block
// decode also hints the storage of the next one (prefetchNext), which the
// lane kernels prefetch into L2 a line or two per loop iteration. Prefill,
// whose blocks serve many tiles, decodes whole blocks (loadKV).
//
// It imports kernels/plan, kernels/tile and kernels/lowp only. It must not
// depend on op (it knows no graph and relies on op's validation), on
// kernels/grad or kernels/comm, on the GPU packages (cuda, kernels/cuda), or,
// outside tests, on the measuring packages of internal/.
package attn
