package grad

import (
	"math"
	"strings"
	"testing"
)

// TestErrors checks that inconsistent problems and tensors are rejected
// with an error naming the argument, never a panic, and that nothing is
// written.
func TestErrors(t *testing.T) {
	base := shape{seqQ: []int{5, 3}, seqK: []int{20, 12}, hq: 4, hkv: 2, d: 16, topK: 2, blk: 8, paged: true, pageSize: 8, seed: 21}
	cases := []struct {
		name, want string
		edit       func(in *instance, t *tensors)
	}{
		{"nil CSR", "CSR is nil", func(in *instance, _ *tensors) { in.p.CSR = nil }},
		{"heads", "head_q", func(in *instance, _ *tensors) { in.p.HQ = 3 }},
		{"scale", "softmax_scale", func(in *instance, _ *tensors) { in.p.Scale = math.NaN() }},
		{"csr heads", "KV heads", func(in *instance, _ *tensors) { in.p.Hkv = 1; in.p.HQ = 2 }},
		{"cu_seqlens_q", "cu_seqlens_q", func(in *instance, _ *tensors) { in.p.CuQ = in.p.CuQ[:2] }},
		{"csr entry", "k2q_q_indices", func(in *instance, _ *tensors) { in.p.CSR.QIdx[0] = 99 }},
		{"page", "page_table[1, 0]", func(in *instance, _ *tensors) { in.p.PageTable[in.p.PTCols] = int32(in.p.NumPages) }},
		{"seqused", "seqused_k[0]", func(in *instance, _ *tensors) { in.p.SeqUsedK[0] = 1000 }},
		{"page table shape", "page_table has", func(in *instance, _ *tensors) { in.p.PTCols++ }},
		{"q length", "q has", func(_ *instance, x *tensors) { x.q = x.q[1:] }},
		{"k length", "k has", func(_ *instance, x *tensors) { x.k = x.k[1:] }},
		{"dLSE length", "dLSE has", func(_ *instance, x *tensors) { x.dLSE = x.dLSE[1:] }},
		{"dV length", "dV has", func(_ *instance, x *tensors) { x.dv = nil }},
		{"dense seqused", "seqused_k is only accepted", func(in *instance, _ *tensors) { in.p.Paged = false }},
	}
	for _, c := range cases {
		in := newInstance(t, base)
		x := newTensors(in)
		c.edit(in, x)
		ws := NewWorkspace(nil)
		err := ws.Backward(in.p, x.q, x.k, x.v, x.o, x.lse, x.dO, x.dLSE, x.dq, x.dk, x.dv)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "grad: ") {
			t.Errorf("%s: Backward error %v, want one containing %q", c.name, err, c.want)
		}
		for _, g := range x.dq {
			if g != -1 {
				t.Fatalf("%s: Backward wrote dQ before failing", c.name)
			}
		}
		if c.name != "dLSE length" && c.name != "dV length" { // Forward has no such argument
			if err := ws.Forward(in.p, x.q, x.k, x.v, x.o, x.lse); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: Forward error %v, want one containing %q", c.name, err, c.want)
			}
		}
	}
	if err := NewWorkspace(nil).Forward(nil, nil, nil, nil, nil, nil); err == nil {
		t.Error("Forward(nil problem) returned no error")
	}
}

// tensors are float32 arguments of a call.
type tensors struct{ q, k, v, o, lse, dO, dLSE, dq, dk, dv []float32 }

func newTensors(in *instance) *tensors {
	p := in.p
	x := &tensors{q: toF32(in.q), k: toF32(in.k), v: toF32(in.v), dO: toF32(in.dO), dLSE: toF32(in.dLSE)}
	x.o = make([]float32, len(x.q))
	x.lse = make([]float32, p.TotalQ*p.HQ)
	x.dq = make([]float32, len(x.q))
	for i := range x.dq {
		x.dq[i] = -1
	}
	x.dk, x.dv = make([]float32, len(x.k)), make([]float32, len(x.v))
	return x
}
