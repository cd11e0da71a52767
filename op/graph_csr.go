package op

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// csrLayout describes the packed k2q CSR value of the graph ops:
// [Hkv, RowCap+1 + Stride] int32, each head's row is RowCap+1 row pointers
// (rows past total_rows are empty) followed by Stride query indices.
type csrLayout struct {
	Hkv, RowCap, Stride, TotalQ, TopK, BlkKV int
}

func (l csrLayout) width() int { return l.RowCap + 1 + l.Stride }

// size sets RowCap = batch * blocks and Stride = TotalQ * TopK, or returns
// an ArgError naming arg when the packed value would exceed maxGraphValue
// elements.
func (l *csrLayout) size(fn, arg string, batch, blocks int) error {
	rows, err := valueSize(fn, arg, "a CSR row capacity B * ceil(max_seqlen_k / blk_kv)", batch, blocks)
	if err != nil {
		return err
	}
	stride, err := valueSize(fn, "q2k_indices", "total_q * topK", l.TotalQ, l.TopK)
	if err != nil {
		return err
	}
	if _, err := valueSize(fn, arg, "a packed CSR value Hkv * (rows + 1 + total_q * topK)", l.Hkv, rows+1+stride); err != nil {
		return err
	}
	l.RowCap, l.Stride = rows, stride
	return nil
}

// split returns row_ptr [Hkv][RowCap+1] and q_indices [Hkv][Stride] copies
// of a packed value.
func (l csrLayout) split(packed []int32) (rp, qi []int32) {
	rp = make([]int32, l.Hkv*(l.RowCap+1))
	qi = make([]int32, l.Hkv*l.Stride)
	l.splitInto(rp, qi, packed)
	return rp, qi
}

// splitInto is split into rp and qi (of split's lengths).
func (l csrLayout) splitInto(rp, qi, packed []int32) {
	for h := 0; h < l.Hkv; h++ {
		row := packed[h*l.width() : (h+1)*l.width()]
		copy(rp[h*(l.RowCap+1):], row[:l.RowCap+1])
		copy(qi[h*l.Stride:], row[l.RowCap+1:])
	}
}

// csrProducer is implemented by the ops whose value is a packed CSR.
type csrProducer interface{ csrLayout() csrLayout }

// csrOp builds the packed k2q CSR from q2k_indices, cu_seqlens_q and
// cu_seqlens_k.
type csrOp struct {
	opBase
	l      csrLayout
	scored scoredKey // causality of the BlockScores node q2k descends from
	host   csrHost   // the CUDA path's host side (graph_nodes_host.go)
}

func (op *csrOp) scoredCausal() scoredKey { return op.scored }

func (op *csrOp) csrLayout() csrLayout { return op.l }
func (op *csrOp) Arity() int           { return 3 }
func (op *csrOp) Type() hm.Type {
	return fnType(tt(3, tensor.Int32), tt(1, tensor.Int32), tt(1, tensor.Int32), tt(2, tensor.Int32))
}
func (op *csrOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.l.Hkv, op.l.width()}, nil
}
func (op *csrOp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "msa.K2QCSR%+v/%+v", op.l, op.scored) }
func (op *csrOp) Hashcode() uint32      { return hashOf(op) }
func (op *csrOp) String() string {
	return fmt.Sprintf("K2QCSR{blk_kv=%d, rows<=%d}", op.l.BlkKV, op.l.RowCap)
}

func (op *csrOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != 3 {
		return nil, validate.ArgErr("K2QCSR", "inputs", "3 values", len(vals))
	}
	return op.build(new(csrHost), tv(vals[0]), tv(vals[1]), tv(vals[2]))
}

