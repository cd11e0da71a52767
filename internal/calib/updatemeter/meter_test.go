package updatemeter

import (
	"testing"
	"time"

	"github.com/sparseattn/msa/internal/calib"
	"github.com/sparseattn/msa/kernels/tile"
)

// useTier makes tier name active for the test and restores the previous
// one after it.
func useTier(t *testing.T, name string) {
	t.Helper()
	prev := tile.TierSetting()
	if err := tile.SetTier(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tile.SetTier(prev) })
}

// TestMeter checks the in-cache update meters (prefill's Acc tile and
// decode's tile) on every tier this CPU has: a positive rate no higher than
// the tier's multiply-add peak allows (with a margin for the peak's own
// noise), the operands laid out again for the kernels of the tier that is
// active when it runs (and, for prefill, of its bf16 twin, also under the
// automatic choice), and the argument checks.
func TestMeter(t *testing.T) {
	pre, err := New(128, 128, false)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := New(16, 128, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range append(tile.Tiers(), tile.AutoTier) {
		t.Run(tn, func(t *testing.T) {
			useTier(t, tn)
			for _, m := range []*Meter{pre, dec} {
				// Decode's lane kernels multiply in FP32 on the bf16 tiers
				// too, except for amxbf16's AMX path (head dimensions that
				// are a multiple of 32, 128 among them), so their bound is
				// the FP32 loop of the same width: VDPBF16PS issues at half
				// that rate on Intel cores (twice it on AMD Zen 4), so the
				// bf16 loop would be too low a bound there and too loose a
				// one on AMD. The emulated bf16 tier has no loop of its own.
				// Prefill's meter runs on the bf16 twin (BF16InputTier:
				// the tier itself where SetTier named one, the best bf16
				// tier of the CPU under the automatic choice).
				pt := tile.Tier()
				if !m.decode {
					pt = tile.BF16InputTier()
				}
				if pt == "avx512bf16-emulated" || m.decode && tile.LanesSIMD(m.d) && tile.BF16Products() && pt != "amxbf16" {
					pt = "avx512"
				}
				pk := calib.PeakGFLOPS(tile.PeakLoop(pt), 20*time.Millisecond)
				r := m.Sustained(20 * time.Millisecond)
				if m.tier != tiers() {
					t.Fatalf("decode %v: laid out for %q, active tier and twin %q", m.decode, m.tier, tiers())
				}
				if lanes := m.decode && tile.LanesSIMD(m.d); (m.lanes != nil) != lanes {
					t.Fatalf("decode %v: lane kernels %v, want %v", m.decode, m.lanes != nil, lanes)
				}
				if !(r > 0) || r > 1.5*pk {
					t.Fatalf("decode %v: rate %.2f GFLOP/s, want in (0, 1.5 x %s peak %.2f]", m.decode, r, pt, pk)
				}
			}
		})
	}
	ms := []*Meter{pre, dec}
	if r := calib.SumOnThreads(len(ms), func(i int) float64 { return ms[i].Sustained(10 * time.Millisecond) }); !(r > 0) {
		t.Fatalf("two meters at once: %v GFLOP/s", r)
	}
	for _, c := range []struct {
		rows, d int
		decode  bool
	}{{0, 128, false}, {1025, 128, false}, {17, 128, true}, {16, 0, true}, {128, -1, false}, {128, 1025, false}} {
		if _, err := New(c.rows, c.d, c.decode); err == nil {
			t.Errorf("New(%d, %d, %v): no error", c.rows, c.d, c.decode)
		}
	}
}
