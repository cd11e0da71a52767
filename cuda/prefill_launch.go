//go:build cuda

package cuda

import (
	"fmt"
	"unsafe"

	"github.com/sparseattn/msa/cuda/driver"
	"github.com/sparseattn/msa/kernels/cuda/fatbin"
	"github.com/sparseattn/msa/kernels/plan"
)

// prefillState is what the sparse prefill keeps between calls so that a
// call allocates nothing once its key has been seen and its plan fits the
// storage of an earlier call (the plan/run contract, as decodeState for
// Decode): the windows, the uploaded plan arrays' host staging, the
// parameter blocks and the launch steps live here, and the launch choice
// of each key (kernel names, the reason a kernel does not apply, the
// encoded tensor maps) is made once.
type prefillState struct {
	// The call in progress (copies: the caller's may stay on its stack).
	fa     FwdArgs
	ca     CombineArgs
	hasCA  bool
	csr    *plan.CSR
	sched  *plan.FwdSchedule
	cuQ    []int32
	window int
	fn     func() error // prepPrefill + launchSteps of the call in progress, made once

	choices launchCache[prefillKey, prefillChoice]
	cut     windowStore // the query windows
	split   windowStore // the windows split for occupancy
	qp      qplanStore  // the query-major plan
	covered []int32     // the query-major plan's check
	auto    autoPart    // the auto path's partition

	meta     []int32 // every window's metadata, one upload
	offs     []int
	counts   []int32
	steps    []step
	fps      []fwdKernelParams     // portable forward blocks, one upload
	cps      []combineKernelParams // combine blocks, one upload
	fwdRefs  []paramRef
	combRefs []paramRef
	tcps     []fwdKernelParams  // tensor-core forward blocks (by value), one per window
	kv2ps    []fwd2KernelParams // kv2 blocks (by value), one per window
	qps      qfwdKernelParams   // the query-major block (by value)
}

// paramRef ties a step to its parameter block in an uploaded array.
type paramRef struct{ step, param int }

// prefillKey is everything a prefill's launch choice depends on besides
// the plan: the switches and the arguments (addresses, shapes, dtypes).
type prefillKey struct {
	arch    Arch
	path    Path
	prefill PrefillPath
	fp8pv   FP8PV
	fa      FwdArgs
	ca      CombineArgs
	combine bool
}

// prefillChoice is the launch choice of one prefillKey.
type prefillChoice struct {
	tcName string // the KV-major tensor-core kernel of the dtypes' variant ("" when none), for Fallbacks
	tc     TCPlan // valid when tcWhy == "" (its grid is set per window)
	tcWhy  string
	tcMaps [3]driver.TensorMap

	kv2, kv2Why, kv2Key string // KV2Plan's kernel or why not, and its Fallbacks key

	qName        string // the query-major kernel of the dtypes' variant ("" when none), for Fallbacks
	q            TCPlan // valid when qWhy == ""
	qWhy         string
	qTilesPerCTA int // tiles per CTA of q (0: one)
	qMaps        [3]driver.TensorMap
	fp8Key       string // the fp8 P.V kernel that is missing ("" when none), for Fallbacks
	fp8Why       string

	costs    plan.PathCosts // the auto path's model constants (autoCosts)
	costsWhy string         // why the auto path cannot weigh ("" when it can)
}

