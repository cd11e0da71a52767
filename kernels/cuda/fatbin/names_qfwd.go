package fatbin

// Kernel entry points msa_sm80_qfwd_<variant>_d<D> of sm80/sm80_qfwd.cu:
// the query-major sparse prefill (one CTA per query tile x KV head, final
// output and LSE, no partials) on mma.sync, with real bodies in the sm_80,
// sm_90a and sm_100f images. Launch ABI of shared/msa_tc_abi.h with an
// MsaQFwdParams block; geometry in HopperAmpereLaunch.
const (
	SM80QFwdBF16D64     = "msa_sm80_qfwd_bf16_d64"
	SM80QFwdBF16D128    = "msa_sm80_qfwd_bf16_d128"
	SM80QFwdBF16D256    = "msa_sm80_qfwd_bf16_d256"
	SM80QFwdFP8D64      = "msa_sm80_qfwd_fp8_d64"
	SM80QFwdFP8D128     = "msa_sm80_qfwd_fp8_d128"
	SM80QFwdFP8D256     = "msa_sm80_qfwd_fp8_d256"
	SM80QFwdBF16FP8D64  = "msa_sm80_qfwd_bf16fp8_d64"
	SM80QFwdBF16FP8D128 = "msa_sm80_qfwd_bf16fp8_d128"
	SM80QFwdBF16FP8D256 = "msa_sm80_qfwd_bf16fp8_d256"
	SM80QFwdNVFP4D64    = "msa_sm80_qfwd_nvfp4_d64"
	SM80QFwdNVFP4D128   = "msa_sm80_qfwd_nvfp4_d128"
	SM80QFwdNVFP4D256   = "msa_sm80_qfwd_nvfp4_d256"
)

// Kernel entry points msa_sm90_qfwd_<variant>_d<D> of sm90/sm90_qfwd.cu:
// the query-major sparse prefill on TMA + mbarrier rings and wgmma, real
// bodies only in the sm_90a image (a trap elsewhere). Each CTA runs
// SM90QFwdTilesPerCTA consecutive query tiles (one consumer warpgroup
// each). Geometry in HopperAmpereLaunch.
const (
	SM90QFwdBF16D64     = "msa_sm90_qfwd_bf16_d64"
	SM90QFwdBF16D128    = "msa_sm90_qfwd_bf16_d128"
	SM90QFwdBF16D256    = "msa_sm90_qfwd_bf16_d256"
	SM90QFwdFP8D64      = "msa_sm90_qfwd_fp8_d64"
	SM90QFwdFP8D128     = "msa_sm90_qfwd_fp8_d128"
	SM90QFwdFP8D256     = "msa_sm90_qfwd_fp8_d256"
	SM90QFwdBF16FP8D64  = "msa_sm90_qfwd_bf16fp8_d64"
	SM90QFwdBF16FP8D128 = "msa_sm90_qfwd_bf16fp8_d128"
	SM90QFwdBF16FP8D256 = "msa_sm90_qfwd_bf16fp8_d256"
	SM90QFwdNVFP4D64    = "msa_sm90_qfwd_nvfp4_d64"
	SM90QFwdNVFP4D128   = "msa_sm90_qfwd_nvfp4_d128"
	SM90QFwdNVFP4D256   = "msa_sm90_qfwd_nvfp4_d256"
)

// Kernel entry points msa_sm90_qfwd_fp8pv_d<D> of sm90/sm90_qfwd.cu: the
// fp8 query-major kernels with P.V on the e4m3 wgmma (V transposed in
// shared memory by the producer warp), the A/B alternative to
// msa_sm90_qfwd_fp8_d* (V widened to BF16) selected by MSA_CUDA_FP8PV.
const (
	SM90QFwdFP8PVD64  = "msa_sm90_qfwd_fp8pv_d64"
	SM90QFwdFP8PVD128 = "msa_sm90_qfwd_fp8pv_d128"
	SM90QFwdFP8PVD256 = "msa_sm90_qfwd_fp8pv_d256"
)

// SM90QFwdTilesPerCTA is the number of query tiles one CTA of an sm90
// query-major kernel runs (its pipelines, QFwdCfg::kPipes of
// sm90_qfwd.cu: two at D 64 and 128, one at D 256): the grid is
// ceil(tiles / this).
var SM90QFwdTilesPerCTA = map[string]int{
	SM90QFwdBF16D64: 2, SM90QFwdBF16D128: 2, SM90QFwdBF16D256: 1,
	SM90QFwdFP8D64: 2, SM90QFwdFP8D128: 2, SM90QFwdFP8D256: 1,
	SM90QFwdBF16FP8D64: 2, SM90QFwdBF16FP8D128: 2, SM90QFwdBF16FP8D256: 1,
	SM90QFwdNVFP4D64: 2, SM90QFwdNVFP4D128: 2, SM90QFwdNVFP4D256: 1,
	SM90QFwdFP8PVD64: 2, SM90QFwdFP8PVD128: 2, SM90QFwdFP8PVD256: 1,
}
