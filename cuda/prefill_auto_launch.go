//go:build cuda

package cuda

import (
	"fmt"

	"github.com/sparseattn/msa/kernels/plan"
)

// prepAutoPrefill returns the launches of an auto sparse prefill
// (PrefillAuto, prefill_auto.go): the KV-major forwards and combines of
// the KV tiles' rows over the filtered CSR and schedule, then the
// query-major kernel over the query tiles. Every tile runs KV-major, with
// the reason in PrefillChoice, where the query-major kernel does not apply
// (ch.qWhy, or arguments only it refuses), the GPU has no constants
// (ch.costsWhy) or its launch cannot be made. Bad inputs get the KV-major
// path's errors: its checks run first, in its order.
func (k *Kernels) prepAutoPrefill(ch *prefillChoice, fa *FwdArgs, ca *CombineArgs, csr *plan.CSR, s *plan.FwdSchedule, cuQ []int32, window int) ([]step, error) {
	d := &k.pre
	a := &d.auto
	limit := ch.qWhy
	if limit == "" && k.chooser == nil {
		limit = ch.costsWhy
	}
	if limit != "" {
		a.choice = AutoChoice{Limit: limit}
		return k.prepKVPrefill(ch, fa, ca, csr, s, cuQ, window)
	}
	if _, err := d.cut.cut(csr, s, cuQ, fa.TotalQ, window); err != nil {
		return nil, err
	}
	if len(s.SplitCounts) != ca.TotalQ*ca.Hkv {
		return nil, fmt.Errorf("cuda: combine: split_counts must have total_q*Hkv = %d entries", ca.TotalQ*ca.Hkv)
	}
	if _, err := newFwdKernelParams(fa, csr, s, FwdPlanPtrs{}); err != nil {
		return nil, err
	}
	qpk := fa.Hq / fa.Hkv
	qp, err := d.qp.build(csr, s, cuQ, fa.Hkv, qpk, QFwdTileRows(ch.q.Name))
	if err != nil {
		return nil, err
	}
	if err := qp.check(&d.covered, cuQ, nil, fa.Hkv, qpk, fa.BlkKV); err != nil {
		return nil, err
	}
	if _, err := newQFwdKernelParams(fa, ca, csr, s, qp, QPlanPtrs{}); err != nil {
		// What only the query-major kernel needs (its combine arguments,
		// the output's alignment) is a limit of that kernel, not a bad
		// input: the KV-major path runs every tile, as MSA_CUDA_PREFILL=kv
		// would.
		a.choice = AutoChoice{Limit: "the query-major kernel does not take these arguments: " + err.Error()}
		return k.prepKVPrefill(ch, fa, ca, csr, s, cuQ, window)
	}
	costs := ch.costs
	if ch.costsWhy != "" {
		// A chooser decides on a GPU without constants: the verdicts it
		// sees weigh both paths' products alike.
		costs = plan.PathCosts{QMKey: 1, KVKey: 1, Staged: 1}
	}
	if err := a.partition(qp, &costs, fa.BlkKV, qpk, fa.Hkv, fa.TotalQ, k.chooser); err != nil {
		return nil, err
	}
	if a.choice.QueryTiles == 0 {
		return k.prepKVPrefill(ch, fa, ca, csr, s, cuQ, window)
	}
	steps := d.steps[:0]
	if a.choice.KVTiles > 0 {
		fc, fs := a.filter(csr, s, cuQ)
		if steps, err = k.prepKVPrefill(ch, fa, ca, fc, fs, cuQ, window); err != nil {
			return nil, err
		}
	}
	st, launch, why, err := k.queryStep(ch, fa, ca, csr, s, &a.q)
	if err != nil {
		return nil, err
	}
	if why != "" {
		if ch.qName != "" {
			k.fallback[ch.qName] = why
		}
		a.choice = AutoChoice{Limit: why}
		return k.prepKVPrefill(ch, fa, ca, csr, s, cuQ, window)
	}
	if launch {
		steps = append(steps, st)
	}
	d.steps = steps
	return steps, nil
}

// SetPrefillChooser makes choose decide each query tile's path in later
// auto sparse prefills in place of the model (nil restores the model):
// for tests and the GPU check, which runs both paths in one call with
// AlternateTiles. The reasons auto runs every tile KV-major (the
// query-major kernel does not apply) still hold.
func (k *Kernels) SetPrefillChooser(choose TileChooser) {
	k.mu.Lock()
	k.chooser = choose
	k.mu.Unlock()
}

// PrefillChoice is what the last auto sparse prefill chose: tiles per
// path, the model's totals and what decided (AutoChoice.String).
func (k *Kernels) PrefillChoice() AutoChoice {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.pre.auto.choice
}
