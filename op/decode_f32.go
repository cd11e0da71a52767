package op

import (
	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/grad"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/plan"
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

// denseDecodeBlk is the smallest key block of float32 dense decode.
const denseDecodeBlk = 128

// f32Decode holds what a float32 decode call derives from its metadata
// (the query and key prefix sums, dense decode's block lists, the k2q CSR,
// the renumbered NHD page table) and the buffers it runs with. A
// DecodeWrapper keeps one and prepares it once per plan, so that its Runs
// reuse everything; prepare reuses the buffers whose capacity fits.
type f32Decode struct {
	cuQ, cuK []int32
	q2k      []int32 // dense decode's block lists [Hkv, total_q, topK]
	csr      *plan.CSR
	// NHD: src[i] is the page copied to HND page i, pt the page table
	// over the copies, kh and vh the copies.
	src, pt []int32
	kh, vh  []float32
	pool    *attn.Pool
	ws      *grad.Workspace
	p       grad.Problem
}

// prepare derives the float32 forward's problem from validated decode
// metadata m; the call runs on pool.
func (f *f32Decode) prepare(fn string, m *decodeMeta, pool *attn.Pool) error {
	totalQ := m.batch * m.seqlenQ
	f.cuQ, f.cuK = grow(f.cuQ, m.batch+1), grow(f.cuK, m.batch+1)
	f.cuQ[0], f.cuK[0] = 0, 0
	for b := 0; b < m.batch; b++ {
		f.cuQ[b+1] = f.cuQ[b] + int32(m.seqlenQ)
		f.cuK[b+1] = f.cuK[b] + m.seqused[b]
	}
	q2k, topK, blk := m.q2k, m.topK, m.blk
	if q2k == nil {
		// Dense decode: any block size gives the same result; blocks of at
		// least denseDecodeBlk keys keep the block lists short.
		blk = max(blk, denseDecodeBlk)
		topK = 1
		for _, s := range m.seqused {
			topK = max(topK, validate.CeilDiv(int(s), blk))
		}
		f.q2k = grow(f.q2k, m.hkv*totalQ*topK)
		allBlocks(f.q2k, f.cuQ, m.seqused, m.hkv, topK, blk, true)
		q2k = f.q2k
	}
	csr, err := plan.BuildK2QCSR(f.csr, q2k, m.hkv, totalQ, topK, f.cuQ, f.cuK, blk)
	if err != nil {
		f.csr = nil // its contents are unspecified after an error
		return validate.WrapArg(fn, "q2k_indices", err)
	}
	f.csr = csr
	pt := m.pt
	if m.layout == NHD {
		f.renumber(m)
		pt = f.pt
	}
	if f.ws == nil || f.pool != pool {
		f.ws, f.pool = grad.NewWorkspace(pool), pool
	}
	f.p = grad.Problem{TotalQ: totalQ, HQ: m.hq, Hkv: m.hkv, D: m.d, CuQ: f.cuQ, CuK: f.cuK,
		Paged: true, PageTable: pt, PTCols: m.cols, PageSize: m.pageSize, SeqUsedK: m.seqused,
		BlkKV: blk, TopK: topK, Causal: true, CSR: csr}
	return nil
}

// renumber lists the pages m's requests use (NHD decode copies them) and
// builds the page table over the copies; the columns past a request's
// keys, which the forward never reads, point at copy 0.
func (f *f32Decode) renumber(m *decodeMeta) {
	f.src, f.pt = f.src[:0], grow(f.pt, len(m.pt))
	clear(f.pt)
	for b := 0; b < m.batch; b++ {
		for c := range validate.CeilDiv(int(m.seqused[b]), m.pageSize) {
			f.pt[b*m.cols+c] = int32(len(f.src))
			f.src = append(f.src, m.pt[b*m.cols+c])
		}
	}
	n := len(f.src) * m.hkv * m.pageSize * m.d
	f.kh, f.vh = grow(f.kh, n), grow(f.vh, n)
}

// run computes the prepared decode of q, k, v (float32, k and v in m's
// layout) with the given softmax scale into o ([B*seqlen_q, Hq, D]) and
// lse ([B*seqlen_q, Hq]).
func (f *f32Decode) run(fn string, m *decodeMeta, qd, kd, vd *tensor.Dense, scale float64, o, lse []float32) error {
	k, v := validate.Backing[float32](kd), validate.Backing[float32](vd)
	f.p.NumPages, f.p.Scale = kd.Shape()[0], scale
	if m.layout == NHD {
		nhdToHND(f.kh, k, f.src, m.hkv, m.pageSize, m.d)
		nhdToHND(f.vh, v, f.src, m.hkv, m.pageSize, m.d)
		k, v, f.p.NumPages = f.kh, f.vh, len(f.src)
	}
	if err := f.ws.Forward(&f.p, validate.Backing[float32](qd), k, v, o, lse); err != nil {
		return &ArgError{Func: fn, Arg: "q, k, v", Expected: "a consistent float32 decode call", Got: err.Error()}
	}
	return nil
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

// decodeF32 runs validated float32 decode (m from validateDecodeMeta) once,
// with buffers of its own, into o and lse.
func decodeF32(fn string, m *decodeMeta, qd, kd, vd *tensor.Dense, scale float64, o, lse []float32) error {
	pool := attn.AcquirePool(m.params.Workers)
	defer attn.ReleasePool(pool)
	var f f32Decode
	if err := f.prepare(fn, m, pool); err != nil {
		return err
	}
	return f.run(fn, m, qd, kd, vd, scale, o, lse)
}

// newDecodeOutputs allocates the outputs of a decode call: Out of q's
// precision class (float32 for float32 q, else BFloat16) and the float32
// LSE.
func newDecodeOutputs(f32 bool, rows, hq, d int) (out, lse *tensor.Dense) {
	lse = tensor.New(tensor.WithShape(rows, hq), tensor.WithBacking(make([]float32, rows*hq)))
	if f32 {
		return tensor.New(tensor.WithShape(rows, hq, d), tensor.WithBacking(make([]float32, rows*hq*d))), lse
	}
	return tensor.New(tensor.WithShape(rows, hq, d), tensor.WithBacking(make([]lowp.BFloat16, rows*hq*d))), lse
}
