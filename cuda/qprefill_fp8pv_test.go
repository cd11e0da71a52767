package cuda

import (
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/cuda/fatbin"
)

// TestParseFP8PV: the two modes and their names round-trip, "" is the
// default (widen), and any other value is an error naming the variable
// and the choices.
func TestParseFP8PV(t *testing.T) {
	for s, want := range map[string]FP8PV{"": FP8PVWiden, "widen": FP8PVWiden, "fp8": FP8PVFP8} {
		got, err := ParseFP8PV(s)
		if err != nil || got != want {
			t.Errorf("ParseFP8PV(%q) = %v, %v: want %v", s, got, err, want)
		}
		if s != "" && got.String() != s {
			t.Errorf("%v.String() = %q: want %q", got, got.String(), s)
		}
	}
	for _, bad := range []string{"FP8", "bf16", "new", " fp8", "widen,fp8"} {
		_, err := ParseFP8PV(bad)
		if err == nil || !strings.Contains(err.Error(), FP8PVEnv) || !strings.Contains(err.Error(), "want widen or fp8") {
			t.Errorf("ParseFP8PV(%q): error %v, want one naming %s and the choices", bad, err, FP8PVEnv)
		}
	}
}

// TestQFwdKernelFor: under fp8 exactly the sm90 fp8 kernels are replaced,
// by the fp8pv kernel of their head dim, which the launch table holds with
// the same grid (tiles per CTA) and threads; under widen nothing changes.
func TestQFwdKernelFor(t *testing.T) {
	for _, a := range []Arch{ArchSM80, ArchSM90} {
		for _, v := range []TCVariant{VarBF16, VarFP8, VarBF16FP8, VarNVFP4} {
			for _, d := range []int{64, 128, 256} {
				name := QFwdName(a, v, d)
				if got := qfwdKernelFor(name, FP8PVWiden); got != name {
					t.Errorf("widen: %s -> %s", name, got)
				}
				got := qfwdKernelFor(name, FP8PVFP8)
				if a != ArchSM90 || v != VarFP8 {
					if got != name {
						t.Errorf("fp8: %s -> %s, want unchanged", name, got)
					}
					continue
				}
				want := "msa_sm90_qfwd_fp8pv_d" + strings.TrimPrefix(name, "msa_sm90_qfwd_fp8_d")
				l, ok := fatbin.HopperAmpereLaunch[got]
				if got != want || !ok || l.Threads != fatbin.HopperAmpereLaunch[name].Threads ||
					fatbin.SM90QFwdTilesPerCTA[got] != fatbin.SM90QFwdTilesPerCTA[name] {
					t.Errorf("fp8: %s -> %s (%+v, %d tiles per CTA): want %s with the fp8 kernel's threads and grid", name, got, l, fatbin.SM90QFwdTilesPerCTA[got], want)
				}
			}
		}
	}
}
