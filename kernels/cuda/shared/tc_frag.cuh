// tc_frag.cuh - what the tensor-core kernels (sm80_*.cu mma.sync, sm90_*.cu
// wgmma) share: the variant codes, the per-row work-item metadata, and the
// online softmax / epilogue on accumulator fragments.
//
// Fragment layout (mma.sync m16n8 C fragment; each warp of a wgmma m64nN
// accumulator has the same layout over its 16 rows): lane l of warp w owns the
// two rows 16w + l/4 + 8i (i = 0, 1) and, in n-tile j (8 columns), the columns
// 8j + 2(l%4) + e (e = 0, 1); register index 4j + 2i + e. A score tile of 128
// keys is float[64]; an output tile of D columns is float[D/2]. The A operand
// of P.V (m16n8k16 / wgmma k16 register fragment) for keys 16kk..16kk+15 is
// the four packed pairs (4kk + q), q = 0..3, of that same layout, so P never
// leaves the registers.
#ifndef MSA_TC_FRAG_CUH
#define MSA_TC_FRAG_CUH

#include <climits>
#include "shared/msa_common.cuh"
#include "shared/e4m3_conv.cuh"

namespace msa {
namespace tc {

// Variant codes: the <variant> part of msa_<arch>_<algo>_<variant>_d<D>.
enum { kVarBF16 = 0, kVarFP8 = 1, kVarBF16FP8 = 2, kVarNVFP4 = 3 };
// The same codes spelled as in the kernel names (for token pasting).
// kVar_fp8pv: the fp8 variant with P.V on the e4m3 wgmma (sm90_decode_pipe.cu),
// whose storage and geometry are the fp8 variant's.
enum { kVar_bf16 = kVarBF16, kVar_fp8 = kVarFP8, kVar_bf16fp8 = kVarBF16FP8, kVar_nvfp4 = kVarNVFP4, kVar_fp8pv = kVarFP8 };

constexpr int kBlk = 128;      // keys per K/V block (one softmax block)
constexpr int kTileRows = 64;  // query-head rows per tile (4 warps x 16)

// Bytes per element of a K/V row as stored in global memory, per variant.
template <int VAR> struct KvStore {
    static constexpr int row_bytes(int d) { return VAR == kVarBF16 ? 2 * d : VAR == kVarNVFP4 ? d / 2 : d; }
    static constexpr bool kBF16 = VAR == kVarBF16;  // K/V rows are bf16 (else e4m3 or packed e2m1 bytes)
};

// Per-thread online-softmax state of the thread's two rows.
struct Soft {
    float m[2], l[2], tl[2];
    __device__ __forceinline__ void reset() {
#pragma unroll
        for (int i = 0; i < 2; ++i) { m[i] = -INFINITY; l[i] = 0.f; tl[i] = 0.f; }
    }
};

// E4M3 conversions of the tensor-core kernels: the hardware's where the
// target has them (sm_89+), the integer forms above on sm_80.
__device__ __forceinline__ uint32_t f32_to_e4m3_tc(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    return f32_to_e4m3_sat(x);
#else
    return f32_to_e4m3_int(x);
#endif
}
__device__ __forceinline__ float e4m3_to_f32_tc(uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    return e4m3_to_f32((uint8_t)b);
#else
    return e4m3_to_f32_int(b);
#endif
}

// P rounding of the tensor-core kernels (round_p of msa_common.cuh, with the
// E4M3 rounding in integer arithmetic where the target has no e4m3 cvt).
__device__ __forceinline__ float round_p_tc(float p, int mode) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    return round_p(p, mode);
#else
    if (mode == MSA_ROUND_E4M3) return round_e4m3_int(p);
    return round_p(p, mode);
#endif
}

__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// One softmax block (<= 128 keys: NS = keys/2 score registers, 64 for a
// 128-key block, 32 for 64 keys) folded into the state, in base 2 like
// block_update (msa_core.cuh): keys [0, lim[i]) of the block are visible to
// row i; the sum uses the unrounded P; s is left holding P rounded per
// pv_round (0 for invisible keys). alpha[i] rescales the row's output
// accumulator (1 when the block has no visible key for the row: the row is
// untouched). Every lane executes every shuffle (no divergent exits). It
// reads and writes s and the state only, so it may run while a wgmma still
// reads the previous block's P fragment and accumulates the output.
template <int NS>
__device__ __forceinline__ void softmax_fold(float (&s)[NS], const int (&lim)[2], float scale_log2, float invT,
                                             int pv_round, Soft& st, float (&alpha)[2]) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < NS / 4; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int key = 8 * j + 2 * t + e;
                const float x = key < lim[i] ? s[4 * j + 2 * i + e] * scale_log2 : -INFINITY;
                s[4 * j + 2 * i + e] = x;
                mx = fmaxf(mx, x);
            }
        mx = quad_max(mx);
        const bool empty = mx == -INFINITY;
        const float mnew = empty ? st.m[i] : fmaxf(st.m[i], mx);
        float sum = 0.f, tsum = 0.f;
