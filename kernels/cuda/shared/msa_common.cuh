// msa_common.cuh - numerics, tile geometry and K/V addressing shared by every
// kernel. Nothing here depends on the MMA backend.
#ifndef MSA_COMMON_CUH
#define MSA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include "shared/msa_params.h"

namespace msa {

constexpr int kThreads = 128;          // 4 warps per CTA
constexpr int kWarps = kThreads / 32;
constexpr int kBlockN = 128;           // keys per softmax block (= tile.BlockN)

// Tile geometry, a compile-time parameter of every kernel template (one
// source, instantiated per head dim). Static shared memory must stay under
// 48 KB (gorgonia.org/cu v0.9.6 has no cuFuncSetAttribute to raise the
// dynamic limit), so D = 256 halves both the row tile and the K/V sub-tile:
//   D <= 128: kRows = 32 query-head rows, kSubN = 64 keys per sub-tile;
//   D == 256: kRows = 16,                 kSubN = 32.
// kKeyFrags = kSubN / 32 is the number of keys of a sub-tile a lane scores.
template <int D> struct Geo {
    static_assert(D == 64 || D == 128 || D == 256, "head dim");
    static constexpr int kRows = D <= 128 ? 32 : 16;    // query-head rows per row tile
    static constexpr int kWarpRows = kRows / kWarps;    // rows owned by one warp
    static constexpr int kSubN = D <= 128 ? 64 : 32;    // keys per K/V shared-memory sub-tile
    static constexpr int kKeyFrags = kSubN / 32;        // keys per lane per sub-tile
    static constexpr int kvStride = D + 2;  // bf16 elements; odd word stride: conflict-free rows
    static constexpr int qStride = D;
    static constexpr int sStride = kBlockN;
    static_assert(kRows <= 32 && kRows % kWarps == 0 && kBlockN % kSubN == 0 && kSubN % 32 == 0, "tile geometry");
};

// ---- scalar conversions -------------------------------------------------
__device__ __forceinline__ float e4m3_to_f32(uint8_t b) {
    __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3);
    return __half2float(__half(h));
}
__device__ __forceinline__ uint8_t f32_to_e4m3_sat(float x) {
    return (uint8_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}
// E2M1 nibble (bit 3 sign) -> value; magnitudes*2 = {0,1,2,3,4,6,8,12}.
__device__ __forceinline__ float e2m1_to_f32(uint32_t nib) {
    float m = (float)((0xC8643210u >> ((nib & 7u) * 4u)) & 0xFu) * 0.5f;
    return (nib & 8u) ? -m : m;
}
__device__ __forceinline__ float round_p(float p, int mode) {
    if (mode == MSA_ROUND_BF16) return __bfloat162float(__float2bfloat16_rn(p));
    if (mode == MSA_ROUND_E4M3) return e4m3_to_f32(f32_to_e4m3_sat(p));
    return p;
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ float2 unpack_bf16x2(uint32_t w) {
    __nv_bfloat162 v = *reinterpret_cast<__nv_bfloat162*>(&w);
    return __bfloat1622float2(v);
}
// Offset of (r, c) in the cuBLAS 128x4 tiled scale layout (contract §6).
__device__ __forceinline__ long long scale128x4(long long r, int c, int cols) {
    int cb = (cols + 3) >> 2;
    return ((r >> 7) * cb + (c >> 2)) * 512 + (r & 31) * 16 + ((r & 127) >> 5) * 4 + (c & 3);
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// Store 8 values (one chunk of a row) into shared memory as bf16 (4-byte stores).
__device__ __forceinline__ void st_chunk8(__nv_bfloat16* dst, const float (&f)[8]) {
    uint32_t* w = reinterpret_cast<uint32_t*>(dst);
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = pack_bf16x2(f[2 * i], f[2 * i + 1]);
}

// Decode 8 consecutive elements d0..d0+7 of one row into f.
//   base: element 0 of the row (bytes for fp8/nvfp4, bf16 elements otherwise);
//   scales/srow: nvfp4 block-scale matrix and the row's index in it.
__device__ __forceinline__ void load_chunk8(float (&f)[8], const void* base, long long row_elem, int d0,
                                            int dtype, const uint8_t* scales, long long srow, int D) {
    if (dtype == MSA_DT_BF16) {
        const uint4 u = *reinterpret_cast<const uint4*>(
            reinterpret_cast<const __nv_bfloat16*>(base) + row_elem + d0);
        float2 a = unpack_bf16x2(u.x), b = unpack_bf16x2(u.y), c = unpack_bf16x2(u.z), d = unpack_bf16x2(u.w);
        f[0] = a.x; f[1] = a.y; f[2] = b.x; f[3] = b.y; f[4] = c.x; f[5] = c.y; f[6] = d.x; f[7] = d.y;
    } else if (dtype == MSA_DT_E4M3) {
        const uint2 u = *reinterpret_cast<const uint2*>(reinterpret_cast<const uint8_t*>(base) + row_elem + d0);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            f[i] = e4m3_to_f32((uint8_t)(u.x >> (8 * i)));
            f[4 + i] = e4m3_to_f32((uint8_t)(u.y >> (8 * i)));
        }
    } else {  // MSA_DT_NVFP4: row_elem counts elements, storage is row_elem/2 bytes
        const uint32_t u = *reinterpret_cast<const uint32_t*>(
            reinterpret_cast<const uint8_t*>(base) + (row_elem >> 1) + (d0 >> 1));
        const float s = e4m3_to_f32(scales[scale128x4(srow, d0 >> 4, D >> 4)]);
#pragma unroll
        for (int i = 0; i < 8; ++i) f[i] = e2m1_to_f32(u >> (4 * i)) * s;  // exact in bf16
    }
}

// Where the keys of one (sequence, KV head) live. Token t is sequence-local.
struct KVSource {
    const void* k;
    const void* v;
    const uint8_t* k_scale;
    const uint8_t* v_scale;
    const int* page_row;  // page_table + b*stride, or nullptr for dense
    long long dense_base; // cu_seqlens_k[b] (dense)
    int h, Hkv, page_size, dtype;

    // Element offset of (t, h, 0) and the nvfp4 scale-matrix row of (t, h).
    __device__ __forceinline__ void locate(int t, int D, long long& elem, long long& srow) const {
        if (page_row) {
            const long long page = page_row[t / page_size];
            srow = (page * Hkv + h) * page_size + (t % page_size);
        } else {
            srow = (dense_base + t) * Hkv + h;
        }
        elem = srow * D;
    }
};

// Cooperative load of keys [t0, t0+Geo<D>::kSubN) (only the first n valid, rest zero)
// of K (which=0) or V (which=1) into shared memory as bf16 rows.
template <int D>
__device__ __forceinline__ void load_kv_subtile(__nv_bfloat16* sKV, const KVSource& src, int which, int t0, int n) {
    constexpr int chunks = D / 8;
    const void* base = which ? src.v : src.k;
    const uint8_t* sc = which ? src.v_scale : src.k_scale;
    for (int i = threadIdx.x; i < Geo<D>::kSubN * chunks; i += kThreads) {
        const int j = i / chunks, c = i % chunks;
        float f[8];
        if (j < n) {
            long long elem, srow;
            src.locate(t0 + j, D, elem, srow);
            load_chunk8(f, base, elem, c * 8, src.dtype, sc, srow, D);
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) f[e] = 0.f;
        }
        st_chunk8(sKV + j * Geo<D>::kvStride + c * 8, f);
    }
}

// Load the Q rows of a row tile: q_off[r] = element offset of row r (or -1).
template <int D>
__device__ __forceinline__ void load_q_tile(__nv_bfloat16* sQ, const void* q, int q_dtype, const long long* q_off) {
    constexpr int chunks = D / 8;
    for (int i = threadIdx.x; i < Geo<D>::kRows * chunks; i += kThreads) {
        const int r = i / chunks, c = i % chunks;
        float f[8];
        if (q_off[r] >= 0) {
            load_chunk8(f, q, q_off[r], c * 8, q_dtype, nullptr, 0, D);
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) f[e] = 0.f;
        }
        st_chunk8(sQ + r * Geo<D>::qStride + c * 8, f);
    }
}

