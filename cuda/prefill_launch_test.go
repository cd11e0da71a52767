//go:build cuda

package cuda

import (
	"slices"
	"testing"

	"github.com/sparseattn/msa/internal/allocs"
	"github.com/sparseattn/msa/kernels/cuda/fatbin"
	"github.com/sparseattn/msa/kernels/plan"
)

// prefillRoute is one launch route of a sparse prefill on FakeKernels: the
// family and switches, the dtypes, and the kernels one window (or the
// whole call, for the query-major kernel) launches.
type prefillRoute struct {
	name     string
	arch     Arch
	path     Path
	prefill  PrefillPath
	qdt, kvd Dtype
	round    Round
	perWin   []string // kernels of each window, in order
	whole    []string // kernels of the whole call (query-major), instead of perWin
	last     []string // kernels after every window's (auto: the query-major one)
	fallback string   // a kernel whose refusal Fallbacks must record
	device   string   // the driver's device name (auto's constants)
	choose   TileChooser
}

func prefillRoutes() []prefillRoute {
	fwd, comb := fatbin.SparseFwdD128, fatbin.CombineD128
	return []prefillRoute{
		{name: "portable", arch: ArchPortable, qdt: BF16, kvd: BF16, round: RoundBF16, perWin: []string{fwd, comb}},
		{name: "portable path", arch: ArchSM90, path: PathPortable, qdt: BF16, kvd: BF16, round: RoundBF16, perWin: []string{fwd, comb}},
		{name: "sm90 kv", arch: ArchSM90, qdt: BF16, kvd: BF16, round: RoundBF16, perWin: []string{TCName(ArchSM90, "fwd", VarBF16, 128), comb}},
		{name: "sm100 kv", arch: ArchSM100, qdt: BF16, kvd: BF16, round: RoundBF16, perWin: []string{TCName(ArchSM100, "fwd", VarBF16, 128), comb}},
		{name: "sm90 kv2", arch: ArchSM90, prefill: PrefillKV2, qdt: BF16, kvd: BF16, round: RoundBF16, perWin: []string{KV2Name(VarBF16, 128)}},
		{name: "sm90 query", arch: ArchSM90, prefill: PrefillQuery, qdt: BF16, kvd: BF16, round: RoundBF16, whole: []string{QFwdName(ArchSM90, VarBF16, 128)}},
		{name: "sm100 query", arch: ArchSM100, prefill: PrefillQuery, qdt: BF16, kvd: BF16, round: RoundBF16, whole: []string{QFwdName(ArchSM100, VarBF16, 128)}},
		{name: "sm100 query fp8", arch: ArchSM100, prefill: PrefillQuery, qdt: E4M3, kvd: E4M3, round: RoundE4M3, whole: []string{QFwdName(ArchSM100, VarFP8, 128)}},
		{name: "sm100 query converted K/V", arch: ArchSM100, prefill: PrefillQuery, qdt: BF16, kvd: E4M3, round: RoundBF16,
			whole: []string{QFwdName(ArchSM100, VarBF16FP8, 128)}},
		{name: "sm100 query80", arch: ArchSM100, prefill: PrefillQuery80, qdt: BF16, kvd: E4M3, round: RoundBF16,
			whole: []string{QFwdName(ArchSM80, VarBF16FP8, 128)}},
		{name: "sm100 auto both", arch: ArchSM100, prefill: PrefillAuto, qdt: BF16, kvd: BF16, round: RoundBF16, device: "NVIDIA B200",
			choose: AlternateTiles, perWin: []string{TCName(ArchSM100, "fwd", VarBF16, 128), comb}, last: []string{QFwdName(ArchSM100, VarBF16, 128)}},
		{name: "sm80 query", arch: ArchSM90, prefill: PrefillQuery80, qdt: E4M3, kvd: E4M3, round: RoundE4M3, whole: []string{QFwdName(ArchSM80, VarFP8, 128)}},
		{name: "sm90 fallback", arch: ArchSM90, qdt: E4M3, kvd: E4M3, round: RoundBF16, perWin: []string{fwd, comb},
			fallback: TCName(ArchSM90, "fwd", VarFP8, 128)},
		{name: "kv2 fallback", arch: ArchSM90, prefill: PrefillKV2, qdt: E4M3, kvd: E4M3, round: RoundBF16, perWin: []string{fwd, comb},
			fallback: KV2Name(VarFP8, 128)},
		// auto: the KV-major windows first, the query-major kernel last
		{name: "sm90 auto both", arch: ArchSM90, prefill: PrefillAuto, qdt: BF16, kvd: BF16, round: RoundBF16, device: "NVIDIA H200",
			choose: AlternateTiles, perWin: []string{TCName(ArchSM90, "fwd", VarBF16, 128), comb}, last: []string{QFwdName(ArchSM90, VarBF16, 128)}},
		{name: "sm90 auto all query", arch: ArchSM90, prefill: PrefillAuto, qdt: BF16, kvd: BF16, round: RoundBF16, device: "NVIDIA H200",
			choose: func(int, plan.TileVerdict) bool { return true }, whole: []string{QFwdName(ArchSM90, VarBF16, 128)}},
		{name: "sm90 auto all kv", arch: ArchSM90, prefill: PrefillAuto, qdt: BF16, kvd: BF16, round: RoundBF16, device: "NVIDIA H200",
			choose: func(int, plan.TileVerdict) bool { return false }, perWin: []string{TCName(ArchSM90, "fwd", VarBF16, 128), comb}},
		{name: "sm90 auto-kv2 both", arch: ArchSM90, prefill: PrefillAutoKV2, qdt: BF16, kvd: BF16, round: RoundBF16, device: "NVIDIA H200",
			choose: AlternateTiles, perWin: []string{KV2Name(VarBF16, 128)}, last: []string{QFwdName(ArchSM90, VarBF16, 128)}},
		{name: "sm90 auto-kv2 all kv", arch: ArchSM90, prefill: PrefillAutoKV2, qdt: BF16, kvd: BF16, round: RoundBF16, device: "NVIDIA H200",
			choose: func(int, plan.TileVerdict) bool { return false }, perWin: []string{KV2Name(VarBF16, 128)}},
		{name: "auto-kv2 fallback", arch: ArchSM90, prefill: PrefillAutoKV2, qdt: BF16, kvd: E4M3, round: RoundBF16, device: "NVIDIA H200",
			choose: AlternateTiles, perWin: []string{TCName(ArchSM90, "fwd", VarBF16FP8, 128), comb},
			last: []string{QFwdName(ArchSM90, VarBF16FP8, 128)}, fallback: KV2Name(VarBF16FP8, 128)},
		{name: "sm90 auto-kv2 fp8", arch: ArchSM90, prefill: PrefillAutoKV2, qdt: E4M3, kvd: E4M3, round: RoundE4M3, device: "NVIDIA H200",
			choose: AlternateTiles, perWin: []string{KV2Name(VarFP8, 128)}, last: []string{QFwdName(ArchSM90, VarFP8, 128)}},
		{name: "sm80 auto-kv2 (no kv2 kernel)", arch: ArchSM80, prefill: PrefillAutoKV2, qdt: BF16, kvd: BF16, round: RoundBF16,
			device: "NVIDIA A100-SXM4-80GB", choose: AlternateTiles, perWin: []string{TCName(ArchSM80, "fwd", VarBF16, 128), comb},
			last: []string{QFwdName(ArchSM80, VarBF16, 128)}},
		{name: "sm80 auto both", arch: ArchSM80, prefill: PrefillAuto, qdt: E4M3, kvd: E4M3, round: RoundE4M3, device: "NVIDIA A100-SXM4-80GB",
			choose: AlternateTiles, perWin: []string{TCName(ArchSM80, "fwd", VarFP8, 128), comb}, last: []string{QFwdName(ArchSM80, VarFP8, 128)}},
		{name: "auto unknown GPU", arch: ArchSM90, prefill: PrefillAuto, qdt: BF16, kvd: BF16, round: RoundBF16, device: "NVIDIA GeForce RTX 4090",
			perWin: []string{TCName(ArchSM90, "fwd", VarBF16, 128), comb}},
		{name: "auto portable path", arch: ArchSM90, path: PathPortable, prefill: PrefillAuto, qdt: BF16, kvd: BF16, round: RoundBF16,
			device: "NVIDIA H200", choose: AlternateTiles, perWin: []string{fwd, comb}},
	}
}

