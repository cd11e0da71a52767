// Kernel names and launch geometry of the Hopper (sm_90a: TMA + wgmma) and
// Ampere (sm_80: mma.sync + ldmatrix + cp.async) tensor-core kernels in
// Image; design and per-kernel budgets in kernels/cuda/HOPPER_AMPERE.md.
// Every name is an extern "C" kernel of sm90/sm90_fwd.cu,
// sm90/sm90_decode.cu, sm80/sm80_fwd.cu or sm80/sm80_decode.cu, with the
// launch ABI of shared/msa_tc_abi.h.

package fatbin

// Kernel entry points msa_<sm90|sm80>_<fwd|decode>_<variant>_d<D>: every
// variant (4 prefill, 3 decode) at every head dimension on both
// architectures.
const (
	SM90DecodeBF16D64     = "msa_sm90_decode_bf16_d64"
	SM90DecodeBF16D128    = "msa_sm90_decode_bf16_d128"
	SM90DecodeBF16D256    = "msa_sm90_decode_bf16_d256"
	SM90DecodeFP8D64      = "msa_sm90_decode_fp8_d64"
	SM90DecodeFP8D128     = "msa_sm90_decode_fp8_d128"
	SM90DecodeFP8D256     = "msa_sm90_decode_fp8_d256"
	SM90DecodeBF16FP8D64  = "msa_sm90_decode_bf16fp8_d64"
	SM90DecodeBF16FP8D128 = "msa_sm90_decode_bf16fp8_d128"
	SM90DecodeBF16FP8D256 = "msa_sm90_decode_bf16fp8_d256"
	SM90FwdBF16D64        = "msa_sm90_fwd_bf16_d64"
	SM90FwdBF16D128       = "msa_sm90_fwd_bf16_d128"
	SM90FwdBF16D256       = "msa_sm90_fwd_bf16_d256"
	SM90FwdFP8D64         = "msa_sm90_fwd_fp8_d64"
	SM90FwdFP8D128        = "msa_sm90_fwd_fp8_d128"
	SM90FwdFP8D256        = "msa_sm90_fwd_fp8_d256"
	SM90FwdBF16FP8D64     = "msa_sm90_fwd_bf16fp8_d64"
	SM90FwdBF16FP8D128    = "msa_sm90_fwd_bf16fp8_d128"
	SM90FwdBF16FP8D256    = "msa_sm90_fwd_bf16fp8_d256"
	SM90FwdNVFP4D64       = "msa_sm90_fwd_nvfp4_d64"
	SM90FwdNVFP4D128      = "msa_sm90_fwd_nvfp4_d128"
	SM90FwdNVFP4D256      = "msa_sm90_fwd_nvfp4_d256"
	SM80DecodeBF16D64     = "msa_sm80_decode_bf16_d64"
	SM80DecodeBF16D128    = "msa_sm80_decode_bf16_d128"
	SM80DecodeBF16D256    = "msa_sm80_decode_bf16_d256"
	SM80DecodeFP8D64      = "msa_sm80_decode_fp8_d64"
	SM80DecodeFP8D128     = "msa_sm80_decode_fp8_d128"
	SM80DecodeFP8D256     = "msa_sm80_decode_fp8_d256"
	SM80DecodeBF16FP8D64  = "msa_sm80_decode_bf16fp8_d64"
	SM80DecodeBF16FP8D128 = "msa_sm80_decode_bf16fp8_d128"
	SM80DecodeBF16FP8D256 = "msa_sm80_decode_bf16fp8_d256"
	SM80FwdBF16D64        = "msa_sm80_fwd_bf16_d64"
	SM80FwdBF16D128       = "msa_sm80_fwd_bf16_d128"
	SM80FwdBF16D256       = "msa_sm80_fwd_bf16_d256"
	SM80FwdFP8D64         = "msa_sm80_fwd_fp8_d64"
	SM80FwdFP8D128        = "msa_sm80_fwd_fp8_d128"
	SM80FwdFP8D256        = "msa_sm80_fwd_fp8_d256"
	SM80FwdBF16FP8D64     = "msa_sm80_fwd_bf16fp8_d64"
	SM80FwdBF16FP8D128    = "msa_sm80_fwd_bf16fp8_d128"
	SM80FwdBF16FP8D256    = "msa_sm80_fwd_bf16fp8_d256"
	SM80FwdNVFP4D64       = "msa_sm80_fwd_nvfp4_d64"
	SM80FwdNVFP4D128      = "msa_sm80_fwd_nvfp4_d128"
	SM80FwdNVFP4D256      = "msa_sm80_fwd_nvfp4_d256"
)

// HALaunch is the launch geometry of a Hopper / Ampere tensor-core kernel:
// block size (its __launch_bounds__, so also the function's
// MAX_THREADS_PER_BLOCK attribute) and dynamic shared memory in bytes (the
// kernels have no static shared memory; sm_90a kernels align the base to
// 1024 bytes inside the request). Grid: one CTA per work item.
type HALaunch struct {
	Threads int // threads per CTA (1-D)
	DynSmem int // dynamic shared memory per CTA, bytes
}