// build checks the node's inputs and builds the packed CSR into st's
// storage: the CPU Do's work on fresh storage, and the CUDA path's on the
// storage the node keeps (a warm run allocates nothing; an error is
// formatted only on failure).
func (op *csrOp) build(st *csrHost, q2kT, cuQT, cuKT tensor.Tensor) (*tensor.Dense, error) {
	const fn = "K2QCSR"
	c := validate.Checker{Fn: fn}
	q2k := c.Dense(q2kT, "q2k_indices")
	c.Dtype(q2k, "q2k_indices", tensor.Int32)
	cuQ := validate.CuSeqlens(&c, cuQT, "cu_seqlens_q", op.l.TotalQ, "total_q")
	cuK := validate.CuSeqlens(&c, cuKT, "cu_seqlens_k", -1, "")
	if c.Err != nil {
		return nil, c.Err
	}
	l := op.l
	// Count the rows before building: the build allocates memory that
	// grows with them.
	total, err := plan.CountRows(cuK, l.BlkKV)
	if err != nil {
		return nil, validate.WrapArg(fn, "cu_seqlens_k", err)
	}
	if total > l.RowCap {
		return nil, validate.ArgErr(fn, "cu_seqlens_k",
			fmt.Sprintf("at most %d CSR rows (B * ceil(max_seqlen_k / blk_kv) given at graph construction)", l.RowCap), total)
	}
	csr, err := plan.BuildK2QCSRInto(&st.scratch, &st.csr, validate.Int32s(q2k), l.Hkv, l.TotalQ, l.TopK, cuQ, cuK, l.BlkKV)
	if err != nil {
		return nil, q2kBlockErr(fn, err, cuK, l.BlkKV)
	}
	out := st.out.view(tensor.Int32, tensor.Shape{l.Hkv, l.width()})
	l.pack(validate.Int32s(out), csr)
	return out, nil
}

// pack writes csr as the packed value packed (Hkv * width elements, every
// one written): per head the row pointers, padded to RowCap rows, then
// the query indices.
func (l csrLayout) pack(packed []int32, csr *plan.CSR) {
	for h := 0; h < l.Hkv; h++ {
		row := packed[h*l.width() : (h+1)*l.width()]
		src := csr.RowPtr[h*(csr.TotalRows+1) : (h+1)*(csr.TotalRows+1)]
		copy(row, src)
		for r := csr.TotalRows + 1; r <= l.RowCap; r++ {
			row[r] = src[csr.TotalRows]
		}
		copy(row[l.RowCap+1:], csr.QIdx[h*csr.Stride:(h+1)*csr.Stride])
	}
}

// K2QCSR adds the k2q CSR build (docs/contract.md section 2) to q2k's graph: q2k is
// int32 [Hkv, total_q, topK], cuQ and cuK int32 [B+1]. Because a node's
// shape may depend only on input shapes, the CSR has a fixed row capacity
// of B * ceil(max_seqlen_k / blk_kv) rows (rows past the real total are
// empty); a cu_seqlens_k with a longer sequence is an error at run time.
// Options: MaxSeqlenK (required) and BlkKV (absent or 0: 128); topK is
// q2k's last dimension. The value is a packed
// [Hkv, rows+1 + total_q*topK] int32 tensor read by FwdSchedule and
// SparseAttention.
func K2QCSR(q2k, cuQ, cuK *G.Node, opts ...Option) (*G.Node, error) {
	const fn = "K2QCSR"
	cfg, err := applyOptions(fn, opts, optBlkKV, optMaxSeqlenK)
	if err != nil {
		return nil, err
	}
	if err := cfg.required(fn, optMaxSeqlenK, "it fixes the CSR's row capacity"); err != nil {
		return nil, err
	}
	blkKV, maxSeqlenK := cfg.blkKV, cfg.maxSeqlenK
	if err := nodeCheck(fn, "q2k_indices", q2k, 3, tensor.Int32); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "cu_seqlens_q", cuQ, 1, tensor.Int32); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "cu_seqlens_k", cuK, 1, tensor.Int32); err != nil {
		return nil, err
	}
	if blkKV == 0 {
		blkKV = 128
	}
	if blkKV < 1 || blkKV > 128 {
		return nil, validate.ArgErr(fn, "blk_kv", "1 <= blk_kv <= 128", fmt.Sprint(blkKV))
	}
	if maxSeqlenK < 1 || maxSeqlenK > validate.MaxInt32 {
		return nil, validate.ArgErr(fn, "max_seqlen_k", fmt.Sprintf("1 <= max_seqlen_k <= %d (key lengths are int32)", validate.MaxInt32), fmt.Sprint(maxSeqlenK))
	}
	if cuQ.Shape()[0] != cuK.Shape()[0] || cuQ.Shape()[0] < 1 {
		return nil, validate.ArgErr(fn, "cu_seqlens_k", fmt.Sprintf("shape [B + 1] = %v matching cu_seqlens_q", cuQ.Shape()), fmt.Sprint(cuK.Shape()))
	}
	if err := checkProducerBlk(fn, q2k, blkKV); err != nil {
		return nil, err
	}
	s := q2k.Shape()
	batch := cuQ.Shape()[0] - 1
	l := csrLayout{Hkv: s[0], TotalQ: s[1], TopK: s[2], BlkKV: blkKV}
	if l.Hkv < 1 || l.TopK < 1 || l.TopK > validate.MaxTopK {
		return nil, validate.ArgErr(fn, "q2k_indices", fmt.Sprintf("shape [Hkv >= 1, total_q, 1 <= topK <= %d]", validate.MaxTopK), fmt.Sprint(s))
	}
	if err := l.size(fn, "max_seqlen_k", batch, validate.CeilDiv(maxSeqlenK, blkKV)); err != nil {
		return nil, err
	}
	return G.ApplyOp(&csrOp{l: l, scored: scoredBy(q2k)}, q2k, cuQ, cuK)
}

