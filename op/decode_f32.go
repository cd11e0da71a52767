package op

import (
	"fmt"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/grad"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/plan"
	"gorgonia.org/tensor"
)

// This file holds the float32 path of DecodeAttentionFunc and of
// DecodeWrapper.Run: q, k and v stay float32 (no BF16 rounding) and the
// call runs on package grad's float32 forward, the kernels of the float32
// prefill. Decode is that forward with one query sequence of seqlen_q rows
// per request, causal bottom-right alignment (query i of request b at
// position seqused_k[b] - seqlen_q + i) and the page table as paged K/V;
// dense decode lists every block of each request.

// denseDecodeBlk is the smallest key block of float32 dense decode.
const denseDecodeBlk = 128

// decodeF32 runs validated float32 decode (m from validateDecodeMeta, q, k,
// v float32 in HND pages) with the given softmax scale into o
// ([B*seqlen_q, Hq, D]) and lse ([B*seqlen_q, Hq]).
func decodeF32(fn string, m *decodeMeta, qd, kd, vd *tensor.Dense, scale float64, o, lse []float32) error {
	if m.layout != HND {
		return &NotImplementedError{fn, fmt.Sprintf("the %v paged K/V layout with float32 q, k, v (the float32 path takes HND [num_pages, Hkv, page_size, D])", m.layout)}
	}
	totalQ := m.batch * m.seqlenQ
	cuQ, cuK := make([]int32, m.batch+1), make([]int32, m.batch+1)
	for b := 0; b < m.batch; b++ {
		cuQ[b+1] = cuQ[b] + int32(m.seqlenQ)
		cuK[b+1] = cuK[b] + m.seqused[b]
	}
	q2k, topK, blk := m.q2k, m.topK, m.blk
	if q2k == nil {
		// Dense decode: any block size gives the same result; blocks of at
		// least denseDecodeBlk keys keep the block lists short.
		blk = max(blk, denseDecodeBlk)
		topK = 1
		for _, s := range m.seqused {
			topK = max(topK, ceilDiv(int(s), blk))
		}
		q2k = make([]int32, m.hkv*totalQ*topK)
		allBlocks(q2k, cuQ, m.seqused, m.hkv, topK, blk, true)
	}
	csr, err := plan.BuildK2QCSR(nil, q2k, m.hkv, totalQ, topK, cuQ, cuK, blk)
	if err != nil {
		return wrapArg(fn, "q2k_indices", err)
	}
	p := grad.Problem{TotalQ: totalQ, HQ: m.hq, Hkv: m.hkv, D: m.d, CuQ: cuQ, CuK: cuK,
		Paged: true, PageTable: m.pt, PTCols: m.cols, PageSize: m.pageSize, NumPages: kd.Shape()[0], SeqUsedK: m.seqused,
		BlkKV: blk, TopK: topK, Causal: true, Scale: scale, CSR: csr}
	pool := attn.AcquirePool(m.params.Workers)
	defer attn.ReleasePool(pool)
	if err := grad.NewWorkspace(pool).Forward(&p, backing[float32](qd), backing[float32](kd), backing[float32](vd), o, lse); err != nil {
		return &ArgError{Func: fn, Arg: "q, k, v", Expected: "a consistent float32 decode call", Got: err.Error()}
	}
	return nil
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
