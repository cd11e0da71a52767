package op

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// everyBlock returns rc with q2k listing every block of each query's
// sequence (causal masking is then the reference's own, not the list's).
func everyBlock(rc refCase) *refCase {
	totalQ := int(rc.cuQ[len(rc.cuQ)-1])
	rc.topK = 1
	for _, n := range rc.seqK {
		rc.topK = max(rc.topK, validate.CeilDiv(n, rc.blk))
	}
	rc.q2k = make([]int32, rc.hkv*totalQ*rc.topK)
	for h := 0; h < rc.hkv; h++ {
		for b := 0; b < rc.batch; b++ {
			for q := rc.cuQ[b]; q < rc.cuQ[b+1]; q++ {
				row := rc.q2k[(h*totalQ+int(q))*rc.topK:][:rc.topK]
				for j := range row {
					row[j] = -1
					if j < validate.CeilDiv(rc.seqK[b], rc.blk) {
						row[j] = int32(j)
					}
				}
			}
		}
	}
	return &rc
}

// denseSpecs are ragged batches with an empty sequence, more queries than
// keys (the first queries see nothing under causal masking), one key, GQA
// and keys past a block edge.
func denseSpecs() []sparseSpec {
	var out []sparseSpec
	for i, sh := range []struct{ seqQ, seqK []int }{
		{[]int{5, 0, 37}, []int{300, 0, 190}},
		{[]int{40, 3}, []int{20, 129}},
		{[]int{1, 64}, []int{1, 64}},
	} {
		for _, causal := range []bool{false, true} {
			out = append(out, sparseSpec{seed: uint64(60 + i), seqQ: sh.seqQ, seqK: sh.seqK, hq: 4, hkv: 2, d: 64,
				blk: 64, causal: causal, qDt: "bf16", kvDt: "bf16", partial: tensor.Float32})
		}
	}
	return out
}

// TestDenseAttentionMatchesReference compares DenseAttentionFunc with the
// float64 reference over every key (BFloat16 and float32 operands) and
// DenseAttention's value with the eager result bit for bit.
func TestDenseAttentionMatchesReference(t *testing.T) {
	for _, s := range denseSpecs() {
		t.Run(fmt.Sprintf("%v/%v/causal=%v", s.seqQ, s.seqK, s.causal), func(t *testing.T) {
			opts := []Option{BlkKV(s.blk), PartialDtype(s.partial), Workers(2)}
			if s.causal {
				opts = append(opts, Causal())
			}
			pr := buildSparse(s)
			res, err := DenseAttentionFunc(pr.q, pr.k, pr.v, pr.cuQ, pr.cuK, opts...)
			if err != nil {
				t.Fatal(err)
			}
			pr.ref = *everyBlock(pr.ref)
			checkAgainstReference(t, s, pr, res)
			denseGraphSame(t, pr.q, pr.k, pr.v, pr.cuQ, pr.cuK, res, append(opts, MaxSeqlenK(300))...)

			fp := newF32Problem(s)
			res, err = DenseAttentionFunc(fp.q, fp.k, fp.v, fp.cuQ, fp.cuK, opts...)
			if err != nil {
				t.Fatal(err)
			}
			checkF32EveryKey(t, fp, res)
			denseGraphSame(t, fp.q, fp.k, fp.v, fp.cuQ, fp.cuK, res, append(opts, MaxSeqlenK(300))...)
		})
	}
}

// denseGraphSame runs DenseAttention on the tensors and compares its value
// with want's output bit for bit.
func denseGraphSame(t *testing.T, q, k, v, cuQ, cuK *tensor.Dense, want *Result, opts ...Option) {
	t.Helper()
	g := G.NewGraph()
	in := func(name string, x *tensor.Dense) *G.Node { return G.NodeFromAny(g, x, G.WithName(name)) }
	out, err := DenseAttention(in("q", q), in("k", k), in("v", v), in("cu_q", cuQ), in("cu_k", cuK), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := runOnce(g); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Value().(*tensor.Dense).Header.Raw, want.Out.Header.Raw) {
		t.Fatal("DenseAttention's value differs from DenseAttentionFunc's output")
	}
}

