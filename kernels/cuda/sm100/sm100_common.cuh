// sm100_common.cuh - device helpers shared by the SM100 prefill and decode
// kernels: the Q gather, the K/V TMA issue, the FP8 / NVFP4 -> BF16 converter,
// P packing and the vectorised partial stores. Work-item decoding, masking
// and the softmax recurrence are the portable kernels' (sparse_fwd.cu,
// decode.cu, msa_core.cuh), restated next to the code that uses them.
#ifndef SM100_COMMON_CUH
#define SM100_COMMON_CUH

#include "shared/msa_common.cuh"
#include "shared/msa_tc_abi.h"
#include "sm100/sm100_ptx.cuh"

namespace msa {
namespace sm100 {

#if defined(MSA_SM100_ENABLED)

__device__ __forceinline__ uint8_t* align_1024(uint8_t* p) {
    const uint32_t a = smem_u32(p);
    return p + ((1024u - (a & 1023u)) & 1023u);
}

__device__ __forceinline__ void st_shared_v4(uint32_t addr, uint4 v) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr)
                 : "memory");
    return v;
}

// Row r of a K-major swizzled tile (rows x row_bytes) from global memory.
// Storage and MMA element types match: 16-byte cp.async copies, zero-filled
// when the row is padding (src == nullptr). Caller: cp_async_wait_all.
// `any` is a valid global address, used (and read from 0 bytes) for padding.
template <int kRowBytes, int kRows>
__device__ __forceinline__ void gather_row_async(uint32_t tile, int r, const uint8_t* src, const uint8_t* any) {
#pragma unroll
    for (int c = 0; c < kRowBytes / 16; ++c)
        cp_async16(tile + tile_offset(r, c, kRowBytes, kRows), src ? src + 16 * c : any, src ? 16u : 0u);
}
// Row r of a K-major swizzled BF16 tile from an E4M3 global row (D elements).
template <int D, int kRows>
__device__ __forceinline__ void gather_row_e4m3_to_bf16(uint32_t tile, int r, const uint8_t* src) {
#pragma unroll
    for (int c = 0; c < 2 * D / 16; ++c) {  // 8 elements per 16-byte bf16 chunk
        uint4 o = make_uint4(0, 0, 0, 0);
        if (src) {
            const uint2 u = *reinterpret_cast<const uint2*>(src + 8 * c);
            o.x = pack_bf16x2(e4m3_to_f32((uint8_t)u.x), e4m3_to_f32((uint8_t)(u.x >> 8)));
            o.y = pack_bf16x2(e4m3_to_f32((uint8_t)(u.x >> 16)), e4m3_to_f32((uint8_t)(u.x >> 24)));
            o.z = pack_bf16x2(e4m3_to_f32((uint8_t)u.y), e4m3_to_f32((uint8_t)(u.y >> 8)));
            o.w = pack_bf16x2(e4m3_to_f32((uint8_t)(u.y >> 16)), e4m3_to_f32((uint8_t)(u.y >> 24)));
        }
        st_shared_v4(tile + tile_offset(r, c, 2 * D, kRows), o);
    }
}

// Where the K/V rows of one (sequence, KV head) are, for the TMA coordinates
// and the NVFP4 scale rows (msa_common.cuh KVSource::locate).
struct KVGeom {
    const int* page_row;  // page_table + b * stride, nullptr = dense
    int dense_base;       // cu_seqlens_k[b] (dense)
    int h, Hkv, page_size;
    __device__ __forceinline__ long long scale_row(int t) const {
        if (page_row) return ((long long)page_row[t / page_size] * Hkv + h) * page_size + (t % page_size);
        return ((long long)dense_base + t) * Hkv + h;
    }
};

