package op

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Tests of hostile and malformed inputs: typed-nil tensors, views,
// scalars, sizes, construction-time checks, error messages, non-finite
// inputs. DecodeWrapper misuse is tested in wrapper_misuse_test.go.

// noPanic runs f and fails the test on a panic.
func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s: panic: %v", what, r)
		}
	}()
	f()
}

// sameResult fails unless a and b hold the same bytes (Out and LSE).
func sameResult(t *testing.T, what string, a, b *Result) {
	t.Helper()
	if !bytes.Equal(a.Out.Header.Raw, b.Out.Header.Raw) {
		t.Fatalf("%s: outputs differ", what)
	}
	if (a.LSE == nil) != (b.LSE == nil) || (a.LSE != nil && !bytes.Equal(a.LSE.Header.Raw, b.LSE.Header.Raw)) {
		t.Fatalf("%s: LSEs differ", what)
	}
}

// gnode adds an input node of t's dtype and shape (bound to t) to g.
func gnode(t *testing.T, g *G.ExprGraph, name string, v *tensor.Dense) *G.Node {
	t.Helper()
	n := G.NewTensor(g, v.Dtype(), v.Dims(), G.WithShape(v.Shape()...), G.WithName(name))
	if err := G.Let(n, v); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTypedNilTensors: a nil *tensor.Dense is an *ArgError for a
// required argument and the same as an untyped nil for an optional one, at
// every entry point.
func TestTypedNilTensors(t *testing.T) {
	var nd *tensor.Dense
	c, _ := validBase(t, false)
	base, err := SparseAttentionFunc(c.q, c.k, c.v, c.rp, c.qi, c.topK, c.args)
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{"q", "k", "v", "k2q_row_ptr", "k2q_q_indices", "cu_seqlens_q"} {
		x := c
		switch arg {
		case "q":
			x.q = nd
		case "k":
			x.k = nd
		case "v":
			x.v = nd
		case "k2q_row_ptr":
			x.rp = nd
		case "k2q_q_indices":
			x.qi = nd
		case "cu_seqlens_q":
			x.args.CuSeqlensQ = nd
		}
		noPanic(t, arg, func() {
			_, err := SparseAttentionFunc(x.q, x.k, x.v, x.rp, x.qi, x.topK, x.args)
			var ae *ArgError
			if !errors.As(err, &ae) || !strings.Contains(ae.Arg, arg) {
				t.Fatalf("typed-nil %s: error %v, want an *ArgError naming it", arg, err)
			}
		})
	}
	// Optional page_table and seqused_k: a typed nil is absent.
	x := c
	x.args.PageTable = nd
	res, err := SparseAttentionFunc(x.q, x.k, x.v, x.rp, x.qi, x.topK, x.args)
	if err != nil {
		t.Fatalf("typed-nil page_table with dense k: %v", err)
	}
	sameResult(t, "typed-nil page_table", base, res)
	pc, _ := validBase(t, true)
	withNil := pc
	withNil.args.SeqUsedK = nd
	untyped := pc
	untyped.args.SeqUsedK = nil
	r1, err1 := SparseAttentionFunc(withNil.q, withNil.k, withNil.v, withNil.rp, withNil.qi, withNil.topK, withNil.args)
	r2, err2 := SparseAttentionFunc(untyped.q, untyped.k, untyped.v, untyped.rp, untyped.qi, untyped.topK, untyped.args)
	if (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()) {
		t.Fatalf("typed-nil seqused_k: %v, untyped nil: %v", err1, err2)
	}
	if err1 == nil {
		sameResult(t, "typed-nil seqused_k", r1, r2)
	}

	// NVFP4: block scales are required, global scales optional.
	ns := sparseSpec{seed: 4, seqQ: []int{3}, seqK: []int{150}, hq: 2, hkv: 1, d: 64, topK: 2, blk: 128,
		qDt: "bf16", kvDt: "nvfp4", partial: tensor.Float32}
	npr := buildSparse(ns)
	rp, qi, err := K2QCSRFunc(npr.q2k, npr.cuQ, npr.cuK, 128)
	if err != nil {
		t.Fatal(err)
	}
	nargs := SparseArgs{CuSeqlensQ: npr.cuQ, CuSeqlensK: npr.cuK, PartialDtype: tensor.Float32}
	nbase, err := SparseAttentionNVFP4KVFunc(npr.q, npr.k, npr.v, npr.kScale, npr.vScale, nil, nil, rp, qi, 2, nargs)
	if err != nil {
		t.Fatal(err)
	}
	nres, err := SparseAttentionNVFP4KVFunc(npr.q, npr.k, npr.v, npr.kScale, npr.vScale, nd, nd, rp, qi, 2, nargs)
	if err != nil {
		t.Fatalf("typed-nil global scales: %v", err)
	}
	sameResult(t, "typed-nil global scales", nbase, nres)
	_, err = SparseAttentionNVFP4KVFunc(npr.q, npr.k, npr.v, nd, npr.vScale, nil, nil, rp, qi, 2, nargs)
	wantArgErr(t, err, "k_scale_128x4", "tensor")

	// Decode: q2k optional (dense decode), page_table and seqused_k required.
	s := misuseSpec()
	pr := buildDecode(s)
	args := decodeArgs(s, pr)
	dbase, err := DecodeAttentionFunc(pr.q, pr.k, pr.v, nil, args)
	if err != nil {
		t.Fatal(err)
	}
	dres, err := DecodeAttentionFunc(pr.q, pr.k, pr.v, nd, args)
	if err != nil {
		t.Fatalf("typed-nil q2k_indices: %v", err)
	}
	sameResult(t, "typed-nil q2k_indices", dbase, dres)
	a2 := args
	a2.PageTable = nd
	_, err = DecodeAttentionFunc(pr.q, pr.k, pr.v, nil, a2)
	wantArgErr(t, err, "page_table", "tensor")
	a2 = args
	a2.SeqUsedK = nd
	_, err = DecodeAttentionFunc(pr.q, pr.k, pr.v, nil, a2)
	wantArgErr(t, err, "seqused_k", "tensor")
	_, err = DecodeAttentionFunc(nd, pr.k, pr.v, nil, args)
	wantArgErr(t, err, "q", "tensor")
	w, _ := NewDecodeWrapper(s.pageSize)
	defer w.Close()
	if err := w.Plan(planOf(s, args), nd); err != nil {
		t.Fatalf("Plan with typed-nil q2k_indices: %v", err)
	}
	wres, err := w.Run(pr.q, pr.k, pr.v, 0)
	if err != nil {
		t.Fatal(err)
	}
	sameResult(t, "Plan with typed-nil q2k_indices", dbase, wres)
	_, err = w.Run(pr.q, nd, pr.v, 0)
	wantArgErr(t, err, "k", "tensor")
	wantArgErr(t, w.RunInto(pr.q, pr.k, pr.v, 0, nd, nil), "out", "contiguous")

	// CSR build, schedule and block selection.
	_, _, err = K2QCSRFunc(nd, pr.su, pr.su, 128)
	wantArgErr(t, err, "q2k_indices", "tensor")
	_, err = FwdScheduleFunc(nd, c.qi, ScheduleArgs{CuSeqlensQ: c.args.CuSeqlensQ, CuSeqlensK: c.args.CuSeqlensK, TotalQ: 10, TopK: 4, QheadPerKV: 2})
	wantArgErr(t, err, "k2q_row_ptr", "tensor")
	_, err = BlockScoresFunc(nd, c.k, c.args.CuSeqlensQ, c.args.CuSeqlensK, BlockScoreConfig{})
	wantArgErr(t, err, "q", "tensor")
	_, err = TopKBlocksFunc(nd, 2, TopKConfig{})
	wantArgErr(t, err, "scores", "tensor")
}

// TestEagerViews (eager side): sliced page_table, seqused_k and q
// views give the result of their materialised copies.
func TestEagerViews(t *testing.T) {
	c, _ := validBase(t, true)
	base, err := SparseAttentionFunc(c.q, c.k, c.v, c.rp, c.qi, c.topK, c.args)
	if err != nil {
		t.Fatal(err)
	}
	x := c
	x.args.PageTable = sliceCols(t, c.args.PageTable.(*tensor.Dense), -7)
	su := validate.Backing[int32](c.args.SeqUsedK.(*tensor.Dense))
	su2 := tensor.New(tensor.WithShape(len(su), 2), tensor.WithBacking([]int32{su[0], 1 << 30, su[1], 1 << 30}))
	col, err := su2.Slice(nil, tensor.S(0))
	if err != nil {
		t.Fatal(err)
	}
	x.args.SeqUsedK = col
	// q as the first half of the last dimension of a wider tensor.
	qd := c.q.(*tensor.Dense)
	s := qd.Shape()
	wide := make([]lowp.BFloat16, s[0]*s[1]*2*s[2])
	src := validate.Backing[lowp.BFloat16](qd)
	for r := 0; r < s[0]*s[1]; r++ {
		copy(wide[r*2*s[2]:], src[r*s[2]:(r+1)*s[2]])
		for i := 0; i < s[2]; i++ {
			wide[r*2*s[2]+s[2]+i] = lowp.BF16(float32(math.NaN()))
		}
	}
	qv, err := tensor.New(tensor.WithShape(s[0], s[1], 2*s[2]), tensor.WithBacking(wide)).Slice(nil, nil, tensor.S(0, s[2]))
	if err != nil {
		t.Fatal(err)
	}
	x.q = qv
	res, err := SparseAttentionFunc(x.q, x.k, x.v, x.rp, x.qi, x.topK, x.args)
	if err != nil {
		t.Fatal(err)
	}
	sameResult(t, "views", base, res)
}

// TestConstructionTimeChecks: overflowing sizes and invalid
// scalars are rejected when the node is built (or by the eager function),
// never by a panic or a negative shape at run time.
func TestConstructionTimeChecks(t *testing.T) {
	c, _ := validBase(t, false)
	for _, cfg := range []BlockScoreConfig{{MaxSeqlenK: math.MaxInt}, {BlkKV: math.MaxInt}, {BlkKV: math.MaxInt, MaxSeqlenK: math.MaxInt},
		{BlkKV: -5}, {MaxSeqlenK: -1}} {
		noPanic(t, "BlockScoresFunc", func() {
			if _, err := BlockScoresFunc(c.q, c.k, c.args.CuSeqlensQ, c.args.CuSeqlensK, cfg); err == nil {
				t.Fatalf("BlockScoresFunc %+v accepted", cfg)
			}
		})
	}
	g := G.NewGraph()
	qn, kn := gnode(t, g, "q", c.q.(*tensor.Dense)), gnode(t, g, "k", c.k.(*tensor.Dense))
	cuQ, cuK := gnode(t, g, "cu_q", c.args.CuSeqlensQ.(*tensor.Dense)), gnode(t, g, "cu_k", c.args.CuSeqlensK.(*tensor.Dense))
	_, err := BlockScores(qn, kn, cuQ, cuK, MaxSeqlenK(math.MaxInt))
	wantArgErr(t, err, "max_seqlen_k", "max_seqlen_k")
	_, err = BlockScores(qn, kn, cuQ, cuK, MaxSeqlenK(200), BlkKV(math.MaxInt))
	wantArgErr(t, err, "blk_kv", "blk_kv")
	q2k := gnode(t, g, "q2k", i32T([]int{2, 10, 4}))
	_, err = K2QCSR(q2k, cuQ, cuK, BlkKV(128), MaxSeqlenK(math.MaxInt))
	wantArgErr(t, err, "max_seqlen_k", "max_seqlen_k")
	_, err = K2QCSR(q2k, cuQ, cuK, BlkKV(1), MaxSeqlenK(math.MaxInt32))
	wantArgErr(t, err, "max_seqlen_k", "at most")
	rpn, qin := gnode(t, g, "rp", c.rp.(*tensor.Dense)), gnode(t, g, "qi", c.qi.(*tensor.Dense))
	_, err = PackK2QCSR(rpn, qin, TotalQ(10), TopK(4), BlkKV(100000))
	wantArgErr(t, err, "blk_kv", "blk_kv")
	csr, err := PackK2QCSR(rpn, qin, TotalQ(10), TopK(4), BlkKV(128))
	if err != nil {
		t.Fatal(err)
	}
	sched, err := FwdSchedule(csr, cuQ, cuK, QheadPerKV(2), Workers(2))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opt Option
		arg string
	}{
		{Temperature(math.NaN()), "lse_temperature_scale"}, {Temperature(-1), "lse_temperature_scale"},
		{SoftmaxScale(math.Inf(1)), "softmax_scale"}, {SoftmaxScale(1e39), "softmax_scale"},
	} {
		_, err = SparseAttention(qn, kn, gnode(t, g, "v", c.v.(*tensor.Dense)), csr, sched, cuQ, cuK, tc.opt)
		wantArgErr(t, err, tc.arg, tc.arg)
	}
	if _, err := SparseAttention(qn, kn, gnode(t, g, "v2", c.v.(*tensor.Dense)), csr, sched, cuQ, cuK, SoftmaxScale(-0.25)); err != nil {
		t.Fatalf("negative softmax_scale rejected at construction: %v", err)
	}

	// Decode: blk_kv and scale at construction.
	s := misuseSpec()
	pr := buildDecode(s)
	dg := G.NewGraph()
	pt, su := gnode(t, dg, "pt", pr.pt), gnode(t, dg, "su", pr.su)
	ds, err := DecodeSchedule(pt, su, Heads(s.hq, s.hkv), PageSize(s.pageSize), SeqlenQ(s.seqlenQ), Workers(2))
	if err != nil {
		t.Fatal(err)
	}
	dq, dk, dv := gnode(t, dg, "q", pr.q), gnode(t, dg, "k", pr.k), gnode(t, dg, "v", pr.v)
	_, err = DecodeAttention(dq, dk, dv, pt, su, ds, nil, BlkKV(-5))
	wantArgErr(t, err, "blk_kv", "blk_kv")
	_, err = DecodeAttention(dq, dk, dv, pt, su, ds, nil, BlkKV(math.MaxInt))
	wantArgErr(t, err, "blk_kv", "blk_kv")
	_, err = DecodeAttention(dq, dk, dv, pt, su, ds, nil, SoftmaxScale(math.NaN()))
	wantArgErr(t, err, "softmax_scale", validate.ScaleRule)
	out, err := DecodeAttention(dq, dk, dv, pt, su, ds, nil, SoftmaxScale(-0.2))
	if err != nil {
		t.Fatalf("negative softmax_scale rejected: %v", err)
	}
	m := G.NewTapeMachine(dg)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
	s.scale = -0.2
	checkDecode(t, s, pr, &Result{Out: out.Value().(*tensor.Dense), LSE: mustLSE(t, out)})
}