// prefillChoiceFor returns the launch choice of fa and ca (nil: a forward
// without its combine), made on first sight.
func (k *Kernels) prefillChoiceFor(fa *FwdArgs, ca *CombineArgs) *prefillChoice {
	key := prefillKey{arch: k.arch, path: k.path, prefill: k.prefill, fp8pv: k.fp8pv, fa: *fa}
	if ca != nil {
		key.ca, key.combine = *ca, true
	}
	ch, fresh := k.pre.choices.get(key)
	if !fresh {
		return ch
	}
	v, hasV := FwdVariant(fa.QDtype, fa.KVDtype)
	if hasV {
		ch.tcName = TCName(k.arch, "fwd", v, fa.D)
	}
	ch.tcWhy = "the portable path is selected"
	if k.path == PathAuto && k.arch != ArchPortable {
		ch.tc, ch.tcWhy = TCFwdPlan(k.arch, fa, 0)
		ch.tcWhy = k.encodeMaps(&ch.tc, &ch.tcMaps, ch.tcWhy)
	}
	if k.prefill.KV2() && k.path == PathAuto {
		ch.kv2, _, ch.kv2Why = KV2Plan(k.arch, fa, ca)
		ch.kv2Key = "kv2"
		if hasV {
			ch.kv2Key = KV2Name(v, fa.D)
		}
	}
	if k.prefill.Auto() {
		ch.costs, ch.costsWhy = autoCosts(k.devName, fa)
	}
	if qa, ok := k.prefill.queryArch(k.arch); ok && ca != nil {
		if hasV {
			ch.qName = QFwdName(qa, v, fa.D)
		}
		k.queryChoice(ch, fa, ca, qa)
	}
	return ch
}

// queryChoice makes the query-major part of ch: QFwdPlan's kernel for
// family qa (the sm80 one where the sm90 kernel's 16-byte stores of O do
// not apply), the fp8 P.V variant where selected, its tensor maps.
func (k *Kernels) queryChoice(ch *prefillChoice, fa *FwdArgs, ca *CombineArgs, qa Arch) {
	if k.path != PathAuto {
		ch.qWhy = "the portable path is selected (SetPath)"
		return
	}
	tp, why := QFwdPlan(qa, fa, 0)
	if why != "" {
		ch.qWhy = why
		return
	}
	if _, sm90 := fatbin.SM90QFwdTilesPerCTA[tp.Name]; (sm90 || QFwdTileRows(tp.Name) == SM100QTileRows) && !aligned(ca.Out, 16) {
		// the sm90 and SM100 kernels store O 16 bytes at a time; the sm80 one 4
		tp, _ = QFwdPlan(ArchSM80, fa, 0)
	}
	ch.qTilesPerCTA = fatbin.SM90QFwdTilesPerCTA[tp.Name]
	if name := qfwdKernelFor(tp.Name, k.fp8pv); name != tp.Name {
		// same grid, parameters and tensor maps; the launch table's geometry
		if _, ok := k.tc[name]; ok {
			tp.Name = name
		} else {
			ch.fp8Key, ch.fp8Why = name, "not in the fatbin ("+FP8PVEnv+"=fp8 runs the widened-V kernel)"
		}
	}
	ch.q = tp
	ch.qWhy = k.encodeMaps(&ch.q, &ch.qMaps, "")
}

// prepPrefill uploads everything the windows of a sparse prefill read and
// returns their launches: per window the forward (tensor-core or
// portable) and, with ca != nil, the combine of that window. The steps and
// the parameter blocks they hold are k.pre's: valid until the next call.
func (k *Kernels) prepPrefill(fa *FwdArgs, ca *CombineArgs, csr *plan.CSR, s *plan.FwdSchedule, cuQ []int32, window int) ([]step, error) {
	if csr == nil || s == nil {
		return nil, fmt.Errorf("cuda: nil CSR or forward schedule")
	}
	if len(s.Metadata) < s.Capacity*plan.MetaFields {
		return nil, fmt.Errorf("cuda: forward schedule metadata has %d entries: expected %d", len(s.Metadata), s.Capacity*plan.MetaFields)
	}
	ch := k.prefillChoiceFor(fa, ca)
	if k.prefill.Auto() && ca != nil && cuQ != nil {
		return k.prepAutoPrefill(ch, fa, ca, csr, s, cuQ, window)
	}
	if _, ok := k.prefill.queryArch(k.arch); ok && ca != nil && cuQ != nil {
		steps, why, err := k.prepQueryPrefill(ch, fa, ca, csr, s, cuQ)
		if err != nil || why == "" {
			return steps, err
		}
		if ch.qName != "" {
			k.fallback[ch.qName] = why
		}
	}
	return k.prepKVPrefill(ch, fa, ca, csr, s, cuQ, window)
}