// prefillLaunchCase is a windowed sparse prefill (3 windows of 128 queries
// over 300, two sequences, 16 query heads per KV head, D 128) with the
// arguments the graph node would pass, at made-up device addresses.
type prefillLaunchCase struct {
	pc     *prefillCase
	fa     FwdArgs
	ca     CombineArgs
	window int
}

const prefillTestWindows = 3

func newPrefillLaunchCase(t *testing.T, r prefillRoute) *prefillLaunchCase {
	t.Helper()
	pc := &prefillCase{cuQ: []int32{0, 100, 300}, cuK: []int32{0, 500, 1200}, hkv: 1, qhpk: 16, d: 128, topK: 4, blk: 64,
		causal: true, qd: r.qdt, kvd: r.kvd, pd: BF16, round: r.round}
	genPrefill(t, pc, 1)
	c := &prefillLaunchCase{pc: pc, window: 128}
	c.fa = FwdArgs{Q: 0x1000_0000, K: 0x2000_0000, V: 0x3000_0000, CuSeqlensQ: 0x400, CuSeqlensK: 0x500, OPartial: 0x4000_0000,
		LSEPartial: 0x5000_0000, TotalQ: pc.totalQ, Hq: pc.hq, Hkv: pc.hkv, D: pc.d, BlkKV: pc.blk, TopK: pc.topK, NumBatch: 2,
		QDtype: r.qdt, KVDtype: r.kvd, PartialDtype: BF16, PVRound: r.round, Causal: true, KVRows: int(pc.cuK[2])}
	c.ca = CombineArgs{OPartial: c.fa.OPartial, LSEPartial: c.fa.LSEPartial, Out: 0x6000_0000, LSE: 0x7000_0000, TotalQ: pc.totalQ,
		Hq: pc.hq, Hkv: pc.hkv, D: pc.d, TopK: pc.topK, PartialDtype: BF16}
	return c
}

