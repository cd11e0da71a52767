package plan

import (
	"math/rand"
	"slices"
	"testing"
)

func TestFwdTargetFormula(t *testing.T) {
	cases := []struct {
		p    FwdParams
		want int
	}{
		// g = 32, ceil(32000/32) = 1000, ceil(1000/6) = 167 -> 5344, capped by 2*16*128 = 4096
		{FwdParams{TotalQ: 1000, TopK: 16, Hkv: 2, QheadPerKV: 4, BlkKV: 128, Workers: 3}, 4096},
		// g = 8, tg = 1
		{FwdParams{TotalQ: 10, TopK: 4, Hkv: 1, QheadPerKV: 16, BlkKV: 128, Workers: 132}, 8},
		// g = 128, tg capped at 512 -> 65536, capped by 2*32*128 = 8192
		{FwdParams{TotalQ: 1 << 20, TopK: 32, Hkv: 8, QheadPerKV: 1, BlkKV: 128, Workers: 1}, 8192},
		// small blk_kv: cap max(g, 2*4*2=16) = 64 (g), round_up(64, 64) = 64
		{FwdParams{TotalQ: 4096, TopK: 4, Hkv: 1, QheadPerKV: 2, BlkKV: 2, Workers: 1}, 64},
		// g = 42 (qhead_per_kv = 3): tg = ceil(ceil(300/42)/2) = 4 -> 168
		{FwdParams{TotalQ: 100, TopK: 3, Hkv: 1, QheadPerKV: 3, BlkKV: 128, Workers: 1}, 168},
		// empty problem and nonsense params never return < 1
		{FwdParams{}, 128},
		{FwdParams{TotalQ: -5, TopK: -1, Hkv: -1, QheadPerKV: 1000, BlkKV: -3, Workers: -2}, 1},
	}
	for _, c := range cases {
		if got := FwdTarget(c.p); got != c.want {
			t.Errorf("FwdTarget(%+v) = %d, want %d", c.p, got, c.want)
		}
	}
	p := cases[0].p
	if got := FwdCapacity(10, p); got != 10*2+8 {
		t.Errorf("FwdCapacity = %d, want 28", got)
	}
	if got := FwdCapacity(0, FwdParams{Hkv: 1, QheadPerKV: 1, TopK: 1, BlkKV: 1, Workers: 1}); got != 1 {
		t.Errorf("empty FwdCapacity = %d, want 1", got)
	}
}

// checkSchedule checks the schedule invariants independently of
// ValidateFwdSchedule.
func checkSchedule(t *testing.T, p problem, fp FwdParams, rows *Rows, c *CSR, s *FwdSchedule) {
	t.Helper()
	target := FwdTarget(fp)
	if s.Capacity != FwdCapacity(rows.Total, fp) || int(s.WorkCount) > s.Capacity || len(s.Metadata) != s.Capacity*6 {
		t.Fatalf("capacity %d workcount %d len %d", s.Capacity, s.WorkCount, len(s.Metadata))
	}
	cover := make([]int, len(c.QIdx))
	prevKey := -1
	for i := 0; i < s.Capacity; i++ {
		m := s.Metadata[i*6 : i*6+6]
		if i >= int(s.WorkCount) {
			if !slices.Equal(m, make([]int32, 6)) {
				t.Fatalf("padding item %d = %v", i, m)
			}
			continue
		}
		h, r := int(m[0]), int(m[1])
		if m[3] < 1 || int(m[3]) > target {
			t.Fatalf("item %d count %d target %d", i, m[3], target)
		}
		key := (h*rows.Total+r)*1<<20 + int(m[2])
		if key <= prevKey {
			t.Fatalf("item %d out of order", i)
		}
		prevKey = key
		lo := int(c.RowPtr[h*(rows.Total+1)+r])
		for e := lo + int(m[2]); e < lo+int(m[2]+m[3]); e++ {
			cover[h*c.Stride+e]++
		}
	}
	for h := 0; h < c.Hkv; h++ {
		end := int(c.RowPtr[h*(rows.Total+1)+rows.Total])
		for e := 0; e < c.Stride; e++ {
			want := 0
			if e < end {
				want = 1
			}
			if cover[h*c.Stride+e] != want {
				t.Fatalf("entry h=%d e=%d covered %d times", h, e, cover[h*c.Stride+e])
			}
		}
	}
	// slots: rank of the block among the query's sorted selected blocks
	for h := 0; h < c.Hkv; h++ {
		for r := 0; r < rows.Total; r++ {
			b := rows.Batch[r]
			for e := c.RowPtr[h*(rows.Total+1)+r]; e < c.RowPtr[h*(rows.Total+1)+r+1]; e++ {
				v := s.QSplit[h*c.Stride+int(e)]
				q := int(p.cuQ[b] + c.QIdx[h*c.Stride+int(e)])
				if v&0xffffff != c.QIdx[h*c.Stride+int(e)] || v>>24 != naiveSlot(p, h, q, rows.Block[r]) {
					t.Fatalf("qsplit h=%d e=%d = %x", h, e, v)
				}
			}
		}
	}
	for q := 0; q < p.totalQ; q++ {
		for h := 0; h < p.hkv; h++ {
			n := int32(0)
			for _, v := range p.q2k[(h*p.totalQ+q)*p.topK:][:p.topK] {
				if v >= 0 {
					n++
				}
			}
			if s.SplitCounts[q*p.hkv+h] != n {
				t.Fatalf("split_counts[%d,%d] = %d want %d", q, h, s.SplitCounts[q*p.hkv+h], n)
			}
		}
	}
	for i, v := range s.QSplit {
		h, e := i/c.Stride, i%c.Stride
		if e >= int(c.RowPtr[h*(rows.Total+1)+rows.Total]) && v != -1 {
			t.Fatalf("qsplit tail %d = %d", i, v)
		}
	}
}

