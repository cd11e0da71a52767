package blas

import (
	"math"
	"math/rand/v2"
	"testing"

	gblas "gonum.org/v1/gonum/blas"
	"gorgonia.org/tensor"
)

// The tolerance of an element: the FMA chain of k products and the
// beta*C start rounds at most k+1 times, and alpha*op(B) once per term,
// each a relative error of at most u = 2^-24 of a partial result bounded
// by S = sum_t |alpha a_t b_t| + |beta c|; so |got - exact| <= (k+2) u S
// (to first order). The float64 reference is exact to far below that.
// tolFactor doubles the bound for the second-order terms.
const tolFactor = 2

// refSgemm is the triple-loop reference in float64; it returns C and the
// per-element magnitude sums S.
func refSgemm(tA, tB gblas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) (want, mag []float64) {
	want, mag = make([]float64, m*n), make([]float64, m*n)
	for i := range m {
		for j := range n {
			s, sm := 0.0, 0.0
			for t := range k {
				ai, bi := i*lda+t, t*ldb+j
				if isTrans(tA) {
					ai = t*lda + i
				}
				if isTrans(tB) {
					bi = j*ldb + t
				}
				av, bv := a[ai], b[bi]
				p := float64(alpha) * float64(av) * float64(bv)
				s += p
				sm += math.Abs(p)
			}
			if beta != 0 {
				s += float64(beta) * float64(c[i*ldc+j])
				sm += math.Abs(float64(beta) * float64(c[i*ldc+j]))
			}
			want[i*n+j], mag[i*n+j] = s, sm
		}
	}
	return want, mag
}

func randSlice(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.Float64()*2 - 1)
	}
	return x
}

// checkSgemm runs one Sgemm through im and the reference and compares
// every element of C, and that C's padding (between n and ldc) is kept.
func checkSgemm(t *testing.T, im tensor.BLAS, r *rand.Rand, tA, tB gblas.Transpose, m, n, k, pad int, alpha, beta float32) {
	t.Helper()
	ar, ac := m, k
	if isTrans(tA) {
		ar, ac = k, m
	}
	br, bc := k, n
	if isTrans(tB) {
		br, bc = n, k
	}
	lda, ldb, ldc := ac+pad, bc+pad, n+pad
	a, b, c := randSlice(r, ar*lda), randSlice(r, br*ldb), randSlice(r, m*ldc)
	if beta == 0 {
		for i := range c {
			c[i] = float32(math.NaN()) // must be ignored
		}
	}
	c0 := append([]float32(nil), c...)
	want, mag := refSgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	im.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	for i := range m {
		for j := range ldc {
			got := c[i*ldc+j]
			if j >= n {
				if math.Float32bits(got) != math.Float32bits(c0[i*ldc+j]) {
					t.Fatalf("%c%c m%d n%d k%d pad%d: padding C[%d][%d] changed", tA, tB, m, n, k, pad, i, j)
				}
				continue
			}
			tol := tolFactor * float64(k+2) * 0x1p-24 * mag[i*n+j]
			if d := math.Abs(float64(got) - want[i*n+j]); !(d <= tol) {
				t.Fatalf("%c%c m%d n%d k%d pad%d alpha%g beta%g: C[%d][%d] = %g, want %g (tol %g)",
					tA, tB, m, n, k, pad, alpha, beta, i, j, got, want[i*n+j], tol)
			}
		}
	}
}

// TestSgemm covers every transpose pair, odd and tile-aligned sizes,
// padded leading dimensions and the alpha/beta special cases.
func TestSgemm(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	im := New()
	trans := []gblas.Transpose{gblas.NoTrans, gblas.Trans, gblas.ConjTrans}
	shapes := [][3]int{{1, 1, 1}, {3, 5, 7}, {64, 64, 64}, {65, 47, 33}, {17, 16, 40}, {100, 33, 129}, {8, 48, 200}, {16, 100, 300}, {130, 160, 31}, {257, 32, 64}}
	scal := [][2]float32{{1, 0}, {1, 1}, {0.5, -1.5}, {-2, 0}, {0, 0.25}}
	for _, sh := range shapes {
		for _, tA := range trans {
			for _, tB := range trans[:2] {
				for i, ab := range scal {
					checkSgemm(t, im, r, tA, tB, sh[0], sh[1], sh[2], i%3, ab[0], ab[1])
				}
			}
		}
	}
}

// TestSgemmWorkers checks that the result does not depend on the worker
// count: each element is one FMA chain whichever goroutine computes it.
func TestSgemmWorkers(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	m, n, k := 200, 96, 70
	a, b := randSlice(r, m*k), randSlice(r, k*n)
	var first []float32
	for _, w := range []int{1, 2, 3, 8} {
		c := make([]float32, m*n)
		(&Implementation{Workers: w}).Sgemm(gblas.NoTrans, gblas.NoTrans, m, n, k, 1, a, k, b, n, 0, c, n)
		if first == nil {
			first = c
			continue
		}
		for i := range c {
			if math.Float32bits(c[i]) != math.Float32bits(first[i]) {
				t.Fatalf("workers %d: C[%d] = %g, 1 worker gave %g", w, i, c[i], first[i])
			}
		}
	}
}

// TestSgemmBadInput checks that invalid arguments panic with Gonum's
// messages (the blas.Float32 contract).
func TestSgemmBadInput(t *testing.T) {
	a := make([]float32, 64*64)
	for _, tc := range []struct {
		name string
		call func()
		want string
	}{
		{"lda", func() { New().Sgemm(gblas.NoTrans, gblas.NoTrans, 64, 64, 64, 1, a, 63, a, 64, 0, a, 64) }, "blas: bad leading dimension of A"},
		{"short c", func() { New().Sgemm(gblas.NoTrans, gblas.NoTrans, 64, 64, 64, 1, a, 64, a, 64, 0, a[:100], 64) }, "blas: insufficient length of c"},
		{"trans", func() { New().Sgemm('x', gblas.NoTrans, 64, 64, 64, 1, a, 64, a, 64, 0, a, 64) }, "blas: illegal transpose"},
	} {
		func() {
			defer func() {
				if got := recover(); got != tc.want {
					t.Errorf("%s: panic %v, want %q", tc.name, got, tc.want)
				}
			}()
			tc.call()
		}()
	}
}

// The value and the pointer both are a tensor.BLAS with the tiled Sgemm.
var (
	_ tensor.BLAS = Implementation{}
	_ tensor.BLAS = New()
)
