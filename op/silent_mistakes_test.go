package op

import (
	"errors"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// transpose01 returns x [a, b, c] laid out as [b, a, c] (a copy).
func transpose01(t *testing.T, x *tensor.Dense) *tensor.Dense {
	t.Helper()
	y := x.Clone().(*tensor.Dense)
	if err := y.T(1, 0, 2); err != nil {
		t.Fatal(err)
	}
	if err := y.Transpose(); err != nil {
		t.Fatal(err)
	}
	return y
}

// TestTransposedQNamesLayout: q given as [Hq, total_q, D] instead of
// [total_q, Hq, D] failed with an error about qhead_per_kv that did not
// state q's layout. The error now states the layouts in letters before the
// ratio and names q as laid out [Hq, total_q, D], on the prefill and
// decode entry points.
func TestTransposedQNamesLayout(t *testing.T) {
	c, _ := validBase(t, false) // q [10, 4, 128], k Hkv = 2
	_, err := SparseAttentionFunc(transpose01(t, c.q.(*tensor.Dense)), c.k, c.v, c.rp, c.qi, c.topK, c.args)
	var ne *NotImplementedError
	if !errors.As(err, &ne) {
		t.Fatalf("transposed q: %v, want a *NotImplementedError (Hq/Hkv = 5)", err)
	}
	wantLayoutFirst(t, err)

	// q [B * seqlen_q, Hq, D] = [2, 8, 64], Hkv 4
	s := decodeSpec{seed: 5, seqused: []int{70}, seqlenQ: 2, hq: 8, hkv: 4, d: 64, pageSize: 16, dt: "bf16", workers: 2}
	pr := buildDecode(s)
	_, err = DecodeAttentionFunc(transpose01(t, pr.q), pr.k, pr.v, nil, decodeArgs(s, pr))
	wantArgErr(t, err, "q", "[total_q, Hq, D]")
	wantLayoutFirst(t, err)

	// Rows other than B * seqlen_q: the layout in letters, then the count.
	_, err = DecodeAttentionFunc(bf16T(3, 8, 64), pr.k, pr.v, nil, decodeArgs(s, pr))
	wantArgErr(t, err, "q", "[B * seqlen_q, Hq, D] with B * seqlen_q = 1 * 2 = 2")
}

// wantLayoutFirst checks that err states q's layout in letters before the
// derived qhead_per_kv and suggests the transposed layout.
func wantLayoutFirst(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	lay := strings.Index(msg, "q [total_q, Hq, D]")
	if lay < 0 || !strings.Contains(msg, "is q laid out [Hq, total_q, D]?") {
		t.Fatalf("error %q: want q's layout and the transposition named", msg)
	}
	if r := strings.Index(msg, "qhead_per_kv"); r >= 0 && r < lay {
		t.Fatalf("error %q: the ratio comes before the layout", msg)
	}
}

// TestUnnamedNodeDesc: an unnamed input node was described as
// "%!s(<nil>)()" (Gorgonia's name of a node without op or name).
func TestUnnamedNodeDesc(t *testing.T) {
	g := G.NewGraph()
	x := G.NewTensor(g, tensor.Int32, 2, G.WithShape(2, 3))
	d := nodeDesc(x)
	if strings.Contains(d, "%!") || !strings.Contains(d, "unnamed input node") {
		t.Fatalf("nodeDesc of an unnamed node: %q", d)
	}
	if d := nodeDesc(G.NewTensor(g, tensor.Int32, 2, G.WithShape(2, 3), G.WithName("rp"))); d != `input node "rp" (int32 (2, 3))` {
		t.Fatalf("nodeDesc of a named node: %q", d)
	}
}

// TestScoredCausalMismatch: a SparseAttention node after causal BlockScores
// without Causal() attended to the later keys of its diagonal blocks, and
// Causal() after non-causal scores masked whole selected blocks, both
// silently. The attention must now have the causality of the BlockScores
// node that selected its blocks; an error names Causal and both stages.
func TestScoredCausalMismatch(t *testing.T) {
	const totalQ, hq, hkv, d, keys = 16, 2, 1, 64, 300
	for _, c := range []struct{ scored, attn bool }{{true, true}, {false, false}, {true, false}, {false, true}} {
		g := G.NewGraph()
		in := func(name string, x *tensor.Dense) *G.Node { return G.NodeFromAny(g, x, G.WithName(name)) }
		q := in("q", bf16T(totalQ, hq, d))
		k, v := in("k", bf16T(keys, hkv, d)), in("v", bf16T(keys, hkv, d))
		cuQ := in("cu_q", i32T([]int{2}, 0, totalQ))
		cuK := in("cu_k", i32T([]int{2}, 0, keys))
		var scoreOpts, attnOpts []Option
		if c.scored {
			scoreOpts = append(scoreOpts, Causal())
		}
		if c.attn {
			attnOpts = append(attnOpts, Causal())
		}
		sc, err := BlockScores(q, k, cuQ, cuK, append(scoreOpts, MaxSeqlenK(keys))...)
		if err != nil {
			t.Fatal(err)
		}
		q2k, err := TopKBlocks(sc, TopK(2))
		if err != nil {
			t.Fatal(err)
		}
		csr, err := K2QCSR(q2k, cuQ, cuK, MaxSeqlenK(keys))
		if err != nil {
			t.Fatal(err)
		}
		sched, err := FwdSchedule(csr, cuQ, cuK, QheadPerKV(hq/hkv))
		if err != nil {
			t.Fatal(err)
		}
		_, err = SparseAttention(q, k, v, csr, sched, cuQ, cuK, attnOpts...)
		if c.scored == c.attn {
			if err != nil {
				t.Fatalf("scored causal=%v, attention causal=%v: %v", c.scored, c.attn, err)
			}
			continue
		}
		wantNames(t, err, "Causal", "BlockScores", "SparseAttention")
	}
}
