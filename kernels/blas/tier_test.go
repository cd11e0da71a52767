package blas

import (
	"math"
	"math/rand/v2"
	"testing"

	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"github.com/sparseattn/msa/kernels/grad"
	"github.com/sparseattn/msa/kernels/tile"
)

// TestSgemmTiers runs the reference comparison on every tile tier this
// CPU supports (the AVX-512 and AVX2 tiles, and the Gonum fallback of the
// generic tier), restoring the active tier after.
func TestSgemmTiers(t *testing.T) {
	prev := tile.TierSetting()
	t.Cleanup(func() { _ = tile.SetTier(prev) })
	im := New()
	for _, tier := range tile.Tiers() {
		if err := tile.SetTier(tier); err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(7, 8))
		for _, sh := range [][3]int{{70, 88, 45}, {8, 48, 200}, {129, 33, 64}} {
			checkSgemm(t, im, r, gblas.NoTrans, gblas.NoTrans, sh[0], sh[1], sh[2], 1, 1, 0)
			checkSgemm(t, im, r, gblas.Trans, gblas.Trans, sh[0], sh[1], sh[2], 0, -0.5, 2)
		}
	}
}

// TestSgemmFallback checks that without GEMM tiles (the generic tier)
// Sgemm is Gonum's, bit for bit.
func TestSgemmFallback(t *testing.T) {
	prev := tile.TierSetting()
	t.Cleanup(func() { _ = tile.SetTier(prev) })
	if err := tile.SetTier("generic"); err != nil {
		t.Fatal(err)
	}
	if grad.GEMMAvailable() {
		t.Fatal("GEMMAvailable true on the generic tier")
	}
	r := rand.New(rand.NewPCG(9, 10))
	m, n, k := 64, 80, 96
	a, b := randSlice(r, m*k), randSlice(r, k*n)
	got, want := randSlice(r, m*n), make([]float32, m*n)
	copy(want, got)
	New().Sgemm(gblas.NoTrans, gblas.NoTrans, m, n, k, 1.5, a, k, b, n, 0.5, got, n)
	gonum.Implementation{}.Sgemm(gblas.NoTrans, gblas.NoTrans, m, n, k, 1.5, a, k, b, n, 0.5, want, n)
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("C[%d] = %g, Gonum %g", i, got[i], want[i])
		}
	}
}
