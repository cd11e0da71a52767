package check

import (
	"math"
	"testing"

	"github.com/sparseattn/msa/cuda"
	"github.com/sparseattn/msa/kernels/lowp"
)

// The mutation tests: results with one injected fault each, as a wrong
// kernel would produce them, must fail the check (the comparison with the
// reference or the probes), while the CPU path's results on the same
// problems pass. Faults that need a kernel change are emulated by the
// reference computed with that fault; the others are applied to the CPU
// path's result.

// asResult rounds a reference to what a kernel returns (BF16 O, float32
// LSEs).
func asResult(r *Reference) Result {
	out := Result{O: make([]float32, len(r.O)), LSE: make([]float32, len(r.LSE))}
	for i, x := range r.O {
		out.O[i] = lowp.BF16(float32(x)).Float32()
	}
	for i, x := range r.LSE {
		out.LSE[i] = float32(x)
	}
	if r.TLSE != nil {
		out.TLSE = make([]float32, len(r.TLSE))
		for i, x := range r.TLSE {
			out.TLSE[i] = float32(x)
		}
	}
	return out
}

// problem is what the mutation tests need of a prefill or decode problem.
type problem interface {
	reference(f *fault) *Reference
	cpu() Result
	ProbePasses() int
	SetProbe(pass int) error
	CheckProbe(pass int, got Result) ProbeDiff
	gen() error
	name() string
	heads() (hkv, qhpk int)
}

func (c *Prefill) cpu() Result           { return c.CPU(2) }
func (c *Prefill) gen() error            { return c.Gen(5) }
func (c *Prefill) name() string          { return c.Name }
func (c *Prefill) heads() (int, int)     { return c.Hkv, c.QHPK }
func (c *Decode) cpu() Result            { return c.CPU(2) }
func (c *Decode) gen() error             { return c.Gen(5) }
func (c *Decode) name() string           { return c.Name }
func (c *Decode) heads() (hkv, qhpk int) { return c.Hkv, c.QHPK }

// verdict runs the whole check on a problem: random inputs compared with
// the reference (got from run), then every probe pass. run(fault-free
// problem) returns the result under test for the problem's current inputs.
type verdict struct {
	diff  Diff
	probe ProbeDiff
}

func (v verdict) ok() bool { return v.diff.OK() && v.probe.OK() }

func runCheck(t *testing.T, p problem, run func() Result) verdict {
	t.Helper()
	if err := p.gen(); err != nil {
		t.Fatal(err)
	}
	v := verdict{diff: p.reference(nil).Check(run())}
	for pass := 0; pass < p.ProbePasses(); pass++ {
		if err := p.SetProbe(pass); err != nil {
			t.Fatal(err)
		}
		v.probe.Add(p.CheckProbe(pass, run()))
	}
	return v
}

// mutation is one injected fault: f for the reference, or post applied to
// the CPU path's result.
type mutation struct {
	name  string
	f     *fault
	post  func(p problem, r Result) bool // false: the fault does not apply to the problem
	probe bool                           // the probes alone must catch it (a mask or selection fault)
	// stat: the statistical criterion must catch it, and on at least one
	// problem the per-element bound alone (and the probes) pass it: a fault
	// only the statistical criterion sees.
	stat bool
}

func mutations() []mutation {
	with := func(set func(f *fault)) *fault { f := &fault{}; set(f); return f }
	return []mutation{
		{name: "causal edge one key late", f: with(func(f *fault) { f.causalShift = 1 }), probe: true},
		{name: "causal edge one key early", f: with(func(f *fault) { f.causalShift = -1 }), probe: true},
		{name: "selected block dropped", f: with(func(f *fault) { f.drop = true }), probe: true},
		{name: "two pages swapped", f: with(func(f *fault) { f.swap = true }), probe: true},
		{name: "seqused_k one token long", f: with(func(f *fault) { f.seqUsedShift = 1 }), probe: true},
		{name: "seqused_k one token short", f: with(func(f *fault) { f.seqUsedShift = -1 }), probe: true},
		{name: "softmax scale off by one bf16 ulp", f: with(func(f *fault) { f.scale = 1 + 0x1p-8 })},
		{name: "softmax scale off by 2^-18 relative", f: with(func(f *fault) { f.scale = 1 + 0x1p-18 }), stat: true},
		{name: "exponential biased 2^-19 of its argument", f: with(func(f *fault) { f.expBias = 0x1p-19 }), stat: true},
		{name: "P rounded to E4M3 instead of BF16", f: with(func(f *fault) { f.pE4M3 = true }), stat: true},
		{name: "16 keys' K from a near copy (2^-11 relative)", f: with(func(f *fault) { f.kNear = 0x1p-11 }), stat: true},
		{name: "LSE of a masked row finite", post: func(p problem, r Result) bool {
			for i, x := range r.LSE {
				if math.IsInf(float64(x), -1) {
					r.LSE[i] = 0
					return true
				}
			}
			return false
		}},
		{name: "one head's output from the neighbouring head", post: func(p problem, r Result) bool {
			hkv, qhpk := p.heads()
			hq := hkv * qhpk
			if hq < 2 {
				return false
			}
			d := len(r.O) / len(r.LSE)
			for row := 0; row < len(r.LSE)/hq; row++ {
				copy(r.O[(row*hq)*d:(row*hq+1)*d], r.O[(row*hq+1)*d:(row*hq+2)*d])
			}
			return true
		}},
	}
}

