package attn

// KVLayout addresses key/value token rows of one sequence and KV head.
//
// Dense: K is [total_k, Hkv, D]; token t of sequence b, head h is row
// (CuK[b]+t)*Hkv + h. Paged: K is [num_pages, Hkv, page_size, D]; token t
// lives in page PageTable[b*PTCols + t/PageSize] at row
// (page*Hkv + h)*PageSize + t%PageSize (the head-major "HND" layout), or,
// with NHD, K is [num_pages, page_size, Hkv, D] and the row is
// (page*PageSize + t%PageSize)*Hkv + h (the token-major "NHD" layout of
// flash-attn and FlashInfer). Per-row side data (NVFP4 block scales) uses
// the same row numbering.
type KVLayout struct {
	Hkv       int     // KV heads
	Paged     bool    // paged (PageTable) instead of dense (CuK)
	CuK       []int32 // dense only
	PageTable []int32 // paged only, [B][PTCols]
	PTCols    int     // paged only: page-table columns (max pages per sequence)
	PageSize  int     // paged only: tokens per page
	NHD       bool    // paged only: token-major pages [num_pages, page_size, Hkv, D]
}

// Row returns the operand row of token t of sequence b, KV head h.
func (l *KVLayout) Row(b, h, t int) int {
	if !l.Paged {
		return (int(l.CuK[b])+t)*l.Hkv + h
	}
	page := int(l.PageTable[b*l.PTCols+t/l.PageSize])
	if l.NHD {
		return (page*l.PageSize+t%l.PageSize)*l.Hkv + h
	}
	return (page*l.Hkv+h)*l.PageSize + t%l.PageSize
}

// Run returns the operand row of token t of sequence b, KV head h, and how
// many of the tokens t, t+1, ..., t+max-1 occupy consecutive rows from there
// (at least 1): the rest of the page (HND, or NHD with one KV head), or all
// of them for dense K/V with one KV head. Decoding a run in one call amortises the per-call overhead.
func (l *KVLayout) Run(b, h, t, max int) (row, count int) {
	if !l.Paged {
		if l.Hkv == 1 {
			return int(l.CuK[b]) + t, max
		}
		return (int(l.CuK[b])+t)*l.Hkv + h, 1
	}
	page := int(l.PageTable[b*l.PTCols+t/l.PageSize])
	off := t % l.PageSize
	if l.NHD {
		row = (page*l.PageSize+off)*l.Hkv + h
		if l.Hkv == 1 {
			return row, min(max, l.PageSize-off)
		}
		return row, 1
	}
	return (page*l.Hkv+h)*l.PageSize + off, min(max, l.PageSize-off)
}
