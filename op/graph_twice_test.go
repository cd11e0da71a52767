package op

import (
	"errors"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestSparseAttentionScheduleMismatch checks that the values given to both
// FwdSchedule and SparseAttention are compared at graph construction: a
// different qhead_per_kv or Workers option is an *ArgError naming it, and
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
	csr, err := K2QCSR(q2k, cuQ, cuK, s.blk, 256)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := FwdSchedule(csr, cuQ, cuK, s.hq/s.hkv, 3)
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
	sched1, err := FwdSchedule(csr, cuQ, cuK, 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SparseAttention(q, k, v, csr, sched1, cuQ, cuK); !errors.As(err, &ae) || ae.Arg != "qhead_per_kv" {
		t.Fatalf("FwdSchedule(qheadPerKV = 1) with Hq/Hkv = 2: got %v, want an *ArgError naming qhead_per_kv", err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		t.Fatal(err)
	}
}
