package plan

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
)

func TestNewRowsNumbering(t *testing.T) {
	// seqlen_k = 3, 0, 9, 5 blocks of 4 -> rows_b = 1, 0, 3, 2
	rows, err := NewRows([]int32{0, 3, 3, 12, 17}, 4)
	if err != nil {
		t.Fatal(err)
	}
	wantB := []int32{0, 2, 3, 2, 3, 2}
	wantJ := []int32{0, 0, 0, 1, 1, 2}
	if rows.Total != 6 || !slices.Equal(rows.Batch, wantB) || !slices.Equal(rows.Block, wantJ) {
		t.Fatalf("got total %d batch %v block %v", rows.Total, rows.Batch, rows.Block)
	}
	for r := range rows.Total {
		if got := rows.RowOf(int(rows.Batch[r]), int(rows.Block[r])); got != r {
			t.Fatalf("RowOf(%d, %d) = %d, want %d", rows.Batch[r], rows.Block[r], got, r)
		}
	}
	for _, bj := range [][2]int{{1, 0}, {0, 1}, {-1, 0}, {4, 0}, {2, 3}, {2, -1}} {
		if got := rows.RowOf(bj[0], bj[1]); got != -1 {
			t.Fatalf("RowOf(%d, %d) = %d, want -1", bj[0], bj[1], got)
		}
	}
	var nilRows *Rows
	if nilRows.RowOf(0, 0) != -1 {
		t.Fatal("nil RowOf")
	}
	if rows.MaxBlocks != 3 || !slices.Equal(rows.Count, []int32{1, 0, 3, 2}) {
		t.Fatalf("count %v max %d", rows.Count, rows.MaxBlocks)
	}
}

func TestNewRowsRejects(t *testing.T) {
	_, err := NewRows([]int32{0, 4}, 0)
	wantErr(t, err, "blk_kv = 0")
	_, err = NewRows(nil, 4)
	wantErr(t, err, "cu_seqlens_k", "[B + 1]")
	_, err = NewRows([]int32{-1, 4}, 4)
	wantErr(t, err, "cu_seqlens_k[0] = -1", ">= 0")
	_, err = NewRows([]int32{0, 8, 4}, 4)
	wantErr(t, err, "cu_seqlens_k[2] = 4", "non-decreasing")
	_, err = NewRows([]int32{0, 2147483647, 2147483647}, 1)
	wantErr(t, err, "total_rows exceeds")
}

func TestBuildK2QCSRMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var reuse *CSR
	for it := 0; it < 400; it++ {
		p := randProblem(rng)
		wantRP, wantQI, total := naiveCSR(p)
		c, err := BuildK2QCSR(nil, p.q2k, p.hkv, p.totalQ, p.topK, p.cuQ, p.cuK, p.blkKV)
		if err != nil {
			t.Fatalf("it %d: %v", it, err)
		}
		if c.TotalRows != total || c.Hkv != p.hkv || c.Stride != p.totalQ*p.topK {
			t.Fatalf("it %d: shape %d %d %d", it, c.TotalRows, c.Hkv, c.Stride)
		}
		if !slices.Equal(c.RowPtr, wantRP) || !slices.Equal(c.QIdx, wantQI) {
			t.Fatalf("it %d: mismatch\nrp %v\nwant %v\nqi %v\nwant %v", it, c.RowPtr, wantRP, c.QIdx, wantQI)
		}
		rows, err := NewRows(p.cuK, p.blkKV)
		if err != nil {
			t.Fatal(err)
		}
		if err := ValidateCSR(c, p.totalQ, p.topK, p.cuQ, rows); err != nil {
			t.Fatalf("it %d: ValidateCSR: %v", it, err)
		}
		// Reuse a buffer holding garbage from an earlier, larger problem.
		for i := range reuse.rowPtrOrNil() {
			reuse.RowPtr[i] = 77
		}
		reuse, err = BuildK2QCSR(reuse, p.q2k, p.hkv, p.totalQ, p.topK, p.cuQ, p.cuK, p.blkKV)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(reuse.RowPtr, wantRP) || !slices.Equal(reuse.QIdx, wantQI) {
			t.Fatalf("it %d: reused dst mismatch", it)
		}
	}
}

