package op

import (
	"github.com/sparseattn/msa/kernels/lowp"
	"gorgonia.org/tensor"
)

// Node outputs kept across runs.
//
// A Gorgonia TapeMachine clears every register in Reset, which a serving
// loop calls before each run, so an op that allocates its value in Do
// allocates it on every run: for a 2K-token layer the casts and the
// attention output are 33 MB per run, each a fresh Go allocation that is
// zeroed (and, when the runtime has returned the memory to the OS,
// faulted in page by page) before the op writes it. The CPU ops with a
// large value (CastToBF16, CastFromBF16, SparseAttention's O and LSE)
// instead keep their output storage in the op and rewrite it on each run.
//
// Aliasing rule (documented on each such constructor): the value of such a
// node, and a value read from it with Value(), is valid until the node's
// next run, which overwrites it in place; copy it (tensor.Clone) to keep it
// longer. Within one run nothing else writes it before its last reader
// ran: only then may the machine hand its register to a later node, whose
// op may write its own value into the storage (UsePreallocDo); that value
// too is then valid until the next run. Storage is fully rewritten by each
// run (the eager Out arguments' contract, which these nodes use).
// Each Do wraps the storage in a new *tensor.Dense, so a machine that
// recycles the header of a value it unbinds (tensor.ReturnTensor) cannot
// detach the storage from the op. Two machines must not run one graph at
// the same time (Gorgonia's nodes hold one value each as well).

// ownedBuf is the storage of one output, grown to the largest size asked.
type ownedBuf[T any] struct{ data []T }

// get returns n elements of the storage (their values are the previous
// run's: the caller overwrites all of them).
func (b *ownedBuf[T]) get(n int) []T {
	if cap(b.data) < n {
		b.data = make([]T, n)
	}
	return b.data[:n]
}

// dense wraps n elements of the storage in a new tensor of the given shape.
func (b *ownedBuf[T]) dense(shape ...int) *tensor.Dense {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(b.get(n)))
}

// castBufs is a cast node's output storage: one of the two is used, by
// the direction of the cast.
type castBufs struct {
	bf16 ownedBuf[lowp.BFloat16]
	f32  ownedBuf[float32]
}
