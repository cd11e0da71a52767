//go:build cuda

package main

import (
	"fmt"
	"sort"

	"github.com/sparseattn/msa/cuda"
	"github.com/sparseattn/msa/kernels/cuda/fatbin"
)

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

// pipeOccupancy prints how many CTAs of each pipelined decode kernel the
// driver keeps resident per SM; fewer than the kernel's design
// (fatbin.DecodePipeLaunch's CTAs: PipeCTAsPerSM, one at D = 256) is a
// failure (its shared memory or registers grew).
func (r *report) pipeOccupancy() {
	occ, err := r.k.PipeOccupancy(r.dev)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed++
		fmt.Printf("occupancy: ERROR %v\n", err)
		return
	}
	names := make([]string, 0, len(occ))
	for n := range occ {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		status := "ok"
		if want := fatbin.DecodePipeLaunch[n].CTAs; occ[n] < want {
			r.failed++
			status = fmt.Sprintf("FAIL: want >= %d", want)
		}
		fmt.Printf("occupancy: %s %d CTAs per SM (%s)\n", n, occ[n], status)
	}
}
