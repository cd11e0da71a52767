package cuda

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/cuda/fatbin"
)

func TestPrefillPathParse(t *testing.T) {
	for s, want := range map[string]PrefillPath{"": PrefillKV, "kv": PrefillKV, "kv2": PrefillKV2, "query": PrefillQuery, "query80": PrefillQuery80, "auto": PrefillAuto,
		"auto-kv2": PrefillAutoKV2} {
		got, err := ParsePrefillPath(s)
		if err != nil || got != want {
			t.Errorf("ParsePrefillPath(%q) = %v, %v: want %v", s, got, err, want)
		}
		if s != "" && got.String() != s {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), s)
		}
	}
	for _, s := range []string{"Auto", "Query", "q", "KV2", "kv3"} {
		if _, err := ParsePrefillPath(s); err == nil || !strings.Contains(err.Error(), PrefillEnv) {
			t.Errorf("ParsePrefillPath(%q): error %v, want one naming %s", s, err, PrefillEnv)
		}
	}
	t.Setenv(PrefillEnv, "query")
	if p, err := prefillPathFromEnv(); err != nil || p != PrefillQuery {
		t.Errorf("%s=query: %v, %v", PrefillEnv, p, err)
	}
	// the family each path's query-major kernel comes from
	for _, c := range []struct {
		p        PrefillPath
		dev, got Arch
		ok       bool
	}{
		{PrefillKV, ArchSM90, ArchSM90, false},
		{PrefillQuery, ArchSM90, ArchSM90, true},
		{PrefillQuery, ArchSM100, ArchSM100, true},
		{PrefillQuery80, ArchSM90, ArchSM80, true},
		{PrefillQuery80, ArchSM100, ArchSM80, true},
		{PrefillQuery80, ArchPortable, ArchPortable, true},
		{PrefillAuto, ArchSM90, ArchSM90, true},
		{PrefillKV2, ArchSM90, ArchSM90, false},
		{PrefillAutoKV2, ArchSM90, ArchSM90, true},
	} {
		if a, ok := c.p.queryArch(c.dev); a != c.got || ok != c.ok {
			t.Errorf("%s on %s: query-major family %s, %v: want %s, %v", c.p, c.dev, a, ok, c.got, c.ok)
		}
	}
	// which paths weigh tiles, which run the kv2 kernel
	for p, want := range map[PrefillPath][2]bool{PrefillKV: {}, PrefillKV2: {false, true}, PrefillQuery: {}, PrefillQuery80: {},
		PrefillAuto: {true, false}, PrefillAutoKV2: {true, true}} {
		if got := [2]bool{p.Auto(), p.KV2()}; got != want {
			t.Errorf("%s: Auto, KV2 = %v, want %v", p, got, want)
		}
	}
}

// TestQFwdNames: every query-major kernel name is in a launch table (so
// in the fatbin's name list), on every tensor-core family; sm90 adds its
// own, SM100 its eleven (all but BF16 Q with E4M3 K/V at D 256).
func TestQFwdNames(t *testing.T) {
	if QFwdNames(ArchPortable) != nil {
		t.Error("query-major kernels listed for the portable family")
	}
	for _, a := range []Arch{ArchSM80, ArchSM90, ArchSM100} {
		names := QFwdNames(a)
		want := 12
		switch a {
		case ArchSM90:
			want = 27 // and the 12 sm90 kernels, 3 of them fp8pv
		case ArchSM100:
			want = 23 // and the 11 SM100 kernels (no bf16fp8 at D 256)
		}
		if len(names) != want || !slices.Contains(names, "msa_sm80_qfwd_bf16_d128") || !slices.Contains(names, "msa_sm80_qfwd_nvfp4_d256") ||
			slices.Contains(names, "msa_sm90_qfwd_bf16_d64") != (a == ArchSM90) || slices.Contains(names, "msa_sm90_qfwd_nvfp4_d256") != (a == ArchSM90) ||
			slices.Contains(names, "msa_sm90_qfwd_fp8pv_d128") != (a == ArchSM90) ||
			slices.Contains(names, "msa_sm100_qfwd_fp8_d256") != (a == ArchSM100) || slices.Contains(names, "msa_sm100_qfwd_nvfp4_d128") != (a == ArchSM100) ||
			slices.Contains(names, "msa_sm100_qfwd_nvfp4_d256") != (a == ArchSM100) || slices.Contains(names, "msa_sm100_qfwd_bf16fp8_d256") {
			t.Errorf("QFwdNames(%s) = %v", a, names)
		}
		for _, n := range names {
			_, ha := fatbin.HopperAmpereLaunch[n]
			sm100 := slices.ContainsFunc(fatbin.SM100Kernels, func(g fatbin.SM100Kernel) bool { return g.Name == n })
			if !ha && !sm100 {
				t.Errorf("%s: in no launch table", n)
			}
		}
	}
}

