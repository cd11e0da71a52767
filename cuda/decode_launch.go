//go:build cuda

package cuda

import (
	"fmt"
	"unsafe"

	"github.com/sparseattn/msa/cuda/driver"
	"github.com/sparseattn/msa/kernels/cuda/fatbin"
	"github.com/sparseattn/msa/kernels/plan"
)

// decodeState is what Decode keeps between calls so that a call allocates
// nothing once the tensors and shapes it sees have been seen before (the
// plan/run contract: plan once per step, run per layer): the parameter
// blocks and launch steps live here instead of in per-call values, and the
// launch choice of each (tensors, shapes, dtypes) key - kernel names, the
// reason a kernel does not apply, the encoded tensor maps - is made once.
type decodeState struct {
	args    DecodeArgs // the arguments of the call in progress (a copy: the caller's may stay on its stack)
	sched   *plan.DecodeSchedule
	params  decodeKernelParams
	pipe    decodePipeKernelParams
	combine combineKernelParams
	steps   [2]step // the decode (or pipelined decode) and the combine
	choices launchCache[decodeKey, decodeChoice]
	fn      func() error // prepDecode + launchSteps of args and sched, made once
}

// decodeKey is everything the launch choice of a decode depends on besides
// the schedule: the family and switches, the operand addresses (tensor
// maps, alignment) and the shapes and dtypes.
type decodeKey struct {
	arch                                 Arch
	path                                 Path
	kernel                               DecodeKernel
	fp8pv                                FP8PV
	q, k, v                              uint64
	qdt, kvdt                            Dtype
	pv                                   Round
	d, hq, hkv, rows, page, pages, blkKV int // blkKV: sparse decode's block, -1 for dense
}

// decodeChoice is the launch choice of one decodeKey.
type decodeChoice struct {
	pipeName string // the pipelined kernel, or "" with pipeWhy saying why not
	pipe     fatbin.PipeLaunch
	pipeWhy  string
	pipeNote string // the FP8 P.V mode asked for a kernel that does not exist (Fallbacks)
	tcName   string // the tensor-core decode of the dtypes' variant ("" when none), for Fallbacks
	tc       TCPlan // valid when tcWhy == ""
	tcWhy    string
	maps     [3]driver.TensorMap // Q, K, V maps of tc, encoded
}

// decodeChoiceFor returns the launch choice of a, made on first sight.
func (k *Kernels) decodeChoiceFor(a *DecodeArgs) *decodeChoice {
	key := decodeKey{arch: k.arch, path: k.path, kernel: k.decode, fp8pv: k.fp8pv, q: a.Q, k: a.K, v: a.V, qdt: a.QDtype, kvdt: a.KVDtype,
		pv: a.PVRound, d: a.D, hq: a.Hq, hkv: a.Hkv, rows: a.Batch * a.SeqlenQ, page: a.PageSize, pages: a.NumPages, blkKV: -1}
	if a.Q2K != 0 {
		key.blkKV = a.BlkKV
	}
	ch, fresh := k.dec.choices.get(key)
	if !fresh {
		return ch
	}
	ch.pipeName, ch.pipe, ch.pipeNote, ch.pipeWhy = TCDecodePipePlan(k.arch, a, k.fp8pv)
	if v, ok := DecodeVariant(k.arch, a.QDtype, a.KVDtype); ok {
		ch.tcName = TCName(k.arch, "decode", v, a.D)
	}
	ch.tcWhy = "the portable path is selected"
	if k.path == PathAuto {
		ch.tc, ch.tcWhy = TCDecodePlan(k.arch, a, 0)
		ch.tcWhy = k.encodeMaps(&ch.tc, &ch.maps, ch.tcWhy)
	}
	return ch
}

