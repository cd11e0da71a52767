//go:build cuda

package op

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"

	mcuda "github.com/sparseattn/msa/cuda"
	"github.com/sparseattn/msa/internal/allocs"
	"github.com/sparseattn/msa/kernels/cuda/fatbin"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// fakeGPU runs the graph nodes' device paths without a GPU (test
// scaffolding): the test's host tensors stand for device values, a
// device-to-host copy reads the registered tensor at that address (a
// host-to-device copy writes it), device memory is a counter and the
// kernels are package cuda's FakeKernels, whose driver calls are recorded. None of it allocates per call, so that
// testing.AllocsPerRun measures the node's own path.
type fakeGPU struct {
	drv    mcuda.FakeDriver
	k      *mcuda.Kernels
	host   map[uint64][]byte // the bytes of each registered tensor, by its address
	next   uint64
	allocs int
	syncs  int
	htods  int // host-to-device copies
	dtods  int // device-to-device copies
}

// bytesAt returns the n bytes at address p of a registered tensor (nil
// when no registered tensor holds them all).
func (f *fakeGPU) bytesAt(p uint64, n int64) []byte {
	for base, b := range f.host {
		if p >= base && p+uint64(n) <= base+uint64(len(b)) {
			return b[p-base : p-base+uint64(n)]
		}
	}
	return nil
}

func newFakeGPU(arch mcuda.Arch) *fakeGPU {
	f := &fakeGPU{host: map[uint64][]byte{}, next: 0x7000_0000}
	f.k = mcuda.FakeKernels(arch, &f.drv)
	return f
}

// register makes the tensors readable by the fake's device-to-host copy.
func (f *fakeGPU) register(ts ...*tensor.Dense) {
	for _, t := range ts {
		f.host[uint64(t.Uintptr())] = t.Header.Raw
	}
}

func (f *fakeGPU) alloc(n int64) (uint64, error) {
	f.allocs++
	p := f.next
	f.next += uint64((n + 255) &^ 255)
	return p, nil
}

func (f *fakeGPU) free(uint64) error { return nil }

func (f *fakeGPU) env() *gpuEnv { return f.envFor("DecodeAttention") }

// envFor is the fake's environment of a CUDADo of the op named fn.
func (f *fakeGPU) envFor(fn string) *gpuEnv {
	return &gpuEnv{fn: fn, ctxID: 1, calls: &gpuCalls{
		dtoh: func(dst unsafe.Pointer, src uint64, n int64) error {
			b, ok := f.host[src]
			if !ok || int64(len(b)) < n {
				return fmt.Errorf("fakeGPU: %d bytes from %#x, which no registered tensor holds", n, src)
			}
			copy(unsafe.Slice((*byte)(dst), n), b[:n])
			return nil
		},
		htod: func(dst uint64, src unsafe.Pointer, n int64) error {
			b := f.bytesAt(dst, n)
			if b == nil {
				return fmt.Errorf("fakeGPU: %d bytes to %#x, which no registered tensor holds", n, dst)
			}
			copy(b, unsafe.Slice((*byte)(src), n))
			f.htods++
			return nil
		},
		dtod: func(dst, src uint64, n int64) error {
			to, from := f.bytesAt(dst, n), f.bytesAt(src, n)
			if to == nil || from == nil {
				return fmt.Errorf("fakeGPU: %d bytes from %#x to %#x, outside the registered tensors", n, src, dst)
			}
			copy(to, from)
			f.dtods++
			return nil
		},
		onDevice: func(G.Value) bool { return true },
		kernels:  func() (*mcuda.Kernels, error) { return f.k, nil },
		mem:      f,
		sync:     func() error { f.syncs++; return nil },
	}}
}

// decodeCUDACase is a decode node (dense or sparse, BF16, D 128, one
// request of pages pages of 128 tokens, 16 query heads, 1 KV head) planned
// for the CUDA path, with host tensors for its inputs.
type decodeCUDACase struct {
	op     *decodeAttnOp
	so     *decodeSchedOp
	pt, su *tensor.Dense
	in     []G.Value
	out    *tensor.Dense // the prealloc the tape machine would pass
}

func newDecodeCUDACase(t *testing.T, sparse bool) *decodeCUDACase {
	t.Helper()
	const pages, page, topK = 16, 128, 4
	g, pt, su := onePageRunGraph(t, pages, page)
	sched, err := DecodeSchedule(pt, su, Heads(16, 1), PageSize(page), PlanForCUDA(132))
	if err != nil {
		t.Fatal(err)
	}
	q, k, v := bf16T(1, 16, 128), bf16T(pages, 1, page, 128), bf16T(pages, 1, page, 128)
	var q2k *tensor.Dense
	var q2kNode *G.Node
	if sparse {
		q2k = i32T([]int{1, 1, topK}, 0, 3, 7, 15)
		q2kNode = gnode(t, g, "q2k", q2k)
	}
	node, err := DecodeAttention(gnode(t, g, "q", q), gnode(t, g, "k", k), gnode(t, g, "v", v), pt, su, sched, q2kNode)
	if err != nil {
		t.Fatal(err)
	}
	c := &decodeCUDACase{op: node.Op().(*decodeAttnOp), so: sched.Op().(*decodeSchedOp),
		pt: pt.Value().(*tensor.Dense), su: su.Value().(*tensor.Dense), out: bf16T(1, 16, 128)}
	sv := c.plan(t)
	c.in = []G.Value{q, k, v, c.pt, c.su, sv}
	if sparse {
		c.in = append(c.in, q2k)
	}
	return c
}

