package op

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/sparseattn/msa/kernels/comm"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// decodeF32Specs are float32 decode problems: dense and sparse, seqlen_q
// 1, 3 and 4, every qhead_per_kv the decode path takes, page sizes 16 and
// 64, sparse blocks smaller than, equal to and larger than a page (their
// lists -1 padded), ragged seqused_k with an empty request and a request
// of one page exactly, pages in shuffled order (buildDecode).
func decodeF32Specs() []decodeSpec {
	var specs []decodeSpec
	seed := uint64(900)
	for _, qpk := range []int{1, 2, 4, 8, 16} {
		for _, sparse := range []struct{ topK, blk int }{{0, 0}, {3, 16}, {2, 64}, {4, 24}} {
			for _, ps := range []int{16, 64} {
				seed++
				sq := []int{1, 3, 4}[seed%3]
				specs = append(specs, decodeSpec{seed: seed, seqused: []int{ps, 0, 3*ps + 5, 37, 1 + sq},
					seqlenQ: sq, hq: 2 * qpk, hkv: 2, d: 64, pageSize: ps, dt: "bf16",
					topK: sparse.topK, blk: sparse.blk, workers: 1 + int(seed%3)})
			}
		}
	}
	specs = append(specs, decodeSpec{seed: 7, seqused: []int{300, 129}, seqlenQ: 4, hq: 4, hkv: 4, d: 128, pageSize: 16,
		dt: "bf16", scale: 0.05, workers: 2})
	return specs
}

// widenDecode replaces pr's BF16 q, k, v by float32 tensors of the same
// values (exact), so that referenceDecode's float64 copies still apply.
func widenDecode(pr *decodeProblem) {
	pr.q, _ = widenTest(pr.q)
	pr.k, _ = widenTest(pr.k)
	pr.v, _ = widenTest(pr.v)
}

// Bounds of float32 decode against the float64 reference. The float32
// forward accumulates D products per score and seqused_k terms per output
// in float32 with an online softmax: the bounds are those of the float32
// prefill test (O within 2e-6 * max|v| * D/16, LSE within 2e-5), whose
// problems have the same sizes.
const (
	decodeF32OTol   = 2e-6 / 16 // times max|v| * D
	decodeF32LSETol = 2e-5
)

// decodeF32Err compares a float32 decode result with the float64
// reference; extraO (times max|v|) and extraLSE (times |LSE|) widen the
// bounds for a merge of partial results.
func decodeF32Err(s decodeSpec, pr *decodeProblem, out, lse *tensor.Dense, extraO, extraLSE float64) error {
	if out.Dtype() != tensor.Float32 {
		return fmt.Errorf("out dtype %v, want float32", out.Dtype())
	}
	ref := referenceDecode(s, pr)
	o, l := validate.Backing[float32](out), validate.Backing[float32](lse)
	oTol := (decodeF32OTol*float64(s.d) + extraO) * pr.maxV
	for r, row := range ref.o {
		for c, w := range row {
			if e := math.Abs(float64(o[r*s.d+c]) - w); !(e <= oTol) {
				return fmt.Errorf("O[%d][%d] = %v, want %v", r, c, o[r*s.d+c], w)
			}
		}
		g, w := float64(l[r]), ref.lse[r]
		if math.IsInf(w, -1) || math.IsInf(g, -1) {
			if math.IsInf(w, -1) != math.IsInf(g, -1) {
				return fmt.Errorf("LSE[%d] = %v, want %v", r, g, w)
			}
			continue
		}
		if math.Abs(g-w) > decodeF32LSETol+extraLSE*math.Abs(w) {
			return fmt.Errorf("LSE[%d] = %v, want %v", r, g, w)
		}
	}
	return nil
}

// checkDecodeF32 is decodeF32Err for a single-process result.
func checkDecodeF32(t *testing.T, what string, s decodeSpec, pr *decodeProblem, res *Result) {
	t.Helper()
	if err := decodeF32Err(s, pr, res.Out, res.LSE, 0, 0); err != nil {
		t.Fatalf("%s %v: %v", what, s, err)
	}
}