// Store n consecutive floats of an output row in a partial dtype.
__device__ __forceinline__ void store_val(void* dst, long long idx, float x, int dtype) {
    switch (dtype) {
    case MSA_DT_F32: reinterpret_cast<float*>(dst)[idx] = x; break;
    case MSA_DT_BF16: reinterpret_cast<__nv_bfloat16*>(dst)[idx] = __float2bfloat16_rn(x); break;
    case MSA_DT_F16: reinterpret_cast<__half*>(dst)[idx] = __float2half_rn(x); break;
    default: reinterpret_cast<uint8_t*>(dst)[idx] = f32_to_e4m3_sat(x); break;
    }
}
__device__ __forceinline__ float load_val(const void* src, long long idx, int dtype) {
    switch (dtype) {
    case MSA_DT_F32: return reinterpret_cast<const float*>(src)[idx];
    case MSA_DT_BF16: return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(src)[idx]);
    case MSA_DT_F16: return __half2float(reinterpret_cast<const __half*>(src)[idx]);
    default: return e4m3_to_f32(reinterpret_cast<const uint8_t*>(src)[idx]);
    }
}

}  // namespace msa

// One forward-schedule work item (metadata row w: KV head h, CSR row, the
// query range [q_begin, q_begin + q_count) of that row, batch b, KV block
// jblk), its sequence's query start q0 and lengths, and the block's first
// key t0 (msa_params.h's or msa_tc_abi.h's MsaFwdParams). fwd_item returns
// false for w past capacity or work_count. tc_frag.cuh's fwd_rows, whose
// callers check the bounds, reads the same fields on its own.
struct FwdItem {
    int h, row, q_begin, q_count, b, jblk, q0, seqlen_q, seqlen_k, t0;
};
template <class P>
__device__ __forceinline__ bool fwd_item(const P& p, int w, FwdItem& it) {
    if (w >= p.capacity || w >= *reinterpret_cast<const int*>(p.work_count)) return false;
    const int* meta = reinterpret_cast<const int*>(p.metadata) + 6 * w;
    it.h = meta[0]; it.row = meta[1]; it.q_begin = meta[2]; it.q_count = meta[3]; it.b = meta[4]; it.jblk = meta[5];
    const int* cu_q = reinterpret_cast<const int*>(p.cu_seqlens_q);
    const int* cu_k = reinterpret_cast<const int*>(p.cu_seqlens_k);
    it.q0 = cu_q[it.b];
    it.seqlen_q = cu_q[it.b + 1] - it.q0;
    if (p.seqused_k) it.seqlen_k = reinterpret_cast<const int*>(p.seqused_k)[it.b];
    else if (p.page_table) it.seqlen_k = p.page_table_stride * p.page_size;
    else it.seqlen_k = cu_k[it.b + 1] - cu_k[it.b];
    it.t0 = it.jblk * p.blk_kv;
    return true;
}