// prepDecode uploads the decode schedule and parameter blocks and returns
// the decode launch and, for a split-KV schedule, its combine. The steps
// and the parameter blocks they point at are k.dec's: valid until the next
// call (a Prepared holding them is stale by then).
func (k *Kernels) prepDecode(a *DecodeArgs, s *plan.DecodeSchedule) ([]step, error) {
	if s == nil {
		return nil, fmt.Errorf("cuda: nil decode schedule")
	}
	// One call per array (a table of pointers into dev would move dev to
	// the heap on every call).
	var err error
	up := func(role string, v []int32) uint64 {
		var p uint64
		if err == nil {
			p, err = k.uploadInt32(role, v)
		}
		return p
	}
	dev := DecodePlanPtrs{Request: up("decode.request", s.Request), QTileIdx: up("decode.qtile", s.QTileIdx),
		KVTile: up("decode.kvtile", s.KVTile), KVHead: up("decode.kvhead", s.KVHead), Valid: up("decode.valid", s.Valid),
		OIndptr: up("decode.o_indptr", s.OIndptr), SplitCounts: up("decode.split_counts", s.SplitCounts)}
	if err != nil {
		return nil, err
	}
	d := &k.dec
	if d.params, d.combine, err = newDecodeKernelParams(a, s, dev); err != nil {
		return nil, err
	}
	ch := k.decodeChoiceFor(a)
	steps := d.steps[:0]
	if k.decode == DecodeNew && k.path == PathAuto && s.WorkCount > 0 {
		st, why, err := k.pipeStep(ch, s, dev.SplitCounts)
		if err != nil {
			return nil, err
		}
		if why == "" {
			if ch.pipeNote != "" {
				k.fallback["msa_sm90_decpipe_fp8pv"] = ch.pipeNote
			}
			return append(steps, st), nil // the combine is fused
		}
		k.fallback["msa_sm90_decpipe"] = why
	}
	fused := false // the decode kernel merges the splits itself: no combine launch
	if s.WorkCount > 0 {
		done := false
		if k.path == PathAuto && k.arch != ArchPortable {
			why := ch.tcWhy
			if why == "" {
				var kern tcKernel
				var smem int
				if kern, smem, why = k.tcKernel(ch.tc.Name, ch.tc.SmemBytes); why == "" {
					value := driver.Bytes(&d.params)
					if g, ok := sm100Table[ch.tc.Name]; ok && g.Algo == "decode" {
						// The SM100 decode takes MsaDecodePipeParams: with
						// counters (MSA_CUDA_DECODE=new, split KV) it fuses
						// the combine, without them msa_combine runs after it.
						var counters uint64
						if fused = k.decode == DecodeNew && s.SplitKV; fused {
							if counters, err = k.zeroed("decode.counters", int64(PipeCounters(s))*4); err != nil {
								return nil, err
							}
						}
						d.pipe = newDecodePipeParams(d.params, s, dev.SplitCounts, counters)
						value = driver.Bytes(&d.pipe)
					}
					steps = append(steps, step{name: ch.tc.Name, grid: s.WorkCount, tc: true, kern: kern, smem: smem,
						value: value, maps: ch.maps})
					done = true
				}
			}
			if ch.tcName != "" && !done {
				k.fallback[ch.tcName] = why
			}
		}
		if !done {
			pp, err := k.upload("decode.params", unsafe.Pointer(&d.params), int64(unsafe.Sizeof(d.params)))
			if err != nil {
				return nil, err
			}
			steps = append(steps, step{name: pick(a.D, fatbin.DecodeD256, fatbin.DecodeD128, fatbin.DecodeD64), grid: s.WorkCount, params: pp})
		}
	}
	rows := a.Batch * a.SeqlenQ * a.Hq
	if s.SplitKV && rows > 0 && !fused {
		cp, err := k.upload("decode.combine_params", unsafe.Pointer(&d.combine), int64(unsafe.Sizeof(d.combine)))
		if err != nil {
			return nil, err
		}
		steps = append(steps, step{name: pick(a.D, fatbin.CombineD256, fatbin.CombineD128, fatbin.CombineD64),
			grid: (rows + Threads/32 - 1) / (Threads / 32), params: cp})
	}
	return steps, nil
}