// packCSROp packs a caller-supplied (k2q_row_ptr, k2q_q_indices) pair into
// the CSR value of the graph ops.
type packCSROp struct {
	opBase
	l    csrLayout
	host hostStage // the CUDA path's host side (graph_nodes_host.go)
}

func (op *packCSROp) csrLayout() csrLayout { return op.l }
func (op *packCSROp) Arity() int           { return 2 }
func (op *packCSROp) Type() hm.Type {
	return fnType(tt(2, tensor.Int32), tt(2, tensor.Int32), tt(2, tensor.Int32))
}
func (op *packCSROp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{op.l.Hkv, op.l.width()}, nil
}
func (op *packCSROp) WriteHash(h hash.Hash) { fmt.Fprintf(h, "msa.PackK2QCSR%+v", op.l) }
func (op *packCSROp) Hashcode() uint32      { return hashOf(op) }
func (op *packCSROp) String() string        { return "PackK2QCSR" }

func (op *packCSROp) Do(vals ...G.Value) (G.Value, error) {
	return op.build(new(hostStage), tv(vals[0]), tv(vals[1]))
}

// build checks the node's inputs and packs them into st's storage (fresh
// for the CPU Do, kept by the node on the CUDA path).
func (op *packCSROp) build(st *hostStage, rpT, qiT tensor.Tensor) (*tensor.Dense, error) {
	c := validate.Checker{Fn: "PackK2QCSR"}
	rp := c.Dense(rpT, "k2q_row_ptr")
	qi := c.Dense(qiT, "k2q_q_indices")
	c.Dtype(rp, "k2q_row_ptr", tensor.Int32)
	c.Dtype(qi, "k2q_q_indices", tensor.Int32)
	if c.Err != nil {
		return nil, c.Err
	}
	l := op.l
	r, q := validate.Int32s(rp), validate.Int32s(qi)
	if len(r) != l.Hkv*(l.RowCap+1) {
		c.Fail("k2q_row_ptr", fmt.Sprintf("%d elements", l.Hkv*(l.RowCap+1)), len(r))
	}
	if len(q) != l.Hkv*l.Stride {
		c.Fail("k2q_q_indices", fmt.Sprintf("%d elements", l.Hkv*l.Stride), len(q))
	}
	if c.Err != nil {
		return nil, c.Err
	}
	out := st.out.view(tensor.Int32, tensor.Shape{l.Hkv, l.width()})
	l.packParts(validate.Int32s(out), r, q)
	return out, nil
}

