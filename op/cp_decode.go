package op

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/sparseattn/msa/kernels/comm"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/decode"
	"github.com/sparseattn/msa/op/internal/merge"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// CPDecodeWrapper is context-parallel paged decode: each sequence's K/V
// pages are spread over the ranks of a comm.Comm, every rank runs the
// decode of a DecodeWrapper over its own pages, and one all-gather of the
// partial (O, LSE) pairs, B*Hq*(2*D + 4) + 4 bytes per rank (B*Hq*(4*D
// + 4) + 4 with float32 q, k, v), lets every rank
// merge them (in rank order, MergeStatesFunc's arithmetic) into the result
// over the whole context. Plan once per step, RunInto per layer: with
// low-precision q, k, v RunInto allocates nothing in the steady state (the
// transport's own calls included for comm.NewLocal); with float32 q, k, v
// it allocates what DecodeWrapper.RunInto does.
//
// Each rank plans with its own page table and seqused_k: the number of
// tokens of each sequence it holds (0 when it holds none: the row's
// page-table entries must still be valid pages; its partial is then
// masked). With seqlen_q = 1 the split is free: the query sits at the end
// of the context and sees every key. With seqlen_q > 1 (speculative or
// chunked decode) query i of a request sits at position L - seqlen_q + i
// and sees the keys up to it, so the ranks must hold each sequence's
// tokens in rank order (rank 0 the first, the highest rank the last);
// Plan then gathers every rank's seqused_k and cuts each query's keys on
// this rank at its causal limit (decode.CPRows). Sparse decode takes each
// rank's q2k_indices over the blocks of its own tokens.
//
// Plan checks collectively that every rank planned the same B, Hq, Hkv, D,
// page size, layout, block size, softmax scale and topK (comm.Agree): a
// disagreement, or a rank whose plan failed, gives an error on every rank.
// An error in RunInto aborts the group (comm.Comm.Abort), so no rank waits
// on a rank that has stopped. Like DecodeWrapper it is not safe for
// concurrent use.
type CPDecodeWrapper struct {
	w        *DecodeWrapper
	c        comm.Comm
	rows, hq int
	d        int
	// send is this rank's partial: a 4-byte tag (the O element size, so
	// that ranks running different dtypes are an error, not a misread),
	// the LSE [rows*Hq] float32, then O [rows*Hq*D], BFloat16 or float32;
	// it is sized for float32 and a BFloat16 run sends its prefix. recv
	// holds every rank's send in rank order.
	send, recv []byte
	bf16       cpPartials[lowp.BFloat16]
	f32        cpPartials[float32]
	sc         merge.Scratch
	planned    bool
}

// cpPartials are the views of one output dtype T into a CPDecodeWrapper's
// send and recv buffers: this rank's o and lse, every rank's srcs and
// lses, and seg, the bytes one rank sends.
type cpPartials[T merge.Elem] struct {
	seg    int
	o, lse *tensor.Dense
	srcs   [][]T
	lses   [][]float32
}

// cpTagBytes is the size of the tag that leads each rank's partial.
const cpTagBytes = 4

// view points p at send and recv for partials of rows*hq rows of d
// elements of T.
func (p *cpPartials[T]) view(send, recv []byte, ranks, rows, hq, d int) {
	var z T
	nl := rows * hq * 4
	p.seg = cpTagBytes + nl + rows*hq*d*int(unsafe.Sizeof(z))
	p.lse = tensor.New(tensor.WithShape(rows, hq), tensor.WithBacking(viewAs[float32](send[cpTagBytes:][:nl])))
	p.o = tensor.New(tensor.WithShape(rows, hq, d), tensor.WithBacking(viewAs[T](send[cpTagBytes+nl:p.seg])))
	p.srcs, p.lses = make([][]T, ranks), make([][]float32, ranks)
	for r := range ranks {
		seg := recv[r*p.seg : (r+1)*p.seg]
		p.lses[r], p.srcs[r] = viewAs[float32](seg[cpTagBytes:][:nl]), viewAs[T](seg[cpTagBytes+nl:])
	}
}

// exchange runs this rank's decode into p's send views, all-gathers the
// partials and merges them into out and lse (nil: not written).
func (p *cpPartials[T]) exchange(w *CPDecodeWrapper, fn string, q, k, v tensor.Tensor, softmaxScale float64, out, lse *tensor.Dense) error {
	if err := w.w.RunInto(q, k, v, softmaxScale, p.o, p.lse); err != nil {
		return err
	}
	var z T
	tag := uint32(unsafe.Sizeof(z))
	binary.LittleEndian.PutUint32(w.send, tag)
	if err := w.c.AllGather(w.send[:p.seg], w.recv[:w.c.Size()*p.seg]); err != nil {
		return &CommError{fn, err}
	}
	for r := range w.c.Size() {
		if got := binary.LittleEndian.Uint32(w.recv[r*p.seg:]); got != tag {
			return validate.ArgErr(fn, "q, k, v", fmt.Sprintf("the dtype class of every rank (this rank's outputs have %d-byte elements)", tag),
				fmt.Sprintf("rank %d's partial tagged %d", r, got))
		}
	}
	var l []float32
	if lse != nil {
		l = validate.Backing[float32](lse)
	}
	merge.Into(validate.Backing[T](out), l, p.srcs, p.lses, w.d, &w.sc)
	return nil
}

// NewCPDecodeWrapper returns an unplanned context-parallel decode wrapper
// for pages of pageSize tokens on the group c.
func NewCPDecodeWrapper(pageSize int, c comm.Comm) (*CPDecodeWrapper, error) {
	if c == nil {
		return nil, validate.ArgErr("NewCPDecodeWrapper", "comm", "a comm.Comm", "nil")
	}
	w, err := NewDecodeWrapper(pageSize)
	if err != nil {
		return nil, err
	}
	return &CPDecodeWrapper{w: w, c: c}, nil
}