// mustLSE returns the LSE value of a decode attention node after its run.
func mustLSE(t *testing.T, out *G.Node) *tensor.Dense {
	t.Helper()
	op := out.Op().(*decodeAttnOp)
	return op.st.lse
}

// bigPageTable returns an int32 [1, cols] page table of zeros.
func bigPageTable(cols int) *tensor.Dense {
	return tensor.New(tensor.WithShape(1, cols), tensor.WithBacking(make([]int32, cols)))
}

// TestPagedKeyCapacityInt32: a page table whose capacity
// max_num_pages_per_seq * page_size exceeds int32 is an error everywhere,
// not a truncated key length (O = 0, LSE = -inf).
func TestPagedKeyCapacityInt32(t *testing.T) {
	const cols = 1<<24 + 1 // * 128 > 2^31 - 1
	pt := bigPageTable(cols)
	cuQ, cuK := i32T([]int{2}, 0, 1), i32T([]int{2}, 0, 128)
	q2k := i32T([]int{1, 1, 1}, 0)
	rp, qi, err := K2QCSRFunc(q2k, cuQ, cuK, 128)
	if err != nil {
		t.Fatal(err)
	}
	q, k := bf16T(1, 1, 64), bf16T(1, 1, 128, 64)
	_, err = SparseAttentionFunc(q, k, k, rp, qi, 1, SparseArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK, PageTable: pt})
	wantArgErr(t, err, "page_table", "int32")
	dk := bf16T(1, 1, 128, 64)
	args := DecodeArgs{PageTable: pt, SeqUsedK: i32T([]int{1}, 1), SeqlenQ: 1, MaxSeqlenK: 1}
	_, err = DecodeAttentionFunc(q, dk, dk, nil, args)
	wantArgErr(t, err, "page_table", "int32")
	w, _ := NewDecodeWrapper(128)
	defer w.Close()
	wantArgErr(t, w.Plan(PlanArgs{DecodeArgs: args, NumQOHeads: 1, NumKVHeads: 1, HeadDim: 64}, nil), "page_table", "int32")
	g := G.NewGraph()
	ptn := G.NewTensor(g, tensor.Int32, 2, G.WithShape(1, cols), G.WithName("pt"))
	sun := G.NewTensor(g, tensor.Int32, 1, G.WithShape(1), G.WithName("su"))
	_, err = DecodeSchedule(ptn, sun, Heads(1, 1), PageSize(128), SeqlenQ(1))
	wantArgErr(t, err, "page_table", "int32")
}

