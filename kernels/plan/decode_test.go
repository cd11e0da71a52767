package plan

import (
	"math/rand"
	"slices"
	"testing"
)

func dp(batch, hkv, workers, maxPages int) DecodeParams {
	return DecodeParams{Batch: batch, SeqlenQ: 1, HQ: 16 * hkv, Hkv: hkv, PageSize: 128, Workers: workers, MaxPagesPerSeq: maxPages}
}

func pagesToSeq(pages ...int) []int32 {
	s := make([]int32, len(pages))
	for i, p := range pages {
		s[i] = int32(p * 128)
	}
	return s
}

func mustDecode(t *testing.T, seq []int32, p DecodeParams) *DecodeSchedule {
	t.Helper()
	s, err := BuildDecodeSchedule(nil, seq, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidateDecodeSchedule(s, seq, p); err != nil {
		t.Fatalf("ValidateDecodeSchedule on a fresh schedule: %v", err)
	}
	checkDecode(t, s, seq, p)
	return s
}

// checkDecode checks the schedule invariants independently.
func checkDecode(t *testing.T, s *DecodeSchedule, seq []int32, p DecodeParams) {
	t.Helper()
	i := 0
	for b := 0; b < p.Batch; b++ {
		pages := max(1, (int(seq[b])+p.PageSize-1)/p.PageSize)
		if int(s.SplitCounts[b])*s.ChunkPages < pages || (int(s.SplitCounts[b])-1)*s.ChunkPages >= pages {
			t.Fatalf("request %d: %d chunks of %d for %d pages", b, s.SplitCounts[b], s.ChunkPages, pages)
		}
		for q := 0; q < s.NumQTiles; q++ {
			for kv := 0; kv < int(s.SplitCounts[b]); kv++ {
				for h := 0; h < p.Hkv; h++ {
					if s.Request[i] != int32(b) || s.QTileIdx[i] != int32(q) || s.KVTile[i] != int32(kv) || s.KVHead[i] != int32(h) || s.Valid[i] != 1 {
						t.Fatalf("item %d = (%d %d %d %d %d), want (%d %d %d %d 1)", i, s.Request[i], s.QTileIdx[i], s.KVTile[i], s.KVHead[i], s.Valid[i], b, q, kv, h)
					}
					lo, hi := s.ItemPages(i, seq[b])
					if lo != kv*s.ChunkPages || hi != min(pages, lo+s.ChunkPages) || lo >= hi {
						t.Fatalf("item %d pages [%d, %d)", i, lo, hi)
					}
					qlo, qhi := s.ItemQueries(i)
					if qlo != q*s.QTile || qhi <= qlo || qhi > p.SeqlenQ {
						t.Fatalf("item %d queries [%d, %d)", i, qlo, qhi)
					}
					i++
				}
			}
		}
		if s.SplitKV {
			last := s.PartialRow(b, int(s.SplitCounts[b])-1, p.SeqlenQ-1)
			if s.PartialRow(b, 0, 0) != int(s.OIndptr[b]) || last >= int(s.OIndptr[b+1]) || last >= s.PartialRows {
				t.Fatalf("request %d partial rows overflow", b)
			}
		}
	}
	if i != s.WorkCount || s.WorkCount > s.Capacity {
		t.Fatalf("work count %d, items %d, capacity %d", s.WorkCount, i, s.Capacity)
	}
	for ; i < s.Capacity; i++ {
		if s.Valid[i] != 0 || s.Request[i] != 0 || s.KVTile[i] != 0 {
			t.Fatalf("padding item %d", i)
		}
	}
	if !s.SplitKV && s.PartialRows != 0 {
		t.Fatal("partial rows without split")
	}
}

func TestDecodeChunkRules(t *testing.T) {
	// disable_split_kv
	p := dp(1, 1, 132, 1000)
	p.DisableSplit = true
	s := mustDecode(t, pagesToSeq(1000), p)
	if s.SplitKV || s.ChunkPages != 1000 || s.SplitCounts[0] != 1 || s.WorkCount != 1 {
		t.Fatalf("disable: %+v", s)
	}
	// fixed_split_size: split even when one chunk suffices (batch invariance)
	p = dp(2, 1, 1, 1000)
	p.FixedSplitPages = 3
	s = mustDecode(t, pagesToSeq(10, 2), p)
	if !s.SplitKV || s.ChunkPages != 3 || !slices.Equal(s.SplitCounts, []int32{4, 1}) || s.PartialRows != 5*8 {
		t.Fatalf("fixed: %+v", s)
	}
	if !slices.Equal(s.OIndptr, []int32{0, 32, 40}) {
		t.Fatalf("o_indptr %v", s.OIndptr)
	}
	// fixed split size has no 256 cap
	p = dp(1, 1, 1, 1000)
	p.FixedSplitPages = 1
	s = mustDecode(t, pagesToSeq(1000), p)
	if s.SplitCounts[0] != 1000 {
		t.Fatalf("fixed 1: %d splits", s.SplitCounts[0])
	}
	// no split: B*q_tiles*Hkv >= numSM
	s = mustDecode(t, pagesToSeq(500, 500, 500, 500), dp(4, 8, 32, 1000))
	if s.SplitKV || s.ChunkPages != 1000 || s.WorkCount != 32 {
		t.Fatalf("busy: %+v", s)
	}
	// no split: max_pages <= 8
	s = mustDecode(t, pagesToSeq(8, 3), dp(2, 1, 132, 1000))
	if s.SplitKV || s.MaxSplits != 1 {
		t.Fatalf("short: %+v", s)
	}
	// binary search: ceil(100/c) <= 4 -> c = 25
	s = mustDecode(t, pagesToSeq(100), dp(1, 1, 4, 1000))
	if !s.SplitKV || s.ChunkPages != 25 || s.SplitCounts[0] != 4 || s.PartialRows != 32 {
		t.Fatalf("search: chunk %d splits %v", s.ChunkPages, s.SplitCounts)
	}
	// binary search lower bound 16
	s = mustDecode(t, pagesToSeq(100), dp(1, 1, 132, 1000))
	if s.ChunkPages != 16 || s.SplitCounts[0] != 7 {
		t.Fatalf("lower bound: chunk %d", s.ChunkPages)
	}
	// lower bound 128/page for small pages: page 4 -> 32
	p = dp(1, 1, 132, 1000)
	p.PageSize = 4
	s = mustDecode(t, []int32{400}, p)
	if s.ChunkPages != 32 || s.SplitCounts[0] != 4 {
		t.Fatalf("small page: chunk %d", s.ChunkPages)
	}
	// skew: pages {200, 4, 4, 4}, search gives 40 (ceil(200/c)+3 <= 8), avg 53 -> min(40, max(16, 13)) = 16
	s = mustDecode(t, pagesToSeq(200, 4, 4, 4), dp(4, 1, 8, 1000))
	if s.ChunkPages != 16 || !slices.Equal(s.SplitCounts, []int32{13, 1, 1, 1}) {
		t.Fatalf("skew: chunk %d splits %v", s.ChunkPages, s.SplitCounts)
	}
	// no skew when avg < 4: pages {40, 1, 1, 1}: avg 10.75 >= 4... use {20,1,1,1} avg 5.75 still; {12, 1, 1} avg 4.67: skip, search
	// floor ceil(max/256): 10000 pages, search gives 16, floor 40
	s = mustDecode(t, pagesToSeq(10000), dp(1, 1, 100000, 10000))
	if s.ChunkPages != 40 || s.SplitCounts[0] != 250 {
		t.Fatalf("floor: chunk %d", s.ChunkPages)
	}
	// chunk >= max_pages: no split (search over pages {9} gives 16)
	s = mustDecode(t, pagesToSeq(9), dp(1, 1, 132, 1000))
	if s.SplitKV || s.ChunkPages != 1000 {
		t.Fatalf("one chunk: %+v", s)
	}
	// seqused 0 still has one page
	s = mustDecode(t, []int32{0, 1}, dp(2, 1, 1, 4))
	if !slices.Equal(s.Pages, []int32{1, 1}) {
		t.Fatalf("pages %v", s.Pages)
	}
	// q tiles: qhead_per_kv 16 -> 8 queries per tile
	p = dp(2, 2, 1, 16)
	p.SeqlenQ = 20
	s = mustDecode(t, pagesToSeq(16, 3), p)
	if s.QTile != 8 || s.NumQTiles != 3 || s.QStride != 24 || s.WorkCount != 2*3*2 {
		t.Fatalf("tiles %d %d %d %d", s.QTile, s.NumQTiles, s.QStride, s.WorkCount)
	}
	p.HQ = 2 // qhead_per_kv 1 -> 128
	s = mustDecode(t, pagesToSeq(16, 3), p)
	if s.QTile != 128 || s.NumQTiles != 1 {
		t.Fatalf("tiles %d %d", s.QTile, s.NumQTiles)
	}
	// empty batch
	s = mustDecode(t, nil, dp(0, 1, 1, 4))
	if s.WorkCount != 0 || s.Capacity != 1 || s.Valid[0] != 0 {
		t.Fatalf("empty %+v", s)
	}
}

func TestDecodeSkewNeedsAvg4(t *testing.T) {
	// pages {60, 2 x 7}: avg 9.25, search gives 20 (ceil(60/c)+7 <= 10), skew: min(20, 16) = 16
	pages := []int{60, 2, 2, 2, 2, 2, 2, 2}
	s := mustDecode(t, pagesToSeq(pages...), dp(8, 1, 10, 1000))
	if s.ChunkPages != 16 || s.SplitCounts[0] != 4 {
		t.Fatalf("chunk %d", s.ChunkPages)
	}
	// pages {60, 1 x 19}: avg 3.95 < 4: no skew, search gives 20 (ceil(60/c)+19 <= 22)
	pages = []int{60}
	for range 19 {
		pages = append(pages, 1)
	}
	s = mustDecode(t, pagesToSeq(pages...), dp(20, 1, 22, 1000))
	if s.ChunkPages != 20 || s.SplitCounts[0] != 3 || !s.SplitKV {
		t.Fatalf("chunk %d", s.ChunkPages)
	}
}

func TestDecodeBatchInvariant(t *testing.T) {
	p := dp(1, 2, 7, 64)
	p.FixedSplitPages = 5
	a := mustDecode(t, pagesToSeq(23), p)
	p.Batch = 3
	b := mustDecode(t, pagesToSeq(23, 64, 1), p)
	if a.ChunkPages != b.ChunkPages || a.SplitCounts[0] != b.SplitCounts[0] || !a.SplitKV || !b.SplitKV {
		t.Fatal("request 0 schedule depends on the batch")
	}
}

func TestDecodeFixedCapacityStable(t *testing.T) {
	for _, fixed := range []int{0, 3} {
		p := dp(3, 2, 64, 100)
		p.SeqlenQ = 2
		p.FixedCapacity = true
		p.FixedSplitPages = fixed
		var s *DecodeSchedule
		var first DecodeSchedule
		for step := 0; step <= 100*128; step += 97 {
			seq := []int32{int32(step), int32(step / 2), int32(min(100*128, step*3))}
			var err error
			s, err = BuildDecodeSchedule(s, seq, p)
			if err != nil {
				t.Fatal(err)
			}
			if err := ValidateDecodeSchedule(s, seq, p); err != nil {
				t.Fatal(err)
			}
			checkDecode(t, s, seq, p)
			if step == 0 {
				first = *s
				first.OIndptr = slices.Clone(s.OIndptr)
				continue
			}
			if s.Capacity != first.Capacity || s.PartialRows != first.PartialRows || s.SplitKV != first.SplitKV ||
				!slices.Equal(s.OIndptr, first.OIndptr) || &s.Request[0] != &first.Request[0] || len(s.Valid) != len(first.Valid) {
				t.Fatalf("fixed=%d step %d: capacity/partials changed", fixed, step)
			}
		}
		wantChunks := 7 // ceil(100/16)
		if fixed > 0 {
			wantChunks = 34
		}
		if s.Capacity != 3*1*2*wantChunks || s.PartialRows != 3*wantChunks*8 || !s.SplitKV {
			t.Fatalf("fixed=%d: capacity %d partial rows %d", fixed, s.Capacity, s.PartialRows)
		}
	}
	// no split possible under the params: capacity B*q_tiles*Hkv, no partials
	p := dp(4, 8, 32, 100)
	p.FixedCapacity = true
	s := mustDecode(t, pagesToSeq(100, 1, 50, 3), p)
	if s.SplitKV || s.Capacity != 32 || s.PartialRows != 0 || s.ChunkPages != 100 {
		t.Fatalf("%+v", s)
	}
}

func TestDecodeStalePlan(t *testing.T) {
	p := dp(2, 1, 4, 1000)
	s := mustDecode(t, pagesToSeq(100, 20), p) // chunk 25+? covers 100 and 20
	cover0 := int(s.SplitCounts[0]) * s.ChunkPages
	// growth within the plan's coverage is accepted
	if err := ValidateDecodeSchedule(s, []int32{int32(cover0 * 128), 5}, p); err != nil {
		t.Fatal(err)
	}
	// outgrowing it is refused, naming the request
	err := ValidateDecodeSchedule(s, []int32{int32(cover0*128 + 1), 5}, p)
	wantErr(t, err, "seqused_k[0]", "for request 0", "stale plan")
	q := p
	q.Batch = 3
	wantErr(t, ValidateDecodeSchedule(s, pagesToSeq(1, 1, 1), q), "stale", "Batch planned as 2, got 3")
	q = p
	q.Workers = 5
	wantErr(t, ValidateDecodeSchedule(s, pagesToSeq(1, 1), q), "Workers planned as 4, got 5")
	wantErr(t, ValidateDecodeSchedule(s, pagesToSeq(1), p), "seqused_k has 1 elements", "[2]")
	wantErr(t, ValidateDecodeSchedule(s, []int32{-1, 0}, p), "seqused_k[0] = -1", "request 0")
	wantErr(t, ValidateDecodeSchedule(nil, nil, p), "schedule is nil")
	// without split, growth up to the page table capacity is always covered
	p = dp(2, 8, 4, 1000)
	s = mustDecode(t, pagesToSeq(3, 4), p)
	if err := ValidateDecodeSchedule(s, pagesToSeq(1000, 1000), p); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := dp(2, 2, 8, 10)
	bad := func(mut func(*DecodeParams), seq []int32, subs ...string) {
		t.Helper()
		p := good
		mut(&p)
		_, err := BuildDecodeSchedule(nil, seq, p)
		wantErr(t, err, subs...)
		wantErr(t, ValidateDecodeSchedule(&DecodeSchedule{Params: p}, seq, p), subs...)
	}
	ok := []int32{5, 1280}
	bad(func(p *DecodeParams) { p.Batch = -1 }, ok, "batch = -1")
	bad(func(p *DecodeParams) { p.SeqlenQ = 0 }, ok, "seqlen_q = 0")
	bad(func(p *DecodeParams) { p.SeqlenQ = 1 << 30; p.Batch = 4 }, ok, "batch*seqlen_q")
	bad(func(p *DecodeParams) { p.Hkv = 0 }, ok, "num_kv_heads = 0")
	bad(func(p *DecodeParams) { p.HQ = 3 }, ok, "num_qo_heads = 3", "num_kv_heads = 2")
	bad(func(p *DecodeParams) { p.HQ = 0 }, ok, "num_qo_heads = 0")
	bad(func(p *DecodeParams) { p.PageSize = 0 }, ok, "page_size = 0")
	bad(func(p *DecodeParams) { p.Workers = 0 }, ok, "workers (numSM) = 0")
	bad(func(p *DecodeParams) { p.FixedSplitPages = -2 }, ok, "fixed_split_size = -2")
	bad(func(p *DecodeParams) { p.MaxPagesPerSeq = 0 }, ok, "page_table.shape[1]", "= 0")
	bad(func(*DecodeParams) {}, []int32{5}, "seqused_k has 1 elements", "[B] = [2]")
	bad(func(*DecodeParams) {}, []int32{5, 1281}, "seqused_k[1] = 1281", "10*128 = 1280", "request 1")
	bad(func(*DecodeParams) {}, []int32{-3, 0}, "seqused_k[0] = -3", "request 0")
	// overflowing capacities are errors, not allocations
	_, err := BuildDecodeSchedule(nil, make([]int32, 4), DecodeParams{Batch: 4, SeqlenQ: 1, HQ: 1 << 20, Hkv: 1 << 20, PageSize: 1, Workers: 1 << 62, MaxPagesPerSeq: 1 << 30, FixedCapacity: true})
	wantErr(t, err, "fixed capacity")
}

func TestValidateDecodeScheduleRejects(t *testing.T) {
	p := dp(2, 2, 16, 100)
	seq := pagesToSeq(40, 10)
	good := mustDecode(t, seq, p)
	if !good.SplitKV || good.WorkCount < 4 {
		t.Fatalf("want a split schedule: %+v", good)
	}
	clone := func() *DecodeSchedule {
		s := *good
		s.Request, s.QTileIdx, s.KVTile, s.KVHead, s.Valid = slices.Clone(s.Request), slices.Clone(s.QTileIdx), slices.Clone(s.KVTile), slices.Clone(s.KVHead), slices.Clone(s.Valid)
		s.SplitCounts, s.OIndptr = slices.Clone(s.SplitCounts), slices.Clone(s.OIndptr)
		return &s
	}
	check := func(s *DecodeSchedule, subs ...string) {
		t.Helper()
		wantErr(t, ValidateDecodeSchedule(s, seq, p), subs...)
	}
	s := clone()
	s.QTile = 3
	check(s, "(QTile, NumQTiles, QStride) = (3, 1, 8)")
	s = clone()
	s.ChunkPages = 0
	check(s, "ChunkPages = 0")
	s = clone()
	s.Valid = s.Valid[1:]
	check(s, "lengths")
	s = clone()
	s.WorkCount = s.Capacity + 1
	check(s, "work_count", "capacity")
	s = clone()
	s.WorkCount--
	check(s, "work_count", "expected")
	s = clone()
	s.SplitCounts = s.SplitCounts[:1]
	check(s, "split_counts/o_indptr have 1/3 elements")
	s = clone()
	s.SplitCounts[1] = 0
	check(s, "split_counts[1] = 0")
	s = clone()
	s.ChunkPages = 1
	check(s, "seqused_k[0]", "stale plan")
	s = clone()
	s.OIndptr[1] = 1
	check(s, "o_indptr[0] = 0")
	s = clone()
	s.PartialRows = 1
	check(s, "partial_rows = 1")
	s = clone()
	s.Valid[0] = 0
	check(s, "block_valid_mask[0] = 0", "expected 1")
	s = clone()
	s.Request[0] = 2
	check(s, "item 0", "(2, 0, 0, 0)", "out of range")
	s = clone()
	s.KVHead[0] = 2
	check(s, "item 0", "out of range")
	s = clone()
	s.QTileIdx[0] = -1
	check(s, "item 0", "out of range")
	s = clone()
	s.KVTile[len(s.KVTile)-1] = 9
	check(s, "out of range")
	s = clone()
	s.KVHead[1] = 0
	check(s, "item 1", "duplicate")
	s = clone()
	s.SplitKV = false
	check(s, "== 1 without split-KV")
	// padding must be invalid
	p2 := p
	p2.FixedCapacity = true
	f := mustDecode(t, seq, p2)
	if f.WorkCount == f.Capacity {
		t.Fatal("want padding")
	}
	f.Valid[f.Capacity-1] = 1
	wantErr(t, ValidateDecodeSchedule(f, seq, p2), "block_valid_mask", "expected 0")
}

func TestDecodeRandom(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	var reuse *DecodeSchedule
	for it := 0; it < 300; it++ {
		p := DecodeParams{
			Batch: rng.Intn(6), SeqlenQ: 1 + rng.Intn(20), Hkv: 1 + rng.Intn(4),
			PageSize: []int{1, 3, 16, 64, 128, 256}[rng.Intn(6)], Workers: 1 + rng.Intn(200),
			MaxPagesPerSeq: 1 + rng.Intn(300), DisableSplit: rng.Intn(8) == 0, FixedCapacity: rng.Intn(2) == 0,
		}
		p.HQ = p.Hkv * []int{1, 2, 4, 8, 16}[rng.Intn(5)]
		if rng.Intn(4) == 0 {
			p.FixedSplitPages = 1 + rng.Intn(40)
		}
		seq := make([]int32, p.Batch)
		for b := range seq {
			seq[b] = int32(rng.Intn(p.MaxPagesPerSeq*p.PageSize + 1))
		}
		s := mustDecode(t, seq, p)
		// rebuilding into a reused schedule gives the same result
		var err error
		reuse, err = BuildDecodeSchedule(reuse, seq, p)
		if err != nil {
			t.Fatal(err)
		}
		if reuse.WorkCount != s.WorkCount || reuse.Capacity != s.Capacity || reuse.ChunkPages != s.ChunkPages ||
			!slices.Equal(reuse.Request, s.Request) || !slices.Equal(reuse.KVTile, s.KVTile) || !slices.Equal(reuse.KVHead, s.KVHead) ||
			!slices.Equal(reuse.OIndptr, s.OIndptr) || !slices.Equal(reuse.Valid, s.Valid) {
			t.Fatalf("it %d: rebuild differs", it)
		}
		if p.FixedCapacity {
			// the worst case over any seqused_k fits the capacity
			full := make([]int32, p.Batch)
			for b := range full {
				full[b] = int32(p.MaxPagesPerSeq * p.PageSize)
			}
			w := mustDecode(t, full, p)
			if w.Capacity != s.Capacity || w.PartialRows != s.PartialRows || !slices.Equal(w.OIndptr, s.OIndptr) {
				t.Fatalf("it %d: fixed capacity differs", it)
			}
		}
		if !p.DisableSplit && p.FixedSplitPages == 0 && s.SplitKV && !p.FixedCapacity && s.ChunkPages < 16 {
			t.Fatalf("it %d: chunk %d below the lower bound", it, s.ChunkPages)
		}
	}
}

// TestDecodeSizesMatchBuild: DecodeSizes (which allocates nothing, so that
// callers can check the memory first) gives the Capacity, PartialRows and
// MaxSplits of the schedule BuildDecodeSchedule builds, and its errors.
func TestDecodeSizesMatchBuild(t *testing.T) {
	n := 0
	for _, fixed := range []bool{false, true} {
		for _, split := range []int{0, 1, 3} {
			for _, disable := range []bool{false, true} {
				for _, used := range [][]int32{{0}, {1, 700}, {300, 5, 64}, {1 << 12, 1 << 12}, {2000, 2001}} {
					n++
					p := DecodeParams{Batch: len(used), SeqlenQ: 1 + n%5, HQ: 8, Hkv: 2, PageSize: 1 + n%17, Workers: 1 + n%9,
						FixedSplitPages: split, DisableSplit: disable, MaxPagesPerSeq: 4096, FixedCapacity: fixed}
					c, r, m, err := DecodeSizes(used, p)
					s, berr := BuildDecodeSchedule(nil, used, p)
					if (err == nil) != (berr == nil) {
						t.Fatalf("%+v %v: DecodeSizes error %v, BuildDecodeSchedule error %v", p, used, err, berr)
					}
					if err != nil {
						continue
					}
					if c != s.Capacity || r != s.PartialRows || m != s.MaxSplits {
						t.Fatalf("%+v %v: DecodeSizes = (%d, %d, %d), schedule has (%d, %d, %d)", p, used, c, r, m, s.Capacity, s.PartialRows, s.MaxSplits)
					}
				}
			}
		}
	}
	if _, _, _, err := DecodeSizes([]int32{1 << 30}, DecodeParams{Batch: 1, SeqlenQ: 1, HQ: 1, Hkv: 1, PageSize: 1, Workers: 1, MaxPagesPerSeq: 4}); err == nil {
		t.Fatal("DecodeSizes accepted a seqused_k beyond the page table")
	}
}
