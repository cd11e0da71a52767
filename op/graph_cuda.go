//go:build cuda

package op

// The CUDA execution path of the graph ops (build tag "cuda").
//
// Every Op of this package implements gorgonia.CUDADoer under this tag, so
// a TapeMachine places its node on Device(0) (vm_tape_cuda.go) and calls
// CUDADo with the machine as extern, the device-resident input values and
// a preallocated device output (CallsExtern returns true under the tag,
// which makes the compiler emit the alloc instruction). How each op runs:
//
//   - Planning and selection ops (K2QCSR, PackK2QCSR, FwdSchedule,
//     DecodeSchedule, BlockScores, TopKBlocks) and the casts (no GPU
//     kernel: CastToBF16, CastFromBF16) run on the host: their inputs are
//     copied device->host, the host work runs (same validation, same
//     results as the CPU Do), and its value is copied into the
//     preallocated device output. Each of them (hostRunner,
//     graph_nodes_host.go) does it on host storage it keeps, with its CPU
//     Do's check-and-build function, allocating nothing in a warm run.
//     The plan inputs are small int32 tensors; BlockScores and the casts
//     copy their whole operands and are therefore slow on this path.
//   - WritePagedKV checks the new rows, page table and seqused_k on the
//     host, copies the cache device to device into its output and each
//     new row host to device into place (graph_cuda_writekv.go).
//   - SparseAttention launches the fatbin kernels through package cuda
//     (SparsePrefill: the windows' forward and combine, or one query-major
//     kernel) with the device pointers of q/k/v, cu_seqlens, page table,
//     seqused_k, NVFP4 scales and global scales, and the preallocated
//     output. The CSR, schedule, cu_seqlens, page table, seqused_k and
//     global scales are also copied to the host (small, into storage the
//     node keeps: graph_sparse_host.go) for the same validation as the CPU
//     path and for the host plan structures the launcher uploads.
//   - DecodeAttention (dense and sparse) launches cuda.Decode (plus its
//     split-KV combine) the same way; the schedule value is copied back to
//     the host, and for sparse decode q2k_indices too (validation: range and
//     duplicate checks) while the kernel reads the device copy. Its
//     schedule must come from DecodeSchedule with PlanForCUDA (a split for
//     the GPU's SMs); a CPU-planned one is refused, naming both paths.
//   - LSE / TemperatureLSE copy, device to device, the LSE the attention
//     node left in device memory (state shared through attnState) into their
//     own preallocated output.
//   - Head dims 64, 128 and 256 all have GPU kernels (D = 256 with a
//     smaller row tile, see kernels/cuda/README.md). A configuration the
//     kernels lack (a head dim outside mcuda.HeadDimSupported; the op
//     layer accepts none) would run the CPU Do on host copies of
//     every input and copy O (and, for the accessors, the LSE) back.
//
// Module loading: the embedded fatbin is loaded lazily, once per CUDA
// context (per gorgonia engine), with cuda.Load on the first attention node
// that runs, and cached here. gorgonia.AddToStdLib was not used: the tape
// machine loads its std lib in NewTapeMachine and panics when a module does
// not load (e.g. a GPU without sm_80/sm_90/sm_100 SASS), for every graph
// with any CUDA op, and its functions carry no launcher / scratch buffers.
//
// Threading and ordering: CUDADo runs on the tape machine's runall
// goroutine. Each call locks its OS thread, pushes the engine's context and
// then flushes the machine's batched CUDA queue (DoWork, as gorgonia's
// flushInstr does, on a locked thread with the context current), so pending
// host-to-device input copies have been issued before our driver calls. Every copy and launch uses
// the legacy default stream, so they are ordered with gorgonia's own work;
// synchronous device-to-host copies wait for earlier kernels.
//
// The attention ops synchronize the context after their kernels: a kernel
// failure is reported by the node that caused it, and the outputs (managed
// memory) can be read on the host right after the node.
//
// Device memory: outputs live in gorgonia's arena (prealloc). Partials and
// the LSE buffers are allocated with cuMemAlloc per attention node and CUDA
// context (grown, never shrunk). The context is identified by its driver ID
// (cuCtxGetId), never by its handle, which a new context may reuse. A node
// run alternately on two contexts keeps one set of buffers in each (no
// allocation per switch). When the node is garbage collected its buffers
// are queued and freed by the next CUDA call in their context; buffers of a
// destroyed context were freed with it. Prefill partials are windowed like
// the CPU path's (at most cuda.MaxPartialBytes, attn.MaxPartialBytes).
//
// The binary also links package cuda/driver/initcheck, which runs before
// gorgonia.org/cu's init and replaces its bare os.Exit(1) on a machine
// without a usable driver by one line that says what is missing.

import (
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"unsafe"

	mcuda "github.com/sparseattn/msa/cuda"
	"github.com/sparseattn/msa/cuda/driver"
	_ "github.com/sparseattn/msa/cuda/driver/initcheck" // before gorgonia.org/cu's init: one clear line without a driver
	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/kernels/tile"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/cu"
	G "gorgonia.org/gorgonia"
	gcuda "gorgonia.org/gorgonia/cuda"
	"gorgonia.org/tensor"
)

