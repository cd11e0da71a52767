package tile

import (
	"math/rand"
	"strings"
	"sync"
	"testing"
)

// TestResolveTiers drives the tier choice (resolveTiers) with the feature
// sets of the CPUs the project supports and the MSA_CPU_TIER values: a
// pure function of the missing strings, so every row runs on every CPU
// and no kernel runs.
func TestResolveTiers(t *testing.T) {
	all := []string{"amxbf16", "avx512bf16", "avx512", "avx2", "avx512bf16-emulated", "generic"}
	const perm = "the kernel's AMX permission (arch_prctl: operation not permitted)"
	// CPUs: the missing feature of each tier ("" runs).
	cpus := map[string]map[string]string{
		"sapphire rapids": {},
		"amx refused":     {"amxbf16": perm},
		"zen 4":           {"amxbf16": "AMX-TILE"},
		"ice lake":        {"amxbf16": "AVX512_BF16", "avx512bf16": "AVX512_BF16"},
		"avx2 only": {"amxbf16": "AVX-512F", "avx512bf16": "AVX-512F", "avx512": "AVX-512F",
			"avx512bf16-emulated": "AVX-512F"},
		"cooper lake": {"amxbf16": "AMX-TILE"},
	}
	// The CPUs whose VDPBF16PS outruns their float32 multiply-adds
	// (tier.slowTwin): the others keep low-precision calls on avx512
	// unless AMX runs.
	amd := map[string]bool{"zen 4": true}
	for _, c := range []struct {
		cpu, env         string
		tiers            []string // nil: all
		float, bf16, err string   // err: a substring of the error
	}{
		{cpu: "sapphire rapids", env: AutoTier, float: "avx512", bf16: "amxbf16"},
		{cpu: "sapphire rapids", env: "avx512", float: "avx512", bf16: "avx512"},
		{cpu: "sapphire rapids", env: "avx2", float: "avx2", bf16: "avx2"},
		{cpu: "sapphire rapids", env: "generic", float: "generic", bf16: "generic"},
		{cpu: "sapphire rapids", env: "amxbf16", float: "amxbf16", bf16: "amxbf16"},
		{cpu: "sapphire rapids", env: "avx512bf16", float: "avx512bf16", bf16: "avx512bf16"},
		{cpu: "amx refused", env: AutoTier, float: "avx512", bf16: "avx512"},
		{cpu: "amx refused", env: "avx512bf16", float: "avx512bf16", bf16: "avx512bf16"},
		{cpu: "cooper lake", env: AutoTier, float: "avx512", bf16: "avx512"},
		{cpu: "cooper lake", env: "avx512bf16", float: "avx512bf16", bf16: "avx512bf16"},
		{cpu: "amx refused", env: "amxbf16", err: "AMX permission"},
		{cpu: "zen 4", env: AutoTier, float: "avx512", bf16: "avx512bf16"},
		{cpu: "zen 4", env: "avx512", float: "avx512", bf16: "avx512"},
		{cpu: "zen 4", env: "avx512bf16", float: "avx512bf16", bf16: "avx512bf16"},
		{cpu: "zen 4", env: "amxbf16", err: "AMX-TILE"},
		{cpu: "ice lake", env: AutoTier, float: "avx512", bf16: "avx512"},
		{cpu: "ice lake", env: "avx512bf16", err: "AVX512_BF16"},
		{cpu: "ice lake", env: "avx512bf16-emulated", float: "avx512bf16-emulated", bf16: "avx512bf16-emulated"},
		{cpu: "avx2 only", env: AutoTier, float: "avx2", bf16: "avx2"},
		{cpu: "avx2 only", env: "avx512", err: "AVX-512F"},
		{cpu: "zen 4", env: "nonsense", err: "unknown tier"},
		{cpu: "zen 4", env: AutoTier, tiers: []string{"generic"}, float: "generic", bf16: "generic"}, // purego
		{cpu: "zen 4", env: "avx512", tiers: []string{"generic"}, err: "unknown tier"},
	} {
		tiers := c.tiers
		if tiers == nil {
			tiers = all
		}
		missing := func(name string) string { return cpus[c.cpu][name] }
		slow := func(name string) bool { return name == "avx512bf16" && !amd[c.cpu] }
		f, b, err := resolveTiers(c.env, tiers, missing, slow)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s, %s=%s: error %v, want one naming %q", c.cpu, EnvTier, c.env, err, c.err)
			}
		case err != nil || f != c.float || b != c.bf16:
			t.Errorf("%s, %s=%s: (%q, %q, %v), want (%q, %q)", c.cpu, EnvTier, c.env, f, b, err, c.float, c.bf16)
		}
	}
}

