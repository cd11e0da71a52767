package tile

import (
	"strings"
	"testing"
)

// knownTiers are the tiers CI wants to exercise, in order of preference.
var knownTiers = []string{"amxbf16", "avx512bf16", "avx512", "avx2", "generic"}

// TestCPUTiers reports, one "cpu-tier:" line each (go test -v), which tiers
// this CPU and build can run and which not and why, and the tier chosen
// automatically. .ci/run greps these lines to print what it exercised and to
// run the op tests under every supported tier. It also checks that Tiers()
// agrees with the per-tier feature checks.
func TestCPUTiers(t *testing.T) {
	var ok []string
	for _, tn := range knownTiers {
		m, built := tierMissing(tn)
		switch {
		case !built:
			t.Logf("cpu-tier: %s no (not built: purego or not amd64)", tn)
		case m != "":
			t.Logf("cpu-tier: %s no (CPU lacks %s)", tn, m)
		default:
			t.Logf("cpu-tier: %s yes", tn)
			ok = append(ok, tn)
		}
	}
	t.Logf("cpu-tier-default: %s", Tier())
	t.Logf("cpu-tier-bf16-inputs: %s", BF16InputTier())
	t.Logf("cpu-tier-supported: %s", strings.Join(ok, " "))
	if got := strings.Join(Tiers(), " "); got != strings.Join(ok, " ") {
		t.Errorf("Tiers() = %q, want %q from the feature checks", got, strings.Join(ok, " "))
	}
}

// TestVectorISA checks the vector ISA every tier this CPU and build can run
// reports (the emulated bf16 tier included), and that SetTier changes it.
func TestVectorISA(t *testing.T) {
	want := map[string]ISA{
		"generic": ISAPortable, "avx2": ISAAVX2, "avx512": ISAAVX512,
		"avx512bf16": ISAAVX512, "avx512bf16-emulated": ISAAVX512, "amxbf16": ISAAVX512,
	}
	old := TierSetting()
	defer func() {
		if err := SetTier(old); err != nil {
			t.Fatal(err)
		}
	}()
	ran := 0
	for _, tn := range append(knownTiers, "avx512bf16-emulated") {
		if SetTier(tn) != nil {
			continue // not on this CPU or build
		}
		ran++
		if got := VectorISA(); got != want[tn] {
			t.Errorf("tier %s: VectorISA() = %v, want %v", tn, got, want[tn])
		}
	}
	if ran == 0 {
		t.Fatal("no tier could be set, not even generic")
	}
	for isa, s := range map[ISA]string{ISAPortable: "portable", ISAAVX2: "avx2", ISAAVX512: "avx512"} {
		if isa.String() != s {
			t.Errorf("ISA(%d).String() = %q, want %q", isa, isa.String(), s)
		}
	}
}
