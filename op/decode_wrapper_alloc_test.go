package op

import (
	"errors"
	"testing"
)

// TestDecodeWrapperRunSizesOutputsByQ: a Run whose q does not match the
// plan is refused before anything is allocated for it, however large the
// plan's seqlen_q (a scalar of Plan) makes the planned output; a matching
// q gets outputs of its own size.
func TestDecodeWrapperRunSizesOutputsByQ(t *testing.T) {
	s := decodeSpec{seed: 3, seqused: []int{48, 48}, seqlenQ: 1, hq: 4, hkv: 2, d: 64, pageSize: 16, dt: "bf16", workers: 1}
	pr := buildDecode(s)
	w, err := NewDecodeWrapper(s.pageSize)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	pa := planArgs(s, pr)
	pa.SeqlenQ = 100000 // planned output: 2 x 100000 x 4 x 64 bf16, 102 MB
	if err := w.Plan(pa, nil); err != nil {
		t.Fatal(err)
	}
	var rerr error
	got := allocDuring(func() { _, rerr = w.Run(pr.q, pr.k, pr.v, 0) })
	var ae *ArgError
	if !errors.As(rerr, &ae) {
		t.Fatalf("Run with q of %v rows against a plan of 200000: %v, want an *ArgError", pr.q.Shape(), rerr)
	}
	if got > 64<<10 {
		t.Errorf("the refused Run allocated %d bytes", got)
	}
	if err := w.Plan(planArgs(s, pr), nil); err != nil {
		t.Fatal(err)
	}
	res, err := w.Run(pr.q, pr.k, pr.v, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Out.Shape().Eq(pr.q.Shape()) || res.LSE.Shape()[0] != pr.q.Shape()[0] {
		t.Errorf("outputs %v and %v for q %v", res.Out.Shape(), res.LSE.Shape(), pr.q.Shape())
	}
}
