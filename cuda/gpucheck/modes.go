//go:build cuda

package main

import "github.com/sparseattn/msa/cuda"

// runMode is one way of running a case: the kernel path (tensor-core
// where it applies, or portable) and, for a prefill, the KV-major or the
// query-major algorithm, so that one run checks and times both (A/B).
type runMode struct {
	path    cuda.Path
	prefill cuda.PrefillPath
}

// label is the suffix of a timing row's name ("" for the default mode).
func (m runMode) label() string {
	switch {
	case m.path == cuda.PathPortable:
		return " (portable)"
	case m.prefill == cuda.PrefillQuery:
		return " (query)"
	}
	return " (kv)"
}

// modes lists the modes of a case: the portable kernels alone where the
// device has no tensor-core kernels; else the tensor-core kernels (for a
// prefill, KV-major then query-major) and the portable kernels.
func (r *report) modes(prefill bool) []runMode {
	if len(r.k.TensorCoreKernels()) == 0 {
		return []runMode{{cuda.PathPortable, cuda.PrefillKV}}
	}
	if !prefill {
		return []runMode{{cuda.PathAuto, cuda.PrefillKV}, {cuda.PathPortable, cuda.PrefillKV}}
	}
	return []runMode{{cuda.PathAuto, cuda.PrefillKV}, {cuda.PathAuto, cuda.PrefillQuery}, {cuda.PathPortable, cuda.PrefillKV}}
}

// apply selects mode m for the next launches.
func (r *report) apply(m runMode) {
	r.k.SetPath(m.path)
	r.k.SetPrefillPath(m.prefill)
}

// restore selects the tensor-core path and the prefill path Load read
// from MSA_CUDA_PREFILL.
func (r *report) restore() { r.apply(runMode{cuda.PathAuto, r.prefillDefault}) }
