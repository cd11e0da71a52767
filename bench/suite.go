package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/sparseattn/msa/internal/workload"
	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/tile"
	"github.com/sparseattn/msa/op"
	"gorgonia.org/tensor"
)

// caseSpec is one benchmark case.
type caseSpec struct {
	Name  string
	Kind  string // "prefill", "nvfp4" or "decode"
	DType string // prefill: Q/K/V dtype; nvfp4: Q dtype; decode: Q/K/V dtype ("bf16" or "fp8")
	// SeqLen is the prefill length (one causal sequence, total_q = total_k)
	// or the decode context (seqused_k of every request).
	SeqLen int
	Batch  int // decode requests (1 for prefill)
	HQ     int
	HKV    int
	D      int
	TopK   int // prefill only
	Blk    int // prefill blk_kv
	// Select is the prefill selection pattern: "random" (causalQ2K) or
	// "correlated" (correlatedQ2K).
	Select string
	Page   int // decode page size
}

// buildSuite returns the cases selected by the flags.
func buildSuite(cfg *config) []caseSpec {
	hq, hkv, d := 16, 1, 128
	lens := []int{2048, 4096, 8192, 16384, 32768}
	nvLen := 8192
	batches := []int{8, 32}
	contexts := []int{4096, 16384, 65536}
	if cfg.quick {
		lens = []int{2048, 4096}
		nvLen = 2048
		batches = []int{8}
		contexts = []int{4096}
	}
	if cfg.tiny {
		lens = []int{512}
		nvLen = 384
		batches = []int{2}
		contexts = []int{1000}
	}
	if len(cfg.shapes) > 0 {
		lens = cfg.shapes
	}
	if cfg.nvfp4Len > 0 {
		nvLen = cfg.nvfp4Len
	}
	if len(cfg.contexts) > 0 {
		contexts = cfg.contexts
	}
	if len(cfg.batches) > 0 {
		batches = cfg.batches
	}
	prefDT := "bf16"
	decDTs := []string{"fp8", "bf16"}
	if cfg.dtype != "" {
		prefDT = cfg.dtype
		decDTs = []string{cfg.dtype}
	}
	var cs []caseSpec
	for _, sel := range cfg.selects {
		suffix := ""
		if sel == "correlated" {
			suffix = "-corr"
		}
		if cfg.cases["prefill"] {
			for _, t := range lens {
				cs = append(cs, caseSpec{Name: fmt.Sprintf("prefill-%s-%s%s", prefDT, kLabel(t), suffix), Kind: "prefill", DType: prefDT,
					SeqLen: t, Batch: 1, HQ: hq, HKV: hkv, D: d, TopK: cfg.topK, Blk: 128, Select: sel})
			}
		}
		if cfg.cases["nvfp4"] {
			cs = append(cs, caseSpec{Name: fmt.Sprintf("nvfp4kv-%sq-%s%s", prefDT, kLabel(nvLen), suffix), Kind: "nvfp4", DType: prefDT,
				SeqLen: nvLen, Batch: 1, HQ: hq, HKV: hkv, D: d, TopK: cfg.topK, Blk: 128, Select: sel})
		}
	}
	if cfg.cases["decode"] {
		for _, dt := range decDTs {
			for _, b := range batches {
				for _, t := range contexts {
					cs = append(cs, caseSpec{Name: fmt.Sprintf("decode-%s-b%d-%s", dt, b, kLabel(t)), Kind: "decode", DType: dt,
						SeqLen: t, Batch: b, HQ: hq, HKV: hkv, D: d, Page: cfg.page})
				}
			}
		}
	}
	return cs
}

func kLabel(n int) string {
	if n%1024 == 0 {
		return fmt.Sprintf("%dk", n/1024)
	}
	return fmt.Sprint(n)
}

// kvBytes is the size of the K and V tensors of a case.
func (c caseSpec) kvBytes() float64 {
	if c.Kind == "decode" {
		pages := c.Batch * ((c.SeqLen + c.Page - 1) / c.Page)
		return 2 * float64(pages*c.HKV*c.Page*c.D) * elemBytes(c.DType)
	}
	if c.Kind == "nvfp4" {
		return 2 * float64(c.SeqLen*c.HKV*c.D) * (0.5 + 1.0/16)
	}
	return 2 * float64(c.SeqLen*c.HKV*c.D) * elemBytes(c.DType)
}