var (
	_ G.CUDADoer = (*csrOp)(nil)
	_ G.CUDADoer = (*packCSROp)(nil)
	_ G.CUDADoer = (*schedOp)(nil)
	_ G.CUDADoer = (*sparseAttnOp)(nil)
	_ G.CUDADoer = (*lseOp)(nil)
	_ G.CUDADoer = (*decodeSchedOp)(nil)
	_ G.CUDADoer = (*decodeAttnOp)(nil)
	_ G.CUDADoer = (*blockScoresOp)(nil)
	_ G.CUDADoer = (*topKOp)(nil)
	_ G.CUDADoer = (*castOp)(nil)
	_ G.CUDADoer = (*writePagedKVOp)(nil)
)

// CallsExtern is true under the cuda tag: the tape machine then
// preallocates the node's output on the device and passes it to CUDADo.
func (op *csrOp) CallsExtern() bool          { return true }
func (op *packCSROp) CallsExtern() bool      { return true }
func (op *schedOp) CallsExtern() bool        { return true }
func (op *sparseAttnOp) CallsExtern() bool   { return true }
func (op *lseOp) CallsExtern() bool          { return true }
func (op *decodeSchedOp) CallsExtern() bool  { return true }
func (op *decodeAttnOp) CallsExtern() bool   { return true }
func (op *blockScoresOp) CallsExtern() bool  { return true }
func (op *topKOp) CallsExtern() bool         { return true }
func (op *castOp) CallsExtern() bool         { return true }
func (op *writePagedKVOp) CallsExtern() bool { return true }

// CUDADo runs the CSR build on the host (see the file comment).
func (op *csrOp) CUDADo(extern G.External, dev G.Device, prealloc G.Value, inputs ...G.Value) (G.Value, error) {
	return hostCUDADo("K2QCSR", op, extern, dev, prealloc, inputs)
}

// CUDADo packs the CSR on the host.
func (op *packCSROp) CUDADo(extern G.External, dev G.Device, prealloc G.Value, inputs ...G.Value) (G.Value, error) {
	return hostCUDADo("PackK2QCSR", op, extern, dev, prealloc, inputs)
}

// CUDADo builds the forward schedule on the host.
func (op *schedOp) CUDADo(extern G.External, dev G.Device, prealloc G.Value, inputs ...G.Value) (G.Value, error) {
	return hostCUDADo("FwdSchedule", op, extern, dev, prealloc, inputs)
}

// CUDADo builds the decode schedule on the host.
func (op *decodeSchedOp) CUDADo(extern G.External, dev G.Device, prealloc G.Value, inputs ...G.Value) (G.Value, error) {
	return hostCUDADo("DecodeSchedule", op, extern, dev, prealloc, inputs)
}

// CUDADo scores blocks on the host (no GPU kernel).
func (op *blockScoresOp) CUDADo(extern G.External, dev G.Device, prealloc G.Value, inputs ...G.Value) (G.Value, error) {
	return hostCUDADo("BlockScores", op, extern, dev, prealloc, inputs)
}

// CUDADo selects blocks on the host.
func (op *topKOp) CUDADo(extern G.External, dev G.Device, prealloc G.Value, inputs ...G.Value) (G.Value, error) {
	return hostCUDADo("TopKBlocks", op, extern, dev, prealloc, inputs)
}

// CUDADo casts on the host (no GPU kernel).
func (op *castOp) CUDADo(extern G.External, dev G.Device, prealloc G.Value, inputs ...G.Value) (G.Value, error) {
	return hostCUDADo(op.fn(), op, extern, dev, prealloc, inputs)
}

// ---- environment -------------------------------------------------------------

// gpuEnv is one CUDADo call's view of the machine.
type gpuEnv struct {
	fn     string
	extern G.External
	dev    G.Device
	eng    *gcuda.Engine
	ctx    cu.CUContext
	ctxID  uint64 // cuCtxGetId of ctx: unique for the process's lifetime
	calls  *gpuCalls
}

// gpuCalls replaces the driver calls of the nodes' device paths (nil
// fields: the driver). Test scaffolding: the tests run those paths without
// a GPU (graph_decode_cuda_test.go and its siblings); CUDADo never sets it.
type gpuCalls struct {
	dtoh     func(dst unsafe.Pointer, src uint64, n int64) error
	htod     func(dst uint64, src unsafe.Pointer, n int64) error
	dtod     func(dst, src uint64, n int64) error
	onDevice func(G.Value) bool
	kernels  func() (*mcuda.Kernels, error)
	mem      devMemory
	sync     func() error
}

func (e *gpuEnv) isDevice(v G.Value) bool {
	if e.calls != nil && e.calls.onDevice != nil {
		return e.calls.onDevice(v)
	}
	return onDevice(v)
}

func (e *gpuEnv) dtoh(dst unsafe.Pointer, src uint64, n int64) error {
	if e.calls != nil && e.calls.dtoh != nil {
		return e.calls.dtoh(dst, src, n)
	}
	return cu.MemcpyDtoH(dst, cu.DevicePtr(src), n)
}

func (e *gpuEnv) htod(dst uint64, src unsafe.Pointer, n int64) error {
	if e.calls != nil && e.calls.htod != nil {
		return e.calls.htod(dst, src, n)
	}
	return cu.MemcpyHtoD(cu.DevicePtr(dst), src, n)
}

func (e *gpuEnv) dtod(dst, src uint64, n int64) error {
	if e.calls != nil && e.calls.dtod != nil {
		return e.calls.dtod(dst, src, n)
	}
	return cu.MemcpyDtoD(cu.DevicePtr(dst), cu.DevicePtr(src), n)
}

