package cuda

// A host emulation of the auto prefill (prefill_auto.go): the partition of
// the query-major plan's tiles, the KV-major forward and combine over the
// filtered CSR and schedule (emuKVPrefill; for auto-kv2 the kv2 kernel's
// emulation, runKV2), then the query-major kernel over the query tiles (emuQueryMajor), in the launch order of
// prepAutoPrefill, checked row by row against the float64 reference.

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/sparseattn/msa/cuda/gpupeak"
	"github.com/sparseattn/msa/kernels/plan"
)

// autoCases are ragged batches, causal and not, at qpk 1, 4, 16 and 64.
func autoCases() []*prefillCase {
	return []*prefillCase{
		{name: "qpk1/causal", cuQ: []int32{0, 150, 171}, cuK: []int32{0, 400, 1000}, hkv: 2, qhpk: 1, d: 64, topK: 3, blk: 96,
			causal: true, qd: BF16, kvd: BF16, pd: F32, round: RoundBF16},
		{name: "qpk4", cuQ: []int32{0, 100, 190}, cuK: []int32{0, 400, 700}, hkv: 2, qhpk: 4, d: 64, topK: 4, blk: 128,
			qd: BF16, kvd: BF16, pd: F32, round: RoundBF16},
		{name: "qpk16/causal/temp", cuQ: []int32{0, 37, 200}, cuK: []int32{0, 500, 1000}, hkv: 1, qhpk: 16, d: 64, topK: 4, blk: 64,
			causal: true, qd: BF16, kvd: BF16, pd: BF16, round: RoundBF16, temp: 0.7},
		{name: "qpk64/paged/causal", cuQ: []int32{0, 5, 9, 30}, cuK: []int32{0, 300, 700, 900}, hkv: 1, qhpk: 64, d: 64, topK: 2, blk: 128,
			causal: true, paged: true, pageSize: 32, qd: BF16, kvd: BF16, pd: F32, round: RoundBF16},
	}
}

// selectPattern replaces c's random selection (genPrefill) with pattern:
// "sink" (every query the first topK blocks of its sequence), "local" (the
// topK blocks ending at the query's own position) or "random" (kept), and
// rebuilds the CSR and schedule.
func selectPattern(t *testing.T, c *prefillCase, pattern string) {
	if pattern == "random" {
		return
	}
	for h := 0; h < c.hkv; h++ {
		for b := 0; b < len(c.cuQ)-1; b++ {
			nb := (c.seqK(b) + c.blk - 1) / c.blk
			for q := int(c.cuQ[b]); q < int(c.cuQ[b+1]); q++ {
				sel := c.q2k[(h*c.totalQ+q)*c.topK:][:c.topK]
				for j := range sel {
					sel[j] = -1
				}
				last := min(c.topK, nb) - 1 // sink
				if pattern == "local" {
					pos := q - int(c.cuQ[b]) + c.seqK(b) - c.seqQ(b)
					last = min(max(pos, 0)/c.blk, nb-1)
				}
				for j := 0; j < c.topK && last-j >= 0; j++ {
					sel[j] = int32(last - j)
				}
			}
		}
	}
	rebuildSchedule(t, c)
}

// autoRun is one emulated auto prefill.
type autoRun struct {
	part       autoPart
	csr        *plan.CSR
	sched      *plan.FwdSchedule
	queryFirst bool // mutation: the query-major kernel before the KV-major combine
	kv2        bool // the KV part on the kv2 kernel (auto-kv2), in windows of a small L2
}

// partitionCase partitions c's plan with the H200's constants, or choose.
func partitionCase(t *testing.T, c *prefillCase, choose TileChooser) *autoRun {
	qp, err := BuildQPlan(c.csr, c.sched, c.cuQ, c.hkv, c.qhpk, QTileRows)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	pk, _ := gpupeak.For("NVIDIA H200")
	costs := gpuPathCosts(pk, c.qd, c.kvd, c.d, c.pd)
	r := &autoRun{}
	if err := r.part.partition(qp, &costs, c.blk, c.qhpk, c.hkv, c.totalQ, choose); err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	return r
}

