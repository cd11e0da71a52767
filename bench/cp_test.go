package main

import (
	"testing"

	"github.com/sparseattn/msa/kernels/comm"
)

// The distributed mode on two in-process ranks: one decode row and one
// prefill row per strategy, positive times, and the bytes of the formulas
// (decode: every other rank's B*Hq*(2D+4) partial; prefill: fetching
// moves less than sending the queries at this shape, and auto fetches).
func TestCPModeInProcess(t *testing.T) {
	cpOpts.reps, cpOpts.workers = 1, 1
	s := cpShapes{hq: 16, hkv: 1, d: 128, blk: 128, topK: 16, prefillLen: 512, ctx: 512, batch: 2, page: 128}
	ranks, err := comm.NewLocal(2, 0)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := cpAllRanks(ranks, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4 (decode, prefill auto, fetch-kv, send-queries)", len(rows))
	}
	for _, r := range rows {
		if r.ranks != 2 || !(r.time.min > 0) || !(r.single.min > 0) || r.time.min > r.time.med {
			t.Errorf("%s %s: ranks %d, times %+v, single %+v", r.kind, r.strategy, r.ranks, r.time, r.single)
		}
	}
	if want := int64(s.batch * s.hq * (2*s.d + 4)); rows[0].recvMax != want || rows[0].recvTotal != 2*want {
		t.Errorf("decode received %d per rank (total %d), want %d (%d)", rows[0].recvMax, rows[0].recvTotal, want, 2*want)
	}
	auto, fetch, send := rows[1], rows[2], rows[3]
	if fetch.recvTotal == 0 || fetch.recvTotal >= send.recvTotal || auto.recvTotal != fetch.recvTotal {
		t.Errorf("prefill bytes: auto %d, fetch %d, send %d; want 0 < fetch = auto < send", auto.recvTotal, fetch.recvTotal, send.recvTotal)
	}
}
