package cuda

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/sparseattn/msa/kernels/cuda/fatbin"
)

// TestFwd2ParamsLayout pins fwd2KernelParams to MsaFwd2Params
// (msa_params.h: the forward block, seven pointers, two int32).
func TestFwd2ParamsLayout(t *testing.T) {
	var p fwd2KernelParams
	f := unsafe.Sizeof(fwdKernelParams{})
	if got, want := unsafe.Sizeof(p), f+7*8+2*4; got != want {
		t.Errorf("sizeof = %d, want %d", got, want)
	}
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"out", unsafe.Offsetof(p.Out), f},
		{"split_counts", unsafe.Offsetof(p.SplitCounts), f + 4*8},
		{"counters", unsafe.Offsetof(p.Counters), f + 5*8},
		{"sched", unsafe.Offsetof(p.Sched), f + 6*8},
		{"q0", unsafe.Offsetof(p.Q0), f + 7*8},
	} {
		if c.got != c.want {
			t.Errorf("offset of %s = %d, want %d", c.name, c.got, c.want)
		}
	}
}

// TestKV2Plan checks the kernel choice and every refusal.
func TestKV2Plan(t *testing.T) {
	good := func() (*FwdArgs, *CombineArgs) {
		fa := &FwdArgs{QDtype: BF16, KVDtype: BF16, D: 128, Hq: 16, Hkv: 1, TopK: 16, PartialDtype: BF16, OPartial: 1 << 20}
		ca := &CombineArgs{D: 128, Hq: 16, Hkv: 1, TopK: 16, PartialDtype: BF16, Out: 2 << 20}
		return fa, ca
	}
	fa, ca := good()
	name, l, why := KV2Plan(ArchSM90, fa, ca)
	if why != "" || name != fatbin.SM90Fwd2BF16D128 || l != fatbin.Fwd2Launch[name] {
		t.Fatalf("bench shape: %q %+v %q", name, l, why)
	}
	for _, c := range []struct {
		what string
		arch Arch
		edit func(fa *FwdArgs, ca *CombineArgs) *CombineArgs
		want string
	}{
		{"sm100", ArchSM100, nil, "sm_90a"},
		{"no combine", ArchSM90, func(fa *FwdArgs, ca *CombineArgs) *CombineArgs { return nil }, "combine"},
		{"bf16fp8", ArchSM90, func(fa *FwdArgs, ca *CombineArgs) *CombineArgs { fa.KVDtype = E4M3; return ca }, "BF16 and FP8"},
		{"fp8 bf16 P", ArchSM90, func(fa *FwdArgs, ca *CombineArgs) *CombineArgs {
			fa.QDtype, fa.KVDtype, fa.PVRound = E4M3, E4M3, RoundBF16
			return ca
		}, "e4m3"},
		{"blk 256", ArchSM90, func(fa *FwdArgs, ca *CombineArgs) *CombineArgs { fa.BlkKV = 256; return ca }, "blk_kv"},
		{"q misaligned", ArchSM90, func(fa *FwdArgs, ca *CombineArgs) *CombineArgs { fa.Q += 2; return ca }, "Q not"},
		{"d256", ArchSM90, func(fa *FwdArgs, ca *CombineArgs) *CombineArgs { fa.D, ca.D = 256, 256; return ca }, "head dim 256"},
		{"f16 partials", ArchSM90, func(fa *FwdArgs, ca *CombineArgs) *CombineArgs {
			fa.PartialDtype, ca.PartialDtype = F16, F16
			return ca
		}, "partial dtype"},
		{"disagree", ArchSM90, func(fa *FwdArgs, ca *CombineArgs) *CombineArgs { ca.TopK = 8; return ca }, "disagree"},
		{"misaligned", ArchSM90, func(fa *FwdArgs, ca *CombineArgs) *CombineArgs { ca.Out += 8; return ca }, "16-byte"},
	} {
		fa, ca := good()
		if c.edit != nil {
			ca = c.edit(fa, ca)
		}
		if _, _, why := KV2Plan(c.arch, fa, ca); !strings.Contains(why, c.want) {
			t.Errorf("%s: why %q, want it to mention %q", c.what, why, c.want)
		}
	}
	fa, ca = good()
	fa.QDtype, fa.KVDtype, fa.PVRound, fa.D, ca.D = E4M3, E4M3, RoundE4M3, 64, 64
	if name, _, why := KV2Plan(ArchSM90, fa, ca); why != "" || name != fatbin.SM90Fwd2FP8D64 {
		t.Errorf("fp8 d64: %q %q", name, why)
	}
	// every kernel the launcher looks up has launch data, and only sm90 has any
	for _, n := range KV2Names(ArchSM90) {
		if _, ok := fatbin.Fwd2Launch[n]; !ok {
			t.Errorf("%s: not in Fwd2Launch", n)
		}
	}
	if len(KV2Names(ArchSM100)) != 0 || len(KV2Names(ArchSM90)) != len(fatbin.Fwd2Launch) {
		t.Errorf("KV2Names: %v / %v", KV2Names(ArchSM100), KV2Names(ArchSM90))
	}
}