// filter filters c's CSR and schedule by the partition.
func (r *autoRun) filter(c *prefillCase) {
	r.csr, r.sched = r.part.filter(c.csr, c.sched, c.cuQ)
}

// emulate runs the KV part (its items split as for 64 SMs) and the query
// part in launch order and returns the rows as the last writer left them;
// an error is a row computed by both parts, or a partial row not written
// exactly once.
func (r *autoRun) emulate(c *prefillCase) (*qEmuOut, error) {
	kv, err := r.emulateKV(c)
	if err != nil {
		return nil, err
	}
	q := emuQueryMajor(c, &r.part.q)
	for row := range q.written {
		h := row % c.hq / c.qhpk
		if q.written[row] > 0 && r.sched.SplitCounts[row/c.hq*c.hkv+h] > 0 {
			return nil, fmt.Errorf("row %d (KV head %d) computed by both parts", row, h)
		}
	}
	first, last := q, kv
	if !r.queryFirst {
		first, last = kv, q
	}
	out := &qEmuOut{o: slices.Clone(first.o), lse: slices.Clone(first.lse), written: make([]int, len(first.lse))}
	for row := range out.written {
		out.written[row] = 1
		if last.written[row] > 0 {
			copy(out.o[row*c.d:][:c.d], last.o[row*c.d:][:c.d])
			out.lse[row] = last.lse[row]
		}
	}
	return out, nil
}

// emulateKV runs the KV part: the kv forward (its items split as for 64
// SMs) and the combine, or the kv2 kernel (3 CTAs, windows of a few row
// tiles) whose sweep writes the rows without a slot.
func (r *autoRun) emulateKV(c *prefillCase) (*qEmuOut, error) {
	if !r.kv2 {
		split := SplitForOccupancy([]FwdWindow{{Q0: 0, Q1: c.totalQ, Sched: r.sched}}, c.qhpk, 64, 4*64)[0].Sched
		return emuKVPrefill(c, r.csr, split)
	}
	fc := *c
	fc.csr, fc.sched = r.csr, r.sched
	s, err := runKV2(&fc, 2*24*c.topK*c.hq*(c.d*partialSize(c.pd)+8), 3, 1, kv2MutNone, false)
	if err != nil {
		return nil, err
	}
	rows := c.totalQ * c.hq
	out := &qEmuOut{o: make([]float64, rows*c.d), lse: make([]float64, rows), written: make([]int, rows)}
	for g := range out.written {
		copy(out.o[g*c.d:][:c.d], s.outO[g])
		out.lse[g], out.written[g] = s.outLSE[g], 1
	}
	return out, nil
}

// checkFilter: the filtered CSR, QSplit and SplitCounts are those of the
// selection with the dropped rows' lists emptied.
func checkFilter(t *testing.T, c *prefillCase, r *autoRun) {
	q2k := slices.Clone(c.q2k)
	for h := 0; h < c.hkv; h++ {
		for q := 0; q < c.totalQ; q++ {
			if r.part.drop[q*c.hkv+h] {
				for j := range q2k[(h*c.totalQ+q)*c.topK:][:c.topK] {
					q2k[(h*c.totalQ+q)*c.topK+j] = -1
				}
			}
		}
	}
	want := &prefillCase{q2k: q2k, hkv: c.hkv, totalQ: c.totalQ, topK: c.topK, cuQ: c.cuQ, cuK: c.cuK, blk: c.blk, qhpk: c.qhpk}
	rebuildSchedule(t, want)
	switch {
	case !slices.Equal(r.csr.RowPtr, want.csr.RowPtr) || !slices.Equal(r.csr.QIdx, want.csr.QIdx):
		t.Fatalf("%s: the filtered CSR differs from the CSR of the remaining rows", c.name)
	case !slices.Equal(r.sched.QSplit, want.sched.QSplit):
		t.Fatalf("%s: the filtered QSplit differs from the remaining rows'", c.name)
	case !slices.Equal(r.sched.SplitCounts, want.sched.SplitCounts):
		t.Fatalf("%s: the filtered SplitCounts differ from the remaining rows'", c.name)
	}
}

