package tile

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestLog2Sum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	check := func(x float32) {
		got, want := log2Sum(x), math.Log2(float64(x))
		if math.Abs(got-want) > 1e-12 {
			t.Fatalf("log2Sum(%g) = %.17g, want %.17g", x, got, want)
		}
	}
	for _, x := range []float32{1, math.Nextafter32(1, 2), 1.4142135, 1.4142137, 2, 3, 127.99, 128, 1e30, math.MaxFloat32} {
		check(x)
	}
	for i := 0; i < 1e6; i++ {
		check(1 + float32(rng.ExpFloat64()*float64(rng.IntN(40)+1)))
	}
}

// TestLog2Sums compares log2Sums under every tier this CPU has with
// log2Sum, bit for bit, on softmax-sum-like values, special values (the
// kernels must not fault on them; their results are unspecified) and
// lengths that leave every tail length.
func TestLog2Sums(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 3))
	for _, tn := range []string{"generic", "avx2", "avx512", "avx512bf16"} {
		t.Run(tn, func(t *testing.T) {
			if m, ok := tierMissing(tn); !ok || m != "" {
				t.Skipf("tier %s: CPU lacks %s", tn, m)
			}
			useTier(t, tn)
			for n := 0; n < 70; n++ {
				src := make([]float32, n)
				for i := range src {
					switch rng.IntN(6) {
					case 0:
						src[i] = []float32{1, math.Nextafter32(1, 2), 1.4142135, 1.4142137, 2, math.MaxFloat32}[rng.IntN(6)]
					case 1:
						src[i] = float32(rng.Float64()*127) + 1
					default:
						src[i] = 1 + float32(rng.ExpFloat64()*float64(rng.IntN(40)+1))
					}
				}
				dst := make([]float64, n)
				log2Sums(dst, src)
				for i, x := range src {
					if want := log2Sum(x); math.Float64bits(dst[i]) != math.Float64bits(want) {
						t.Fatalf("n=%d: log2Sums[%d] (x = %g) = %.17g, want %.17g", n, i, x, dst[i], want)
					}
				}
			}
			// Values outside log2Sum's domain (empty rows) must not fault.
			odd := []float32{0, -1, float32(math.Inf(1)), float32(math.NaN()), 1e-40, -0, 0.5, 3}
			log2Sums(make([]float64, len(odd)), odd)
		})
	}
}
