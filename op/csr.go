package op

import (
	"fmt"
	"strings"

	"github.com/sparseattn/msa/kernels/plan"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// K2QCSRFunc inverts q2k_indices [Hkv, total_q, topK] (batch-local block
// ids, -1 = unused) into the k2q CSR (the reference's
// sparse_index_utils.build_k2q_csr): k2q_row_ptr [Hkv, total_rows+1] and
// k2q_q_indices [Hkv, total_q*topK], rows numbered block-major then batch,
// query indices ascending within a row and -1 after the last valid entry.
// blkKV 0 means 128. Ids out of range and duplicate ids are rejected.
func K2QCSRFunc(q2kIndices, cuSeqlensQ, cuSeqlensK tensor.Tensor, blkKV int) (rowPtr, qIndices *tensor.Dense, err error) {
	const fn = "K2QCSRFunc"
	c := &validate.Checker{Fn: fn}
	q2k := c.Dense(q2kIndices, "q2k_indices")
	c.Dtype(q2k, "q2k_indices", tensor.Int32)
	c.Rank(q2k, "q2k_indices", "[Hkv, total_q, topK]", 3)
	cuQ := validate.CuSeqlens(c, cuSeqlensQ, "cu_seqlens_q", -1, "")
	cuK := validate.CuSeqlens(c, cuSeqlensK, "cu_seqlens_k", -1, "")
	if c.Err != nil {
		return nil, nil, c.Err
	}
	if blkKV == 0 {
		blkKV = 128
	}
	c.Need(blkKV >= 1, "blk_kv", ">= 1", blkKV)
	c.Need(len(cuK) == len(cuQ), "cu_seqlens_k", fmt.Sprintf("shape [B + 1] = [%d] matching cu_seqlens_q", len(cuQ)), len(cuK))
	s := q2k.Shape()
	hkv, totalQ, topK := s[0], s[1], s[2]
	c.Need(hkv >= 1 && topK >= 1, "q2k_indices", "Hkv >= 1 and topK >= 1", validate.ShapeStr(q2k))
	if c.Err != nil {
		return nil, nil, c.Err
	}
	csr, err := plan.BuildK2QCSR(nil, validate.Int32s(q2k), hkv, totalQ, topK, cuQ, cuK, blkKV)
	if err != nil {
		return nil, nil, q2kBlockErr(fn, err, cuK, blkKV)
	}
	rowPtr = tensor.New(tensor.WithShape(hkv, csr.TotalRows+1), tensor.WithBacking(csr.RowPtr))
	qIndices = tensor.New(tensor.WithShape(hkv, csr.Stride), tensor.WithBacking(csr.QIdx))
	return rowPtr, qIndices, nil
}

// q2kBlockErr is the error of a k2q CSR build from q2k_indices: it names
// blk_kv and each sequence's block count ceil(seqlen_k / blk_kv), since an id
// out of range usually means the ids count blocks of another size.
func q2kBlockErr(fn string, err error, cuK []int32, blk int) error {
	counts := make([]string, 0, min(len(cuK), 9))
	for b := 0; b+1 < len(cuK) && b < 8; b++ {
		n := int(cuK[b+1]) - int(cuK[b])
		counts = append(counts, fmt.Sprintf("ceil(%d / %d) = %d", n, blk, validate.CeilDiv(max(n, 0), blk)))
	}
	if len(cuK) > 9 {
		counts = append(counts, "...")
	}
	return validate.ArgErr(fn, "q2k_indices", fmt.Sprintf("block ids of blocks of blk_kv = %d keys, per sequence ceil(seqlen_k / blk_kv) blocks: %s "+
		"(ids selected over blocks of another size need that blk_kv)", blk, strings.Join(counts, ", ")), err.Error())
}

// compactRowPtr returns the first total+1 pointers of each head of a row
// pointer array with capRows+1 pointers per head. Rows past total must be
// empty (padding of a fixed-capacity CSR); a non-empty one means the CSR
// was built for another blk_kv or cu_seqlens_k, and the error names both.
// The compacted pointers are written into *buf (grown as needed; the
// storage a caller keeps across runs, or a fresh nil slice).
func compactRowPtr(fn string, buf *[]int32, rp []int32, hkv, capRows, total, blk int) ([]int32, error) {
	if capRows == total {
		return rp, nil
	}
	*buf = growInt32(*buf, hkv*(total+1))
	out := *buf
	for h := 0; h < hkv; h++ {
		src := rp[h*(capRows+1) : (h+1)*(capRows+1)]
		for r := total + 1; r <= capRows; r++ {
			if src[r] != src[total] {
				return nil, blkMismatch(fn, capRows, total, blk,
					fmt.Sprintf("; its rows past %d must be empty padding, but k2q_row_ptr[%d, %d] = %d != %d", total, h, r, src[r], src[total]))
			}
		}
		copy(out[h*(total+1):], src[:total+1])
	}
	return out, nil
}

// blkMismatch is the error of a CSR whose row count does not match the
// blk_kv and cu_seqlens_k of the call: it names both values given twice.
func blkMismatch(fn string, have, want, blk int, detail string) error {
	return validate.ArgErr(fn, "k2q_row_ptr/blk_kv",
		fmt.Sprintf("a CSR built for the same blk_kv and cu_seqlens_k (blk_kv = %d gives total_rows = %d)", blk, want),
		fmt.Sprintf("k2q_row_ptr was built for a different blk_kv or cu_seqlens_k: it has %d rows, blk_kv = %d gives %d%s", have, blk, want, detail))
}

// topKMismatch is the error of a topK argument that disagrees with the
// CSR's k2q_q_indices (built from a q2k_indices of another last dimension).
func topKMismatch(fn string, stride, totalQ, topK int, detail string) error {
	got := fmt.Sprintf("topK = %d, but k2q_q_indices has %d columns", topK, stride)
	if totalQ > 0 && stride%totalQ == 0 {
		got += fmt.Sprintf(" (total_q = %d: the CSR was built with topK = %d)", totalQ, stride/totalQ)
	}
	if detail != "" {
		got += ": " + detail
	}
	return validate.ArgErr(fn, "topK/k2q_q_indices",
		fmt.Sprintf("topK equal to q2k_indices.shape[2] of the CSR's build (k2q_q_indices.shape[1] >= total_q * topK = %d)", totalQ*topK), got)
}

// csrTensors checks the dtype and rank of a caller-supplied CSR pair.
func csrTensors(c *validate.Checker, rowPtr, qIdx tensor.Tensor) (rp, qi *tensor.Dense) {
	rp = c.Dense(rowPtr, "k2q_row_ptr")
	qi = c.Dense(qIdx, "k2q_q_indices")
	c.Dtype(rp, "k2q_row_ptr", tensor.Int32)
	c.Dtype(qi, "k2q_q_indices", tensor.Int32)
	c.Rank(rp, "k2q_row_ptr", "[Hkv, total_rows + 1]", 2)
	c.Rank(qi, "k2q_q_indices", "[Hkv, >= total_q * topK]", 2)
	return rp, qi
}

// csrRows numbers the CSR rows of cu_seqlens_k into rows for a k2q_row_ptr
// of capRows rows per head: it counts the rows first (plan.CountRows
// allocates nothing) and rejects a row-pointer array with too few rows
// before rows.Reset grows memory with total_rows.
func csrRows(fn string, rows *plan.Rows, capRows int, cuK []int32, blk int) error {
	total, err := plan.CountRows(cuK, blk)
	if err != nil {
		return validate.WrapArg(fn, "cu_seqlens_k", err)
	}
	if capRows < total {
		return blkMismatch(fn, capRows, total, blk, "")
	}
	if err := rows.Reset(cuK, blk); err != nil {
		return validate.WrapArg(fn, "cu_seqlens_k", err)
	}
	return nil
}

// csrPair is a caller's k2q CSR: k2q_row_ptr's values rp ([Hkv][capRows +
// 1]) and k2q_q_indices's values qi ([Hkv][stride]).
type csrPair struct {
	rp, qi               []int32
	hkv, capRows, stride int
}

// csrPairOf is the csrPair of the tensors rp, qi (rank 2, int32).
func csrPairOf(rp, qi *tensor.Dense) csrPair {
	return csrPair{rp: validate.Int32s(rp), qi: validate.Int32s(qi), hkv: rp.Shape()[0], capRows: rp.Shape()[1] - 1, stride: qi.Shape()[1]}
}

// csrView validates the CSR pair p against the row numbering of
// cu_seqlens_k and returns it as a plan.CSR. k2q_row_ptr may have more rows
// than the sequences need (a fixed-capacity CSR) when the extra rows are
// empty; the compacted row pointers and the check's scratch are st's.
func csrView(fn string, st *csrStore, p csrPair, rows *plan.Rows, totalQ, topK int, cuQ []int32) (plan.CSR, error) {
	if p.capRows < rows.Total {
		return plan.CSR{}, blkMismatch(fn, p.capRows, rows.Total, rows.BlkKV, "")
	}
	rpc, err := compactRowPtr(fn, &st.rpc, p.rp, p.hkv, p.capRows, rows.Total, rows.BlkKV)
	if err != nil {
		return plan.CSR{}, err
	}
	csr := plan.CSR{Hkv: p.hkv, TotalRows: rows.Total, Stride: p.stride, RowPtr: rpc, QIdx: p.qi}
	if err := plan.ValidateCSRInto(&st.check, &csr, totalQ, topK, cuQ, rows); err != nil {
		if csr.Stride != totalQ*topK && totalQ > 0 && csr.Stride%totalQ == 0 {
			// The most likely cause: topK differs from the CSR's.
			return plan.CSR{}, topKMismatch(fn, csr.Stride, totalQ, topK, err.Error())
		}
		return plan.CSR{}, validate.WrapArg(fn, "k2q_row_ptr/k2q_q_indices", err)
	}
	return csr, nil
}
