//go:build cuda

package cuda

import (
	"fmt"
)

// kv2Setup decides whether the windows of a prefill of choice ch run on
// the kv2 kernel (MSA_CUDA_PREFILL=kv2 or auto-kv2 on the tensor-core path, KV2Plan,
// recording in Fallbacks why not): it returns whether they do, the query
// window to cut the schedule into (KV2Window of window), and allocates the
// row counters of the largest window and the scheduler words (zeroed
// once: the kernel leaves them 0).
func (k *Kernels) kv2Setup(ch *prefillChoice, fa *FwdArgs, window int) (ok bool, w int, counters, sched uint64, err error) {
	if !k.prefill.KV2() || k.path != PathAuto {
		return false, window, 0, 0, nil
	}
	if ch.kv2Why != "" {
		k.fallback[ch.kv2Key] = ch.kv2Why
		return false, window, 0, 0, nil
	}
	w = KV2Window(window, fa.TopK, fa.Hq, fa.Hq/max(fa.Hkv, 1), fa.D, partialSize(fa.PartialDtype), k.l2)
	rows := int64(max(min(w, fa.TotalQ), 1)) * int64(fa.Hq)
	if counters, err = k.zeroed("kv2.counters", rows*4); err != nil {
		return false, 0, 0, 0, err
	}
	if sched, err = k.zeroed("kv2.sched", 8); err != nil {
		return false, 0, 0, 0, err
	}
	return true, w, counters, sched, nil
}

// kv2Step returns the kv2 launch of choice ch of a window with kv2
// parameter block value over items work items, or why it cannot run (the
// window then runs msa_sm90_fwd_* and the combine). The grid is
// persistent: one CTA per SM at most, and at least one, which writes the
// empty rows of a window without items.
func (k *Kernels) kv2Step(ch *prefillChoice, value []byte, items int) (step, string) {
	if ch.tcWhy != "" {
		return step{}, ch.tcWhy
	}
	tp := ch.tc
	tp.Name = ch.kv2
	st, why := k.tcLaunch(&tp, max(min(items, k.sms), 1), value, &ch.tcMaps)
	if why != "" {
		return step{}, fmt.Sprintf("%s: %s", ch.kv2, why)
	}
	return st, ""
}