// prepKVPrefill is prepPrefill's KV-major path: the windows' forwards
// (kv2, tensor-core or portable) and, with ca != nil, their combines.
func (k *Kernels) prepKVPrefill(ch *prefillChoice, fa *FwdArgs, ca *CombineArgs, csr *plan.CSR, s *plan.FwdSchedule, cuQ []int32, window int) ([]step, error) {
	d := &k.pre
	kv2, window, kv2Counters, kv2Sched, err := k.kv2Setup(ch, fa, window)
	if err != nil {
		return nil, err
	}
	var wins []FwdWindow
	if cuQ != nil {
		if wins, err = d.cut.cut(csr, s, cuQ, fa.TotalQ, window); err != nil {
			return nil, err
		}
	} else {
		d.cut.reset(1)
		wins = append(d.cut.wins, FwdWindow{Q0: 0, Q1: fa.TotalQ, Sched: s})
		d.cut.wins = wins
	}
	// Enough CTAs per window for the device: the tensor-core kernels take
	// an item's rows in tiles of 64 (128 on SM100), one CTA per item.
	tileRows := 64
	if k.arch == ArchSM100 {
		tileRows = 128
	}
	if fa.Hkv > 0 {
		wins = d.split.split(wins, fa.Hq/fa.Hkv, tileRows, k.waves*k.sms)
	}
	d.meta, d.offs, d.counts = d.meta[:0], d.offs[:0], d.counts[:0]
	for _, w := range wins {
		d.offs = append(d.offs, len(d.meta))
		d.meta = append(d.meta, w.Sched.Metadata[:w.Sched.Capacity*plan.MetaFields]...)
		d.counts = append(d.counts, w.Sched.WorkCount)
	}
	if ca != nil && len(s.SplitCounts) != ca.TotalQ*ca.Hkv {
		return nil, fmt.Errorf("cuda: combine: split_counts must have total_q*Hkv = %d entries", ca.TotalQ*ca.Hkv)
	}
	up := func(role string, v []int32) uint64 {
		var p uint64
		if err == nil {
			p, err = k.uploadInt32(role, v)
		}
		return p
	}
	rowPtr, qsplit := up("fwd.row_ptr", csr.RowPtr), up("fwd.qsplit", s.QSplit)
	metaPtr, countPtr := up("fwd.metadata", d.meta), up("fwd.work_count", d.counts)
	var sc uint64
	if ca != nil {
		sc = up("combine.split_counts", s.SplitCounts)
	}
	if err != nil {
		return nil, err
	}
	// The by-value blocks are sized before the steps point into them.
	d.tcps, d.kv2ps = sized(d.tcps, len(wins)), sized(d.kv2ps, len(wins))
	steps := d.steps[:0]
	d.fps, d.cps, d.fwdRefs, d.combRefs = d.fps[:0], d.cps[:0], d.fwdRefs[:0], d.combRefs[:0]
	psz := uint64(partialSize(fa.PartialDtype))
	for i, w := range wins {
		dev := FwdPlanPtrs{RowPtr: rowPtr, QSplit: qsplit, Metadata: metaPtr + 4*uint64(d.offs[i]), WorkCount: countPtr + 4*uint64(i)}
		p, err := newFwdKernelParams(fa, csr, w.Sched, dev)
		if err != nil {
			return nil, err
		}
		// The window's partial row (slot*n + q - Q0): base shifted by -Q0 rows.
		n := w.Q1 - w.Q0
		shift := uint64(w.Q0) * uint64(fa.Hq)
		p.TotalQ = int32(n)
		p.OPartial -= shift * uint64(fa.D) * psz
		p.LSEPartial -= shift * 4
		if p.TLSEPartial != 0 {
			p.TLSEPartial -= shift * 4
		}
		if kv2 {
			// The fused combine merges every row of the window: no combine launch.
			d.kv2ps[i] = newFwd2Params(p, ca, sc, kv2Counters, kv2Sched, w.Q0)
			st, why := k.kv2Step(ch, driver.Bytes(&d.kv2ps[i]), int(w.Sched.WorkCount))
			if why == "" {
				steps = append(steps, st)
				continue
			}
			k.fallback[ch.kv2] = why
		}
		if w.Sched.WorkCount > 0 {
			done := false
			if k.path == PathAuto && k.arch != ArchPortable {
				why := ch.tcWhy
				if why == "" {
					d.tcps[i] = p
					var st step
					if st, why = k.tcLaunch(&ch.tc, int(w.Sched.WorkCount), driver.Bytes(&d.tcps[i]), &ch.tcMaps); why == "" {
						steps = append(steps, st)
						done = true
					}
				}
				if ch.tcName != "" && !done {
					k.fallback[ch.tcName] = why
				}
			}
			if !done {
				d.fwdRefs = append(d.fwdRefs, paramRef{len(steps), len(d.fps)})
				d.fps = append(d.fps, p)
				steps = append(steps, step{name: pick(fa.D, fatbin.SparseFwdD256, fatbin.SparseFwdD128, fatbin.SparseFwdD64), grid: int(w.Sched.WorkCount)})
			}
		}
		if ca == nil || n == 0 || ca.Hq == 0 {
			continue
		}
		c, err := newCombineKernelParams(ca, sc)
		if err != nil {
			return nil, err
		}
		rows := uint64(w.Q0) * uint64(ca.Hq)
		c.TotalQ = int32(n)
		c.SplitCounts += uint64(w.Q0) * uint64(ca.Hkv) * 4
		c.Out += rows * uint64(ca.D) * 2
		c.LSE += rows * 4
		if c.TLSE != 0 {
			c.TLSE += rows * 4
		}
		d.combRefs = append(d.combRefs, paramRef{len(steps), len(d.cps)})
		d.cps = append(d.cps, c)
		steps = append(steps, step{name: pick(ca.D, fatbin.CombineD256, fatbin.CombineD128, fatbin.CombineD64), grid: (n*ca.Hq + Threads/32 - 1) / (Threads / 32)})
	}
	d.steps = steps
	if err := uploadParams(k, "fwd.params", d.fps, steps, d.fwdRefs); err != nil {
		return nil, err
	}
	if err := uploadParams(k, "combine.params", d.cps, steps, d.combRefs); err != nil {
		return nil, err
	}
	return steps, nil
}

