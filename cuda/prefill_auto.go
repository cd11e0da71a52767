package cuda

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/sparseattn/msa/cuda/gpupeak"
	"github.com/sparseattn/msa/kernels/plan"
)

// The auto prefill path (PrefillAuto, MSA_CUDA_PREFILL=auto): every
// query tile of the query-major plan (QPlan: QTileRows rows of one KV
// head) is weighed with the model shared with the CPU path
// (plan.PathCosts.Weigh) and runs on the query-major kernel or on the
// KV-major path, in one call:
//
//   - the query tiles form a QPlan of their own (autoPart.q);
//   - the KV-major path runs over the CSR and schedule with every entry of
//     the query tiles' (token, KV head) rows removed (autoPart.filter):
//     removing whole rows leaves every other row's entries, their QSplit
//     slots and SplitCounts as they were, the schedule's items only shrink
//     (those left empty are dropped), and the removed rows get SplitCounts
//     0;
//   - order: the KV-major forward and combine of every window run first,
//     the query-major kernel last. The combine writes O = 0 and LSE = -inf
//     for a row with no split, the query tiles' rows included; the
//     query-major kernel then writes those rows' results over them.
//
// A call whose tiles all choose one path runs only that path's launches.
// Auto runs its KV tiles on the kv kernels and combine; auto-kv2
// (PrefillAutoKV2) on the kv2 kernel with its fused merge where KV2Plan
// takes the call. Both weigh with the constants below: kv2 keeps the
// partial rows in L2 rather than HBM, so its KVSlot is smaller, by how
// much only a GPU can say (the GPU check fits one per KV-major kernel).

// GPU constants of the model (gpuPathCosts). The unit is one (row, key) of
// either path's tensor-core products: 4*D FLOPs (Q.K and P.V, 2*D each),
// assumed to run at the same rate on both kernels: QMKey = KVKey = 1.
//
//   - KVSlot: one partial row the KV-major forward writes and the combine
//     reads back, 2 * (D * partial bytes + 4 LSE bytes) of HBM traffic, in
//     the time the tensor cores spend on balance = dense peak / HBM
//     bandwidth FLOPs per byte (H200 SXM, BF16: 989 TFLOP/s over 4.8 TB/s
//     = 206): KVSlot = 2 * (D * psz + 4) * balance / (4 * D). At D 128 with
//     float32 partials on an H200 that is 1032 * 206 / 512 = 415, 3.2 times
//     a 128-key block's products.
//   - QMSlot: one row's work per block that does not scale with its keys,
//     the online softmax's rescale of the O accumulator: D multiplies on
//     the CUDA cores, whose float32 rate is about 1/15 of the dense BF16
//     tensor rate on Hopper (H100 SXM: 67 against 989 TFLOP/s), so
//     D * 15 / (4 * D) = 3.75 units: gpuQMSlot.
//
// These are first estimates from the datasheets, to be fitted to the GPU
// check's prefill timing rows (query and kv of one case on one GPU), as the
// CPU constants of kernels/attn were fitted to its benchmark.
const gpuQMSlot = 3.75

// gpuPathCosts returns the model's constants for a prefill with Q and K/V
// dtypes q, kv, head dim d and partial dtype pd on the GPU of peak pk: the
// FP8 peak where both products run on FP8 tensor cores (E4M3 Q and K/V),
// the BF16 one otherwise.
func gpuPathCosts(pk gpupeak.Peak, q, kv Dtype, d int, pd Dtype) plan.PathCosts {
	peak := pk.BF16
	if q == E4M3 && kv == E4M3 && pk.FP8 > 0 {
		peak = pk.FP8
	}
	balance := peak * 1e12 / (pk.HBM * 1e9)
	bytes := 2 * float64(d*partialSize(pd)+4)
	return plan.PathCosts{QMKey: 1, QMSlot: gpuQMSlot, KVKey: 1, KVSlot: bytes * balance / float64(4*d), Staged: 1}
}

// autoCosts returns the model's constants for fa on the GPU called device,
// or why it has none: a GPU not in the table of known GPUs (gpupeak.For).
func autoCosts(device string, fa *FwdArgs) (plan.PathCosts, string) {
	pk, ok := gpupeak.For(device)
	if !ok {
		return plan.PathCosts{}, fmt.Sprintf("GPU %q is not in the table of known GPUs (gpupeak.For): no balance to weigh the partial rows with", device)
	}
	return gpuPathCosts(pk, fa.QDtype, fa.KVDtype, fa.D, fa.PartialDtype), ""
}