// TestScalarRuleEveryEntryPoint: softmax_scale and
// lse_temperature_scale values that are not usable after conversion to
// float32 get the same error from every entry point; values near the
// limits that are usable give finite results.
func TestScalarRuleEveryEntryPoint(t *testing.T) {
	c, _ := validBase(t, false)
	ns := sparseSpec{seed: 4, seqQ: []int{3}, seqK: []int{150}, hq: 2, hkv: 1, d: 64, topK: 2, blk: 128,
		qDt: "bf16", kvDt: "nvfp4", partial: tensor.Float32}
	npr := buildSparse(ns)
	nrp, nqi, err := K2QCSRFunc(npr.q2k, npr.cuQ, npr.cuK, 128)
	if err != nil {
		t.Fatal(err)
	}
	g := G.NewGraph()
	qn, kn, vn := gnode(t, g, "q", c.q.(*tensor.Dense)), gnode(t, g, "k", c.k.(*tensor.Dense)), gnode(t, g, "v", c.v.(*tensor.Dense))
	cuQ, cuK := gnode(t, g, "cu_q", c.args.CuSeqlensQ.(*tensor.Dense)), gnode(t, g, "cu_k", c.args.CuSeqlensK.(*tensor.Dense))
	csr, err := PackK2QCSR(gnode(t, g, "rp", c.rp.(*tensor.Dense)), gnode(t, g, "qi", c.qi.(*tensor.Dense)), TotalQ(10), TopK(4), BlkKV(128))
	if err != nil {
		t.Fatal(err)
	}
	sched, err := FwdSchedule(csr, cuQ, cuK, QheadPerKV(2), Workers(2))
	if err != nil {
		t.Fatal(err)
	}
	s := misuseSpec()
	pr := buildDecode(s)
	dg := G.NewGraph()
	pt, su := gnode(t, dg, "pt", pr.pt), gnode(t, dg, "su", pr.su)
	ds, err := DecodeSchedule(pt, su, Heads(s.hq, s.hkv), PageSize(s.pageSize), SeqlenQ(s.seqlenQ), Workers(2))
	if err != nil {
		t.Fatal(err)
	}
	dq, dk, dv := gnode(t, dg, "q", pr.q), gnode(t, dg, "k", pr.k), gnode(t, dg, "v", pr.v)

	for _, x := range []float64{1e39, -1e39, 3e38, 1e-46, -1e-46, math.NaN(), math.Inf(1), math.Inf(-1), math.MaxFloat64} {
		a := c.args
		a.SoftmaxScale = x
		_, err := SparseAttentionFunc(c.q, c.k, c.v, c.rp, c.qi, c.topK, a)
		wantArgErr(t, err, "softmax_scale", validate.ScaleRule)
		na := SparseArgs{CuSeqlensQ: npr.cuQ, CuSeqlensK: npr.cuK, SoftmaxScale: x}
		_, err = SparseAttentionNVFP4KVFunc(npr.q, npr.k, npr.v, npr.kScale, npr.vScale, nil, nil, nrp, nqi, 2, na)
		wantArgErr(t, err, "softmax_scale", validate.ScaleRule)
		_, err = BlockScoresFunc(c.q, c.k, c.args.CuSeqlensQ, c.args.CuSeqlensK, BlockScoreConfig{SoftmaxScale: x})
		wantArgErr(t, err, "softmax_scale", validate.ScaleRule)
		_, err = SparseAttention(qn, kn, vn, csr, sched, cuQ, cuK, SoftmaxScale(x))
		wantArgErr(t, err, "softmax_scale", validate.ScaleRule)
		_, err = BlockScores(qn, kn, cuQ, cuK, MaxSeqlenK(200), SoftmaxScale(x))
		wantArgErr(t, err, "softmax_scale", validate.ScaleRule)
		_, err = DecodeAttention(dq, dk, dv, pt, su, ds, nil, SoftmaxScale(x))
		wantArgErr(t, err, "softmax_scale", validate.ScaleRule)
	}
	for _, x := range []float64{1e-39, 1e39, -1, math.NaN(), math.Inf(1), math.Inf(-1), 1e-320} {
		a := c.args
		a.Temperature, a.ReturnTemperatureLSE = x, true
		_, err := SparseAttentionFunc(c.q, c.k, c.v, c.rp, c.qi, c.topK, a)
		wantArgErr(t, err, "lse_temperature_scale", validate.TemperatureRule)
		na := SparseArgs{CuSeqlensQ: npr.cuQ, CuSeqlensK: npr.cuK, Temperature: x, ReturnTemperatureLSE: true}
		_, err = SparseAttentionNVFP4KVFunc(npr.q, npr.k, npr.v, npr.kScale, npr.vScale, nil, nil, nrp, nqi, 2, na)
		wantArgErr(t, err, "lse_temperature_scale", validate.TemperatureRule)
		_, err = SparseAttention(qn, kn, vn, csr, sched, cuQ, cuK, Temperature(x))
		wantArgErr(t, err, "lse_temperature_scale", validate.TemperatureRule)
	}
	// Usable extremes: finite LSE and temperature LSE against the reference.
	for _, sc := range []struct{ scale, temp float64 }{{1e-30, 1e-30}, {-3, 1e30}, {50, 0.5}} {
		sp := sparseSpec{seed: 12, seqQ: []int{4, 3}, seqK: []int{150, 90}, hq: 2, hkv: 1, d: 64, topK: 2, blk: 128, causal: true,
			qDt: "bf16", kvDt: "bf16", partial: tensor.Float32, scale: sc.scale, temperature: sc.temp}
		spr := buildSparse(sp)
		checkAgainstReference(t, sp, spr, runSparse(t, sp, spr, 2, nil))
	}
}

