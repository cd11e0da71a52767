package op_test

import (
	"fmt"
	"math"
	"sync"

	"github.com/sparseattn/msa/kernels/comm"
	"github.com/sparseattn/msa/op"
	"gorgonia.org/tensor"
)

// Context-parallel decode on two in-process ranks: request 0's 40 tokens
// sit in pages 3, 0, 5 and request 1's 17 in pages 1, 2 (16-token pages);
// rank 0 holds the first page of each, rank 1 the rest. Each rank decodes
// its pages and one all-gather merges the partials; with MPI, each process
// would call comm.MPIWorld instead and run the same code.
func ExampleCPDecodeWrapper() {
	q := bf16(2, 4, 64)
	k, v := patternBF16(8*16, 1, 64, 1), patternBF16(8*16, 1, 64, 2)
	if err := k.Reshape(8, 1, 16, 64); err != nil { // [num_pages, Hkv, page_size, D]
		panic(err)
	}
	if err := v.Reshape(8, 1, 16, 64); err != nil {
		panic(err)
	}
	plan := func(pt, su *tensor.Dense) op.PlanArgs {
		return op.PlanArgs{DecodeArgs: op.DecodeArgs{PageTable: pt, SeqUsedK: su, SeqlenQ: 1},
			NumQOHeads: 4, NumKVHeads: 1, HeadDim: 64}
	}
	// Each rank's page table and token counts (rank 1's row 1 has one
	// page in use; the unused entry repeats a valid page).
	local := []op.PlanArgs{
		plan(i32([]int{2, 1}, 3, 1), i32([]int{2}, 16, 16)),
		plan(i32([]int{2, 2}, 0, 5, 2, 2), i32([]int{2}, 24, 1)),
	}
	ranks, err := comm.NewLocal(2, 0)
	if err != nil {
		panic(err)
	}
	outs := make([]*tensor.Dense, 2)
	var wg sync.WaitGroup
	for r, c := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := op.NewCPDecodeWrapper(16, c)
			if err != nil {
				panic(err)
			}
			defer w.Close()
			if err := w.Plan(local[r], nil); err != nil {
				panic(err)
			}
			outs[r] = tensor.New(tensor.WithShape(2, 4, 64), tensor.Of(op.BFloat16))
			if err := w.RunInto(q, k, v, 0, outs[r], nil); err != nil {
				panic(err)
			}
		}()
	}
	wg.Wait()

	// Single-process decode over the whole cache.
	w, err := op.NewDecodeWrapper(16)
	if err != nil {
		panic(err)
	}
	defer w.Close()
	if err := w.Plan(plan(i32([]int{2, 3}, 3, 0, 5, 1, 2, 2), i32([]int{2}, 40, 17)), nil); err != nil {
		panic(err)
	}
	whole, err := w.Run(q, k, v, 0)
	if err != nil {
		panic(err)
	}
	// Each rank's partial is rounded to BF16 before the merge, and the
	// merge's result again: within 3 * 2^-8 * max|V| (docs/distributed.md).
	a, _ := op.Float32s(outs[0])
	b, _ := op.Float32s(outs[1])
	s, _ := op.Float32s(whole.Out)
	vs, _ := op.Float32s(v)
	maxV := 0.0
	for _, x := range vs {
		maxV = math.Max(maxV, math.Abs(float64(x)))
	}
	same, close := true, true
	for i := range a {
		same = same && a[i] == b[i]
		close = close && math.Abs(float64(a[i]-s[i])) <= 3*0x1p-8*maxV
	}
	fmt.Println("ranks agree:", same)
	fmt.Println("within 3*2^-8*max|V| of single-process decode:", close)
	// Output:
	// ranks agree: true
	// within 3*2^-8*max|V| of single-process decode: true
}

// Context-parallel sparse prefill on two in-process ranks: one sequence of
// 256 tokens in blocks of 64, rank 0 holding blocks 0-1 and their queries,
// rank 1 blocks 2-3 and theirs. Every query selects its own block and
// block 0 (an attention sink), so rank 1 needs block 0 from rank 0: the
// cost model fetches it (one block serves 128 queries). The ranks' results
// equal single-process prefill within the merge's rounding.
func ExampleContextParallelPrefillFunc() {
	const n, blk, hq, d = 256, 64, 2, 64
	q := bf16(n, hq, d)
	k, v := patternBF16(n, 1, d, 3), patternBF16(n, 1, d, 4)
	sel := make([]int32, 0, 2*n) // q2k_indices [Hkv=1, n, topK=2]
	for i := 0; i < n; i++ {
		if own := int32(i / blk); own == 0 {
			sel = append(sel, 0, -1)
		} else {
			sel = append(sel, own, 0)
		}
	}
	cu := []int32{0, n}
	args := op.CPPrefillArgs{CuSeqlensQ: cu, CuSeqlensK: cu, BlkKV: blk, Causal: true}

	ranks, err := comm.NewLocal(2, 0)
	if err != nil {
		panic(err)
	}
	results := make([]*op.Result, 2)
	stats := make([]*op.CPPrefillStats, 2)
	var wg sync.WaitGroup
	for r, c := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sh, err := op.CPPrefillShard(cu, cu, blk, 2, r)
			if err != nil {
				panic(err)
			}
			q0, q1 := sh.QueryBegin[0], sh.QueryEnd[0]
			k0, k1 := sh.KeyBegin[0], sh.KeyEnd[0]
			mySel := i32([]int{1, q1 - q0, 2}, sel[2*q0:2*q1]...)
			results[r], stats[r], err = op.ContextParallelPrefillFunc(c, tokenRows(q, q0, q1), tokenRows(k, k0, k1), tokenRows(v, k0, k1), mySel, args)
			if err != nil {
				panic(err)
			}
		}()
	}
	wg.Wait()

	rowPtr, qIdx, err := op.K2QCSRFunc(i32([]int{1, n, 2}, sel...), i32([]int{2}, cu...), i32([]int{2}, cu...), blk)
	if err != nil {
		panic(err)
	}
	whole, err := op.SparseAttentionFunc(q, k, v, rowPtr, qIdx, 2, op.SparseArgs{
		CuSeqlensQ: i32([]int{2}, cu...), CuSeqlensK: i32([]int{2}, cu...), BlkKV: blk, Causal: true})
	if err != nil {
		panic(err)
	}
	want, _ := op.Float32s(whole.Out)
	vs, _ := op.Float32s(v)
	maxV := 0.0
	for _, x := range vs {
		maxV = math.Max(maxV, math.Abs(float64(x)))
	}
	// Rank 0's queries come first, then rank 1's: together the whole batch.
	a, _ := op.Float32s(results[0].Out)
	b, _ := op.Float32s(results[1].Out)
	got := append(a, b...)
	close := len(got) == len(want)
	for i := range want {
		close = close && math.Abs(float64(got[i]-want[i])) <= 3*0x1p-8*maxV
	}
	p := stats[1].Peers[0]
	fmt.Printf("rank 1 from rank 0: %v, %d block, %d bytes\n", p.Strategy, p.Blocks, p.Fetched)
	fmt.Println("within 3*2^-8*max|V| of single-process prefill:", close)
	// Output:
	// rank 1 from rank 0: fetch-kv, 1 block, 16384 bytes
	// within 3*2^-8*max|V| of single-process prefill: true
}
