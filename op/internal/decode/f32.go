package decode

import (
	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/grad"
	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/op/internal/blocks"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// This file holds the float32 path of decode (DecodeAttentionFunc,
// DecodeWrapper.Run, the DecodeAttention node and CPDecodeWrapper): q, k
// and v stay float32 (no BF16 rounding) and the call runs on package
// grad's float32 forward, the kernels of the float32 prefill. Decode is
// that forward with one query sequence of seqlen_q rows per request,
// causal bottom-right alignment (query i of request b at position
// seqused_k[b] - seqlen_q + i) and the page table as paged K/V; dense
// decode lists every block of each request.
//
// The float32 forward addresses HND pages. With NHD pages the call first
// copies the pages its requests use (ceil(seqused_k[b] / page_size) of
// request b) into HND order and runs on those copies with a page table
// renumbered to them: one extra read and write of the K/V the decode
// reads anyway, instead of a second float32 kernel.

// denseBlk is the smallest key block of float32 dense decode.
const denseBlk = 128

// F32 holds what a float32 decode call derives from its metadata
// (the query and key prefix sums, dense decode's block lists, the k2q CSR,
// the renumbered NHD page table, the prepared float32 forward) and the
// buffers it runs with. A DecodeWrapper keeps one and prepares it once per
// plan, so that its Runs reuse everything and allocate nothing once warm;
// Prepare reuses the buffers whose capacity fits.
type F32 struct {
	cuQ, cuK []int32
	q2k      []int32 // dense decode's block lists [Hkv, total_q, topK]
	csr      *plan.CSR
	// NHD: src[i] is the page copied to HND page i, pt the page table
	// over the copies, KH and VH the copies.
	src, pt []int32
	KH, VH  []float32
	lse     []float32 // ScratchLSE
	pool    *attn.Pool
	// Workspace runs Prepared, the float32 forward call prepared from the
	// plan's metadata (its scale and number of pages are set per Run).
	Workspace *grad.Workspace
	Prepared  grad.Prepared
}

// Prepare derives the float32 forward's problem from validated decode
// metadata m; the call runs on pool.
func (f *F32) Prepare(fn string, m *Meta, pool *attn.Pool) error {
	totalQ := m.Batch * m.SeqlenQ
	f.cuQ, f.cuK = grow(f.cuQ, m.Batch+1), grow(f.cuK, m.Batch+1)
	f.cuQ[0], f.cuK[0] = 0, 0
	for b := 0; b < m.Batch; b++ {
		f.cuQ[b+1] = f.cuQ[b] + int32(m.SeqlenQ)
		f.cuK[b+1] = f.cuK[b] + m.SeqUsed[b]
	}
	q2k, topK, blk := m.Q2K, m.TopK, m.Blk
	if q2k == nil {
		// Dense decode: any block size gives the same result; blocks of at
		// least denseBlk keys keep the block lists short.
		blk = max(blk, denseBlk)
		topK = 1
		for _, s := range m.SeqUsed {
			topK = max(topK, validate.CeilDiv(int(s), blk))
		}
		f.q2k = grow(f.q2k, m.Hkv*totalQ*topK)
		blocks.All(f.q2k, f.cuQ, m.SeqUsed, m.Hkv, topK, blk, true)
		q2k = f.q2k
	}
	csr, err := plan.BuildK2QCSR(f.csr, q2k, m.Hkv, totalQ, topK, f.cuQ, f.cuK, blk)
	if err != nil {
		f.csr = nil // its contents are unspecified after an error
		return validate.WrapArg(fn, "q2k_indices", err)
	}
	f.csr = csr
	pt := m.PT
	if m.NHD {
		f.renumber(m)
		pt = f.pt
	}
	if f.Workspace == nil || f.pool != pool {
		f.Workspace, f.pool = grad.NewWorkspace(pool), pool
	}
	p := grad.Problem{TotalQ: totalQ, HQ: m.HQ, Hkv: m.Hkv, D: m.D, CuQ: f.cuQ, CuK: f.cuK,
		Paged: true, PageTable: pt, PTCols: m.Cols, PageSize: m.PageSize, SeqUsedK: m.SeqUsed,
		BlkKV: blk, TopK: topK, Causal: true, CSR: csr}
	if err := f.Prepared.Prepare(&p); err != nil {
		return &validate.ArgError{Func: fn, Arg: "page_table, seqused_k", Expected: "a consistent float32 decode plan", Got: err.Error()}
	}
	return nil
}

// renumber lists the pages m's requests use (NHD decode copies them) and
// builds the page table over the copies; the columns past a request's
// keys, which the forward never reads, point at copy 0.
func (f *F32) renumber(m *Meta) {
	f.src, f.pt = f.src[:0], grow(f.pt, len(m.PT))
	clear(f.pt)
	for b := 0; b < m.Batch; b++ {
		for c := range validate.CeilDiv(int(m.SeqUsed[b]), m.PageSize) {
			f.pt[b*m.Cols+c] = int32(len(f.src))
			f.src = append(f.src, m.PT[b*m.Cols+c])
		}
	}
	n := len(f.src) * m.Hkv * m.PageSize * m.D
	f.KH, f.VH = grow(f.KH, n), grow(f.VH, n)
}

// Run computes the prepared decode of q, k, v (float32, k and v in m's
// layout) with the given softmax scale into o ([B*seqlen_q, Hq, D]) and
// lse ([B*seqlen_q, Hq]).
func (f *F32) Run(fn string, m *Meta, qd, kd, vd *tensor.Dense, scale float64, o, lse []float32) error {
	k, v := validate.Backing[float32](kd), validate.Backing[float32](vd)
	numPages := kd.Shape()[0]
	if m.NHD {
		nhdToHND(f.KH, k, f.src, m.Hkv, m.PageSize, m.D)
		nhdToHND(f.VH, v, f.src, m.Hkv, m.PageSize, m.D)
		k, v, numPages = f.KH, f.VH, len(f.src)
	}
	f.Prepared.SetRun(scale, numPages)
	if err := f.Workspace.ForwardPrepared(&f.Prepared, validate.Backing[float32](qd), k, v, o, lse); err != nil {
		return &validate.ArgError{Func: fn, Arg: "q, k, v", Expected: "a consistent float32 decode call", Got: err.Error()}
	}
	return nil
}

// ScratchLSE returns a buffer of n LSE values kept between calls, for a
// caller that takes no LSE.
func (f *F32) ScratchLSE(n int) []float32 {
	f.lse = grow(f.lse, n)
	return f.lse
}

// nhdToHND copies the NHD pages src[i] of x ([num_pages, page_size, Hkv,
// D]) into page i of dst ([len(src), Hkv, page_size, D]).
func nhdToHND(dst, x []float32, src []int32, hkv, ps, d int) {
	for i, pg := range src {
		for h := range hkv {
			for t := range ps {
				copy(dst[((i*hkv+h)*ps+t)*d:][:d], x[((int(pg)*ps+t)*hkv+h)*d:][:d])
			}
		}
	}
}

// grow returns buf resliced to n when its capacity allows, else a new
// slice.
func grow[T any](buf []T, n int) []T {
	if cap(buf) >= n {
		return buf[:n]
	}
	return make([]T, n)
}

// F32Once runs validated float32 decode (m from Validate) once,
// with buffers of its own, into o and lse.
func F32Once(fn string, m *Meta, qd, kd, vd *tensor.Dense, scale float64, o, lse []float32) error {
	pool := attn.AcquirePool(m.Params.Workers)
	defer attn.ReleasePool(pool)
	var f F32
	if err := f.Prepare(fn, m, pool); err != nil {
		return err
	}
	return f.Run(fn, m, qd, kd, vd, scale, o, lse)
}