// TestRejectBeforeAllocating: a CSR too small for cu_seqlens_k is
// rejected before the row numbering of cu_seqlens_k is allocated, eagerly
// and in graph nodes.
func TestRejectBeforeAllocating(t *testing.T) {
	rp, qi := i32T([]int{1, 2}, 0, 1), i32T([]int{1, 1}, 0)
	cuQ := i32T([]int{2}, 0, 1)
	for _, n := range []int32{math.MaxInt32 - 1, 1 << 24} {
		cuK := i32T([]int{2}, 0, n)
		var err error
		alloc := allocDuring(func() {
			_, err = FwdScheduleFunc(rp, qi, ScheduleArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK, TotalQ: 1, TopK: 1, QheadPerKV: 1, BlkKV: 1})
		})
		if err == nil || alloc > 1<<20 {
			t.Fatalf("cu_seqlens_k [0, %d]: error %v after %d bytes", n, err, alloc)
		}
	}
	// Graph: K2QCSR and FwdSchedule nodes with a row capacity of 4.
	for _, node := range []string{"K2QCSR", "FwdSchedule"} {
		g := G.NewGraph()
		cq := gnode(t, g, "cu_q", cuQ)
		ck := gnode(t, g, "cu_k", i32T([]int{2}, 0, 4))
		var csr *G.Node
		var err error
		if node == "K2QCSR" {
			csr, err = K2QCSR(gnode(t, g, "q2k", i32T([]int{1, 1, 1}, 0)), cq, ck, BlkKV(1), MaxSeqlenK(4))
		} else {
			csr, err = PackK2QCSR(gnode(t, g, "rp", i32T([]int{1, 5}, 0, 1, 1, 1, 1)), gnode(t, g, "qi", qi), TotalQ(1), TopK(1), BlkKV(1))
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := FwdSchedule(csr, cq, ck, QheadPerKV(1), Workers(1)); err != nil {
			t.Fatal(err)
		}
		m := G.NewTapeMachine(g)
		if err := m.RunAll(); err != nil {
			t.Fatalf("%s: %v", node, err)
		}
		m.Reset()
		if err := G.Let(ck, i32T([]int{2}, 0, 1<<24)); err != nil {
			t.Fatal(err)
		}
		alloc := allocDuring(func() { err = m.RunAll() })
		m.Close()
		if err == nil || !strings.Contains(err.Error(), "CSR rows") || alloc > 4<<20 {
			t.Fatalf("%s with 2^24 rows: error %v after %d bytes", node, err, alloc)
		}
	}
}

