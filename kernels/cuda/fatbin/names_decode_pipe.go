// Kernel names and launch geometry of the pipelined sm_90a paged decode
// (sm90/sm90_decode_pipe.cu): one warpgroup per work item, a cp.async ring
// of 64-key spans, the split-KV combine fused into the kernel. Launch ABI:
// one by-value parameter, MsaDecodePipeParams (shared/msa_params.h), no
// tensor maps.

package fatbin

// Kernel entry points msa_sm90_decpipe_<variant>_d<D>: four variants (NVFP4
// K/V with BF16 or E4M3 Q) at head dims 64, 128 and 256, and fp8pv (E4M3
// Q/K/V with P.V on the e4m3 wgmma, V transposed in shared memory) at 64
// and 128.
const (
	SM90DecPipeBF16D64     = "msa_sm90_decpipe_bf16_d64"
	SM90DecPipeBF16D128    = "msa_sm90_decpipe_bf16_d128"
	SM90DecPipeBF16D256    = "msa_sm90_decpipe_bf16_d256"
	SM90DecPipeFP8D64      = "msa_sm90_decpipe_fp8_d64"
	SM90DecPipeFP8D128     = "msa_sm90_decpipe_fp8_d128"
	SM90DecPipeFP8D256     = "msa_sm90_decpipe_fp8_d256"
	SM90DecPipeBF16FP8D64  = "msa_sm90_decpipe_bf16fp8_d64"
	SM90DecPipeBF16FP8D128 = "msa_sm90_decpipe_bf16fp8_d128"
	SM90DecPipeBF16FP8D256 = "msa_sm90_decpipe_bf16fp8_d256"
	SM90DecPipeNVFP4D64    = "msa_sm90_decpipe_nvfp4_d64"
	SM90DecPipeNVFP4D128   = "msa_sm90_decpipe_nvfp4_d128"
	SM90DecPipeNVFP4D256   = "msa_sm90_decpipe_nvfp4_d256"
	SM90DecPipeFP8PVD64    = "msa_sm90_decpipe_fp8pv_d64"
	SM90DecPipeFP8PVD128   = "msa_sm90_decpipe_fp8pv_d128"
)

// Occupancy the pipelined decode is sized for, and the sm_90 resources it
// divides: CTAs CTAs per SM (PipeLaunch.CTAs: PipeCTAsPerSM at D <= 128,
// one at D = 256) need CTAs x (DynSmem + PipeSmemReservedCTA) <=
// PipeSmemPerSM and CTAs x Threads x registers <= PipeRegsPerSM (at 128
// threads any count up to 255 fits).
const (
	PipeCTAsPerSM       = 2
	PipeSmemPerSM       = 233472 // shared memory per sm_90 SM (228 KB)
	PipeSmemReservedCTA = 1024   // shared memory the system reserves per CTA
	PipeRegsPerSM       = 65536  // 32-bit registers per SM
)

// PipeLaunch is the launch geometry of a pipelined decode kernel.
type PipeLaunch struct {
	Threads int // threads per CTA (its __launch_bounds__)
	CTAs    int // CTAs per SM it is sized for (its __launch_bounds__ minimum)
	DynSmem int // dynamic shared memory per CTA, bytes
	Stages  int // cp.async ring stages of 64 keys (K and V)
}

// PipeRegBudget is the most registers per thread that still let ctas CTAs
// of threads threads share an SM (allocation unit 8, at most 255).
func PipeRegBudget(threads, ctas int) int {
	return min(255, PipeRegsPerSM/(ctas*threads)/8*8)
}

// DecodePipeLaunch holds the geometry of every kernel above; the same
// numbers are pinned by static_asserts (MSA_PIPE_PIN lines) in
// sm90/sm90_decode_pipe.cu, checked against this table by
// names_decode_pipe_test.go.
var DecodePipeLaunch = map[string]PipeLaunch{
	SM90DecPipeBF16D64:     {Threads: 128, CTAs: 2, DynSmem: 74752, Stages: 4},
	SM90DecPipeBF16D128:    {Threads: 128, CTAs: 2, DynSmem: 115712, Stages: 3},
	SM90DecPipeBF16D256:    {Threads: 128, CTAs: 1, DynSmem: 230400, Stages: 3},
	SM90DecPipeFP8D64:      {Threads: 128, CTAs: 2, DynSmem: 46080, Stages: 4},
	SM90DecPipeFP8D128:     {Threads: 128, CTAs: 2, DynSmem: 91136, Stages: 4},
	SM90DecPipeFP8D256:     {Threads: 128, CTAs: 1, DynSmem: 181248, Stages: 4},
	SM90DecPipeBF16FP8D64:  {Threads: 128, CTAs: 2, DynSmem: 58368, Stages: 4},
	SM90DecPipeBF16FP8D128: {Threads: 128, CTAs: 2, DynSmem: 115712, Stages: 4},
	SM90DecPipeBF16FP8D256: {Threads: 128, CTAs: 1, DynSmem: 230400, Stages: 4},
	SM90DecPipeNVFP4D64:    {Threads: 128, CTAs: 2, DynSmem: 66560, Stages: 8},
	SM90DecPipeNVFP4D128:   {Threads: 128, CTAs: 2, DynSmem: 114688, Stages: 7},
	SM90DecPipeNVFP4D256:   {Threads: 128, CTAs: 1, DynSmem: 228352, Stages: 7},
	// fp8pv: the fp8 kernels' geometry (V^T takes the widened V's bytes)
	SM90DecPipeFP8PVD64:  {Threads: 128, CTAs: 2, DynSmem: 46080, Stages: 4},
	SM90DecPipeFP8PVD128: {Threads: 128, CTAs: 2, DynSmem: 91136, Stages: 4},
}
