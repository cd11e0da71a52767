package op

import (
	"errors"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestSparseAttentionScheduleMismatch checks that the values given to both
// FwdSchedule and SparseAttention are compared at graph construction: a
// different QheadPerKV or Workers option is an *ArgError naming it, and
// an absent Workers option takes the schedule's worker count.
func TestSparseAttentionScheduleMismatch(t *testing.T) {
	s := sparseSpec{seed: 3, seqQ: []int{6, 4}, seqK: []int{200, 100}, hq: 4, hkv: 2, d: 64, topK: 4, blk: 128,
		qDt: "bf16", kvDt: "bf16", partial: BFloat16}
	pr := buildSparse(s)
	g := G.NewGraph()
	in := func(name string, v *tensor.Dense) *G.Node {
		nd := G.NewTensor(g, v.Dtype(), v.Dims(), G.WithShape(v.Shape()...), G.WithName(name))
		if err := G.Let(nd, v); err != nil {
			t.Fatal(err)
		}
		return nd
	}
	q, k, v := in("q", pr.q), in("k", pr.k), in("v", pr.v)
	cuQ, cuK, q2k := in("cu_q", pr.cuQ), in("cu_k", pr.cuK), in("q2k", pr.q2k)
	csr, err := K2QCSR(q2k, cuQ, cuK, BlkKV(s.blk), MaxSeqlenK(256))
	if err != nil {
		t.Fatal(err)
	}
	sched, err := FwdSchedule(csr, cuQ, cuK, QheadPerKV(s.hq/s.hkv), Workers(3))
	if err != nil {
		t.Fatal(err)
	}
	var ae *ArgError
	if _, err := SparseAttention(q, k, v, csr, sched, cuQ, cuK, Workers(2)); !errors.As(err, &ae) || ae.Arg != "Workers" {
		t.Fatalf("Workers(2) after FwdSchedule(workers = 3): got %v, want an *ArgError naming Workers", err)
	}
	out, err := SparseAttention(q, k, v, csr, sched, cuQ, cuK)
	if err != nil {
		t.Fatal(err)
	}
	if w := out.Op().(*sparseAttnOp).cfg.workers; w != 3 {
		t.Fatalf("workers without the option = %d, want the schedule's 3", w)
	}
	if _, err := SparseAttention(q, k, v, csr, sched, cuQ, cuK, Workers(3)); err != nil {
		t.Fatalf("matching Workers(3): %v", err)
	}
	sched1, err := FwdSchedule(csr, cuQ, cuK, QheadPerKV(1), Workers(3))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SparseAttention(q, k, v, csr, sched1, cuQ, cuK); !errors.As(err, &ae) || ae.Arg != "QheadPerKV" {
		t.Fatalf("FwdSchedule(QheadPerKV(1)) with Hq/Hkv = 2: got %v, want an *ArgError naming QheadPerKV", err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
}

// TestGraphOptionRules checks the one option style of the graph
// constructors: an option that does not apply and a missing required option
// are *ArgErrors naming the option, and PackK2QCSR derives total_q.
func TestGraphOptionRules(t *testing.T) {
	c, _ := validBase(t, false)
	g := G.NewGraph()
	in := func(name string, v tensor.Tensor) *G.Node {
		d := v.(*tensor.Dense)
		nd := G.NewTensor(g, d.Dtype(), d.Dims(), G.WithShape(d.Shape()...), G.WithName(name))
		if err := G.Let(nd, d); err != nil {
			t.Fatal(err)
		}
		return nd
	}
	cuQ, cuK := in("cu_q", c.args.CuSeqlensQ), in("cu_k", c.args.CuSeqlensK)
	q2k := in("q2k", i32T([]int{2, 10, 4}))
	pt, su := in("pt", i32T([]int{2, 2})), in("su", i32T([]int{2}))
	rp, qi := in("rp", c.rp), in("qi", c.qi)
	for _, tc := range []struct {
		name, arg string
		build     func() (*G.Node, error)
	}{
		{"K2QCSR without MaxSeqlenK", "MaxSeqlenK", func() (*G.Node, error) { return K2QCSR(q2k, cuQ, cuK, BlkKV(128)) }},
		{"K2QCSR with Causal", "Causal", func() (*G.Node, error) { return K2QCSR(q2k, cuQ, cuK, MaxSeqlenK(256), Causal()) }},
		{"PackK2QCSR without TopK", "TopK", func() (*G.Node, error) { return PackK2QCSR(rp, qi) }},
		{"PackK2QCSR with Workers", "Workers", func() (*G.Node, error) { return PackK2QCSR(rp, qi, TopK(4), Workers(2)) }},
		{"DecodeSchedule without Heads", "Heads", func() (*G.Node, error) { return DecodeSchedule(pt, su, PageSize(16)) }},
		{"DecodeSchedule without PageSize", "PageSize", func() (*G.Node, error) { return DecodeSchedule(pt, su, Heads(4, 2)) }},
		{"DecodeSchedule with Temperature", "Temperature", func() (*G.Node, error) {
			return DecodeSchedule(pt, su, Heads(4, 2), PageSize(16), Temperature(2))
		}},
		{"TopKBlocks without TopK", "TopK", func() (*G.Node, error) {
			return TopKBlocks(in("scores", tensor.New(tensor.WithShape(2, 10, 2), tensor.Of(tensor.Float32))))
		}},
		{"zero Option", "opts", func() (*G.Node, error) { return K2QCSR(q2k, cuQ, cuK, Option{}) }},
	} {
		_, err := tc.build()
		var ae *ArgError
		if !errors.As(err, &ae) || ae.Arg != tc.arg {
			t.Errorf("%s: got %v, want an *ArgError naming %s", tc.name, err, tc.arg)
		}
	}
	csr, err := PackK2QCSR(rp, qi, TopK(4))
	if err != nil {
		t.Fatal(err)
	}
	if l := csr.Op().(*packCSROp).l; l.TotalQ != 10 || l.TopK != 4 || l.BlkKV != 128 {
		t.Fatalf("PackK2QCSR(TopK(4)) layout %+v, want total_q 10 (derived), topK 4, blk_kv 128", l)
	}
}
