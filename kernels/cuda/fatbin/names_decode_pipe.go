// Kernel names and launch geometry of the pipelined sm_90a paged decode
// (sm90/sm90_decode_pipe.cu): one warpgroup per work item, a cp.async ring
// of 64-key spans, the split-KV combine fused into the kernel. Launch ABI:
// one by-value parameter, MsaDecodePipeParams (shared/msa_params.h), no
// tensor maps.

package fatbin

// Kernel entry points msa_sm90_decpipe_<variant>_d<D>: three variants at
// head dims 64 and 128 (D = 256 runs the TMA decode of sm90_decode.cu).
const (
	SM90DecPipeBF16D64     = "msa_sm90_decpipe_bf16_d64"
	SM90DecPipeBF16D128    = "msa_sm90_decpipe_bf16_d128"
	SM90DecPipeFP8D64      = "msa_sm90_decpipe_fp8_d64"
	SM90DecPipeFP8D128     = "msa_sm90_decpipe_fp8_d128"
	SM90DecPipeBF16FP8D64  = "msa_sm90_decpipe_bf16fp8_d64"
	SM90DecPipeBF16FP8D128 = "msa_sm90_decpipe_bf16fp8_d128"
)

// Occupancy the pipelined decode is sized for, and the sm_90 resources it
// divides: two CTAs per SM need 2 x (DynSmem + PipeSmemReservedCTA) <=
// PipeSmemPerSM and 2 x Threads x registers <= PipeRegsPerSM (at 128
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
	DynSmem int // dynamic shared memory per CTA, bytes
	Stages  int // cp.async ring stages of 64 keys (K and V)
}

// PipeRegBudget is the most registers per thread that still let
// PipeCTAsPerSM CTAs of threads threads share an SM (allocation unit 8,
// at most 255).
func PipeRegBudget(threads int) int {
	return min(255, PipeRegsPerSM/(PipeCTAsPerSM*threads)/8*8)
}

// DecodePipeLaunch holds the geometry of every kernel above; the same
// numbers are pinned by static_asserts (MSA_PIPE_PIN lines) in
// sm90/sm90_decode_pipe.cu, checked against this table by
// names_decode_pipe_test.go.
var DecodePipeLaunch = map[string]PipeLaunch{
	SM90DecPipeBF16D64:     {Threads: 128, DynSmem: 74752, Stages: 4},
	SM90DecPipeBF16D128:    {Threads: 128, DynSmem: 115712, Stages: 3},
	SM90DecPipeFP8D64:      {Threads: 128, DynSmem: 46080, Stages: 4},
	SM90DecPipeFP8D128:     {Threads: 128, DynSmem: 91136, Stages: 4},
	SM90DecPipeBF16FP8D64:  {Threads: 128, DynSmem: 58368, Stages: 4},
	SM90DecPipeBF16FP8D128: {Threads: 128, DynSmem: 115712, Stages: 4},
}