func (c *prefillLaunchCase) run(t *testing.T, k *Kernels) func() {
	return func() {
		if err := k.SparsePrefill(nil, &c.fa, &c.ca, c.pc.csr, c.pc.sched, c.pc.cuQ, c.window); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSparsePrefillRunAllocatesNothing: once a prefill's arguments have
// been seen, Kernels.SparsePrefill and Prepared.Launch allocate nothing
// (the plan/run contract's 0 allocations per run) on every launch route:
// the portable kernels (on the portable family and on PathPortable), the
// KV-major tensor-core forward + combine of sm_90a and SM100, the kv2
// kernel with its fused combine, the query-major kernels of sm_90a and
// sm_80, the auto path with both kinds of tiles (the KV-major windows,
// then the query-major kernel) or one kind only, and fallbacks to the
// portable kernels with their reasons recorded. The recording fake checks that the expected kernels ran in
// each of the 3 windows (one call for the query-major kernel). A new
// schedule of the same selection (the next run's plan values) allocates
// nothing either; another layer's K/V (a new key) costs allocations once,
// then none.
func TestSparsePrefillRunAllocatesNothing(t *testing.T) {
	for _, r := range prefillRoutes() {
		t.Run(r.name, func(t *testing.T) {
			var f FakeDriver
			k := FakeKernels(r.arch, &f)
			k.path, k.prefill, k.devName, k.chooser = r.path, r.prefill, r.device, r.choose
			c := newPrefillLaunchCase(t, r)
			layer2 := *c
			layer2.fa.K, layer2.fa.V = 0x2800_0000, 0x3800_0000
			want := r.whole
			for range prefillTestWindows * len(r.perWin) / max(len(r.perWin), 1) {
				want = append(want, r.perWin...)
			}
			want = append(want, r.last...)
			c.run(t, k)()
			if got := k.LastKernels(); !slices.Equal(got, want) {
				t.Fatalf("launched %v, want %v", got, want)
			}
			if r.fallback != "" && k.Fallbacks()[r.fallback] == "" {
				t.Errorf("the refusal of %s is not recorded", r.fallback)
			}
			launches, encoded := f.Launches, f.Encoded
			if n := allocs.Warm(20, c.run(t, k)); n != 0 {
				t.Errorf("SparsePrefill: %v allocations per run, want 0", n)
			}
			if f.Encoded != encoded {
				t.Errorf("%d tensor maps encoded in the warm runs, want 0 (made once per key)", f.Encoded-encoded)
			}
			if d := f.Launches - launches; d%len(want) != 0 || d < 21*len(want) {
				t.Errorf("%d launches in the warm runs, want a multiple of %d and at least %d", d, len(want), 21*len(want))
			}
			rebuildSchedule(t, c.pc) // the next run's plan values: new storage, same selection
			c.run(t, k)()
			if n := allocs.Warm(20, c.run(t, k)); n != 0 {
				t.Errorf("SparsePrefill after a new plan: %v allocations per run, want 0", n)
			}
			layer2.pc = c.pc
			layer2.run(t, k)() // a new key: its choice is made once
			for _, x := range []*prefillLaunchCase{c, &layer2} {
				if n := allocs.Warm(20, x.run(t, k)); n != 0 {
					t.Errorf("SparsePrefill of layer K %#x: %v allocations per run, want 0", x.fa.K, n)
				}
			}
			pl, err := k.PrepareSparsePrefill(nil, &c.fa, &c.ca, c.pc.csr, c.pc.sched, c.pc.cuQ, c.window)
			if err != nil {
				t.Fatal(err)
			}
			if got := pl.Kernels(); !slices.Equal(got, want) {
				t.Fatalf("prepared %v, want %v", got, want)
			}
			checkPreparedLaunch(t, &f, pl, len(want))
		})
	}
}

// checkPreparedLaunch checks that pl's warm launches allocate nothing and
// launch its kernels (perRun per launch) every time.
func checkPreparedLaunch(t *testing.T, f *FakeDriver, pl *Prepared, perRun int) {
	t.Helper()
	before := f.Launches
	launch := func() {
		if err := pl.Launch(nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := allocs.Warm(20, launch); n != 0 {
		t.Errorf("Prepared.Launch: %v allocations per run, want 0", n)
	}
	if d := f.Launches - before; d%perRun != 0 || d < 21*perRun {
		t.Errorf("Prepared.Launch made %d launches, want a multiple of %d and at least %d", d, perRun, 21*perRun)
	}
}