func (e *gpuEnv) memory() devMemory {
	if e.calls != nil && e.calls.mem != nil {
		return e.calls.mem
	}
	return cuMemory{}
}

func (e *gpuEnv) synchronize() error {
	if e.calls != nil && e.calls.sync != nil {
		return e.calls.sync()
	}
	return mcuda.Synchronize(nil)
}

// gpuEnvs holds the gpuEnv values of withGPU calls.
var gpuEnvs = sync.Pool{New: func() any { return new(gpuEnv) }}

// withGPU flushes the machine's batched queue, makes the engine's context
// current on a locked OS thread and runs body. Panics inside become errors.
func withGPU(fn string, extern G.External, dev G.Device, body func(e *gpuEnv) (G.Value, error)) (v G.Value, err error) {
	m, ok := extern.(G.CUDAMachine)
	if !ok || m == nil {
		return nil, validate.ArgErr(fn, "extern", "a CUDA machine (gorgonia.CUDAMachine)", fmt.Sprintf("%T", extern))
	}
	engs := m.Engines()
	if int(dev) < 0 || int(dev) >= len(engs) {
		return nil, validate.ArgErr(fn, "device", fmt.Sprintf("a device in [0, %d)", len(engs)), int(dev))
	}
	eng := &engs[int(dev)]
	// body takes e through a func value, which would move a local gpuEnv
	// to the heap on every call: it comes from a pool and goes back after.
	e := gpuEnvs.Get().(*gpuEnv)
	*e = gpuEnv{fn: fn, extern: extern, dev: dev, eng: eng, ctx: eng.Context().CUDAContext()}
	defer func() { *e = gpuEnv{}; gpuEnvs.Put(e) }()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.PushCurrentCtx(e.ctx); err != nil {
		return nil, fmt.Errorf("op: %s: making the engine's CUDA context current: %w", fn, err)
	}
	defer func() {
		if _, perr := cu.PopCurrentCtx(); perr != nil && err == nil {
			v, err = nil, fmt.Errorf("op: %s: restoring the CUDA context: %w", fn, perr)
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("op: %s: CUDA path failed: %v", fn, r)
		}
	}()
	if w, ok := extern.(interface{ DoWork() error }); ok {
		if err := w.DoWork(); err != nil {
			return nil, fmt.Errorf("op: %s: flushing gorgonia's batched CUDA calls: %w", fn, err)
		}
	}
	if err := driver.Open(); err != nil {
		return nil, fmt.Errorf("op: %s: %w", fn, err)
	}
	id, err := driver.CurrentContextID()
	if err != nil {
		return nil, fmt.Errorf("op: %s: identifying the CUDA context: %w", fn, err)
	}
	e.ctxID = id
	if err := freePending(id, cuMemory{}); err != nil {
		return nil, fmt.Errorf("op: %s: freeing the device buffers of a collected node: %w", fn, err)
	}
	return body(e)
}

// hostCUDADo runs op's CPU Do on host copies of the inputs and copies the
// value into the device output.
func hostCUDADo(fn string, op G.Op, extern G.External, dev G.Device, prealloc G.Value, inputs []G.Value) (G.Value, error) {
	return withGPU(fn, extern, dev, func(e *gpuEnv) (G.Value, error) { return e.hostDo(op, prealloc, inputs) })
}

// hostDo runs op's host work on host copies of the inputs and copies its
// value into prealloc: on storage the node keeps for a hostRunner (a warm
// run allocates nothing; its errors are the CPU Do's), else with op's CPU
// Do on fresh copies (its value and its errors).
func (e *gpuEnv) hostDo(op G.Op, prealloc G.Value, inputs []G.Value) (G.Value, error) {
	if r, ok := op.(hostRunner); ok {
		if v, done, err := e.hostRun(r, prealloc, inputs); done {
			return v, err
		}
	}
	hs := make([]G.Value, len(inputs))
	for i, v := range inputs {
		h, err := e.toHost(v, fmt.Sprintf("input %d", i))
		if err != nil {
			return nil, err
		}
		hs[i] = h
	}
	out, err := op.Do(hs...)
	if err != nil {
		return nil, err
	}
	od, ok := out.(*tensor.Dense)
	if !ok {
		return nil, validate.ArgErr(e.fn, "value", "a *tensor.Dense", fmt.Sprintf("%T", out))
	}
	return e.toDevice(od, prealloc)
}

// hostRun is hostDo on the storage of r's hostStage; done is false when
// an input cannot be copied into it (the caller then runs r's CPU Do on
// fresh copies, which names the input).
func (e *gpuEnv) hostRun(r hostRunner, prealloc G.Value, inputs []G.Value) (v G.Value, done bool, err error) {
	st := r.stage()
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(inputs) > maxHostInputs {
		return nil, false, nil
	}
	if len(st.in) != len(inputs) {
		st.in = make([]hostValue, len(inputs))
	}
	ts := st.ts[:len(inputs)]
	defer clear(ts)
	for i, x := range inputs {
		if ts[i], err = e.toHostKept(&st.in[i], x, "input"); err != nil {
			return nil, false, nil
		}
	}
	out, err := r.hostRun(ts)
	if err != nil {
		return nil, true, err
	}
	v, err = e.toDevice(out, prealloc)
	return v, true, err
}

