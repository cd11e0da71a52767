package plan

import (
	"math"
	"testing"

	"github.com/sparseattn/msa/internal/allocs"
)

// allocated returns the bytes one call of f allocates (f is repeatable):
// see allocs.Bytes for why other goroutines' allocations do not count.
func allocated(f func()) uint64 { return allocs.Bytes(3, f) }

// TestCountRowsBeforeAllocation checks that a 1-row CSR with
// cu_seqlens_k = [0, 2^31-2] and blk_kv 1 is rejected before anything is
// allocated for its 2^31-2 rows (which would be a fatal out-of-memory):
// CountRows gives the row count without allocating, so the caller rejects
// the CSR shape first. Another goroutine allocates throughout, as other
// tests and benchmarks do on a loaded machine: the bounds are on the calls'
// own bytes (allocated), which a process-wide difference taken once also
// charged with that goroutine's allocations, so the test failed now and then.
func TestCountRowsBeforeAllocation(t *testing.T) {
	defer allocs.Churn()()
	cuK := []int32{0, math.MaxInt32 - 1}
	var n int
	var err error
	if got := allocated(func() { n, err = CountRows(cuK, 1) }); got > 1<<10 {
		t.Errorf("CountRows allocated %d bytes", got)
	}
	if err != nil || n != math.MaxInt32-1 {
		t.Fatalf("CountRows = %d, %v; want %d", n, err, math.MaxInt32-1)
	}
	c := &CSR{Hkv: 1, TotalRows: 1, Stride: 1, RowPtr: []int32{0, 0}, QIdx: []int32{-1}}
	if n == c.TotalRows {
		t.Fatal("the 1-row CSR must not match")
	}
	// Rejections allocate no more than their error message.
	for _, tc := range []struct {
		cuK []int32
		blk int
	}{{[]int32{0, math.MaxInt32}, 1}, {[]int32{0, 5, 3}, 1}, {[]int32{0, 5}, 0}, {nil, 1}} {
		if got := allocated(func() { _, err = NewRows(tc.cuK, tc.blk) }); err == nil || got > 1<<10 {
			t.Errorf("NewRows(%v, %d): err %v after %d bytes", tc.cuK, tc.blk, err, got)
		}
	}
	// Agreement with NewRows.
	for _, cu := range [][]int32{{0}, {3, 3}, {0, 1, 129, 300}, {7, 8, 300, 300, 1000}} {
		for _, blk := range []int{1, 7, 128} {
			n, err := CountRows(cu, blk)
			r, err2 := NewRows(cu, blk)
			if err != nil || err2 != nil || n != r.Total {
				t.Fatalf("CountRows(%v, %d) = %d, %v; NewRows total %v, %v", cu, blk, n, err, r, err2)
			}
		}
	}
}

// TestDecodeParamsRange checks the int32 ranges of the decode params, with
// a zero batch too (seqlen_q and num_qo_heads of any size would wrap
// QStride), and that FixedDecodeSizes agrees with the built
// schedules without allocating.
func TestDecodeParamsRange(t *testing.T) {
	p := dp(0, 1, 4, 4)
	p.SeqlenQ = 1 << 40
	_, err := BuildDecodeSchedule(nil, nil, p)
	wantErr(t, err, "seqlen_q")
	p = dp(0, 1, 4, 4)
	p.HQ = 1 << 40
	_, err = BuildDecodeSchedule(nil, nil, p)
	wantErr(t, err, "num_qo_heads")

	for _, p := range []DecodeParams{dp(3, 2, 64, 100), dp(3, 2, 1, 100), dp(1, 1, 64, 8), dp(2, 4, 1000, 5000)} {
		p.FixedCapacity = true
		for _, fixed := range []int{0, 3} {
			p.FixedSplitPages = fixed
			var c, r int
			if got := allocated(func() { c, r, err = FixedDecodeSizes(p) }); got != 0 || err != nil {
				t.Fatalf("FixedDecodeSizes(%+v): %v after %d bytes", p, err, got)
			}
			s := mustDecode(t, pagesToSeq(make([]int, p.Batch)...), p)
			if c != s.Capacity || r != s.PartialRows {
				t.Fatalf("FixedDecodeSizes(%+v) = %d, %d; schedule has %d, %d", p, c, r, s.Capacity, s.PartialRows)
			}
		}
	}
	// A declared maximum that overflows is an error, not a wrapped size.
	p = dp(1, 1, 1<<20, math.MaxInt32)
	p.SeqlenQ, p.HQ, p.Hkv, p.PageSize, p.FixedSplitPages, p.FixedCapacity = math.MaxInt32, math.MaxInt32, math.MaxInt32, 1, 1, true
	_, _, err = FixedDecodeSizes(p)
	wantErr(t, err, "fixed capacity")
}

// TestValidateDecodeChunkPages rejects a caller-supplied schedule whose
// ChunkPages does not fit in int32 (its products with the split counts
// could wrap).
func TestValidateDecodeChunkPages(t *testing.T) {
	p := dp(2, 1, 64, 100)
	seq := pagesToSeq(40, 90)
	s := mustDecode(t, seq, p)
	s.ChunkPages = 1 << 62
	wantErr(t, ValidateDecodeSchedule(s, seq, p), "ChunkPages")
}

// TestSaturatingArithmetic checks mulSat and addSat at the int64 limits.
func TestSaturatingArithmetic(t *testing.T) {
	if mulSat(1<<31, 1<<31, 1<<31) != math.MaxInt64 || mulSat(1<<40, 1<<40, 0) != 0 || mulSat(3, 5) != 15 || mulSat() != 1 {
		t.Error("mulSat")
	}
	if addSat(math.MaxInt64-1, 5) != math.MaxInt64 || addSat(2, 3) != 5 {
		t.Error("addSat")
	}
	if ceilDiv64(math.MaxInt64, 2) != 1<<62 || ceilDiv64(0, 7) != 0 || ceilDiv64(7, 7) != 1 || ceilDiv64(8, 7) != 2 {
		t.Error("ceilDiv64")
	}
}
