//go:build !cuda

package main

import (
	"fmt"
	"os"
)

// runGPU refuses the GPU mode in a binary built without the cuda tag.
func runGPU(*config) int {
	fmt.Fprintln(os.Stderr, "bench: -device cuda: this binary is built without -tags cuda; build it with -tags cuda after kernels/cuda/tagged_build.sh's set-up (bench/README.md, GPU mode)")
	return 2
}
