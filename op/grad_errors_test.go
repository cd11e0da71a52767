package op

import (
	"errors"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestGradErrorThroughDecode: G.Grad through a DecodeAttention node
// returns Gorgonia's SymDiffError, whose wrapped error (our
// *ForwardOnlyError) is unexported, so errors.As could not find it.
// GradError recovers it from the node the SymDiffError names; it leaves
// other errors as MachineError does.
func TestGradErrorThroughDecode(t *testing.T) {
	s := misuseSpec()
	pr := buildDecode(s)
	g := G.NewGraph()
	in := func(name string, x *tensor.Dense) *G.Node { return G.NodeFromAny(g, x, G.WithName(name)) }
	pt, su := in("pt", pr.pt), in("su", pr.su)
	sched, err := DecodeSchedule(pt, su, Heads(s.hq, s.hkv), PageSize(s.pageSize), SeqlenQ(s.seqlenQ), Workers(2))
	if err != nil {
		t.Fatal(err)
	}
	q := in("q", pr.q)
	out, err := DecodeAttention(q, in("k", pr.k), in("v", pr.v), pt, su, sched, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := CastFromBF16(out)
	if err != nil {
		t.Fatal(err)
	}
	_, err = G.Grad(G.Must(G.Sum(f)), q)
	if err == nil {
		t.Fatal("G.Grad through DecodeAttention succeeded")
	}
	var fe *ForwardOnlyError
	if !errors.As(GradError(err), &fe) || !strings.Contains(fe.Op, "DecodeAttention") {
		t.Fatalf("GradError(%v) = %v: want the *ForwardOnlyError of DecodeAttention", err, GradError(err))
	}
	plain := errors.New("other")
	if GradError(plain) != plain || GradError(nil) != nil {
		t.Fatal("GradError changed an error that holds none of this package's")
	}
}
