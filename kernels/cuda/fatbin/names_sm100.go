package fatbin

// SM100-family (Blackwell: sm_100 B200, sm_103 B300) tensor-core kernels of
// sm100/sm100_fwd.cu, sm100/sm100_qfwd.cu and sm100/sm100_decode.cu:
// extern "C" names and launch data. Their SASS exists only in the sm_100f
// cubin of Image (the sm_80 and sm_90a cubins hold a trap body under the
// same name). Every kernel takes (MsaFwdParams, MsaQFwdParams or
// MsaDecodePipeParams, MsaTensorMaps) by value as __grid_constant__
// parameters (shared/msa_tc_abi.h); the decode's MsaDecodePipeParams
// carries the fused combine's counters, or none (msa_combine then runs).
//
// gates/check_gates.py reads this file: every "msa_*" constant must be a
// kernel of every image of the fatbin, and DynSmem / TMEMCols of SM100Kernels
// must equal the gates/sm100.tsv columns (which the sources pin with
// static_asserts in sm100/sm100_layout.cuh).
const (
	SM100FwdBF16D64        = "msa_sm100_fwd_bf16_d64"
	SM100FwdBF16D128       = "msa_sm100_fwd_bf16_d128"
	SM100FwdBF16D256       = "msa_sm100_fwd_bf16_d256"
	SM100FwdFP8D64         = "msa_sm100_fwd_fp8_d64"
	SM100FwdFP8D128        = "msa_sm100_fwd_fp8_d128"
	SM100FwdFP8D256        = "msa_sm100_fwd_fp8_d256"
	SM100FwdBF16FP8D64     = "msa_sm100_fwd_bf16fp8_d64"
	SM100FwdBF16FP8D128    = "msa_sm100_fwd_bf16fp8_d128"
	SM100FwdBF16FP8D256    = "msa_sm100_fwd_bf16fp8_d256"
	SM100FwdNVFP4D64       = "msa_sm100_fwd_nvfp4_d64"
	SM100FwdNVFP4D128      = "msa_sm100_fwd_nvfp4_d128"
	SM100FwdNVFP4D256      = "msa_sm100_fwd_nvfp4_d256"
	SM100QFwdBF16D64       = "msa_sm100_qfwd_bf16_d64"
	SM100QFwdBF16D128      = "msa_sm100_qfwd_bf16_d128"
	SM100QFwdBF16D256      = "msa_sm100_qfwd_bf16_d256"
	SM100QFwdFP8D64        = "msa_sm100_qfwd_fp8_d64"
	SM100QFwdFP8D128       = "msa_sm100_qfwd_fp8_d128"
	SM100QFwdFP8D256       = "msa_sm100_qfwd_fp8_d256"
	SM100QFwdBF16FP8D64    = "msa_sm100_qfwd_bf16fp8_d64"
	SM100QFwdBF16FP8D128   = "msa_sm100_qfwd_bf16fp8_d128"
	SM100QFwdNVFP4D64      = "msa_sm100_qfwd_nvfp4_d64"
	SM100QFwdNVFP4D128     = "msa_sm100_qfwd_nvfp4_d128"
	SM100QFwdNVFP4D256     = "msa_sm100_qfwd_nvfp4_d256"
	SM100DecodeBF16D64     = "msa_sm100_decode_bf16_d64"
	SM100DecodeBF16D128    = "msa_sm100_decode_bf16_d128"
	SM100DecodeBF16D256    = "msa_sm100_decode_bf16_d256"
	SM100DecodeFP8D64      = "msa_sm100_decode_fp8_d64"
	SM100DecodeFP8D128     = "msa_sm100_decode_fp8_d128"
	SM100DecodeFP8D256     = "msa_sm100_decode_fp8_d256"
	SM100DecodeBF16FP8D64  = "msa_sm100_decode_bf16fp8_d64"
	SM100DecodeBF16FP8D128 = "msa_sm100_decode_bf16fp8_d128"
	SM100DecodeBF16FP8D256 = "msa_sm100_decode_bf16fp8_d256"
	SM100DecodeNVFP4D64    = "msa_sm100_decode_nvfp4_d64"
	SM100DecodeNVFP4D128   = "msa_sm100_decode_nvfp4_d128"
	SM100DecodeNVFP4D256   = "msa_sm100_decode_nvfp4_d256"
)