#pragma unroll
        for (int j = 0; j < NS / 4; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float x = s[4 * j + 2 * i + e];
                const bool vis = x != -INFINITY;
                const float pr = vis ? exp2f(x - mnew) : 0.f;
                sum += pr;
                if (invT > 0.f && vis) tsum += exp2f((x - mnew) * invT);
                s[4 * j + 2 * i + e] = round_p_tc(pr, pv_round);
            }
        sum = quad_sum(sum);
        if (invT > 0.f) {
            tsum = quad_sum(tsum);
            if (!empty) st.tl[i] = st.tl[i] * exp2f((st.m[i] - mnew) * invT) + tsum;
        }
        alpha[i] = empty ? 1.f : exp2f(st.m[i] - mnew);
        st.l[i] = st.l[i] * alpha[i] + sum;
        st.m[i] = mnew;
    }
}

// Pack the rounded P of softmax_fold into the P.V A fragment: pair 2j + i
// is (row i, keys 8j + 2t, 8j + 2t + 1).
template <int NS>
__device__ __forceinline__ void pack_p(const float (&s)[NS], uint32_t (&pa)[NS / 2]) {
#pragma unroll
    for (int j = 0; j < NS / 4; ++j)
#pragma unroll
        for (int i = 0; i < 2; ++i) pa[2 * j + i] = pack_bf16x2(s[4 * j + 2 * i], s[4 * j + 2 * i + 1]);
}

// softmax_fold, then P into the A fragment pa.
template <int NS>
__device__ __forceinline__ void softmax_block(float (&s)[NS], const int (&lim)[2], float scale_log2, float invT,
                                              int pv_round, Soft& st, uint32_t (&pa)[NS / 2], float (&alpha)[2]) {
    softmax_fold(s, lim, scale_log2, invT, pv_round, st, alpha);
    pack_p(s, pa);
}

// Final normalisation of row i (tile.Acc.Finish): 1/l, natural-log LSE and
// temperature LSE; an empty row gives 0 and -inf.
__device__ __forceinline__ float finish(const Soft& st, int i, float invT, float& lse, float& tlse) {
    constexpr float kLn2 = 0.693147180559945309f;
    if (!(st.l[i] > 0.f) || st.m[i] == -INFINITY) {
        lse = -INFINITY; tlse = -INFINITY;
        return 0.f;
    }
    lse = (st.m[i] + log2f(st.l[i])) * kLn2;
    tlse = invT > 0.f ? (st.m[i] * invT + log2f(st.tl[i])) * kLn2 : lse;
    return 1.f / st.l[i];
}

// Store columns (c, c+1) of output row `row` (element offset row*D + c) in a dtype.
__device__ __forceinline__ void store_pair(void* dst, long long idx, float a, float b, int dtype) {
    switch (dtype) {
    case MSA_DT_F32: *reinterpret_cast<float2*>(reinterpret_cast<float*>(dst) + idx) = make_float2(a, b); break;
    case MSA_DT_BF16: *reinterpret_cast<uint32_t*>(reinterpret_cast<__nv_bfloat16*>(dst) + idx) = pack_bf16x2(a, b); break;
    case MSA_DT_F16: *reinterpret_cast<__half2*>(reinterpret_cast<__half*>(dst) + idx) = __floats2half2_rn(a, b); break;
    default:
        *reinterpret_cast<uint16_t*>(reinterpret_cast<uint8_t*>(dst) + idx) =
            (uint16_t)(f32_to_e4m3_tc(a) | (f32_to_e4m3_tc(b) << 8));
        break;
    }
}

