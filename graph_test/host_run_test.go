//go:build !cuda

package graphtest

import (
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestHostRunMatchesTapeMachine: runOnHost, the CPU graph of the GPU graph
// test, gives a TapeMachine's values bit for bit on the block the GPU test
// builds, and refuses the block planned for the CUDA path (its decode
// schedule runs only there).
func TestHostRunMatchesTapeMachine(t *testing.T) {
	in := newCBInputs(1)
	b := buildCUDABlock(t, in, 0)
	hv, err := runOnHost(b.g)
	must(t, err)
	m := G.NewTapeMachine(b.g)
	defer m.Close()
	must(t, m.RunAll())
	for _, n := range []*G.Node{b.out, b.lse, b.dout, b.dlse, b.dout32} {
		sameBits(t, n.Name(), hv[n].(*tensor.Dense), n.Value().(*tensor.Dense))
	}
	_, err = runOnHost(buildCUDABlock(t, in, 132).g)
	if err == nil || !strings.Contains(err.Error(), "planned for the cuda path") {
		t.Fatalf("the CUDA-planned block on the host: %v", err)
	}
}