// TestMemoryBoundedByWork: a huge worker count does not allocate
// workspaces beyond the work, and a DecodeSchedule node over a huge page
// table is either rejected or small.
func TestMemoryBoundedByWork(t *testing.T) {
	c, _ := validBase(t, false)
	a := c.args
	a.Workers = 16384
	var err error
	alloc := allocDuring(func() { _, err = SparseAttentionFunc(c.q, c.k, c.v, c.rp, c.qi, c.topK, a) })
	if err != nil {
		t.Fatal(err)
	}
	if alloc > 64<<20 {
		t.Fatalf("SparseAttentionFunc with 16384 workers allocated %d bytes", alloc)
	}
	s := misuseSpec()
	s.workers = 16384
	pr := buildDecode(s)
	alloc = allocDuring(func() { _ = runDecodeSpec(t, s, pr) })
	if alloc > 64<<20 {
		t.Fatalf("DecodeAttentionFunc with 16384 workers allocated %d bytes", alloc)
	}
	w, _ := NewDecodeWrapper(s.pageSize)
	defer w.Close()
	alloc = allocDuring(func() { err = w.Plan(planArgs(s, pr), nil) })
	if err != nil || alloc > 64<<20 {
		t.Fatalf("Plan with 16384 workers: %v, %d bytes", err, alloc)
	}
	g := G.NewGraph()
	ptn := G.NewTensor(g, tensor.Int32, 2, G.WithShape(16, 1<<20), G.WithName("pt"))
	sun := G.NewTensor(g, tensor.Int32, 1, G.WithShape(16), G.WithName("su"))
	alloc = allocDuring(func() {
		_, err = DecodeSchedule(ptn, sun, Heads(8, 8), PageSize(1), SeqlenQ(1))
	})
	if alloc > 64<<20 {
		t.Fatalf("DecodeSchedule over [16, 2^20] pages allocated %d bytes (error %v)", alloc, err)
	}
}

