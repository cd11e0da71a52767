/*
 * msa_tc_abi.h - launch ABI of the tensor-core kernels (sm_100f tcgen05,
 * sm_90a wgmma, sm_80 mma.sync), shared by the kernels and the Go launcher
 * (package github.com/sparseattn/msa/cuda, cuLaunchKernelEx through cgo).
 *
 * The portable kernels (sparse_fwd.cu, decode.cu, combine.cu) keep their
 * one-argument ABI (a device pointer to the parameter block). The
 * tensor-core kernels take their parameter block BY VALUE plus the tensor
 * maps they load through, all as __grid_constant__ kernel parameters:
 *
 *   extern "C" __global__ void msa_<arch>_<algo>_<variant>_d<D>(
 *       const __grid_constant__ MsaFwdParams p,      // or MsaDecodeParams (MsaDecodePipeParams: SM100 decode)
 *       const __grid_constant__ MsaTensorMaps maps);
 *
 *   <arch>    sm100 | sm90 | sm80
 *   <algo>    fwd (sparse prefill partials) | decode (paged, split-KV)
 *   <variant> bf16 (BF16 Q/K/V) | fp8 (E4M3 Q/K/V) | bf16fp8 (BF16 Q, E4M3
 *             K/V) | nvfp4 (NVFP4 K/V, BF16 or E4M3 Q)
 *
 * Kernels that do not use TMA (sm_80) take the same two parameters and
 * ignore `maps`, so the host has one launch path for every tensor-core
 * kernel. Grid, block, dynamic shared memory and cluster shape of each
 * kernel are published as data next to it (the Go launcher's kernel table);
 * a kernel never depends on more than what is stated here.
 *
 * Tensor-map conventions (encoded by the host with cuTensorMapEncodeTiled,
 * validated in Go before encoding; element type UINT8 for E4M3 and packed
 * NVFP4 bytes, BFLOAT16 for BF16; dims listed innermost first):
 *
 *   q  rank 3 {D, Hq, total_q} (dense or decode: {D, Hq, B*seqlen_q});
 *      box {inner, qhead_per_kv, 1}: one query's heads of one KV head.
 *   k,v dense: rank 3 {Dk, Hkv, total_k}, box {inner, 1, rows};
 *       paged (HND, [num_pages, Hkv, page_size, Dk]): rank 4
 *       {Dk, page_size, Hkv, num_pages}, box {inner, rows, 1, 1}.
 *       Dk = D (BF16, E4M3) or D/2 (NVFP4 packed bytes).
 *
 *   inner = min(128 bytes, Dk * element size) / element size; the swizzle
 *           mode is the one whose span equals inner * element size
 *           (128B, 64B or 32B). A row wider than 128 bytes is loaded as
 *           Dk*es/128 boxes at inner offsets 0, inner, 2*inner, ...
 *   rows  = min(128, page_size) for paged maps, 128 for dense maps (one
 *           KV block of blk_kv = 128 keys is rows-aligned).
 *   Out-of-bounds box elements are zero-filled by the hardware
 *   (CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE); masking of keys beyond a
 *   sequence is the kernel's job, never the fill's.
 *   Interleave none, L2 promotion 128B.
 *
 * The SM100 kernels (sm100_fwd.cu, sm100_decode.cu) gather Q with cp.async
 * (one row per thread) and read only maps.k and maps.v; maps.q may be left
 * zero for them. Their decode reads K/V through the paged rank-4 maps only.
 *
 * NVFP4 block scales are read with ordinary loads (their 128x4 tiled layout
 * is not a box); the maps of an NVFP4 kernel cover the packed bytes only.
 */
#ifndef MSA_TC_ABI_H
#define MSA_TC_ABI_H

#include "shared/msa_params.h"

#ifdef __CUDACC__
#include <cuda.h> /* CUtensorMap: 128 bytes, 64-byte aligned */

typedef struct MsaTensorMaps {
    CUtensorMap q;
    CUtensorMap k;
    CUtensorMap v;
} MsaTensorMaps;

static_assert(sizeof(MsaTensorMaps) == 384, "MsaTensorMaps is three 128-byte CUtensorMaps");
/* CUDA 12.x's cuda.h aligns CUtensorMap to 64 bytes, CUDA 13's to 128: the
 * kernel parameter offset of `maps` (256 after either parameter block) is the
 * same under both. */
static_assert(alignof(MsaTensorMaps) % 64 == 0, "MsaTensorMaps must be (at least) 64-byte aligned");
#endif

#endif /* MSA_TC_ABI_H */
