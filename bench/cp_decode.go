package main

import (
	"fmt"

	"github.com/sparseattn/msa/kernels/comm"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op"
	"gorgonia.org/tensor"
)

// cpDecode times context-parallel decode: B sequences of s.ctx tokens in
// pages of s.page, each sequence's pages cut into P contiguous runs, rank r
// holding run r of every sequence in its own page pool.
func cpDecode(c comm.Comm, s cpShapes) (cpRow, error) {
	p, r := c.Size(), c.Rank()
	np := s.ctx / s.page // pages per sequence
	if np < p {
		return cpRow{}, fmt.Errorf("-cp-decode-ctx %d is %d pages of %d: want at least one page per rank (%d ranks)", s.ctx, np, s.page, p)
	}
	row := cpRow{kind: "cp-decode", strategy: "all-gather",
		shape: fmt.Sprintf("B%d-ctx%d-page%d-hq%d-hkv%d-d%d-bf16", s.batch, s.ctx, s.page, s.hq, s.hkv, s.d)}
	pageElems := s.hkv * s.page * s.d
	k := bf16Tensor(11, s.batch*np, s.hkv, s.page, s.d) // [pages, Hkv, page, D], page b*np+j
	v := bf16Tensor(12, s.batch*np, s.hkv, s.page, s.d)
	q := bf16Tensor(13, s.batch, s.hq, s.d)
	plan := func(pt []int32, cols int, used int32) op.PlanArgs {
		su := make([]int32, s.batch)
		for i := range su {
			su[i] = used
		}
		return op.PlanArgs{DecodeArgs: op.DecodeArgs{PageTable: int32Tensor(pt, s.batch, cols), SeqUsedK: int32Tensor(su, s.batch),
			SeqlenQ: 1, Workers: cpOpts.workers}, NumQOHeads: s.hq, NumKVHeads: s.hkv, HeadDim: s.d}
	}
	out := tensor.New(tensor.WithShape(s.batch, s.hq, s.d), tensor.Of(op.BFloat16))
	lse := tensor.New(tensor.WithShape(s.batch, s.hq), tensor.Of(tensor.Float32))

	var single func() error
	if r == 0 {
		w, err := op.NewDecodeWrapper(s.page)
		if err != nil {
			return row, err
		}
		defer w.Close()
		pt := make([]int32, s.batch*np)
		for i := range pt {
			pt[i] = int32(i)
		}
		if err := w.Plan(plan(pt, np, int32(s.ctx)), nil); err != nil {
			return row, err
		}
		single = func() error { return w.RunInto(q, k, v, 0, out, lse) }
	}
	var err error
	if row.single, err = cpSingle(c, single); err != nil {
		return row, err
	}

	// This rank's pages: run r of every sequence, copied into a local pool.
	first, end := r*np/p, (r+1)*np/p
	n := end - first
	kd, vd := k.Data().([]lowp.BFloat16), v.Data().([]lowp.BFloat16)
	lk, lv := make([]lowp.BFloat16, s.batch*n*pageElems), make([]lowp.BFloat16, s.batch*n*pageElems)
	pt := make([]int32, s.batch*n)
	for b := 0; b < s.batch; b++ {
		src := (b*np + first) * pageElems
		copy(lk[b*n*pageElems:(b+1)*n*pageElems], kd[src:src+n*pageElems])
		copy(lv[b*n*pageElems:(b+1)*n*pageElems], vd[src:src+n*pageElems])
		for j := 0; j < n; j++ {
			pt[b*n+j] = int32(b*n + j)
		}
	}
	localK := tensor.New(tensor.WithShape(s.batch*n, s.hkv, s.page, s.d), tensor.WithBacking(lk))
	localV := tensor.New(tensor.WithShape(s.batch*n, s.hkv, s.page, s.d), tensor.WithBacking(lv))
	w, err := op.NewCPDecodeWrapper(s.page, c)
	if err != nil {
		return row, err
	}
	defer w.Close()
	if err := w.Plan(plan(pt, n, int32(n*s.page)), nil); err != nil {
		return row, err
	}
	// The all-gather delivers every other rank's partial: LSE float32 and
	// O BF16 per (sequence, head).
	recv := int64(p-1) * int64(s.batch*s.hq*(2*s.d+4))
	return cpTimed(c, row, func() error { return w.RunInto(q, localK, localV, 0, out, lse) }, func() int64 { return recv })
}