// TestScheduleAccessors: the accessors take no argument and never
// panic, on the zero Schedule or a built one.
func TestScheduleAccessors(t *testing.T) {
	var z Schedule
	for _, d := range []*tensor.Dense{z.SchedulerMetadata(), z.WorkCount(), z.QSplitIndices(), z.SplitCounts()} {
		if d == nil {
			t.Fatal("nil accessor result")
		}
	}
	c, _ := validBase(t, false)
	s, err := FwdScheduleFunc(c.rp, c.qi, ScheduleArgs{CuSeqlensQ: c.args.CuSeqlensQ, CuSeqlensK: c.args.CuSeqlensK,
		TotalQ: 10, TopK: 4, QheadPerKV: 2, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := []int(s.SplitCounts().Shape()); len(got) != 2 || got[0] != 10 || got[1] != 2 {
		t.Fatalf("SplitCounts shape %v, want [10 2]", got)
	}
	if got := []int(s.QSplitIndices().Shape()); got[0] != 2 || got[1] != c.qi.Shape()[1] {
		t.Fatalf("QSplitIndices shape %v", got)
	}
	if got := []int(s.SchedulerMetadata().Shape()); got[0] != s.Capacity() || got[1] != 6 {
		t.Fatalf("SchedulerMetadata shape %v", got)
	}
}

// TestErrorMessages: error messages name the argument, what was expected
// and what came, in the cases below.
func TestErrorMessages(t *testing.T) {
	c, _ := validBase(t, true)
	g := G.NewGraph()
	qn, kn, vn := gnode(t, g, "q", c.q.(*tensor.Dense)), gnode(t, g, "k", c.k.(*tensor.Dense)), gnode(t, g, "v", c.v.(*tensor.Dense))
	cuQ, cuK := gnode(t, g, "cu_q", c.args.CuSeqlensQ.(*tensor.Dense)), gnode(t, g, "cu_k", c.args.CuSeqlensK.(*tensor.Dense))
	csr, err := PackK2QCSR(gnode(t, g, "rp", c.rp.(*tensor.Dense)), gnode(t, g, "qi", c.qi.(*tensor.Dense)), TotalQ(10), TopK(4), BlkKV(128))
	if err != nil {
		t.Fatal(err)
	}
	sched, err := FwdSchedule(csr, cuQ, cuK, QheadPerKV(2), Workers(2))
	if err != nil {
		t.Fatal(err)
	}
	su := gnode(t, g, "su", c.args.SeqUsedK.(*tensor.Dense))
	_, err = SparseAttention(qn, kn, vn, csr, sched, cuQ, cuK, Paged(nil, su))
	wantArgErr(t, err, "seqused_k", "page table")

	_, err = NewDecodeWrapper(0)
	wantArgErr(t, err, "page_size", "page size")
	if strings.Contains(err.Error(), "blk_kv") {
		t.Fatalf("NewDecodeWrapper(0) names blk_kv: %v", err)
	}

	f32 := G.NewTensor(g, tensor.Float32, 2, G.WithShape(2, 3), G.WithName("f32"))
	for name, f := range map[string]func() error{
		"SparseAttention": func() error { _, err := SparseAttention(qn, kn, vn, f32, sched, cuQ, cuK); return err },
		"FwdSchedule":     func() error { _, err := FwdSchedule(f32, cuQ, cuK, QheadPerKV(2), Workers(2)); return err },
		"DecodeAttention": func() error {
			_, err := DecodeAttention(qn, kn, vn, f32, f32, f32, nil)
			return err
		},
	} {
		err := f()
		if err == nil || strings.Contains(err.Error(), "<nil>") || !strings.Contains(err.Error(), "float32") {
			t.Fatalf("%s with a float32 node: %v (want a description of the node)", name, err)
		}
	}

	// D = 0 (or unsupported) names q, not softmax_scale.
	q0, k0 := bf16T(10, 4, 0), bf16T(300, 2, 0)
	_, err = SparseAttentionFunc(q0, k0, k0, c.rp, c.qi, 4, SparseArgs{CuSeqlensQ: c.args.CuSeqlensQ, CuSeqlensK: c.args.CuSeqlensK})
	wantArgErr(t, err, "q", "head dimension")
	s := misuseSpec()
	pr := buildDecode(s)
	_, err = DecodeAttentionFunc(bf16T(4, 4, 0), bf16T(5, 2, 16, 0), bf16T(5, 2, 16, 0), nil, decodeArgs(s, pr))
	if err == nil || strings.Contains(err.Error(), "softmax_scale") || !strings.Contains(err.Error(), "head dimension") {
		t.Fatalf("decode with D = 0: %v", err)
	}
	q96 := G.NewTensor(g, BFloat16, 3, G.WithShape(10, 4, 96), G.WithName("q96"))
	_, err = SparseAttention(q96, kn, vn, csr, sched, cuQ, cuK)
	wantArgErr(t, err, "q", "head dimension")

	// NHD K: the error names k and the expected HND layout.
	nhd := func(x *tensor.Dense) *tensor.Dense {
		s := x.Shape()
		return tensor.New(tensor.WithShape(s[0], s[2], s[1], s[3]), tensor.WithBacking(validate.Backing[lowp.BFloat16](x)))
	}
	_, err = DecodeAttentionFunc(pr.q, nhd(pr.k), nhd(pr.v), nil, decodeArgs(s, pr))
	wantArgErr(t, err, "k", "HND layout [num_pages, Hkv, page_size, D]")
	pk := c.k.(*tensor.Dense)
	_, err = SparseAttentionFunc(c.q, nhd(pk), nhd(c.v.(*tensor.Dense)), c.rp, c.qi, 4, c.args)
	wantArgErr(t, err, "k", "HND")
}

// TestForwardOnlyGradients: differentiating through an op of this
// package either works or fails with an error naming the op; a LispMachine
// never reports success with zero gradients upstream of it.
func TestForwardOnlyGradients(t *testing.T) {
	build := func() (*G.ExprGraph, *G.Node, *G.Node) {
		g := G.NewGraph()
		x := G.NewMatrix(g, tensor.Float32, G.WithShape(2, 3), G.WithName("x"), G.WithValue(tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float32{1, 2, 3, 4, 5, 6}))))
		w := G.NewMatrix(g, tensor.Float32, G.WithShape(2, 3), G.WithName("w"), G.WithValue(tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float32{1, 1, 1, 1, 1, 1}))))
		y := G.Must(G.HadamardProd(x, w))
		b, err := CastToBF16(y)
		if err != nil {
			t.Fatal(err)
		}
		f, err := CastFromBF16(b)
		if err != nil {
			t.Fatal(err)
		}
		return g, w, G.Must(G.Sum(f))
	}
	checkErr := func(what string, err error) {
		t.Helper()
		var fe *ForwardOnlyError
		if !errors.As(err, &fe) && !(strings.Contains(err.Error(), "forward-only") && strings.Contains(err.Error(), "Cast")) {
			t.Fatalf("%s: error %v does not say which op is forward-only", what, err)
		}
	}
	_, w, cost := build()
	if _, err := G.Grad(cost, w); err != nil {
		checkErr("G.Grad", err)
	}
	g, w, _ := build()
	m := G.NewLispMachine(g)
	defer m.Close()
	err := m.RunAll()
	if err != nil {
		checkErr("LispMachine", err)
		return
	}
	gv, gerr := w.Grad()
	if gerr != nil {
		t.Fatalf("LispMachine succeeded without a gradient for w: %v", gerr)
	}
	for _, x := range validate.Backing[float32](gv.(*tensor.Dense)) {
		if x == 0 {
			t.Fatalf("LispMachine succeeded with zero gradients for w: %v", gv)
		}
	}
}