func TestFwdScheduleInvariants(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	var reuse *FwdSchedule
	for it := 0; it < 300; it++ {
		p := randProblem(rng)
		fp := fwdParams(p)
		fp.QheadPerKV = []int{1, 2, 4, 8, 16}[rng.Intn(5)]
		fp.Workers = 1 + rng.Intn(8)
		rows, c, s := buildAll(t, p, fp)
		checkSchedule(t, p, fp, rows, c, s)
		if err := ValidateFwdSchedule(s, c, rows, p.cuQ, fp); err != nil {
			t.Fatalf("it %d: %v", it, err)
		}
		// Determinism and reuse of a dirty buffer.
		if reuse != nil {
			for i := range reuse.Metadata {
				reuse.Metadata[i] = 5
			}
			for i := range reuse.SplitCounts {
				reuse.SplitCounts[i] = 9
			}
		}
		var err error
		reuse, err = BuildFwdSchedule(reuse, c, rows, p.cuQ, fp)
		if err != nil {
			t.Fatal(err)
		}
		if reuse.WorkCount != s.WorkCount || !slices.Equal(reuse.Metadata, s.Metadata) ||
			!slices.Equal(reuse.QSplit, s.QSplit) || !slices.Equal(reuse.SplitCounts, s.SplitCounts) {
			t.Fatalf("it %d: rebuild differs", it)
		}
	}
}

func TestFwdScheduleChunks(t *testing.T) {
	// One sequence, 40 queries all selecting block 0 and 1; target 8 (g = 8).
	p := problem{hkv: 1, totalQ: 40, topK: 2, blkKV: 4, cuQ: []int32{0, 40}, cuK: []int32{0, 8}}
	for q := 0; q < 40; q++ {
		p.q2k = append(p.q2k, int32(q%2), int32(1-q%2))
	}
	fp := FwdParams{TotalQ: 40, Hkv: 1, QheadPerKV: 16, TopK: 2, BlkKV: 4, Workers: 100}
	if FwdTarget(fp) != 8 {
		t.Fatalf("target %d", FwdTarget(fp))
	}
	rows, c, s := buildAll(t, p, fp)
	if s.WorkCount != 10 || s.Capacity != 2+10 {
		t.Fatalf("work %d cap %d", s.WorkCount, s.Capacity)
	}
	for i := 0; i < 10; i++ {
		want := []int32{0, int32(i / 5), int32(i%5) * 8, 8, 0, int32(i / 5)}
		if !slices.Equal(s.Metadata[i*6:i*6+6], want) {
			t.Fatalf("item %d = %v want %v", i, s.Metadata[i*6:i*6+6], want)
		}
	}
	checkSchedule(t, p, fp, rows, c, s)
	// slots: every query has block 0 in slot 0, block 1 in slot 1
	for e := 0; e < 40; e++ {
		if s.QSplit[e] != int32(e) || s.QSplit[40+e] != int32(e)|1<<24 {
			t.Fatalf("qsplit %d: %x %x", e, s.QSplit[e], s.QSplit[40+e])
		}
	}
}

