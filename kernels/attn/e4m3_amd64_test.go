//go:build amd64 && !purego

package attn

import (
	"math"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
)

// TestDecodeE4M3x32AVX2 covers the AVX2 kernel without a NaN step, whose
// own result checkDecodeE4M3 cannot see (its every-pattern data holds NaN,
// so there the float16 kernel redoes every group): every non-NaN pattern,
// shifted across the 32- and 16-groups and the tail, bit for bit against
// lowp, subnormals and signed zeros included; then a single NaN of either
// sign placed at the start, the end of the first 32-group or the middle of
// an otherwise NaN-free run, which must come out NaN with its sign while
// every other value stays exact. The same for decodeE4M3Fold (its own
// 32-group kernel, and its fallback for a group that holds a NaN), whose
// values must be exactly lowp's over e4m3Fold.
func TestDecodeE4M3x32AVX2(t *testing.T) {
	useTier(t, "avx2")
	if vecLevel() != vecAVX2 {
		t.Skip("no AVX2 epilogue kernels on this CPU/build")
	}
	var finite []lowp.Float8E4M3FN
	for b := 0; b < 256; b++ {
		if x := lowp.Float8E4M3FN(b); !math.IsNaN(float64(x.Float32())) {
			finite = append(finite, x)
		}
	}
	check := func(name string, e []lowp.Float8E4M3FN, fold bool) {
		t.Helper()
		g := make([]float32, len(e))
		div := float32(1)
		if fold {
			name += ", folded"
			div = e4m3Fold
			decodeE4M3Fold(g, e, vecAVX2)
		} else {
			decodeE4M3(g, e, vecAVX2)
		}
		for i, x := range e {
			w := x.Float32() / div
			if math.IsNaN(float64(w)) {
				if !math.IsNaN(float64(g[i])) || math.Signbit(float64(g[i])) != math.Signbit(float64(w)) {
					t.Fatalf("%s: decodeE4M3(%#02x) = %g, want NaN with sign %v", name, uint8(x), g[i], math.Signbit(float64(w)))
				}
				continue
			}
			if math.Float32bits(g[i]) != math.Float32bits(w) {
				t.Fatalf("%s: decodeE4M3(%#02x) = %g (%#08x), want %g", name, uint8(x), g[i], math.Float32bits(g[i]), w)
			}
		}
	}
	for _, fold := range []bool{false, true} {
		for _, off := range []int{0, 5, 19} {
			e := make([]lowp.Float8E4M3FN, 4*len(finite)+16+off)
			for i := range e {
				e[i] = finite[(i+off)%len(finite)]
			}
			check("no NaN", e, fold)
			for _, at := range []int{0, 31, len(e) / 2} {
				for _, nan := range []lowp.Float8E4M3FN{0x7f, 0xff} {
					f := append([]lowp.Float8E4M3FN(nil), e...)
					f[at] = nan
					check("one NaN", f, fold)
				}
			}
		}
	}
}