// Plan plans this rank's decode over its pages (DecodeWrapper.Plan) and
// checks collectively that all ranks planned the same shapes. Every rank
// must call it, also when its own arguments are bad: the others then get
// a *comm.MismatchError instead of waiting.
func (w *CPDecodeWrapper) Plan(args PlanArgs, q2kIndices tensor.Tensor) error {
	const fn = "CPDecodeWrapper.Plan"
	w.planned = false // a failed plan leaves the wrapper unplanned on every rank
	err := w.w.Plan(args, q2kIndices)
	digest := []byte(fmt.Sprintf("plan failed on rank %d", w.c.Rank()))
	if err == nil {
		m := w.w.m
		digest = binary.LittleEndian.AppendUint64(nil, math.Float64bits(m.Scale))
		for _, x := range []int{m.Batch, m.SeqlenQ, m.HQ, m.Hkv, m.D, m.PageSize, int(args.KVLayout), m.Blk, m.TopK} {
			digest = binary.LittleEndian.AppendUint64(digest, uint64(x))
		}
	}
	aerr := comm.Agree(w.c, "the decode plan (B, seqlen_q, Hq, Hkv, D, page size, layout, blk_kv, softmax scale, topK)", digest)
	switch {
	case err != nil:
		return err
	case aerr != nil:
		return &CommError{fn, aerr}
	}
	if m := w.w.m; m.SeqlenQ > 1 {
		// Replan with one row per query token, each cut at its causal limit.
		pt, su, q2k, err := decode.CPRows(w.c, m)
		if err != nil {
			return &CommError{fn, err}
		}
		rows := args
		rows.PageTable, rows.SeqUsedK, rows.SeqlenQ = pt, su, 1
		var rowsQ2K tensor.Tensor
		if q2k != nil {
			rowsQ2K = q2k
		}
		err = w.w.Plan(rows, rowsQ2K)
		digest := []byte("row plan ok")
		if err != nil {
			digest = []byte(fmt.Sprintf("row plan failed on rank %d", w.c.Rank()))
		}
		aerr := comm.Agree(w.c, "the per-token decode plan", digest)
		switch {
		case err != nil:
			return err
		case aerr != nil:
			return &CommError{fn, aerr}
		}
	}
	m := w.w.m
	w.rows, w.hq, w.d = m.Batch*m.SeqlenQ, m.HQ, m.D
	if n := cpTagBytes + w.rows*w.hq*(4+4*w.d); len(w.send) != n || w.f32.o == nil || !w.f32.o.Shape().Eq(tensor.Shape{w.rows, w.hq, w.d}) {
		p := w.c.Size()
		w.send, w.recv = make([]byte, n), make([]byte, p*n)
		w.bf16.view(w.send, w.recv, p, w.rows, w.hq, w.d)
		w.f32.view(w.send, w.recv, p, w.rows, w.hq, w.d)
	}
	w.sc.Reserve(w.c.Size(), w.d)
	w.planned = true
	return nil
}

// CommError is the error of a context-parallel call whose collective
// failed or whose ranks disagree on metadata: Err is the transport's
// error (a *comm.Error) or a *comm.MismatchError, the same on every rank.
type CommError struct {
	Func string // the entry point, e.g. "CPDecodeWrapper.Plan"
	Err  error  // the cause
}

// Error formats "Func: cause".
func (e *CommError) Error() string { return e.Func + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *CommError) Unwrap() error { return e.Err }

// viewAs views b (aligned for T) as a []T.
func viewAs[T any](b []byte) []T {
	var z T
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(z)))
}

// RunInto computes this rank's partial decode of q [B, Hq, D] against its
// k, v pages (DecodeWrapper.RunInto), all-gathers the partials and writes
// the merged result over every rank's pages into out (BFloat16 [B, Hq, D];
// float32 with float32 q, k, v, which every rank must then run) and, when
// non-nil, lse (float32 [B, Hq]); every rank gets the same result. softmaxScale 0 means the planned scale. On an error the group is
// aborted.
func (w *CPDecodeWrapper) RunInto(q, k, v tensor.Tensor, softmaxScale float64, out, lse *tensor.Dense) error {
	const fn = "CPDecodeWrapper.Run"
	err := w.run(fn, q, k, v, softmaxScale, out, lse)
	if err != nil {
		w.c.Abort(err)
	}
	return err
}

func (w *CPDecodeWrapper) run(fn string, q, k, v tensor.Tensor, softmaxScale float64, out, lse *tensor.Dense) error {
	if !w.planned {
		return validate.ArgErr(fn, "wrapper", "a planned wrapper (call Plan before Run; the last Plan failed or none ran)", "unplanned")
	}
	c := &validate.Checker{Fn: fn}
	f32 := isFloat32(q)
	outDtype := BFloat16
	if f32 {
		outDtype = tensor.Float32
	}
	validate.OutputArg(c, out, "out", outDtype, w.rows, w.hq, w.d)
	if lse != nil {
		validate.OutputArg(c, lse, "lse", tensor.Float32, w.rows, w.hq)
	}
	checkDisjoint(c, []namedTensor{{"out", out}, {"lse", lse}}, []namedTensor{{"q", q}, {"k", k}, {"v", v}})
	if c.Err != nil {
		return c.Err
	}
	if f32 {
		return w.f32.exchange(w, fn, q, k, v, softmaxScale, out, lse)
	}
	return w.bf16.exchange(w, fn, q, k, v, softmaxScale, out, lse)
}

// Close releases the decode wrapper's goroutines (not the Comm, which the
// caller owns).
func (w *CPDecodeWrapper) Close() { w.w.Close() }