func TestBuildFwdScheduleRejects(t *testing.T) {
	p := problem{hkv: 2, totalQ: 3, topK: 2, blkKV: 2, cuQ: []int32{0, 3}, cuK: []int32{0, 5},
		q2k: []int32{0, 1, -1, 2, 2, -1, 1, -1, -1, -1, 0, 2}}
	fp := fwdParams(p)
	rows, c, _ := buildAll(t, p, fp)
	bad := func(mut func(*FwdParams), subs ...string) {
		t.Helper()
		q := fp
		mut(&q)
		_, err := BuildFwdSchedule(nil, c, rows, p.cuQ, q)
		wantErr(t, err, subs...)
		wantErr(t, ValidateFwdSchedule(&FwdSchedule{}, c, rows, p.cuQ, q), subs...)
	}
	bad(func(q *FwdParams) { q.TotalQ = 1 << 24 }, "total_q = 16777216", "qsplit packing")
	bad(func(q *FwdParams) { q.TotalQ = -1 }, "total_q = -1")
	bad(func(q *FwdParams) { q.TopK = 128 }, "topK = 128", "[1, 127]")
	bad(func(q *FwdParams) { q.TopK = 0 }, "topK = 0")
	bad(func(q *FwdParams) { q.Hkv = 0 }, "head_kv = 0")
	bad(func(q *FwdParams) { q.Hkv = 3 }, "head dimension = 2", "head_kv = 3")
	bad(func(q *FwdParams) { q.QheadPerKV = 0 }, "qhead_per_kv = 0")
	bad(func(q *FwdParams) { q.BlkKV = 0 }, "blk_kv = 0")
	bad(func(q *FwdParams) { q.BlkKV = 4 }, "blk_kv = 4", "rows were built with blk_kv = 2")
	bad(func(q *FwdParams) { q.Workers = 0 }, "workers (numSM) = 0")
	bad(func(q *FwdParams) { q.TopK = 1 }, "more than topK = 1")
	_, err := BuildFwdSchedule(nil, nil, rows, p.cuQ, fp)
	wantErr(t, err, "CSR is nil")
	_, err = BuildFwdSchedule(nil, c, nil, p.cuQ, fp)
	wantErr(t, err, "rows is nil")
	_, err = BuildFwdSchedule(nil, c, rows, []int32{0, 4}, fp)
	wantErr(t, err, "cu_seqlens_q[1] = 4")
}