// AutoFit returns the model's constants for fa on the GPU called device
// and the constants that give the rate measured by timing the call whose
// auto choice is c on each path alone (queryMS, kvMS; MeasuredRate): the
// model's with KVSlot refitted (plan.PathCosts.WithRate at fa.BlkKV keys
// per block). The GPU check prints both next to a case's query and kv
// rows, so that one run on a GPU gives the constants to put in
// gpuPathCosts.
func AutoFit(device string, fa *FwdArgs, c AutoChoice, queryMS, kvMS float64) (model, fitted plan.PathCosts, rate float64, err error) {
	model, why := autoCosts(device, fa)
	if why != "" {
		return model, model, 0, fmt.Errorf("cuda: auto fit: %s", why)
	}
	if rate, err = c.MeasuredRate(queryMS, kvMS); err != nil {
		return model, model, 0, err
	}
	fitted, err = model.WithRate(rate, float64(fa.BlkKV))
	return model, fitted, rate, err
}

// TileChooser decides a query tile's path in place of the model (tests and
// the GPU check, to run both paths in one call): tile is the tile's index
// in the call's full query-major plan, v the model's verdict; true runs
// the tile on the query-major kernel.
type TileChooser func(tile int, v plan.TileVerdict) bool

// AlternateTiles is a TileChooser that gives the even tiles to the
// query-major kernel and the odd ones to the KV-major path, whatever the
// model says.
func AlternateTiles(tile int, _ plan.TileVerdict) bool { return tile%2 == 0 }

// AutoChoice is what the auto path chose for the last sparse prefill
// (Kernels.PrefillChoice).
type AutoChoice struct {
	QueryTiles, KVTiles int     // tiles per path
	ByLanes, ByRate     int     // tiles whose verdict the lane factor / the rate factor decided
	Query, KV           float64 // the model's totals with every tile on one path (units of gpuPathCosts)
	Chosen              float64 // its total for the tiles as they ran
	Limit               string  // why every tile ran KV-major without weighing ("" when weighed)
	Forced              bool    // a TileChooser overrode the model
	// Over every tile, whichever path it took: the query-major path's
	// lane rows times union blocks and the KV-major path's rows times
	// entries (TileVerdict's Union*Lanes and Entries*QPK), and the model's
	// rate (the same for every tile of a call).
	LaneBlocks, EntryRows int64
	Rate                  float64
}

// MeasuredRate returns the rate (TileVerdict.Rate: the query-major cost
// per row and key over the KV-major one, partial rows included) that
// timings of the call on each path alone measure: (queryMS / kvMS) *
// EntryRows / LaneBlocks. It is the value to fit the model's constants to
// (plan.PathCosts.WithRate); an error where the choice was not weighed or
// a time is not finite and positive.
func (c AutoChoice) MeasuredRate(queryMS, kvMS float64) (float64, error) {
	switch {
	case c.Limit != "":
		return 0, fmt.Errorf("cuda: auto choice not weighed: %s", c.Limit)
	case c.LaneBlocks <= 0 || c.EntryRows <= 0:
		return 0, fmt.Errorf("cuda: auto choice with %d lane blocks and %d entry rows: nothing to measure a rate on", c.LaneBlocks, c.EntryRows)
	case !(queryMS > 0) || !(kvMS > 0) || math.IsInf(queryMS, 1) || math.IsInf(kvMS, 1):
		return 0, fmt.Errorf("cuda: times query %v ms, kv %v ms: expected finite values > 0", queryMS, kvMS)
	}
	return queryMS / kvMS * float64(c.EntryRows) / float64(c.LaneBlocks), nil
}

// String says how many tiles took each path, the model's totals and what
// decided: the limit that kept the KV-major path, the chooser, or how
// many verdicts each factor decided.
func (c AutoChoice) String() string {
	if c.Limit != "" {
		return "auto: every tile kv: " + c.Limit
	}
	by := fmt.Sprintf("decided by lanes %d, rate %d", c.ByLanes, c.ByRate)
	if c.Forced {
		by = "forced by the tile chooser"
	}
	return fmt.Sprintf("auto: %d tiles query, %d kv; model all-query %.4g, all-kv %.4g, chosen %.4g; %s",
		c.QueryTiles, c.KVTiles, c.Query, c.KV, c.Chosen, by)
}

// autoPart is the partition of an auto prefill, on storage kept between
// calls so that a warm call allocates nothing.
type autoPart struct {
	q      QPlan    // the query-major tiles
	drop   []bool   // [total_q * Hkv]: (token, KV head) rows of the query tiles
	csr    plan.CSR // the CSR without the dropped rows' entries
	sched  plan.FwdSchedule
	cnt    []int32 // kept entries per (KV head, CSR row), then their fill
	choice AutoChoice
}

