// Kernel names and launch geometry of the persistent KV-major sm_90a
// prefill with the fused combine (sm90/sm90_fwd2.cu). Launch ABI of
// shared/msa_tc_abi.h with an MsaFwd2Params block (shared/msa_params.h) and
// the tensor maps of the forward.

package fatbin

// Kernel entry points msa_sm90_fwd2_<variant>_d<D>: BF16 and FP8 (E4M3
// Q/K/V) at head dims 64 and 128 (the other variants and D = 256 run
// msa_sm90_fwd_* and the combine).
const (
	SM90Fwd2BF16D64  = "msa_sm90_fwd2_bf16_d64"
	SM90Fwd2BF16D128 = "msa_sm90_fwd2_bf16_d128"
	SM90Fwd2FP8D64   = "msa_sm90_fwd2_fp8_d64"
	SM90Fwd2FP8D128  = "msa_sm90_fwd2_fp8_d128"
)

// Fwd2Launch holds the geometry of the kernels above (one CTA per SM at
// most: the grid is min(work items, SMs)); the same numbers are pinned by
// the MSA_FWD2_PIN static_asserts of sm90_fwd2.cu, checked by
// names_fwd2_test.go.
var Fwd2Launch = map[string]HALaunch{
	SM90Fwd2BF16D64:  {Threads: 288, DynSmem: 115784},
	SM90Fwd2BF16D128: {Threads: 288, DynSmem: 230472},
	SM90Fwd2FP8D64:   {Threads: 288, DynSmem: 107592},
	SM90Fwd2FP8D128:  {Threads: 288, DynSmem: 214088},
}