func TestEmulatedAutoPrefill(t *testing.T) {
	for i, c := range autoCases() {
		for _, pattern := range []string{"sink", "local", "random"} {
			genPrefill(t, c, uint64(i+1))
			selectPattern(t, c, pattern)
			name := c.name + "/" + pattern
			for _, choose := range []TileChooser{AlternateTiles, nil} {
				for _, kv2 := range []bool{false, true} {
					r := partitionCase(t, c, choose)
					r.kv2 = kv2
					ch := r.part.choice
					if choose != nil && (ch.QueryTiles == 0 || ch.KVTiles == 0) {
						t.Fatalf("%s: alternate tiles: %v: both paths must run", name, ch)
					}
					r.filter(c)
					checkFilter(t, c, r)
					out, err := r.emulate(c)
					if err != nil {
						t.Fatalf("%s (%v, kv2 %v): %v", name, ch, kv2, err)
					}
					if msg := qEmuMismatch(c, out); msg != "" {
						t.Fatalf("%s (%v, kv2 %v): %s", name, ch, kv2, msg)
					}
				}
			}
		}
	}
}

// TestEmulatedAutoPrefillMutations: a query tile left out of both parts,
// a query tile's row left in the KV part with its slots, and the
// query-major kernel launched before the combine (or before the kv2
// kernel, whose sweep writes the query tiles' rows) must each be caught.
func TestEmulatedAutoPrefillMutations(t *testing.T) {
	for i, c := range autoCases() {
		genPrefill(t, c, uint64(i+1))
		for _, mut := range []string{"tile left out", "row in both", "query first", "query first kv2"} {
			r := partitionCase(t, c, AlternateTiles)
			r.kv2 = mut == "query first kv2"
			q := &r.part.q
			switch mut {
			case "tile left out": // the longest query tile: it has blocks
				q.Tiles, q.TilePtr = q.Tiles[QTileFields:], q.TilePtr[1:]
			case "row in both":
				f := q.Tiles[:QTileFields]
				r.part.drop[int(f[2])*c.hkv+int(f[1])] = false
			case "query first", "query first kv2":
				r.queryFirst = true
			}
			r.filter(c)
			out, err := r.emulate(c)
			caught := err != nil
			if mut == "row in both" {
				// Both parts compute the row right: only the exclusivity check sees it.
				caught = err != nil && strings.Contains(err.Error(), "computed by both parts")
			} else if err == nil {
				caught = qEmuMismatch(c, out) != ""
			}
			if !caught {
				t.Errorf("%s: %s not caught (%v)", c.name, mut, err)
			}
		}
	}
}

// TestGPUPathCosts: the constants follow their derivation (H200, D 128,
// float32 partials: KVSlot = 1032 * 206 / 512 ~ 415), FP8 products weigh
// against the FP8 peak, and the verdicts they give one-token tiles with
// every block shared (no row wasted): query-major at 128-key blocks.
func TestGPUPathCosts(t *testing.T) {
	pk, _ := gpupeak.For("NVIDIA H200")
	m := gpuPathCosts(pk, BF16, BF16, 128, F32)
	if want := 1032 * (989e12 / 4800e9) / 512; m.KVSlot != want || m.QMKey != 1 || m.KVKey != 1 || m.QMSlot != gpuQMSlot {
		t.Errorf("H200 BF16 D 128 F32: %+v, want KVSlot %v", m, want)
	}
	if f := gpuPathCosts(pk, E4M3, E4M3, 128, F32); math.Abs(f.KVSlot/m.KVSlot-pk.FP8/pk.BF16) > 1e-12 {
		t.Errorf("FP8: KVSlot %v, want BF16's %v times the peaks' ratio", f.KVSlot, m.KVSlot)
	}
	if b := gpuPathCosts(pk, BF16, BF16, 128, BF16); b.KVSlot >= m.KVSlot {
		t.Errorf("bf16 partials: KVSlot %v not below float32's %v", b.KVSlot, m.KVSlot)
	}
	v, err := m.Weigh(64, 16, 4, 16, QTileRows, 128, false)
	if err != nil || !v.Query() || v.Factor() != "rate" {
		t.Errorf("sink tile at qpk 16: %v %v", v, err)
	}
	// Unshared selections: at qpk 16 four tokens' 64 entries over 64
	// blocks waste 4 against rate 0.242, a near tie the query-major path
	// takes (0.97); at qpk 4, sixteen tokens' 256 entries over 256 blocks
	// waste 16: KV-major.
	if v, _ := m.Weigh(64, 64, 4, 16, QTileRows, 128, false); !v.Query() || v.Waste*v.Rate < 0.95 {
		t.Errorf("unshared tile at qpk 16: %v", v)
	}
	if v, _ := m.Weigh(256, 256, 16, 4, QTileRows, 128, false); v.Query() || v.Factor() != "lanes" {
		t.Errorf("unshared tile at qpk 4: %v", v)
	}
	if _, why := autoCosts("NVIDIA GeForce RTX 4090", &FwdArgs{D: 128}); why == "" {
		t.Error("an unknown GPU has constants")
	}
}

