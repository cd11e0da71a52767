package plan

import (
	"fmt"
	"math"
)

// maxInt32 is the largest value an int32 index can hold.
const maxInt32 = math.MaxInt32

// Rows is the CSR row numbering of contract §2. Sequence b (with
// seqlen_k_b = cuK[b+1]-cuK[b]) owns rows_b = ceil(seqlen_k_b/blkKV) KV
// blocks. Rows are numbered block-major, then batch: all sequences' block 0
// first (in batch order), then every sequence that has a block 1, and so on.
//
// Batch[r] and Block[r] give the (sequence, batch-local block) of row r;
// RowOf is the inverse.
type Rows struct {
	Total int     // total_rows = sum_b rows_b
	Batch []int32 // [Total] sequence of row r
	Block []int32 // [Total] batch-local block index of row r

	NumSeq    int     // B = len(cuK)-1
	BlkKV     int     // block size in keys the numbering was built with
	Count     []int32 // [NumSeq] rows_b
	SeqlenK   []int32 // [NumSeq] seqlen_k_b = cuK[b+1]-cuK[b]
	MaxBlocks int     // max_b rows_b

	base   []int32 // [NumSeq+1] prefix sum of Count
	perm   []int32 // [Total] perm[base[b]+j] = row of (b, j)
	active []int32 // [NumSeq] scratch of Reset
}

// CountRows validates cu_seqlens_k and blk_kv like NewRows and returns
// total_rows = sum_b ceil(seqlen_k_b/blkKV) without allocating. Callers that
// hold a CSR of known shape compare its row count with this before calling
// NewRows, whose memory grows with total_rows (12 bytes per row): a
// mismatching CSR is then rejected before anything is allocated.
func CountRows(cuK []int32, blkKV int) (int, error) {
	if blkKV < 1 {
		return 0, fmt.Errorf("plan: blk_kv = %d: must be >= 1", blkKV)
	}
	if err := checkCuSeqlens("cu_seqlens_k", cuK); err != nil {
		return 0, err
	}
	var total int64
	for b := 0; b+1 < len(cuK); b++ {
		total += ceilDiv64(int64(cuK[b+1])-int64(cuK[b]), int64(blkKV))
		if total > maxInt32-1 {
			return 0, fmt.Errorf("plan: cu_seqlens_k: total_rows exceeds %d at sequence %d (blk_kv = %d)", maxInt32-1, b, blkKV)
		}
	}
	return int(total), nil
}

// NewRows builds the row numbering from cu_seqlens_k. cuK must have at least
// one element, be non-negative and non-decreasing (cuK[0] need not be 0, as
// in the reference); blkKV must be >= 1 and the total row count must fit in
// int32. Everything is checked (CountRows) before anything is allocated; the
// result holds 16*(B+1) + 12*total_rows bytes.
func NewRows(cuK []int32, blkKV int) (*Rows, error) {
	r := new(Rows)
	if err := r.Reset(cuK, blkKV); err != nil {
		return nil, err
	}
	return r, nil
}

// Reset rebuilds r as NewRows(cuK, blkKV) builds a new numbering, in r's
// buffers where their capacity fits, so that a caller that renumbers for
// every call allocates only when the batch or the row count grows past
// what r has held. On error r is unchanged.
func (r *Rows) Reset(cuK []int32, blkKV int) error {
	total, err := CountRows(cuK, blkKV)
	if err != nil {
		return err
	}
	nb := len(cuK) - 1
	r.NumSeq, r.BlkKV, r.Total, r.MaxBlocks = nb, blkKV, total, 0
	r.Count, r.SeqlenK, r.base = grow(r.Count, nb), grow(r.SeqlenK, nb), grow(r.base, nb+1)
	r.base[0] = 0
	for b := 0; b < nb; b++ {
		l := cuK[b+1] - cuK[b]
		n := int32(ceilDiv64(int64(l), int64(blkKV)))
		r.SeqlenK[b] = l
		r.Count[b] = n
		r.base[b+1] = r.base[b] + n
		r.MaxBlocks = max(r.MaxBlocks, int(n))
	}
	r.Batch, r.Block, r.perm = grow(r.Batch, r.Total), grow(r.Block, r.Total), grow(r.perm, r.Total)
	active := grow(r.active, nb)[:0]
	for b := 0; b < nb; b++ {
		if r.Count[b] > 0 {
			active = append(active, int32(b))
		}
	}
	r.active = active
	row := 0
	for j := int32(0); len(active) > 0; j++ {
		n := 0
		for _, b := range active {
			r.Batch[row] = b
			r.Block[row] = j
			r.perm[r.base[b]+j] = int32(row)
			row++
			if r.Count[b] > j+1 {
				active[n] = b
				n++
			}
		}
		active = active[:n]
	}
	return nil
}