// TestAutoTiers checks the automatic choice on this CPU against the table's
// function and its effect on the queries: SetTier(AutoTier) gives the
// resolved pair, a float32 tier named by SetTier has no bf16 twin, and
// TierSetting restores either.
func TestAutoTiers(t *testing.T) {
	restoreTiers(t)
	if err := SetTier(AutoTier); err != nil {
		t.Fatal(err)
	}
	f, b, err := resolveTiers(AutoTier, tierNames(), missingOf, slowTwinOf)
	if err != nil || Tier() != f || BF16InputTier() != b {
		t.Fatalf("auto: Tier %s, BF16InputTier %s; resolveTiers gives %s, %s (%v)", Tier(), BF16InputTier(), f, b, err)
	}
	if BF16InputProducts() != isBF16Tier(b) || BF16Products() {
		t.Errorf("auto: BF16InputProducts %v for %s, BF16Products %v", BF16InputProducts(), b, BF16Products())
	}
	want := AutoTier
	if f == b {
		want = f
	}
	if TierSetting() != want {
		t.Errorf("auto: TierSetting %q, want %q", TierSetting(), want)
	}
	if err := SetTier(f); err != nil {
		t.Fatal(err)
	}
	if BF16InputTier() != f || BF16InputProducts() || TierSetting() != f {
		t.Errorf("SetTier(%s): BF16InputTier %s, BF16InputProducts %v, TierSetting %s", f, BF16InputTier(), BF16InputProducts(), TierSetting())
	}
	if err := SetTier(want); err != nil || BF16InputTier() != b {
		t.Errorf("SetTier(TierSetting %q): %v, BF16InputTier %s, want %s", want, err, BF16InputTier(), b)
	}
}

// withTwin makes the active tier avx512 with a bf16 twin for the rest of
// the (sub)test: the automatic choice where the CPU has a bf16 tier and
// emulated is false, else the emulated one (AVX-512F only), so that a CPU
// without AVX512_BF16 tests the per-object choice too; it skips CPUs
// without AVX-512. It returns the twin's name.
func withTwin(t *testing.T, emulated bool) string {
	t.Helper()
	useTier(t, "avx512")
	if err := SetTier(AutoTier); err != nil {
		t.Fatal(err)
	}
	if Tier() != "avx512" {
		t.Skipf("the automatic float32 tier is %s, not avx512", Tier())
	}
	if emulated || !BF16InputProducts() {
		twin = findTier("avx512bf16-emulated")
	}
	return twin.name
}

// forcedRun returns p's results with the process's tiers set to name
// (SetTier) for the run: every block and accumulator on that tier.
func forcedRun(t *testing.T, name string, p *problem) result {
	t.Helper()
	a, b := active, twin
	defer func() { active, twin = a, b }()
	if err := SetTier(name); err != nil {
		t.Fatal(err)
	}
	return p.run()
}

// runAs runs p with a block and an accumulator that ask for bf16 products
// or not (SetBF16Products).
func (p *problem) runAs(bf16 bool) result {
	a, b := NewAcc(p.m+2, p.d), NewBlock(p.d)
	a.SetBF16Products(bf16)
	b.SetBF16Products(bf16)
	a.Reset(p.m, p.scale, p.round, p.invT)
	for r := 0; r < p.m; r++ {
		copy(a.Q(r), p.q[r*p.d:(r+1)*p.d])
	}
	return p.accumulate(b, a)
}

