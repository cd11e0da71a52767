package cuda

import (
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/sparseattn/msa/kernels/plan"
)

// The query-major prefill path (kernels/cuda/sm80/sm80_qfwd.cu): one CTA
// per query tile x KV head walks the union of the blocks the tile's tokens
// selected, in ascending block order, each row masked to the blocks its
// token selected and to its causal limit, keeps the online softmax in
// registers and writes O, LSE and the temperature LSE once: no partials,
// no combine. QPlan is the host half: the tiles and their block lists in
// the layout the kernel reads, built from the k2q CSR and the forward
// schedule (whose items cover every CSR entry once).

// QTileRows is the row tile of the mma.sync and wgmma query-major kernels:
// 64 query-head rows (four warps of 16, the mma.sync fragment of
// shared/tc_frag.cuh; one wgmma M).
const QTileRows = 64

// SM100QTileRows is the row tile of the SM100 query-major kernel
// (sm100/sm100_qfwd.cu): 128 query-head rows, the tcgen05 M whose
// accumulator fills the 128 tensor-memory lanes.
const SM100QTileRows = 128

// maxTileTokens bounds the tokens of one tile: one bit each in a block's
// token mask (QPlan.Masks).
const maxTileTokens = 64

// QTileFields is the number of int32 fields of one query tile in
// QPlan.Tiles: batch, KV head, first token (a global query row) and the
// number of tokens.
const QTileFields = 4

// QTileTokens returns the tokens of one query-major tile for qpk query
// heads per KV head: as many whole tokens as fill 64 rows, at least one
// (qpk > 64: the CTA takes the token's rows in several 64-row passes, all
// sharing the token's selection).
func QTileTokens(qpk int) int { return QTileTokensFor(QTileRows, qpk) }

// QTileTokensFor returns the tokens of one tile of rows query-head rows:
// as many whole tokens as fill the rows, at least one and at most the 64
// a token mask holds (qpk = 1 on SM100: 64 tokens in a 128-row tile).
func QTileTokensFor(rows, qpk int) int { return max(1, min(maxTileTokens, rows/max(qpk, 1))) }

// QPlan is the block table of a query-major prefill.
//
// Tile t covers tokens [Tiles[4t+2], Tiles[4t+2]+Tiles[4t+3]) of sequence
// Tiles[4t] for KV head Tiles[4t+1]; its blocks are Blocks[TilePtr[t]:
// TilePtr[t+1]], strictly ascending batch-local block ids, and Masks[i]
// has bit k set iff token k of the tile selected Blocks[i]. The tiles of
// every (sequence, KV head) cover each of its tokens exactly once, so
// every output row is written once, tokens without a selected block
// included (O = 0, LSE = -inf). Tiles are listed with the longest block
// lists first, so the CTAs that run longest start first.
type QPlan struct {
	TileRows   int      // row tile of the kernel the plan is for: QTileRows or SM100QTileRows
	TileTokens int      // tokens per full tile (QTileTokensFor(TileRows, qpk))
	Tiles      []int32  // [NumTiles][QTileFields]
	TilePtr    []int32  // [NumTiles+1] offsets into Blocks
	Blocks     []int32  // block ids
	Masks      []uint64 // per block of a tile: bit k = token k of the tile selected it
}

// NumTiles is the number of query tiles (CTAs of the launch).
func (p *QPlan) NumTiles() int { return len(p.Tiles) / QTileFields }

// BuildQPlan builds the query-major block table of the schedule s of csr
// for sequences cuQ ([B+1], host copy of cu_seqlens_q), hkv KV heads and
// qpk query heads per KV head, in tiles of rows query-head rows
// (QTileRows, or SM100QTileRows for the SM100 kernel).
func BuildQPlan(csr *plan.CSR, s *plan.FwdSchedule, cuQ []int32, hkv, qpk, rows int) (*QPlan, error) {
	var st qplanStore
	return st.build(csr, s, cuQ, hkv, qpk, rows)
}

