package cuda

import (
	"fmt"

	"github.com/sparseattn/msa/kernels/cuda/fatbin"
)

// fwd2KernelParams mirrors MsaFwd2Params (shared/msa_params.h): the
// window's forward block, then the fused combine's outputs, split counts,
// row counters and tile scheduler.
type fwd2KernelParams struct {
	F                                        fwdKernelParams
	Out, LSE, TLSE, OutputScale, SplitCounts uint64
	Counters, Sched                          uint64
	Q0, pad0                                 int32
}

// KV2Name is the persistent KV-major sm_90a kernel with the fused combine
// (sm90/sm90_fwd2.cu) for variant v at head dim d.
func KV2Name(v TCVariant, d int) string { return fmt.Sprintf("msa_sm90_fwd2_%s_d%d", v, d) }

// KV2Names lists the kv2 kernels the launcher looks up on family a (none
// outside sm90).
func KV2Names(a Arch) []string {
	if a != ArchSM90 {
		return nil
	}
	return []string{fatbin.SM90Fwd2BF16D64, fatbin.SM90Fwd2BF16D128, fatbin.SM90Fwd2FP8D64, fatbin.SM90Fwd2FP8D128}
}

// KV2Plan returns the kv2 kernel and its launch geometry for a prefill of
// fa and ca on family arch, or why it cannot run (the prefill then runs
// msa_sm90_fwd_* and the combine). The kernel exists for BF16 and FP8
// (E4M3 Q/K/V, P rounded to E4M3) at D = 64 and 128 with F32 or BF16
// partials; it stores 16-byte vectors of the partial and output rows.
func KV2Plan(arch Arch, fa *FwdArgs, ca *CombineArgs) (name string, l fatbin.HALaunch, why string) {
	v, ok := FwdVariant(fa.QDtype, fa.KVDtype)
	switch {
	case arch != ArchSM90:
		return "", l, fmt.Sprintf("kv2 is an sm_90a kernel, this GPU runs the %v family", arch)
	case ca == nil:
		return "", l, "kv2 fuses the combine: a forward without its combine runs msa_sm90_fwd_*"
	case !ok || v != VarBF16 && v != VarFP8:
		return "", l, fmt.Sprintf("kv2 has BF16 and FP8 (E4M3 Q/K/V) only, not Q %s, K/V %s", fa.QDtype, fa.KVDtype)
	case v == VarFP8 && fa.PVRound != RoundE4M3:
		return "", l, "the fp8 variant rounds P to e4m3 (pv_round must be E4M3)"
	case fa.BlkKV > 128:
		return "", l, "blk_kv above 128"
	case !aligned(fa.Q, 16):
		return "", l, "Q not 16-byte aligned (its rows are gathered in 16-byte copies)"
	case fa.D != 64 && fa.D != 128:
		return "", l, fmt.Sprintf("head dim %d: kv2 has D = 64 and 128", fa.D)
	case fa.PartialDtype != F32 && fa.PartialDtype != BF16:
		return "", l, fmt.Sprintf("partial dtype %s: kv2 writes F32 or BF16 partials", fa.PartialDtype)
	case ca.Hq != fa.Hq || ca.Hkv != fa.Hkv || ca.D != fa.D || ca.TopK != fa.TopK || ca.PartialDtype != fa.PartialDtype:
		return "", l, "forward and combine arguments disagree on Hq, Hkv, D, TopK or the partial dtype"
	case !aligned(fa.OPartial, 16) || !aligned(ca.Out, 16):
		return "", l, "O partials or output not 16-byte aligned"
	}
	name = KV2Name(v, fa.D)
	l, found := fatbin.Fwd2Launch[name]
	if !found {
		return "", l, name + " is not in the launch table"
	}
	return name, l, ""
}

// KV2Window is the query window of a kv2 prefill: the caller's window w,
// cut so that one window's partials (O, LSE and temperature LSE of slots
// slots x hq heads per query, psz bytes per O element) take at most half
// of the device's L2 (l2 bytes; the other half holds the K/V blocks and Q
// rows streaming through), in whole row tiles of 64 / qhpk queries and at
// least one tile. Each (query, head) row is merged by the CTA that writes
// its last slot, so its partials are read back while they are in L2 when
// the window's partials fit there. l2 <= 0 keeps w.
func KV2Window(w, slots, hq, qhpk, d, psz, l2 int) int {
	if l2 <= 0 || w < 1 {
		return w
	}
	perQuery := int64(slots) * int64(hq) * (int64(d)*int64(psz) + 8)
	tile := int64(max(64/max(qhpk, 1), 1))
	fit := int64(l2) / 2 / max(perQuery, 1) / tile * tile
	return int(min(int64(w), max(fit, tile)))
}

// newFwd2Params is the kv2 block of one window [q0, q0+n): p is the
// window's forward block (partials already shifted by -q0 rows), ca the
// combine's outputs, splitCounts the device copy of the schedule's split
// counts (global rows), counters the row counters (shifted here by -q0 *
// Hq), sched the two scheduler words.
func newFwd2Params(p fwdKernelParams, ca *CombineArgs, splitCounts, counters, sched uint64, q0 int) fwd2KernelParams {
	return fwd2KernelParams{F: p, Out: ca.Out, LSE: ca.LSE, TLSE: ca.TLSE, OutputScale: ca.OutputScale, SplitCounts: splitCounts,
		Counters: counters - uint64(q0)*uint64(ca.Hq)*4, Sched: sched, Q0: int32(q0)}
}
