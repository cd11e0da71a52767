package plan

import "fmt"

// CSR is the k2q CSR of contract §2, one per KV head.
//
// RowPtr is [Hkv][TotalRows+1]: the exclusive prefix sum of the per-row entry
// counts, RowPtr[h][0] = 0. QIdx is [Hkv][Stride] with Stride >= totalQ*topK:
// row r of head h holds QIdx[h][RowPtr[h][r]:RowPtr[h][r+1]], the batch-local
// indices of the queries of row r's sequence that selected row r's block, in
// strictly ascending order. BuildK2QCSR fills every entry after the head's
// last valid entry with -1.
type CSR struct {
	Hkv       int     // KV heads
	TotalRows int     // CSR rows per head (one per KV block of the batch)
	Stride    int     // QIdx entries per head, >= totalQ*topK
	RowPtr    []int32 // [Hkv][TotalRows+1] row offsets into QIdx
	QIdx      []int32 // [Hkv][Stride] batch-local query indices, -1 after the last
}

// BuildK2QCSR inverts q2k_indices [hkv][totalQ][topK] (batch-local block
// ids, -1 = unused slot, anywhere in the list) into the k2q CSR of contract §2, with Stride = totalQ*topK.
//
// It rejects ids < -1, ids >= the sequence's block count, duplicate ids in one
// (query, head) list, non -1 ids in query rows outside every sequence (rows
// before cuQ[0] or from cuQ[B] on), cu_seqlens_q/cu_seqlens_k that are not
// [B+1] non-negative non-decreasing prefix sums, cuQ[B] > totalQ, and a q2k
// length other than hkv*totalQ*topK.
//
// dst may be nil (a new CSR is allocated) or a CSR whose buffers are reused
// when their capacity fits; the result is returned either way. On error dst's
// contents are unspecified.
func BuildK2QCSR(dst *CSR, q2k []int32, hkv, totalQ, topK int, cuQ, cuK []int32, blkKV int) (*CSR, error) {
	return BuildK2QCSRInto(nil, dst, q2k, hkv, totalQ, topK, cuQ, cuK, blkKV)
}

// CSRBuildScratch is the reusable scratch of BuildK2QCSRInto: the row
// numbering, the sequence of each query row and the duplicate marks. The
// zero value is ready to use.
type CSRBuildScratch struct {
	rows Rows
	qb   []int32
	seen []int32
}