// One thread: issue the TMA boxes of a K or V tile of keys [t0, t0 + nkeys)
// into `dst` (raw layout: blocks_of(kRawRow) column blocks of 128 rows x span)
// and arm `bar` with the transaction bytes of exactly these boxes.
template <int kRawRow, int kElemBytes>
__device__ __forceinline__ void issue_kv_tile(uint32_t dst, const CUtensorMap* map, uint32_t bar, const KVGeom& g,
                                              int t0, int nkeys) {
    constexpr int span = span_of(kRawRow), boxes = blocks_of(kRawRow), inner = span / kElemBytes;
    const bool paged = g.page_row != nullptr;
    mbar_arrive_expect_tx(bar, kv_tx_bytes(nkeys, paged ? 1 : 0, g.page_size, kRawRow));
    if (!paged) {
#pragma unroll
        for (int bx = 0; bx < boxes; ++bx)
            tma_load_3d(dst + bx * kBlockKeys * span, map, bar, bx * inner, g.h, g.dense_base + t0);
    } else {
        const int rows = paged_rows(g.page_size);
        const int nseg = segments_issued(nkeys, rows);
#pragma unroll 1
        for (int s = 0; s < nseg; ++s) {
            const int t = t0 + s * rows;
            const int page = g.page_row[t / g.page_size];
#pragma unroll
            for (int bx = 0; bx < boxes; ++bx)
                tma_load_4d(dst + bx * kBlockKeys * span + s * rows * span, map, bar, bx * inner, t % g.page_size, g.h,
                            page);
        }
    }
}

// Zero row r of a tile (every column block): rows past the block's keys, so
// that P = 0 never meets stale shared memory (0 * NaN) in O = P V.
template <int kRowBytes, int kRows>
__device__ __forceinline__ void zero_row(uint32_t tile, int r) {
#pragma unroll
    for (int c = 0; c < kRowBytes / 16; ++c) st_shared_v4(tile + tile_offset(r, c, kRowBytes, kRows), make_uint4(0, 0, 0, 0));
}

// Converter: key row r of a raw E4M3 or NVFP4 tile (as TMA landed it) ->
// BF16 row r of `dst` (same swizzled K-major layout as a BF16 TMA tile).
// NVFP4: element 2i is the low nibble of byte i; value = e2m1 * e4m3 block
// scale of its 16 elements (scale128x4 layout, row srow), exact in bf16; the
// global scale is applied elsewhere (K: the score scale; V: the combine).
template <int V, int D>
__device__ __forceinline__ void convert_kv_row(uint32_t dst, uint32_t raw, int r, bool valid, const uint8_t* scales,
                                               long long srow) {
    constexpr int raw_row = kv_row_bytes(V, D);
    if (!valid) {
        zero_row<2 * D, kBlockKeys>(dst, r);
        return;
    }
#pragma unroll
    for (int rc = 0; rc < raw_row / 16; ++rc) {
        const uint4 u = ld_shared_v4(raw + tile_offset(r, rc, raw_row, kBlockKeys));
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
        if constexpr (V == kBF16FP8) {  // 16 e4m3 -> 2 bf16 chunks
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                uint32_t o[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const uint32_t x = w[2 * half + i / 2] >> (16 * (i & 1));
                    o[i] = pack_bf16x2(e4m3_to_f32((uint8_t)x), e4m3_to_f32((uint8_t)(x >> 8)));
                }
                st_shared_v4(dst + tile_offset(r, 2 * rc + half, 2 * D, kBlockKeys), make_uint4(o[0], o[1], o[2], o[3]));
            }
        } else {  // NVFP4: 32 nibbles -> 4 bf16 chunks, two block scales
            const float s0 = e4m3_to_f32(scales[scale128x4(srow, 2 * rc, D >> 4)]);
            const float s1 = e4m3_to_f32(scales[scale128x4(srow, 2 * rc + 1, D >> 4)]);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const float s = q < 2 ? s0 : s1;
                uint32_t o[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const uint32_t x = w[q] >> (8 * i);
                    o[i] = pack_bf16x2(e2m1_to_f32(x & 0xFu) * s, e2m1_to_f32((x >> 4) & 0xFu) * s);
                }
                st_shared_v4(dst + tile_offset(r, 4 * rc + q, 2 * D, kBlockKeys), make_uint4(o[0], o[1], o[2], o[3]));
            }
        }
    }
}

