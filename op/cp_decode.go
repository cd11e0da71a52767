package op

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/sparseattn/msa/kernels/comm"
	"github.com/sparseattn/msa/kernels/lowp"
	"gorgonia.org/tensor"
)

// CPDecodeWrapper is context-parallel paged decode: each sequence's K/V
// pages are spread over the ranks of a comm.Comm, every rank runs the
// decode of a DecodeWrapper over its own pages, and one all-gather of the
// partial (O, LSE) pairs, B*Hq*(2*D + 4) bytes per rank, lets every rank
// merge them (in rank order, MergeStatesFunc's arithmetic) into the result
// over the whole context. Plan once per step, RunInto per layer: RunInto
// allocates nothing in the steady state (the transport's own calls
// included for comm.NewLocal).
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
// this rank at its causal limit (cpDecodeRows). Sparse decode takes each
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
	send     []byte // this rank's LSE [rows*Hq] float32 then O [rows*Hq*D] bf16
	recv     []byte // every rank's send, in rank order
	o, lse   *tensor.Dense
	srcs     [][]lowp.BFloat16
	lses     [][]float32
	sc       mergeScratch
	planned  bool
}

// NewCPDecodeWrapper returns an unplanned context-parallel decode wrapper
// for pages of pageSize tokens on the group c.
func NewCPDecodeWrapper(pageSize int, c comm.Comm) (*CPDecodeWrapper, error) {
	if c == nil {
		return nil, argErr("NewCPDecodeWrapper", "comm", "a comm.Comm", "nil")
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
		digest = binary.LittleEndian.AppendUint64(nil, math.Float64bits(m.scale))
		for _, x := range []int{m.batch, m.seqlenQ, m.hq, m.hkv, m.d, m.pageSize, int(m.layout), m.blk, m.topK} {
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
	if m := w.w.m; m.seqlenQ > 1 {
		// Replan with one row per query token, each cut at its causal limit.
		rows, q2k, err := cpDecodeRows(w.c, m, args)
		if err != nil {
			return &CommError{fn, err}
		}
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
	w.rows, w.hq, w.d = m.batch*m.seqlenQ, m.hq, m.d
	nl, no := w.rows*w.hq*4, w.rows*w.hq*w.d*2
	if len(w.send) != nl+no {
		p := w.c.Size()
		w.send, w.recv = make([]byte, nl+no), make([]byte, p*(nl+no))
		w.lse = tensor.New(tensor.WithShape(w.rows, w.hq), tensor.WithBacking(viewAs[float32](w.send[:nl])))
		w.o = tensor.New(tensor.WithShape(w.rows, w.hq, w.d), tensor.WithBacking(viewAs[lowp.BFloat16](w.send[nl:])))
		w.srcs, w.lses = make([][]lowp.BFloat16, p), make([][]float32, p)
		for r := 0; r < p; r++ {
			seg := w.recv[r*(nl+no) : (r+1)*(nl+no)]
			w.lses[r], w.srcs[r] = viewAs[float32](seg[:nl]), viewAs[lowp.BFloat16](seg[nl:])
		}
	}
	w.sc.reserve(w.c.Size(), w.d)
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
// the merged result over every rank's pages into out (BFloat16 [B, Hq, D])
// and, when non-nil, lse (float32 [B, Hq]); every rank gets the same
// result. softmaxScale 0 means the planned scale. On an error the group is
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
		return argErr(fn, "wrapper", "a planned wrapper (call Plan before Run; the last Plan failed or none ran)", "unplanned")
	}
	if isFloat32(q) {
		return &NotImplementedError{fn, "float32 q, k, v in context-parallel decode (its merge is BFloat16; DecodeWrapper and DecodeAttentionFunc take float32)"}
	}
	c := &checker{fn: fn}
	outputArg(c, out, "out", BFloat16, w.rows, w.hq, w.d)
	if lse != nil {
		outputArg(c, lse, "lse", tensor.Float32, w.rows, w.hq)
	}
	checkDisjoint(c, []namedTensor{{"out", out}, {"lse", lse}}, []namedTensor{{"q", q}, {"k", k}, {"v", v}})
	if c.err != nil {
		return c.err
	}
	if err := w.w.RunInto(q, k, v, softmaxScale, w.o, w.lse); err != nil {
		return err
	}
	if err := w.c.AllGather(w.send, w.recv); err != nil {
		return &CommError{fn, err}
	}
	mergeInto(backing[lowp.BFloat16](out), backing[float32](lse), w.srcs, w.lses, w.d, &w.sc)
	return nil
}

// Close releases the decode wrapper's goroutines (not the Comm, which the
// caller owns).
func (w *CPDecodeWrapper) Close() { w.w.Close() }
