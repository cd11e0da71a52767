// sm90_fp8_vt.cuh - P.V on the e4m3 wgmma (sm90_qfwd.cu's fp8pv kernels):
// the transposed V operand the producer builds in shared memory and the
// register A operand the consumers pack P into.
//
// The e4m3 wgmma reads its B operand only K-major, and for P.V the
// reduction dimension is the key: B must be V^T, rows = the D output
// columns, each row 128 keys (128 bytes, one 128-byte swizzle panel of D
// rows: byte (n, k) at swz<128, D>(n, k), gdesc LBO 16 / SBO 1024 as for
// an e4m3 K tile). TMA lands V as keys x D (the raw rows), so a producer
// warp transposes every landed block.
//
// Register A operand of m64nNk32.e4m3 (CuTe's ALayout_64x32, 8-bit):
// byte b of register q of warpgroup thread t (warp w, lane l) holds row
// 16w + l/4 + 8(q%2), k = 16(q/2) + 4(l%4) + b. The score accumulator
// holds row 16w + l/4 + 8i, key 8j + 2(l%4) + e in register 4j + 2i + e.
// For k-group kc (keys 32kc..32kc+31) a thread owns keys 8j' + 2(l%4) + e,
// j' = 0..3, of its rows, but the A layout asks it for keys 4(l%4)..+3 and
// 16 + 4(l%4)..+3: the same rows, other keys. Instead of moving bytes
// between the four threads of a quad (FlashAttention-3's shuffles), the
// k index of the operand is not the key itself: the transposed V puts key
//   key(k) = 32kc + 8(2h + b/2) + 2x + b%2,  k = 32kc + 16h + 4x + b
// at column k, so byte b of register q = 2h + i of thread x = l%4 is the
// thread's own score register 16kc + 8h + 4(b/2) + 2i + b%2 (kc: register
// 4kc + q of the fragment). P.V sums over the keys of a block in any
// order, so the product is unchanged; no shuffle and no cross-thread
// traffic, only the e4m3 conversion of register pairs.
// hosttest/sm90_gmma_layout_check.cu checks both mappings against CuTe's
// layouts; cuda/qprefill_sm90_emu_test.go runs P.V through them in float64.
#ifndef MSA_SM90_FP8_VT_CUH
#define MSA_SM90_FP8_VT_CUH

#include "sm90/sm90_common.cuh"

namespace msa {
namespace sm90 {

// Key of column k (0..127) of the transposed V (see top).
__host__ __device__ constexpr int vt_key(int k) {
    return 32 * (k >> 5) + 8 * (2 * ((k >> 4) & 1) + ((k >> 1) & 1)) + 2 * ((k >> 2) & 3) + (k & 1);
}

// Transpose a landed E4M3 V block of KEYS keys (raw rows: keys x D bytes,
// swizzle span min(128, D)) into the K-major B operand vt (D rows x 128
// key columns in the order of vt_key, the first KEYS of them written;
// keys >= nkeys become zero: P is 0 there and 0 * NaN is NaN), by THREADS
// threads (thread index tid): one producer warp of sm90_qfwd.cu (128-key
// blocks), or the whole warpgroup of sm90_decode_pipe.cu (64-key spans).
// A task is 16 keys x 4 columns: 16 32-bit loads (one per key, columns
// 4c..4c+3), 4 16-byte stores (one per column: the 16 keys of key group G
// are operand bytes 16G..16G+15 in vt_key order). The 32 lanes of a warp
// take 32 consecutive tasks, so they share G and take consecutive c (D >=
// 128), and a load of one key reads whole rows (conflict-free for D >= 128;
// at D 64 the two half-warps read rows 16 keys apart, same banks: two-way).
// A lane stores its four columns starting at column (c / 2) % 4 so that
// the eight lanes of each store phase hit eight distinct 16-byte bank
// groups (the swizzle chunk is G ^ (row & 7), row = 4c + column).
template <int D, int KEYS = kBlk, int THREADS = 32>
__device__ __forceinline__ void vt_transpose(uint8_t* vt, const uint8_t* land, int nkeys, int tid) {
    constexpr int span = D < 128 ? D : 128;  // landing swizzle span (Geo90::kRawSpan for E4M3)
    constexpr int cg = D / 4;                // 4-column groups per row
    constexpr int tasks = KEYS / 16 * cg;
    static_assert(KEYS % 32 == 0 && KEYS <= 128 && tasks % 32 == 0 && THREADS % 32 == 0, "whole k-groups, whole warps of tasks");
    constexpr int iters = (tasks + THREADS - 1) / THREADS;
#pragma unroll 1
    for (int it = 0; it < iters; ++it) {
        const int task = THREADS * it + tid, c = task % cg, G = task / cg;
        if (tasks % THREADS != 0 && task >= tasks) break;  // D 64 spans: 64 tasks for 128 threads
        uint32_t in[16];
#pragma unroll
        for (int j = 0; j < 16; ++j)
            in[j] = 16 * G + j < nkeys ? *reinterpret_cast<const uint32_t*>(land + swz<span, KEYS>(16 * G + j, 4 * c)) : 0u;
        const int rot = (c >> 1) & 3;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int col = (q + rot) & 3;
            const uint32_t sel = (uint32_t)col | (uint32_t)(col + 4) << 4;  // byte col of the first word, then of the second
            uint32_t w[4];
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                // keys 16G + 2x, 2x + 1, 2x + 8, 2x + 9: operand bytes 16G + 4x + b, b = 0..3
                const uint32_t lo = __byte_perm(in[2 * x], in[2 * x + 1], sel);
                const uint32_t hi = __byte_perm(in[2 * x + 8], in[2 * x + 9], sel);
                w[x] = __byte_perm(lo, hi, 0x5410);
            }
            *reinterpret_cast<uint4*>(vt + swz<128, D>(4 * c + col, 16 * G)) = make_uint4(w[0], w[1], w[2], w[3]);
        }
    }
}

