// Package fatbin embeds the prebuilt CUDA kernel image of the GPU path,
// msa_kernels.fatbin (SASS for sm_80, sm_90a, sm_100f; compute_80 PTX),
// built by kernels/cuda/build.sh from the sources of kernels/cuda/portable,
// sm80, sm90 and sm100, and names what it holds: the kernels' extern "C"
// entry points and the launch data of the tensor-core kernels.
//
// It embeds and names; it does not launch. Package cuda
// (github.com/sparseattn/msa/cuda, build tag "cuda" for the driver calls)
// loads Image and launches its kernels. This package has no cgo, no build
// tag and no imports, and must not depend on any other package of the
// module: only package cuda imports it, so binaries built without the tag
// do not carry the image.
package fatbin

import _ "embed"

// Image is msa_kernels.fatbin: every kernel of the family folders in one
// module.
//
//go:embed msa_kernels.fatbin
var Image []byte

// Kernel entry points (extern "C" names) of the portable kernels in Image,
// per head dimension.
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
