package op

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
}

// TestSparseDeterministic checks bit-identical results across repeated runs
// and across 1, 2 and 3 workers (the schedule's chunking changes with the
// worker count; the slots and the combine order do not).
func TestSparseDeterministic(t *testing.T) {
	s := sparseSpec{seed: 42, seqQ: []int{50, 3, 70}, seqK: []int{600, 40, 300}, hq: 8, hkv: 2, d: 128,
		topK: 8, blk: 128, causal: true, qDt: "bf16", kvDt: "bf16", partial: tensor.Float32, temperature: 1.5}
	pr := buildSparse(s)
	ref := runSparse(t, s, pr, 1, nil)
	for _, w := range []int{1, 2, 3, 2} {
		res := runSparse(t, s, pr, w, nil)
		if !bytes.Equal(bytesOf(validate.Backing[lowp.BFloat16](res.Out)), bytesOf(validate.Backing[lowp.BFloat16](ref.Out))) ||
			!bytes.Equal(bytesOf(validate.Backing[float32](res.LSE)), bytesOf(validate.Backing[float32](ref.LSE))) ||
			!bytes.Equal(bytesOf(validate.Backing[float32](res.TemperatureLSE)), bytesOf(validate.Backing[float32](ref.TemperatureLSE))) {
			t.Fatalf("workers=%d: results differ from the 1-worker run", w)
		}
	}
}

// TestSparseScheduleReuse builds a schedule once and reuses it, and checks a
// schedule built for another CSR is rejected.
func TestSparseScheduleReuse(t *testing.T) {
	s := sparseSpec{seed: 5, seqQ: []int{20, 9}, seqK: []int{300, 140}, hq: 4, hkv: 1, d: 64,
		topK: 4, blk: 128, causal: true, qDt: "e4m3", kvDt: "e4m3", partial: BFloat16}
	pr := buildSparse(s)
	rp, qi, err := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, 128)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := FwdScheduleFunc(rp, qi, ScheduleArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK,
		TotalQ: 29, TopK: 4, QheadPerKV: 4, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	fresh := runSparse(t, s, pr, 2, nil)
	for i := 0; i < 2; i++ {
		res := runSparse(t, s, pr, 2, sched)
		if !bytes.Equal(bytesOf(validate.Backing[lowp.BFloat16](res.Out)), bytesOf(validate.Backing[lowp.BFloat16](fresh.Out))) {
			t.Fatal("reused schedule gives a different result")
		}
	}
	checkAgainstReference(t, s, pr, fresh)

	// A schedule of another problem must be refused, not executed.
	s2 := s
	s2.seed = 6
	pr2 := buildSparse(s2)
	rp2, qi2, err := K2QCSRFunc(pr2.q2k, pr2.cuQ, pr2.cuK, 128)
	if err != nil {
		t.Fatal(err)
	}
	other, err := FwdScheduleFunc(rp2, qi2, ScheduleArgs{CuSeqlensQ: pr2.cuQ, CuSeqlensK: pr2.cuK,
		TotalQ: 29, TopK: 4, QheadPerKV: 4, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = SparseAttentionFunc(pr.q, pr.k, pr.v, rp, qi, 4, SparseArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK, Causal: true, Schedule: other})
	if err == nil {
		t.Fatal("a schedule built for a different CSR was accepted")
	}
	t.Log(err)
}