// qplanStore is a query-major plan and the scratch arrays that build and
// check it, reused by the next build so that a warm prefill allocates
// nothing. The plan it returns is valid until its next build.
type qplanStore struct {
	p        QPlan
	tileBase []int
	count    []int32 // entries per (tile, head), then their offsets into ent
	items    []qplanItem
	ent      []uint64 // block<<6 | token in tile, grouped by (tile, head)
	fill     []int32
	blocks   []int32  // per (tile, head) from count[t]: its merged block ids
	masks    []uint64 // and their token masks
	n        []int    // merged blocks of (tile, head)
	order    []int
	covered  []int32 // QPlan.check's scratch
}

// qplanItem is one schedule item's CSR entries.
type qplanItem struct{ h, base, n, b int }

// sized returns v with length n (contents are the caller's to overwrite),
// reusing its storage.
func sized[T any](v []T, n int) []T {
	if cap(v) < n {
		return make([]T, n)
	}
	return v[:n]
}

// build is BuildQPlan over the store's storage.
func (st *qplanStore) build(csr *plan.CSR, s *plan.FwdSchedule, cuQ []int32, hkv, qpk, rows int) (*QPlan, error) {
	switch {
	case rows != QTileRows && rows != SM100QTileRows:
		return nil, fmt.Errorf("cuda: query-major plan: %d rows per tile: expected %d or %d", rows, QTileRows, SM100QTileRows)
	case csr == nil || s == nil:
		return nil, fmt.Errorf("cuda: query-major plan: nil CSR or forward schedule")
	case hkv < 1 || csr.Hkv != hkv:
		return nil, fmt.Errorf("cuda: query-major plan: CSR Hkv = %d: expected Hkv = %d >= 1", csr.Hkv, hkv)
	case qpk < 1:
		return nil, fmt.Errorf("cuda: query-major plan: qhead_per_kv = %d: must be >= 1", qpk)
	case len(cuQ) < 2:
		return nil, fmt.Errorf("cuda: query-major plan: cu_seqlens_q has %d entries: expected B+1 >= 2", len(cuQ))
	case len(s.Metadata) < int(s.WorkCount)*plan.MetaFields || s.WorkCount < 0:
		return nil, fmt.Errorf("cuda: query-major plan: schedule has %d metadata entries for %d items", len(s.Metadata), s.WorkCount)
	}
	nb := len(cuQ) - 1
	tok := QTileTokensFor(rows, qpk)
	// Tiles of each sequence, from its first token; tileBase[b] is the
	// first tile index of sequence b (per KV head).
	tileBase := sized(st.tileBase, nb+1)
	st.tileBase = tileBase
	tileBase[0] = 0
	for b := 0; b < nb; b++ {
		n := int(cuQ[b+1]) - int(cuQ[b])
		if n < 0 || cuQ[b] < 0 {
			return nil, fmt.Errorf("cuda: query-major plan: cu_seqlens_q[%d..%d] = %d, %d: expected non-negative, non-decreasing", b, b+1, cuQ[b], cuQ[b+1])
		}
		tileBase[b+1] = tileBase[b] + (n+tok-1)/tok
	}
	nt := tileBase[nb] * hkv // tile (per sequence tiles) x KV head: index tile*hkv + h
	// Counting sort of the CSR entries by (tile, head): entry = block<<6 | token in tile.
	count := sized(st.count, nt+1)
	st.count = count
	clear(count)
	items := st.items[:0]
	for i := 0; i < int(s.WorkCount); i++ {
		m := s.Metadata[i*plan.MetaFields : (i+1)*plan.MetaFields]
		h, row, qBegin, qCount, b, j := int(m[0]), int(m[1]), int(m[2]), int(m[3]), int(m[4]), m[5]
		if h < 0 || h >= hkv || row < 0 || row >= csr.TotalRows || b < 0 || b >= nb || j < 0 || qCount < 0 {
			return nil, fmt.Errorf("cuda: query-major plan: schedule item %d: (head %d, row %d, batch %d, block %d, count %d) out of range", i, h, row, b, j, qCount)
		}
		rp := h*(csr.TotalRows+1) + row
		if rp >= len(csr.RowPtr) {
			return nil, fmt.Errorf("cuda: query-major plan: schedule item %d: CSR row %d of head %d past RowPtr (%d entries)", i, row, h, len(csr.RowPtr))
		}
		base := h*csr.Stride + int(csr.RowPtr[rp]) + qBegin
		if base < 0 || base+qCount > len(csr.QIdx) || base+qCount > (h+1)*csr.Stride {
			return nil, fmt.Errorf("cuda: query-major plan: schedule item %d: entries [%d, %d) outside head %d of the CSR", i, base, base+qCount, h)
		}
		seq := int(cuQ[b+1] - cuQ[b])
		for _, q := range csr.QIdx[base : base+qCount] {
			if q < 0 || int(q) >= seq {
				return nil, fmt.Errorf("cuda: query-major plan: schedule item %d: query %d outside sequence %d of %d tokens", i, q, b, seq)
			}
			count[(tileBase[b]+int(q)/tok)*hkv+h+1]++
		}
		items = append(items, qplanItem{h, base, qCount, b})
	}
	st.items = items
	for i := 1; i <= nt; i++ {
		count[i] += count[i-1]
	}
	total := int(count[nt])
	ent := sized(st.ent, total)
	fill := append(st.fill[:0], count[:nt]...)
	st.ent, st.fill = ent, fill
	for idx, it := range items {
		j := uint64(s.Metadata[idx*plan.MetaFields+5])
		for _, q := range csr.QIdx[it.base : it.base+it.n] {
			t := (tileBase[it.b]+int(q)/tok)*hkv + it.h
			ent[fill[t]] = j<<6 | uint64(int(q)%tok)
			fill[t]++
		}
	}
	// Per (tile, head): sort, merge equal blocks into one token mask, in
	// place of its entries' range of blocks / masks.
	blocks, masks, n := sized(st.blocks, total), sized(st.masks, total), sized(st.n, nt)
	st.blocks, st.masks, st.n = blocks, masks, n
	for t := 0; t < nt; t++ {
		lo := int(count[t])
		e := ent[lo:count[t+1]]
		slices.Sort(e)
		l := 0
		for _, x := range e {
			j, k := int32(x>>6), x&63
			if l > 0 && blocks[lo+l-1] == j {
				if masks[lo+l-1]&(1<<k) != 0 {
					return nil, fmt.Errorf("cuda: query-major plan: block %d listed twice for one query (KV head %d): the schedule covers a CSR entry twice", j, t%hkv)
				}
				masks[lo+l-1] |= 1 << k
				continue
			}
			blocks[lo+l], masks[lo+l] = j, 1<<k
			l++
		}
		n[t] = l
	}
	order := sized(st.order, nt)
	st.order = order
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return n[b] - n[a] })
	p := &st.p
	*p = QPlan{TileRows: rows, TileTokens: tok, Tiles: p.Tiles[:0], TilePtr: append(p.TilePtr[:0], 0), Blocks: p.Blocks[:0], Masks: p.Masks[:0]}
	for _, t := range order {
		tile, h := t/hkv, t%hkv
		b := seqOfTile(tileBase, tile)
		first := int(cuQ[b]) + (tile-tileBase[b])*tok
		nq := min(tok, int(cuQ[b+1])-first)
		lo := int(count[t])
		p.Tiles = append(p.Tiles, int32(b), int32(h), int32(first), int32(nq))
		p.Blocks = append(p.Blocks, blocks[lo:lo+n[t]]...)
		p.Masks = append(p.Masks, masks[lo:lo+n[t]]...)
		p.TilePtr = append(p.TilePtr, int32(len(p.Blocks)))
	}
	if err := fits32("query-major block entries", len(p.Blocks)); err != nil {
		return nil, err
	}
	return p, nil
}