func elemBytes(dt string) float64 {
	if dt == "fp8" {
		return 1
	}
	return 2
}

// timeIt runs f once to warm up, then at least minReps times and until
// minTime has passed (at most maxReps), and returns the median and the
// fastest run. after, when set, gets every timed call's duration.
func timeIt(minTime time.Duration, minReps, maxReps int, f func() error, after func(rep time.Duration)) (med, best time.Duration, reps int, err error) {
	if err = f(); err != nil {
		return
	}
	var ts []time.Duration
	start := time.Now()
	for len(ts) < minReps || (time.Since(start) < minTime && len(ts) < maxReps) {
		t0 := time.Now()
		if err = f(); err != nil {
			return
		}
		ts = append(ts, time.Since(t0))
		if after != nil {
			after(ts[len(ts)-1]) // not timed, but counts towards minTime
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	return ts[len(ts)/2], ts[0], len(ts), nil
}

func fillQ(dt string, n int, seed uint64, workers int) (any, rowSource) {
	tables()
	if dt == "fp8" {
		s := make([]lowp.Float8E4M3FN, n)
		fillTable(s, fp8Table, seed, workers)
		return s, fp8Rows(s)
	}
	s := make([]lowp.BFloat16, n)
	fillTable(s, bf16Table, seed, workers)
	return s, bf16Rows(s)
}

// ---- Sparse prefill (BF16/FP8 and NVFP4 K/V).

type prefillProb struct {
	cs                     caseSpec
	q, k, v                *tensor.Dense
	kScale, vScale         *tensor.Dense
	kGlobal, vGlobal       *tensor.Dense
	qRows, kRows, vRows    rowSource
	q2k                    []int32
	cuQ, cuK, rowPtr, qIdx *tensor.Dense
	sched                  *op.Schedule
	pairs                  int64 // visible (query, key) pairs summed over KV heads
	planTime               time.Duration
	// out and lse receive every call's output (SparseArgs.Out, OutLSE):
	// allocated once per case, as a model reuses its activations, so that
	// the timed calls do not fault in a fresh output each (128 MiB at 32K).
	out, lse *tensor.Dense
}

// Global scales of the NVFP4 case (powers of two, so the decoded values
// stay exact in bf16).
const nvK, nvV = 0.5, 2.0

func buildPrefill(cfg *config, c caseSpec) (*prefillProb, error) {
	T, hq, hkv, d := c.SeqLen, c.HQ, c.HKV, c.D
	p := &prefillProb{cs: c}
	seed := workload.Seed(T)
	corr := c.Select == "correlated"
	// fill returns n values of the case's dtype for rows of width values
	// (correlated: neighbouring rows correlated, see workload.CorrelatedRows).
	fill := func(n, width int, s uint64) (any, rowSource) {
		if corr {
			return storeRows(c.DType, workload.CorrelatedRows(n/width, width, s))
		}
		return fillQ(c.DType, n, s, cfg.workers)
	}
	qdata, qr := fill(T*hq*d, hq*d, seed)
	p.q = tensor.New(tensor.WithShape(T, hq, d), tensor.WithBacking(qdata))
	p.qRows = qr
	var kScore *tensor.Dense // the K that BlockScores rates (correlated)
	if c.Kind == "nvfp4" {
		rows := T * hkv
		quant := func(g float32, s uint64) (*tensor.Dense, *tensor.Dense, rowSource, error) {
			x := normals(rows*d, s)
			if corr && s == seed+1 {
				x = workload.CorrelatedRows(T, hkv*d, s)
				kScore = tensor.New(tensor.WithShape(T, hkv, d), tensor.WithBacking(x))
			}
			packed, scales, err := lowp.QuantizeNVFP4(x, rows, d, g)
			if err != nil {
				return nil, nil, nil, err
			}
			pr, pc := lowp.Scale128x4Shape(rows, d/16)
			return tensor.New(tensor.WithShape(T, hkv, d/2), tensor.WithBacking(packed)),
				tensor.New(tensor.WithShape(pr, pc), tensor.WithBacking(scales)),
				nvfp4Rows{packed: packed, scales: scales, global: float64(g)}, nil
		}
		var err error
		if p.k, p.kScale, p.kRows, err = quant(nvK, seed+1); err != nil {
			return nil, err
		}
		if p.v, p.vScale, p.vRows, err = quant(nvV, seed+2); err != nil {
			return nil, err
		}
		p.kGlobal = tensor.New(tensor.WithShape(1), tensor.WithBacking([]float32{nvK}))
		p.vGlobal = tensor.New(tensor.WithShape(1), tensor.WithBacking([]float32{nvV}))
	} else {
		kd, kr := fill(T*hkv*d, hkv*d, seed+1)
		vd, vr := fillQ(c.DType, T*hkv*d, seed+2, cfg.workers)
		p.k = tensor.New(tensor.WithShape(T, hkv, d), tensor.WithBacking(kd))
		p.v = tensor.New(tensor.WithShape(T, hkv, d), tensor.WithBacking(vd))
		p.kRows, p.vRows = kr, vr
		kScore = p.k
	}
	p.cuQ = tensor.New(tensor.WithShape(2), tensor.WithBacking([]int32{0, int32(T)}))
	p.cuK = tensor.New(tensor.WithShape(2), tensor.WithBacking([]int32{0, int32(T)}))
	if corr {
		var err error
		if p.q2k, p.pairs, err = correlatedQ2K(cfg, c, p.q, kScore, p.cuQ, p.cuK); err != nil {
			return nil, err
		}
	} else {
		var err error
		if p.q2k, p.pairs, err = causalQ2K(T, hkv, c.TopK, c.Blk, seed+3); err != nil {
			return nil, err
		}
	}

	t0 := time.Now()
	q2k := tensor.New(tensor.WithShape(hkv, T, c.TopK), tensor.WithBacking(p.q2k))
	var err error
	p.rowPtr, p.qIdx, err = op.K2QCSRFunc(q2k, p.cuQ, p.cuK, c.Blk)
	if err != nil {
		return nil, err
	}
	p.sched, err = op.FwdScheduleFunc(p.rowPtr, p.qIdx, op.ScheduleArgs{
		CuSeqlensQ: p.cuQ, CuSeqlensK: p.cuK, TotalQ: T, TopK: c.TopK, QheadPerKV: hq / hkv, BlkKV: c.Blk, Workers: cfg.workers})
	if err != nil {
		return nil, err
	}
	p.planTime = time.Since(t0)
	return p, nil
}

// unionTileRows is the query-head rows of the tile whose union of
// selected blocks a prefill case reports: the GPU query-major kernel's
// tile (cuda.QTileRows), so that the figure is the one the GPU check's
// timing rows report for the same selection.
const unionTileRows = 64

// causalQ2K is the bench's random selection (workload.RandomQ2K: the
// diagonal block and uniformly random visible ones), which the GPU
// check's random timing rows time too.
var causalQ2K = workload.RandomQ2K

// tileUnion is the mean union of the blocks the tokens of one query tile
// of unionTileRows rows selected (workload.MeanTileUnion).
func (p *prefillProb) tileUnion() (float64, error) {
	c := p.cs
	return workload.MeanTileUnion(p.q2k, []int32{0, int32(c.SeqLen)}, c.HKV, c.TopK, max(1, unionTileRows/(c.HQ/c.HKV)))
}

func (p *prefillProb) run(cfg *config) (*op.Result, error) {
	c := p.cs
	if p.out == nil {
		p.out = tensor.New(tensor.WithShape(c.SeqLen, c.HQ, c.D), tensor.Of(op.BFloat16))
		p.lse = tensor.New(tensor.WithShape(c.SeqLen, c.HQ), tensor.Of(tensor.Float32))
	}
	args := op.SparseArgs{CuSeqlensQ: p.cuQ, CuSeqlensK: p.cuK, BlkKV: c.Blk, Causal: true, Schedule: p.sched, Workers: cfg.workers,
		Out: p.out, OutLSE: p.lse}
	if c.Kind == "nvfp4" {
		return op.SparseAttentionNVFP4KVFunc(p.q, p.k, p.v, p.kScale, p.vScale, p.kGlobal, p.vGlobal, p.rowPtr, p.qIdx, c.TopK, args)
	}
	return op.SparseAttentionFunc(p.q, p.k, p.v, p.rowPtr, p.qIdx, c.TopK, args)
}

// sampleRows returns up to n distinct indices in [0, total): the first,
// the last, the first of the second block and random others, sorted.
func sampleRows(total, n int, blk int, seed uint64) []int {
	if n >= total {
		s := make([]int, total)
		for i := range s {
			s[i] = i
		}
		return s
	}
	set := map[int]bool{0: true, total - 1: true}
	if blk < total {
		set[blk] = true
	}
	r := rand.New(rand.NewPCG(seed, 5))
	for len(set) < n {
		set[r.IntN(total)] = true
	}
	s := make([]int, 0, len(set))
	for x := range set {
		s = append(s, x)
	}
	sort.Ints(s)
	return s
}

// verifyPrefill checks sampled query rows (all heads) of out against the
// float64 reference: each query attends the keys of its selected blocks
// that are <= its position.
func (p *prefillProb) verify(cfg *config, out []lowp.BFloat16) (string, string) {
	c := p.cs
	T, hq, hkv, d := c.SeqLen, c.HQ, c.HKV, c.D
	qpk := hq / hkv
	pvFP8 := c.DType == "fp8"
	ck := &checker{tol: makeTolerance(true, pvFP8, caseBF16(c))}
	scale := 1 / math.Sqrt(float64(d))
	got := make([]float32, d)
	for _, qi := range sampleRows(T, cfg.verifyRows, c.Blk, uint64(T)) {
		for h := 0; h < hkv; h++ {
			var keys, vals [][]float64
			for _, j := range p.q2k[(h*T+qi)*c.TopK : (h*T+qi+1)*c.TopK] {
				if j < 0 {
					continue
				}
				for t := int(j) * c.Blk; t < min((int(j)+1)*c.Blk, qi+1, T); t++ {
					keys = append(keys, p.kRows.row(t*hkv+h, d))
					vals = append(vals, p.vRows.row(t*hkv+h, d))
				}
			}
			maxV := maxAbs(vals)
			for g := 0; g < qpk; g++ {
				head := h*qpk + g
				want := refAttention(p.qRows.row(qi*hq+head, d), keys, vals, scale)
				base := (qi*hq + head) * d
				for i := range got {
					got[i] = out[base+i].Float32()
				}
				ck.row(fmt.Sprintf("O[q=%d, h=%d]", qi, head), got, want, maxV)
			}
		}
	}
	return ck.verdict()
}

// ---- Paged decode.

type decodeProb struct {
	cs                  caseSpec
	q, k, v, pt, su     *tensor.Dense
	qRows, kRows, vRows rowSource
	ptv                 []int32
	cols                int
}

func buildDecode(cfg *config, c caseSpec) *decodeProb {
	B, T, hq, hkv, d, ps := c.Batch, c.SeqLen, c.HQ, c.HKV, c.D, c.Page
	p := &decodeProb{cs: c}
	p.cols = (T + ps - 1) / ps
	numPages := B * p.cols
	seed := uint64(B)*1000003 + uint64(T)
	r := rand.New(rand.NewPCG(seed, 9))
	perm := r.Perm(numPages)
	p.ptv = make([]int32, numPages)
	for i := range p.ptv {
		p.ptv[i] = int32(perm[i])
	}
	su := make([]int32, B)
	for b := range su {
		su[b] = int32(T)
	}
	qd, qr := fillQ(c.DType, B*hq*d, seed, cfg.workers)
	kd, kr := fillQ(c.DType, numPages*hkv*ps*d, seed+1, cfg.workers)
	vd, vr := fillQ(c.DType, numPages*hkv*ps*d, seed+2, cfg.workers)
	p.q = tensor.New(tensor.WithShape(B, hq, d), tensor.WithBacking(qd))
	p.k = tensor.New(tensor.WithShape(numPages, hkv, ps, d), tensor.WithBacking(kd))
	p.v = tensor.New(tensor.WithShape(numPages, hkv, ps, d), tensor.WithBacking(vd))
	p.qRows, p.kRows, p.vRows = qr, kr, vr
	p.pt = tensor.New(tensor.WithShape(B, p.cols), tensor.WithBacking(p.ptv))
	p.su = tensor.New(tensor.WithShape(B), tensor.WithBacking(su))
	return p
}

// kvRow is the stored row of token t of request b, KV head h.
func (p *decodeProb) kvRow(b, h, t int) int {
	ps := p.cs.Page
	return (int(p.ptv[b*p.cols+t/ps])*p.cs.HKV+h)*ps + t%ps
}

func (p *decodeProb) verify(cfg *config, out []lowp.BFloat16) (string, string) {
	c := p.cs
	hq, hkv, d := c.HQ, c.HKV, c.D
	qpk := hq / hkv
	ck := &checker{tol: makeTolerance(false, c.DType == "fp8", caseBF16(c))}
	scale := 1 / math.Sqrt(float64(d))
	got := make([]float32, d)
	reqs := sampleRows(c.Batch, max(1, cfg.verifyRows/16), c.Batch, uint64(c.SeqLen))
	for _, b := range reqs {
		for h := 0; h < hkv; h++ {
			keys := make([][]float64, c.SeqLen)
			vals := make([][]float64, c.SeqLen)
			for t := range keys {
				r := p.kvRow(b, h, t)
				keys[t], vals[t] = p.kRows.row(r, d), p.vRows.row(r, d)
			}
			maxV := maxAbs(vals)
			for g := 0; g < qpk; g++ {
				head := h*qpk + g
				want := refAttention(p.qRows.row(b*hq+head, d), keys, vals, scale)
				for i := range got {
					got[i] = out[(b*hq+head)*d+i].Float32()
				}
				ck.row(fmt.Sprintf("O[b=%d, h=%d]", b, head), got, want, maxV)
			}
		}
	}
	return ck.verdict()
}

// runCase builds, plans, times and (with -verify) checks one case, filling
// in the measured fields of r. The dense baseline is measured by the caller.
func runCase(cfg *config, c caseSpec, r *result, prog *progress) error {
	switch c.Kind {
	case "prefill", "nvfp4":
		prog.phase(c.Name, "generate")
		p, err := buildPrefill(cfg, c)
		if err != nil {
			return err
		}
		r.planMS = ms(p.planTime)
		r.pairs = p.pairs
		r.flops = 4 * float64(c.D) * float64(c.HQ/c.HKV) * float64(p.pairs)
		r.bytes = float64(c.SeqLen*c.HQ*c.D)*elemBytes(c.DType) + c.kvBytes()
		prog.phase(c.Name, "sparse")
		var last *op.Result
		kv0, q0 := attn.PrefillRuns(attn.PathKV), attn.PrefillRuns(attn.PathQuery)
		err = timeOp(cfg, c, r, 200, false, func() error {
			last = nil // let the previous output be collected
			var err error
			last, err = p.run(cfg)
			return err
		})
		if err != nil {
			return err
		}
		r.path = ranPaths(attn.PrefillRuns(attn.PathKV)-kv0, attn.PrefillRuns(attn.PathQuery)-q0)
		if r.union, err = p.tileUnion(); err != nil {
			return err
		}
		if cfg.verify {
			prog.phase(c.Name, "verify")
			r.verify, r.verifyDetail = p.verify(cfg, last.Out.Data().([]lowp.BFloat16))
		}
		prog.phase(c.Name, "dense")
		return denseForPrefill(cfg, p, r)
	case "decode":
		prog.phase(c.Name, "generate")
		p := buildDecode(cfg, c)
		r.pairs = int64(c.Batch) * int64(c.SeqLen) * int64(c.HKV)
		r.flops = 4 * float64(c.D) * float64(c.HQ/c.HKV) * float64(r.pairs)
		r.bytes = float64(c.Batch*c.HQ*c.D)*elemBytes(c.DType) + c.kvBytes()
		t0 := time.Now()
		w, err := op.NewDecodeWrapper(c.Page)
		if err != nil {
			return err
		}
		defer w.Close()
		err = w.Plan(op.PlanArgs{DecodeArgs: op.DecodeArgs{PageTable: p.pt, SeqUsedK: p.su, SeqlenQ: 1, MaxSeqlenK: c.SeqLen, Workers: cfg.workers},
			NumQOHeads: c.HQ, NumKVHeads: c.HKV, HeadDim: c.D}, nil)
		if err != nil {
			return err
		}
		r.planMS = ms(time.Since(t0))
		out := tensor.New(tensor.WithShape(c.Batch, c.HQ, c.D), tensor.Of(op.BFloat16))
		prog.phase(c.Name, "decode")
		err = timeOp(cfg, c, r, 2000, true, func() error {
			return w.RunInto(p.q, p.k, p.v, 0, out, nil)
		})
		if err != nil {
			return err
		}
		if cfg.verify {
			prog.phase(c.Name, "verify")
			r.verify, r.verifyDetail = p.verify(cfg, out.Data().([]lowp.BFloat16))
		}
		prog.phase(c.Name, "dense")
		return denseForDecode(cfg, p, r)
	}
	return fmt.Errorf("unknown case kind %q", c.Kind)
}

// paired collects, for each timed repetition of a case, the op's rate over
// a reference rate measured right after it for about as long (refMeter):
// the sustained FMA peak, the in-cache tile update of the op's kernels
// (updatemeter.Meter) and, for decode, the read bandwidth. The medians of
// these ratios are the %peak, %kern and %BW columns. With -cpuprofile no reference windows run (they would
// fill the profile).
type paired struct {
	m                       *refMeter
	r                       *result
	bw                      bool
	kern                    meterKey // the %kern reference
	peak, band, roof, kernR []float64
}

// timeOp times f, the op call of case c (at most maxReps calls, under the
// -cpuprofile profile, each followed by its reference windows; bw adds the
// bandwidth window), and records the median, best, repetitions and paired
// ratios in r.
func timeOp(cfg *config, c caseSpec, r *result, maxReps int, bw bool, f func() error) error {
	stop := profile(cfg, c.Name)
	pr := &paired{m: cfg.ref, r: r, bw: bw}
	// The kernel reference: prefill's work-item tile (128 rows), or decode's
	// tile of one KV head's query heads (at most 16 lanes per accumulator).
	pr.kern = meterKey{rows: 128, d: c.D}
	if c.Kind == "decode" {
		pr.kern = meterKey{rows: min(max(c.HQ/max(c.HKV, 1), 1), tile.LanesMaxM), d: c.D, decode: true}
	}
	med, best, reps, err := timeIt(cfg.minTime, minReps, maxReps, f, pr.after)
	stop()
	if err != nil {
		return err
	}
	r.timeMS, r.bestMS, r.reps = ms(med), ms(best), reps
	pr.finish()
	return nil
}

func (p *paired) after(rep time.Duration) {
	p.r.samples = append(p.r.samples, ms(rep))
	if p.m == nil || rep <= 0 {
		return
	}
	d := refWindow(rep)
	loop, scale := p.m.cal.loopFor(p.r.c)
	var fp, fb float64
	if pk := p.m.peak(d, loop, scale); pk > 0 {
		fp = p.r.flops / rep.Seconds() / 1e9 / pk
		p.peak = append(p.peak, fp)
	}
	if k := p.m.kernel(d, p.kern); k > 0 {
		// The meter runs the float32 tile kernel; a mixed case's Q.K runs
		// on VDPBF16PS, so its in-cache bound is scaled as its peak is.
		p.kernR = append(p.kernR, p.r.flops/rep.Seconds()/1e9/(k*scale))
	}
	if p.bw {
		if bw := p.m.bandwidth(d); bw > 0 {
			fb = p.r.bytes / rep.Seconds() / 1e9 / bw
			p.band = append(p.band, fb)
		}
		// The roofline bound is min(peak, bandwidth x flops/bytes); the
		// call's rate over it is the larger of its two paired ratios.
		if fp > 0 && fb > 0 {
			p.roof = append(p.roof, max(fp, fb))
		}
	}
}

func (p *paired) finish() {
	p.r.pctPeak, p.r.pctBW, p.r.pctRoof = 100*median(p.peak), 100*median(p.band), 100*median(p.roof)
	p.r.pctKern = 100 * median(p.kernR)
}

// median returns the median of xs (0 for none); xs is sorted in place.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	return xs[len(xs)/2]
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// ranPaths names the prefill paths the timed calls ran, from the calls
// counted on each (attn.PrefillRuns): "kv", "query" or both.
func ranPaths(kv, query uint64) string {
	switch {
	case kv > 0 && query > 0:
		return "kv+query"
	case query > 0:
		return "query"
	case kv > 0:
		return "kv"
	}
	return ""
}