// Two floats -> two E4M3 bytes (lo in the low byte), round to nearest,
// saturating: P in [0, 1] never saturates.
__device__ __forceinline__ uint32_t e4m3x2(float lo, float hi) {
    uint16_t r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

// P (the NS = KEYS/2 float scores of softmax_fold, unrounded) -> the
// register A operand of the KEYS/32 k32 e4m3 wgmma of a block: register
// 4kc + q of pa, bytes b = 0..3 from score registers 16kc + 8(q/2) +
// 4(b/2) + 2(q%2) + b%2 (see top). The conversion is the E4M3 rounding of
// P.
template <int NS>
__device__ __forceinline__ void pack_p_e4m3(const float (&s)[NS], uint32_t (&pa)[NS / 4]) {
    static_assert(NS % 16 == 0, "whole k-groups of 32 keys");
#pragma unroll
    for (int kc = 0; kc < NS / 16; ++kc)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int r = 16 * kc + 8 * (q >> 1) + 2 * (q & 1);
            pa[4 * kc + q] = e4m3x2(s[r], s[r + 1]) | e4m3x2(s[r + 4], s[r + 5]) << 16;
        }
}

template <int D> struct PvOp8;
template <> struct PvOp8<64> { using type = cute::SM90::GMMA::MMA_64x64x32_F32E4M3E4M3_RS_TN<>; };
template <> struct PvOp8<128> { using type = cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_RS_TN<>; };
template <> struct PvOp8<256> { using type = cute::SM90::GMMA::MMA_64x256x32_F32E4M3E4M3_RS_TN<>; };

// O[64 x N] (+)= P V on the e4m3 wgmma over KEYS keys: P in pa
// (pack_p_e4m3), V^T at sVt (vt_transpose; the first KEYS bytes of each
// 128-byte row). Issued as one wgmma group and not waited for, like
// pv_issue.
template <int N, int KEYS = kBlk>
__device__ __forceinline__ void pv8_issue(uint32_t (&pa)[KEYS / 8], uint32_t sVt, float (&o)[N / 2], bool accumulate) {
    fence_regs(o);
    fence_regs(pa);
    cute::warpgroup_arrive();
#pragma unroll
    for (int kk = 0; kk < KEYS / 32; ++kk) {
        const uint64_t db = gdesc<128>(sVt + 32 * kk, 16, 8 * 128);
        mma_rs<typename PvOp8<N>::type>(pa + 4 * kk, db, o, (kk == 0 && !accumulate) ? gm::ScaleOut::Zero : gm::ScaleOut::One,
                                        std::make_index_sequence<N / 2>{});
    }
    cute::warpgroup_commit_batch();
    fence_regs(o);
    fence_regs(pa);
}

// The P.V of a query-major consumer, by P.V mode: BF16 (P as bf16 pairs,
// V MN-major bf16) or E4M3 (P as e4m3 quads, V^T K-major e4m3).
template <bool PV8> struct PvPath {
    static constexpr int kRegs = 32;
    __device__ __forceinline__ static int round_mode(int pv_round) { return pv_round; }
    __device__ __forceinline__ static void pack(const float (&s)[64], uint32_t (&pa)[kRegs]) { pack_p(s, pa); }
    template <int N>
    __device__ __forceinline__ static void issue(uint32_t (&pa)[kRegs], uint32_t sV, float (&o)[N / 2], bool acc) {
        pv_issue<N>(pa, sV, o, acc);
    }
};
template <> struct PvPath<true> {
    static constexpr int kRegs = 16;
    // softmax_fold leaves P unrounded; pack_p_e4m3's conversion is the
    // E4M3 rounding (the same cvt.rn.satfinite round_p would apply).
    __device__ __forceinline__ static int round_mode(int) { return MSA_ROUND_NONE; }
    __device__ __forceinline__ static void pack(const float (&s)[64], uint32_t (&pa)[kRegs]) { pack_p_e4m3(s, pa); }
    template <int N>
    __device__ __forceinline__ static void issue(uint32_t (&pa)[kRegs], uint32_t sV, float (&o)[N / 2], bool acc) {
        pv8_issue<N>(pa, sV, o, acc);
    }
};

}  // namespace sm90
}  // namespace msa

#endif  // MSA_SM90_FP8_VT_CUH
