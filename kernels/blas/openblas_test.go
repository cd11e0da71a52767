//go:build openblas && cgo

package blas

import (
	"math/rand/v2"
	"testing"

	gblas "gonum.org/v1/gonum/blas"
)

// OpenBLAS's Sgemm through the binding meets the same reference and
// tolerance as the tiles (checkSgemm: the bound holds for any summation
// order) on every transpose pair, odd sizes and the alpha/beta cases.
func TestOpenBLASSgemm(t *testing.T) {
	ob, err := OpenBLAS()
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(15, 16))
	trans := []gblas.Transpose{gblas.NoTrans, gblas.Trans}
	for _, sh := range [][3]int{{3, 5, 7}, {65, 47, 33}, {130, 160, 31}} {
		for _, tA := range trans {
			for _, tB := range trans {
				checkSgemm(t, ob, r, tA, tB, sh[0], sh[1], sh[2], 1, 1, 0)
				checkSgemm(t, ob, r, tA, tB, sh[0], sh[1], sh[2], 0, -0.5, 2)
			}
		}
	}
}
