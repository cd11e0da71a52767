package op

import (
	"errors"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestMachineErrorFindsArgError: a run-time ArgError from inside a
// TapeMachine and a LispMachine is found by errors.As through MachineError
// (and not without it, which is why MachineError exists).
func TestMachineErrorFindsArgError(t *testing.T) {
	for _, lisp := range []bool{false, true} {
		g := G.NewGraph()
		in := func(name string, v *tensor.Dense) *G.Node {
			n := G.NewTensor(g, v.Dtype(), v.Dims(), G.WithShape(v.Shape()...), G.WithName(name))
			if err := G.Let(n, v); err != nil {
				t.Fatal(err)
			}
			return n
		}
		cn := in("cache", tensor.New(tensor.WithShape(3, 1, 2, 1), tensor.WithBacking(make([]lowp.BFloat16, 6))))
		nn := in("new", tensor.New(tensor.WithShape(2, 1, 1), tensor.WithBacking(make([]lowp.BFloat16, 2))))
		pn := in("pt", tensor.New(tensor.WithShape(1, 2), tensor.WithBacking([]int32{2, 0})))
		un := in("used", tensor.New(tensor.WithShape(1), tensor.WithBacking([]int32{1}))) // < seqlen_q = 2
		if _, err := WritePagedKV(cn, nn, pn, un, SeqlenQ(2)); err != nil {
			t.Fatal(err)
		}
		var m G.VM = G.NewTapeMachine(g)
		if lisp {
			m = G.NewLispMachine(g, G.ExecuteFwdOnly())
		}
		err := m.RunAll()
		m.Close()
		var ae *ArgError
		if err == nil || !errors.As(MachineError(err), &ae) || ae.Func != "WritePagedKV" || ae.Arg != "seqused_k[0]" {
			t.Fatalf("lisp=%v: MachineError(%v) = %v, want the ArgError of WritePagedKV on seqused_k[0]", lisp, err, MachineError(err))
		}
		if !strings.Contains(err.Error(), ae.Error()) {
			t.Errorf("lisp=%v: the machine's message %q does not contain ours %q", lisp, err, ae)
		}
	}
	if MachineError(nil) != nil {
		t.Error("MachineError(nil) != nil")
	}
	plain := errors.New("x")
	if MachineError(plain) != plain {
		t.Error("MachineError changed an unrelated error")
	}
}