// partition weighs every tile of the full plan qp (tokens of qpk heads,
// blocks of blkKV keys, totalQ query rows, hkv KV heads) with costs, or
// lets choose decide where it is not nil, and fills a.q with the tiles
// that take the query-major path and a.drop with their rows.
func (a *autoPart) partition(qp *QPlan, costs *plan.PathCosts, blkKV, qpk, hkv, totalQ int, choose TileChooser) error {
	a.choice = AutoChoice{Forced: choose != nil}
	a.drop = sized(a.drop, totalQ*hkv)
	clear(a.drop)
	q := &a.q
	*q = QPlan{TileRows: qp.TileRows, TileTokens: qp.TileTokens, Tiles: q.Tiles[:0], TilePtr: append(q.TilePtr[:0], 0), Blocks: q.Blocks[:0], Masks: q.Masks[:0]}
	for t := 0; t < qp.NumTiles(); t++ {
		f := qp.Tiles[t*QTileFields : (t+1)*QTileFields]
		lo, hi := qp.TilePtr[t], qp.TilePtr[t+1]
		entries := 0
		for _, m := range qp.Masks[lo:hi] {
			entries += bits.OnesCount64(m)
		}
		v, err := costs.Weigh(entries, int(hi-lo), int(f[3]), qpk, qp.TileRows, float64(blkKV), false)
		if err != nil {
			return fmt.Errorf("cuda: auto prefill: tile %d: %w", t, err)
		}
		query := v.Query()
		if choose != nil {
			query = choose(t, v)
		}
		n := float64(blkKV)
		kvCost := float64(entries*qpk) * (n*costs.KVKey + costs.KVSlot)
		qCost := float64(v.Union*v.Lanes) * (n*costs.QMKey + costs.QMSlot)
		a.choice.KV += kvCost
		a.choice.Query += qCost
		a.choice.LaneBlocks += int64(v.Union * v.Lanes)
		a.choice.EntryRows += int64(entries * qpk)
		a.choice.Rate = v.Rate
		if v.Factor() == "lanes" {
			a.choice.ByLanes++
		} else {
			a.choice.ByRate++
		}
		if !query {
			a.choice.KVTiles++
			a.choice.Chosen += kvCost
			continue
		}
		a.choice.QueryTiles++
		a.choice.Chosen += qCost
		for tok := f[2]; tok < f[2]+f[3]; tok++ {
			a.drop[int(tok)*hkv+int(f[1])] = true
		}
		q.Tiles = append(q.Tiles, f...)
		q.Blocks = append(q.Blocks, qp.Blocks[lo:hi]...)
		q.Masks = append(q.Masks, qp.Masks[lo:hi]...)
		q.TilePtr = append(q.TilePtr, int32(len(q.Blocks)))
	}
	return nil
}

// filter returns csr and s without the entries of the rows a.drop marks:
// per CSR row the kept entries in their order (RowPtr recomputed, QIdx and
// QSplit compacted, -1 after each head's last), every item cut to its kept
// entries (dropped when none is left), SplitCounts 0 for the dropped rows
// and as they were elsewhere. csr and s must be a schedule that
// BuildQPlan accepted for cuQ (every index in range); the result is valid
// until the next filter.
func (a *autoPart) filter(csr *plan.CSR, s *plan.FwdSchedule, cuQ []int32) (*plan.CSR, *plan.FwdSchedule) {
	hkv, tr := csr.Hkv, csr.TotalRows
	c := &a.csr
	*c = plan.CSR{Hkv: hkv, TotalRows: tr, Stride: csr.Stride,
		RowPtr: sized(c.RowPtr, len(csr.RowPtr)), QIdx: sized(c.QIdx, len(csr.QIdx))}
	o := &a.sched
	*o = plan.FwdSchedule{Capacity: s.Capacity, Target: s.Target, Metadata: sized(o.Metadata, len(s.Metadata)),
		QSplit: sized(o.QSplit, len(s.QSplit)), SplitCounts: append(o.SplitCounts[:0], s.SplitCounts...)}
	for i, d := range a.drop {
		if d {
			o.SplitCounts[i] = 0
		}
	}
	// Kept entries per (head, row), from the items (which cover every entry once).
	cnt := sized(a.cnt, hkv*tr)
	a.cnt = cnt
	clear(cnt)
	for i := 0; i < int(s.WorkCount); i++ {
		h, row, base, n, b := itemRange(csr, s, i)
		for _, ql := range csr.QIdx[base : base+n] {
			if !a.drop[(int(cuQ[b])+int(ql))*hkv+h] {
				cnt[h*tr+row]++
			}
		}
	}
	for h := 0; h < hkv; h++ {
		rp := c.RowPtr[h*(tr+1):][:tr+1]
		rp[0] = 0
		for r := 0; r < tr; r++ {
			rp[r+1] = rp[r] + cnt[h*tr+r]
		}
		for i := h*csr.Stride + int(rp[tr]); i < (h+1)*csr.Stride; i++ {
			c.QIdx[i], o.QSplit[i] = -1, -1
		}
	}
	clear(cnt) // now the fill of each row
	clear(o.Metadata)
	var items int32
	for i := 0; i < int(s.WorkCount); i++ {
		h, row, base, n, b := itemRange(csr, s, i)
		start := cnt[h*tr+row]
		at := h*csr.Stride + int(c.RowPtr[h*(tr+1)+row]) + int(start)
		for k, ql := range csr.QIdx[base : base+n] {
			if !a.drop[(int(cuQ[b])+int(ql))*hkv+h] {
				c.QIdx[at], o.QSplit[at] = ql, s.QSplit[base+k]
				at++
				cnt[h*tr+row]++
			}
		}
		if kept := cnt[h*tr+row] - start; kept > 0 {
			m := o.Metadata[int(items)*plan.MetaFields:][:plan.MetaFields]
			copy(m, s.Metadata[i*plan.MetaFields:][:plan.MetaFields])
			m[2], m[3] = start, kept
			items++
		}
	}
	o.WorkCount = items
	return c, o
}