// TestDenseAttentionRefusals: sequences past 64 blocks, options of no
// stage, a missing MaxSeqlenK and a longer sequence at run time are
// errors naming the argument.
func TestDenseAttentionRefusals(t *testing.T) {
	s := sparseSpec{seed: 70, seqQ: []int{4}, seqK: []int{300}, hq: 2, hkv: 1, d: 64, blk: 64, qDt: "bf16", kvDt: "bf16"}
	pr := buildSparse(s)
	_, err := DenseAttentionFunc(pr.q, pr.k, pr.v, pr.cuQ, pr.cuK, BlkKV(4))
	wantNames(t, err, "max_seqlen_k", "64 * blk_kv = 256")
	_, err = DenseAttentionFunc(pr.q, pr.k, pr.v, pr.cuQ, pr.cuK, TopK(2))
	wantNames(t, err, "TopK", "DenseAttentionFunc")
	_, err = DenseAttentionFunc(pr.q, pr.k, pr.v, pr.cuQ, pr.cuK, SharedKV())
	wantNames(t, err, "SharedKV", "DenseAttentionFunc")
	_, err = DenseAttentionFunc(pr.q, pr.k, pr.v, pr.cuQ, pr.cuK, MaxSeqlenK(100))
	wantNames(t, err, "max_seqlen_k", "DenseAttentionFunc (SparseAttentionFunc)")
	// A generous bound is only a bound: the block lists follow the lengths.
	if _, err := DenseAttentionFunc(pr.q, pr.k, pr.v, pr.cuQ, pr.cuK, MaxSeqlenK(1<<20)); err != nil {
		t.Fatalf("MaxSeqlenK(1 << 20) over 300 keys: %v", err)
	}

	g := G.NewGraph()
	in := func(name string, x *tensor.Dense) *G.Node { return G.NodeFromAny(g, x, G.WithName(name)) }
	q, k, v, cuQ, cuK := in("q", pr.q), in("k", pr.k), in("v", pr.v), in("cu_q", pr.cuQ), in("cu_k", pr.cuK)
	_, err = DenseAttention(q, k, v, cuQ, cuK)
	wantNames(t, err, "MaxSeqlenK", "DenseAttention")
	_, err = DenseAttention(q, k, v, cuQ, cuK, MaxSeqlenK(300), BlkKV(4))
	wantNames(t, err, "max_seqlen_k", "64 * blk_kv = 256")
	_, err = DenseAttention(q, k, v, cuQ, cuK, MaxSeqlenK(300), Reduce(ReduceMean))
	wantNames(t, err, "Reduce", "DenseAttention")
	out, err := DenseAttention(q, k, v, cuQ, cuK, MaxSeqlenK(128), BlkKV(64))
	if err != nil {
		t.Fatal(err)
	}
	err = runOnce(g)
	var ae *ArgError
	if !errors.As(MachineError(err), &ae) || ae.Arg != "cu_seqlens_k (sequence 0)" {
		t.Fatalf("a 300-key sequence after MaxSeqlenK(128): %v (node %v)", err, out)
	}
}

// runOnce runs g once on a TapeMachine.
func runOnce(g *G.ExprGraph) error {
	m := G.NewTapeMachine(g)
	defer m.Close()
	return m.RunAll()
}

// TestDefaultSoftmaxScale: SoftmaxScale(DefaultSoftmaxScale(D)) gives the
// bits of the absent option (the zero value's default); another scale
// does not.
func TestDefaultSoftmaxScale(t *testing.T) {
	s := sparseSpec{seed: 71, seqQ: []int{5}, seqK: []int{90}, hq: 2, hkv: 1, d: 64, blk: 64, qDt: "bf16", kvDt: "bf16"}
	pr := buildSparse(s)
	res := map[float64]*Result{}
	for _, x := range []float64{0, DefaultSoftmaxScale(64), 0.2} {
		r, err := DenseAttentionFunc(pr.q, pr.k, pr.v, pr.cuQ, pr.cuK, SoftmaxScale(x))
		if err != nil {
			t.Fatal(err)
		}
		res[x] = r
	}
	sameResult(t, "DefaultSoftmaxScale(64) vs 0", res[0], res[DefaultSoftmaxScale(64)])
	if bytes.Equal(res[0].LSE.Header.Raw, res[0.2].LSE.Header.Raw) {
		t.Fatal("softmax scale 0.2 gives the default's LSE")
	}
}

// checkF32EveryKey compares a float32 result with the float64 reference
// over every key of each query's sequence (causal per the problem).
func checkF32EveryKey(t *testing.T, fp *f32Problem, res *Result) {
	t.Helper()
	d := fp.spec.d
	ref := referenceSparse(everyBlock(*fp.refWith(fp.qf, fp.kf, fp.vf)))
	o := validate.Backing[float32](res.Out)
	for r, row := range ref.o {
		for c, w := range row {
			// The bound of TestSparseAttenF32MatchesReference: float32
			// rounding of the scores and of the weighted sums.
			if e := math.Abs(float64(o[r*d+c]) - w); !(e <= 2e-6*fp.maxV*float64(d)/16) {
				t.Fatalf("float32: O[%d][%d] = %v, want %v", r, c, o[r*d+c], w)
			}
		}
	}
}