// BuildK2QCSRInto is BuildK2QCSR with its scratch taken from x (nil: a
// fresh one): the same CSR and errors, and no allocation once x and dst
// have held a build of at least this size, except to format an error.
func BuildK2QCSRInto(x *CSRBuildScratch, dst *CSR, q2k []int32, hkv, totalQ, topK int, cuQ, cuK []int32, blkKV int) (*CSR, error) {
	if x == nil {
		x = new(CSRBuildScratch)
	}
	if hkv < 1 {
		return nil, fmt.Errorf("plan: head_kv = %d: must be >= 1", hkv)
	}
	if totalQ < 0 || totalQ > maxInt32 {
		return nil, fmt.Errorf("plan: total_q = %d: must be in [0, %d]", totalQ, maxInt32)
	}
	if topK < 1 || topK > maxInt32 {
		return nil, fmt.Errorf("plan: topK = %d: must be in [1, %d]", topK, maxInt32)
	}
	stride64 := int64(totalQ) * int64(topK)
	if stride64 > maxInt32 {
		return nil, fmt.Errorf("plan: total_q*topK = %d*%d: must be <= %d", totalQ, topK, maxInt32)
	}
	stride := int(stride64)
	n64 := int64(hkv) * stride64
	if int64(len(q2k)) != n64 {
		return nil, fmt.Errorf("plan: q2k_indices has %d elements: expected [Hkv, total_q, topK] = [%d, %d, %d] = %d", len(q2k), hkv, totalQ, topK, n64)
	}
	rows := &x.rows
	if err := rows.Reset(cuK, blkKV); err != nil {
		return nil, err
	}
	qb, err := queryBatchesInto(x.qb, cuQ, totalQ, rows.NumSeq)
	if err != nil {
		return nil, err
	}
	x.qb = qb
	tr := rows.Total
	if int64(hkv)*int64(tr+1) > maxInt32 {
		return nil, fmt.Errorf("plan: k2q_row_ptr would have %d*%d elements: must be <= %d", hkv, tr+1, maxInt32)
	}
	if dst == nil {
		dst = &CSR{}
	}
	dst.Hkv, dst.TotalRows, dst.Stride = hkv, tr, stride
	dst.RowPtr = grow(dst.RowPtr, hkv*(tr+1))
	dst.QIdx = grow(dst.QIdx, hkv*stride)
	clear(dst.RowPtr)

	// Pass 1: validate every id and count entries per row.
	seen := zeroed(&x.seen, rows.MaxBlocks) // seen[j] = k+1 of j in the current list
	for h := 0; h < hkv; h++ {
		rp := dst.RowPtr[h*(tr+1) : (h+1)*(tr+1)]
		for q := 0; q < totalQ; q++ {
			list := q2k[(h*totalQ+q)*topK : (h*totalQ+q+1)*topK]
			b := int(qb[q])
			for k, id := range list {
				if id == -1 {
					continue
				}
				if id < -1 {
					clearSeen(seen, list[:k])
					return nil, fmt.Errorf("plan: q2k_indices[h=%d, q=%d, k=%d] = %d: block id must be >= 0, or -1 for an unused slot", h, q, k, id)
				}
				if b < 0 {
					clearSeen(seen, list[:k])
					return nil, fmt.Errorf("plan: q2k_indices[h=%d, q=%d, k=%d] = %d: query row %d lies outside every sequence of cu_seqlens_q [%d, %d): expected -1", h, q, k, id, q, cuQ[0], cuQ[rows.NumSeq])
				}
				if id >= rows.Count[b] {
					clearSeen(seen, list[:k])
					return nil, fmt.Errorf("plan: q2k_indices[h=%d, q=%d, k=%d] = %d: block id out of range [0, %d) for sequence %d", h, q, k, id, rows.Count[b], b)
				}
				if s := seen[id]; s != 0 {
					clearSeen(seen, list[:k])
					return nil, fmt.Errorf("plan: q2k_indices[h=%d, q=%d, k=%d] = %d: duplicate block id (also at k=%d)", h, q, k, id, s-1)
				}
				seen[id] = int32(k + 1)
				rp[rows.RowOf(b, int(id))+1]++
			}
			clearSeen(seen, list)
		}
		for r := 0; r < tr; r++ {
			rp[r+1] += rp[r]
		}
	}

	// Pass 2: scatter queries in ascending order; rp[r] is used as the cursor
	// of row r and ends at the row's end, then the pointers are shifted back.
	for h := 0; h < hkv; h++ {
		rp := dst.RowPtr[h*(tr+1) : (h+1)*(tr+1)]
		qi := dst.QIdx[h*stride : (h+1)*stride]
		for q := 0; q < totalQ; q++ {
			b := qb[q]
			if b < 0 {
				continue
			}
			local := int32(q) - cuQ[b]
			for _, id := range q2k[(h*totalQ+q)*topK : (h*totalQ+q+1)*topK] {
				if id < 0 {
					continue
				}
				r := rows.RowOf(int(b), int(id))
				qi[rp[r]] = local
				rp[r]++
			}
		}
		copy(rp[1:], rp[:tr])
		rp[0] = 0
		for i := int(rp[tr]); i < stride; i++ {
			qi[i] = -1
		}
	}
	return dst, nil
}

func clearSeen(seen []int32, list []int32) {
	for _, id := range list {
		if id >= 0 && int(id) < len(seen) {
			seen[id] = 0
		}
	}
}

// ValidateCSR checks a caller-supplied CSR (the reference accepts any CSR)
// against total_q, topK, cu_seqlens_q and the row numbering: shapes
// (len(RowPtr) = Hkv*(TotalRows+1), TotalRows = rows.Total, Stride >=
// totalQ*topK, len(QIdx) = Hkv*Stride), RowPtr[h][0] = 0, row pointers
// non-decreasing with the last <= Stride, every entry of row r a valid
// batch-local query of row r's sequence, entries strictly ascending within a
// row, and at most topK blocks per (query, head). Entries after the last
// valid entry of a head are not read and not checked. It allocates its
// scratch (total_q counters) per call; ValidateCSRInto reuses a caller's.
func ValidateCSR(c *CSR, totalQ, topK int, cuQ []int32, rows *Rows) error {
	var s CSRScratch
	return ValidateCSRInto(&s, c, totalQ, topK, cuQ, rows)
}

// CSRScratch is the reusable scratch of ValidateCSRInto. The zero value is
// ready to use; it grows to the largest total_q it has checked.
type CSRScratch struct {
	cnt []int32 // [total_q] blocks counted per global query row
}

