package op

import (
	"fmt"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// WritePagedKVFunc writes new keys (or values) into a paged K/V cache in place:
// the eager counterpart of the graph op WritePagedKV, for a prefill's prompt
// as well as for a decode step.
//
//   - cache: [num_pages, Hkv, page_size, D] (layout HND) or
//     [num_pages, page_size, Hkv, D] (layout NHD), BFloat16 or
//     Float8E4M3FN; it is modified in place, so it must own its storage
//     (not a view);
//   - newKV: [total_new, Hkv, D], same dtype as cache;
//   - pageTable: int32 [B, max_num_pages_per_seq];
//   - cuSeqlensNew: int32 [B+1], the prefix sums of the new token counts
//     n_b (cuSeqlensNew[0] = 0, cuSeqlensNew[B] = total_new); a decode step
//     of seqlen_q tokens per request is [0, s, 2s, ...];
//   - seqUsedK: int32 [B], each request's key count already including its
//     n_b new tokens (the value the attention then takes as seqused_k).
//
// Row cuSeqlensNew[b]+i of newKV lands at position seqUsedK[b] - n_b + i of
// request b, i.e. in page pageTable[b, pos/page_size] at slot
// pos % page_size. Every index is checked before anything is written (an
// error leaves cache unchanged); the cost is O(total_new * Hkv * D), not
// O(cache). Two requests whose rows map to the same cache position are
// rejected. layout is the cache's layout, the one the attention calls are
// given (SparseArgs.KVLayout, DecodeArgs.KVLayout).
func WritePagedKVFunc(cache, newKV, pageTable, cuSeqlensNew, seqUsedK tensor.Tensor, layout PagedLayout) error {
	const fn = "WritePagedKVFunc"
	c := &validate.Checker{Fn: fn}
	if checkLayout(c, layout, true); c.Err != nil {
		return c.Err
	}
	if validate.Present(cache) {
		if d, ok := cache.(*tensor.Dense); ok && d.IsMaterializable() {
			return validate.ArgErr(fn, "cache", "a tensor that owns its storage (it is written in place)", "a view")
		}
	}
	cd := c.Dense(cache, "cache")
	nd := c.Dense(newKV, "new_kv")
	pt := c.Dense(pageTable, "page_table")
	cu := c.Dense(cuSeqlensNew, "cu_seqlens_new")
	su := c.Dense(seqUsedK, "seqused_k")
	c.Dtype(cd, "cache", BFloat16, Float8E4M3FN)
	if cd != nil {
		c.Dtype(nd, "new_kv", cd.Dtype())
	}
	c.Dtype(pt, "page_table", tensor.Int32)
	c.Dtype(cu, "cu_seqlens_new", tensor.Int32)
	c.Dtype(su, "seqused_k", tensor.Int32)
	c.Rank(cd, "cache", layout.shape("D"), 4)
	c.Rank(nd, "new_kv", "[total_new, Hkv, D]", 3)
	c.Rank(pt, "page_table", "[B, max_num_pages_per_seq]", 2)
	c.Rank(cu, "cu_seqlens_new", "[B+1]", 1)
	c.Rank(su, "seqused_k", "[B]", 1)
	if c.Err != nil {
		return c.Err
	}
	cs := cd.Shape()
	numPages, d := cs[0], cs[3]
	hkv, ps := layout.dims(cs)
	batch, cols := pt.Shape()[0], pt.Shape()[1]
	c.Need(cu.Shape()[0] == batch+1, "cu_seqlens_new", fmt.Sprintf("shape [B+1] = [%d]", batch+1), validate.ShapeStr(cu))
	c.Need(su.Shape()[0] == batch, "seqused_k", fmt.Sprintf("shape [B] = [%d]", batch), validate.ShapeStr(su))
	ns := nd.Shape()
	c.Need(ns[1] == hkv && ns[2] == d, "new_kv", fmt.Sprintf("shape [total_new, Hkv, D] = [total_new, %d, %d] (cache %s, %v layout)", hkv, d, validate.ShapeStr(cd), layout), validate.ShapeStr(nd))
	if c.Err != nil {
		return c.Err
	}
	cuv, used, ptv := validate.Int32s(cu), validate.Int32s(su), validate.Int32s(pt)
	c.Need(cuv[0] == 0, "cu_seqlens_new[0]", "0", cuv[0])
	c.Need(int(cuv[batch]) == ns[0], fmt.Sprintf("cu_seqlens_new[%d]", batch), fmt.Sprintf("total_new = new_kv.shape[0] = %d", ns[0]), cuv[batch])
	for b := 0; b < batch && c.Err == nil; b++ {
		c.Need(cuv[b+1] >= cuv[b], fmt.Sprintf("cu_seqlens_new[%d]", b+1), fmt.Sprintf("non-decreasing (>= %d)", cuv[b]), cuv[b+1])
	}
	if c.Err != nil {
		return c.Err
	}
	capacity := validate.MulCap(1<<62, cols, ps)
	// dst[r] is the cache row of head 0 of new row r.
	dst := make([]int, ns[0])
	seen := make(map[int]int, ns[0])
	for b := 0; b < batch; b++ {
		n := int(cuv[b+1] - cuv[b])
		if int(used[b]) < n || (capacity >= 0 && int(used[b]) > capacity) {
			return validate.ArgErr(fn, fmt.Sprintf("seqused_k[%d]", b),
				fmt.Sprintf("n_b = %d <= seqused_k <= max_num_pages_per_seq * page_size = %d", n, capacity), used[b])
		}
		for i := 0; i < n; i++ {
			pos := int(used[b]) - n + i
			page := int(ptv[b*cols+pos/ps])
			if page < 0 || page >= numPages {
				return validate.ArgErr(fn, fmt.Sprintf("page_table[%d, %d]", b, pos/ps), fmt.Sprintf("a page in [0, %d)", numPages), page)
			}
			row := kvRow(layout, page, pos%ps, hkv, ps)
			if prev, dup := seen[row]; dup {
				return validate.ArgErr(fn, "page_table", fmt.Sprintf("distinct cache positions for the new rows (rows %d and %d both map to page %d slot %d)", prev, int(cuv[b])+i, page, pos%ps), "a collision")
			}
			seen[row] = int(cuv[b]) + i
			dst[int(cuv[b])+i] = row
		}
	}
	scatterKV(cd, nd, 0, dst, layout, hkv, ps, d)
	return nil
}

// scatterKV writes rows first, first+1, ... of nw ([rows, hkv, d], the
// dtype of cache: BFloat16 or Float8E4M3FN) into the paged cache: row
// first+r at cache row dst[r] + h*headStride for every head h.
func scatterKV(cache, nw *tensor.Dense, first int, dst []int, l PagedLayout, hkv, ps, d int) {
	if cache.Dtype() == BFloat16 {
		scatterRows(validate.Backing[lowp.BFloat16](cache), validate.Backing[lowp.BFloat16](nw)[first*hkv*d:], dst, hkv, headStride(l, ps), d)
		return
	}
	scatterRows(validate.Backing[lowp.Float8E4M3FN](cache), validate.Backing[lowp.Float8E4M3FN](nw)[first*hkv*d:], dst, hkv, headStride(l, ps), d)
}

// kvRow is the cache row of head 0 at slot of page in the given layout.
func kvRow(l PagedLayout, page, slot, hkv, ps int) int {
	if l == NHD {
		return (page*ps + slot) * hkv
	}
	return page*hkv*ps + slot
}

// headStride is the row distance between consecutive heads of one token.
func headStride(l PagedLayout, ps int) int {
	if l == NHD {
		return 1
	}
	return ps
}

// scatterRows writes row r of nw ([rows, hkv, d]) at cache row
// dst[r] + h*stride for every head h.
func scatterRows[T any](cache, nw []T, dst []int, hkv, stride, d int) {
	for r, base := range dst {
		for h := 0; h < hkv; h++ {
			copy(cache[(base+h*stride)*d:][:d], nw[(r*hkv+h)*d:][:d])
		}
	}
}