func qArgs() (*FwdArgs, *CombineArgs) {
	fa := &FwdArgs{Q: 1 << 20, K: 2 << 20, V: 3 << 20, CuSeqlensQ: 4 << 20, CuSeqlensK: 5 << 20, OPartial: 6 << 20, LSEPartial: 7 << 20,
		TotalQ: 300, Hq: 8, Hkv: 2, D: 128, BlkKV: 128, TopK: 8, NumBatch: 2, QDtype: BF16, KVDtype: BF16, PartialDtype: F32,
		PVRound: RoundBF16, Causal: true, KVRows: 1000}
	ca := &CombineArgs{OPartial: fa.OPartial, LSEPartial: fa.LSEPartial, Out: 8 << 20, LSE: 9 << 20, TotalQ: 300, Hq: 8, Hkv: 2, D: 128, TopK: 8, PartialDtype: F32}
	return fa, ca
}

func TestQFwdPlan(t *testing.T) {
	fa, _ := qArgs()
	p, why := QFwdPlan(ArchSM80, fa, 11)
	if why != "" || p.Name != "msa_sm80_qfwd_bf16_d128" || p.GridBlocks != 11 || QFwdTileRows(p.Name) != QTileRows {
		t.Errorf("sm80: %+v, %q", p, why)
	}
	// SM100: the tcgen05 kernel (128-row tiles, one per CTA, the table's
	// shared memory), the sm80 kernel for the converted K/V variants at D
	// 256; paged K/V under the SM100 boxes' limits.
	for _, c := range []struct {
		q, kv Dtype
		round Round
		d     int
		want  string
	}{
		{BF16, BF16, RoundBF16, 128, "msa_sm100_qfwd_bf16_d128"},
		{E4M3, E4M3, RoundE4M3, 256, "msa_sm100_qfwd_fp8_d256"},
		{BF16, E4M3, RoundBF16, 128, "msa_sm100_qfwd_bf16fp8_d128"},
		{E4M3, NVFP4, RoundBF16, 64, "msa_sm100_qfwd_nvfp4_d64"},
		{BF16, E4M3, RoundBF16, 256, "msa_sm80_qfwd_bf16fp8_d256"},
		{BF16, NVFP4, RoundBF16, 256, "msa_sm100_qfwd_nvfp4_d256"},
	} {
		f := *fa
		f.QDtype, f.KVDtype, f.PVRound, f.D = c.q, c.kv, c.round, c.d
		p, why := QFwdPlan(ArchSM100, &f, 11)
		rows := QTileRows
		if strings.HasPrefix(c.want, "msa_sm100") {
			rows = SM100QTileRows
		}
		if why != "" || p.Name != c.want || p.GridBlocks != 11 || p.SmemBytes != 0 || QFwdTileRows(p.Name) != rows {
			t.Errorf("sm100 %s/%s: %+v, %q", c.q, c.kv, p, why)
		}
	}
	paged := *fa
	paged.PageTable, paged.PageSize = 10<<20, 24
	if _, why := QFwdPlan(ArchSM100, &paged, 11); !strings.Contains(why, "SM100 boxes") {
		t.Errorf("sm100, page size 24: %q, want the SM100 boxes' limit", why)
	}
	// sm90, BF16: the wgmma kernel, two tiles per CTA at D 64 and 128, one
	// at 256, reading the K / V tensor maps the sm90 KV-major kernels read
	for d, grid := range map[int]int{64: 6, 128: 6, 256: 11} {
		f := *fa
		f.D = d
		p, why := QFwdPlan(ArchSM90, &f, 11)
		if want := fmt.Sprintf("msa_sm90_qfwd_bf16_d%d", d); why != "" || p.Name != want || p.GridBlocks != grid {
			t.Errorf("sm90 D %d: %+v, %q: want %s on %d CTAs", d, p, why, want, grid)
		}
		kv, _ := TCFwdPlan(ArchSM90, &f, 11)
		if !reflect.DeepEqual(p.K, kv.K) || !reflect.DeepEqual(p.V, kv.V) {
			t.Errorf("sm90 D %d: query-major K / V maps %+v / %+v, the sm90 prefill's %+v / %+v", d, p.K, p.V, kv.K, kv.V)
		}
	}
	if _, why := QFwdPlan(ArchPortable, fa, 10); why == "" {
		t.Error("portable family: query-major plan accepted")
	}
	fp8 := *fa
	fp8.QDtype, fp8.KVDtype = E4M3, E4M3
	if _, why := QFwdPlan(ArchSM90, &fp8, 10); why == "" {
		t.Error("fp8 variant with BF16 P rounding accepted")
	}
	fp8.PVRound = RoundE4M3
	if p, why := QFwdPlan(ArchSM90, &fp8, 10); why != "" || p.Name != "msa_sm90_qfwd_fp8_d128" || p.GridBlocks != 5 {
		t.Errorf("fp8: %+v, %q", p, why)
	}
	if p, why := QFwdPlan(ArchSM80, &fp8, 10); why != "" || p.Name != "msa_sm80_qfwd_fp8_d128" || p.GridBlocks != 10 {
		t.Errorf("fp8 on the sm80 kernel: %+v, %q", p, why)
	}
	mis := *fa
	mis.Q += 8
	if _, why := QFwdPlan(ArchSM90, &mis, 10); why == "" {
		t.Error("misaligned Q accepted")
	}
}

