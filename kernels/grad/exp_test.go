package grad

import (
	"math"
	"testing"
)

// TestExp32 checks exp32 against math.Exp: within 2 ulp over the normal
// range, gradual underflow, and the special values.
func TestExp32(t *testing.T) {
	worst := 0.0
	for x := float32(-104); x <= 88.7; x += 0.00173 {
		got := float64(exp32(x))
		want := math.Exp(float64(x))
		ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1))) - float32(want))
		if want < 0x1p-126 {
			ulp = 0x1p-149
		}
		e := math.Abs(got-want) / ulp
		worst = max(worst, e)
		if e > 2 {
			t.Fatalf("exp32(%v) = %v, want %v (%.2f ulp)", x, got, want, e)
		}
	}
	t.Logf("worst error %.2f ulp", worst)
	ninf, inf := float32(math.Inf(-1)), float32(math.Inf(1))
	if exp32(ninf) != 0 || exp32(-200) != 0 || exp32(0) != 1 || exp32(100) != inf || exp32(inf) != inf {
		t.Error("exp32 special values")
	}
	if x := exp32(float32(math.NaN())); x == x {
		t.Error("exp32(NaN) is not NaN")
	}
}