// pipeStep returns the launch of the pipelined decode of choice ch, or why
// it cannot run (the old kernels then run). It grows the fused combine's
// counters to the schedule's PipeCounters, zeroed when allocated: the
// kernel leaves them 0.
func (k *Kernels) pipeStep(ch *decodeChoice, s *plan.DecodeSchedule, splitCounts uint64) (step, string, error) {
	if ch.pipeWhy != "" {
		return step{}, ch.pipeWhy, nil
	}
	name, l := ch.pipeName, ch.pipe
	kern, found := k.tc[name]
	switch {
	case !found:
		return step{}, name + " is not in the fatbin", nil
	case kern.threads != l.Threads:
		return step{}, fmt.Sprintf("%s: launch table says %d threads, the kernel's launch bound %d", name, l.Threads, kern.threads), nil
	case l.DynSmem > k.smemOpt:
		return step{}, fmt.Sprintf("%s needs %d B of shared memory, the device allows %d", name, l.DynSmem, k.smemOpt), nil
	}
	if kern.smemSet < l.DynSmem {
		if err := kern.fn.SetAttribute(driver.FuncAttrMaxDynamicSharedBytes, l.DynSmem); err != nil {
			return step{}, err.Error(), nil
		}
		// All of the unified L1 / shared storage as shared memory, so that
		// two CTAs' rings fit on one SM.
		if err := kern.fn.SetAttribute(driver.FuncAttrPreferredSharedCarveout, 100); err != nil {
			return step{}, err.Error(), nil
		}
		kern.smemSet = l.DynSmem
		k.tc[name] = kern
	}
	var counters uint64
	if n := PipeCounters(s); n > 0 {
		var err error
		if counters, err = k.zeroed("decode.counters", int64(n)*4); err != nil {
			return step{}, "", err
		}
	}
	k.dec.pipe = newDecodePipeParams(k.dec.params, s, splitCounts, counters)
	return step{name: name, grid: s.WorkCount, tc: true, kern: kern, smem: l.DynSmem, value: driver.Bytes(&k.dec.pipe), nomaps: true}, "", nil
}

// zeroed returns the scratch buffer named role of at least n bytes; a buffer
// is zero-filled when it is allocated and otherwise left as the kernels left
// it (the fused combine's counters return to 0 at the end of every launch).
func (k *Kernels) zeroed(role string, n int64) (uint64, error) {
	if b := k.bufs[role]; b != nil && b.size >= n {
		return uint64(b.ptr), nil
	}
	if b := k.bufs[role]; b != nil {
		delete(k.bufs, role)
		if err := k.free(b.ptr); err != nil {
			return 0, err
		}
	}
	ptr, err := k.memAlloc(n)
	if err != nil {
		return 0, fmt.Errorf("cuda: allocating %d bytes for %s: %w", n, role, err)
	}
	k.bufs[role] = &devBuf{ptr: ptr, size: n}
	k.gen++ // a prepared launch holding the old buffer is stale
	if err := k.memset(ptr, 0, n); err != nil {
		return 0, fmt.Errorf("cuda: zeroing %s: %w", role, err)
	}
	return uint64(ptr), nil
}

// PrepareDecode uploads what Decode would and returns its launches.
func (k *Kernels) PrepareDecode(ctx Runner, a *DecodeArgs, s *plan.DecodeSchedule) (*Prepared, error) {
	if a == nil {
		return nil, fmt.Errorf("cuda: nil decode arguments")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.check(); err != nil {
		return nil, err
	}
	pl := newPrepared(k)
	err := run(ctx, func() error {
		steps, err := k.prepDecode(a, s)
		pl.steps = ownSteps(steps) // the steps and their parameter blocks are k.dec's
		return err
	})
	pl.gen = k.gen
	return pl, err
}

// Decode launches the paged decode of s and, for a split-KV schedule, the
// combine of its float32 partials into a.Out / a.LSE. With a.Q2K != 0 it is
// sparse decode: each query row attends only the blocks of a.BlkKV tokens
// it selected (a.Q2K stays in device memory). A call whose tensors and
// shapes an earlier call had allocates nothing.
func (k *Kernels) Decode(ctx Runner, a *DecodeArgs, s *plan.DecodeSchedule) error {
	if a == nil {
		return fmt.Errorf("cuda: nil decode arguments")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.check(); err != nil {
		return err
	}
	d := &k.dec
	d.args, d.sched = *a, s
	defer func() { d.sched = nil }()
	if d.fn == nil {
		d.fn = func() error {
			steps, err := k.prepDecode(&k.dec.args, k.dec.sched)
			if err != nil {
				return err
			}
			return k.launchSteps(steps)
		}
	}
	return run(ctx, d.fn)
}