// seqOfTile returns the sequence b whose tiles [base[b], base[b+1]) hold tile.
func seqOfTile(base []int, tile int) int {
	b, _ := slices.BinarySearch(base, tile+1)
	return b - 1
}

// Validate checks every index the query-major kernel reads: the tiles'
// sequences, heads and token ranges against cuQ (host copy of
// cu_seqlens_q), hkv and the tile size; that the tiles of each (sequence,
// KV head) cover its tokens exactly once; TilePtr's offsets; each tile's
// block ids strictly ascending in [0, ceil(seqK[b]/blkKV)) (seqK: each
// sequence's key count; nil checks only that ids are non-negative: the
// launcher has no host copy of seqused_k, and the kernel skips a block
// that starts at or past its sequence's end); and each mask non-zero with
// no bit at or past the tile's token count.
func (p *QPlan) Validate(cuQ, seqK []int32, hkv, qpk, blkKV int) error {
	var covered []int32
	return p.check(&covered, cuQ, seqK, hkv, qpk, blkKV)
}

// check is Validate with its per-query counts in *scratch (grown as
// needed and kept for the next check).
func (p *QPlan) check(scratch *[]int32, cuQ, seqK []int32, hkv, qpk, blkKV int) error {
	nb := len(cuQ) - 1
	switch {
	case p == nil:
		return fmt.Errorf("cuda: query-major plan: nil")
	case nb < 1 || seqK != nil && len(seqK) != nb:
		return fmt.Errorf("cuda: query-major plan: %d sequences in cu_seqlens_q, %d key lengths: expected B >= 1 of each", nb, len(seqK))
	case hkv < 1 || qpk < 1 || blkKV < 1:
		return fmt.Errorf("cuda: query-major plan: Hkv %d, qhead_per_kv %d, blk_kv %d: must be >= 1", hkv, qpk, blkKV)
	case p.TileRows != QTileRows && p.TileRows != SM100QTileRows:
		return fmt.Errorf("cuda: query-major plan: %d rows per tile: expected %d or %d", p.TileRows, QTileRows, SM100QTileRows)
	case p.TileTokens != QTileTokensFor(p.TileRows, qpk):
		return fmt.Errorf("cuda: query-major plan: %d tokens per tile: expected %d for %d-row tiles and qhead_per_kv %d", p.TileTokens, QTileTokensFor(p.TileRows, qpk), p.TileRows, qpk)
	case len(p.Tiles)%QTileFields != 0 || len(p.TilePtr) != p.NumTiles()+1:
		return fmt.Errorf("cuda: query-major plan: %d tile fields, %d tile pointers: expected 4 per tile and tiles+1", len(p.Tiles), len(p.TilePtr))
	case len(p.Masks) != len(p.Blocks):
		return fmt.Errorf("cuda: query-major plan: %d masks for %d blocks", len(p.Masks), len(p.Blocks))
	case p.TilePtr[0] != 0 || int(p.TilePtr[len(p.TilePtr)-1]) != len(p.Blocks):
		return fmt.Errorf("cuda: query-major plan: tile pointers run from %d to %d: expected 0 to %d", p.TilePtr[0], p.TilePtr[len(p.TilePtr)-1], len(p.Blocks))
	}
	*scratch = sized(*scratch, int(cuQ[nb])*hkv)
	covered := *scratch
	clear(covered)
	for t := 0; t < p.NumTiles(); t++ {
		f := p.Tiles[t*QTileFields : (t+1)*QTileFields]
		b, h, first, n := int(f[0]), int(f[1]), int(f[2]), int(f[3])
		if b < 0 || b >= nb || h < 0 || h >= hkv || n < 1 || n > p.TileTokens || first < int(cuQ[b]) || first+n > int(cuQ[b+1]) {
			return fmt.Errorf("cuda: query-major plan: tile %d: (batch %d, head %d, tokens [%d, %d)) outside the sequences or longer than %d tokens", t, b, h, first, first+n, p.TileTokens)
		}
		for q := first; q < first+n; q++ {
			covered[q*hkv+h]++
		}
		lo, hi := p.TilePtr[t], p.TilePtr[t+1]
		if lo > hi {
			return fmt.Errorf("cuda: query-major plan: tile %d: pointers %d > %d", t, lo, hi)
		}
		nblk := math.MaxInt32
		if seqK != nil {
			nblk = (int(seqK[b]) + blkKV - 1) / blkKV
		}
		prev := int32(-1)
		for i := lo; i < hi; i++ {
			j, m := p.Blocks[i], p.Masks[i]
			if j <= prev || int(j) >= nblk {
				return fmt.Errorf("cuda: query-major plan: tile %d: block %d after %d: expected ascending ids in [0, %d)", t, j, prev, nblk)
			}
			if m == 0 || bits.Len64(m) > n {
				return fmt.Errorf("cuda: query-major plan: tile %d, block %d: token mask %#x: expected non-zero bits below %d", t, j, m, n)
			}
			prev = j
		}
	}
	for i, c := range covered {
		if c != 1 {
			return fmt.Errorf("cuda: query-major plan: query %d, KV head %d is in %d tiles: expected exactly 1", i/hkv, i%hkv, c)
		}
	}
	return nil
}