func TestValidateFwdScheduleRejects(t *testing.T) {
	p := problem{hkv: 2, totalQ: 3, topK: 2, blkKV: 2, cuQ: []int32{0, 3}, cuK: []int32{0, 5},
		q2k: []int32{0, 1, -1, 2, 2, -1, 1, -1, -1, -1, 0, 2}}
	fp := fwdParams(p)
	rows, c, good := buildAll(t, p, fp)
	if err := ValidateFwdSchedule(good, c, rows, p.cuQ, fp); err != nil {
		t.Fatal(err)
	}
	clone := func() *FwdSchedule {
		s := *good
		s.Metadata, s.QSplit, s.SplitCounts = slices.Clone(s.Metadata), slices.Clone(s.QSplit), slices.Clone(s.SplitCounts)
		return &s
	}
	check := func(s *FwdSchedule, subs ...string) {
		t.Helper()
		wantErr(t, ValidateFwdSchedule(s, c, rows, p.cuQ, fp), subs...)
	}
	// items: h0 r0 {0}, h0 r1 {0}, h0 r2 {1,2}, h1 r0 {2}, h1 r1 {0}, h1 r2 {2}
	if good.WorkCount != 6 {
		t.Fatalf("work count %d", good.WorkCount)
	}
	check(nil, "schedule is nil")
	s := clone()
	s.Metadata = s.Metadata[:len(s.Metadata)-1]
	check(s, "scheduler_metadata has", "[capacity, 6]")
	s = clone()
	s.Capacity, s.Metadata = 0, nil
	check(s, "capacity >= 1")
	s = clone()
	s.WorkCount = int32(s.Capacity + 1)
	check(s, "work_count[0]", "[0, capacity")
	s = clone()
	s.WorkCount = -1
	check(s, "work_count[0] = -1")
	s = clone()
	s.WorkCount = 5
	check(s, "covered by no work item")
	s = clone()
	s.QSplit = s.QSplit[1:]
	check(s, "qsplit_indices has 11 elements")
	s = clone()
	s.SplitCounts = s.SplitCounts[1:]
	check(s, "split_counts has 5 elements", "(3, 2)")
	s = clone()
	s.Metadata[MetaHead] = 2
	check(s, "scheduler_metadata[0].head_kv = 2")
	s = clone()
	s.Metadata[MetaRow] = 3
	check(s, "scheduler_metadata[0].row = 3")
	s = clone()
	s.Metadata[MetaBatch] = 1
	check(s, "scheduler_metadata[0] (batch, kv_block) = (1, 0)")
	s = clone()
	s.Metadata[MetaBlock] = 1
	check(s, "(batch, kv_block) = (0, 1): expected (0, 0)")
	s = clone()
	s.Metadata[2*6+MetaQBegin] = 1
	check(s, "scheduler_metadata[2] (q_begin, q_count) = (1, 2)")
	s = clone()
	s.Metadata[2*6+MetaQBegin] = -1
	check(s, "(q_begin, q_count) = (-1, 2)")
	s = clone()
	s.Metadata[2*6+MetaQCount] = -1
	check(s, "(q_begin, q_count) = (0, -1)")
	s = clone()
	s.Metadata[2*6+MetaQCount] = 1 << 30
	check(s, "must lie inside [0, 2)")
	s = clone()
	copy(s.Metadata[6:12], s.Metadata[0:6]) // item 1 duplicates item 0
	check(s, "scheduler_metadata[1]", "covered twice")
	s = clone()
	s.QSplit[0] = -1
	check(s, "qsplit_indices[h=0, 0] = -1", "expected q_idx 0")
	s = clone()
	s.QSplit[0] = 1
	check(s, "qsplit_indices[h=0, 0] = 1")
	s = clone()
	s.QSplit[0] = 0 | 1<<24 // query 0, head 0 has blocks 0 (slot 0) and 1 (slot 1)
	check(s, "slot 1 of query row 0 is used twice")
	s = clone()
	s.QSplit[0] = 0 | 5<<24
	check(s, "slot 5 of query row 0 must be < split_counts[0, 0] = 2")
	s = clone()
	s.SplitCounts[0] = 3
	check(s, "split_counts[0, 0] = 3", "topK = 2")
	s = clone()
	s.SplitCounts[1*2+1] = 1 // query 1 selects nothing in head 1
	check(s, "split_counts[1, 1] = 1: expected 0")
	s = clone()
	s.SplitCounts[1*2+0] = -1 // query 1 selects block 2 in head 0
	check(s, "split_counts[1, 0] = -1")
	// corrupt CSR is caught too
	bc := *c
	bc.RowPtr = slices.Clone(c.RowPtr)
	bc.RowPtr[1] = 2
	wantErr(t, ValidateFwdSchedule(good, &bc, rows, p.cuQ, fp), "k2q_q_indices[h=0, 1] = 0", "strictly ascending")
	// a reused schedule with a larger capacity and zero items for an empty CSR
	if err := ValidateFwdSchedule(&FwdSchedule{Capacity: 3, Metadata: make([]int32, 18), QSplit: good.QSplit, SplitCounts: good.SplitCounts}, c, rows, p.cuQ, fp); err == nil {
		t.Fatal("expected uncovered entries")
	}
}

func TestFwdScheduleEmpty(t *testing.T) {
	// No sequences / no queries / no keys: capacity 1, zero items.
	for _, p := range []problem{
		{hkv: 1, totalQ: 0, topK: 4, blkKV: 128, cuQ: []int32{0}, cuK: []int32{0}},
		{hkv: 2, totalQ: 0, topK: 4, blkKV: 128, cuQ: []int32{0, 0}, cuK: []int32{0, 300}},
		{hkv: 2, totalQ: 2, topK: 1, blkKV: 128, cuQ: []int32{0, 2}, cuK: []int32{5, 5}, q2k: []int32{-1, -1, -1, -1}},
	} {
		fp := fwdParams(p)
		rows, c, s := buildAll(t, p, fp)
		if s.WorkCount != 0 || s.Capacity < 1 {
			t.Fatalf("work %d cap %d", s.WorkCount, s.Capacity)
		}
		if err := ValidateFwdSchedule(s, c, rows, p.cuQ, fp); err != nil {
			t.Fatal(err)
		}
	}
}