// resolve fills the per-problem choices of a fault: the first (KV head,
// row) whose first selected block holds attended keys loses it, and the
// last sequence (the longest) swaps pages. It reports whether the fault
// applies to the problem.
func resolve(p problem, m mutation) (*fault, bool) {
	if m.f == nil {
		return nil, true
	}
	f := *m.f
	if m.stat && !statApplies(p, &f) {
		return nil, false
	}
	var rows, hkv, lastSeq int
	var keys func(h, row int, f *fault) []int
	switch c := p.(type) {
	case *Prefill:
		if f.seqUsedShift != 0 || (f.causalShift != 0 && !c.Causal) || (f.swap && !c.Paged) {
			return nil, false
		}
		rows, hkv, lastSeq, keys = c.TotalQ, c.Hkv, len(c.SeqK)-1, c.keys
	case *Decode:
		if (f.causalShift > 0 && c.SeqlenQ == 1) || (f.drop && c.TopK == 0) { // one query: its causal limit is seqused_k itself
			return nil, false
		}
		rows, hkv, lastSeq, keys = c.Batch*c.SeqlenQ, c.Hkv, c.Batch-1, c.keys
	}
	f.swapSeq = lastSeq
	if f.drop {
		found := false
		for r := 0; r < rows && !found; r++ {
			for h := 0; h < hkv && !found; h++ {
				found = len(keys(h, r, nil)) > len(keys(h, r, &fault{drop: true, dropRow: r, dropHead: h}))
				f.dropRow, f.dropHead = r, h
			}
		}
		if !found {
			return nil, false
		}
	}
	return &f, true
}

// statApplies says whether a statistical fault is one the problem's
// arithmetic could hide: E4M3 Q.K's coherent tensor-core model (2^-11 of
// the magnitude sum, tolerance.go) allows score biases far larger than a
// 2^-18 scale or a 2^-19 exponential bias, and P rounded to E4M3 is the
// contract's P rounding for FP8 P.V.
func statApplies(p problem, f *fault) bool {
	var qd, kd cuda.Dtype
	switch c := p.(type) {
	case *Prefill:
		qd, kd = c.QD, c.KVD
	case *Decode:
		qd, kd = c.QD, c.KVD
	}
	if f.pE4M3 {
		return !(qd == cuda.E4M3 && (kd == cuda.E4M3 || kd == cuda.NVFP4))
	}
	return !(qd == cuda.E4M3 && kd == cuda.E4M3)
}

// mutationProblems are small problems of the probe matrices (the
// reference runs in float64 on two cores here).
func mutationProblems() []problem {
	pm, dm := ProbePrefillMatrix(), ProbeDecodeMatrix()
	return []problem{pm[0], pm[1], pm[3], pm[6], dm[0], dm[1], dm[2]}
}

