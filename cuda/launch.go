//go:build cuda

package cuda

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/sparseattn/msa/kernels/cuda"
	"github.com/sparseattn/msa/kernels/plan"
)

// Kernels is the loaded fatbin module plus the device scratch buffers that
// carry parameter blocks and plan arrays to the kernels.
//
// Threading: every method runs its driver calls inside ctx.Do when ctx is
// non-nil (gorgonia's engine context, a *cu.Ctx, a *cu.BatchedContext), else
// directly on the calling goroutine, which must then be locked to an OS
// thread with a current CUDA context. All launches go to the legacy default
// stream; the synchronous host-to-device copies of the next call are ordered
// after the previous kernels, so the scratch buffers can be reused.
type Kernels struct {
	mod  cu.Module
	fns  map[string]cu.Function
	bufs map[string]*devBuf
}

type devBuf struct {
	ptr  cu.DevicePtr
	size int64
}

func run(ctx cu.Context, f func() error) error {
	if ctx == nil {
		return f()
	}
	return ctx.Do(f)
}

// Load loads the embedded fatbin (SASS for sm_80, sm_90a, sm_100a) and looks
// up every kernel.
func Load(ctx cu.Context) (*Kernels, error) {
	k := &Kernels{fns: map[string]cu.Function{}, bufs: map[string]*devBuf{}}
	err := run(ctx, func() error {
		mod, err := cu.LoadData(string(cudakernels.Fatbin))
		if err != nil {
			return fmt.Errorf("cuda: loading the kernel fatbin (needs sm_80, sm_90 or sm_100): %w", err)
		}
		k.mod = mod
		for _, name := range []string{cudakernels.SparseFwdD256, cudakernels.SparseFwdD128, cudakernels.SparseFwdD64,
			cudakernels.DecodeD256, cudakernels.DecodeD128, cudakernels.DecodeD64,
			cudakernels.CombineD256, cudakernels.CombineD128, cudakernels.CombineD64} {
			fn, err := mod.Function(name)
			if err != nil {
				return fmt.Errorf("cuda: kernel %s: %w", name, err)
			}
			k.fns[name] = fn
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

// Close frees the scratch buffers and unloads the module.
func (k *Kernels) Close(ctx cu.Context) error {
	return run(ctx, func() error {
		for _, b := range k.bufs {
			if err := cu.MemFree(b.ptr); err != nil {
				return err
			}
		}
		k.bufs = map[string]*devBuf{}
		return k.mod.Unload()
	})
}

// upload copies n bytes at src into the scratch buffer named role (grown as
// needed) and returns its device address.
func (k *Kernels) upload(role string, src unsafe.Pointer, n int64) (uint64, error) {
	b := k.bufs[role]
	need := max(n, 16)
	if b == nil || b.size < need {
		if b != nil {
			if err := cu.MemFree(b.ptr); err != nil {
				return 0, err
			}
			delete(k.bufs, role)
		}
		ptr, err := cu.MemAlloc(need)
		if err != nil {
			return 0, fmt.Errorf("cuda: allocating %d bytes for %s: %w", need, role, err)
		}
		b = &devBuf{ptr: ptr, size: need}
		k.bufs[role] = b
	}
	if n > 0 {
		if err := cu.MemcpyHtoD(b.ptr, src, n); err != nil {
			return 0, fmt.Errorf("cuda: uploading %s: %w", role, err)
		}
	}
	return uint64(b.ptr), nil
}

func (k *Kernels) uploadInt32(role string, v []int32) (uint64, error) {
	if len(v) == 0 {
		return k.upload(role, nil, 0)
	}
	return k.upload(role, unsafe.Pointer(&v[0]), int64(len(v))*4)
}

// launch starts fn on grid CTAs of Threads threads; its only argument is the
// device address of its parameter block.
func (k *Kernels) launch(name string, grid int, params uint64) error {
	fn, ok := k.fns[name]
	if !ok {
		return fmt.Errorf("cuda: kernel %s not loaded", name)
	}
	arg := params
	if err := fn.Launch(grid, 1, 1, Threads, 1, 1, 0, cu.NoStream, []unsafe.Pointer{unsafe.Pointer(&arg)}); err != nil {
		return fmt.Errorf("cuda: launching %s on %d CTAs: %w", name, grid, err)
	}
	return nil
}

// pick returns the kernel for head dim d (validated by the params builders).
func pick(d int, d256, d128, d64 string) string {
	switch d {
	case 64:
		return d64
	case 256:
		return d256
	}
	return d128
}

// SparseForward launches the sparse prefill partials (SPEC 4) of the work
// items of s (built from csr): O_partial / LSE_partial slices per slot.
func (k *Kernels) SparseForward(ctx cu.Context, a *FwdArgs, csr *plan.CSR, s *plan.FwdSchedule) error {
	return run(ctx, func() error {
		if csr == nil || s == nil {
			return fmt.Errorf("cuda: nil CSR or forward schedule")
		}
		var dev FwdPlanPtrs
		var err error
		if dev.RowPtr, err = k.uploadInt32("fwd.row_ptr", csr.RowPtr); err != nil {
			return err
		}
		if dev.QSplit, err = k.uploadInt32("fwd.qsplit", s.QSplit); err != nil {
			return err
		}
		if len(s.Metadata) < s.Capacity*plan.MetaFields {
			return fmt.Errorf("cuda: forward schedule metadata has %d entries: expected %d", len(s.Metadata), s.Capacity*plan.MetaFields)
		}
		if dev.Metadata, err = k.uploadInt32("fwd.metadata", s.Metadata[:s.Capacity*plan.MetaFields]); err != nil {
			return err
		}
		if dev.WorkCount, err = k.uploadInt32("fwd.work_count", []int32{s.WorkCount}); err != nil {
			return err
		}
		p, err := NewFwdKernelParams(a, csr, s, dev)
		if err != nil {
			return err
		}
		pp, err := k.upload("fwd.params", unsafe.Pointer(&p), int64(unsafe.Sizeof(p)))
		if err != nil {
			return err
		}
		if s.WorkCount == 0 {
			return nil
		}
		return k.launch(pick(a.D, cudakernels.SparseFwdD256, cudakernels.SparseFwdD128, cudakernels.SparseFwdD64), int(s.WorkCount), pp)
	})
}

// Combine merges the per-slot partials of a sparse forward into the BF16
// output and LSE (SPEC 5); s supplies SplitCounts.
func (k *Kernels) Combine(ctx cu.Context, a *CombineArgs, s *plan.FwdSchedule) error {
	return run(ctx, func() error {
		if s == nil || len(s.SplitCounts) != a.TotalQ*a.Hkv {
			return fmt.Errorf("cuda: combine: split_counts must have total_q*Hkv = %d entries", a.TotalQ*a.Hkv)
		}
		sc, err := k.uploadInt32("combine.split_counts", s.SplitCounts)
		if err != nil {
			return err
		}
		p, err := NewCombineKernelParams(a, sc)
		if err != nil {
			return err
		}
		pp, err := k.upload("combine.params", unsafe.Pointer(&p), int64(unsafe.Sizeof(p)))
		if err != nil {
			return err
		}
		rows := a.TotalQ * a.Hq
		if rows == 0 {
			return nil
		}
		return k.launch(pick(a.D, cudakernels.CombineD256, cudakernels.CombineD128, cudakernels.CombineD64), (rows+Threads/32-1)/(Threads/32), pp)
	})
}

// Decode launches the paged decode of s (SPEC 7) and, for a split-KV
// schedule, the combine of its float32 partials into a.Out / a.LSE. With
// a.Q2K != 0 it is sparse decode: each query row attends only the blocks of
// a.BlkKV tokens it selected (a.Q2K stays in device memory).
func (k *Kernels) Decode(ctx cu.Context, a *DecodeArgs, s *plan.DecodeSchedule) error {
	return run(ctx, func() error {
		if s == nil {
			return fmt.Errorf("cuda: nil decode schedule")
		}
		var dev DecodePlanPtrs
		var err error
		for _, u := range []struct {
			role string
			dst  *uint64
			v    []int32
		}{
			{"decode.request", &dev.Request, s.Request}, {"decode.qtile", &dev.QTileIdx, s.QTileIdx},
			{"decode.kvtile", &dev.KVTile, s.KVTile}, {"decode.kvhead", &dev.KVHead, s.KVHead},
			{"decode.valid", &dev.Valid, s.Valid}, {"decode.o_indptr", &dev.OIndptr, s.OIndptr},
			{"decode.split_counts", &dev.SplitCounts, s.SplitCounts},
		} {
			if *u.dst, err = k.uploadInt32(u.role, u.v); err != nil {
				return err
			}
		}
		p, c, err := NewDecodeKernelParams(a, s, dev)
		if err != nil {
			return err
		}
		pp, err := k.upload("decode.params", unsafe.Pointer(&p), int64(unsafe.Sizeof(p)))
		if err != nil {
			return err
		}
		if s.WorkCount > 0 {
			if err := k.launch(pick(a.D, cudakernels.DecodeD256, cudakernels.DecodeD128, cudakernels.DecodeD64), s.WorkCount, pp); err != nil {
				return err
			}
		}
		if !s.SplitKV {
			return nil
		}
		cp, err := k.upload("decode.combine_params", unsafe.Pointer(&c), int64(unsafe.Sizeof(c)))
		if err != nil {
			return err
		}
		rows := a.Batch * a.SeqlenQ * a.Hq
		if rows == 0 {
			return nil
		}
		return k.launch(pick(a.D, cudakernels.CombineD256, cudakernels.CombineD128, cudakernels.CombineD64), (rows+Threads/32-1)/(Threads/32), cp)
	})
}

// Synchronize waits for every launched kernel (cuCtxSynchronize).
func Synchronize(ctx cu.Context) error { return run(ctx, cu.Synchronize) }