// TestTwinConcurrent: with a bf16 twin, accumulations that ask for bf16
// products and accumulations that do not run at the same time in
// different goroutines, and each gets bit for bit the result of its own
// tier forced for the whole process (SetTier): nothing global changes per
// accumulation. The two results differ, so a twin ignored (bf16 asked,
// float32 run) or taken where not asked fails.
func TestTwinConcurrent(t *testing.T) {
	for _, emulated := range []bool{false, true} {
		t.Run(map[bool]string{false: "auto", true: "emulated"}[emulated], func(t *testing.T) {
			testTwinConcurrent(t, withTwin(t, emulated))
		})
	}
}

func testTwinConcurrent(t *testing.T, tn string) {
	rng := rand.New(rand.NewSource(11))
	p := newProblem(rng, 64, BlockN, 40, 3, RoundNone, true, 1).bf16Inputs()
	p.round = RoundNone
	wantBF, want32 := forcedRun(t, tn, p), forcedRun(t, "avx512", p)
	if _, same := sameResult(wantBF, want32); same {
		t.Fatal("the twin and the float32 tier give the same bits: the test cannot tell them apart")
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(bf16 bool) {
			defer wg.Done()
			want := want32
			if bf16 {
				want = wantBF
			}
			for i := 0; i < 20; i++ {
				if msg, ok := sameResult(p.runAs(bf16), want); !ok {
					errs <- msg
					return
				}
			}
		}(g%2 == 0)
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Errorf("concurrent accumulations: %s", msg)
	}
}

// TestTwinLayoutGuard: an accumulation refuses a block loaded in the other
// layout (bf16 pairs against float32 rows), in both directions.
func TestTwinLayoutGuard(t *testing.T) {
	withTwin(t, false)
	for _, bf16 := range []bool{false, true} {
		a, b := NewAcc(4, 64), NewBlock(64)
		a.SetBF16Products(bf16)
		b.SetBF16Products(!bf16)
		a.Reset(4, 1, RoundNone, 0)
		b.Load(8, make([]float32, 8*64), make([]float32, 8*64))
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), "another layout") {
					t.Errorf("acc bf16 %v, block bf16 %v: recover() = %v, want the layout panic", bf16, !bf16, r)
				}
			}()
			a.Update(b, []int32{8, 8, 8, 8})
		}()
	}
}

// TestTwinLanes: a Lanes asking for bf16 products takes the twin's lane
// kernels (VDPBF16PS on avx512bf16, AMX tiles on amxbf16) while the active
// tier is avx512, and computes their bits, concurrently with one that
// does not ask (decode's float32 lane kernels); without a bf16 twin
// (SetTier("avx512")) it keeps the float32 kernels.
func TestTwinLanes(t *testing.T) {
	tn := withTwin(t, false)
	want := map[string]lanesKern{"avx512bf16": lanesBF16, "amxbf16": lanesAMX}[tn]
	if want == lanesGeneric {
		t.Skipf("twin %s has no bf16 lane kernels", tn)
	}
	rng := rand.New(rand.NewSource(12))
	p := newProblem(rng, 64, BlockN, 16, 3, RoundNone, false, 1).bf16Inputs()
	p.round = RoundNone
	lanesAs := func(bf16 bool) (result, lanesKern) {
		l := NewLanes(p.d)
		l.SetBF16Products(bf16)
		return p.runLanes(l), l.kern
	}
	forced := func(name string) result {
		a, b := active, twin
		defer func() { active, twin = a, b }()
		if err := SetTier(name); err != nil {
			t.Fatal(err)
		}
		r, _ := lanesAs(true)
		return r
	}
	wantBF, want32 := forced(tn), forced("avx512")
	var wg sync.WaitGroup
	var got [2]result
	var kern [2]lanesKern
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], kern[i] = lanesAs(i == 1)
		}()
	}
	wg.Wait()
	if kern[0] != lanesAVX512 || kern[1] != want {
		t.Fatalf("kernel sets %v (float32) and %v (bf16 asked), want %v and %v", kern[0], kern[1], lanesAVX512, want)
	}
	if msg, ok := sameResult(got[0], want32); !ok {
		t.Errorf("float32 lanes: %s", msg)
	}
	if msg, ok := sameResult(got[1], wantBF); !ok {
		t.Errorf("bf16 lanes: %s", msg)
	}
	if _, same := sameResult(wantBF, want32); same {
		t.Error("the twin's lanes and the float32 lanes give the same bits: the test cannot tell them apart")
	}
}