// ValidateCSRInto is ValidateCSR with its scratch taken from s (nil: a
// fresh one): the same checks and the same errors, and no allocation once
// s has held a call of at least this total_q, except to format an error.
func ValidateCSRInto(s *CSRScratch, c *CSR, totalQ, topK int, cuQ []int32, rows *Rows) error {
	if c == nil {
		return fmt.Errorf("plan: k2q CSR is nil")
	}
	if rows == nil {
		return fmt.Errorf("plan: rows is nil")
	}
	if totalQ < 0 || totalQ > maxInt32 {
		return fmt.Errorf("plan: total_q = %d: must be in [0, %d]", totalQ, maxInt32)
	}
	if topK < 1 {
		return fmt.Errorf("plan: topK = %d: must be >= 1", topK)
	}
	if c.Hkv < 1 {
		return fmt.Errorf("plan: k2q_row_ptr head dimension = %d: must be >= 1", c.Hkv)
	}
	if c.TotalRows != rows.Total {
		return fmt.Errorf("plan: k2q_row_ptr has %d rows per head: expected total_rows = %d from cu_seqlens_k and blk_kv = %d", c.TotalRows, rows.Total, rows.BlkKV)
	}
	tr := c.TotalRows
	if int64(len(c.RowPtr)) != int64(c.Hkv)*int64(tr+1) {
		return fmt.Errorf("plan: k2q_row_ptr has %d elements: expected [Hkv, total_rows + 1] = [%d, %d]", len(c.RowPtr), c.Hkv, tr+1)
	}
	if int64(c.Stride) < int64(totalQ)*int64(topK) || c.Stride > maxInt32 {
		return fmt.Errorf("plan: k2q_q_indices.shape[1] = %d: must be >= total_q * topK = %d and <= %d", c.Stride, int64(totalQ)*int64(topK), maxInt32)
	}
	if int64(len(c.QIdx)) != int64(c.Hkv)*int64(c.Stride) {
		return fmt.Errorf("plan: k2q_q_indices has %d elements: expected [Hkv, stride] = [%d, %d]", len(c.QIdx), c.Hkv, c.Stride)
	}
	if err := checkQueryBatches(cuQ, totalQ, rows.NumSeq); err != nil {
		return err
	}
	if s == nil {
		s = &CSRScratch{}
	}
	s.cnt = grow(s.cnt, totalQ)
	cnt := s.cnt
	for h := 0; h < c.Hkv; h++ {
		rp := c.RowPtr[h*(tr+1) : (h+1)*(tr+1)]
		qi := c.QIdx[h*c.Stride : (h+1)*c.Stride]
		if rp[0] != 0 {
			return fmt.Errorf("plan: k2q_row_ptr[h=%d, 0] = %d: expected 0", h, rp[0])
		}
		for r := 0; r < tr; r++ {
			if rp[r+1] < rp[r] {
				return fmt.Errorf("plan: k2q_row_ptr[h=%d, %d] = %d: must be >= k2q_row_ptr[h=%d, %d] = %d (non-decreasing)", h, r+1, rp[r+1], h, r, rp[r])
			}
		}
		if int(rp[tr]) > c.Stride {
			return fmt.Errorf("plan: k2q_row_ptr[h=%d, %d] = %d: must be <= k2q_q_indices.shape[1] = %d", h, tr, rp[tr], c.Stride)
		}
		clear(cnt)
		for r := 0; r < tr; r++ {
			b := rows.Batch[r]
			sq := cuQ[b+1] - cuQ[b]
			prev := int32(-1)
			for e := rp[r]; e < rp[r+1]; e++ {
				q := qi[e]
				if q < 0 || q >= sq {
					return fmt.Errorf("plan: k2q_q_indices[h=%d, %d] = %d (row %d: sequence %d, block %d): query index out of range [0, %d)", h, e, q, r, b, rows.Block[r], sq)
				}
				if q <= prev {
					return fmt.Errorf("plan: k2q_q_indices[h=%d, %d] = %d (row %d): must be > previous entry %d (strictly ascending within a row)", h, e, q, r, prev)
				}
				prev = q
				g := cuQ[b] + q
				cnt[g]++
				if int(cnt[g]) > topK {
					return fmt.Errorf("plan: k2q_q_indices[h=%d]: query %d of sequence %d (global query row %d) selects more than topK = %d blocks", h, q, b, g, topK)
				}
			}
		}
	}
	return nil
}
