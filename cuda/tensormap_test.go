package cuda

import (
	"slices"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/cuda/fatbin"
	"github.com/sparseattn/msa/kernels/plan"
)

// TestTensorMapValidate checks every rule of TensorMapSpec.Validate on a
// valid map and one violation each.
func TestTensorMapValidate(t *testing.T) {
	good := func() TensorMapSpec {
		return TensorMapSpec{Name: "k", Elem: BF16, Base: 0x10000, Dims: []uint64{128, 4, 1000},
			Strides: []uint64{256, 1024}, Box: []uint32{64, 1, 128}, Swizzle: 128}
	}
	g := good()
	if err := g.Validate(); err != nil {
		t.Fatalf("valid map rejected: %v", err)
	}
	for _, c := range []struct {
		name string
		mod  func(s *TensorMapSpec)
		want string
	}{
		{"base unaligned", func(s *TensorMapSpec) { s.Base = 0x10008 }, "16-byte aligned"},
		{"base null", func(s *TensorMapSpec) { s.Base = 0 }, "null base"},
		{"stride not multiple of 16", func(s *TensorMapSpec) { s.Strides[1] = 1032 }, "multiple of 16"},
		{"stride overlaps rows", func(s *TensorMapSpec) { s.Strides[0] = 128 }, "less than"},
		{"stride too large", func(s *TensorMapSpec) { s.Strides[1] = 1 << 40 }, "below 2^40"},
		{"box above 256", func(s *TensorMapSpec) { s.Box[2] = 257 }, "box dim 2"},
		{"box zero", func(s *TensorMapSpec) { s.Box[1] = 0 }, "box dim 1"},
		{"inner box beyond swizzle span", func(s *TensorMapSpec) { s.Box[0] = 128 }, "swizzle span"},
		{"inner box beyond 64B swizzle", func(s *TensorMapSpec) { s.Swizzle = 64 }, "swizzle span"},
		{"inner box not 16 bytes", func(s *TensorMapSpec) { s.Box[0] = 4; s.Swizzle = 0 }, "multiple of 16"},
		{"bad swizzle", func(s *TensorMapSpec) { s.Swizzle = 96 }, "swizzle span 96"},
		{"rank 0", func(s *TensorMapSpec) { s.Dims, s.Strides, s.Box = nil, nil, nil }, "rank 0"},
		{"rank 6", func(s *TensorMapSpec) {
			s.Dims = []uint64{16, 1, 1, 1, 1, 1}
			s.Strides = []uint64{32, 32, 32, 32, 32}
			s.Box = []uint32{8, 1, 1, 1, 1, 1}
		}, "rank 6"},
		{"stride count", func(s *TensorMapSpec) { s.Strides = s.Strides[:1] }, "needs 2 strides"},
		{"dim zero", func(s *TensorMapSpec) { s.Dims[2] = 0 }, "dim 2"},
	} {
		s := good()
		c.mod(&s)
		err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// TestTensorMapSpecs checks the Q and K/V map geometry of msa_tc_abi.h for
// every dtype and head dim: dims, strides, box, swizzle, and that a row
// wider than 128 bytes is split into 128-byte boxes.
func TestTensorMapSpecs(t *testing.T) {
	for _, dt := range []Dtype{BF16, E4M3, NVFP4} {
		for _, d := range []int{64, 128, 256} {
			rb := rowBytes(dt, d)
			inner, swz, ok := InnerBox(dt, d)
			if !ok {
				t.Fatalf("%s d%d: no swizzle", dt, d)
			}
			es := 1
			if dt == BF16 {
				es = 2
			}
			if inner*es != min(rb, 128) || swz != min(rb, 128) {
				t.Errorf("%s d%d: inner %d elements, swizzle %d: want %d bytes", dt, d, inner, swz, min(rb, 128))
			}
			if dt != NVFP4 {
				q, err := QMapSpec(0x1000, dt, d, 32, 8, 77)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(q.Dims, []uint64{uint64(d), 32, 77}) || !slices.Equal(q.Box, []uint32{uint32(inner), 8, 1}) ||
					!slices.Equal(q.Strides, []uint64{uint64(rb), uint64(rb * 32)}) {
					t.Errorf("q %s d%d: %+v", dt, d, q)
				}
			}
			dk := d
			if dt == NVFP4 {
				dk = d / 2
			}
			k, err := KVMapSpec("k", 0x2000, dt, d, 4, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(k.Dims, []uint64{uint64(dk), 4, 1000}) || !slices.Equal(k.Box, []uint32{uint32(inner), 1, 128}) {
				t.Errorf("dense k %s d%d: %+v", dt, d, k)
			}
			for _, ps := range []int{16, 64, 256} {
				k, err := KVMapSpec("v", 0x2000, dt, d, 4, ps, 50)
				if err != nil {
					t.Fatal(err)
				}
				want := []uint64{uint64(rb), uint64(rb * ps), uint64(rb * ps * 4)}
				if !slices.Equal(k.Dims, []uint64{uint64(dk), uint64(ps), 4, 50}) || !slices.Equal(k.Strides, want) ||
					!slices.Equal(k.Box, []uint32{uint32(inner), uint32(min(128, ps)), 1, 1}) {
					t.Errorf("paged v %s d%d page %d: %+v", dt, d, ps, k)
				}
			}
		}
	}
	if _, err := KVMapSpec("k", 0x2008, BF16, 128, 4, 0, 10); err == nil {
		t.Error("misaligned K base accepted")
	}
	if _, _, ok := InnerBox(NVFP4, 32); ok { // 16-byte rows: no swizzle span fits
		t.Error("16-byte NVFP4 rows accepted")
	}
	a, b := TensorMapSpec{Base: 16, Dims: []uint64{1}, Box: []uint32{1}}, TensorMapSpec{Base: 32, Dims: []uint64{1}, Box: []uint32{1}}
	if a.Key() == b.Key() {
		t.Error("tensor-map cache key ignores the base address")
	}
}

// TestDispatch checks the compute capability -> kernel family map, the
// variant choice and the fallback reasons of TCFwdPlan / TCDecodePlan.
func TestDispatch(t *testing.T) {
	for _, c := range []struct {
		maj, min int
		want     Arch
	}{{10, 0, ArchSM100}, {10, 3, ArchSM100}, {9, 0, ArchSM90}, {8, 0, ArchSM80}, {8, 6, ArchSM80}, {8, 9, ArchSM80},
		{7, 5, ArchPortable}, {12, 0, ArchPortable}, {11, 0, ArchPortable}, {9, 1, ArchPortable}} {
		if got := ArchFor(c.maj, c.min); got != c.want {
			t.Errorf("sm_%d%d: %v, want %v", c.maj, c.min, got, c.want)
		}
	}
	if n := TCNames(ArchSM100); len(n) != 24 || n[0] != "msa_sm100_fwd_bf16_d64" || !slices.Contains(n, "msa_sm100_decode_fp8_d256") ||
		!slices.Contains(n, "msa_sm100_decode_nvfp4_d128") {
		t.Errorf("TCNames(sm100) = %v", n)
	}
	if n := TCNames(ArchSM90); len(n) != 21 || slices.Contains(n, "msa_sm90_decode_nvfp4_d128") {
		t.Errorf("TCNames(sm90) = %v (no NVFP4 decode on sm90)", n)
	}
	for _, a := range []Arch{ArchPortable, ArchSM80, ArchSM90, ArchSM100} {
		if b, ok := ParseArch(a.String()); !ok || b != a {
			t.Errorf("ParseArch(%q) = %v, %v", a, b, ok)
		}
	}
	if _, ok := ParseArch("sm75"); ok {
		t.Error("ParseArch accepted sm75")
	}
	if TCNames(ArchPortable) != nil {
		t.Error("portable family has tensor-core names")
	}
	base := func() FwdArgs {
		return FwdArgs{Q: 0x10000, K: 0x20000, V: 0x30000, OPartial: 0x40000, TotalQ: 10, Hq: 8, Hkv: 2, D: 128, BlkKV: 128,
			TopK: 4, QDtype: BF16, KVDtype: BF16, PartialDtype: BF16, KVRows: 500}
	}
	a := base()
	p, why := TCFwdPlan(ArchSM100, &a, 7)
	if why != "" || p.Name != "msa_sm100_fwd_bf16_d128" || p.SmemBytes != 133120 || p.GridBlocks != 7 || p.K.Box[2] != 128 {
		t.Fatalf("bf16 d128 on sm100: %+v, %q", p, why)
	}
	if p, why := TCFwdPlan(ArchSM90, &a, 7); why != "" || p.Name != "msa_sm90_fwd_bf16_d128" || p.SmemBytes != 0 {
		t.Errorf("sm90: %+v %q", p, why)
	}
	for _, c := range []struct {
		name string
		mod  func(a *FwdArgs)
		want string
	}{
		{"fp8 without e4m3 P", func(a *FwdArgs) { a.QDtype, a.KVDtype = E4M3, E4M3 }, "pv_round"},
		{"e4m3 Q, bf16 K/V", func(a *FwdArgs) { a.QDtype = E4M3 }, "no tensor-core variant"},
		{"blk_kv 256", func(a *FwdArgs) { a.BlkKV = 256 }, "blk_kv"},
		{"no KVRows", func(a *FwdArgs) { a.KVRows = 0 }, "KVRows"},
		{"K unaligned", func(a *FwdArgs) { a.K += 8 }, "16-byte"},
		{"paged page 48", func(a *FwdArgs) { a.PageTable, a.PageSize = 0x50000, 48 }, "power-of-2"},
		{"paged blk not box aligned", func(a *FwdArgs) { a.PageTable, a.PageSize, a.BlkKV = 0x50000, 64, 32 }, "box-aligned"},
	} {
		a := base()
		c.mod(&a)
		if _, why := TCFwdPlan(ArchSM100, &a, 1); !strings.Contains(why, c.want) {
			t.Errorf("%s: reason %q, want %q", c.name, why, c.want)
		}
	}
	a = base()
	a.QDtype, a.KVDtype, a.PVRound = E4M3, E4M3, RoundE4M3
	if p, why := TCFwdPlan(ArchSM100, &a, 1); why != "" || p.Name != "msa_sm100_fwd_fp8_d128" {
		t.Errorf("fp8: %+v %q", p, why)
	}
	a = base()
	a.KVDtype, a.D = NVFP4, 64
	a.PageTable, a.PageSize, a.BlkKV = 0x50000, 64, 64
	if p, why := TCFwdPlan(ArchSM100, &a, 1); why != "" || p.Name != "msa_sm100_fwd_nvfp4_d64" || p.K.Swizzle != 32 {
		t.Errorf("nvfp4 paged: %+v %q", p, why)
	}
	if _, why := TCFwdPlan(ArchPortable, &a, 1); why == "" {
		t.Error("portable family accepted a tensor-core plan")
	}
	d := DecodeArgs{Q: 0x10000, K: 0x20000, V: 0x30000, Batch: 2, SeqlenQ: 1, Hq: 16, Hkv: 2, D: 128, PageSize: 64,
		QDtype: BF16, KVDtype: BF16, NumPages: 40}
	if p, why := TCDecodePlan(ArchSM100, &d, 3); why != "" || p.Name != "msa_sm100_decode_bf16_d128" || p.Q.Dims[2] != 2 {
		t.Errorf("decode: %+v %q", p, why)
	}
	d.KVDtype = E4M3
	if p, why := TCDecodePlan(ArchSM100, &d, 3); why != "" || p.Name != "msa_sm100_decode_bf16fp8_d128" {
		t.Errorf("bf16 Q, e4m3 K/V decode: %+v %q", p, why)
	}
	d.KVDtype = NVFP4
	if p, why := TCDecodePlan(ArchSM100, &d, 3); why != "" || p.Name != "msa_sm100_decode_nvfp4_d128" || p.SmemBytes != 136464 {
		t.Errorf("nvfp4 decode on sm100: %+v %q", p, why)
	}
	if _, why := TCDecodePlan(ArchSM90, &d, 3); why == "" {
		t.Error("nvfp4 decode on sm90: a tensor-core plan (only SM100 has the variant)")
	}
	d.KVDtype, d.PageSize = BF16, 4
	if _, why := TCDecodePlan(ArchSM100, &d, 3); !strings.Contains(why, "page size") {
		t.Errorf("page 4 on sm100: %q", why)
	}
	d.PageSize, d.Q2K, d.TopK, d.BlkKV = 64, 0x9000, 8, 48 // sparse decode, blocks of 48 tokens: not box-aligned
	if _, why := TCDecodePlan(ArchSM100, &d, 3); !strings.Contains(why, "blk_kv 48") {
		t.Errorf("sparse decode with blk 48 on sm100: %q", why)
	}
	d.BlkKV = 128
	if _, why := TCDecodePlan(ArchSM100, &d, 3); why != "" {
		t.Errorf("sparse decode with blk 128 on sm100: %q", why)
	}
}

// TestOperandAlignment checks the K/V (and Q, partial, plan array)
// alignment the builders require before any launch.
func TestOperandAlignment(t *testing.T) {
	csr, s := tinyPlan(t)
	dev := FwdPlanPtrs{RowPtr: 0x100, QSplit: 0x200, Metadata: 0x300, WorkCount: 0x400}
	base := func() FwdArgs {
		return FwdArgs{Q: 0x10000, K: 0x20000, V: 0x30000, OPartial: 0x40000, LSEPartial: 0x50000, CuSeqlensQ: 0x60000,
			CuSeqlensK: 0x60100, TotalQ: 4, Hq: 2, Hkv: 1, D: 64, BlkKV: 16, TopK: 2, NumBatch: 1,
			QDtype: BF16, KVDtype: BF16, PartialDtype: F32}
	}
	a := base()
	if _, err := newFwdKernelParams(&a, csr, s, dev); err != nil {
		t.Fatalf("aligned args rejected: %v", err)
	}
	for _, c := range []struct {
		name string
		mod  func(a *FwdArgs)
		ok   bool
	}{
		{"bf16 K off by 8", func(a *FwdArgs) { a.K += 8 }, false},
		{"bf16 V off by 2", func(a *FwdArgs) { a.V += 2 }, false},
		{"bf16 Q off by 8", func(a *FwdArgs) { a.Q += 8 }, false},
		{"e4m3 K off by 8", func(a *FwdArgs) { a.QDtype, a.KVDtype, a.K = E4M3, E4M3, a.K+8 }, true},
		{"e4m3 K off by 4", func(a *FwdArgs) { a.QDtype, a.KVDtype, a.K = E4M3, E4M3, a.K+4 }, false},
		{"O partial off by 8", func(a *FwdArgs) { a.OPartial += 8 }, false},
		{"LSE partial off by 2", func(a *FwdArgs) { a.LSEPartial += 2 }, false},
		{"cu_seqlens off by 1", func(a *FwdArgs) { a.CuSeqlensK++ }, false},
	} {
		a := base()
		c.mod(&a)
		_, err := newFwdKernelParams(&a, csr, s, dev)
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok = %v", c.name, err, c.ok)
		}
	}
	ds := &plan.DecodeSchedule{Params: plan.DecodeParams{Batch: 1, SeqlenQ: 1, HQ: 1, Hkv: 1, PageSize: 16, Executor: plan.CUDAExecutor}}
	da := DecodeArgs{Q: 0x10000, K: 0x20008, V: 0x30000, PageTable: 0x100, SequsedK: 0x200, PageTableStride: 1,
		Batch: 1, SeqlenQ: 1, Hq: 1, Hkv: 1, D: 64, PageSize: 16, QDtype: BF16, KVDtype: BF16}
	if _, _, err := newDecodeKernelParams(&da, ds, DecodePlanPtrs{}); err == nil || !strings.Contains(err.Error(), "k at") {
		t.Errorf("decode with a misaligned K: %v", err)
	}
}

// tinyPlan is a one-sequence plan: 4 queries, 40 keys, blocks of 16.
func tinyPlan(t *testing.T) (*plan.CSR, *plan.FwdSchedule) {
	t.Helper()
	cuQ, cuK := []int32{0, 4}, []int32{0, 40}
	q2k := []int32{0, 1, 1, 2, 0, -1, 2, 1} // [hkv=1][4][topK=2]
	csr, err := plan.BuildK2QCSR(nil, q2k, 1, 4, 2, cuQ, cuK, 16)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := plan.NewRows(cuK, 16)
	if err != nil {
		t.Fatal(err)
	}
	s, err := plan.BuildFwdSchedule(nil, csr, rows, cuQ, plan.FwdParams{TotalQ: 4, Hkv: 1, QheadPerKV: 2, TopK: 2, BlkKV: 16, Workers: 4})
	if err != nil {
		t.Fatal(err)
	}
	return csr, s
}

// TestWindows checks the GPU query windows: the CPU path's window size
// rule, and that the windowed schedules cover exactly the original
// (item, entry) pairs, each once, every entry inside its window.
func TestWindows(t *testing.T) {
	if w := WindowQueries(32768, 16, 64, 128, 2); w != 1024 {
		t.Errorf("32K x 64 heads x topK 16 x D 128 bf16: window %d, want 1024 (the 8.6 GB case)", w)
	}
	if w := WindowQueries(100, 4, 8, 64, 4); w != 100 {
		t.Errorf("small call: window %d, want all 100 queries", w)
	}
	if w := WindowQueries(1<<20, 16, 128, 256, 4); w != 1 && w > 1024 {
		t.Errorf("huge rows: window %d", w)
	}
	o, l := PartialBytes(1024, 16, 64, 128, 2)
	if o > 4*MaxPartialBytes || l != 1024*16*64*4 {
		t.Errorf("partial bytes %d, %d", o, l)
	}
	c := &prefillCase{name: "win", cuQ: []int32{0, 37, 100}, cuK: []int32{0, 300, 700}, hkv: 2, qhpk: 2, d: 64, topK: 3, blk: 64,
		causal: true, qd: BF16, kvd: BF16, pd: F32}
	genPrefill(t, c, 5)
	type pair struct{ h, row, jblk, entry int32 }
	collect := func(s *plan.FwdSchedule) []pair {
		var out []pair
		for i := 0; i < int(s.WorkCount); i++ {
			m := s.Metadata[i*6 : i*6+6]
			for e := m[2]; e < m[2]+m[3]; e++ {
				out = append(out, pair{m[0], m[1], m[5], e})
			}
		}
		slices.SortFunc(out, func(a, b pair) int {
			return cmpInts([]int32{a.h, a.row, a.jblk, a.entry}, []int32{b.h, b.row, b.jblk, b.entry})
		})
		return out
	}
	want := collect(c.sched)
	for _, w := range []int{1, 7, 37, 64, 99, 100, 1000} {
		wins, err := FwdWindows(c.csr, c.sched, c.cuQ, c.totalQ, w)
		if err != nil {
			t.Fatal(err)
		}
		if w >= c.totalQ && (len(wins) != 1 || wins[0].Sched != c.sched) {
			t.Errorf("w %d: one window must reuse the schedule", w)
		}
		var got []pair
		for _, win := range wins {
			for i := 0; i < int(win.Sched.WorkCount); i++ {
				m := win.Sched.Metadata[i*6 : i*6+6]
				base := int(m[0])*c.csr.Stride + int(c.csr.RowPtr[int(m[0])*(c.csr.TotalRows+1)+int(m[1])])
				for e := m[2]; e < m[2]+m[3]; e++ {
					q := int(c.cuQ[m[4]]) + int(c.csr.QIdx[base+int(e)])
					if q < win.Q0 || q >= win.Q1 {
						t.Fatalf("w %d: window [%d, %d) holds query %d", w, win.Q0, win.Q1, q)
					}
				}
			}
			got = append(got, collect(win.Sched)...)
		}
		slices.SortFunc(got, func(a, b pair) int {
			return cmpInts([]int32{a.h, a.row, a.jblk, a.entry}, []int32{b.h, b.row, b.jblk, b.entry})
		})
		if !slices.Equal(got, want) {
			t.Errorf("w %d: windows cover %d (item, entry) pairs, the schedule %d", w, len(got), len(want))
		}
	}
}

func cmpInts(a, b []int32) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// TestHopperAmpereTable: every kernel of the Hopper / Ampere launch table
// (kernels/cuda/fatbin/names_hopper_ampere.go) is a name the launcher looks up for
// its family, with a launch the device limits allow.
func TestHopperAmpereTable(t *testing.T) {
	if len(fatbin.HopperAmpereLaunch) == 0 {
		t.Fatal("empty Hopper / Ampere launch table")
	}
	for name, g := range fatbin.HopperAmpereLaunch {
		arch := ArchSM90
		if strings.HasPrefix(name, "msa_sm80_") {
			arch = ArchSM80
		}
		if !slices.Contains(TCNames(arch), name) && !slices.Contains(QFwdNames(arch), name) {
			t.Errorf("%s: not a name the launcher looks up for %s", name, arch)
		}
		limit := 232448 // sm_90 opt-in shared memory per block
		if arch == ArchSM80 {
			limit = 101376 // sm_86 / sm_89 (the sm_80 kernels launch there too)
		}
		if g.Threads < 32 || g.Threads%32 != 0 || g.Threads > 1024 || g.DynSmem < 0 || g.DynSmem > limit {
			t.Errorf("%s: %d threads, %d B dynamic shared memory", name, g.Threads, g.DynSmem)
		}
	}
}
