package check

import (
	"math"
	"testing"
)

// TestMatrixCPU generates every problem of the matrices (plans included)
// and runs the CPU path on a few: results are finite, deterministic,
// compare equal to themselves, and the matrices contain fully masked rows.
func TestMatrixCPU(t *testing.T) {
	masked := 0
	for i, c := range PrefillMatrix() {
		if err := c.Gen(uint64(i + 1)); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if i%5 != 0 {
			continue
		}
		a, b := c.CPU(2), c.CPU(1)
		if !Identical(a, b) {
			t.Errorf("%s: CPU path differs between 1 and 2 workers", c.Name)
		}
		d := c.Reference().CheckPair(a, b)
		if !d.OK() {
			t.Errorf("%s: self-compare %+v", c.Name, d)
		}
		masked += d.Masked
		if c.FLOP() <= 0 {
			t.Errorf("%s: no work", c.Name)
		}
	}
	if masked == 0 {
		t.Error("no fully masked prefill row in the sampled cases")
	}
	for i, c := range DecodeMatrix() {
		if err := c.Gen(uint64(i + 1)); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if i%4 != 1 {
			continue
		}
		r := c.CPU(2)
		for _, x := range r.O {
			if math.IsNaN(float64(x)) {
				t.Fatalf("%s: NaN", c.Name)
			}
		}
		if c.Bytes() <= 0 || c.FLOP() <= 0 {
			t.Errorf("%s: no traffic", c.Name)
		}
	}
	// A perturbed result fails the comparison, a -inf row with O != 0 too.
	c := PrefillMatrix()[0]
	if err := c.Gen(3); err != nil {
		t.Fatal(err)
	}
	want := c.CPU(1)
	got := Result{O: append([]float32(nil), want.O...), LSE: append([]float32(nil), want.LSE...)}
	got.O[len(got.O)/2] += 1
	for row, l := range want.LSE {
		if math.IsInf(float64(l), -1) {
			got.O[row*c.D] = 1e-3
			break
		}
	}
	if d := c.Reference().Check(got); d.OK() || d.BadMasked != 1 {
		t.Errorf("perturbed result passes: %+v", d)
	}
}

// TestTimingShapes: the local selection is the diagonal block plus up to
// topK-1 earlier blocks.
func TestTimingShapes(t *testing.T) {
	c := TimingPrefill("p", 1024, 1, 1)
	if err := c.GenTiming(1, Local, &Selections{}); err != nil {
		t.Fatal(err)
	}
	// query q sees min(16, q/128+1) blocks, the diagonal one up to q
	var want int64
	for q := 0; q < 1024; q++ {
		want += int64(q%128+1) + int64(min(BenchTopK, q/128+1)-1)*128
	}
	if got := c.PrefillPairs(); got != want {
		t.Errorf("pairs %d, want %d", got, want)
	}
}