// RowOf returns the row of (sequence b, block j), or -1 when (b, j) has no
// row (b or j out of range).
func (r *Rows) RowOf(b, j int) int {
	if r == nil || b < 0 || b >= r.NumSeq || j < 0 || j >= int(r.Count[b]) {
		return -1
	}
	return int(r.perm[int(r.base[b])+j])
}

// checkCuSeqlens checks a [B+1] prefix-sum array: at least one element,
// non-negative, non-decreasing.
func checkCuSeqlens(name string, cu []int32) error {
	if len(cu) < 1 {
		return fmt.Errorf("plan: %s has %d elements: must have shape [B + 1] with at least one element", name, len(cu))
	}
	for i, v := range cu {
		if v < 0 {
			return fmt.Errorf("plan: %s[%d] = %d: must be >= 0", name, i, v)
		}
		if i > 0 && v < cu[i-1] {
			return fmt.Errorf("plan: %s[%d] = %d: must be >= %s[%d] = %d (non-decreasing)", name, i, v, name, i-1, cu[i-1])
		}
	}
	return nil
}

// queryBatchesInto checks cu_seqlens_q against total_q and returns, in
// buf's storage (grown as needed), the sequence of every global query row,
// -1 for rows outside every sequence (rows before cuQ[0]).
func queryBatchesInto(buf, cuQ []int32, totalQ, nb int) ([]int32, error) {
	if err := checkQueryBatches(cuQ, totalQ, nb); err != nil {
		return nil, err
	}
	qb := grow(buf, totalQ)
	for i := range qb {
		qb[i] = -1
	}
	for b := 0; b < nb; b++ {
		for q := cuQ[b]; q < cuQ[b+1]; q++ {
			qb[q] = int32(b)
		}
	}
	return qb, nil
}

// checkQueryBatches checks cu_seqlens_q against total_q and the nb
// sequences of cu_seqlens_k, the checks of queryBatches without its
// result.
func checkQueryBatches(cuQ []int32, totalQ, nb int) error {
	if err := checkCuSeqlens("cu_seqlens_q", cuQ); err != nil {
		return err
	}
	if len(cuQ) != nb+1 {
		return fmt.Errorf("plan: cu_seqlens_q has %d elements: must have shape [B + 1] = [%d] matching cu_seqlens_k", len(cuQ), nb+1)
	}
	if int64(cuQ[nb]) > int64(totalQ) {
		return fmt.Errorf("plan: cu_seqlens_q[%d] = %d: must be <= total_q = %d", nb, cuQ[nb], totalQ)
	}
	return nil
}

// mulSat returns the product of non-negative factors, saturated at
// math.MaxInt64 (so that a bound check on the result cannot be fooled by a
// wrapped product).
func mulSat(f ...int64) int64 {
	p := int64(1)
	for _, x := range f {
		if x != 0 && p > math.MaxInt64/x {
			p = math.MaxInt64
		} else {
			p *= x
		}
	}
	return p
}

// addSat returns a+b for non-negative a, b, saturated at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// grow returns buf resliced to n when its capacity allows, else a new slice.
func grow(buf []int32, n int) []int32 {
	if cap(buf) >= n {
		return buf[:n]
	}
	return make([]int32, n)
}