// decodeF32Graph runs s through a graph (DecodeSchedule, DecodeAttention
// with k, v in layout l, LSE) and returns its Out and LSE.
func decodeF32Graph(t *testing.T, s decodeSpec, pr *decodeProblem, k, v *tensor.Dense, l PagedLayout) *Result {
	t.Helper()
	g := G.NewGraph()
	pt, su := gnode(t, g, "pt", pr.pt), gnode(t, g, "su", pr.su)
	sched, err := DecodeSchedule(pt, su, Heads(s.hq, s.hkv), PageSize(s.pageSize), SeqlenQ(s.seqlenQ), Workers(s.workers))
	if err != nil {
		t.Fatal(err)
	}
	opts := []Option{KVLayout(l)}
	if s.scale != 0 {
		opts = append(opts, SoftmaxScale(s.scale))
	}
	var q2k *G.Node
	if pr.q2k != nil {
		q2k = gnode(t, g, "q2k", pr.q2k)
		opts = append(opts, BlkKV(s.blk))
	}
	out, err := DecodeAttention(gnode(t, g, "q", pr.q), gnode(t, g, "k", k), gnode(t, g, "v", v), pt, su, sched, q2k, opts...)
	if err != nil {
		t.Fatalf("%v: DecodeAttention: %v", s, err)
	}
	lse, err := LSE(out)
	if err != nil {
		t.Fatal(err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatalf("%v: %v", s, err)
	}
	return &Result{Out: out.Value().(*tensor.Dense), LSE: lse.Value().(*tensor.Dense)}
}

// TestDecodeF32MatchesReference runs float32 decode eagerly, through a
// DecodeWrapper (Run and RunInto) and through the DecodeAttention node,
// with HND and NHD pages, against the float64 reference. One wrapper per
// page size serves every problem, so re-planning over the buffers of
// another problem is covered too.
func TestDecodeF32MatchesReference(t *testing.T) {
	wrappers := map[int]*DecodeWrapper{}
	defer func() {
		for _, w := range wrappers {
			w.Close()
		}
	}()
	for _, s := range decodeF32Specs() {
		eachF32Layout(t, s, func(pr *decodeProblem, q2k tensor.Tensor, k, v *tensor.Dense, args DecodeArgs) {
			l := args.KVLayout
			what := func(fn string) string { return fmt.Sprintf("%s %v", fn, l) }
			res, err := DecodeAttentionFunc(pr.q, k, v, q2k, args)
			if err != nil {
				t.Fatalf("%v %v: %v", s, l, err)
			}
			checkDecodeF32(t, what("DecodeAttentionFunc"), s, pr, res)

			w := wrappers[s.pageSize]
			if w == nil {
				if w, err = NewDecodeWrapper(s.pageSize); err != nil {
					t.Fatal(err)
				}
				wrappers[s.pageSize] = w
			}
			if err := w.Plan(planOf(s, args), q2k); err != nil {
				t.Fatalf("%v: Plan: %v", s, err)
			}
			if res, err = w.Run(pr.q, k, v, 0); err != nil {
				t.Fatalf("%v: Run: %v", s, err)
			}
			checkDecodeF32(t, what("DecodeWrapper.Run"), s, pr, res)
			rows := len(s.seqused) * s.seqlenQ
			out, lse := newDecodeOutputs(true, rows, s.hq, s.d)
			if err := w.RunInto(pr.q, k, v, 0, out, lse); err != nil {
				t.Fatalf("%v: RunInto: %v", s, err)
			}
			checkDecodeF32(t, what("DecodeWrapper.RunInto"), s, pr, &Result{Out: out, LSE: lse})

			checkDecodeF32(t, what("DecodeAttention"), s, pr, decodeF32Graph(t, s, pr, k, v, l))
		})
	}
}

// eachF32Layout builds s with float32 q, k, v and calls fn with it in the
// HND and in the NHD layout: k, v and args in that layout, q2k nil for
// dense decode.
func eachF32Layout(t *testing.T, s decodeSpec, fn func(pr *decodeProblem, q2k tensor.Tensor, k, v *tensor.Dense, args DecodeArgs)) {
	t.Helper()
	pr := buildDecode(s)
	widenDecode(pr)
	var q2k tensor.Tensor
	if pr.q2k != nil {
		q2k = pr.q2k
	}
	for _, l := range []PagedLayout{HND, NHD} {
		k, v := pr.k, pr.v
		if l == NHD {
			k, v = toNHD(t, k), toNHD(t, v)
		}
		args := decodeArgs(s, pr)
		args.KVLayout = l
		fn(pr, q2k, k, v, args)
	}
}

// TestDecodeF32ReferenceCatchesErrors: the comparison fails on a float32
// decode over the wrong keys (each request's last key dropped).
func TestDecodeF32ReferenceCatchesErrors(t *testing.T) {
	s := decodeF32Specs()[2]
	pr := buildDecode(s)
	widenDecode(pr)
	short := buildDecode(s)
	widenDecode(short)
	su := validate.Backing[int32](short.su)
	for b := range su {
		su[b] = max(su[b]-1, int32(s.seqlenQ))
	}
	res, err := DecodeAttentionFunc(pr.q, pr.k, pr.v, nil, decodeArgs(s, short))
	if err != nil {
		t.Fatal(err)
	}
	if decodeF32Err(s, pr, res.Out, res.LSE, 0, 0) == nil {
		t.Fatal("decode without each request's last key passed the comparison")
	}
}

// TestDecodeWrapperF32Allocs: a planned wrapper's float32 RunInto
// allocates nothing once warm, in either layout, dense or sparse: the plan
// prepares the float32 forward (grad.Prepared) once and every Run reuses
// it. The same Run preceded by the per-plan preparation, as a wrapper that
// re-prepared its state on every Run would do, allocates (the row
// numbering and CSR checks of grad's Prepare), so the count catches that.
func TestDecodeWrapperF32Allocs(t *testing.T) {
	if raceDetector {
		t.Skip("allocation counts vary under the race detector")
	}
	for _, s := range []decodeSpec{decodeF32Specs()[0], decodeF32Specs()[3]} {
		eachF32Layout(t, s, func(pr *decodeProblem, q2k tensor.Tensor, k, v *tensor.Dense, args DecodeArgs) {
			l := args.KVLayout
			w, err := NewDecodeWrapper(s.pageSize)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if err := w.Plan(planOf(s, args), q2k); err != nil {
				t.Fatal(err)
			}
			out, lse := newDecodeOutputs(true, len(s.seqused)*s.seqlenQ, s.hq, s.d)
			run := func() {
				if err := w.RunInto(pr.q, k, v, 0, out, lse); err != nil {
					t.Fatal(err)
				}
			}
			run()
			if got := testing.AllocsPerRun(10, run); got != 0 {
				t.Errorf("%v %v: warm RunInto allocates %v per call, want 0", s, l, got)
			}
			rePrepared := testing.AllocsPerRun(10, func() {
				if err := w.f32.Prepare("RunInto", w.m, w.pool); err != nil {
					t.Fatal(err)
				}
				run()
			})
			if rePrepared == 0 {
				t.Errorf("%v %v: RunInto after re-preparing the float32 state allocates nothing: the count cannot see a per-Run preparation", s, l)
			}
		})
	}
}

// TestDecodeF32Errors checks that the float32 combinations decode does not
// take are errors naming the argument: float32 q with BF16 k/v (eager and
// graph), a BFloat16 out for float32 q, float32 in the low-precision-only
// check of the CUDA path.
func TestDecodeF32Errors(t *testing.T) {
	s := decodeSpec{seed: 3, seqused: []int{40, 17}, seqlenQ: 1, hq: 4, hkv: 2, d: 64, pageSize: 16, dt: "bf16", workers: 1}
	pr := buildDecode(s)
	bf16K := pr.k
	widenDecode(pr)
	args := decodeArgs(s, pr)

	var ae *ArgError
	_, err := DecodeAttentionFunc(pr.q, bf16K, pr.v, nil, args)
	if !errors.As(err, &ae) || ae.Arg != "q, k, v" {
		t.Errorf("float32 q with bfloat16 k: got %v, want an *ArgError on q, k, v", err)
	}

	g := G.NewGraph()
	pt, su := gnode(t, g, "pt", pr.pt), gnode(t, g, "su", pr.su)
	sched, err := DecodeSchedule(pt, su, Heads(s.hq, s.hkv), PageSize(s.pageSize))
	if err != nil {
		t.Fatal(err)
	}
	_, err = DecodeAttention(gnode(t, g, "q", pr.q), gnode(t, g, "k", bf16K), gnode(t, g, "v", pr.v), pt, su, sched, nil)
	wantArgErr(t, err, "k", "dtype float32")

	w, err := NewDecodeWrapper(s.pageSize)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Plan(planArgs(s, pr), nil); err != nil {
		t.Fatal(err)
	}
	out, lse := newDecodeOutputs(false, len(s.seqused), s.hq, s.d)
	if err := w.RunInto(pr.q, pr.k, pr.v, 0, out, lse); !errors.As(err, &ae) || ae.Arg != "out" {
		t.Errorf("float32 q with a bfloat16 out: got %v, want an *ArgError on out", err)
	}
	// The CUDA kernels' check keeps the low-precision dtype rules.
	c := &validate.Checker{Fn: "DecodeAttention"}
	if decodeQKVLayout(c, pr.q, pr.k, pr.v, HND, false); !errors.As(c.Err, &ae) || ae.Arg != "q" {
		t.Errorf("float32 q where float32 is not taken: got %v, want an *ArgError on q", c.Err)
	}
}

// TestCPDecodeF32 runs float32 context-parallel decode on 1 to 4 ranks
// (dense and sparse, seqlen_q 1 and > 1, with ranks that hold none of a
// sequence) against the float64 reference. Each rank's partial meets the
// single-process bound; the merge adds, per output, the float32 rounding
// of a weighted sum of P partials and of the weights: (P + 2) * 2^-24 *
// max|v| in O and 4 * 2^-24 * |LSE| in the LSE.
func TestCPDecodeF32(t *testing.T) {
	for _, s := range append(cpDecodeSpecs(), cpDecodeMultiSpecs()...) {
		if s.dt != "bf16" {
			continue
		}
		for _, p := range []int{1, 2, 3, 4} {
			pr := buildDecode(s)
			widenDecode(pr)
			cs, _ := comm.NewLocal(p, 0)
			for r, err := range comm.Each(cs, func(c comm.Comm) error {
				o, lse, err := cpDecodeRank(c, s, pr)
				if err != nil {
					return err
				}
				return decodeF32Err(s, pr, o, lse, float64(p+2)*0x1p-24, 4*0x1p-24)
			}) {
				if err != nil {
					t.Errorf("%v P=%d rank %d: %v", s, p, r, err)
				}
			}
		}
	}
}

// TestCPDecodeMixedDtypes: ranks that run different dtypes (one float32,
// one BF16) get an error on every rank instead of merging misread
// partials.
func TestCPDecodeMixedDtypes(t *testing.T) {
	s := cpDecodeSpecs()[0]
	pr := buildDecode(s)
	wide := buildDecode(s)
	widenDecode(wide)
	cs, _ := comm.NewLocal(2, 0)
	for r, err := range comm.Each(cs, func(c comm.Comm) error {
		if c.Rank() == 1 {
			_, _, err := cpDecodeRank(c, s, wide)
			return err
		}
		_, _, err := cpDecodeRank(c, s, pr)
		return err
	}) {
		if err == nil {
			t.Errorf("rank %d: mixed dtypes across ranks gave no error", r)
		}
	}
}
