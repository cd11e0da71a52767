package op

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sparseattn/msa/kernels/comm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// cpDecodeGraph runs one rank's decode step as one graph: the decode
// attention over the rank's pages, then ContextParallelMerge. It returns
// the merged O and LSE.
func cpDecodeGraph(c comm.Comm, s decodeSpec, pr *decodeProblem) (o, lse *tensor.Dense, err error) {
	pt, su := cpLocalPages(s, pr, c.Size(), c.Rank())
	g := G.NewGraph()
	// Each rank binds tensors of its own (a machine sets the engine of
	// the values it binds, so ranks in one process must not share them).
	in := func(name string, t *tensor.Dense) *G.Node {
		t = t.Clone().(*tensor.Dense)
		return G.NewTensor(g, t.Dtype(), t.Dims(), G.WithShape(t.Shape()...), G.WithName(name), G.WithValue(t))
	}
	q, k, v := in("q", pr.q), in("k", pr.k), in("v", pr.v)
	ptn, sun := in("page_table", pt), in("seqused_k", su)
	sched, err := DecodeSchedule(ptn, sun, Heads(s.hq, s.hkv), PageSize(s.pageSize), Workers(s.workers))
	if err != nil {
		return nil, nil, err
	}
	var q2k *G.Node
	if t := cpLocalQ2K(s, pr, c.Size(), c.Rank()); t != nil {
		q2k = in("q2k_indices", t)
	}
	att, err := DecodeAttention(q, k, v, ptn, sun, sched, q2k, BlkKV(s.blk))
	if err != nil {
		return nil, nil, err
	}
	attLSE, err := LSE(att)
	if err != nil {
		return nil, nil, err
	}
	merged, err := ContextParallelMerge(att, attLSE, c)
	if err != nil {
		return nil, nil, err
	}
	mergedLSE, err := LSE(merged)
	if err != nil {
		return nil, nil, err
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		return nil, nil, MachineError(err)
	}
	return merged.Value().(*tensor.Dense), mergedLSE.Value().(*tensor.Dense), nil
}

func TestContextParallelMergeGraph(t *testing.T) {
	for _, s := range cpDecodeSpecs() {
		pr := buildDecode(s)
		ref, err := cpRef(s, pr)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []int{1, 3} {
			cs, _ := comm.NewLocal(p, 0)
			for r, err := range comm.Each(cs, func(c comm.Comm) error {
				o, lse, err := cpDecodeGraph(c, s, pr)
				if err != nil {
					return err
				}
				if err := compareDecode(s, pr.maxV, o, lse, ref.Out, ref.LSE); err != nil {
					return err
				}
				return comm.Agree(c, "the graph's merged output", append(append([]byte(nil), o.Header.Raw...), lse.Header.Raw...))
			}) {
				if err != nil {
					t.Errorf("%v P=%d rank %d: %v", s, p, r, err)
				}
			}
		}
	}
}

func TestContextParallelMergeErrors(t *testing.T) {
	cs, _ := comm.NewLocal(1, 0)
	g := G.NewGraph()
	o := G.NewTensor(g, BFloat16, 3, G.WithShape(2, 4, 8), G.WithName("o"))
	l := G.NewTensor(g, tensor.Float32, 2, G.WithShape(2, 4), G.WithName("l"))
	bad := G.NewTensor(g, tensor.Float32, 2, G.WithShape(2, 3), G.WithName("bad"))
	f16 := G.NewTensor(g, Float16, 3, G.WithShape(2, 4, 8), G.WithName("f16"))
	for _, tc := range []struct {
		o, l *G.Node
		c    comm.Comm
		arg  string
	}{
		{o, l, nil, "comm"},
		{f16, l, cs[0], "out"},
		{o, bad, cs[0], "lse"},
		{o, o, cs[0], "lse"},
		{nil, l, cs[0], "out"},
	} {
		_, err := ContextParallelMerge(tc.o, tc.l, tc.c)
		var ae *ArgError
		if !errors.As(err, &ae) || ae.Arg != tc.arg {
			t.Errorf("got %v, want an ArgError naming %s", err, tc.arg)
		}
	}
	// A failing node aborts the group: the other rank's node fails too.
	cs, _ = comm.NewLocal(2, 0)
	errs := comm.Each(cs, func(c comm.Comm) error {
		g := G.NewGraph()
		d := 8
		if c.Rank() == 1 {
			d = 16 // the ranks' shapes differ: the all-gather sizes do not match
		}
		o := G.NewTensor(g, tensor.Float32, 3, G.WithShape(2, 4, d), G.WithName("o"), G.WithValue(tensor.New(tensor.WithShape(2, 4, d), tensor.Of(tensor.Float32))))
		l := G.NewTensor(g, tensor.Float32, 2, G.WithShape(2, 4), G.WithName("l"), G.WithValue(tensor.New(tensor.WithShape(2, 4), tensor.Of(tensor.Float32))))
		n, err := ContextParallelMerge(o, l, c)
		if err != nil {
			return err
		}
		m := G.NewTapeMachine(g)
		defer m.Close()
		if err := m.RunAll(); err != nil {
			return MachineError(err)
		}
		return fmt.Errorf("ran: %v", n.Value().Shape())
	})
	for r, err := range errs {
		var ce *CommError
		if !errors.As(err, &ce) {
			t.Errorf("rank %d with mismatched shapes: got %v, want a CommError", r, err)
		}
	}
}
