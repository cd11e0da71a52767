package op

import (
	"sync"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// castWork is a cast node's conversion: the operands of the run in
// progress and the chunk function that the worker goroutines call. The
// goroutines are a pool's (attn.AcquirePool), started once and reused,
// and the chunk function is made once per node, so that a warm cast of
// any size allocates nothing at any GOMAXPROCS (goroutines started per
// call, each with its closure, would allocate on every run).
type castWork struct {
	mu     sync.Mutex // one conversion at a time
	chunk  func(worker int)
	encode bool // float32 -> BFloat16, else BFloat16 -> float32
	bf     []lowp.BFloat16
	f32    []float32
	n, k   int // elements, chunks
}

// run converts chunk i of k contiguous chunks, as lowp.EncodeBF16Workers
// splits them; each element is converted on its own, so the result is
// lowp.EncodeBF16's (DecodeBF16's) bit for bit.
func (w *castWork) run(i int) {
	lo, hi := i*w.n/w.k, (i+1)*w.n/w.k
	if w.encode {
		lowp.EncodeBF16(w.bf[lo:hi], w.f32[lo:hi])
	} else {
		lowp.DecodeBF16(w.f32[lo:hi], w.bf[lo:hi])
	}
}

// convert writes x (the checked input, dtype op.from) converted to op.to
// into out, of x's size, on up to lowp.SplitWorkers(n, 0) goroutines.
func (op *castOp) convert(out, x *tensor.Dense) {
	w := &op.work
	w.mu.Lock()
	defer w.mu.Unlock()
	w.encode = op.to == BFloat16
	if w.encode {
		w.bf, w.f32 = validate.Backing[lowp.BFloat16](out), validate.Backing[float32](x)
	} else {
		w.f32, w.bf = validate.Backing[float32](out), validate.Backing[lowp.BFloat16](x)
	}
	w.n = min(len(w.bf), len(w.f32))
	w.k = lowp.SplitWorkers(w.n, 0)
	defer func() { w.bf, w.f32 = nil, nil }() // the node keeps no reference to the tensors
	if w.k == 1 {
		w.run(0)
		return
	}
	if w.chunk == nil {
		w.chunk = w.run
	}
	pool := attn.AcquirePool(w.k)
	defer attn.ReleasePool(pool)
	pool.RunN(w.k, w.chunk)
}
