// sm80_common.cuh - the sm_80 (Ampere) tensor-core mainloop shared by
// sm80_fwd.cu and sm80_decode.cu: mma.sync.m16n8k16 (bf16 in, fp32
// accumulate), ldmatrix, cp.async, in at most 99 KB of shared memory (so the
// sm_80 SASS also launches on sm_86 / sm_89 parts).
//
// CTA: 128 x NC threads; a row tile is 64 query-head rows, warp w owns rows
// 16(w%4)..16(w%4)+15 (the fragment layout of tc_frag.cuh) and output
// columns [(w/4) D/NC, (w/4 + 1) D/NC). NC = 2 only for the D = 256 decode,
// whose O accumulator would not fit the registers next to S and P otherwise
// (both column groups compute the same scores: decode is bound by K/V
// bandwidth). A softmax block of
// up to 128 keys is streamed through shared memory as four chunks of kCK = 64
// keys: K[0:64], K[64:128], V[0:64], V[64:128]. K chunk c gives the score
// columns 64c..64c+63 (S = Q K^T: Q by ldmatrix, K by ldmatrix, fp32 scores
// in registers); after the second K chunk the online softmax turns the 128
// scores of each row into P (bf16 A fragments, in registers) and the V chunks
// accumulate O += P V (V by ldmatrix.trans).
//
// Shared memory (bytes): Q tile [64][D] bf16; kSlots bf16 chunk slots
// [64][D]; for e4m3 / nvfp4 K/V one raw landing chunk [64][row bytes]; 16
// bytes of broadcast (the sparse decode walk's next block and row mask).
// Every bf16 row is D*2 bytes of 16-byte units, unit u of row r stored at
// unit u ^ (r & 7) (ldmatrix reads 8 rows of one unit conflict-free).
// BF16 K/V: cp.async lands chunk i+1 in slot (i+1)%2 while chunk i is used.
// E4M3 / NVFP4 K/V: cp.async lands the raw chunk i+1 while chunk i is used;
// chunk i is converted (integer E4M3 -> BF16, E2M1 x E4M3 block scale) into
// the single bf16 slot first. Keys past the block's end are zero-filled by
// cp.async (src-size 0), so P = 0 meets V = 0, never stale data.
#ifndef MSA_SM80_COMMON_CUH
#define MSA_SM80_COMMON_CUH

#include "shared/msa_tc_abi.h"
#include "shared/tc_frag.cuh"

// The body of an sm_80-family KV-major kernel (fwd, decode): the call in
// the sm_80 image, a trap in the sm_90a and sm_100f images, whose families
// run their own kernels. (The query-major sm_80 kernel runs on every
// family: sm80_qfwd.cu.)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && __CUDA_ARCH__ < 900
#define MSA_SM80_BODY(...) __VA_ARGS__
#else
#define MSA_SM80_BODY(...) asm volatile("trap;")
#endif

