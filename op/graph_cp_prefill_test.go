package op

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sparseattn/msa/kernels/comm"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// cpPrefillGraph runs rank c's share of s as a graph: ContextParallelPrefill
// over the rank's inputs and LSE of it, run twice (the runs must agree bit
// for bit).
func cpPrefillGraph(c comm.Comm, s sparseSpec, pr *sparseProblem, strat CPStrategy) (*CPShard, *Result, error) {
	sh, q, k, v, q2k := cpRankInputs(s, pr, c.Size(), c.Rank())
	g := G.NewGraph()
	in := func(name string, t *tensor.Dense) *G.Node {
		return G.NewTensor(g, t.Dtype(), t.Dims(), G.WithShape(t.Shape()...), G.WithName(name), G.WithValue(t))
	}
	args := CPPrefillArgs{CuSeqlensQ: validate.Int32s(pr.cuQ), CuSeqlensK: validate.Int32s(pr.cuK), BlkKV: s.blk, Causal: s.causal, Workers: 2, Strategy: strat}
	att, err := ContextParallelPrefill(in("q", q), in("k", k), in("v", v), in("q2k_indices", q2k), c, args)
	if err != nil {
		return nil, nil, err
	}
	lse, err := LSE(att)
	if err != nil {
		return nil, nil, err
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	var res [2]*Result
	for i := range res {
		if err := m.RunAll(); err != nil {
			return nil, nil, MachineError(err)
		}
		res[i] = &Result{Out: att.Value().(*tensor.Dense).Clone().(*tensor.Dense), LSE: lse.Value().(*tensor.Dense).Clone().(*tensor.Dense)}
		m.Reset()
	}
	if string(res[0].Out.Header.Raw) != string(res[1].Out.Header.Raw) || string(res[0].LSE.Header.Raw) != string(res[1].LSE.Header.Raw) {
		return nil, nil, fmt.Errorf("rank %d: two graph runs differ", c.Rank())
	}
	return sh, res[0], nil
}

// checkCPPrefillGraph compares the graph's result on rank c with
// single-process prefill; the in-process test and the MPI run share it.
func checkCPPrefillGraph(c comm.Comm, s sparseSpec, strat CPStrategy) error {
	pr := buildSparse(s)
	sh, got, err := cpPrefillGraph(c, s, pr, strat)
	if err != nil {
		return err
	}
	rp, qi, err := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, s.blk)
	if err != nil {
		return err
	}
	want, err := SparseAttentionFunc(pr.q, pr.k, pr.v, rp, qi, s.topK, SparseArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK, BlkKV: s.blk, Causal: s.causal, Workers: 2})
	if err != nil {
		return err
	}
	if err := comparePrefill(s, pr, c.Size(), sh, got, want); err != nil {
		return fmt.Errorf("graph: %v %v on rank %d of %d: %w", s, strat, c.Rank(), c.Size(), err)
	}
	return nil
}

func TestContextParallelPrefillGraph(t *testing.T) {
	for _, s := range cpPrefillSpecs() {
		for _, p := range []int{1, 2, 3} {
			cs, _ := comm.NewLocal(p, 0)
			for r, err := range comm.Each(cs, func(c comm.Comm) error { return checkCPPrefillGraph(c, s, CPAuto) }) {
				if err != nil {
					t.Errorf("P=%d rank %d: %v", p, r, err)
				}
			}
		}
	}
}

// Construction rejects a nil comm, wrong dtypes and inputs that are not the
// rank's shard; a run whose ranks disagree fails on every rank.
func TestContextParallelPrefillErrors(t *testing.T) {
	s := cpPrefillSpecs()[0]
	pr := buildSparse(s)
	cs, _ := comm.NewLocal(2, 0)
	_, q, k, v, q2k := cpRankInputs(s, pr, 2, 0)
	g := G.NewGraph()
	in := func(name string, t *tensor.Dense) *G.Node {
		return G.NewTensor(g, t.Dtype(), t.Dims(), G.WithShape(t.Shape()...), G.WithName(name), G.WithValue(t))
	}
	qn, kn, vn, sn := in("q", q), in("k", k), in("v", v), in("q2k", q2k)
	args := CPPrefillArgs{CuSeqlensQ: validate.Int32s(pr.cuQ), CuSeqlensK: validate.Int32s(pr.cuK), BlkKV: s.blk, Causal: s.causal}
	var ae *ArgError
	if _, err := ContextParallelPrefill(qn, kn, vn, sn, nil, args); !errors.As(err, &ae) || ae.Arg != "comm" {
		t.Errorf("nil comm: got %v", err)
	}
	if _, err := ContextParallelPrefill(qn, kn, vn, kn, cs[0], args); !errors.As(err, &ae) || ae.Arg != "q2k_indices" {
		t.Errorf("bf16 q2k: got %v", err)
	}
	// Rank 1's shard has other rows than rank 0's.
	if _, err := ContextParallelPrefill(qn, kn, vn, sn, cs[1], args); !errors.As(err, &ae) || ae.Arg != "q" {
		t.Errorf("rank 0's inputs on rank 1: got %v", err)
	}
	bad := args
	bad.CuSeqlensK = []int32{0}
	if _, err := ContextParallelPrefill(qn, kn, vn, sn, cs[0], bad); !errors.As(err, &ae) || ae.Arg != "cu_seqlens_k" {
		t.Errorf("short cu_seqlens_k: got %v", err)
	}
	// Ranks with different strategies: the same MismatchError on both.
	errs := comm.Each(cs, func(c comm.Comm) error {
		_, q, k, v, q2k := cpRankInputs(s, pr, 2, c.Rank())
		g := G.NewGraph()
		in := func(name string, t *tensor.Dense) *G.Node {
			return G.NewTensor(g, t.Dtype(), t.Dims(), G.WithShape(t.Shape()...), G.WithName(name), G.WithValue(t))
		}
		a := args
		a.Strategy = CPStrategy(1 + c.Rank())
		_, err := ContextParallelPrefill(in("q", q), in("k", k), in("v", v), in("q2k", q2k), c, a)
		if err != nil {
			return err
		}
		m := G.NewTapeMachine(g)
		defer m.Close()
		if err := m.RunAll(); err != nil {
			return MachineError(err)
		}
		return nil
	})
	var me *comm.MismatchError
	for r, err := range errs {
		if !errors.As(err, &me) {
			t.Errorf("rank %d, strategies differing: got %v, want a comm.MismatchError", r, err)
		}
	}
}