// onDevice reports whether v is a tensor in a gorgonia CUDA engine's memory.
func onDevice(v G.Value) bool {
	t, ok := v.(tensor.Tensor)
	if !ok || t == nil {
		return false
	}
	_, ok = t.Engine().(*gcuda.Engine)
	return ok
}

func byteSize(v G.Value) int64 { return int64(v.Shape().TotalSize()) * int64(v.Dtype().Size()) }

func hostPtr(d *tensor.Dense) unsafe.Pointer {
	if len(d.Header.Raw) == 0 {
		return nil
	}
	return unsafe.Pointer(&d.Header.Raw[0])
}

// devPtr is the device address of a device value (0 for nil or empty).
func (e *gpuEnv) devPtr(v G.Value, arg string) (uint64, error) {
	if v == nil || byteSize(v) == 0 {
		return 0, nil
	}
	if !e.isDevice(v) {
		return 0, validate.ArgErr(e.fn, arg, "a value in device memory", fmt.Sprintf("%T on the host", v))
	}
	return uint64(v.Uintptr()), nil
}

// devPtrAfter is devPtr after an earlier call's error *err: it returns 0
// and keeps *err when that is set, and records its own error in *err.
func (e *gpuEnv) devPtrAfter(err *error, v G.Value, arg string) uint64 {
	if *err != nil {
		return 0
	}
	p, perr := e.devPtr(v, arg)
	*err = perr
	return p
}

// slotPtr is devPtrAfter of the optional input at slot idx (0 when the
// node has none: idx < 0).
func (e *gpuEnv) slotPtr(err *error, in []G.Value, idx int, arg string) uint64 {
	if idx < 0 {
		return 0
	}
	return e.devPtrAfter(err, in[idx], arg)
}

// toHost returns a host *tensor.Dense with v's dtype, shape and data.
func (e *gpuEnv) toHost(v G.Value, arg string) (*tensor.Dense, error) {
	if v == nil {
		return nil, validate.ArgErr(e.fn, arg, "a value", "nil")
	}
	if !e.isDevice(v) {
		return denseOf(e.fn, arg, v)
	}
	n := v.Shape().TotalSize()
	dt := v.Dtype()
	h := tensor.New(tensor.WithShape(v.Shape().Clone()...), tensor.WithBacking(reflect.MakeSlice(reflect.SliceOf(dt.Type), n, n).Interface()))
	return h, e.copyToHost(h, v, arg)
}

// copyToHost copies the device value v into the host tensor h of its size.
func (e *gpuEnv) copyToHost(h *tensor.Dense, v G.Value, arg string) error {
	if size := byteSize(v); size > 0 {
		if err := e.dtoh(hostPtr(h), uint64(v.Uintptr()), size); err != nil {
			return fmt.Errorf("op: %s: copying %s (%d bytes) to the host: %w", e.fn, arg, size, err)
		}
	}
	return nil
}

// keptAfter is toHostKept after an earlier call's error *err: it returns
// nil and keeps *err when that is set, and records its own error in *err.
func (e *gpuEnv) keptAfter(err *error, h *hostValue, v G.Value, arg string) *tensor.Dense {
	if *err != nil {
		return nil
	}
	t, terr := e.toHostKept(h, v, arg)
	*err = terr
	return t
}

// toHostKept is toHost into storage the node keeps (h): a warm run
// allocates nothing. A host value is read in place.
func (e *gpuEnv) toHostKept(h *hostValue, v G.Value, arg string) (*tensor.Dense, error) {
	if v == nil || !e.isDevice(v) {
		return e.toHost(v, arg)
	}
	t := h.view(v.Dtype(), v.Shape())
	return t, e.copyToHost(t, v, arg)
}

// output returns prealloc, or a new arena value of dtype dt and shape s.
func (e *gpuEnv) output(prealloc G.Value, dt tensor.Dtype, s tensor.Shape) (G.Value, error) {
	if prealloc != nil {
		if prealloc.Dtype() != dt || !prealloc.Shape().Eq(s) {
			return nil, validate.ArgErr(e.fn, "prealloc", fmt.Sprintf("%s %v", validate.DtypeName(dt), s), fmt.Sprintf("%s %v", validate.DtypeName(prealloc.Dtype()), prealloc.Shape()))
		}
		return prealloc, nil
	}
	size := int64(s.TotalSize()) * int64(dt.Size())
	mem, err := e.extern.Get(e.dev, size)
	if err != nil {
		return nil, fmt.Errorf("op: %s: allocating %d bytes of device memory: %w", e.fn, size, err)
	}
	return tensor.New(tensor.Of(dt), tensor.WithShape(s.Clone()...), tensor.FromMemory(mem.Uintptr(), uintptr(size))), nil
}

// toDevice copies a host value into prealloc (allocated when nil).
func (e *gpuEnv) toDevice(h *tensor.Dense, prealloc G.Value) (G.Value, error) {
	out, err := e.output(prealloc, h.Dtype(), h.Shape())
	if err != nil {
		return nil, err
	}
	size := byteSize(h)
	if size == 0 {
		return out, nil
	}
	if !e.isDevice(out) && prealloc != nil {
		pd, ok := out.(*tensor.Dense)
		if !ok {
			return nil, validate.ArgErr(e.fn, "prealloc", "a *tensor.Dense", fmt.Sprintf("%T", out))
		}
		copy(pd.Header.Raw, h.Header.Raw)
		return out, nil
	}
	if err := e.htod(uint64(out.Uintptr()), hostPtr(h), size); err != nil {
		return nil, fmt.Errorf("op: %s: copying the result (%d bytes) to the device: %w", e.fn, size, err)
	}
	return out, nil
}

