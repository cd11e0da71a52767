package op

import (
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"gorgonia.org/tensor"
)

// TestOutputAndGradientRanks: with one query row, an lse (or dLSE) of shape
// [Hq] instead of [1, Hq] was accepted, because tensor.Shape's Eq equates
// vectors of every orientation; the arguments documented as
// [total_q, Hq] now need that rank (FuzzSparseAttenBackward found it).
func TestOutputAndGradientRanks(t *testing.T) {
	s := decodeSpec{seed: 8, seqused: []int{40}, seqlenQ: 1, hq: 4, hkv: 2, d: 64, pageSize: 16, dt: "bf16", workers: 2}
	pr := buildDecode(s)
	w := plannedWrapper(t, s, pr)
	defer w.Close()
	out := tensor.New(tensor.WithShape(1, 4, 64), tensor.WithBacking(make([]lowp.BFloat16, 4*64)))
	flat := tensor.New(tensor.WithShape(4), tensor.WithBacking(make([]float32, 4)))
	wantArgErr(t, w.RunInto(pr.q, pr.k, pr.v, 0, out, flat), "lse", "shape [1 4]")

	fs := sparseSpec{seed: 9, seqQ: []int{1}, seqK: []int{40}, hq: 4, hkv: 2, d: 16, topK: 1, blk: 16}
	fp := newF32Problem(fs)
	rp, qi, err := K2QCSRFunc(fp.q2k, fp.cuQ, fp.cuK, fs.blk)
	if err != nil {
		t.Fatal(err)
	}
	res, err := SparseAttentionFunc(fp.q, fp.k, fp.v, rp, qi, fs.topK, fp.args())
	if err != nil {
		t.Fatal(err)
	}
	dOut := tensor.New(tensor.WithShape(1, 4, 16), tensor.WithBacking(make([]float32, 64)))
	_, err = SparseAttentionBackwardFunc(fp.q, fp.k, fp.v, res.Out, flat, dOut, nil, rp, qi, fs.topK, fp.args())
	wantArgErr(t, err, "lse", "[total_q, Hq] = [1, 4]")
	_, err = SparseAttentionBackwardFunc(fp.q, fp.k, fp.v, res.Out, res.LSE, dOut, flat, rp, qi, fs.topK, fp.args())
	wantArgErr(t, err, "dLSE", "[total_q, Hq] = [1, 4]")
}