// One decode work item of the schedule (msa_params.h's or msa_tc_abi.h's
// MsaDecodeParams: the same field names): KV head h, request b, q tile qt,
// KV chunk kt, the request's key count and the chunk's key range
// [kv_begin, kv_end). decode_item returns false for an index past
// work_count or an invalid (padding) item. Shared by every decode kernel.
struct DecodeItem {
    int h, b, qt, kt, seqused, kv_begin, kv_end;
};
template <class P>
__device__ __forceinline__ bool decode_item(const P& p, int w, DecodeItem& it) {
    if (w >= p.work_count || !reinterpret_cast<const int*>(p.valid)[w]) return false;
    it.h = reinterpret_cast<const int*>(p.kv_head)[w];
    it.b = reinterpret_cast<const int*>(p.request)[w];
    it.qt = reinterpret_cast<const int*>(p.qtile_idx)[w];
    it.kt = reinterpret_cast<const int*>(p.kv_tile)[w];
    it.seqused = reinterpret_cast<const int*>(p.seqused_k)[it.b];
    it.kv_begin = 0;
    it.kv_end = it.seqused;
    if (p.split_kv) {
        const long long span = (long long)p.chunk_pages * p.page_size;
        it.kv_begin = (int)min((long long)it.kt * span, (long long)it.seqused);
        it.kv_end = (int)min((long long)(it.kt + 1) * span, (long long)it.seqused);
    }
    return true;
}

// The query-head rows of a decode work item: row idx of the item is query
// token i0 + idx / qhpk of the request at query head h * qhpk + idx % qhpk;
// row() gives its Q row offset (elements), its output row (the split's
// partial row with split KV), its causal limit (bottom-right: keys below
// seqused - seqlen_q + i + 1) and i; -1 / 0 past the item's rows. Shared
// by every decode kernel.
struct DecRows {
    long long qbase;  // b * seqlen_q
    int h, qhpk, Hq, D, i0, nrows, seqused, seqlen_q, obase, split;
    __device__ __forceinline__ void row(int idx, long long& qoff, long long& orow, int& lim, int& i) const {
        qoff = -1; orow = -1; lim = 0; i = -1;
        if (idx >= nrows) return;
        i = i0 + idx / qhpk;
        const int hq = h * qhpk + idx % qhpk;
        const long long qrow = qbase + i;
        qoff = (qrow * Hq + hq) * D;
        orow = split ? (long long)(obase + i) * Hq + hq : qrow * Hq + hq;
        lim = min(seqused, seqused - seqlen_q + i + 1);
    }
};

// dec_rows returns the rows of decode work item it for head dimension D.
template <class P>
__device__ __forceinline__ DecRows dec_rows(const P& p, const DecodeItem& it, int D) {
    DecRows R;
    R.qbase = (long long)it.b * p.seqlen_q;
    R.h = it.h; R.qhpk = p.qhead_per_kv; R.Hq = p.num_heads_q; R.D = D;
    R.i0 = it.qt * p.q_tile;
    R.nrows = min(p.q_tile, p.seqlen_q - it.qt * p.q_tile) * p.qhead_per_kv;
    R.seqused = it.seqused; R.seqlen_q = p.seqlen_q;
    R.split = p.split_kv;
    R.obase = p.split_kv ? reinterpret_cast<const int*>(p.o_indptr)[it.b] + it.kt * p.q_stride : 0;
    return R;
}

#endif  // MSA_COMMON_CUH
