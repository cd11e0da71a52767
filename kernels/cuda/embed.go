// Package cudakernels holds the CUDA sources of the GPU path and embeds their
// prebuilt fatbin (SASS for sm_80, sm_90a, sm_100f; compute_80 PTX), built by build.sh.
// It has no cgo and no build tag: only package cuda (build tag "cuda")
// imports it, so binaries without the tag do not carry the fatbin.
package cudakernels

import _ "embed"

// Fatbin is msa_kernels.fatbin: every kernel of kernels/cuda/*.cu in one module.
//
//go:embed msa_kernels.fatbin
var Fatbin []byte

// Kernel entry points (extern "C" names) in Fatbin, per head dimension.
const (
	SparseFwdD256 = "msa_sparse_fwd_d256"
	SparseFwdD128 = "msa_sparse_fwd_d128"
	SparseFwdD64  = "msa_sparse_fwd_d64"
	DecodeD256    = "msa_decode_d256"
	DecodeD128    = "msa_decode_d128"
	DecodeD64     = "msa_decode_d64"
	CombineD256   = "msa_combine_d256"
	CombineD128   = "msa_combine_d128"
	CombineD64    = "msa_combine_d64"
)