// Epilogues of a warp's two fragment rows i = 0, 1 (tile rows 8i + lane/4
// of its 16; orow[i] < 0: no output row), shared by the sm_80 and sm_90a
// kernels: the thread holds columns 8j + 2(lane&3) and +1 of each 8-column
// group j as o[4j + 2i], o[4j + 2i + 1] (the mma / wgmma accumulator
// fragment), scaled by 1/l at the store; the first lane of each quad
// writes the row's LSE (and temperature LSE).
//
// store_fwd_rows: prefill partials (all D columns) in the partial dtype.
template <int D>
__device__ __forceinline__ void store_fwd_rows(const MsaFwdParams& p, const Soft& st, float invT, const float (&o)[D / 2],
                                               const long long (&orow)[2], int lane) {
    float* lse_part = reinterpret_cast<float*>(p.lse_partial);
    float* tlse_part = reinterpret_cast<float*>(p.tlse_partial);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (orow[i] < 0) continue;
        float lse, tlse;
        const float inv = finish(st, i, invT, lse, tlse);
#pragma unroll
        for (int j = 0; j < D / 8; ++j)
            store_pair(reinterpret_cast<void*>(p.o_partial), orow[i] * D + 8 * j + 2 * (lane & 3), o[4 * j + 2 * i] * inv,
                       o[4 * j + 2 * i + 1] * inv, p.partial_dtype);
        if ((lane & 3) == 0) {
            lse_part[orow[i]] = lse;
            if (tlse_part) tlse_part[orow[i]] = tlse;
        }
    }
}

// store_decode_rows: decode output columns [col0, col0 + DO) of rows of D:
// float partials with split-KV, else BF16 times oscale; the LSE only where
// write_lse (one column group of a row writes it).
template <int D, int DO>
__device__ __forceinline__ void store_decode_rows(const MsaDecodeParams& p, const Soft& st, const float (&o)[DO / 2],
                                                  const long long (&orow)[2], int col0, int lane, bool write_lse, float oscale) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (orow[i] < 0) continue;
        float lse, tlse;
        const float inv = finish(st, i, 0.f, lse, tlse);
#pragma unroll
        for (int j = 0; j < DO / 8; ++j) {
            const long long idx = orow[i] * D + col0 + 8 * j + 2 * (lane & 3);
            if (p.split_kv)
                store_pair(reinterpret_cast<void*>(p.o_partial), idx, o[4 * j + 2 * i] * inv, o[4 * j + 2 * i + 1] * inv, MSA_DT_F32);
            else
                store_pair(reinterpret_cast<void*>(p.out), idx, o[4 * j + 2 * i] * inv * oscale, o[4 * j + 2 * i + 1] * inv * oscale,
                           MSA_DT_BF16);
        }
        if (write_lse && (lane & 3) == 0) reinterpret_cast<float*>(p.split_kv ? p.lse_partial : p.lse)[orow[i]] = lse;
    }
}

// The thread's two fragment rows in a 64-row tile whose first row is rt
// (see the fragment layout at the top): rr[i] = 16 warp + lane/4 + 8i is
// the row within the tile, and orow, lim and tok are what Rows::row gives
// for row rt + rr[i]: its output row (-1: none), its key bound and its query
// (the token of a query tile, the query of a decode item).
struct FragRows {
    long long orow[2];
    int lim[2], rr[2], tok[2];
};

template <class Rows>
__device__ __forceinline__ FragRows frag_rows(const Rows& R, int rt, int warp, int lane) {
    FragRows f;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        long long qoff;
        f.rr[i] = 16 * warp + (lane >> 2) + 8 * i;
        R.row(rt + f.rr[i], qoff, f.orow[i], f.lim[i], f.tok[i]);
    }
    return f;
}

