package op

import (
	"testing"

	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/op/internal/decode"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// sparseNodeInputs is a BFloat16 sparse prefill node (dense or paged K/V)
// of buildSparse's problem and the host values of its inputs, the CSR and
// schedule computed by its planning nodes.
func sparseNodeInputs(t *testing.T, paged bool) (*sparseAttnOp, []*tensor.Dense) {
	t.Helper()
	pr := buildSparse(sparseSpec{seed: 5, seqQ: []int{6, 4}, seqK: []int{200, 100}, hq: 4, hkv: 2, d: 128, topK: 4, blk: 128,
		paged: paged, qDt: "bf16", kvDt: "bf16", partial: BFloat16})
	g := G.NewGraph()
	cq, ck := gnode(t, g, "cu_q", pr.cuQ), gnode(t, g, "cu_k", pr.cuK)
	csr, err := K2QCSR(gnode(t, g, "q2k", pr.q2k), cq, ck, BlkKV(128), MaxSeqlenK(256))
	if err != nil {
		t.Fatal(err)
	}
	sched, err := FwdSchedule(csr, cq, ck, QheadPerKV(2), Workers(2))
	if err != nil {
		t.Fatal(err)
	}
	var opts []Option
	if paged {
		opts = append(opts, Paged(gnode(t, g, "pt", pr.pageTable), gnode(t, g, "su", pr.seqused)))
	}
	node, err := SparseAttention(gnode(t, g, "q", pr.q), gnode(t, g, "k", pr.k), gnode(t, g, "v", pr.v), csr, sched, cq, ck, opts...)
	if err != nil {
		t.Fatal(err)
	}
	packed, err := csr.Op().Do(pr.q2k, pr.cuQ, pr.cuK)
	if err != nil {
		t.Fatal(err)
	}
	sv, err := sched.Op().Do(packed, pr.cuQ, pr.cuK)
	if err != nil {
		t.Fatal(err)
	}
	ts := []*tensor.Dense{pr.q, pr.k, pr.v, packed.(*tensor.Dense), sv.(*tensor.Dense), pr.cuQ, pr.cuK}
	if paged {
		ts = append(ts, pr.pageTable, pr.seqused)
	}
	return node.Op().(*sparseAttnOp), ts
}

// TestValidationAllocatesNothing: the validation of a valid call allocates
// nothing where a graph node repeats it on every run.
//   - prefill: the value rules of a sparse prefill node's metadata
//     (recheck: cu_seqlens, paged key lengths and pages, the CSR against
//     its row numbering, the schedule), after one full validation (op.call,
//     which builds the plan structures the rules then rewrite in place);
//   - decode: a decode node's whole validation (q, k, v, the metadata and
//     the schedule: decodeQKVLayout and prepareInto, as its CPU Do and its
//     CUDA path run them);
//   - cast: a cast node's check of its input.
func TestValidationAllocatesNothing(t *testing.T) {
	for _, paged := range []bool{false, true} {
		name := "prefill dense"
		if paged {
			name = "prefill paged"
		}
		t.Run(name, func(t *testing.T) {
			op, ts := sparseNodeInputs(t, paged)
			h := &op.host
			sc, sl, err := op.call("SparseAttention", func(i int, _ string, _ bool) (*tensor.Dense, error) { return ts[i], nil })
			if err != nil {
				t.Fatal(err)
			}
			h.sc = *sc
			h.sc.p.CSR = &h.sc.csr
			if !op.recheck(h, ts, sl) {
				t.Fatal("the value rules refuse the valid call")
			}
			if n := testing.AllocsPerRun(20, func() { op.recheck(h, ts, sl) }); n != 0 {
				t.Errorf("%v allocations per validation, want 0", n)
			}
		})
	}

	t.Run("decode", func(t *testing.T) {
		const pages, page = 4, 64
		g := G.NewGraph()
		ptv, suv := i32T([]int{1, pages}, 0, 1, 2, 3), i32T([]int{1}, 200)
		pt, su := gnode(t, g, "pt", ptv), gnode(t, g, "su", suv)
		sched, err := DecodeSchedule(pt, su, Heads(16, 1), PageSize(page))
		if err != nil {
			t.Fatal(err)
		}
		q, k, v := bf16T(1, 16, 128), bf16T(pages, 1, page, 128), bf16T(pages, 1, page, 128)
		node, err := DecodeAttention(gnode(t, g, "q", q), gnode(t, g, "k", k), gnode(t, g, "v", v), pt, su, sched, nil)
		if err != nil {
			t.Fatal(err)
		}
		op := node.Op().(*decodeAttnOp)
		sv, err := sched.Op().Do(ptv, suv)
		if err != nil {
			t.Fatal(err)
		}
		svd := sv.(*tensor.Dense)
		var m decode.Meta
		var s plan.DecodeSchedule
		check := func() error {
			c := validate.Checker{Fn: "DecodeAttention"}
			qd, kd, _ := decodeQKVLayout(&c, q, k, v, HND, true)
			if c.Err != nil {
				return c.Err
			}
			return op.prepareInto(&c, &m, &s, qd, kd, ptv, suv, svd, nil)
		}
		if err := check(); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(20, func() { _ = check() }); n != 0 {
			t.Errorf("%v allocations per validation, want 0", n)
		}
	})

	t.Run("cast", func(t *testing.T) {
		x := tensor.New(tensor.WithShape(4, 300), tensor.WithBacking(make([]float32, 1200)))
		node, err := CastToBF16(gnode(t, G.NewGraph(), "x", x))
		if err != nil {
			t.Fatal(err)
		}
		op := node.Op().(*castOp)
		var in tensor.Tensor = x
		if _, err := op.check(in); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(20, func() { _, _ = op.check(in) }); n != 0 {
			t.Errorf("%v allocations per validation, want 0", n)
		}
	})
}