func (c *CSR) rowPtrOrNil() []int32 {
	if c == nil {
		return nil
	}
	return c.RowPtr
}

func TestBuildK2QCSRReusesCapacity(t *testing.T) {
	p := problem{hkv: 2, totalQ: 3, topK: 2, blkKV: 2, cuQ: []int32{0, 3}, cuK: []int32{0, 5},
		q2k: []int32{0, 1, -1, 2, 2, -1, 1, -1, -1, -1, 0, 2}}
	dst := &CSR{RowPtr: make([]int32, 0, 100), QIdx: make([]int32, 0, 100)}
	rp0, qi0 := &dst.RowPtr[:1][0], &dst.QIdx[:1][0]
	c, err := BuildK2QCSR(dst, p.q2k, p.hkv, p.totalQ, p.topK, p.cuQ, p.cuK, p.blkKV)
	if err != nil {
		t.Fatal(err)
	}
	if c != dst || &c.RowPtr[0] != rp0 || &c.QIdx[0] != qi0 {
		t.Fatal("buffers not reused")
	}
	// rows: block 0,1,2 -> head 0: row0 {0}, row1 {0}, row2 {1, 2}; head 1: row0 {2}, row1 {0}, row2 {2}
	if !slices.Equal(c.RowPtr, []int32{0, 1, 2, 4, 0, 1, 2, 3}) {
		t.Fatalf("rowptr %v", c.RowPtr)
	}
	if !slices.Equal(c.QIdx, []int32{0, 0, 1, 2, -1, -1, 2, 0, 2, -1, -1, -1}) {
		t.Fatalf("qidx %v", c.QIdx)
	}
}

func TestBuildK2QCSRRejects(t *testing.T) {
	// 3 sequences: seqlen_q 2, 0, 3; seqlen_k 9, 4, 20 with blk 4 -> 3, 1, 5 blocks.
	cuQ := []int32{0, 2, 2, 5}
	cuK := []int32{0, 9, 13, 33}
	base := func() []int32 {
		q2k := make([]int32, 2*5*4)
		for i := range q2k {
			q2k[i] = -1
		}
		return q2k
	}
	build := func(q2k []int32, hkv, totalQ, topK int, cq, ck []int32, blk int) error {
		_, err := BuildK2QCSR(nil, q2k, hkv, totalQ, topK, cq, ck, blk)
		return err
	}
	if err := build(base(), 2, 5, 4, cuQ, cuK, 4); err != nil {
		t.Fatal(err)
	}
	q := base()
	q[(1*5+4)*4+3] = 5 // h=1, q=4 (sequence 2, 5 blocks), k=3
	wantErr(t, build(q, 2, 5, 4, cuQ, cuK, 4), "q2k_indices[h=1, q=4, k=3] = 5", "block id out of range [0, 5) for sequence 2")
	q = base()
	q[(0*5+1)*4+0] = 3 // sequence 0 has 3 blocks
	wantErr(t, build(q, 2, 5, 4, cuQ, cuK, 4), "q2k_indices[h=0, q=1, k=0] = 3", "[0, 3) for sequence 0")
	q = base()
	q[2] = -2
	wantErr(t, build(q, 2, 5, 4, cuQ, cuK, 4), "q2k_indices[h=0, q=0, k=2] = -2", ">= 0, or -1")
	q = base()
	q[(0*5+3)*4+0], q[(0*5+3)*4+2] = 4, 4
	wantErr(t, build(q, 2, 5, 4, cuQ, cuK, 4), "q2k_indices[h=0, q=3, k=2] = 4", "duplicate block id (also at k=0)")
	// a later valid list must not see stale duplicate marks
	q = base()
	q[(0*5+3)*4+0] = 4
	q[(0*5+4)*4+1] = 4
	if err := build(q, 2, 5, 4, cuQ, cuK, 4); err != nil {
		t.Fatal(err)
	}
	// query rows outside every sequence
	q = base()
	q[(1*5+4)*4] = 0
	wantErr(t, build(q, 2, 5, 4, []int32{0, 2, 2, 4}, cuK, 4), "q2k_indices[h=1, q=4, k=0] = 0", "outside every sequence")
	q = base()
	q[0] = 0
	wantErr(t, build(q, 2, 5, 4, []int32{1, 2, 2, 5}, cuK, 4), "q2k_indices[h=0, q=0, k=0] = 0", "outside every sequence")
	// shapes and scalars
	wantErr(t, build(base()[1:], 2, 5, 4, cuQ, cuK, 4), "q2k_indices has 39 elements", "[2, 5, 4] = 40")
	wantErr(t, build(base(), 0, 5, 4, cuQ, cuK, 4), "head_kv = 0")
	wantErr(t, build(base(), 2, -1, 4, cuQ, cuK, 4), "total_q = -1")
	wantErr(t, build(base(), 2, 5, 0, cuQ, cuK, 4), "topK = 0")
	wantErr(t, build(base(), 2, 5, 4, cuQ, cuK, 0), "blk_kv = 0")
	wantErr(t, build(base(), 2, 5, 4, []int32{0, 2, 2, 6}, cuK, 4), "cu_seqlens_q[3] = 6", "<= total_q = 5")
	wantErr(t, build(base(), 2, 5, 4, []int32{0, 2, 5}, cuK, 4), "cu_seqlens_q has 3 elements", "[4]")
	wantErr(t, build(base(), 2, 5, 4, []int32{0, 3, 2, 5}, cuK, 4), "cu_seqlens_q[2] = 2", "non-decreasing")
	wantErr(t, build(base(), 2, 5, 4, []int32{-1, 2, 2, 5}, cuK, 4), "cu_seqlens_q[0] = -1")
	wantErr(t, build(base(), 2, 5, 4, cuQ, []int32{0, 9, 8, 33}, 4), "cu_seqlens_k[2] = 8")
	wantErr(t, build(nil, 2, 5, 4, nil, nil, 4), "q2k_indices has 0 elements")
	wantErr(t, build(nil, 1<<20, 1<<20, 1<<20, cuQ, cuK, 4), "total_q*topK")
}