// uploadParams uploads the parameter blocks ps of one type as one array
// and points each referenced step at its block.
func uploadParams[T any](k *Kernels, role string, ps []T, steps []step, refs []paramRef) error {
	if len(ps) == 0 {
		return nil
	}
	size := uint64(unsafe.Sizeof(ps[0]))
	base, err := k.upload(role, unsafe.Pointer(&ps[0]), int64(size)*int64(len(ps)))
	if err != nil {
		return err
	}
	for _, r := range refs {
		steps[r.step].params = base + uint64(r.param)*size
	}
	return nil
}

// startPrefill records the call in k.pre and runs it: the forward (and
// with ca != nil the combine) of every window, launched after every upload.
func (k *Kernels) startPrefill(ctx Runner, fa *FwdArgs, ca *CombineArgs, csr *plan.CSR, s *plan.FwdSchedule, cuQ []int32, window int) error {
	d := &k.pre
	d.fa, d.hasCA, d.csr, d.sched, d.cuQ, d.window = *fa, ca != nil, csr, s, cuQ, window
	if ca != nil {
		d.ca = *ca
	}
	defer func() { d.csr, d.sched, d.cuQ = nil, nil, nil }()
	if d.fn == nil {
		d.fn = func() error {
			d := &k.pre
			var ca *CombineArgs
			if d.hasCA {
				ca = &d.ca
			}
			steps, err := k.prepPrefill(&d.fa, ca, d.csr, d.sched, d.cuQ, d.window)
			if err != nil {
				return err
			}
			return k.launchSteps(steps)
		}
	}
	return run(ctx, d.fn)
}

// SparseForward launches the sparse prefill partials of the work items of
// s (built from csr), the partial buffers holding all a.TotalQ queries.
// SparsePrefill is the windowed forward + combine that bounds the partials.
func (k *Kernels) SparseForward(ctx Runner, a *FwdArgs, csr *plan.CSR, s *plan.FwdSchedule) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.check(); err != nil {
		return err
	}
	return k.startPrefill(ctx, a, nil, csr, s, nil, a.TotalQ)
}

