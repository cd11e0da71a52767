package op

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/sparseattn/msa/internal/allocs"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// boundRun is one call of a memory-bound case for one value of its swept
// scalar: it returns the bytes of the call's inputs and of its outputs (0
// when refused) and its error.
type boundRun func(x int) (in, out int, err error)

// TestMemoryBoundedByData: for each entry point and planner, sweeping one
// scalar argument from small values to its documented maximum, the bytes
// one call allocates stay within allocCap(input + output bytes) (64 bytes
// per byte of data plus 48 MiB for the worker pool, workspaces and
// schedule), whether the call succeeds or is refused with an *ArgError.
// A scalar that sized a buffer (a fixed split of one page against a wide
// page table, a worker count, max_seqlen_k, blk_kv) would exceed it at the
// top of its sweep.
func TestMemoryBoundedByData(t *testing.T) {
	const maxI32 = math.MaxInt32
	// A page table 2^14 columns wider than the sequences, the extra
	// columns naming pages already in use: 64 KiB more data per request,
	// while the worst case of a fixed-capacity plan (EnableCUDAGraph) grows
	// by 8 * Hq * (D + 1) * 4 = 8320 bytes of partials per column at a
	// fixed split of one page. That is bounded by MaxWorkspaceBytes, not by
	// the data: those cases set it to wsLimit and may allocate that much
	// beyond allocCap.
	const wide, wsLimit = 1 << 14, 16 << 20
	dec := decodeSpec{seed: 21, seqused: []int{700, 33}, seqlenQ: 2, hq: 4, hkv: 2, d: 64, pageSize: 16, dt: "bf16", workers: 2}
	decRun := func(s decodeSpec, widen int, edit func(a *DecodeArgs, x int)) boundRun {
		pr := widenPageTable(buildDecode(s), widen)
		return func(x int) (int, int, error) {
			a := decodeArgs(s, pr)
			edit(&a, x)
			in := denseBytes(pr.q, pr.k, pr.v, pr.pt, pr.su, pr.q2k)
			res, err := DecodeAttentionFunc(pr.q, pr.k, pr.v, q2kOrNil(pr), a)
			if err != nil {
				return in, 0, err
			}
			return in, denseBytes(res.Out, res.LSE), nil
		}
	}
	sparse := dec
	sparse.topK, sparse.blk = 2, 16
	planRun := func(s decodeSpec, widen int, edit func(a *PlanArgs, x int)) boundRun {
		pr := widenPageTable(buildDecode(s), widen)
		return func(x int) (int, int, error) {
			a := planArgs(s, pr)
			a.EnableCUDAGraph = true
			edit(&a, x)
			in := denseBytes(pr.q, pr.k, pr.v, pr.pt, pr.su)
			w, err := NewDecodeWrapper(s.pageSize)
			if err != nil {
				return in, 0, err
			}
			defer w.Close()
			if err := w.Plan(a, nil); err != nil {
				return in, 0, err
			}
			res, err := w.Run(pr.q, pr.k, pr.v, 0)
			if err != nil {
				return in, 0, err
			}
			return in, denseBytes(res.Out, res.LSE), nil
		}
	}
	pre := sparseSpec{seed: 22, seqQ: []int{40, 9}, seqK: []int{300, 70}, hq: 4, hkv: 2, d: 64, topK: 3, blk: 64,
		causal: true, qDt: "bf16", kvDt: "bf16", partial: tensor.Float32}
	prefillRun := func(edit func(a *SparseArgs, x int)) boundRun {
		pr := buildSparse(pre)
		rp, qi, err := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, pre.blk)
		if err != nil {
			t.Fatal(err)
		}
		return func(x int) (int, int, error) {
			a := SparseArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK, BlkKV: pre.blk, Causal: true, PartialDtype: pre.partial, Workers: 2}
			edit(&a, x)
			in := denseBytes(pr.q, pr.k, pr.v, rp, qi, pr.cuQ, pr.cuK)
			res, err := SparseAttentionFunc(pr.q, pr.k, pr.v, rp, qi, pre.topK, a)
			if err != nil {
				return in, 0, err
			}
			return in, denseBytes(res.Out, res.LSE), nil
		}
	}
	prq := buildSparse(pre)
	wpr := widenPageTable(buildDecode(dec), wide)
	cases := []struct {
		name  string
		sweep []int
		run   boundRun
		extra uint64 // allowance beyond allocCap: the workspace limit the case sets
	}{
		{"DecodeAttentionFunc fixed_split_size", []int{1, 2, 7, 1 << 16, maxI32},
			decRun(dec, 0, func(a *DecodeArgs, x int) { a.FixedSplitSize = x }), 0},
		{"DecodeAttentionFunc fixed_split_size, wide page table", []int{1, 3, maxI32},
			decRun(dec, wide, func(a *DecodeArgs, x int) { a.FixedSplitSize = x }), 0},
		{"DecodeAttentionFunc workers", []int{1, 3, 256, 1 << 20, 1 << 40},
			decRun(dec, 0, func(a *DecodeArgs, x int) { a.Workers = x }), 0},
		{"DecodeAttentionFunc max_seqlen_k", []int{0, 700, 1 << 20, maxI32},
			decRun(dec, 0, func(a *DecodeArgs, x int) { a.MaxSeqlenK = x }), 0},
		{"DecodeAttentionFunc blk_kv", []int{16, 64, 1 << 20, maxI32},
			decRun(sparse, 0, func(a *DecodeArgs, x int) { a.BlkKV = x }), 0},
		{"DecodeWrapper EnableCUDAGraph fixed_split_size, wide page table", []int{1, 3, 64, maxI32},
			planRun(dec, wide, func(a *PlanArgs, x int) { a.FixedSplitSize, a.MaxWorkspaceBytes = x, wsLimit }), wsLimit},
		{"DecodeWrapper EnableCUDAGraph workers", []int{1, 1 << 40},
			planRun(dec, 0, func(a *PlanArgs, x int) { a.Workers = x }), 0},
		{"SparseAttentionFunc workers", []int{1, 3, 256, 1 << 40},
			prefillRun(func(a *SparseArgs, x int) { a.Workers = x }), 0},
		{"SparseAttentionFunc max_seqlen_q", []int{0, 40, maxI32},
			prefillRun(func(a *SparseArgs, x int) { a.MaxSeqlenQ = x }), 0},
		{"SparseAttentionFunc max_seqlen_k", []int{0, 300, maxI32},
			prefillRun(func(a *SparseArgs, x int) { a.MaxSeqlenK = x }), 0},
		{"K2QCSRFunc blk_kv", []int{1, 16, 128, maxI32}, func(x int) (int, int, error) {
			in := denseBytes(prq.q2k, prq.cuQ, prq.cuK)
			rp, qi, err := K2QCSRFunc(prq.q2k, prq.cuQ, prq.cuK, x)
			if err != nil {
				return in, 0, err
			}
			return in, denseBytes(rp, qi), nil
		}, 0},
		{"BlockScoresFunc max_seqlen_k", []int{300, 370, maxI32}, func(x int) (int, int, error) {
			in := denseBytes(prq.q, prq.k, prq.cuQ, prq.cuK)
			sc, err := BlockScoresFunc(prq.q, prq.k, prq.cuQ, prq.cuK, BlockScoreConfig{BlkKV: 16, MaxSeqlenK: x, Workers: 2})
			if err != nil {
				return in, 0, err
			}
			return in, denseBytes(sc), nil
		}, 0},
		{"K2QCSR node max_seqlen_k", []int{300, 1 << 20, maxI32}, func(x int) (int, int, error) {
			g := G.NewGraph()
			q2k := G.NodeFromAny(g, prq.q2k, G.WithName("q2k"))
			cu := G.NodeFromAny(g, prq.cuQ, G.WithName("cu_q"))
			ck := G.NodeFromAny(g, prq.cuK, G.WithName("cu_k"))
			_, err := K2QCSR(q2k, cu, ck, BlkKV(1), MaxSeqlenK(x))
			return denseBytes(prq.q2k, prq.cuQ, prq.cuK), 0, err
		}, 0},
		{"DecodeSchedule node fixed_split_size, wide page table", []int{1, 16, maxI32}, func(x int) (int, int, error) {
			g := G.NewGraph()
			pt, su := G.NodeFromAny(g, wpr.pt, G.WithName("pt")), G.NodeFromAny(g, wpr.su, G.WithName("su"))
			_, err := DecodeSchedule(pt, su, Heads(4, 2), PageSize(16), FixedSplitSize(x), SeqlenQ(2))
			return denseBytes(wpr.pt, wpr.su), 0, err
		}, 0},
	}
	for _, c := range cases {
		for _, x := range c.sweep {
			var in, out int
			var err error
			got := allocs.Bytes(2, func() { in, out, err = c.run(x) })
			var ae *ArgError
			if err != nil && !errors.As(err, &ae) {
				t.Fatalf("%s = %d: %v (want a result or an *ArgError)", c.name, x, err)
			}
			if limit := allocCap(in+out) + c.extra; got > limit {
				t.Errorf("%s = %d: %d bytes allocated for %d input and %d output bytes (error %v), want <= %d",
					c.name, x, got, in, out, err, limit)
			}
			if testing.Verbose() {
				fmt.Printf("%-66s %12d: %10d bytes (data %d, refused %v)\n", c.name, x, got, in+out, err != nil)
			}
		}
	}
}

// q2kOrNil returns pr.q2k as a tensor.Tensor (nil for dense decode).
func q2kOrNil(pr *decodeProblem) tensor.Tensor {
	if pr.q2k == nil {
		return nil
	}
	return pr.q2k
}

// widenPageTable returns pr with n more page-table columns per request,
// each naming the request's first page (pages the K/V pool already has).
func widenPageTable(pr *decodeProblem, n int) *decodeProblem {
	if n == 0 {
		return pr
	}
	rows, cols := pr.pt.Shape()[0], pr.pt.Shape()[1]
	pt := make([]int32, rows*(cols+n))
	for r := 0; r < rows; r++ {
		row := pt[r*(cols+n) : (r+1)*(cols+n)]
		copy(row, pr.ptv[r*cols:(r+1)*cols])
		for i := cols; i < cols+n; i++ {
			row[i] = pr.ptv[r*cols]
		}
	}
	w := *pr
	w.pt = tensor.New(tensor.WithShape(rows, cols+n), tensor.WithBacking(pt))
	w.ptv, w.cols = pt, cols+n
	return &w
}
