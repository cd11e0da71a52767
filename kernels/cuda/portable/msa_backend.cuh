// msa_backend.cuh - the MMA backend: the ONLY code that multiplies tiles.
//
// Interface (what a replacement backend must provide, per warp):
//   template <int D> static void qk(const __nv_bfloat16* sQ, const __nv_bfloat16* sK,
//                                   float (&s)[Geo<D>::kWarpRows][Geo<D>::kKeyFrags]);
//       s[r][c] = dot(Q row r, K row lane + 32*c) over D, for the warp's kWarpRows
//       query-head rows (sQ points at the warp's first row, row stride D) and the
//       kSubN keys of the shared K sub-tile (row stride Geo<D>::kvStride); kSubN
//       is 64 (kKeyFrags 2) for D <= 128 and 32 (kKeyFrags 1) for D = 256.
//   template <int D> static void pv(const float* sP, int kb, const __nv_bfloat16* sV,
//                                   float (&acc)[Geo<D>::kWarpRows][D / 32]);
//       acc[r][2p+e] += sum_j P[r][kb + j] * V[j][p*64 + 2*lane + e] over the kSubN
//       keys of the shared V sub-tile (P row stride kBlockN, P already rounded).
// The fragment ownership (which lane holds which score / output column) is
// fixed by this interface; scheduling, addressing, masking, softmax and the
// epilogue (msa_core.cuh and the kernels) only rely on it. An SM100 backend
// (TMA loads + tcgen05.mma into tensor memory) replaces this struct and the
// two sub-tile loads; its tcgen05.ld of the accumulator must hand back the
// same ownership, or provide its own epilogue adapter.
#ifndef MSA_BACKEND_CUH
#define MSA_BACKEND_CUH

#include "shared/msa_common.cuh"

namespace msa {

// Portable backend: scalar FP32 FMA from shared memory, all architectures.
struct PortableBackend {
    template <int D>
    static __device__ __forceinline__ void qk(const __nv_bfloat16* sQ, const __nv_bfloat16* sK,
                                              float (&s)[Geo<D>::kWarpRows][Geo<D>::kKeyFrags]) {
        constexpr int WR = Geo<D>::kWarpRows, KF = Geo<D>::kKeyFrags;
        const int lane = threadIdx.x & 31;
        const uint32_t* kr[KF];
#pragma unroll
        for (int c = 0; c < KF; ++c) kr[c] = reinterpret_cast<const uint32_t*>(sK + (lane + 32 * c) * Geo<D>::kvStride);
        const uint4* q = reinterpret_cast<const uint4*>(sQ);
#pragma unroll
        for (int r = 0; r < WR; ++r)
#pragma unroll
            for (int c = 0; c < KF; ++c) s[r][c] = 0.f;
#pragma unroll 2
        for (int w = 0; w < D / 8; ++w) {  // 8 elements = 4 words per step
            float2 kf[KF][4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int c = 0; c < KF; ++c) kf[c][i] = unpack_bf16x2(kr[c][4 * w + i]);
#pragma unroll
            for (int r = 0; r < WR; ++r) {
                const uint4 qv = q[r * (D / 8) + w];
                const uint32_t qw[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float2 qf = unpack_bf16x2(qw[i]);
#pragma unroll
                    for (int c = 0; c < KF; ++c) s[r][c] = fmaf(qf.x, kf[c][i].x, fmaf(qf.y, kf[c][i].y, s[r][c]));
                }
            }
        }
    }

    template <int D>
    static __device__ __forceinline__ void pv(const float* sP, int kb, const __nv_bfloat16* sV,
                                              float (&acc)[Geo<D>::kWarpRows][D / 32]) {
        constexpr int NP = D / 64, WR = Geo<D>::kWarpRows;
        const int lane = threadIdx.x & 31;
#pragma unroll 1
        for (int j = 0; j < Geo<D>::kSubN; j += 4) {
            float4 p[WR];
#pragma unroll
            for (int r = 0; r < WR; ++r) p[r] = *reinterpret_cast<const float4*>(sP + r * kBlockN + kb + j);
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                float2 v[NP];
#pragma unroll
                for (int pi = 0; pi < NP; ++pi)
                    v[pi] = unpack_bf16x2(*reinterpret_cast<const uint32_t*>(
                        sV + (j + jj) * Geo<D>::kvStride + pi * 64 + 2 * lane));
#pragma unroll
                for (int r = 0; r < WR; ++r) {
                    const float pr = jj == 0 ? p[r].x : jj == 1 ? p[r].y : jj == 2 ? p[r].z : p[r].w;
#pragma unroll
                    for (int pi = 0; pi < NP; ++pi) {
                        acc[r][2 * pi] = fmaf(pr, v[pi].x, acc[r][2 * pi]);
                        acc[r][2 * pi + 1] = fmaf(pr, v[pi].y, acc[r][2 * pi + 1]);
                    }
                }
            }
        }
    }
};

// The backend every portable kernel instantiates, chosen per compilation target.
// Every target takes the portable backend: the tensor-core kernels are families
// of their own (sm80/, sm90/, sm100/), not backends of these kernels.
#if defined(__CUDA_ARCH_FEAT_SM100_ALL)
using ArchBackend = PortableBackend;  // sm_100f: tensor-core kernels in sm100/
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
using ArchBackend = PortableBackend;  // sm_90a: tensor-core kernels in sm90/
#else
using ArchBackend = PortableBackend;
#endif

// Column of D owned by (lane, fragment element e) in the pv accumulator.
__device__ __forceinline__ int acc_col(int lane, int e) { return (e >> 1) * 64 + 2 * lane + (e & 1); }

}  // namespace msa

#endif  // MSA_BACKEND_CUH
