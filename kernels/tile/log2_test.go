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