// ---- kernels module, once per context --------------------------------------------

type kernelsEntry struct {
	ctx   cu.CUContext
	ctxID uint64
	k     *mcuda.Kernels
}

var (
	kernelsMu sync.Mutex
	// kernelsByEngine holds the loaded module per gorgonia engine; the
	// entry is valid while the engine still owns the context it was loaded
	// in (Engine.Close clears it; such entries are dropped).
	kernelsByEngine = map[*gcuda.Engine]kernelsEntry{}
)

func (e *gpuEnv) kernels() (*mcuda.Kernels, error) {
	if e.calls != nil && e.calls.kernels != nil {
		return e.calls.kernels()
	}
	kernelsMu.Lock()
	defer kernelsMu.Unlock()
	for eng, ent := range kernelsByEngine {
		if eng != e.eng && eng.Context().CUDAContext() != ent.ctx {
			delete(kernelsByEngine, eng)
			dropContext(ent.ctxID)
		}
	}
	if ent, ok := kernelsByEngine[e.eng]; ok {
		if ent.ctxID == e.ctxID {
			return ent.k, nil
		}
		delete(kernelsByEngine, e.eng) // a new context (maybe at the old handle): the old one is gone
		dropContext(ent.ctxID)
	}
	k, err := mcuda.Load(nil) // the context is current on this locked thread
	if err != nil {
		return nil, fmt.Errorf("op: %s: %w", e.fn, err)
	}
	kernelsByEngine[e.eng] = kernelsEntry{ctx: e.ctx, ctxID: e.ctxID, k: k}
	return k, nil
}

// ---- device memory of the attention nodes (bookkeeping: graph_cuda_state.go) ----

// cuMemory allocates with gorgonia's binding of the driver (the current
// context of the locked thread).
type cuMemory struct{}

func (cuMemory) alloc(n int64) (uint64, error) {
	p, err := cu.MemAlloc(n)
	return uint64(p), err
}

func (cuMemory) free(p uint64) error { return cu.MemFree(cu.DevicePtr(p)) }

// hostAttention runs an attention op's CPU Do on host copies (GPU kernels
// missing for the configuration); the accessors then read the host LSE.
func (e *gpuEnv) hostAttention(op G.Op, st *attnState, prealloc G.Value, inputs []G.Value) (G.Value, error) {
	v, err := e.hostDo(op, prealloc, inputs)
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	if ds := devState(st, e.ctxID, false); ds != nil {
		ds.lseOK, ds.tlseOK = false, false
	}
	st.mu.Unlock()
	return v, nil
}

// usedSlots is the largest split count of a forward schedule (at least 1,
// at most topK): the partial slots a prefill writes, as the CPU path sizes
// them.
func usedSlots(splitCounts []int32, topK int) int {
	n := int32(1)
	for _, c := range splitCounts {
		n = max(n, c)
	}
	return min(int(n), max(topK, 1))
}

func partialCode(p attn.PartialDtype) (mcuda.Dtype, int64) {
	switch p {
	case attn.PartialF32:
		return mcuda.F32, int64(p.Size())
	case attn.PartialF16:
		return mcuda.F16, int64(p.Size())
	case attn.PartialE4M3:
		return mcuda.E4M3, int64(p.Size())
	default:
		return mcuda.BF16, int64(attn.PartialBF16.Size())
	}
}

func roundCode(r tile.Round) mcuda.Round {
	switch r {
	case tile.RoundE4M3:
		return mcuda.RoundE4M3
	case tile.RoundBF16:
		return mcuda.RoundBF16
	default:
		return mcuda.RoundNone
	}
}

func dtypeCode(dt tensor.Dtype) mcuda.Dtype {
	if dt == Float8E4M3FN {
		return mcuda.E4M3
	}
	return mcuda.BF16
}

// ---- SparseAttention -----------------------------------------------------------

// CUDADo runs the sparse prefill on the GPU: SparseForward + Combine.
func (op *sparseAttnOp) CUDADo(extern G.External, dev G.Device, prealloc G.Value, inputs ...G.Value) (G.Value, error) {
	const fn = "SparseAttention"
	if len(inputs) != op.Arity() {
		return nil, validate.ArgErr(fn, "inputs", fmt.Sprintf("%d values", op.Arity()), len(inputs))
	}
	if op.cfg.layout != HND {
		return nil, nhdOnCUDA(fn, op.cfg.layout)
	}
	return withGPU(fn, extern, dev, func(e *gpuEnv) (G.Value, error) {
		if s := inputs[0].Shape(); s.Dims() != 3 || !mcuda.HeadDimSupported(s[2]) {
			return e.hostAttention(op, op.st, prealloc, inputs)
		}
		return op.gpu(e, prealloc, inputs)
	})
}