// A zeroed output accumulator fragment.
template <int N>
__device__ __forceinline__ void zero_frag(float (&o)[N]) {
#pragma unroll
    for (int e = 0; e < N; ++e) o[e] = 0.f;
}

// The rows of a query tile: row idx is token idx / qhpk (tok), head
// h * qhpk + idx % qhpk; output row qrow * Hq + hq; key bound lim.
struct QRows {
    long long first;  // global query row of the tile's first token
    int local0;       // its index in the sequence
    int h, qhpk, Hq, D, nrows, seqlen_k, seqlen_q, causal;
    __device__ __forceinline__ void row(int idx, long long& qoff, long long& orow, int& lim, int& tok) const {
        qoff = -1; orow = -1; lim = 0; tok = 0;
        if (idx >= nrows) return;
        tok = idx / qhpk;
        const int hq = h * qhpk + idx % qhpk;
        const long long qrow = first + tok;
        orow = qrow * Hq + hq;
        qoff = orow * D;
        lim = seqlen_k;
        if (causal) lim = min(lim, local0 + tok + seqlen_k - seqlen_q + 1);  // bottom-right aligned
    }
};

// The rows of query tile t of a query-major launch (tile fields b, h,
// first row, tokens); b is the tile's sequence.
__device__ __forceinline__ QRows q_tile_rows(const MsaQFwdParams& p, int t, int D, int& b) {
    const int* tile = reinterpret_cast<const int*>(p.tiles) + 4 * t;
    b = tile[0];
    const int* cu_q = reinterpret_cast<const int*>(p.cu_seqlens_q);
    const int* cu_k = reinterpret_cast<const int*>(p.cu_seqlens_k);
    QRows R;
    R.first = tile[2];
    R.local0 = tile[2] - cu_q[b];
    R.seqlen_q = cu_q[b + 1] - cu_q[b];
    if (p.seqused_k) R.seqlen_k = reinterpret_cast<const int*>(p.seqused_k)[b];
    else if (p.page_table) R.seqlen_k = p.page_table_stride * p.page_size;
    else R.seqlen_k = cu_k[b + 1] - cu_k[b];
    R.h = tile[1]; R.qhpk = p.qhead_per_kv; R.Hq = p.num_heads_q; R.D = D;
    R.nrows = tile[3] * p.qhead_per_kv; R.causal = p.causal;
    return R;
}

// The rows of a forward work item (sparse_fwd.cu's prologue): row idx of the
// item is query entries[idx / qhpk], head h*qhpk + idx % qhpk.
struct FwdRows {
    const int* entries;
    long long q0;
    int h, qhpk, Hq, D, total_q, nrows, seqlen_k, seqlen_q, causal;
    // q element offset (-1: padding row), partial row (-1) and key bound.
    __device__ __forceinline__ void row(int idx, long long& qoff, long long& orow, int& lim) const {
        qoff = -1; orow = -1; lim = 0;
        if (idx >= nrows) return;
        const unsigned e = (unsigned)entries[idx / qhpk];
        const int ql = (int)(e & 0xFFFFFFu), slot = (int)(e >> 24);
        const int hq = h * qhpk + idx % qhpk;
        const long long qrow = q0 + ql;
        qoff = (qrow * Hq + hq) * D;
        orow = ((long long)slot * total_q + qrow) * Hq + hq;
        lim = seqlen_k;
        if (causal) lim = min(lim, ql + seqlen_k - seqlen_q + 1);
    }
    // The same with the row() signature of DecRows and QRows (the Q loaders'
    // and frag_rows' interface); a forward row reports query 0.
    __device__ __forceinline__ void row(int idx, long long& qoff, long long& orow, int& lim, int& i) const {
        row(idx, qoff, orow, lim);
        i = 0;
    }
};