// Combine merges the per-slot partials of a sparse forward (all a.TotalQ
// queries) into the BF16 output and LSE; s supplies SplitCounts.
func (k *Kernels) Combine(ctx Runner, a *CombineArgs, s *plan.FwdSchedule) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.check(); err != nil {
		return err
	}
	return run(ctx, func() error {
		if s == nil || len(s.SplitCounts) != a.TotalQ*a.Hkv {
			return fmt.Errorf("cuda: combine: split_counts must have total_q*Hkv = %d entries", a.TotalQ*a.Hkv)
		}
		sc, err := k.uploadInt32("combine.split_counts", s.SplitCounts)
		if err != nil {
			return err
		}
		p, err := newCombineKernelParams(a, sc)
		if err != nil {
			return err
		}
		k.last = k.last[:0]
		rows := a.TotalQ * a.Hq
		if rows == 0 {
			return nil
		}
		pp, err := k.upload("combine.params", unsafe.Pointer(&p), int64(unsafe.Sizeof(p)))
		if err != nil {
			return err
		}
		return k.launchSteps([]step{{name: pick(a.D, fatbin.CombineD256, fatbin.CombineD128, fatbin.CombineD64),
			grid: (rows + Threads/32 - 1) / (Threads / 32), params: pp}})
	})
}

func checkPrefillArgs(fa *FwdArgs, ca *CombineArgs, s *plan.FwdSchedule, cuQ []int32) error {
	if fa.TotalQ != ca.TotalQ || fa.OPartial != ca.OPartial || fa.LSEPartial != ca.LSEPartial || fa.TLSEPartial != ca.TLSEPartial {
		return fmt.Errorf("cuda: SparsePrefill: forward and combine arguments disagree on total_q or the partial buffers")
	}
	if s == nil || len(s.SplitCounts) != ca.TotalQ*ca.Hkv {
		return fmt.Errorf("cuda: combine: split_counts must have total_q*Hkv = %d entries", ca.TotalQ*ca.Hkv)
	}
	if len(cuQ) != fa.NumBatch+1 || int(cuQ[len(cuQ)-1]) != fa.TotalQ {
		return fmt.Errorf("cuda: SparsePrefill: cu_seqlens_q has %d entries: expected batch+1 = %d, ending at total_q = %d", len(cuQ), fa.NumBatch+1, fa.TotalQ)
	}
	return nil
}

// PrepareSparsePrefill uploads what SparsePrefill would and returns its
// launches without running them (to time the kernels alone).
func (k *Kernels) PrepareSparsePrefill(ctx Runner, fa *FwdArgs, ca *CombineArgs, csr *plan.CSR, s *plan.FwdSchedule, cuQ []int32, window int) (*Prepared, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.check(); err != nil {
		return nil, err
	}
	if err := checkPrefillArgs(fa, ca, s, cuQ); err != nil {
		return nil, err
	}
	pl := newPrepared(k)
	err := run(ctx, func() error {
		steps, err := k.prepPrefill(fa, ca, csr, s, cuQ, window)
		pl.steps = ownSteps(steps) // the steps and their parameter blocks are k.pre's
		return err
	})
	pl.gen = k.gen
	return pl, err
}

// SparsePrefill runs the sparse prefill and its combine in query windows of
// window queries (WindowQueries gives the CPU path's choice), so that the
// partial buffers of fa (and ca's partial pointers, which must be the same)
// need to hold one window only: PartialBytes(window, ...). cuQ is the host
// copy of cu_seqlens_q. Every upload happens before the first launch; the
// partials of a window are written, combined into ca.Out / ca.LSE /
// ca.TLSE at the window's rows, then reused by the next window. A call
// whose arguments an earlier call had, with a plan no larger than that
// call's, allocates nothing.
func (k *Kernels) SparsePrefill(ctx Runner, fa *FwdArgs, ca *CombineArgs, csr *plan.CSR, s *plan.FwdSchedule, cuQ []int32, window int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.check(); err != nil {
		return err
	}
	if err := checkPrefillArgs(fa, ca, s, cuQ); err != nil {
		return err
	}
	return k.startPrefill(ctx, fa, ca, csr, s, cuQ, window)
}
