// sm80_qfwd.cu - query-major block-sparse prefill on mma.sync tensor cores:
// one CTA per query tile x KV head (cuda.QPlan, MsaQFwdParams) walks the
// union of the blocks the tile's tokens selected, in ascending order, each
// row masked to the blocks its token selected and to its causal limit,
// keeps the online softmax in registers across blocks and writes the final
// BF16 O (times output_scale), LSE and temperature LSE once: no partials,
// no combine, so the partial dtype has no effect on this path.
//
// The mainloop is attend() of sm80_common.cuh (the sparse decode's block
// stream: cp.async double-buffered 64-key chunks, Q.K^T and P.V on
// mma.sync m16n8k16, P kept in registers); the stream here reads the
// tile's block list and token masks from the plan (every thread reads the
// same entries, so the walk needs no broadcast and no barrier). A tile has
// 64 / qhead_per_kv whole tokens (one token when qhead_per_kv > 64: the CTA
// then takes its rows in 64-row passes, all with the token's selection).
// D = 256 runs two column groups of 4 warps (256 threads), as the decode
// does, so the O accumulator fits the registers next to S and P.
//
// mma.sync runs on every architecture from sm_80 on, so unlike the other
// sm80 kernels this one has its real body in the sm_90a and sm_100f images
// too: it is the query-major path of every tensor-core family.
// Variants: bf16, fp8 (P rounded to e4m3 per pv_round), bf16fp8, nvfp4
// (K's global scale on the scores, V's as output_scale), as sm80_fwd.cu.
#include "sm80/sm80_common.cuh"

namespace msa {
namespace sm80 {

// The block stream of one 64-row pass: the tile's blocks in list order,
// blocks that start at or past the sequence's end skipped (the plan never
// lists them; an empty block would end attend's stream). The mask of a
// block has the bits of this thread's two rows (rr[i]) only: attend reads
// cur.mask at those bits and nowhere else.
struct QStream {
    const int* blocks;
    const unsigned long long* masks;
    int i, end, blk, seqlen_k;
    int tok[2], rr[2];
    __device__ __forceinline__ Blk get() {
#pragma unroll 1
        while (i < end) {
            const long long t0 = (long long)blocks[i] * blk;
            const unsigned long long tm = masks[i];
            ++i;
            if (t0 < 0 || t0 >= seqlen_k) continue;
            unsigned long long m = 0ull;
#pragma unroll
            for (int k = 0; k < 2; ++k) m |= ((tm >> tok[k]) & 1ull) << rr[k];
            return Blk{(int)t0, (int)min((long long)blk, seqlen_k - t0), m};
        }
        return Blk{0, 0, 0ull};
    }
    __device__ __forceinline__ Blk operator()(const Blk&) { return get(); }
};

// Output columns [col0, col0 + DO) of the thread's rows as BF16 times
// oscale; the LSE and temperature LSE from the first lane of each quad of
// column group 0.
template <int D, int DO>
__device__ __forceinline__ void store_q_rows(const MsaQFwdParams& p, const Soft& st, const float (&o)[DO / 2],
                                             const long long (&orow)[2], int col0, int lane, bool write_lse, float oscale) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        if (orow[i] < 0) continue;
        float lse, tlse;
        const float f = finish(st, i, p.inv_temperature, lse, tlse) * oscale;
#pragma unroll
        for (int j = 0; j < DO / 8; ++j)
            store_pair(reinterpret_cast<void*>(p.out), orow[i] * D + col0 + 8 * j + 2 * (lane & 3), o[4 * j + 2 * i] * f,
                       o[4 * j + 2 * i + 1] * f, MSA_DT_BF16);
        if (write_lse && (lane & 3) == 0) {
            reinterpret_cast<float*>(p.lse)[orow[i]] = lse;
            if (p.tlse) reinterpret_cast<float*>(p.tlse)[orow[i]] = tlse;
        }
    }
}