func TestValidateCSRRejects(t *testing.T) {
	p := problem{hkv: 2, totalQ: 3, topK: 2, blkKV: 2, cuQ: []int32{0, 3}, cuK: []int32{0, 5},
		q2k: []int32{0, 1, -1, 2, 2, -1, 1, -1, -1, -1, 0, 2}}
	rows, err := NewRows(p.cuK, p.blkKV)
	if err != nil {
		t.Fatal(err)
	}
	good, err := BuildK2QCSR(nil, p.q2k, p.hkv, p.totalQ, p.topK, p.cuQ, p.cuK, p.blkKV)
	if err != nil {
		t.Fatal(err)
	}
	clone := func() *CSR {
		c := *good
		c.RowPtr, c.QIdx = slices.Clone(good.RowPtr), slices.Clone(good.QIdx)
		return &c
	}
	// validate runs ValidateCSR and ValidateCSRInto on one scratch reused
	// by every call of the test (dirty from the previous call, refusals
	// included) and requires the same verdict, message for message.
	var scratch CSRScratch
	validate := func(c *CSR, totalQ, topK int, cuQ []int32, rows *Rows) error {
		t.Helper()
		err := ValidateCSR(c, totalQ, topK, cuQ, rows)
		if into := ValidateCSRInto(&scratch, c, totalQ, topK, cuQ, rows); fmt.Sprint(into) != fmt.Sprint(err) {
			t.Errorf("ValidateCSRInto: %v; ValidateCSR: %v", into, err)
		}
		return err
	}
	check := func(c *CSR, subs ...string) {
		t.Helper()
		wantErr(t, validate(c, p.totalQ, p.topK, p.cuQ, rows), subs...)
	}
	if err := validate(good, p.totalQ, p.topK, p.cuQ, rows); err != nil {
		t.Fatal(err)
	}
	// A wider stride with garbage in the tail is accepted.
	wide := &CSR{Hkv: 2, TotalRows: 3, Stride: 9, RowPtr: good.RowPtr, QIdx: make([]int32, 18)}
	copy(wide.QIdx[0:4], good.QIdx[0:4])
	copy(wide.QIdx[9:12], good.QIdx[6:9])
	wide.QIdx[17] = 99
	if err := validate(wide, p.totalQ, p.topK, p.cuQ, rows); err != nil {
		t.Fatal(err)
	}
	wantErr(t, validate(nil, 3, 2, p.cuQ, rows), "CSR is nil")
	wantErr(t, validate(good, 3, 2, p.cuQ, nil), "rows is nil")
	wantErr(t, validate(good, -1, 2, p.cuQ, rows), "total_q = -1")
	wantErr(t, validate(good, 3, 0, p.cuQ, rows), "topK = 0")
	c := clone()
	c.Hkv = 0
	check(c, "head dimension = 0")
	c = clone()
	c.TotalRows = 4
	check(c, "k2q_row_ptr has 4 rows", "total_rows = 3")
	c = clone()
	c.RowPtr = c.RowPtr[:7]
	check(c, "k2q_row_ptr has 7 elements", "[2, 4]")
	c = clone()
	c.Stride = 5
	check(c, "k2q_q_indices.shape[1] = 5", ">= total_q * topK = 6")
	c = clone()
	c.QIdx = c.QIdx[:11]
	check(c, "k2q_q_indices has 11 elements")
	c = clone()
	c.RowPtr[4] = 1
	check(c, "k2q_row_ptr[h=1, 0] = 1", "expected 0")
	c = clone()
	c.RowPtr[2] = 0
	check(c, "k2q_row_ptr[h=0, 2] = 0", "non-decreasing")
	c = clone()
	c.RowPtr[3] = 7
	check(c, "k2q_row_ptr[h=0, 3] = 7", "<= k2q_q_indices.shape[1] = 6")
	c = clone()
	c.QIdx[2] = 3
	check(c, "k2q_q_indices[h=0, 2] = 3", "out of range [0, 3)")
	c = clone()
	c.QIdx[2] = -1
	check(c, "k2q_q_indices[h=0, 2] = -1", "out of range")
	c = clone()
	c.QIdx[3] = 1
	check(c, "k2q_q_indices[h=0, 3] = 1", "strictly ascending")
	wantErr(t, validate(good, 3, 2, []int32{0, 4}, rows), "cu_seqlens_q[1] = 4", "total_q = 3")
	wantErr(t, validate(good, 3, 2, []int32{0, 1, 3}, rows), "cu_seqlens_q has 3 elements")
	// more than topK blocks for one query: query 0 selects blocks 0 and 1 in head 0; topK = 1
	wantErr(t, validate(good, 3, 1, p.cuQ, rows), "query 0 of sequence 0 (global query row 0)", "more than topK = 1")
	// The scratch comes out of the topK refusal above holding counts; the
	// next call must not see them.
	if err := validate(good, p.totalQ, p.topK, p.cuQ, rows); err != nil {
		t.Fatalf("after a refusal: %v", err)
	}
}