namespace msa {
namespace sm80 {

using namespace msa::tc;

constexpr int kCK = 64;  // keys per shared-memory chunk

template <int D, int VAR, int NC = 1>
struct Cfg80 {
    static_assert(D == 64 || D == 128 || D == 256, "head dim");
    static constexpr int kNC = NC;          // column groups of 4 warps
    static constexpr int kThreads = 128 * NC;
    static constexpr int kDO = D / NC;      // output columns per warp
    static constexpr int kRowB = 2 * D;  // bf16 row bytes
    static constexpr int kUnits = kRowB / 16;
    static constexpr bool kRaw = VAR != kVarBF16;  // K/V converted from a raw landing chunk
    static constexpr int kRawRowB = VAR == kVarNVFP4 ? D / 2 : VAR == kVarBF16 ? 2 * D : D;
    static constexpr int kQB = kTileRows * kRowB;
    static constexpr int kChunkB = kCK * kRowB;
    static constexpr int kSlots = kRaw ? 1 : 2;
    static constexpr int kOffQ = 0;
    static constexpr int kOffC = kOffQ + kQB;
    static constexpr int kOffRaw = kOffC + kSlots * kChunkB;
    static constexpr int kOffMisc = kOffRaw + (kRaw ? kCK * kRawRowB : 0);  // 16 bytes: sparse-walk broadcast
    // Dynamic shared memory of the kernel (it has no static shared memory, so
    // a launch may request up to the device's opt-in maximum).
    static constexpr int kSmem = kOffMisc + 16;
    static_assert(kSmem <= 99 * 1024, "sm_80 kernels stay within 99 KB of shared memory (sm_86 / sm_89)");
};

// ---- PTX wrappers ---------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// 16-byte cp.async; src_bytes = 0 zero-fills the destination without reading.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
// d += a b: m16n8k16, A row-major (bf16), B column-major (bf16), fp32 accumulators.
__device__ __forceinline__ void mma16816(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Byte offset of 16-byte unit u of bf16 row r (swizzled, see top).
template <int D>
__device__ __forceinline__ uint32_t soff(int r, int u) {
    return (uint32_t)(r * (2 * D) + ((u ^ (r & 7)) << 4));
}

// ---- Q tile ----------------------------------------------------------------------
// Q rows of tile rt (Rows::row gives the element offset, -1 = padding) as bf16:
// BF16 Q by cp.async (zero-fill for padding rows), E4M3 Q converted (exact).
template <int D, int NT, class Rows>
__device__ __forceinline__ void load_q(uint8_t* sQ, const void* q, int q_dtype, const Rows& R, int rt) {
    constexpr int U = 2 * D / 16;
    for (int i = threadIdx.x; i < kTileRows * U; i += NT) {
        const int r = i / U, u = i % U;
        long long qoff, orow;
        int lim, qi;
        R.row(rt + r, qoff, orow, lim, qi);
        const uint32_t dst = smem_u32(sQ) + soff<D>(r, u);
        if (q_dtype == MSA_DT_BF16) {
            const void* g = qoff >= 0 ? reinterpret_cast<const void*>(reinterpret_cast<const __nv_bfloat16*>(q) + qoff + 8 * u) : q;
            cp_async16(dst, g, qoff >= 0 ? 16u : 0u);
        } else {
            uint4 v = make_uint4(0, 0, 0, 0);
            if (qoff >= 0) {
                const uint2 w = *reinterpret_cast<const uint2*>(reinterpret_cast<const uint8_t*>(q) + qoff + 8 * u);
                e4m3x4_to_bf16x4(w.x, v.x, v.y);
                e4m3x4_to_bf16x4(w.y, v.z, v.w);
            }
            *reinterpret_cast<uint4*>(sQ + soff<D>(r, u)) = v;
        }
    }
}

// ---- K/V chunks ------------------------------------------------------------------
// Issue the cp.async copies of keys [t0, t0 + n) (n <= kCK; rows n.. zero) of K
// (which = 0) or V (1) into dst: bf16 rows into the swizzled layout, or raw rows
// (e4m3 / packed e2m1 bytes) densely, row stride kRawRowB.
template <int D, int VAR, int NT>
__device__ __forceinline__ void issue_chunk(uint8_t* dst, const KVSource& src, int which, int t0, int n) {
    using C = Cfg80<D, VAR>;
    constexpr int U = C::kRawRowB / 16;
    const uint8_t* base = reinterpret_cast<const uint8_t*>(which ? src.v : src.k);
    const uint32_t d0 = smem_u32(dst);
    for (int i = threadIdx.x; i < kCK * U; i += NT) {
        const int j = i / U, u = i % U;
        const uint8_t* g = base;
        uint32_t bytes = 0;
        if (j < n) {
            long long elem, srow;
            src.locate(t0 + j, D, elem, srow);
            g = base + srow * C::kRawRowB + 16 * u;
            bytes = 16;
        }
        const uint32_t off = C::kRaw ? (uint32_t)(j * C::kRawRowB + 16 * u) : soff<D>(j, u);
        cp_async16(d0 + off, g, bytes);
    }
    cp_async_commit();
}

// Convert a landed raw chunk (keys [t0, t0 + n)) into bf16 rows of the slot.
template <int D, int VAR, int NT>
__device__ __forceinline__ void convert_chunk(uint8_t* slot, const uint8_t* raw, const KVSource& src, int which, int t0, int n) {
    using C = Cfg80<D, VAR>;
    constexpr int U = 2 * D / 16;  // 16-byte bf16 units (8 elements) per row
    const uint8_t* scales = which ? src.v_scale : src.k_scale;
    for (int i = threadIdx.x; i < kCK * U; i += NT) {
        const int j = i / U, u = i % U;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (VAR == kVarNVFP4) {
            if (j < n) {
                const uint32_t w = *reinterpret_cast<const uint32_t*>(raw + j * C::kRawRowB + 4 * u);
                long long elem, srow;
                src.locate(t0 + j, D, elem, srow);
                const float sc = e4m3_to_f32_int(scales[scale128x4(srow, u >> 1, D >> 4)]);
                float f[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) f[e] = e2m1_to_f32(w >> (4 * e)) * sc;  // exact in bf16
                v = make_uint4(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]), pack_bf16x2(f[4], f[5]), pack_bf16x2(f[6], f[7]));
            }
        } else {
            const uint2 w = *reinterpret_cast<const uint2*>(raw + j * C::kRawRowB + 8 * u);  // zero-filled past n
            e4m3x4_to_bf16x4(w.x, v.x, v.y);
            e4m3x4_to_bf16x4(w.y, v.z, v.w);
        }
        *reinterpret_cast<uint4*>(slot + soff<D>(j, u)) = v;
    }
}

// ---- warp-level products ---------------------------------------------------------------
// s[n-tiles 8*c .. 8*c+7] = Q (the warp's 16 rows) . K^T for the 64 keys of a
// chunk (c = 0, 1: score columns 64c..64c+63).
template <int D>
__device__ __forceinline__ void qk_chunk(uint32_t sQ, uint32_t sK, float (&s)[64], int c) {
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
    const int qr = 16 * warp + (lane & 7) + 8 * ((lane >> 3) & 1), qu = lane >> 4;
    const int kr = (lane & 7) + 8 * (lane >> 4), ku = (lane >> 3) & 1;
#pragma unroll
    for (int e = 0; e < 32; ++e) s[32 * c + e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a0, a1, a2, a3;
        ldsm_x4(sQ + soff<D>(qr, 2 * ks + qu), a0, a1, a2, a3);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
            uint32_t b0, b1, b2, b3;
            ldsm_x4(sK + soff<D>(16 * np + kr, 2 * ks + ku), b0, b1, b2, b3);
            mma16816(&s[32 * c + 8 * np], a0, a1, a2, a3, b0, b1);
            mma16816(&s[32 * c + 8 * np + 4], a0, a1, a2, a3, b2, b3);
        }
    }
}

