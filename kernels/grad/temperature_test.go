package grad

import (
	"math"
	"testing"

	"github.com/sparseattn/msa/kernels/attn"
)

// TestTemperatureLSE compares TemperatureLSE with a float64 logsumexp of
// s/T over the reference's visible keys, on the shape matrix, for 1 and 2
// workers (bit-identical), and checks that T = 1 gives the forward's LSE.
func TestTemperatureLSE(t *testing.T) {
	worst := 0.0
	for n, s := range matrixShapes() {
		if n%3 != 0 {
			continue
		}
		in := newInstance(t, s)
		p := in.p
		q, k := toF32(in.q), toF32(in.k)
		const temp = 0.7
		var got [2][]float32
		for w := 1; w <= 2; w++ {
			pool := attn.NewPool(w)
			ws := NewWorkspace(pool)
			got[w-1] = make([]float32, p.TotalQ*p.HQ)
			if err := ws.TemperatureLSE(p, q, k, 1/temp, got[w-1]); err != nil {
				t.Fatal(err)
			}
			pool.Close()
		}
		for i := range got[0] {
			if math.Float32bits(got[0][i]) != math.Float32bits(got[1][i]) {
				t.Fatalf("%v: 1 vs 2 workers differ at %d", s, i)
			}
		}
		d := p.D
		for gq := 0; gq < p.TotalQ; gq++ {
			for hq := 0; hq < p.HQ; hq++ {
				keys := in.refKeys(gq, hq)
				want := math.Inf(-1)
				if len(keys) > 0 {
					xs := make([]float64, len(keys))
					mx := math.Inf(-1)
					for j, r := range keys {
						var dot float64
						for c := 0; c < d; c++ {
							dot += in.q[(gq*p.HQ+hq)*d+c] * in.k[r*d+c]
						}
						xs[j] = dot * p.Scale / temp
						mx = max(mx, xs[j])
					}
					var sum float64
					for _, x := range xs {
						sum += math.Exp(x - mx)
					}
					want = mx + math.Log(sum)
				}
				g := float64(got[0][gq*p.HQ+hq])
				if math.IsInf(want, -1) != math.IsInf(g, -1) {
					t.Fatalf("%v: row (%d, %d) = %v, want %v", s, gq, hq, g, want)
				}
				if !math.IsInf(want, -1) {
					worst = max(worst, math.Abs(g-want))
				}
			}
		}
		if worst > 2e-5 {
			t.Fatalf("%v: temperature LSE error %.3g", s, worst)
		}
		// T = 1 is the LSE.
		o, lse := make([]float32, len(q)), make([]float32, p.TotalQ*p.HQ)
		ws := NewWorkspace(nil)
		if err := ws.Forward(p, q, k, toF32(in.v), o, lse); err != nil {
			t.Fatal(err)
		}
		one := make([]float32, len(lse))
		if err := ws.TemperatureLSE(p, q, k, 1, one); err != nil {
			t.Fatal(err)
		}
		for i := range one {
			if !(math.Abs(float64(one[i]-lse[i])) <= 2e-5) && !(math.IsInf(float64(one[i]), -1) && math.IsInf(float64(lse[i]), -1)) {
				t.Fatalf("%v: T = 1 row %d: %v vs LSE %v", s, i, one[i], lse[i])
			}
		}
	}
	t.Logf("worst temperature LSE error %.3g", worst)
	if err := NewWorkspace(nil).TemperatureLSE(newInstance(t, matrixShapes()[0]).p, nil, nil, 1, nil); err == nil {
		t.Fatal("no error for missing tensors")
	}
}