// TestMutations: the CPU path passes the check on every problem; every
// fault fails it, and mask / selection faults fail the probes alone.
func TestMutations(t *testing.T) {
	exercised := map[string]int{}
	statOnly := map[string]int{} // problems where only the statistical criterion caught it
	defer func() {
		for _, m := range mutations() {
			if exercised[m.name] == 0 {
				t.Errorf("%s: applied to none of the problems", m.name)
			}
			if m.stat && statOnly[m.name] == 0 {
				t.Errorf("%s: the per-element bound catches it on every problem: it shows nothing of the statistical criterion", m.name)
			}
		}
	}()
	for _, p := range mutationProblems() {
		base := runCheck(t, p, p.cpu)
		if !base.ok() {
			t.Errorf("%s: the CPU path fails the check: %+v probe %+v", p.name(), base.diff, base.probe)
		}
		t.Logf("%-58s %-46s passes: O RMS margin %.3g, LSE RMS margin %.3g, O max margin %.3g, LSE max margin %.3g", p.name(), "(CPU path)",
			base.diff.RMSMarginO(), base.diff.RMSMarginLSE(), base.diff.StatMarginO, base.diff.StatMarginLSE)
		for _, m := range mutations() {
			f, applies := resolve(p, m)
			if !applies {
				continue
			}
			run := func() Result { return asResult(p.reference(f)) }
			if m.post != nil {
				tried := true
				run = func() Result {
					r := p.cpu()
					tried = tried && m.post(p, r)
					return r
				}
				v := runCheck(t, p, run)
				if !tried {
					continue
				}
				exercised[m.name]++
				if v.ok() {
					t.Errorf("%s: %s passes the check", p.name(), m.name)
				}
				t.Logf("%-58s %-46s caught: compare %v (O margin %.3g, LSE margin %.3g, masked bad %d), probes %v", p.name(), m.name,
					!v.diff.OK(), v.diff.MarginO, v.diff.MarginLSE, v.diff.BadMasked, !v.probe.OK())
				continue
			}
			v := runCheck(t, p, run)
			exercised[m.name]++
			if v.ok() {
				t.Errorf("%s: %s passes the check", p.name(), m.name)
			}
			if m.stat {
				if v.diff.StatOK() {
					t.Errorf("%s: %s passes the statistical criterion", p.name(), m.name)
				}
				if v.diff.BoundOK() && v.probe.OK() {
					statOnly[m.name]++
				}
				t.Logf("%-58s %-46s caught: bound %v, statistical %v (O RMS margin %.3g, LSE RMS margin %.3g, O max margin %.3g, LSE max margin %.3g)",
					p.name(), m.name, !v.diff.BoundOK(), !v.diff.StatOK(), v.diff.RMSMarginO(), v.diff.RMSMarginLSE(), v.diff.StatMarginO, v.diff.StatMarginLSE)
				continue
			}
			if m.probe && v.probe.OK() {
				t.Errorf("%s: %s passes the probes", p.name(), m.name)
			}
			t.Logf("%-58s %-46s caught: compare %v (O margin %.3g, LSE margin %.3g), probes %v (%d wrong tokens, %d wrong counts)", p.name(), m.name,
				!v.diff.OK(), v.diff.MarginO, v.diff.MarginLSE, !v.probe.OK(), v.probe.WrongTokens, v.probe.WrongCount)
		}
	}
}

// TestScaleResolution finds the smallest relative error of the softmax
// scale that the comparison catches on random inputs (logged; GPU_CHECK.md
// quotes it) and requires at most 2^-18 on BF16 problems (the statistical
// criterion's LSE; the per-element bound alone resolves 2^-15) and 2^-8 on
// FP8 ones (the FP8 tensor-core model's coherent score error). One float32 ulp of the scale (2^-24 relative) moves every score by
// less than the float32 rounding of the score itself: no check of float32
// results can tell it from a correct kernel.
func TestScaleResolution(t *testing.T) {
	pm, dm := ProbePrefillMatrix(), ProbeDecodeMatrix()
	for _, tc := range []struct {
		p    problem
		want int // caught at 2^-want at least
	}{{pm[0], 18}, {dm[1], 18}, {pm[3], 8}, {dm[2], 8}} {
		if err := tc.p.gen(); err != nil {
			t.Fatal(err)
		}
		ref := tc.p.reference(nil)
		caught := 0
		for k := 24; k >= 4 && caught == 0; k-- {
			f := &fault{}
			f.scale = 1 + math.Ldexp(1, -k)
			if !ref.Check(asResult(tc.p.reference(f))).OK() {
				caught = k
			}
		}
		t.Logf("%s: smallest scale error caught 2^-%d relative", tc.p.name(), caught)
		if caught < tc.want {
			t.Errorf("%s: a scale error of 2^-%d passes the check", tc.p.name(), tc.want)
		}
	}
}

// TestProbesCPU: every probe problem of the GPU command's matrices passes
// with the CPU path's results (the probe inputs are valid for every dtype
// and the recovered sets are the reference's), and its passes cover every
// token of the longest sequence.
func TestProbesCPU(t *testing.T) {
	var ps []problem
	for _, c := range ProbePrefillMatrix() {
		ps = append(ps, c)
	}
	for _, c := range ProbeDecodeMatrix() {
		ps = append(ps, c)
	}
	for _, p := range ps {
		v := runCheck(t, p, p.cpu)
		if !v.probe.OK() || !v.diff.OK() {
			t.Errorf("%s: CPU path: %+v probe %+v", p.name(), v.diff, v.probe)
		}
		if v.probe.Attended == 0 || v.probe.Attended == v.probe.Tokens {
			t.Errorf("%s: probes attend %d of %d memberships: nothing to tell apart", p.name(), v.probe.Attended, v.probe.Tokens)
		}
		t.Logf("%-60s %d passes, %d rows, %d memberships, %d attended", p.name(), p.ProbePasses(), v.probe.Rows, v.probe.Tokens, v.probe.Attended)
	}
}