// HopperAmpereLaunch holds the geometry of every kernel above; the same
// numbers are pinned by static_asserts (MSA_HA_PIN lines) in the .cu files,
// checked against this table by names_hopper_ampere_test.go.
var HopperAmpereLaunch = map[string]HALaunch{
	SM90DecodeBF16D64:     {Threads: 160, DynSmem: 74848},
	SM90DecodeBF16D128:    {Threads: 160, DynSmem: 148576},
	SM90DecodeBF16D256:    {Threads: 384, DynSmem: 164912},
	SM90DecodeFP8D64:      {Threads: 160, DynSmem: 70752},
	SM90DecodeFP8D128:     {Threads: 160, DynSmem: 140384},
	SM90DecodeFP8D256:     {Threads: 384, DynSmem: 148528},
	SM90DecodeBF16FP8D64:  {Threads: 160, DynSmem: 107616},
	SM90DecodeBF16FP8D128: {Threads: 160, DynSmem: 214112},
	SM90DecodeBF16FP8D256: {Threads: 384, DynSmem: 230448},
	SM90FwdBF16D64:        {Threads: 416, DynSmem: 58432},
	SM90FwdBF16D128:       {Threads: 416, DynSmem: 115776},
	SM90FwdBF16D256:       {Threads: 160, DynSmem: 164928},
	SM90FwdFP8D64:         {Threads: 288, DynSmem: 42048},
	SM90FwdFP8D128:        {Threads: 416, DynSmem: 91200},
	SM90FwdFP8D256:        {Threads: 160, DynSmem: 148544},
	SM90FwdBF16FP8D64:     {Threads: 416, DynSmem: 74816},
	SM90FwdBF16FP8D128:    {Threads: 288, DynSmem: 132160},
	SM90FwdBF16FP8D256:    {Threads: 160, DynSmem: 230464},
	SM90FwdNVFP4D64:       {Threads: 416, DynSmem: 66624},
	SM90FwdNVFP4D128:      {Threads: 416, DynSmem: 132160},
	SM90FwdNVFP4D256:      {Threads: 160, DynSmem: 197696},
	SM80DecodeBF16D64:     {Threads: 128, DynSmem: 24592},
	SM80DecodeBF16D128:    {Threads: 128, DynSmem: 49168},
	SM80DecodeBF16D256:    {Threads: 256, DynSmem: 98320},
	SM80DecodeFP8D64:      {Threads: 128, DynSmem: 20496},
	SM80DecodeFP8D128:     {Threads: 128, DynSmem: 40976},
	SM80DecodeFP8D256:     {Threads: 256, DynSmem: 81936},
	SM80DecodeBF16FP8D64:  {Threads: 128, DynSmem: 20496},
	SM80DecodeBF16FP8D128: {Threads: 128, DynSmem: 40976},
	SM80DecodeBF16FP8D256: {Threads: 256, DynSmem: 81936},
	SM80FwdBF16D64:        {Threads: 128, DynSmem: 24592},
	SM80FwdBF16D128:       {Threads: 128, DynSmem: 49168},
	SM80FwdBF16D256:       {Threads: 128, DynSmem: 98320},
	SM80FwdFP8D64:         {Threads: 128, DynSmem: 20496},
	SM80FwdFP8D128:        {Threads: 128, DynSmem: 40976},
	SM80FwdFP8D256:        {Threads: 128, DynSmem: 81936},
	SM80FwdBF16FP8D64:     {Threads: 128, DynSmem: 20496},
	SM80FwdBF16FP8D128:    {Threads: 128, DynSmem: 40976},
	SM80FwdBF16FP8D256:    {Threads: 128, DynSmem: 81936},
	SM80FwdNVFP4D64:       {Threads: 128, DynSmem: 18448},
	SM80FwdNVFP4D128:      {Threads: 128, DynSmem: 36880},
	SM80FwdNVFP4D256:      {Threads: 128, DynSmem: 73744},
	SM80QFwdBF16D64:       {Threads: 128, DynSmem: 24592},
	SM80QFwdBF16D128:      {Threads: 128, DynSmem: 49168},
	SM80QFwdBF16D256:      {Threads: 256, DynSmem: 98320},
	SM80QFwdFP8D64:        {Threads: 128, DynSmem: 20496},
	SM80QFwdFP8D128:       {Threads: 128, DynSmem: 40976},
	SM80QFwdFP8D256:       {Threads: 256, DynSmem: 81936},
	SM80QFwdBF16FP8D64:    {Threads: 128, DynSmem: 20496},
	SM80QFwdBF16FP8D128:   {Threads: 128, DynSmem: 40976},
	SM80QFwdBF16FP8D256:   {Threads: 256, DynSmem: 81936},
	SM80QFwdNVFP4D64:      {Threads: 128, DynSmem: 18448},
	SM80QFwdNVFP4D128:     {Threads: 128, DynSmem: 36880},
	SM80QFwdNVFP4D256:     {Threads: 256, DynSmem: 73744},
	SM90QFwdBF16D64:       {Threads: 384, DynSmem: 182272},
	SM90QFwdBF16D128:      {Threads: 384, DynSmem: 231424},
	SM90QFwdBF16D256:      {Threads: 160, DynSmem: 230400},
	SM90QFwdFP8D64:        {Threads: 384, DynSmem: 124928},
	SM90QFwdFP8D128:       {Threads: 384, DynSmem: 215040},
	SM90QFwdFP8D256:       {Threads: 160, DynSmem: 214016},
	SM90QFwdBF16FP8D64:    {Threads: 384, DynSmem: 165888},
	SM90QFwdBF16FP8D128:   {Threads: 384, DynSmem: 231424},
	SM90QFwdBF16FP8D256:   {Threads: 160, DynSmem: 230400},
	SM90QFwdNVFP4D64:      {Threads: 384, DynSmem: 124928},
	SM90QFwdNVFP4D128:     {Threads: 384, DynSmem: 231424},
	SM90QFwdNVFP4D256:     {Threads: 160, DynSmem: 230400},
	SM90QFwdFP8PVD64:      {Threads: 384, DynSmem: 124928},
	SM90QFwdFP8PVD128:     {Threads: 384, DynSmem: 215040},
	SM90QFwdFP8PVD256:     {Threads: 160, DynSmem: 214016},
}
