//go:build cuda

package main

import "github.com/sparseattn/msa/cuda"

// decodeMode is one way of running a decode case: the kernel path and, on
// the tensor-core path, the sm_90a decode kernel (MSA_CUDA_DECODE old or
// new), so that one run checks and times both kernels on the same inputs.
type decodeMode struct {
	path   cuda.Path
	kernel cuda.DecodeKernel
}

// label is the suffix of a row's name: none for the old tensor-core kernel
// (the rows' names before the A/B, which bench/tables.go pairs with their
// " (portable)" rows), " (new)" for the pipelined kernel.
func (m decodeMode) label() string {
	switch {
	case m.path == cuda.PathPortable:
		return " (portable)"
	case m.kernel == cuda.DecodeNew:
		return " (new)"
	}
	return ""
}

// decodeModes lists the modes of a decode case: the portable kernels alone
// where the device has no tensor-core kernels; else the old tensor-core
// kernel, the new one where it exists (sm90), and the portable kernels.
func (r *report) decodeModes() []decodeMode {
	if len(r.k.TensorCoreKernels()) == 0 {
		return []decodeMode{{cuda.PathPortable, cuda.DecodeOld}}
	}
	out := []decodeMode{{cuda.PathAuto, cuda.DecodeOld}}
	if len(cuda.PipeNames(r.k.Arch())) > 0 {
		out = append(out, decodeMode{cuda.PathAuto, cuda.DecodeNew})
	}
	return append(out, decodeMode{cuda.PathPortable, cuda.DecodeOld})
}

// applyDecode selects mode m for the next launches.
func (r *report) applyDecode(m decodeMode) {
	r.k.SetPath(m.path)
	r.k.SetDecodeKernel(m.kernel)
}

// restoreDecode selects the tensor-core path and the decode kernel Load
// read from MSA_CUDA_DECODE.
func (r *report) restoreDecode() { r.applyDecode(decodeMode{cuda.PathAuto, r.decodeDefault}) }