// packParts writes row pointers r ([Hkv][RowCap+1]) and query indices q
// ([Hkv][Stride]) as the packed value packed.
func (l csrLayout) packParts(packed, r, q []int32) {
	for h := 0; h < l.Hkv; h++ {
		row := packed[h*l.width() : (h+1)*l.width()]
		copy(row, r[h*(l.RowCap+1):(h+1)*(l.RowCap+1)])
		copy(row[l.RowCap+1:], q[h*l.Stride:(h+1)*l.Stride])
	}
}

// PackK2QCSR wraps a caller-built CSR (rowPtr [Hkv, total_rows+1],
// qIndices [Hkv, >= total_q*topK], e.g. from K2QCSRFunc) as the CSR value
// FwdSchedule and SparseAttention read. Options: TopK (required), TotalQ
// (absent: qIndices.shape[1] / topK) and BlkKV (absent or 0: 128), which
// must be those the CSR was built with.
func PackK2QCSR(rowPtr, qIndices *G.Node, opts ...Option) (*G.Node, error) {
	const fn = "PackK2QCSR"
	cfg, err := applyOptions(fn, opts, optTopK, optTotalQ, optBlkKV)
	if err != nil {
		return nil, err
	}
	if err := cfg.required(fn, optTopK, "the topK the CSR was built with"); err != nil {
		return nil, err
	}
	totalQ, topK, blkKV := cfg.totalQ, cfg.topK, cfg.blkKV
	if err := nodeCheck(fn, "k2q_row_ptr", rowPtr, 2, tensor.Int32); err != nil {
		return nil, err
	}
	if err := nodeCheck(fn, "k2q_q_indices", qIndices, 2, tensor.Int32); err != nil {
		return nil, err
	}
	if blkKV == 0 {
		blkKV = 128
	}
	if blkKV < 1 || blkKV > 128 {
		return nil, validate.ArgErr(fn, "blk_kv", "1 <= blk_kv <= 128", fmt.Sprint(blkKV))
	}
	rs, qs := rowPtr.Shape(), qIndices.Shape()
	if rs[0] != qs[0] || rs[0] < 1 || rs[1] < 1 {
		return nil, validate.ArgErr(fn, "k2q_q_indices", fmt.Sprintf("leading dimension Hkv = %d", rs[0]), fmt.Sprint(qs))
	}
	if topK < 1 || topK > validate.MaxTopK {
		return nil, validate.ArgErr(fn, "topK", fmt.Sprintf("1 <= topK <= %d", validate.MaxTopK), fmt.Sprint(topK))
	}
	if !cfg.has(optTotalQ) {
		totalQ = qs[1] / topK
	}
	if totalQ < 0 || validate.MulCap(qs[1], totalQ, topK) < 0 {
		return nil, validate.ArgErr(fn, "total_q", fmt.Sprintf("0 <= total_q with total_q * topK <= k2q_q_indices.shape[1] = %d", qs[1]), fmt.Sprintf("total_q = %d, topK = %d", totalQ, topK))
	}
	l := csrLayout{Hkv: rs[0], RowCap: rs[1] - 1, Stride: qs[1], TotalQ: totalQ, TopK: topK, BlkKV: blkKV}
	if _, err := valueSize(fn, "k2q_row_ptr", "a packed CSR value Hkv * (rows + 1 + stride)", l.Hkv, l.width()); err != nil {
		return nil, err
	}
	return G.ApplyOp(&packCSROp{l: l}, rowPtr, qIndices)
}

// csrOf returns the layout of a CSR node.
func csrOf(fn string, csr *G.Node) (csrLayout, error) {
	if csr == nil {
		return csrLayout{}, validate.ArgErr(fn, "csr", "a node", "nil")
	}
	p, ok := csr.Op().(csrProducer)
	if !ok {
		return csrLayout{}, validate.ArgErr(fn, "csr", "a node made by K2QCSR or PackK2QCSR", nodeDesc(csr))
	}
	return p.csrLayout(), nil
}
