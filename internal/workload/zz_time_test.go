package workload

import (
	"fmt"
	"testing"
	"time"

	"gorgonia.org/tensor"
)

func TestZZTime(t *testing.T) {
	for _, T := range []int{8192, 32768, 131072} {
		t0 := time.Now()
		qd := CorrelatedBF16(T, 16*128, Seed(T))
		kd := CorrelatedBF16(T, 128, Seed(T)+1)
		t1 := time.Now()
		q := tensor.New(tensor.WithShape(T, 16, 128), tensor.WithBacking(qd))
		k := tensor.New(tensor.WithShape(T, 1, 128), tensor.WithBacking(kd))
		cu := func() *tensor.Dense { return tensor.New(tensor.WithShape(2), tensor.WithBacking([]int32{0, int32(T)})) }
		q2k, err := SelectBlocks(q, k, cu(), cu(), 16, 128, 2)
		if err != nil {
			t.Fatal(err)
		}
		t2 := time.Now()
		u, _ := MeanTileUnion(q2k, []int32{0, int32(T)}, 1, 16, 4)
		t3 := time.Now()
		fmt.Printf("T %d: rows %.3f s, select %.3f s, union %.3f s (%.2f blocks/tile)\n", T, t1.Sub(t0).Seconds(), t2.Sub(t1).Seconds(), t3.Sub(t2).Seconds(), u)
	}
}