// TestValidateCSRIntoAllocs: with a scratch that has held a call of the
// same total_q, ValidateCSRInto allocates nothing on an accepted CSR, while
// ValidateCSR allocates its counters per call (the difference the scratch
// exists for); a smaller total_q after a larger one reuses the scratch.
func TestValidateCSRIntoAllocs(t *testing.T) {
	p := problem{hkv: 2, totalQ: 3, topK: 2, blkKV: 2, cuQ: []int32{0, 3}, cuK: []int32{0, 5},
		q2k: []int32{0, 1, -1, 2, 2, -1, 1, -1, -1, -1, 0, 2}}
	rows, err := NewRows(p.cuK, p.blkKV)
	if err != nil {
		t.Fatal(err)
	}
	c, err := BuildK2QCSR(nil, p.q2k, p.hkv, p.totalQ, p.topK, p.cuQ, p.cuK, p.blkKV)
	if err != nil {
		t.Fatal(err)
	}
	s := CSRScratch{cnt: make([]int32, 64)}
	run := func() {
		if err := ValidateCSRInto(&s, c, p.totalQ, p.topK, p.cuQ, rows); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(10, run); n != 0 {
		t.Errorf("ValidateCSRInto with a warm scratch allocates %v per call, want 0", n)
	}
	if n := testing.AllocsPerRun(10, func() { _ = ValidateCSR(c, p.totalQ, p.topK, p.cuQ, rows) }); n < 1 {
		t.Errorf("ValidateCSR allocates %v per call, want its counters", n)
	}
	if err := ValidateCSRInto(nil, c, p.totalQ, p.topK, p.cuQ, rows); err != nil {
		t.Errorf("nil scratch: %v", err)
	}
}