// itemRange returns item i of s: its KV head, CSR row, the offset of its
// first entry in csr.QIdx, its entry count and its sequence.
func itemRange(csr *plan.CSR, s *plan.FwdSchedule, i int) (h, row, base, n, b int) {
	m := s.Metadata[i*plan.MetaFields:][:plan.MetaFields]
	h, row, n, b = int(m[0]), int(m[1]), int(m[3]), int(m[4])
	base = h*csr.Stride + int(csr.RowPtr[h*(csr.TotalRows+1)+row]) + int(m[2])
	return h, row, base, n, b
}

// ChooseAutoPrefill returns what the auto path would choose, by the
// model, for the sparse prefill fa of csr and s (cuQ: host copy of
// cu_seqlens_q) on a GPU of family arch called device, without a launch
// or a device: the limit that keeps every tile KV-major (QFwdPlan's
// reason, a GPU without constants), else the tiles per path and the
// model's totals. Launch-time limits (a kernel missing from the fatbin,
// arguments only the query-major kernel refuses) are not seen here. The
// GPU check prints it next to a case's query and kv timing rows.
func ChooseAutoPrefill(arch Arch, device string, fa *FwdArgs, csr *plan.CSR, s *plan.FwdSchedule, cuQ []int32) (AutoChoice, error) {
	costs, why := autoCosts(device, fa)
	return chooseAuto(arch, fa, csr, s, cuQ, costs, why)
}

// ChooseAutoPrefillWith is ChooseAutoPrefill with the model's constants
// given (the GPU check's choice under the constants a run fitted,
// AutoFit) instead of those of a known GPU.
func ChooseAutoPrefillWith(arch Arch, costs plan.PathCosts, fa *FwdArgs, csr *plan.CSR, s *plan.FwdSchedule, cuQ []int32) (AutoChoice, error) {
	return chooseAuto(arch, fa, csr, s, cuQ, costs, "")
}

// chooseAuto weighs the call with costs, or names a limit: QFwdPlan's
// first, then why (a GPU without constants) when it is not "".
func chooseAuto(arch Arch, fa *FwdArgs, csr *plan.CSR, s *plan.FwdSchedule, cuQ []int32, costs plan.PathCosts, why string) (AutoChoice, error) {
	if fa.Hkv < 1 || fa.Hq%fa.Hkv != 0 || fa.Hq < fa.Hkv {
		return AutoChoice{}, fmt.Errorf("cuda: Hq = %d, Hkv = %d: Hq must be a positive multiple of Hkv", fa.Hq, fa.Hkv)
	}
	tp, qwhy := QFwdPlan(arch, fa, 0)
	if qwhy != "" {
		return AutoChoice{Limit: qwhy}, nil
	}
	if why != "" {
		return AutoChoice{Limit: why}, nil
	}
	qp, err := BuildQPlan(csr, s, cuQ, fa.Hkv, fa.Hq/fa.Hkv, QFwdTileRows(tp.Name))
	if err != nil {
		return AutoChoice{}, err
	}
	var a autoPart
	if err := a.partition(qp, &costs, fa.BlkKV, fa.Hq/fa.Hkv, fa.Hkv, int(cuQ[len(cuQ)-1]), nil); err != nil {
		return AutoChoice{}, err
	}
	return a.choice, nil
}
