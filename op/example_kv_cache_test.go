package op_test

import (
	"errors"
	"fmt"

	"github.com/sparseattn/msa/op"
)

// A serving loop on a paged K/V cache: admit two requests, prefill their
// prompts, decode three steps (append the step's keys and values, plan,
// run), evict the first request and admit a third into its row. The q, k
// and v of each step stand for a model's projections.
func ExamplePagedKVCache() {
	const hq, hkv, d, pageSize = 4, 1, 64, 16
	cache, err := op.NewPagedKVCache(op.PagedKVCacheConfig{NumPages: 4, PageSize: pageSize,
		KVHeads: hkv, HeadDim: d, MaxBatch: 2, MaxPagesPerSeq: 4})
	if err != nil {
		panic(err)
	}
	a, _ := cache.Admit()
	b, _ := cache.Admit()
	for _, r := range []struct{ seq, prompt int }{{a, 20}, {b, 5}} {
		if err := cache.Append(r.seq, bf16(r.prompt, hkv, d), bf16(r.prompt, hkv, d)); err != nil {
			panic(err)
		}
	}
	fmt.Println("prefilled:", cache.SeqUsedK().Data(), "free pages:", cache.FreePages())

	w, err := op.NewDecodeWrapper(pageSize)
	if err != nil {
		panic(err)
	}
	defer w.Close()
	plan := func() {
		if err := w.Plan(op.PlanArgs{DecodeArgs: op.DecodeArgs{PageTable: cache.PageTable(), SeqUsedK: cache.SeqUsedK(), SeqlenQ: 1},
			NumQOHeads: hq, NumKVHeads: hkv, HeadDim: d}, nil); err != nil {
			panic(err)
		}
	}
	for step := 0; step < 3; step++ {
		// One new token per row: k, v [MaxBatch, Hkv, D], q [MaxBatch, Hq, D].
		if err := cache.AppendStep(bf16(2, hkv, d), bf16(2, hkv, d)); err != nil {
			panic(err)
		}
		plan()
		res, err := w.Run(bf16(2, hq, d), cache.K(), cache.V(), 0)
		if err != nil {
			panic(err)
		}
		fmt.Println("step", step, cache.SeqUsedK().Data(), res.Out.Shape())
	}

	// A plan made before an append is refused, not run over the old lengths.
	if err := cache.AppendStep(bf16(2, hkv, d), bf16(2, hkv, d)); err != nil {
		panic(err)
	}
	var stale *op.StalePlanError
	_, err = w.Run(bf16(2, hq, d), cache.K(), cache.V(), 0)
	fmt.Println("stale plan refused:", errors.As(err, &stale))

	// Evict a; its pages return to the pool and its row takes a new request.
	if err := cache.Free(a); err != nil {
		panic(err)
	}
	c, _ := cache.Admit()
	fmt.Println("evicted", a, "admitted", c, "free pages:", cache.FreePages(), cache.SeqUsedK().Data())

	// A prompt longer than the free pages allow is an error naming the pool.
	err = cache.Append(c, bf16(64, hkv, d), bf16(64, hkv, d))
	fmt.Println(err)
	// Output:
	// prefilled: [20 5] free pages: 1
	// step 0 [21 6] (2, 4, 64)
	// step 1 [22 7] (2, 4, 64)
	// step 2 [23 8] (2, 4, 64)
	// stale plan refused: true
	// evicted 0 admitted 0 free pages: 3 [0 9]
	// PagedKVCache.Append: NumPages: expected 4 free pages for the new tokens (the pool has NumPages = 4; Free finished requests or make a larger cache), got 3 free: out of pages
}

// Chunked prefill onto a paged cache: a prompt of 40 tokens is prefilled
// in two chunks; each chunk's keys and values are appended first, then
// its queries attend (causally) to every key of the request so far.
func ExamplePagedPrefillWrapper() {
	const hq, hkv, d, pageSize = 4, 1, 64, 16
	cache, err := op.NewPagedKVCache(op.PagedKVCacheConfig{NumPages: 8, PageSize: pageSize,
		KVHeads: hkv, HeadDim: d, MaxBatch: 1})
	if err != nil {
		panic(err)
	}
	seq, _ := cache.Admit()
	w, err := op.NewPagedPrefillWrapper(pageSize)
	if err != nil {
		panic(err)
	}
	for _, chunk := range []int{24, 16} {
		if err := cache.Append(seq, bf16(chunk, hkv, d), bf16(chunk, hkv, d)); err != nil {
			panic(err)
		}
		cuQ := i32([]int{2}, 0, int32(chunk))
		if err := w.Plan(op.PrefillPlanArgs{CuSeqlensQ: cuQ, PageTable: cache.PageTable(), SeqUsedK: cache.SeqUsedK(),
			NumQOHeads: hq, NumKVHeads: hkv, HeadDim: d, Causal: true}, nil); err != nil {
			panic(err)
		}
		res, err := w.Run(bf16(chunk, hq, d), cache.K(), cache.V(), 0)
		if err != nil {
			panic(err)
		}
		fmt.Println("keys", cache.Len(seq), "out", res.Out.Shape())
	}
	// Output:
	// keys 24 out (24, 4, 64)
	// keys 40 out (16, 4, 64)
}