// SM100Kernel is the launch data of one SM100 tensor-core kernel.
type SM100Kernel struct {
	Name     string // extern "C" name in Image
	Algo     string // "fwd" (sparse prefill partials, grid = forward-schedule capacity), "qfwd" (query-major prefill, grid = query tiles) or "decode" (grid = decode work_count)
	Variant  string // "bf16", "fp8" (E4M3 Q/K/V), "bf16fp8" (BF16 Q, E4M3 K/V widened to BF16), "nvfp4" (NVFP4 K/V, BF16 or E4M3 Q; fwd only)
	HeadDim  int    // D: 64, 128 or 256
	Threads  int    // block size (1-D), no cluster
	DynSmem  int    // dynamic shared memory to request (cuFuncSetAttribute MAX_DYNAMIC_SHARED_SIZE_BYTES above 48 KiB)
	TMEMCols int    // tensor-memory columns one CTA allocates (tcgen05.alloc), <= 512
	RowTile  int    // query-head rows per row tile (fwd, qfwd: UMMA M = 128; decode: UMMA N = 64)
}

// SM100Kernels lists every SM100 kernel of Image.
var SM100Kernels = []SM100Kernel{
	{Name: SM100FwdBF16D64, Algo: "fwd", Variant: "bf16", HeadDim: 64, Threads: 288, DynSmem: 117760, TMEMCols: 512, RowTile: 128},
	{Name: SM100FwdBF16D128, Algo: "fwd", Variant: "bf16", HeadDim: 128, Threads: 288, DynSmem: 133120, TMEMCols: 512, RowTile: 128},
	{Name: SM100FwdBF16D256, Algo: "fwd", Variant: "bf16", HeadDim: 256, Threads: 160, DynSmem: 197720, TMEMCols: 512, RowTile: 128},
	{Name: SM100FwdFP8D64, Algo: "fwd", Variant: "fp8", HeadDim: 64, Threads: 288, DynSmem: 117760, TMEMCols: 512, RowTile: 128},
	{Name: SM100FwdFP8D128, Algo: "fwd", Variant: "fp8", HeadDim: 128, Threads: 288, DynSmem: 117760, TMEMCols: 512, RowTile: 128},
	{Name: SM100FwdFP8D256, Algo: "fwd", Variant: "fp8", HeadDim: 256, Threads: 160, DynSmem: 117760, TMEMCols: 512, RowTile: 128},
	{Name: SM100FwdBF16FP8D64, Algo: "fwd", Variant: "bf16fp8", HeadDim: 64, Threads: 288, DynSmem: 117760, TMEMCols: 512, RowTile: 128},
	{Name: SM100FwdBF16FP8D128, Algo: "fwd", Variant: "bf16fp8", HeadDim: 128, Threads: 288, DynSmem: 149504, TMEMCols: 512, RowTile: 128},
	{Name: SM100FwdBF16FP8D256, Algo: "fwd", Variant: "bf16fp8", HeadDim: 256, Threads: 160, DynSmem: 230488, TMEMCols: 512, RowTile: 128},
	{Name: SM100FwdNVFP4D64, Algo: "fwd", Variant: "nvfp4", HeadDim: 64, Threads: 288, DynSmem: 117760, TMEMCols: 512, RowTile: 128},
	{Name: SM100FwdNVFP4D128, Algo: "fwd", Variant: "nvfp4", HeadDim: 128, Threads: 288, DynSmem: 141312, TMEMCols: 512, RowTile: 128},
	{Name: SM100FwdNVFP4D256, Algo: "fwd", Variant: "nvfp4", HeadDim: 256, Threads: 160, DynSmem: 214104, TMEMCols: 512, RowTile: 128},
	{Name: SM100QFwdBF16D64, Algo: "qfwd", Variant: "bf16", HeadDim: 64, Threads: 320, DynSmem: 117760, TMEMCols: 512, RowTile: 128},
	{Name: SM100QFwdBF16D128, Algo: "qfwd", Variant: "bf16", HeadDim: 128, Threads: 320, DynSmem: 230592, TMEMCols: 512, RowTile: 128},
	{Name: SM100QFwdBF16D256, Algo: "qfwd", Variant: "bf16", HeadDim: 256, Threads: 320, DynSmem: 197824, TMEMCols: 512, RowTile: 128},
	{Name: SM100QFwdFP8D64, Algo: "qfwd", Variant: "fp8", HeadDim: 64, Threads: 320, DynSmem: 117760, TMEMCols: 512, RowTile: 128},
	{Name: SM100QFwdFP8D128, Algo: "qfwd", Variant: "fp8", HeadDim: 128, Threads: 320, DynSmem: 117760, TMEMCols: 512, RowTile: 128},
	{Name: SM100QFwdFP8D256, Algo: "qfwd", Variant: "fp8", HeadDim: 256, Threads: 320, DynSmem: 230592, TMEMCols: 512, RowTile: 128},
	{Name: SM100QFwdBF16FP8D64, Algo: "qfwd", Variant: "bf16fp8", HeadDim: 64, Threads: 448, DynSmem: 132288, TMEMCols: 512, RowTile: 128},
	{Name: SM100QFwdBF16FP8D128, Algo: "qfwd", Variant: "bf16fp8", HeadDim: 128, Threads: 448, DynSmem: 197824, TMEMCols: 512, RowTile: 128},
	{Name: SM100QFwdNVFP4D64, Algo: "qfwd", Variant: "nvfp4", HeadDim: 64, Threads: 448, DynSmem: 124096, TMEMCols: 512, RowTile: 128},
	{Name: SM100QFwdNVFP4D128, Algo: "qfwd", Variant: "nvfp4", HeadDim: 128, Threads: 448, DynSmem: 181440, TMEMCols: 512, RowTile: 128},
	{Name: SM100QFwdNVFP4D256, Algo: "qfwd", Variant: "nvfp4", HeadDim: 256, Threads: 448, DynSmem: 230592, TMEMCols: 512, RowTile: 128},
	{Name: SM100DecodeBF16D64, Algo: "decode", Variant: "bf16", HeadDim: 64, Threads: 128, DynSmem: 111888, TMEMCols: 128, RowTile: 64},
	{Name: SM100DecodeBF16D128, Algo: "decode", Variant: "bf16", HeadDim: 128, Threads: 128, DynSmem: 169232, TMEMCols: 128, RowTile: 64},
	{Name: SM100DecodeBF16D256, Algo: "decode", Variant: "bf16", HeadDim: 256, Threads: 128, DynSmem: 184880, TMEMCols: 256, RowTile: 64},
	{Name: SM100DecodeFP8D64, Algo: "decode", Variant: "fp8", HeadDim: 64, Threads: 128, DynSmem: 58640, TMEMCols: 128, RowTile: 64},
	{Name: SM100DecodeFP8D128, Algo: "decode", Variant: "fp8", HeadDim: 128, Threads: 128, DynSmem: 87312, TMEMCols: 128, RowTile: 64},
	{Name: SM100DecodeFP8D256, Algo: "decode", Variant: "fp8", HeadDim: 256, Threads: 128, DynSmem: 161040, TMEMCols: 256, RowTile: 64},
	{Name: SM100DecodeBF16FP8D64, Algo: "decode", Variant: "bf16fp8", HeadDim: 64, Threads: 128, DynSmem: 95504, TMEMCols: 128, RowTile: 64},
	{Name: SM100DecodeBF16FP8D128, Algo: "decode", Variant: "bf16fp8", HeadDim: 128, Threads: 128, DynSmem: 169232, TMEMCols: 128, RowTile: 64},
	{Name: SM100DecodeBF16FP8D256, Algo: "decode", Variant: "bf16fp8", HeadDim: 256, Threads: 128, DynSmem: 217648, TMEMCols: 256, RowTile: 64},
	{Name: SM100DecodeNVFP4D64, Algo: "decode", Variant: "nvfp4", HeadDim: 64, Threads: 128, DynSmem: 79120, TMEMCols: 128, RowTile: 64},
	{Name: SM100DecodeNVFP4D128, Algo: "decode", Variant: "nvfp4", HeadDim: 128, Threads: 128, DynSmem: 136464, TMEMCols: 128, RowTile: 64},
	{Name: SM100DecodeNVFP4D256, Algo: "decode", Variant: "nvfp4", HeadDim: 256, Threads: 128, DynSmem: 201264, TMEMCols: 256, RowTile: 64},
}
