package lowp_test

import (
	"fmt"

	"github.com/sparseattn/msa/kernels/lowp"
)

func Example() {
	// Scalar conversions round to nearest, ties to even.
	fmt.Println(lowp.BF16(1.00390625).Float32()) // tie between 1 and 1+2^-7: even is 1
	fmt.Println(lowp.F16(65519).Float32(), lowp.F16(65520).Float32())
	fmt.Println(lowp.E4M3(500).Float32(), lowp.E4M3Sat(500).Float32())
	fmt.Println(lowp.E2M1Value(lowp.E2M1(2.6)), lowp.E2M1Value(lowp.E2M1(-100)))

	// Slice decoders.
	src := []lowp.Float8E4M3FN{lowp.E4M3(0.1), lowp.E4M3(-3), lowp.E4M3(448)}
	dst := make([]float32, len(src))
	lowp.DecodeE4M3(dst, src)
	fmt.Println(dst)

	// NVFP4: one row of 16 elements, global scale 1.
	x := []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, -6, -4, -3, -2, -1.5, -1, -0.5, 0.1}
	packed, scales, err := lowp.QuantizeNVFP4(x, 1, 16, 1)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(packed), len(scales), lowp.Float8E4M3FN(scales[lowp.Scale128x4Offset(0, 0, 1)]).Float32())
	row := make([]float32, 16)
	lowp.DequantizeNVFP4Row(row, packed, scales, 0, 16, 1)
	fmt.Println(row)
	// Output:
	// 1
	// 65504 +Inf
	// NaN 448
	// 3 -6
	// [0.1015625 -3 448]
	// 8 512 1
	// [0 0.5 1 1.5 2 3 4 6 -6 -4 -3 -2 -1.5 -1 -0.5 0]
}