// P element -> MMA operand bits. BF16 products: P rounded like round_p
// (pv_round E4M3: to e4m3, held exactly in bf16; else to bf16, the
// operand's own rounding). FP8 products: e4m3, saturating.
__device__ __forceinline__ uint32_t pack_p_bf16(float a, float b, int pv_round) {
    if (pv_round == MSA_ROUND_E4M3) {
        a = round_p(a, MSA_ROUND_E4M3);
        b = round_p(b, MSA_ROUND_E4M3);
    }
    return pack_bf16x2(a, b);
}
__device__ __forceinline__ uint32_t pack_p_e4m3x4(float a, float b, float c, float d) {
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
    return lo | (hi << 16);
}
// v[b .. b + 15] as 16 E4M3 bytes (saturating), in order: one 16-byte chunk.
__device__ __forceinline__ uint4 pack_e4m3x16(const float (&v)[32], int b) {
    uint32_t o[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) o[q] = pack_p_e4m3x4(v[b + 4 * q], v[b + 4 * q + 1], v[b + 4 * q + 2], v[b + 4 * q + 3]);
    return make_uint4(o[0], o[1], o[2], o[3]);
}

// 32 probabilities v (keys c0 .. c0 + 31 of row r) into a K-major P tile of
// 128 keys per row: E4M3 (kF8, 16 keys per 16-byte chunk) or BF16 rounded
// per pv_round (8 keys per chunk). The P operand of O = P V in both
// prefill kernels.
template <bool kF8>
__device__ __forceinline__ void store_p32(uint32_t tile, int r, int c0, const float (&v)[32], int pv_round) {
    constexpr int row_bytes = kBlockKeys * (kF8 ? 1 : 2);
    if constexpr (kF8) {
#pragma unroll
        for (int c = 0; c < 2; ++c) st_shared_v4(tile + tile_offset(r, c0 / 16 + c, row_bytes, kTileM), pack_e4m3x16(v, 16 * c));
    } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            uint32_t o[4];
#pragma unroll
            for (int q = 0; q < 4; ++q) o[q] = pack_p_bf16(v[8 * c + 2 * q], v[8 * c + 2 * q + 1], pv_round);
            st_shared_v4(tile + tile_offset(r, c0 / 8 + c, row_bytes, kTileM), make_uint4(o[0], o[1], o[2], o[3]));
        }
    }
}

// The same 32 probabilities into this thread's lane of a P operand in
// tensor memory (the A of a tcgen05.mma with A in tensor memory): keys
// c0 .. c0 + 31 at column c0 / 2 (BF16 pairs) or c0 / 4 (E4M3 quads) from
// taddr, the lowest key in the lowest bits. Not waited (tmem_wait_st).
template <bool kF8>
__device__ __forceinline__ void tmem_store_p32(uint32_t taddr, int c0, const float (&v)[32], int pv_round) {
    if constexpr (kF8) {
        uint32_t w[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) w[i] = pack_p_e4m3x4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
        tmem_st_u32x8(taddr + c0 / 4, w);
    } else {
        uint32_t w[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) w[i] = pack_p_bf16(v[2 * i], v[2 * i + 1], pv_round);
        tmem_st_u32x16(taddr + c0 / 2, w);
    }
}

