//go:build cuda

package cuda

import (
	"unsafe"

	"github.com/sparseattn/msa/cuda/driver"
	"github.com/sparseattn/msa/kernels/plan"
)

// prepQueryPrefill returns the query-major launch of a sparse prefill of
// choice ch (QFwdPlan): one kernel over the QPlan's tiles writing ca.Out,
// ca.LSE and ca.TLSE (the partial buffers and the window are not used).
// why is the reason when the query-major kernel cannot run (the caller
// then runs the KV-major path); err is a bad input, refused with the
// KV-major path's errors. The plan, its upload staging and the parameter
// block are k.pre's.
func (k *Kernels) prepQueryPrefill(ch *prefillChoice, fa *FwdArgs, ca *CombineArgs, csr *plan.CSR, s *plan.FwdSchedule, cuQ []int32) (steps []step, why string, err error) {
	if _, err := newFwdKernelParams(fa, csr, s, FwdPlanPtrs{}); err != nil {
		return nil, "", err
	}
	if k.path != PathAuto {
		return nil, ch.qWhy, nil
	}
	d := &k.pre
	qp, err := d.qp.build(csr, s, cuQ, fa.Hkv, fa.Hq/fa.Hkv, QFwdTileRows(ch.q.Name))
	if err != nil {
		return nil, "", err
	}
	if err := qp.check(&d.covered, cuQ, nil, fa.Hkv, fa.Hq/fa.Hkv, fa.BlkKV); err != nil {
		return nil, "", err
	}
	if ch.qWhy != "" {
		return nil, ch.qWhy, nil
	}
	st, launch, why, err := k.queryStep(ch, fa, ca, csr, s, qp)
	if err != nil || why != "" || !launch {
		return nil, why, err
	}
	d.steps = append(d.steps[:0], st)
	return d.steps, "", nil
}

// queryStep uploads the query-major plan qp and returns the launch of the
// query-major kernel over its tiles (launch false: no tile, nothing to
// launch); why is the reason the launch cannot be made, err a bad input.
func (k *Kernels) queryStep(ch *prefillChoice, fa *FwdArgs, ca *CombineArgs, csr *plan.CSR, s *plan.FwdSchedule, qp *QPlan) (st step, launch bool, why string, err error) {
	d := &k.pre
	if ch.fp8Key != "" {
		k.fallback[ch.fp8Key] = ch.fp8Why
	}
	var dev QPlanPtrs
	if dev.Tiles, err = k.uploadInt32("qfwd.tiles", qp.Tiles); err != nil {
		return st, false, "", err
	}
	if dev.TilePtr, err = k.uploadInt32("qfwd.tile_ptr", qp.TilePtr); err != nil {
		return st, false, "", err
	}
	if dev.Blocks, err = k.uploadInt32("qfwd.blocks", qp.Blocks); err != nil {
		return st, false, "", err
	}
	var mp unsafe.Pointer
	if len(qp.Masks) > 0 {
		mp = unsafe.Pointer(&qp.Masks[0])
	}
	if dev.Masks, err = k.upload("qfwd.masks", mp, int64(len(qp.Masks))*8); err != nil {
		return st, false, "", err
	}
	if d.qps, err = newQFwdKernelParams(fa, ca, csr, s, qp, dev); err != nil {
		return st, false, "", err
	}
	if qp.NumTiles() == 0 {
		return st, false, "", nil // no query rows: nothing to launch
	}
	grid := qp.NumTiles()
	if n := ch.qTilesPerCTA; n > 0 {
		grid = (grid + n - 1) / n
	}
	st, why = k.tcLaunch(&ch.q, grid, driver.Bytes(&d.qps), &ch.qMaps)
	return st, why == "", why, nil
}

// SetFP8PV selects how the sm_90a query-major fp8 kernel runs P.V in later
// sparse prefills (Load sets it from MSA_CUDA_FP8PV, default widen).
// FP8PVFP8 falls back to the widened-V kernel, recording why in Fallbacks,
// where the fp8pv kernel is missing from the fatbin.
func (k *Kernels) SetFP8PV(m FP8PV) {
	k.mu.Lock()
	k.fp8pv = m
	k.mu.Unlock()
}

// FP8PV is the FP8 P.V mode of later calls.
func (k *Kernels) FP8PV() FP8PV {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.fp8pv
}
