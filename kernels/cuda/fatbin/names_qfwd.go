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