// The softmax of one thread's row over one block in tensor memory (S: 128
// FP32 columns at tS, lane = the row), in base 2 as msa_core.cuh
// block_update: keys [0, vis) are visible.
// tmem_row_max: the largest visible score times scale (-inf: none).
__device__ __forceinline__ float tmem_row_max(uint32_t tS, int vis, float scale) {
    float mx = -INFINITY;
#pragma unroll
    for (int c0 = 0; c0 < kBlockKeys; c0 += 32) {
        float v[32];
        tmem_ld32(tS + c0, v);
#pragma unroll
        for (int j = 0; j < 32; ++j)
            if (c0 + j < vis) mx = fmaxf(mx, v[j] * scale);
    }
    return mx;
}
// tmem_row_p: P = exp2(s * scale - mref) of the visible keys (0 elsewhere,
// and everywhere when `empty`), E4M3 for kF8, else BF16 per pv_round, into
// row r of the K-major shared-memory P tile pt, or with kPTmem into this
// thread's lane of tensor memory from column address pt (tmem_store_p32,
// waited before the return). pt may be tS itself: the P of chunk c0 lands
// in columns below c0 + 32, all of them read by this or an earlier chunk.
// The unrounded P adds to sum and, with invT > 0,
// exp2((s * scale - mref) * invT) to tsum.
template <bool kF8, bool kPTmem = false>
__device__ __forceinline__ void tmem_row_p(uint32_t tS, int vis, bool empty, float scale, float mref, float invT, uint32_t pt,
                                           int r, int pv_round, float& sum, float& tsum) {
    // Two 32-column chunks at a time: fully unrolled, ptxas keeps all four
    // chunks live (E4M3 P packing then needs more than the 168 registers a
    // thread may have when 9 or 10 warps share the SM's four schedulers,
    // and spills).
#pragma unroll 2
    for (int c0 = 0; c0 < kBlockKeys; c0 += 32) {
        float v[32];
        tmem_ld32(tS + c0, v);
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            const bool on = !empty && c0 + j < vis;
            const float x = v[j] * scale;
            const float pj = on ? exp2f(x - mref) : 0.f;
            sum += pj;
            if (invT > 0.f && on) tsum += exp2f((x - mref) * invT);
            v[j] = pj;
        }
        if constexpr (kPTmem) tmem_store_p32<kF8>(pt, c0, v, pv_round);
        else store_p32<kF8>(pt, r, c0, v, pv_round);
    }
    if constexpr (kPTmem) tmem_wait_st();
}

// The end of a CTA that allocated kCols TMEM columns: every thread
// arrives once every product it waited for has completed and every TMEM
// read is done; then the allocating warp frees the columns.
template <int kCols>
__device__ __forceinline__ void tmem_release_cta(bool allocating_warp, uint32_t tmem) {
    tc_fence_before();
    __syncthreads();
    if (allocating_warp) {
        tc_fence_after();
        tmem_dealloc<kCols>(tmem);
    }
}

// 32 consecutive values of an output row in a partial dtype, 16-byte stores.
__device__ __forceinline__ void store32(void* base, long long elem, const float (&v)[32], int dtype) {
    if (dtype == MSA_DT_F32) {
        float4* d = reinterpret_cast<float4*>(reinterpret_cast<float*>(base) + elem);
#pragma unroll
        for (int i = 0; i < 8; ++i) d[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
    } else if (dtype == MSA_DT_BF16 || dtype == MSA_DT_F16) {
        uint4* d = reinterpret_cast<uint4*>(reinterpret_cast<uint16_t*>(base) + elem);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            uint32_t o[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float a = v[8 * i + 2 * j], b = v[8 * i + 2 * j + 1];
                if (dtype == MSA_DT_BF16) {
                    o[j] = pack_bf16x2(a, b);
                } else {
                    __half2 hv = __floats2half2_rn(a, b);
                    o[j] = *reinterpret_cast<uint32_t*>(&hv);
                }
            }
            d[i] = make_uint4(o[0], o[1], o[2], o[3]);
        }
    } else {
        uint4* d = reinterpret_cast<uint4*>(reinterpret_cast<uint8_t*>(base) + elem);
#pragma unroll
        for (int i = 0; i < 2; ++i) d[i] = pack_e4m3x16(v, 16 * i);
    }
}

#endif  // MSA_SM100_ENABLED

}  // namespace sm100
}  // namespace msa

#endif  // SM100_COMMON_CUH
