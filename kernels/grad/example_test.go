package grad_test

import (
	"fmt"
	"math"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/grad"
	"github.com/sparseattn/msa/kernels/plan"
)

// One sequence of 2 queries and 4 keys in blocks of 2, one head, D = 2,
// scale 1, causal. Bottom-right alignment puts query 0 at position 2 and
// query 1 at position 3. Query 0 selects block 0 only, so it sees keys 0
// and 1 with scores (1, 0): LSE = ln(e+1). Query 1 selects both blocks and
// sees keys 0..3 with scores (0, 1, 1, 0): LSE = ln(2+2e). With the loss
// sum(O), dO = 1 and Delta = sum(O) of each row; every V row of block 0
// sums to 1 = Delta of query 0, so query 0 gets dQ = 0.
func Example() {
	q2k := []int32{ // [Hkv=1][total_q=2][topK=2]
		0, -1,
		1, 0,
	}
	cuQ, cuK := []int32{0, 2}, []int32{0, 4}
	csr, err := plan.BuildK2QCSR(nil, q2k, 1, 2, 2, cuQ, cuK, 2)
	if err != nil {
		panic(err)
	}
	p := &grad.Problem{
		TotalQ: 2, HQ: 1, Hkv: 1, D: 2, CuQ: cuQ, CuK: cuK, TotalK: 4,
		BlkKV: 2, TopK: 2, Causal: true, Scale: 1, CSR: csr,
	}
	q := []float32{1, 0, 0, 1}
	k := []float32{1, 0, 0, 1, 1, 1, 0, 0}
	v := []float32{1, 0, 0, 1, 2, 2, 3, 3}
	o, lse := make([]float32, 4), make([]float32, 2)

	pool := attn.NewPool(2)
	defer pool.Close()
	ws := grad.NewWorkspace(pool)
	if err := ws.Forward(p, q, k, v, o, lse); err != nil {
		panic(err)
	}
	fmt.Printf("O = %.4f, LSE = %.4f\n", o, lse)

	// Loss = sum(O): dO = 1 everywhere, LSE unused (dLSE = nil).
	dO := []float32{1, 1, 1, 1}
	dq, dk, dv := make([]float32, 4), make([]float32, 8), make([]float32, 8)
	if err := ws.Backward(p, q, k, v, o, lse, dO, nil, dq, dk, dv); err != nil {
		panic(err)
	}
	fmt.Printf("dQ = %.4f\ndK = %.4f\ndV = %.4f\n", dq, dk, dv)
	fmt.Printf("ln(e+1) = %.4f, ln(2+2e) = %.4f\n", math.Log(math.E+1), math.Log(2+2*math.E))
	// Output:
	// O = [0.7311 0.2689 1.2689 1.5000], LSE = [1.3133 2.0064]
	// dQ = [0.0000 0.0000 0.2121 -0.1966]
	// dK = [0.0000 -0.2379 0.0000 -0.6466 0.0000 0.4500 0.0000 0.4345]
	// dV = [0.8655 0.8655 0.6345 0.6345 0.3655 0.3655 0.1345 0.1345]
	// ln(e+1) = 1.3133, ln(2+2e) = 2.0064
}