// fwd_rows_at: the rows of work item w (a persistent CTA walks several);
// fwd_rows: of the CTA's own item blockIdx.x.
__device__ __forceinline__ FwdRows fwd_rows_at(const MsaFwdParams& p, int D, int w, int& b, int& t0, int& nkeys, int& h) {
    const int* meta = reinterpret_cast<const int*>(p.metadata) + 6 * w;
    h = meta[0];
    const int row = meta[1], q_begin = meta[2], q_count = meta[3], jblk = meta[5];
    b = meta[4];
    const int* cu_q = reinterpret_cast<const int*>(p.cu_seqlens_q);
    const int* cu_k = reinterpret_cast<const int*>(p.cu_seqlens_k);
    FwdRows r;
    r.q0 = cu_q[b];
    r.seqlen_q = cu_q[b + 1] - cu_q[b];
    if (p.seqused_k) r.seqlen_k = reinterpret_cast<const int*>(p.seqused_k)[b];
    else if (p.page_table) r.seqlen_k = p.page_table_stride * p.page_size;
    else r.seqlen_k = cu_k[b + 1] - cu_k[b];
    t0 = jblk * p.blk_kv;
    nkeys = min(p.blk_kv, r.seqlen_k - t0);
    r.entries = reinterpret_cast<const int*>(p.qsplit) + (long long)h * p.qsplit_stride +
                reinterpret_cast<const int*>(p.row_ptr)[(long long)h * (p.total_rows + 1) + row] + q_begin;
    r.h = h; r.qhpk = p.qhead_per_kv; r.Hq = p.num_heads_q; r.D = D; r.total_q = p.total_q;
    r.nrows = q_count * p.qhead_per_kv; r.causal = p.causal;
    return r;
}

__device__ __forceinline__ FwdRows fwd_rows(const MsaFwdParams& p, int D, int& b, int& t0, int& nkeys, int& h) {
    return fwd_rows_at(p, D, blockIdx.x, b, t0, nkeys, h);
}

// Sparse decode block walk (decode.cu, kernels/attn decodeTile) for a tile of
// up to 64 rows, executed by one whole warp: lane owns rows lane and lane+32.
// Returns the smallest block id above prev that some row of the tile
// selected within [kv_begin, kv_end) and before the row's causal limit
// (INT_MAX: none left); bit r of mask is set iff row rt+r selected it.
struct SparseWalk {
    const int* q2k;     // q2k + (h*batch*seqlen_q + b*seqlen_q) * top_k
    long long blk;
    int top_k, kv_begin, kv_end;
    __device__ __forceinline__ int next(const DecRows& R, int rt, int prev, unsigned long long& mask) const {
        const int lane = threadIdx.x & 31;
        int own[2];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            own[hh] = INT_MAX;
            long long qoff, orow;
            int lim, i;
            R.row(rt + lane + 32 * hh, qoff, orow, lim, i);
            if (lane + 32 * hh < kTileRows && i >= 0) {
                const int* sel = q2k + (long long)i * top_k;
#pragma unroll 1
                for (int k = 0; k < top_k; ++k) {
                    const int j = sel[k];
                    if (j > prev && j < own[hh] && j * blk < kv_end && (j + 1) * blk > kv_begin && j * blk < lim) own[hh] = j;
                }
            }
        }
        const int jmin = __reduce_min_sync(0xffffffffu, min(own[0], own[1]));
        const unsigned lo = __ballot_sync(0xffffffffu, jmin != INT_MAX && own[0] == jmin);
        const unsigned hi = __ballot_sync(0xffffffffu, jmin != INT_MAX && own[1] == jmin);
        mask = (unsigned long long)lo | ((unsigned long long)hi << 32);
        return jmin;
    }
};

// KV source of a work item (dense or paged), as in the portable kernels.
__device__ __forceinline__ KVSource kv_source(uint64_t k, uint64_t v, uint64_t ks, uint64_t vs, const int* page_row,
                                              long long dense_base, int h, int Hkv, int page_size, int dtype) {
    KVSource src;
    src.k = reinterpret_cast<const void*>(k);
    src.v = reinterpret_cast<const void*>(v);
    src.k_scale = reinterpret_cast<const uint8_t*>(ks);
    src.v_scale = reinterpret_cast<const uint8_t*>(vs);
    src.page_row = page_row;
    src.dense_base = dense_base;
    src.h = h; src.Hkv = Hkv; src.page_size = page_size; src.dtype = dtype;
    return src;
}

}  // namespace tc
}  // namespace msa

#endif  // MSA_TC_FRAG_CUH
