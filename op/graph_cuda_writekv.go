//go:build cuda

package op

import (
	"fmt"
	"unsafe"

	G "gorgonia.org/gorgonia"
)

// CUDADo appends to the paged cache: the new rows, the page table and
// seqused_k (small) are copied to the host and checked there, the cache
// is copied device to device into the node's output (nothing when the
// output is the cache's memory) and each new row is copied host to device
// into its place, at O(new tokens) host-device traffic. The checks are
// the CPU Do's (writePagedKVOp.check), with its errors; a cache on the
// host takes the host path (the CPU Do).
func (op *writePagedKVOp) CUDADo(extern G.External, dev G.Device, prealloc G.Value, inputs ...G.Value) (G.Value, error) {
	return withGPU("WritePagedKV", extern, dev, func(e *gpuEnv) (G.Value, error) { return op.gpu(e, prealloc, inputs) })
}

// gpu is CUDADo past the context push. A warm run allocates nothing.
func (op *writePagedKVOp) gpu(e *gpuEnv, prealloc G.Value, in []G.Value) (G.Value, error) {
	if len(in) != 4 || in[0] == nil || !e.isDevice(in[0]) {
		return e.hostDo(op, prealloc, in)
	}
	h := &op.host
	h.mu.Lock()
	defer h.mu.Unlock()
	var err error
	nw, pt, su := e.keptAfter(&err, &h.nw, in[1], "new"), e.keptAfter(&err, &h.pt, in[2], "page_table"), e.keptAfter(&err, &h.su, in[3], "seqused_k")
	if err != nil {
		return nil, err
	}
	cache := in[0]
	_, _, dst, err := op.check(&h.dst, tv(cache), nw, pt, su)
	if err != nil {
		return nil, err
	}
	out, err := e.output(prealloc, op.dt, op.cacheShape)
	if err != nil {
		return nil, err
	}
	to, err := e.devPtr(out, "out")
	if err != nil {
		return nil, err
	}
	if from, size := uint64(cache.Uintptr()), byteSize(cache); to != from && size > 0 {
		if err := e.dtod(to, from, size); err != nil {
			return nil, fmt.Errorf("op: WritePagedKV: copying the cache (%d bytes) into the output: %w", size, err)
		}
	}
	cs := op.cacheShape
	hkv, ps := op.layout.dims(cs)
	stride, row := headStride(op.layout, ps), int64(cs[3])*int64(op.dt.Size())
	raw := nw.Header.Raw
	for r, base := range dst {
		for hh := 0; hh < hkv; hh++ {
			at := to + uint64(int64(base+hh*stride)*row)
			if err := e.htod(at, unsafe.Pointer(&raw[int64(r*hkv+hh)*row]), row); err != nil {
				return nil, fmt.Errorf("op: WritePagedKV: copying new row %d, head %d (%d bytes) to the cache: %w", r, hh, row, err)
			}
		}
	}
	return out, nil
}