func (op *sparseAttnOp) gpu(e *gpuEnv, prealloc G.Value, in []G.Value) (G.Value, error) {
	const fn = "SparseAttention"
	// q, k, v and the NVFP4 block scales stay on the device: validation
	// reads only their shapes and dtypes. Metadata is copied to the host.
	op.st.mu.Lock()
	defer op.st.mu.Unlock()
	sc, sl, err := op.hostCall(e, in)
	if err != nil {
		return nil, err
	}
	p := &sc.p
	kern, err := e.kernels()
	if err != nil {
		return nil, err
	}
	out, err := e.output(prealloc, BFloat16, op.outShape)
	if err != nil {
		return nil, err
	}
	// One call per field (a table of pointers into fa and ca would move
	// them to the heap on every run).
	var fa mcuda.FwdArgs
	var ca mcuda.CombineArgs
	fa.Q, fa.K, fa.V = e.devPtrAfter(&err, in[0], "q"), e.devPtrAfter(&err, in[1], "k"), e.devPtrAfter(&err, in[2], "v")
	fa.CuSeqlensQ, fa.CuSeqlensK = e.devPtrAfter(&err, in[5], "cu_seqlens_q"), e.devPtrAfter(&err, in[6], "cu_seqlens_k")
	fa.PageTable, fa.SequsedK = e.slotPtr(&err, in, sl.pageTable, "page_table"), e.slotPtr(&err, in, sl.seqused, "seqused_k")
	fa.KScale, fa.VScale = e.slotPtr(&err, in, sl.kScale, "k_scale_128x4"), e.slotPtr(&err, in, sl.vScale, "v_scale_128x4")
	fa.KGlobalScale, ca.OutputScale = e.slotPtr(&err, in, sl.kGlobal, "k_global_scale"), e.slotPtr(&err, in, sl.vGlobal, "v_global_scale")
	if ca.Out = e.devPtrAfter(&err, out, "out"); err != nil {
		return nil, err
	}

	ds := devState(op.st, e.ctxID, true)
	ds.lseOK, ds.tlseOK = false, false
	rows := int64(p.TotalQ) * int64(p.HQ)
	pdt, psz := partialCode(p.Partial)
	slots := usedSlots(p.Sched.SplitCounts, p.TopK)
	window := mcuda.WindowQueries(p.TotalQ, slots, p.HQ, p.D, int(psz))
	oBytes, lseBytes := mcuda.PartialBytes(window, slots, p.HQ, p.D, int(psz))
	needT := sc.returnTLSE
	realT := needT && p.InvT != 0 // else the temperature LSE is the LSE
	for _, b := range []struct {
		buf  *devBuf
		role string
		n    int64
		want bool
	}{
		{&ds.oPart, "O partials", oBytes, true},
		{&ds.lsePart, "LSE partials", lseBytes, true},
		{&ds.tlsePart, "temperature LSE partials", lseBytes, realT},
		{&ds.lse, "LSE", rows * 4, true},
		{&ds.tlse, "temperature LSE", rows * 4, needT},
	} {
		if b.want {
			if err := b.buf.ensure(e.memory(), fn, b.role, b.n); err != nil {
				return nil, err
			}
		}
	}
	fa.OPartial, fa.LSEPartial = uint64(ds.oPart.ptr), uint64(ds.lsePart.ptr)
	if realT {
		fa.TLSEPartial = uint64(ds.tlsePart.ptr)
		fa.Temperature = float32(1 / float64(p.InvT))
	}
	fa.TotalQ, fa.Hq, fa.Hkv, fa.D, fa.BlkKV, fa.TopK, fa.NumBatch = p.TotalQ, p.HQ, p.Hkv, p.D, p.BlkKV, p.TopK, sc.batch
	if p.KV.Paged {
		fa.PageSize, fa.PageTableStride = p.KV.PageSize, p.KV.PTCols
	}
	fa.QDtype, fa.KVDtype = dtypeCode(in[0].Dtype()), dtypeCode(in[1].Dtype())
	if op.cfg.nvfp4 {
		fa.KVDtype = mcuda.NVFP4
	}
	fa.PartialDtype, fa.PVRound, fa.Causal, fa.SoftmaxScale = pdt, roundCode(p.PV), p.Causal, p.Scale
	if s := in[1].Shape(); s.Dims() > 0 {
		fa.KVRows = s[0] // total_k (dense) or the page count (paged)
	}
	ca.OPartial, ca.LSEPartial, ca.TLSEPartial = fa.OPartial, fa.LSEPartial, fa.TLSEPartial
	ca.LSE = uint64(ds.lse.ptr)
	if realT {
		ca.TLSE = uint64(ds.tlse.ptr)
	}
	ca.TotalQ, ca.Hq, ca.Hkv, ca.D, ca.TopK, ca.PartialDtype = p.TotalQ, p.HQ, p.Hkv, p.D, p.TopK, pdt
	if err := kern.SparsePrefill(nil, &fa, &ca, &sc.csr, sc.sched, p.CuQ, window); err != nil {
		return nil, fmt.Errorf("op: %s: %w", fn, err)
	}
	if needT && !realT && rows > 0 {
		if err := cu.MemcpyDtoD(cu.DevicePtr(ds.tlse.ptr), cu.DevicePtr(ds.lse.ptr), rows*4); err != nil {
			return nil, fmt.Errorf("op: %s: copying the LSE as temperature LSE: %w", fn, err)
		}
	}
	if err := e.synchronize(); err != nil {
		return nil, fmt.Errorf("op: %s: kernels failed: %w", fn, err)
	}
	ds.lseOK, ds.tlseOK = true, needT
	op.st.lse, op.st.tlse = nil, nil
	return out, nil
}