// TestQFwdParamsErrors: the query-major path refuses what the KV-major
// path refuses, with the same error, and checks its own outputs.
func TestQFwdParamsErrors(t *testing.T) {
	c := prefillCases()[1]
	genPrefill(t, c, 9)
	qp, err := BuildQPlan(c.csr, c.sched, c.cuQ, c.hkv, c.qhpk, QTileRows)
	if err != nil {
		t.Fatal(err)
	}
	base := func() (*FwdArgs, *CombineArgs) {
		fa, ca := qArgs()
		fa.TotalQ, ca.TotalQ = c.totalQ, c.totalQ
		fa.Hq, fa.Hkv, ca.Hq, ca.Hkv = c.hq, c.hkv, c.hq, c.hkv
		return fa, ca
	}
	fa, ca := base()
	p, err := newQFwdKernelParams(fa, ca, c.csr, c.sched, qp, QPlanPtrs{Tiles: 1 << 24, TilePtr: 2 << 24, Blocks: 3 << 24, Masks: 4 << 24})
	if err != nil {
		t.Fatal(err)
	}
	if p.NumTiles != int32(qp.NumTiles()) || p.Out != ca.Out || p.Tiles != 1<<24 || p.Masks != 4<<24 || p.QheadPerKV != int32(c.qhpk) || p.Causal != 1 {
		t.Errorf("params %+v", p)
	}
	for name, mut := range map[string]func(fa *FwdArgs, ca *CombineArgs){
		"head dim":        func(fa *FwdArgs, ca *CombineArgs) { fa.D = 96 },
		"blk_kv":          func(fa *FwdArgs, ca *CombineArgs) { fa.BlkKV = 129 },
		"Hq not multiple": func(fa *FwdArgs, ca *CombineArgs) { fa.Hq = 7 },
		"q dtype":         func(fa *FwdArgs, ca *CombineArgs) { fa.QDtype = F16 },
		"misaligned k":    func(fa *FwdArgs, ca *CombineArgs) { fa.K += 2 },
	} {
		fa, ca := base()
		mut(fa, ca)
		_, kvErr := newFwdKernelParams(fa, c.csr, c.sched, FwdPlanPtrs{})
		_, qErr := newQFwdKernelParams(fa, ca, c.csr, c.sched, qp, QPlanPtrs{})
		if kvErr == nil || qErr == nil || kvErr.Error() != qErr.Error() {
			t.Errorf("%s: KV-major error %v, query-major error %v: want the same error", name, kvErr, qErr)
		}
	}
	for name, mut := range map[string]func(fa *FwdArgs, ca *CombineArgs){
		"no out":         func(fa *FwdArgs, ca *CombineArgs) { ca.Out = 0 },
		"misaligned lse": func(fa *FwdArgs, ca *CombineArgs) { ca.LSE += 2 },
		"combine Hq":     func(fa *FwdArgs, ca *CombineArgs) { ca.Hq, ca.Hkv = fa.Hq*2, fa.Hkv*2 },
	} {
		fa, ca := base()
		mut(fa, ca)
		if _, err := newQFwdKernelParams(fa, ca, c.csr, c.sched, qp, QPlanPtrs{}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := newQFwdKernelParams(fa, ca, c.csr, c.sched, nil, QPlanPtrs{}); err == nil {
		t.Error("nil plan accepted")
	}
}
