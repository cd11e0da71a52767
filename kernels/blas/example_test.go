package blas_test

import (
	"fmt"

	"gonum.org/v1/gonum/blas/gonum"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/sparseattn/msa/kernels/blas"
)

// Example makes Gorgonia's matrix multiplications run on the SIMD GEMM
// tiles with one call, then multiplies a 64x64 matrix of ones by one of
// twos in a graph.
func Example() {
	G.Use(blas.New())
	defer G.Use(gonum.Implementation{}) // restore Gorgonia's default

	g := G.NewGraph()
	ones := tensor.New(tensor.WithShape(64, 64), tensor.WithBacking(tensor.Ones(tensor.Float32, 64*64).Data()))
	twos := tensor.New(tensor.WithShape(64, 64), tensor.WithBacking(make([]float32, 64*64)))
	for i := range twos.Data().([]float32) {
		twos.Data().([]float32)[i] = 2
	}
	x := G.NewMatrix(g, tensor.Float32, G.WithValue(ones), G.WithName("x"))
	w := G.NewMatrix(g, tensor.Float32, G.WithValue(twos), G.WithName("w"))
	y := G.Must(G.Mul(x, w))
	m := G.NewTapeMachine(g)
	defer m.Close()
	if err := m.RunAll(); err != nil {
		fmt.Println(err)
		return
	}
	out := y.Value().Data().([]float32)
	_, fast := tensor.WhichBLAS().(*blas.Implementation)
	fmt.Println(out[0], out[len(out)-1], fast)
	// Output: 128 128 true
}
