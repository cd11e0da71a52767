//go:build cuda

package cuda

import (
	"fmt"

	"github.com/sparseattn/msa/cuda/driver"
)

// kv2Setup decides whether the windows of a prefill run on the kv2 kernel
// (MSA_CUDA_PREFILL=kv2 on the tensor-core path, KV2Plan): it returns the
// kernel ("" for the KV path, recording why in Fallbacks) and the query
// window to cut the schedule into (KV2Window of window), and allocates the
// row counters of the largest window and the scheduler words (zeroed once:
// the kernel leaves them 0).
func (k *Kernels) kv2Setup(fa *FwdArgs, ca *CombineArgs, window int) (name string, w int, counters, sched uint64, err error) {
	if k.prefill != PrefillKV2 || k.path != PathAuto {
		return "", window, 0, 0, nil
	}
	name, _, why := KV2Plan(k.arch, fa, ca)
	if why != "" {
		key := "kv2"
		if v, ok := FwdVariant(fa.QDtype, fa.KVDtype); ok {
			key = KV2Name(v, fa.D)
		}
		k.fallback[key] = why
		return "", window, 0, 0, nil
	}
	w = KV2Window(window, fa.TopK, fa.Hq, fa.Hq/max(fa.Hkv, 1), fa.D, partialSize(fa.PartialDtype), k.l2)
	rows := int64(max(min(w, fa.TotalQ), 1)) * int64(fa.Hq)
	if counters, err = k.zeroed("kv2.counters", rows*4); err != nil {
		return "", 0, 0, 0, err
	}
	if sched, err = k.zeroed("kv2.sched", 8); err != nil {
		return "", 0, 0, 0, err
	}
	return name, w, counters, sched, nil
}

// kv2Step returns the kv2 launch of the window [q0, q0+n) with forward
// block p over items work items, or why it cannot run (the window then
// runs msa_sm90_fwd_* and the combine). The grid is persistent: one CTA per
// SM at most, and at least one, which writes the empty rows of a window
// without items.
func (k *Kernels) kv2Step(name string, fa *FwdArgs, ca *CombineArgs, p fwdKernelParams, items int, splitCounts, counters, sched uint64, q0 int) (step, string) {
	grid := max(min(items, k.sms), 1)
	tp, why := TCFwdPlan(k.arch, fa, grid)
	if why != "" {
		return step{}, why
	}
	tp.Name = name
	pp := newFwd2Params(p, ca, splitCounts, counters, sched, q0)
	st, ok, why := k.tcStep(&tp, driver.Bytes(&pp))
	if !ok {
		return step{}, fmt.Sprintf("%s: %s", name, why)
	}
	return st, ""
}
