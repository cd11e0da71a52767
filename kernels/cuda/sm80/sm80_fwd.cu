// sm80_fwd.cu - block-sparse prefill partials on sm_80 (Ampere, and sm_86 /
// sm_89 through the same SASS): the work items, masks, softmax and partial
// outputs of sparse_fwd.cu on mma.sync tensor cores (sm80_common.cuh).
//
// One CTA of 128 threads per forward-schedule work item (grid = capacity).
// The item's rows (q_count queries x qhead_per_kv heads) are taken in tiles of
// 64; each tile streams the item's K/V block (<= 128 keys) through shared
// memory in four 64-key chunks, and writes O_partial / LSE_partial /
// temperature LSE at the query's slot in the partial dtype, normalised within
// the block, exactly as sparse_fwd.cu does.
// Variants: bf16; fp8 (E4M3 Q/K/V, widened to bf16 exactly: the Q.K^T
// products are the e4m3 products, P is rounded to e4m3 per pv_round and V is
// exact in bf16); bf16fp8 (BF16 Q, E4M3 K/V); nvfp4 (E2M1 K/V x E4M3 block
// scale, exact in bf16; BF16 or E4M3 Q; K's global scale on the scores).
#include "sm80/sm80_common.cuh"

namespace msa {
namespace sm80 {

struct NoNext {
    __device__ __forceinline__ Blk operator()(const Blk&) const { return Blk{0, 0, 0ull}; }
};

template <int D, int VAR>
__device__ __forceinline__ void fwd_impl(const MsaFwdParams& p) {
    extern __shared__ __align__(16) uint8_t smem[];
    const int w = blockIdx.x;
    if (w >= p.capacity || w >= *reinterpret_cast<const int*>(p.work_count)) return;
    int b, t0, nkeys, h;
    const FwdRows R = fwd_rows(p, D, b, t0, nkeys, h);
    if (nkeys <= 0) return;  // defensive: the schedule never emits empty blocks
    const int* page_row = p.page_table ? reinterpret_cast<const int*>(p.page_table) + (long long)b * p.page_table_stride : nullptr;
    const long long dense0 = p.page_table ? 0 : reinterpret_cast<const int*>(p.cu_seqlens_k)[b];
    const KVSource src = kv_source(p.k, p.v, p.k_scale, p.v_scale, page_row, dense0, h, p.num_heads_kv, p.page_size, p.kv_dtype);
    float scale = p.softmax_scale_log2;
    if (VAR == kVarNVFP4 && p.k_global_scale) scale *= *reinterpret_cast<const float*>(p.k_global_scale);
    const float invT = p.inv_temperature;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

#pragma unroll 1
    for (int rt = 0; rt < R.nrows; rt += kTileRows) {
        __syncthreads();  // the previous tile's readers of the Q tile are done
        load_q<D, 128>(smem + Cfg80<D, VAR>::kOffQ, reinterpret_cast<const void*>(p.q), p.q_dtype, R, rt);
        const FragRows fr = frag_rows(R, rt, warp, lane);
        Soft st;
        st.reset();
        float o[D / 2];
        NoNext nx;
        attend<D, VAR, 1, false>(smem, src, Blk{t0, nkeys, ~0ull}, nx, fr.lim, fr.rr, scale, invT, p.pv_round, st, o);
        store_fwd_rows<D>(p, st, invT, o, fr.orow, lane);
    }
}

}  // namespace sm80
}  // namespace msa

#define MSA_SM80_FWD(NAME, D, VAR)                                                                                      \
    extern "C" __global__ void __launch_bounds__(128, 1)                                                                 \
        msa_sm80_fwd_##NAME##_d##D(const __grid_constant__ MsaFwdParams p, const __grid_constant__ MsaTensorMaps maps) { \
        (void)maps;                                                                                                      \
        MSA_SM80_BODY(msa::sm80::fwd_impl<D, VAR>(p));                                                                   \
    }

MSA_SM80_FWD(bf16, 64, msa::tc::kVarBF16)
MSA_SM80_FWD(bf16, 128, msa::tc::kVarBF16)
MSA_SM80_FWD(bf16, 256, msa::tc::kVarBF16)
MSA_SM80_FWD(fp8, 64, msa::tc::kVarFP8)
MSA_SM80_FWD(fp8, 128, msa::tc::kVarFP8)
MSA_SM80_FWD(fp8, 256, msa::tc::kVarFP8)
MSA_SM80_FWD(bf16fp8, 64, msa::tc::kVarBF16FP8)
MSA_SM80_FWD(bf16fp8, 128, msa::tc::kVarBF16FP8)
MSA_SM80_FWD(bf16fp8, 256, msa::tc::kVarBF16FP8)
MSA_SM80_FWD(nvfp4, 64, msa::tc::kVarNVFP4)
MSA_SM80_FWD(nvfp4, 128, msa::tc::kVarNVFP4)
MSA_SM80_FWD(nvfp4, 256, msa::tc::kVarNVFP4)

// Launch geometry (threads, dynamic shared memory), the same numbers as the
// HopperAmpereLaunch table of names_hopper_ampere.go (its test reads these lines).
#define MSA_HA_PIN(ARCH, ALGO, VAR, D, THREADS, SMEM)                                                       \
    static_assert(msa::sm80::Cfg80<D, msa::tc::kVar_##VAR, 1>::kThreads == (THREADS) && msa::sm80::Cfg80<D, msa::tc::kVar_##VAR, 1>::kSmem == (SMEM), \
                  "geometry of msa_" #ARCH "_" #ALGO "_" #VAR "_d" #D " (names_hopper_ampere.go)");
MSA_HA_PIN(sm80, fwd, bf16, 128, 128, 49168)
MSA_HA_PIN(sm80, fwd, bf16, 256, 128, 98320)
MSA_HA_PIN(sm80, fwd, bf16, 64, 128, 24592)
MSA_HA_PIN(sm80, fwd, bf16fp8, 128, 128, 40976)
MSA_HA_PIN(sm80, fwd, bf16fp8, 256, 128, 81936)
MSA_HA_PIN(sm80, fwd, bf16fp8, 64, 128, 20496)
MSA_HA_PIN(sm80, fwd, fp8, 128, 128, 40976)
MSA_HA_PIN(sm80, fwd, fp8, 256, 128, 81936)
MSA_HA_PIN(sm80, fwd, fp8, 64, 128, 20496)
MSA_HA_PIN(sm80, fwd, nvfp4, 128, 128, 36880)
MSA_HA_PIN(sm80, fwd, nvfp4, 256, 128, 73744)
MSA_HA_PIN(sm80, fwd, nvfp4, 64, 128, 18448)
#undef MSA_HA_PIN