// hostCall validates a run's inputs and prepares the call (sparseHost):
// the metadata inputs are copied into host storage the node keeps; a run
// of the last validated key repeats only the checks of the metadata
// values, any other run (or a failed recheck) takes the full validation
// of the CPU path, with its errors.
func (op *sparseAttnOp) hostCall(e *gpuEnv, in []G.Value) (*sparseCall, attnSlots, error) {
	const fn = "SparseAttention"
	h := &op.host
	if len(h.in) != len(in) {
		h.in = make([]hostValue, len(in))
	}
	fetch := func(i int, arg string, meta bool) (*tensor.Dense, error) {
		if meta {
			return e.toHostKept(&h.in[i], in[i], arg)
		}
		return denseOf(fn, arg, in[i])
	}
	sl := op.slots()
	var ts [maxSparseInputs]*tensor.Dense
	fast := len(in) <= maxSparseInputs
	for i := 0; fast && i < len(in); i++ {
		var err error
		// As op.call fetches them: q, k, v and the NVFP4 block scales stay
		// on the device.
		meta := i >= 3 && i != sl.kScale && i != sl.vScale
		if ts[i], err = fetch(i, sparseArg(i, sl), meta); err != nil {
			fast = false // the full validation names the error
		}
	}
	var key sparseKey
	if fast {
		key, fast = sparseKeyOf(ts[:len(in)], op.st.needT)
	}
	if fast && h.valid && key == h.key && op.recheck(h, ts[:len(in)], sl) {
		return &h.sc, sl, nil
	}
	h.valid = false
	sc, sl, err := op.call(fn, fetch)
	if err != nil {
		return nil, sl, err
	}
	h.sc = *sc
	h.sc.p.CSR = &h.sc.csr
	h.key, h.valid = key, fast
	return &h.sc, sl, nil
}

// sparseArg names input i of a sparse prefill node with slots sl (for the
// errors of copying it to the host).
func sparseArg(i int, sl attnSlots) string {
	switch i {
	case 0, 1, 2:
		return [...]string{"q", "k", "v"}[i]
	case 3, 4, 5, 6:
		return [...]string{"csr", "schedule", "cu_seqlens_q", "cu_seqlens_k"}[i-3]
	case sl.pageTable:
		return "page_table"
	case sl.seqused:
		return "seqused_k"
	case sl.kScale:
		return "k_scale_128x4"
	case sl.vScale:
		return "v_scale_128x4"
	case sl.kGlobal:
		return "k_global_scale"
	case sl.vGlobal:
		return "v_global_scale"
	}
	return "input"
}

// nhdOnCUDA is the error of a paged layout other than HND on the CUDA path:
// the kernels address HND pages only.
func nhdOnCUDA(fn string, l PagedLayout) error {
	return &NotImplementedError{Func: fn, What: fmt.Sprintf("the %v paged K/V layout %s on the CUDA path (its kernels take HND [num_pages, Hkv, page_size, D]; the CPU path takes both)", l, l.shape("D"))}
}

// ---- DecodeAttention -------------------------------------------------------------

// CUDADo runs paged decode on the GPU (cuda.Decode), dense or sparse
// (q2k_indices: each query row attends only its selected blocks).
func (op *decodeAttnOp) CUDADo(extern G.External, dev G.Device, prealloc G.Value, inputs ...G.Value) (G.Value, error) {
	const fn = "DecodeAttention"
	if len(inputs) != op.Arity() {
		return nil, validate.ArgErr(fn, "inputs", fmt.Sprintf("%d values", op.Arity()), len(inputs))
	}
	// Float32 q, k, v run on the host (the CUDA kernels take the
	// low-precision dtypes), in either layout.
	f32 := op.outDtype() == tensor.Float32
	if op.layout != HND && !f32 {
		return nil, nhdOnCUDA(fn, op.layout)
	}
	if err := op.executorCheck(plan.CUDAExecutor); err != nil {
		return nil, err
	}
	return withGPU(fn, extern, dev, func(e *gpuEnv) (G.Value, error) {
		if s := inputs[0].Shape(); f32 || s.Dims() != 3 || !mcuda.HeadDimSupported(s[2]) {
			return e.hostAttention(decodeHostOp{op}, op.st, prealloc, inputs)
		}
		return op.gpu(e, prealloc, inputs)
	})
}

// decodeHostOp is a decode node run by the CUDA path's host fallback: the
// CPU executor runs the CUDA-planned schedule (any valid split gives the
// same attention), so its Do skips the executor check.
type decodeHostOp struct{ *decodeAttnOp }

func (op decodeHostOp) Do(vals ...G.Value) (G.Value, error) { return op.cpu(vals) }

