package graphprof_test

import (
	"fmt"

	"github.com/sparseattn/msa/bench/graphprof"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Profile a small graph of Gorgonia's own ops: y = relu(x . w) + x
// (Gorgonia builds relu from a comparison and a product).
func Example() {
	g := G.NewGraph()
	x := G.NewMatrix(g, tensor.Float32, G.WithShape(64, 64), G.WithName("x"), G.WithInit(G.RangedFrom(0)))
	w := G.NewMatrix(g, tensor.Float32, G.WithShape(64, 64), G.WithName("w"), G.WithInit(G.Ones()))
	xw := G.Must(G.Mul(x, w))
	y := G.Must(G.Add(G.Must(G.Rectify(xw)), x))
	_ = y

	p, err := graphprof.Attach(g) // after the graph is complete
	if err != nil {
		panic(err)
	}
	m := G.NewTapeMachine(g) // after Attach
	defer m.Close()
	for i := 0; i < 10; i++ {
		if err := p.Run(m); err != nil {
			panic(err)
		}
		m.Reset()
	}
	r := p.Report()
	fmt.Println("runs:", r.Runs)
	for _, k := range r.Kinds {
		fmt.Println(k.Kind, k.Nodes, k.Calls)
	}
	// The times vary from run to run: print them with r.WriteTable(os.Stdout).

	// Unordered output:
	// runs: 10
	// A × B 1 10
	// >= 1 10
	// ⊙ 1 10
	// + 1 10
}
