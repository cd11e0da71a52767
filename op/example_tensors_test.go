package op_test

import (
	"fmt"
	"math"

	"github.com/sparseattn/msa/op"
	"gorgonia.org/tensor"
)

// From float32 data to the op and back with one import: a query of zeros
// scores every key equally, so the output is the mean of the visible values
// and the LSE is ln(number of keys).
func ExampleNewBF16() {
	const keys, d = 4, 64
	q, _ := op.NewBF16(make([]float32, 1*1*d), 1, 1, d) // [total_q, Hq, D]
	k, _ := op.NewBF16(make([]float32, keys*1*d), keys, 1, d)
	vals := make([]float32, keys*d)
	for t := 0; t < keys; t++ {
		for e := 0; e < d; e++ {
			vals[t*d+e] = float32(t + 1) // key t's value row is t+1 everywhere
		}
	}
	v, _ := op.NewBF16(vals, keys, 1, d)
	cuQ := tensor.New(tensor.WithShape(2), tensor.WithBacking([]int32{0, 1}))
	cuK := tensor.New(tensor.WithShape(2), tensor.WithBacking([]int32{0, keys}))
	q2k := tensor.New(tensor.WithShape(1, 1, 1), tensor.WithBacking([]int32{0})) // block 0
	rowPtr, qIdx, err := op.K2QCSRFunc(q2k, cuQ, cuK, 128)
	if err != nil {
		panic(err)
	}
	res, err := op.SparseAttentionFunc(q, k, v, rowPtr, qIdx, 1, op.SparseArgs{
		CuSeqlensQ: cuQ, CuSeqlensK: cuK,
	})
	if err != nil {
		panic(err)
	}
	out, _ := op.Float32s(res.Out)
	lse, _ := op.Float32s(res.LSE)
	fmt.Printf("O[0] = %.2f, O[63] = %.2f (mean of 1..4)\n", out[0], out[d-1])
	fmt.Printf("LSE = %.4f, ln(4) = %.4f\n", lse[0], math.Log(keys))
	// Output:
	// O[0] = 2.50, O[63] = 2.50 (mean of 1..4)
	// LSE = 1.3863, ln(4) = 1.3863
}

// Filling a paged cache eagerly: a prompt of 3 tokens for request 0 and 1
// token for request 1, then one decode token each. Pages hold 2 tokens;
// request 0 owns pages 2 and 0, request 1 owns page 1.
func ExampleWritePagedKVFunc() {
	const hkv, ps, d = 1, 2, 2
	cache, _ := op.NewBF16(make([]float32, 3*hkv*ps*d), 3, hkv, ps, d)
	pageTable := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]int32{2, 0, 1, -1}))
	i32 := func(v ...int32) *tensor.Dense { return tensor.New(tensor.WithShape(len(v)), tensor.WithBacking(v)) }

	prompt, _ := op.NewBF16([]float32{1, 1, 2, 2, 3, 3, 7, 7}, 4, hkv, d) // rows: r0 t0..t2, r1 t0
	if err := op.WritePagedKVFunc(cache, prompt, pageTable, i32(0, 3, 4), i32(3, 1), op.HND); err != nil {
		panic(err)
	}
	step, _ := op.NewBF16([]float32{4, 4, 8, 8}, 2, hkv, d) // r0 t3, r1 t1
	if err := op.WritePagedKVFunc(cache, step, pageTable, i32(0, 1, 2), i32(4, 2), op.HND); err != nil {
		panic(err)
	}
	c, _ := op.Float32s(cache)
	for page := 0; page < 3; page++ {
		fmt.Printf("page %d: %v\n", page, c[page*ps*d:(page+1)*ps*d])
	}
	// Output:
	// page 0: [3 3 4 4]
	// page 1: [7 7 8 8]
	// page 2: [1 1 2 2]
}