// o += P[:, 64c .. 64c+63] V_chunk[:, col0 .. col0+DO) (c = 0, 1), P as A fragments pa.
template <int D, int DO>
__device__ __forceinline__ void pv_chunk(const uint32_t (&pa)[32], uint32_t sV, float (&o)[DO / 2], int c, int col0) {
    const int lane = threadIdx.x & 31;
    const int vr = (lane & 7) + 8 * ((lane >> 3) & 1), vu = (lane >> 4) + col0 / 8;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
        const int kk = 4 * c + ks;
#pragma unroll
        for (int np = 0; np < DO / 16; ++np) {
            uint32_t b0, b1, b2, b3;
            ldsm_x4_t(sV + soff<D>(16 * ks + vr, 2 * np + vu), b0, b1, b2, b3);
            mma16816(&o[8 * np], pa[4 * kk], pa[4 * kk + 1], pa[4 * kk + 2], pa[4 * kk + 3], b0, b1);
            mma16816(&o[8 * np + 4], pa[4 * kk], pa[4 * kk + 1], pa[4 * kk + 2], pa[4 * kk + 3], b2, b3);
        }
    }
}

// ---- one row tile against a stream of softmax blocks -----------------------------------------
// A block of the stream: keys [t0, t0 + nkeys) (nkeys <= 128) and the tile rows
// that attend it (bit r of mask); nkeys == 0 ends the stream.
struct Blk {
    int t0, nkeys;
    unsigned long long mask;
};