// TestChooseAutoPrefill: the host-only choice agrees with the partition,
// and names the limit where the query-major kernel does not apply.
func TestChooseAutoPrefill(t *testing.T) {
	c := autoCases()[2]
	genPrefill(t, c, 5)
	fa := &FwdArgs{Q: 0x1000_0000, K: 0x2000_0000, V: 0x3000_0000, CuSeqlensQ: 0x400, CuSeqlensK: 0x500, OPartial: 0x4000_0000,
		LSEPartial: 0x5000_0000, TotalQ: c.totalQ, Hq: c.hq, Hkv: c.hkv, D: c.d, BlkKV: c.blk, TopK: c.topK, NumBatch: len(c.cuQ) - 1,
		QDtype: c.qd, KVDtype: c.kvd, PartialDtype: c.pd, PVRound: c.round, Causal: c.causal, KVRows: int(c.cuK[len(c.cuK)-1])}
	got, err := ChooseAutoPrefill(ArchSM90, "NVIDIA H200", fa, c.csr, c.sched, c.cuQ)
	if err != nil {
		t.Fatal(err)
	}
	want := partitionCase(t, c, nil).part.choice
	if got != want || got.Limit != "" || got.QueryTiles+got.KVTiles == 0 {
		t.Errorf("choice %v, want %v", got, want)
	}
	if got, _ := ChooseAutoPrefill(ArchPortable, "NVIDIA H200", fa, c.csr, c.sched, c.cuQ); got.Limit == "" {
		t.Errorf("portable family: %v, want a limit", got)
	}
	if got, _ := ChooseAutoPrefill(ArchSM90, "NVIDIA GeForce RTX 4090", fa, c.csr, c.sched, c.cuQ); !strings.Contains(got.String(), "not in the table") {
		t.Errorf("unknown GPU: %v", got)
	}
	bad := *fa
	bad.Hkv = 0
	if _, err := ChooseAutoPrefill(ArchSM90, "NVIDIA H200", &bad, c.csr, c.sched, c.cuQ); err == nil {
		t.Error("Hkv 0 accepted")
	}
}