// TestGraphInputViews (graph side): input nodes bound to views (a
// sliced q, a fed-back schedule value bound as a slice of a larger tensor)
// give the result of their contiguous copies.
func TestGraphInputViews(t *testing.T) {
	c, _ := validBase(t, false)
	run := func(view bool) []byte {
		g := G.NewGraph()
		qd := c.q.(*tensor.Dense)
		q := G.NewTensor(g, qd.Dtype(), 3, G.WithShape(qd.Shape()...), G.WithName("q"))
		qv := tensor.Tensor(qd)
		if view {
			qv = sliceLast(qd)
		}
		if err := G.Let(q, qv); err != nil {
			t.Fatal(err)
		}
		k, v := gnode(t, g, "k", c.k.(*tensor.Dense)), gnode(t, g, "v", c.v.(*tensor.Dense))
		cuQ, cuK := gnode(t, g, "cu_q", c.args.CuSeqlensQ.(*tensor.Dense)), gnode(t, g, "cu_k", c.args.CuSeqlensK.(*tensor.Dense))
		csr, err := PackK2QCSR(gnode(t, g, "rp", c.rp.(*tensor.Dense)), gnode(t, g, "qi", c.qi.(*tensor.Dense)), TotalQ(10), TopK(4), BlkKV(128))
		if err != nil {
			t.Fatal(err)
		}
		built, err := FwdSchedule(csr, cuQ, cuK, QheadPerKV(2), Workers(2))
		if err != nil {
			t.Fatal(err)
		}
		m := G.NewTapeMachine(g)
		if err := m.RunAll(); err != nil {
			t.Fatal(err)
		}
		m.Close()
		sv := built.Value().(*tensor.Dense).Clone().(*tensor.Dense)
		sched := G.NewTensor(g, tensor.Int32, 1, G.WithShape(sv.Shape()...), G.WithName("sched_in"))
		st := tensor.Tensor(sv)
		if view {
			st = sliceLast(sv)
		}
		if err := G.Let(sched, st); err != nil {
			t.Fatal(err)
		}
		out, err := SparseAttention(q, k, v, csr, sched, cuQ, cuK, Workers(2))
		if err != nil {
			t.Fatal(err)
		}
		m = G.NewTapeMachine(g)
		defer m.Close()
		if err := m.RunAll(); err != nil {
			t.Fatalf("view=%v: %v", view, err)
		}
		return out.Value().(*tensor.Dense).Header.Raw
	}
	if !bytes.Equal(run(false), run(true)) {
		t.Fatal("graph inputs bound to views give another result")
	}
}
