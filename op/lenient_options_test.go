package op

import (
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// sparseGraphNodes returns the input, CSR and schedule nodes of a small
// SparseAttention graph (bf16 dense K/V).
func sparseGraphNodes(t *testing.T) (g *G.ExprGraph, q, k, v, csr, sched, cuQ, cuK *G.Node) {
	t.Helper()
	s := sparseSpec{seed: 3, seqQ: []int{5, 3}, seqK: []int{200, 90}, hq: 4, hkv: 2, d: 64, topK: 2, blk: 128,
		qDt: "bf16", kvDt: "bf16", partial: tensor.Float32}
	pr := buildSparse(s)
	g = G.NewGraph()
	in := func(name string, x *tensor.Dense) *G.Node { return G.NodeFromAny(g, x, G.WithName(name)) }
	q, k, v = in("q", pr.q), in("k", pr.k), in("v", pr.v)
	cuQ, cuK = in("cu_q", pr.cuQ), in("cu_k", pr.cuK)
	csr, err := K2QCSR(in("q2k", pr.q2k), cuQ, cuK, BlkKV(s.blk), MaxSeqlenK(256))
	if err != nil {
		t.Fatal(err)
	}
	sched, err = FwdSchedule(csr, cuQ, cuK, QheadPerKV(2), Workers(2))
	if err != nil {
		t.Fatal(err)
	}
	return g, q, k, v, csr, sched, cuQ, cuK
}

// wantNames checks that err is an *ArgError naming arg whose text names
// every one of names.
func wantNames(t *testing.T, err error, arg string, names ...string) {
	t.Helper()
	wantArgErr(t, err, arg, names[0])
	for _, n := range names[1:] {
		if !strings.Contains(err.Error(), n) {
			t.Fatalf("error %v: want it to name %q", err, n)
		}
	}
}

// TestConflictingOptions: the graph constructors took conflicting options
// silently (the last of two values won, a fixed split with splitting
// disabled ran unsplit, Paged(nil, nil) ran dense, and PartialDtype(Int32)
// or MMADtypes(Float32, ...) failed only when the graph ran). Each is now
// an *ArgError at construction naming the options; an option repeated with
// the same value is still accepted.
func TestConflictingOptions(t *testing.T) {
	g, q, k, v, csr, sched, cuQ, cuK := sparseGraphNodes(t)
	q2k := G.NewTensor(g, tensor.Int32, 3, G.WithShape(2, 8, 2), G.WithName("q2k2"))
	_, err := K2QCSR(q2k, cuQ, cuK, BlkKV(64), MaxSeqlenK(256), BlkKV(128))
	wantNames(t, err, "BlkKV", "BlkKV(64)", "BlkKV(128)")
	if _, err := K2QCSR(q2k, cuQ, cuK, BlkKV(64), MaxSeqlenK(256), BlkKV(64)); err != nil {
		t.Fatalf("the same option twice with one value: %v", err)
	}
	_, err = SparseAttention(q, k, v, csr, sched, cuQ, cuK, Causal(), SoftmaxScale(0.1), SoftmaxScale(0.2))
	wantNames(t, err, "SoftmaxScale", "SoftmaxScale(0.1)", "SoftmaxScale(0.2)")
	_, err = SparseAttention(q, k, v, csr, sched, cuQ, cuK, MMADtypes(BFloat16, BFloat16), MMADtypes(BFloat16, Float8E4M3FN))
	wantNames(t, err, "MMADtypes", "MMADtypes(bfloat16, bfloat16)", "MMADtypes(bfloat16, float8_e4m3fn)")

	_, err = SparseAttention(q, k, v, csr, sched, cuQ, cuK, Paged(nil, nil))
	wantNames(t, err, "Paged", "page_table", "Paged(nil, nil)")
	_, err = SparseAttention(q, k, v, csr, sched, cuQ, cuK, PartialDtype(tensor.Int32))
	wantNames(t, err, "partial_dtype", "int32")
	_, err = SparseAttention(q, k, v, csr, sched, cuQ, cuK, MMADtypes(tensor.Float32, BFloat16))
	wantNames(t, err, "qk_dtype", "float32")
	_, err = SparseAttention(q, k, v, csr, sched, cuQ, cuK, MMADtypes(BFloat16, tensor.Float32))
	wantNames(t, err, "pv_dtype", "float32")
	if _, err := SparseAttention(q, k, v, csr, sched, cuQ, cuK, PartialDtype(tensor.Float32), MMADtypes(BFloat16, BFloat16)); err != nil {
		t.Fatal(err)
	}

	pt := G.NewTensor(g, tensor.Int32, 2, G.WithShape(2, 8), G.WithName("pt"))
	su := G.NewTensor(g, tensor.Int32, 1, G.WithShape(2), G.WithName("su"))
	_, err = DecodeSchedule(pt, su, Heads(4, 2), PageSize(16), FixedSplitSize(2), DisableSplitKV())
	wantNames(t, err, "FixedSplitSize/DisableSplitKV", "FixedSplitSize(2)", "DisableSplitKV()")
	if _, err := DecodeSchedule(pt, su, Heads(4, 2), PageSize(16), FixedSplitSize(0), DisableSplitKV()); err != nil {
		t.Fatalf("FixedSplitSize(0) is the automatic rule, which DisableSplitKV overrides: %v", err)
	}
	_, err = DecodeSchedule(pt, su, Heads(4, 2), PageSize(16), Heads(8, 2))
	wantNames(t, err, "Heads", "Heads(4, 2)", "Heads(8, 2)")
}