// Fold every block of the stream into (st, o) for the thread's rows rr[0..1]
// (sequence-local key bounds lim[]) and its output columns. next(b) returns the
// block after b (called by every thread, in order; it may synchronise the
// CTA). The Q tile must have been issued (cp.async or stores) by the caller;
// the first chunk load is issued here. kAccumulate = false: a single block, o
// is written, not rescaled.
template <int D, int VAR, int NC, bool kAccumulate, class Next>
__device__ __forceinline__ void attend(uint8_t* smem, const KVSource& src, Blk first, Next& next, const int (&lim)[2],
                                       const int (&rr)[2], float scale_log2, float invT, int pv_round, Soft& st,
                                       float (&o)[D / NC / 2]) {
    using C = Cfg80<D, VAR, NC>;
    constexpr int NT = C::kThreads, DO = C::kDO;
    const int col0 = (int)(threadIdx.x >> 7) * DO;
    uint8_t* sQ = smem + C::kOffQ;
    uint8_t* slots = smem + C::kOffC;
    uint8_t* raw = smem + C::kOffRaw;
    const uint32_t aQ = smem_u32(sQ);
    Blk cur = first;
    if (cur.nkeys > 0) issue_chunk<D, VAR, NT>(C::kRaw ? raw : slots, src, 0, cur.t0, min(kCK, cur.nkeys));
    int seq = 0;  // chunks consumed so far (bf16: slot seq % 2)
#pragma unroll 1
    while (cur.nkeys > 0) {
        float s[64];
        uint32_t pa[32];
        Blk nxt{0, 0, 0ull};
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int which = c >> 1, half = c & 1;
            uint8_t* slot = slots + (C::kRaw ? 0 : (seq & 1) * C::kChunkB);
            cp_async_wait_all();
            __syncthreads();  // chunk c landed for every thread; the slot it goes to next is no longer read
            if (C::kRaw) {
                convert_chunk<D, VAR, NT>(slot, raw, src, which, cur.t0 + kCK * half, max(0, min(kCK, cur.nkeys - kCK * half)));
                __syncthreads();  // slot ready, raw chunk free
            }
            // next chunk: the rest of this block, then the first chunk of the next block
            uint8_t* ndst = C::kRaw ? raw : slots + ((seq + 1) & 1) * C::kChunkB;
            if (c < 3) {
                const int nh = (c + 1) & 1, nw = (c + 1) >> 1;
                issue_chunk<D, VAR, NT>(ndst, src, nw, cur.t0 + kCK * nh, max(0, min(kCK, cur.nkeys - kCK * nh)));
            } else {
                nxt = next(cur);
                if (nxt.nkeys > 0) issue_chunk<D, VAR, NT>(ndst, src, 0, nxt.t0, min(kCK, nxt.nkeys));
            }
            const uint32_t aS = smem_u32(slot);
            if (which == 0) {
                qk_chunk<D>(aQ, aS, s, half);
                if (half == 1) {
                    int bl[2];
#pragma unroll
                    for (int i = 0; i < 2; ++i)
                        bl[i] = ((cur.mask >> rr[i]) & 1ull) ? min(max(lim[i] - cur.t0, 0), cur.nkeys) : 0;
                    float alpha[2];
                    softmax_block(s, bl, scale_log2, invT, pv_round, st, pa, alpha);
                    if (kAccumulate) {
#pragma unroll
                        for (int j = 0; j < DO / 8; ++j)
#pragma unroll
                            for (int e = 0; e < 4; ++e) o[4 * j + e] *= alpha[e >> 1];
                    } else {
#pragma unroll
                        for (int e = 0; e < DO / 2; ++e) o[e] = 0.f;
                    }
                }
            } else {
                pv_chunk<D, DO>(pa, aS, o, half, col0);
            }
            ++seq;
        }
        cur = nxt;
    }
}

}  // namespace sm80
}  // namespace msa

#endif  // MSA_SM80_COMMON_CUH
