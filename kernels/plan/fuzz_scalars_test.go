package plan

import (
	"math"
	"testing"
)

// fuzzSlack is the allocation the fuzz bounds tolerate beyond the input's
// own sizes: far below the gigabytes a size taken from a scalar can cost.
const fuzzSlack = 256 << 10

// FuzzScalarArgs drives the planners with fuzzer-chosen scalar arguments
// (huge, negative, zero) and cu_seqlens values: no panic, errors with the
// "plan: " prefix, and allocation bounded by what the inputs justify
// (CountRows and FixedDecodeSizes never allocate; a build allocates in
// proportion to the sizes they report).
//
// Each count is the fewest bytes of a few calls (allocated), so the fuzzing
// engine's own allocations do not count unless they overlap every call;
// fuzzSlack covers the rest.
func FuzzScalarArgs(f *testing.F) {
	f.Add(int64(1), int64(math.MaxInt32-1), int64(1), int64(4), int64(2), int64(1), int64(16), int64(0), int64(8), int64(1), false)
	f.Add(int64(0), int64(5), int64(0), int64(-1), int64(1<<40), int64(-3), int64(1), int64(7), int64(1<<31), int64(1<<20), true)
	f.Add(int64(3), int64(300), int64(128), int64(16384), int64(3), int64(16), int64(128), int64(2), int64(64), int64(4), true)
	f.Fuzz(func(t *testing.T, k0, k1, blk, workers, b, seqQ, hq, fixed, maxPages, pageSize int64, fixedCap bool) {
		cuK := []int32{int32(k0), int32(k1)}
		var total int
		var err error
		if got := allocated(func() { total, err = CountRows(cuK, int(blk)) }); got > fuzzSlack {
			t.Fatalf("CountRows allocated %d bytes", got)
		}
		checkErrText(t, err)
		if err == nil && total <= 1<<16 {
			var r *Rows
			if got := allocated(func() { r, err = NewRows(cuK, int(blk)) }); got > uint64(16*total+fuzzSlack) {
				t.Fatalf("NewRows: %d bytes for %d rows", got, total)
			}
			if err != nil || r.Total != total {
				t.Fatalf("NewRows = %v, %v; CountRows said %d", r, err, total)
			}
		}
		fp := FwdParams{TotalQ: int(seqQ), Hkv: int(b), QheadPerKV: 4, TopK: int(fixed), BlkKV: int(blk), Workers: int(workers)}
		if tgt := FwdTarget(fp); tgt < 1 {
			t.Fatalf("FwdTarget(%+v) = %d", fp, tgt)
		}
		if c := FwdCapacity(total, fp); c < 1 {
			t.Fatalf("FwdCapacity = %d", c)
		}

		batch := int(b % 64) // seqused_k is data: keep it small
		if batch < 0 {
			batch = -batch
		}
		p := DecodeParams{Batch: batch, SeqlenQ: int(seqQ), HQ: int(hq), Hkv: max(int(hq)/4, 1), PageSize: int(pageSize),
			Workers: int(workers), FixedSplitPages: int(fixed), MaxPagesPerSeq: int(maxPages), FixedCapacity: fixedCap}
		var capacity, rows int
		if got := allocated(func() { capacity, rows, err = FixedDecodeSizes(p) }); got > fuzzSlack {
			t.Fatalf("FixedDecodeSizes allocated %d bytes", got)
		}
		checkErrText(t, err)
		if err == nil && (capacity < 1 || rows < 0) {
			t.Fatalf("FixedDecodeSizes = %d, %d", capacity, rows)
		}
		seq := make([]int32, batch)
		for i := range seq {
			seq[i] = int32(min(int64(i)*k1, math.MaxInt32))
			if seq[i] < 0 {
				seq[i] = 0
			}
		}
		if err == nil && fixedCap && capacity > 1<<16 {
			return // a valid but large schedule: its size was reported without building
		}
		var s *DecodeSchedule
		got := allocated(func() { s, err = BuildDecodeSchedule(nil, seq, p) })
		checkErrText(t, err)
		if err != nil {
			if got > fuzzSlack {
				t.Fatalf("rejected after allocating %d bytes", got)
			}
			return
		}
		if got > uint64(20*s.Capacity+16*batch+fuzzSlack) {
			t.Fatalf("BuildDecodeSchedule: %d bytes for capacity %d", got, s.Capacity)
		}
		if err := ValidateDecodeSchedule(s, seq, p); err != nil {
			t.Fatalf("fresh schedule rejected: %v", err)
		}
	})
}