// TestAutoMeasuredRate: timings in the proportion of the model's own
// totals measure the model's rate (so a GPU run's query and kv rows fit
// the constants through MeasuredRate and plan.PathCosts.WithRate), twice
// the query time twice the rate, and choices or times it cannot use are
// refused.
func TestAutoMeasuredRate(t *testing.T) {
	c := autoCases()[2]
	genPrefill(t, c, 5)
	ch := partitionCase(t, c, nil).part.choice
	if ch.LaneBlocks <= 0 || ch.EntryRows <= 0 || !(ch.Rate > 0) {
		t.Fatalf("choice %+v: no aggregates", ch)
	}
	r, err := ch.MeasuredRate(ch.Query, ch.KV)
	if err != nil || math.Abs(r/ch.Rate-1) > 1e-12 {
		t.Errorf("rate from the model's totals %v (%v), want the model's %v", r, err, ch.Rate)
	}
	r2, _ := ch.MeasuredRate(2*ch.Query, ch.KV)
	if math.Abs(r2/(2*ch.Rate)-1) > 1e-12 {
		t.Errorf("twice the query time: rate %v, want %v", r2, 2*ch.Rate)
	}
	pk, _ := gpupeak.For("NVIDIA H200")
	m := gpuPathCosts(pk, c.qd, c.kvd, c.d, c.pd)
	if f, err := m.WithRate(r, float64(c.blk)); err != nil || math.Abs(f.KVSlot/m.KVSlot-1) > 1e-9 {
		t.Errorf("the model's own rate gives KVSlot %v (%v), want the model's %v", f.KVSlot, err, m.KVSlot)
	}
	fa := &FwdArgs{D: c.d, BlkKV: c.blk, QDtype: c.qd, KVDtype: c.kvd, PartialDtype: c.pd}
	if mm, f, rr, err := AutoFit("NVIDIA H200", fa, ch, 2*ch.Query, ch.KV); err != nil || mm != m || rr != r2 || !(f.KVSlot < m.KVSlot) {
		t.Errorf("AutoFit at twice the query time: model %+v, fitted %+v, rate %v (%v): want the model, a lower KVSlot and rate %v", mm, f, rr, err, r2)
	}
	// The choice under given constants: the model's own give the model's
	// choice; a lower rate sends at least as many tiles to the
	// query-major kernel, a higher one at most as many.
	full := &FwdArgs{Q: 0x1000_0000, K: 0x2000_0000, V: 0x3000_0000, CuSeqlensQ: 0x400, CuSeqlensK: 0x500, OPartial: 0x4000_0000,
		LSEPartial: 0x5000_0000, TotalQ: c.totalQ, Hq: c.hq, Hkv: c.hkv, D: c.d, BlkKV: c.blk, TopK: c.topK, NumBatch: len(c.cuQ) - 1,
		QDtype: c.qd, KVDtype: c.kvd, PartialDtype: c.pd, PVRound: c.round, Causal: c.causal, KVRows: int(c.cuK[len(c.cuK)-1])}
	same, err := ChooseAutoPrefillWith(ArchSM90, m, full, c.csr, c.sched, c.cuQ)
	if byDevice, _ := ChooseAutoPrefill(ArchSM90, "NVIDIA H200", full, c.csr, c.sched, c.cuQ); err != nil || same != byDevice {
		t.Errorf("with the model's constants: %v (%v), want %v", same, err, byDevice)
	}
	lo, _ := m.WithRate(ch.Rate/8, float64(c.blk))
	hi, _ := m.WithRate(ch.Rate*8, float64(c.blk))
	cl, err1 := ChooseAutoPrefillWith(ArchSM90, lo, full, c.csr, c.sched, c.cuQ)
	chh, err2 := ChooseAutoPrefillWith(ArchSM90, hi, full, c.csr, c.sched, c.cuQ)
	if err1 != nil || err2 != nil || cl.QueryTiles < same.QueryTiles || chh.QueryTiles > same.QueryTiles || cl.QueryTiles == chh.QueryTiles {
		t.Errorf("query tiles at rate/8, the model's, rate*8: %d, %d, %d (%v %v)", cl.QueryTiles, same.QueryTiles, chh.QueryTiles, err1, err2)
	}
	if _, err := ChooseAutoPrefillWith(ArchSM90, plan.PathCosts{}, full, c.csr, c.sched, c.cuQ); err == nil {
		t.Error("zero constants weighed")
	}
	if _, _, _, err := AutoFit("NVIDIA GeForce RTX 4090", fa, ch, 1, 1); err == nil {
		t.Error("AutoFit on a GPU without constants")
	}
	for _, bad := range []struct{ q, kv float64 }{{0, 1}, {1, 0}, {math.NaN(), 1}, {1, math.Inf(1)}} {
		if _, err := ch.MeasuredRate(bad.q, bad.kv); err == nil {
			t.Errorf("times %v accepted", bad)
		}
	}
	if _, err := (AutoChoice{Limit: "portable"}).MeasuredRate(1, 1); err == nil {
		t.Error("an unweighed choice measured a rate")
	}
}