template <int D, int VAR>
__device__ __forceinline__ void qfwd_impl(const MsaQFwdParams& p) {
    constexpr int NC = D == 256 ? 2 : 1;
    using C = Cfg80<D, VAR, NC>;
    constexpr int DO = C::kDO;
    extern __shared__ __align__(16) uint8_t smem[];
    const int t = blockIdx.x;
    if (t >= p.num_tiles) return;
    int b;
    const QRows R = q_tile_rows(p, t, D, b);
    const int h = R.h;
    const int* page_row = p.page_table ? reinterpret_cast<const int*>(p.page_table) + (long long)b * p.page_table_stride : nullptr;
    const long long dense0 = p.page_table ? 0 : reinterpret_cast<const int*>(p.cu_seqlens_k)[b];
    const KVSource src = kv_source(p.k, p.v, p.k_scale, p.v_scale, page_row, dense0, h, p.num_heads_kv, p.page_size, p.kv_dtype);
    float scale = p.softmax_scale_log2;
    if (VAR == kVarNVFP4 && p.k_global_scale) scale *= *reinterpret_cast<const float*>(p.k_global_scale);
    const float oscale = p.output_scale ? *reinterpret_cast<const float*>(p.output_scale) : 1.f;
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, cg = threadIdx.x >> 7;
    const int col0 = cg * DO;
    const int lo = reinterpret_cast<const int*>(p.tile_ptr)[t], hi = reinterpret_cast<const int*>(p.tile_ptr)[t + 1];

#pragma unroll 1
    for (int rt = 0; rt < R.nrows; rt += kTileRows) {
        __syncthreads();  // the previous pass's readers of the Q tile are done
        load_q<D, C::kThreads>(smem + C::kOffQ, reinterpret_cast<const void*>(p.q), p.q_dtype, R, rt);
        const FragRows fr = frag_rows(R, rt, warp, lane);
        QStream qs{reinterpret_cast<const int*>(p.blocks), reinterpret_cast<const unsigned long long*>(p.masks), lo, hi,
                   p.blk_kv, R.seqlen_k, {fr.tok[0], fr.tok[1]}, {fr.rr[0], fr.rr[1]}};
        const Blk first_blk = qs.get();
        Soft st;
        st.reset();
        float o[DO / 2];
        zero_frag(o);
        attend<D, VAR, NC, true>(smem, src, first_blk, qs, fr.lim, fr.rr, scale, p.inv_temperature, p.pv_round, st, o);
        cp_async_wait_all();  // the Q copies of a pass without blocks
        store_q_rows<D, DO>(p, st, o, fr.orow, col0, lane, cg == 0, oscale);
    }
}

template <int D, int VAR>
__device__ __forceinline__ void qfwd_entry(const MsaQFwdParams& p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    qfwd_impl<D, VAR>(p);
#endif
}

}  // namespace sm80
}  // namespace msa

#define MSA_SM80_QFWD(NAME, D, VAR)                                                                                      \
    extern "C" __global__ void __launch_bounds__(D == 256 ? 256 : 128, 1)                                                 \
        msa_sm80_qfwd_##NAME##_d##D(const __grid_constant__ MsaQFwdParams p, const __grid_constant__ MsaTensorMaps maps) { \
        (void)maps;                                                                                                       \
        msa::sm80::qfwd_entry<D, VAR>(p);                                                                                 \
    }

MSA_SM80_QFWD(bf16, 64, msa::tc::kVarBF16)
MSA_SM80_QFWD(bf16, 128, msa::tc::kVarBF16)
MSA_SM80_QFWD(bf16, 256, msa::tc::kVarBF16)
MSA_SM80_QFWD(fp8, 64, msa::tc::kVarFP8)
MSA_SM80_QFWD(fp8, 128, msa::tc::kVarFP8)
MSA_SM80_QFWD(fp8, 256, msa::tc::kVarFP8)
MSA_SM80_QFWD(bf16fp8, 64, msa::tc::kVarBF16FP8)
MSA_SM80_QFWD(bf16fp8, 128, msa::tc::kVarBF16FP8)
MSA_SM80_QFWD(bf16fp8, 256, msa::tc::kVarBF16FP8)
MSA_SM80_QFWD(nvfp4, 64, msa::tc::kVarNVFP4)
MSA_SM80_QFWD(nvfp4, 128, msa::tc::kVarNVFP4)
MSA_SM80_QFWD(nvfp4, 256, msa::tc::kVarNVFP4)

// Launch geometry (threads, dynamic shared memory), the same numbers as the
// HopperAmpereLaunch table of names_hopper_ampere.go (its test reads these lines).
#define MSA_HA_PIN(ARCH, ALGO, VAR, D, THREADS, SMEM)                                                       \
    static_assert(msa::sm80::Cfg80<D, msa::tc::kVar_##VAR, (D == 256 ? 2 : 1)>::kThreads == (THREADS) && msa::sm80::Cfg80<D, msa::tc::kVar_##VAR, (D == 256 ? 2 : 1)>::kSmem == (SMEM), \
                  "geometry of msa_" #ARCH "_" #ALGO "_" #VAR "_d" #D " (names_hopper_ampere.go)");
MSA_HA_PIN(sm80, qfwd, bf16, 128, 128, 49168)
MSA_HA_PIN(sm80, qfwd, bf16, 256, 256, 98320)
MSA_HA_PIN(sm80, qfwd, bf16, 64, 128, 24592)
MSA_HA_PIN(sm80, qfwd, bf16fp8, 128, 128, 40976)
MSA_HA_PIN(sm80, qfwd, bf16fp8, 256, 256, 81936)
MSA_HA_PIN(sm80, qfwd, bf16fp8, 64, 128, 20496)
MSA_HA_PIN(sm80, qfwd, fp8, 128, 128, 40976)
MSA_HA_PIN(sm80, qfwd, fp8, 256, 256, 81936)
MSA_HA_PIN(sm80, qfwd, fp8, 64, 128, 20496)
MSA_HA_PIN(sm80, qfwd, nvfp4, 128, 128, 36880)
MSA_HA_PIN(sm80, qfwd, nvfp4, 256, 256, 73744)
MSA_HA_PIN(sm80, qfwd, nvfp4, 64, 128, 18448)
#undef MSA_HA_PIN