// gpu runs the decode kernels. A warm run (the shapes of the previous run)
// allocates nothing: the metadata inputs are copied into host storage the
// node keeps (decodeHost), the validated metadata and schedule are written
// into the node, the kernel arguments stay on this goroutine's stack and
// the device buffers are kept per node and context (graph_cuda_state.go).
func (op *decodeAttnOp) gpu(e *gpuEnv, prealloc G.Value, in []G.Value) (G.Value, error) {
	const fn = "DecodeAttention"
	c := validate.Checker{Fn: fn}
	qd, kd, vd := decodeQKV(&c, tv(in[0]), tv(in[1]), tv(in[2]))
	if c.Err != nil {
		return nil, c.Err
	}
	if op.sparse && len(in) < 7 {
		return nil, validate.ArgErr(fn, "inputs", "q2k_indices as input 6", len(in))
	}
	op.st.mu.Lock()
	defer op.st.mu.Unlock()
	h := &op.host
	var err error
	pt, su, sv := e.keptAfter(&err, &h.pt, in[3], "page_table"), e.keptAfter(&err, &h.su, in[4], "seqused_k"), e.keptAfter(&err, &h.sv, in[5], "schedule")
	if err != nil {
		return nil, err
	}
	var q2k tensor.Tensor // host copy for validation; the kernel reads in[6] on the device
	if op.sparse {
		t, err := e.toHostKept(&h.q2k, in[6], "q2k_indices")
		if err != nil {
			return nil, err
		}
		q2k = t
	}
	m, s := &h.meta, &h.sched
	if err := op.prepareInto(&c, m, s, qd, kd, pt, su, sv, q2k); err != nil {
		return nil, err
	}

	kern, err := e.kernels()
	if err != nil {
		return nil, err
	}
	out, err := e.output(prealloc, BFloat16, op.outShape)
	if err != nil {
		return nil, err
	}
	// One call per field (a table of pointers into da would move da to
	// the heap on every run).
	var da mcuda.DecodeArgs
	da.Q, da.K, da.V = e.devPtrAfter(&err, in[0], "q"), e.devPtrAfter(&err, in[1], "k"), e.devPtrAfter(&err, in[2], "v")
	da.PageTable, da.SequsedK = e.devPtrAfter(&err, in[3], "page_table"), e.devPtrAfter(&err, in[4], "seqused_k")
	if da.Out = e.devPtrAfter(&err, out, "out"); err != nil {
		return nil, err
	}
	if op.sparse {
		if da.Q2K, err = e.devPtr(in[6], "q2k_indices"); err != nil {
			return nil, err
		}
		da.TopK, da.BlkKV = m.TopK, m.Blk
	}
	ds := devState(op.st, e.ctxID, true)
	ds.lseOK, ds.tlseOK = false, false
	mem := e.memory()
	rows := int64(m.Batch) * int64(m.SeqlenQ) * int64(m.HQ)
	if err := ds.lse.ensure(mem, fn, "LSE", rows*4); err != nil {
		return nil, err
	}
	if s.SplitKV {
		pr := int64(s.PartialRows) * int64(m.HQ)
		if err := ds.oPart.ensure(mem, fn, "O partials", pr*int64(m.D)*4); err != nil {
			return nil, err
		}
		if err := ds.lsePart.ensure(mem, fn, "LSE partials", pr*4); err != nil {
			return nil, err
		}
		da.OPartial, da.LSEPartial = uint64(ds.oPart.ptr), uint64(ds.lsePart.ptr)
	}
	da.LSE = uint64(ds.lse.ptr)
	da.Batch, da.SeqlenQ, da.Hq, da.Hkv, da.D = m.Batch, m.SeqlenQ, m.HQ, m.Hkv, m.D
	da.PageSize, da.PageTableStride = m.PageSize, m.Cols
	da.QDtype, da.KVDtype, da.PVRound, da.SoftmaxScale = dtypeCode(qd.Dtype()), dtypeCode(kd.Dtype()), roundCode(decodePV(qd, vd)), float32(m.Scale)
	if s := kd.Shape(); s.Dims() > 0 {
		da.NumPages = s[0]
	}
	if err := kern.Decode(nil, &da, s); err != nil {
		return nil, fmt.Errorf("op: %s: %w", fn, err)
	}
	if err := e.synchronize(); err != nil {
		return nil, fmt.Errorf("op: %s: kernels failed: %w", fn, err)
	}
	ds.lseOK = true
	op.st.lse = nil
	return out, nil
}

// ---- LSE accessors ----------------------------------------------------------------

// CUDADo copies the LSE the attention node left in device memory into the
// accessor's output (device to device); after a host fallback run it
// uploads the host LSE.
func (op *lseOp) CUDADo(extern G.External, dev G.Device, prealloc G.Value, inputs ...G.Value) (G.Value, error) {
	fn := op.String()
	return withGPU(fn, extern, dev, func(e *gpuEnv) (G.Value, error) {
		op.st.mu.Lock()
		defer op.st.mu.Unlock()
		out, err := e.output(prealloc, tensor.Float32, op.shape)
		if err != nil {
			return nil, err
		}
		size := byteSize(out)
		if ds := devState(op.st, e.ctxID, false); ds != nil {
			src, ok := ds.lse, ds.lseOK
			if op.temp {
				src, ok = ds.tlse, ds.tlseOK
			}
			if ok {
				if size > src.size {
					return nil, validate.ArgErr(fn, "attention", fmt.Sprintf("an LSE of %d bytes", size), src.size)
				}
				dst, err := e.devPtr(out, "out")
				if err != nil {
					return nil, err
				}
				if size > 0 {
					if err := cu.MemcpyDtoD(cu.DevicePtr(dst), cu.DevicePtr(src.ptr), size); err != nil {
						return nil, fmt.Errorf("op: %s: copying the LSE: %w", fn, err)
					}
				}
				return out, nil
			}
		}
		h := op.st.lse
		if op.temp {
			h = op.st.tlse
		}
		if h == nil {
			return nil, validate.ArgErr(fn, "attention", "an attention node that has run before this node", "no result")
		}
		return e.toDevice(h, out)
	})
}