// plan runs the schedule node on the current seqused_k (once per step).
func (c *decodeCUDACase) plan(t *testing.T) *tensor.Dense {
	t.Helper()
	sv, err := c.so.Do(c.pt, c.su)
	if err != nil {
		t.Fatal(err)
	}
	if c.in != nil {
		c.in[5] = sv
	}
	return sv.(*tensor.Dense)
}

func (c *decodeCUDACase) register(f *fakeGPU) {
	for _, v := range c.in {
		f.register(v.(*tensor.Dense))
	}
}

// TestDecodeCUDARunAllocatesNothing: the decode node's CUDA path (CUDADo's
// body, past the context push that needs a driver) allocates nothing in a
// warm run, dense and sparse: the metadata is copied into host storage the
// node keeps and validated into the node, the schedule (planned once per
// step by its node) is not checked again in each layer's run, and the
// device buffers are kept. After the next step's plan (a new seqused_k and
// schedule value) the run allocates nothing either. The recorded launches
// check that the split-KV decode and its combine ran.
func TestDecodeCUDARunAllocatesNothing(t *testing.T) {
	for _, sparse := range []bool{false, true} {
		name := map[bool]string{false: "dense", true: "sparse"}[sparse]
		t.Run(name, func(t *testing.T) {
			c := newDecodeCUDACase(t, sparse)
			f := newFakeGPU(mcuda.ArchPortable)
			c.register(f)
			e := f.env()
			run := func() {
				if _, err := c.op.gpu(e, c.out, c.in); err != nil {
					t.Fatal(err)
				}
			}
			run()
			want := []string{fatbin.DecodeD128, fatbin.CombineD128}
			if got := f.k.LastKernels(); !slices.Equal(got, want) {
				t.Fatalf("launched %v, want %v", got, want)
			}
			if f.syncs != 1 || f.allocs == 0 {
				t.Fatalf("%d synchronizations and %d device allocations after one run, want 1 and > 0", f.syncs, f.allocs)
			}
			devAllocs, launches := f.allocs, f.drv.Launches
			if n := allocs.Warm(50, run); n != 0 {
				t.Errorf("warm run: %v allocations per run, want 0", n)
			}
			if d := f.drv.Launches - launches; f.allocs != devAllocs || d%(51*len(want)) != 0 || d == 0 {
				t.Errorf("warm runs: %d device allocations and %d launches, want 0 and 51 * %d per try", f.allocs-devAllocs, d, len(want))
			}
			// The next step: one token fewer (the request's pages stay), planned once.
			c.su.Data().([]int32)[0]--
			c.plan(t)
			c.register(f) // the schedule value is new storage
			if n := allocs.Warm(50, run); n != 0 {
				t.Errorf("run after the next step's plan: %v allocations per run, want 0", n)
			}
		})
	}
}

// TestDecodeCUDARefusals: the CUDA path refuses what the CPU path refuses,
// with the same errors: a schedule planned for another seqused_k (stale),
// a page id beyond k's pages, seqused_k beyond the page table's capacity;
// and CUDADo refuses a CPU-planned schedule before touching the GPU.
func TestDecodeCUDARefusals(t *testing.T) {
	for _, bad := range []struct {
		name string
		edit func(c *decodeCUDACase)
	}{
		{"stale schedule", func(c *decodeCUDACase) { c.su.Data().([]int32)[0] = 16 * 128 }},
		{"page beyond k", func(c *decodeCUDACase) { c.pt.Data().([]int32)[3] = 16 }},
		{"seqused beyond capacity", func(c *decodeCUDACase) { c.su.Data().([]int32)[0] = 16*128 + 1 }},
	} {
		t.Run(bad.name, func(t *testing.T) {
			c := newDecodeCUDACase(t, false)
			f := newFakeGPU(mcuda.ArchPortable)
			c.register(f)
			if _, err := c.op.gpu(f.env(), c.out, c.in); err != nil { // warm: the refusal must not come from a cache
				t.Fatal(err)
			}
			c.su.Data().([]int32)[0] = 10 * 128 // plan a shorter step
			c.plan(t)
			c.register(f)
			bad.edit(c)
			_, cpuErr := c.op.cpu(c.in)
			_, gpuErr := c.op.gpu(f.env(), c.out, c.in)
			wantSameRefusal(t, cpuErr, gpuErr)
		})
	}
	c := newDecodeCUDACase(t, false)
	g, pt, su := onePageRunGraph(t, 16, 128)
	cpuSched, err := DecodeSchedule(pt, su, Heads(16, 1), PageSize(128), Workers(8))
	if err != nil {
		t.Fatal(err)
	}
	cpuOp := decodeNodeOf(t, g, 16, 128, pt, su, cpuSched)
	_, err = cpuOp.CUDADo(nil, 0, c.out, c.in...)
	wantArgErr(t, err, "schedule", "one planned for the cpu path (DecodeSchedule without PlanForCUDA, 8 workers)")
}

// wantSameRefusal fails the test unless the CPU and CUDA paths both
// refused, with the same error.
func wantSameRefusal(t *testing.T, cpuErr, gpuErr error) {
	t.Helper()
	if cpuErr == nil || gpuErr == nil || cpuErr.Error() != gpuErr.Error() {
		t.Fatalf("CPU path: %v\nCUDA path: %v\nwant the same error", cpuErr, gpuErr)
	}
}
