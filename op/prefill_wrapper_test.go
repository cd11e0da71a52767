package op

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// prefillArgs returns the plan arguments of a paged sparseSpec problem.
func prefillArgs(s sparseSpec, pr *sparseProblem) PrefillPlanArgs {
	return PrefillPlanArgs{CuSeqlensQ: pr.cuQ, PageTable: pr.pageTable, SeqUsedK: pr.seqused,
		NumQOHeads: s.hq, NumKVHeads: s.hkv, HeadDim: s.d, Causal: s.causal, Workers: 2, PartialDtype: s.partial}
}

// TestPagedPrefillWrapper compares chunked prefill over a paged cache (each
// request's chunk of queries after earlier tokens in shuffled pages) with
// the float64 reference: dense (every page a query sees) and sparse (the
// problem's q2k_indices), causal and not, over two layers of one plan.
func TestPagedPrefillWrapper(t *testing.T) {
	for _, causal := range []bool{true, false} {
		s := sparseSpec{seed: 80, seqQ: []int{10, 5, 0}, seqK: []int{40, 70, 9}, hq: 4, hkv: 2, d: 64, topK: 2, blk: 16,
			causal: causal, paged: true, trim: true, qDt: "bf16", kvDt: "bf16", partial: tensor.Float32}
		t.Run(fmt.Sprintf("causal=%v", causal), func(t *testing.T) {
			pr := buildSparse(s)
			w, err := NewPagedPrefillWrapper(s.blk)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Plan(prefillArgs(s, pr), pr.q2k); err != nil {
				t.Fatal(err)
			}
			for layer := 0; layer < 2; layer++ {
				res, err := w.Run(pr.q, pr.k, pr.v, 0)
				if err != nil {
					t.Fatal(err)
				}
				checkAgainstReference(t, s, pr, res)
			}
			if err := w.Plan(prefillArgs(s, pr), nil); err != nil {
				t.Fatal(err)
			}
			res, err := w.Run(pr.q, pr.k, pr.v, 0)
			if err != nil {
				t.Fatal(err)
			}
			pr.ref = *everyBlock(pr.ref)
			checkAgainstReference(t, s, pr, res)
			nhd := prefillArgs(s, pr)
			nhd.KVLayout = NHD
			if err := w.Plan(nhd, nil); err != nil {
				t.Fatal(err)
			}
			got, err := w.Run(pr.q, toNHD(t, pr.k), toNHD(t, pr.v), 0)
			if err != nil {
				t.Fatal(err)
			}
			sameResult(t, "NHD cache vs HND", res, got)

			// float32 q, k, v: the float32 kernels over the same plan.
			fp := newF32Problem(s)
			args := prefillArgs(s, fp.sparseProblem)
			args.PartialDtype = tensor.Dtype{}
			if err := w.Plan(args, nil); err != nil {
				t.Fatal(err)
			}
			res, err = w.Run(fp.q, fp.k, fp.v, 0)
			if err != nil {
				t.Fatal(err)
			}
			checkF32EveryKey(t, fp, res)
		})
	}
}

// TestPagedPrefillWrapperRefusals: a stale plan, an unplanned run, another
// q shape, a page size past the kernels' block and a request past 64 pages
// are errors naming the argument.
func TestPagedPrefillWrapperRefusals(t *testing.T) {
	s := sparseSpec{seed: 81, seqQ: []int{4, 3}, seqK: []int{30, 20}, hq: 2, hkv: 1, d: 64, topK: 2, blk: 16,
		causal: true, paged: true, qDt: "bf16", kvDt: "bf16"}
	pr := buildSparse(s)
	_, err := NewPagedPrefillWrapper(256)
	wantArgErr(t, err, "page_size", "page_size <= 128")
	w, err := NewPagedPrefillWrapper(s.blk)
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Run(pr.q, pr.k, pr.v, 0)
	wantArgErr(t, err, "wrapper", "call Plan")
	if err := w.Plan(prefillArgs(s, pr), nil); err != nil {
		t.Fatal(err)
	}
	su := validate.Int32s(pr.seqused)
	su[1]--
	var stale *StalePlanError
	if _, err := w.Run(pr.q, pr.k, pr.v, 0); !errors.As(err, &stale) || stale.Arg != "seqused_k[1]" {
		t.Fatalf("run after a seqused_k change: %v", err)
	}
	su[1]++
	_, err = w.Run(bf16T(7, 1, 64), pr.k, pr.v, 0)
	wantArgErr(t, err, "q", "Hq = 2")
	w4, err := NewPagedPrefillWrapper(4)
	if err != nil {
		t.Fatal(err)
	}
	args := prefillArgs(s, pr)
	args.PageTable = tensor.New(tensor.WithShape(2, 70), tensor.WithBacking(make([]int32, 140)))
	args.SeqUsedK = i32T([]int{2}, 260, 20)
	err = w4.Plan(args, nil)
	wantNames(t, err, "max_seqlen_k", "64 * blk_kv = 256")
	wantArgErr(t, w.Plan(prefillArgs(s, pr), i32T([]int{2, 7, 2})), "q2k_indices", "num_kv_heads = 1")
	w.busy.Store(true) // a call in progress on another goroutine
	_, err = w.Run(pr.q, pr.k, pr.v, 0)
	wantArgErr(t, err, "wrapper", "no concurrent call")
	w.busy.Store(false)
	args = prefillArgs(s, pr)
	args.NumKVHeads = 3
	wantArgErr(t, w.Plan(args, nil), "num_qo_heads/num_kv_heads/head_dim", "divisible")
}
