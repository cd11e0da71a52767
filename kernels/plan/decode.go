package plan

import "fmt"

// DecodeExecutor is the path a decode schedule is planned for. The
// automatic chunk rule differs between them (see DecodeSchedule), and a
// schedule runs only on the executor it was planned for: ValidateDecodeSchedule
// refuses a schedule whose Executor differs from the caller's, naming both.
type DecodeExecutor int

const (
	// CPUExecutor: items run as goroutine tasks; Workers is the goroutine
	// count (the zero value, the default).
	CPUExecutor DecodeExecutor = iota
	// CUDAExecutor: each item is one CTA of a GPU kernel; Workers is the
	// GPU's streaming-multiprocessor count.
	CUDAExecutor
)

// String names the executor ("cpu", "cuda").
func (e DecodeExecutor) String() string {
	switch e {
	case CPUExecutor:
		return "cpu"
	case CUDAExecutor:
		return "cuda"
	}
	return fmt.Sprintf("DecodeExecutor(%d)", int(e))
}

// DecodeParams are the shapes and options of a paged decode schedule
// (contract §7). Request b owns query rows b*SeqlenQ .. (b+1)*SeqlenQ-1.
type DecodeParams struct {
	Batch           int  // requests
	SeqlenQ         int  // query tokens per request
	HQ              int  // query heads
	Hkv             int  // KV heads
	PageSize        int  // tokens per page
	Workers         int  // numSM equivalent, >= 1
	FixedSplitPages int  // > 0: fixed chunk size in pages (batch-invariant mode)
	DisableSplit    bool // never split the KV of a request
	MaxPagesPerSeq  int  // page_table.shape[1], >= 1
	// FixedCapacity is the CUDA-graph-like mode: Capacity, PartialRows,
	// OIndptr, SplitKV and the length of every buffer depend only on the
	// params, never on seqused_k, so they do not change between steps.
	FixedCapacity bool
	// Executor is the path the schedule is planned for (CPUExecutor by
	// default); with CUDAExecutor, Workers is the GPU's SM count.
	Executor DecodeExecutor
}

// autoMinChunkPages is the smallest chunk the automatic rule picks when it
// splits (the binary search starts at max(16, 128/page) and the skew rule
// never goes below 16).
const autoMinChunkPages = 16

// gpuMinChunkTokens is the smallest chunk, in tokens, the CUDA executor's
// automatic rule picks. A CTA's fixed traffic is its Q rows plus a float32
// partial row of D+1 values per (query, head) written and read back by the
// combine: for the bench shape (16 query heads per KV head, D 128, BF16
// K/V) that is 16*129*4*2 = 16.5 KB against 2*128*128*2 = 64 KB of K/V per
// 128 tokens, so smaller chunks would spend more on partials than on keys.
const gpuMinChunkTokens = 128

// maxAutoSplits bounds the chunks of one request under the automatic rule
// (chunk >= ceil(max_pages/256)): it bounds the combine's work per row.
const maxAutoSplits = 256

// DecodeSchedule is a FlashInfer-style split-KV decode schedule.
//
// Work items: item i (i < WorkCount) processes request Request[i], query
// tile QTileIdx[i] (batch-local queries [QTileIdx*QTile, min(+QTile,
// SeqlenQ)), see ItemQueries), KV chunk KVTile[i] (pages [KVTile*ChunkPages,
// min(+ChunkPages, pages_b)), see ItemPages) and KV head KVHead[i] (query
// heads KVHead*qhead_per_kv .. +qhead_per_kv-1). The KV head is part of the
// item so that one item is one independent task (one CTA on a GPU, one
// goroutine task on the CPU). Items are ordered by request, then query tile,
// then KV chunk, then KV head (innermost), and each (request, q tile, chunk,
// head) appears exactly once. Items at index >= WorkCount are padding: all
// fields 0 and Valid 0; Valid[i] = 1 exactly for i < WorkCount.
//
// QTile = max(1, 128/qhead_per_kv) queries, so a tile holds at most 128
// (query, head) rows of one KV head group; NumQTiles = ceil(SeqlenQ/QTile);
// QStride = ceil(SeqlenQ/8)*8.
//
// Chunk (pages_b = max(1, ceil(seqused_k_b/PageSize))): DisableSplit -> no
// split; FixedSplitPages > 0 -> that many pages, no cap on the number of
// splits; otherwise no split when Batch*NumQTiles*Hkv >= Workers or
// max_b pages_b <= 8, else the smallest chunk >= max(16, 128/PageSize) with
// sum_b ceil(pages_b/chunk)*NumQTiles*Hkv <= Workers (binary search); if
// max >= 1.5*avg and avg >= 4, chunk = min(chunk, max(16, floor(avg/4)));
// then chunk >= ceil(max_pages/256). When there is no split, ChunkPages =
// MaxPagesPerSeq (one chunk covers any length) and SplitCounts are all 1.
//
// CUDAExecutor's automatic rule (Workers = SMs) gives every SM an item
// where the context allows: no split when Batch*NumQTiles*Hkv >= Workers
// or max_b pages_b <= minChunk = max(1, ceil(128/PageSize)); otherwise the
// largest chunk >= minChunk with sum_b ceil(pages_b/chunk)*NumQTiles*Hkv >=
// Workers (binary search; items then stay below 2*Workers: at most two
// per SM on average), or minChunk when even minChunk
// gives fewer items than Workers (a short context: the cap); then chunk >=
// ceil(max_pages/256), and no split when chunk >= max_pages. There is no
// skew rule: with at least one item per SM a long request is already cut
// finer than the SMs' share of the batch.
//
// SplitKV says whether items write float32 partials (row OIndptr[b] +
// split*QStride + q of a [PartialRows, Hq, D] buffer, LSE alike) that a
// combine step (contract §5, n = SplitCounts[b]) merges; when false every
// request has one chunk and items write the output directly. SplitKV is true
// whenever FixedSplitPages > 0 (so a request's arithmetic never depends on
// the rest of the batch: batch-invariant mode), and otherwise when some
// request has more than one chunk.
//
// FixedCapacity: with M = ceil(MaxPagesPerSeq/minChunk) chunks per request
// at most (minChunk = FixedSplitPages, or 16 in automatic mode; M = 1 when no
// split can happen under the params: DisableSplit, or automatic mode with
// Batch*NumQTiles*Hkv >= Workers or MaxPagesPerSeq <= 16; for
// CUDAExecutor in automatic mode M = min(ceil(MaxPagesPerSeq/minChunk), 256)
// with its minChunk, and 1 when MaxPagesPerSeq <= minChunk), Capacity =
// Batch*NumQTiles*Hkv*M, OIndptr[b] = b*M*QStride, PartialRows =
// Batch*M*QStride when split is possible (then SplitKV is true on every step,
// even when no request splits) and 0 otherwise. ChunkPages, SplitCounts,
// WorkCount and the items still follow seqused_k: a CUDA-graph executor must
// read them from device buffers. Without FixedCapacity, Capacity =
// max(1, WorkCount), OIndptr is the prefix sum of SplitCounts*QStride and
// PartialRows = OIndptr[Batch] when SplitKV, else 0.
type DecodeSchedule struct {
	Params DecodeParams // the params the schedule was built for

	ChunkPages int  // KV chunk size in pages
	SplitKV    bool // items write partials to be combined
	QTile      int  // queries per q tile
	NumQTiles  int  // ceil(SeqlenQ/QTile) q tiles per request
	QStride    int  // ceil(SeqlenQ/8)*8

	WorkCount int     // valid work items
	Capacity  int     // length of the per-item arrays
	Request   []int32 // [Capacity] request_indices
	QTileIdx  []int32 // [Capacity] qo_tile_indices
	KVTile    []int32 // [Capacity] kv_tile_indices (chunk index)
	KVHead    []int32 // [Capacity] KV head
	Valid     []int32 // [Capacity] block_valid_mask

	SplitCounts []int32 // [Batch] number of KV chunks of each request
	Pages       []int32 // [Batch] pages_b at plan time
	MaxSplits   int     // max_b SplitCounts[b]
	OIndptr     []int32 // [Batch+1] partial row offsets
	PartialRows int     // rows of the partial buffers (0 when !SplitKV)
}

func (p DecodeParams) check() error {
	switch {
	case p.Batch < 0:
		return fmt.Errorf("plan: decode batch = %d: must be >= 0", p.Batch)
	case p.SeqlenQ < 1 || p.SeqlenQ > maxInt32:
		return fmt.Errorf("plan: decode seqlen_q = %d: must be in [1, %d]", p.SeqlenQ, maxInt32)
	case int64(p.Batch)*int64(p.SeqlenQ) > maxInt32:
		return fmt.Errorf("plan: decode batch*seqlen_q = %d*%d: must be <= %d", p.Batch, p.SeqlenQ, maxInt32)
	case p.Hkv < 1 || p.Hkv > maxInt32:
		return fmt.Errorf("plan: decode num_kv_heads = %d: must be >= 1", p.Hkv)
	case p.HQ < 1 || p.HQ > maxInt32 || p.HQ%p.Hkv != 0:
		return fmt.Errorf("plan: decode num_qo_heads = %d: must be a positive multiple of num_kv_heads = %d", p.HQ, p.Hkv)
	case p.PageSize < 1 || p.PageSize > maxInt32:
		return fmt.Errorf("plan: decode page_size = %d: must be >= 1", p.PageSize)
	case p.Workers < 1:
		return fmt.Errorf("plan: decode workers (numSM) = %d: must be >= 1", p.Workers)
	case p.FixedSplitPages < 0 || p.FixedSplitPages > maxInt32:
		return fmt.Errorf("plan: decode fixed_split_size = %d: must be >= 0 (0 = automatic)", p.FixedSplitPages)
	case p.MaxPagesPerSeq < 1 || p.MaxPagesPerSeq > maxInt32:
		return fmt.Errorf("plan: decode page_table.shape[1] (max pages per sequence) = %d: must be >= 1", p.MaxPagesPerSeq)
	case p.Executor != CPUExecutor && p.Executor != CUDAExecutor:
		return fmt.Errorf("plan: decode executor = %v: must be %v or %v", p.Executor, CPUExecutor, CUDAExecutor)
	}
	return nil
}

// checkSequsedK validates seqused_k: one entry per request, each in [0,
// MaxPagesPerSeq*PageSize].
func checkSequsedK(sequsedK []int32, p DecodeParams) error {
	if len(sequsedK) != p.Batch {
		return fmt.Errorf("plan: decode seqused_k has %d elements: expected shape [B] = [%d]", len(sequsedK), p.Batch)
	}
	limit := int64(p.MaxPagesPerSeq) * int64(p.PageSize)
	for b, s := range sequsedK {
		if s < 0 || int64(s) > limit {
			return fmt.Errorf("plan: decode seqused_k[%d] = %d: must be in [0, page_table.shape[1]*page_size = %d*%d = %d] for request %d", b, s, p.MaxPagesPerSeq, p.PageSize, limit, b)
		}
	}
	return nil
}

// pagesOf returns pages_b = max(1, ceil(seqused_k_b/pageSize)).
func pagesOf(seqused int32, pageSize int) int64 {
	return max(1, ceilDiv64(int64(seqused), int64(pageSize)))
}

// decodePages validates seqused_k and returns pages_b = max(1,
// ceil(seqused_k_b/PageSize)) of every request.
func decodePages(dst []int32, sequsedK []int32, p DecodeParams) ([]int32, error) {
	if err := checkSequsedK(sequsedK, p); err != nil {
		return nil, err
	}
	dst = grow(dst, p.Batch)
	for b, s := range sequsedK {
		dst[b] = int32(pagesOf(s, p.PageSize))
	}
	return dst, nil
}

// decodeTiles returns QTile, NumQTiles, QStride.
func decodeTiles(p DecodeParams) (int, int, int) {
	qt := max(1, 128/(p.HQ/p.Hkv))
	return qt, (p.SeqlenQ + qt - 1) / qt, (p.SeqlenQ + 7) / 8 * 8
}

// decodeChunk applies the chunk rules of contract §7 to this step's
// seqused_k (checked); split = false means one chunk per request.
func decodeChunk(sequsedK []int32, p DecodeParams, numQTiles int) (chunk int64, split bool) {
	if p.DisableSplit || p.Batch == 0 {
		return 0, false
	}
	if p.FixedSplitPages > 0 {
		return int64(p.FixedSplitPages), true
	}
	units := mulSat(int64(p.Batch), int64(numQTiles), int64(p.Hkv))
	var maxP, sum int64
	for _, s := range sequsedK {
		n := pagesOf(s, p.PageSize)
		maxP = max(maxP, n)
		sum += n
	}
	cost := func(c int64) int64 {
		var n int64
		for _, s := range sequsedK {
			n += ceilDiv64(pagesOf(s, p.PageSize), c)
		}
		return mulSat(n, int64(numQTiles), int64(p.Hkv))
	}
	if p.Executor == CUDAExecutor {
		return gpuChunk(p, units, maxP, cost)
	}
	if units >= int64(p.Workers) || maxP <= 8 {
		return 0, false
	}
	lo := max(int64(autoMinChunkPages), 128/int64(p.PageSize))
	hi := max(lo, maxP) // cost(hi) = units < Workers
	for lo < hi {
		mid := lo + (hi-lo)/2
		if cost(mid) <= int64(p.Workers) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	chunk = lo
	b := int64(p.Batch)
	if 2*maxP*b >= 3*sum && sum >= 4*b {
		chunk = min(chunk, max(autoMinChunkPages, sum/(4*b)))
	}
	chunk = max(chunk, ceilDiv64(maxP, maxAutoSplits))
	if chunk >= maxP {
		return 0, false
	}
	return chunk, true
}

// gpuMinChunk is CUDAExecutor's smallest automatic chunk in pages.
func gpuMinChunk(pageSize int) int64 {
	return max(1, ceilDiv64(gpuMinChunkTokens, int64(pageSize)))
}

// gpuChunk is CUDAExecutor's automatic chunk rule (see DecodeSchedule):
// the largest chunk that still gives every one of the Workers SMs an item.
// cost(c), the item count at chunk c, does not increase with c.
func gpuChunk(p DecodeParams, units, maxP int64, cost func(int64) int64) (int64, bool) {
	minC := gpuMinChunk(p.PageSize)
	if units >= int64(p.Workers) || maxP <= minC {
		return 0, false
	}
	w := int64(p.Workers)
	chunk := minC
	if cost(minC) >= w {
		lo, hi := minC, maxP // cost(lo) >= w > units = cost(maxP)
		for lo < hi {
			mid := lo + (hi-lo+1)/2
			if cost(mid) >= w {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		chunk = lo
	}
	chunk = max(chunk, ceilDiv64(maxP, maxAutoSplits))
	if chunk >= maxP {
		return 0, false
	}
	return chunk, true
}

// decodeMaxChunks is the FixedCapacity bound on chunks per request and
// whether a split can happen under p at all.
func decodeMaxChunks(p DecodeParams, numQTiles int) (int64, bool) {
	if p.DisableSplit {
		return 1, false
	}
	if p.FixedSplitPages > 0 {
		return ceilDiv64(int64(p.MaxPagesPerSeq), int64(p.FixedSplitPages)), true
	}
	units := mulSat(int64(p.Batch), int64(numQTiles), int64(p.Hkv))
	if p.Executor == CUDAExecutor {
		minC := gpuMinChunk(p.PageSize)
		if units >= int64(p.Workers) || int64(p.MaxPagesPerSeq) <= minC {
			return 1, false
		}
		return min(ceilDiv64(int64(p.MaxPagesPerSeq), minC), maxAutoSplits), true
	}
	if units >= int64(p.Workers) || p.MaxPagesPerSeq <= autoMinChunkPages {
		return 1, false
	}
	return ceilDiv64(int64(p.MaxPagesPerSeq), autoMinChunkPages), true
}

// FixedDecodeSizes returns the Capacity and PartialRows that
// BuildDecodeSchedule gives every schedule of params p in FixedCapacity mode
// (whatever p.FixedCapacity says), without building one and without
// allocating: a graph can size its buffers from it. The schedule itself
// needs 20*Capacity + 16*Batch + 4 bytes, the float32 partials of an
// executor 4*PartialRows*HQ*(D+1) bytes.
func FixedDecodeSizes(p DecodeParams) (capacity, partialRows int, err error) {
	if err := p.check(); err != nil {
		return 0, 0, err
	}
	return fixedSizes(p)
}

// fixedSizes is FixedDecodeSizes for checked params.
func fixedSizes(p DecodeParams) (capacity, partialRows int, err error) {
	_, nqt, qstride := decodeTiles(p)
	maxChunks, splitPossible := decodeMaxChunks(p, nqt)
	B := int64(p.Batch)
	c := max(mulSat(B, int64(nqt), int64(p.Hkv), maxChunks), 1)
	r := mulSat(B, maxChunks, int64(qstride))
	if c > maxInt32 || r > maxInt32 {
		return 0, 0, fmt.Errorf("plan: decode fixed capacity = %d*%d*%d*%d items: must be <= %d (raise fixed_split_size or lower page_table.shape[1])", p.Batch, nqt, p.Hkv, maxChunks, maxInt32)
	}
	if !splitPossible {
		r = 0
	}
	return int(c), int(r), nil
}

// decodeShape is what BuildDecodeSchedule derives from seqused_k and the
// params before it fills any buffer.
type decodeShape struct {
	qt, nqt, qstride int
	chunk            int64 // KV chunk in pages
	splitKV          bool
	maxChunks        int64 // FixedCapacity: o_indptr step in chunks per request
	work, maxSplits  int64
	capacity         int64
	partialRows      int64
}

// shapeDecode checks p and seqused_k and computes the schedule's sizes
// without allocating.
func shapeDecode(sequsedK []int32, p DecodeParams) (decodeShape, error) {
	var sh decodeShape
	if err := p.check(); err != nil {
		return sh, err
	}
	if err := checkSequsedK(sequsedK, p); err != nil {
		return sh, err
	}
	sh.qt, sh.nqt, sh.qstride = decodeTiles(p)
	chunk, split := decodeChunk(sequsedK, p, sh.nqt)
	maxChunks, splitPossible := decodeMaxChunks(p, sh.nqt)
	if !split {
		chunk = int64(p.MaxPagesPerSeq)
	}
	sh.chunk = chunk
	perReq := mulSat(int64(sh.nqt), int64(p.Hkv)) // items per request and chunk
	var splitRows int64
	for b, s := range sequsedK {
		c := ceilDiv64(pagesOf(s, p.PageSize), chunk)
		sh.maxSplits = max(sh.maxSplits, c)
		sh.work = addSat(sh.work, mulSat(c, perReq))
		if sh.work > maxInt32 {
			return sh, fmt.Errorf("plan: decode schedule needs more than %d work items (request %d, chunk %d pages)", maxInt32, b, chunk)
		}
		splitRows = addSat(splitRows, mulSat(c, int64(sh.qstride)))
	}
	if p.FixedCapacity {
		sh.splitKV = splitPossible
		c, r, err := fixedSizes(p)
		if err != nil {
			return sh, err
		}
		sh.capacity, sh.partialRows, sh.maxChunks = int64(c), int64(r), maxChunks
	} else {
		sh.splitKV = p.FixedSplitPages > 0 && !p.DisableSplit || sh.maxSplits > 1
		sh.capacity = sh.work
		if sh.splitKV {
			sh.partialRows = splitRows
			if sh.partialRows > maxInt32 {
				return sh, fmt.Errorf("plan: decode partial rows = %d: must be <= %d", sh.partialRows, maxInt32)
			}
		}
	}
	sh.capacity = max(sh.capacity, 1)
	if sh.work > sh.capacity {
		return sh, fmt.Errorf("plan: decode schedule needs %d work items, capacity is %d", sh.work, sh.capacity)
	}
	return sh, nil
}

// DecodeSizes returns the Capacity, PartialRows and MaxSplits that
// BuildDecodeSchedule gives for seqused_k and p (or its error), without
// building the schedule and without allocating: a caller can check the
// memory a schedule and its executor's partials will take before any of it
// exists (see FixedDecodeSizes for the byte counts).
func DecodeSizes(sequsedK []int32, p DecodeParams) (capacity, partialRows, maxSplits int, err error) {
	sh, err := shapeDecode(sequsedK, p)
	if err != nil {
		return 0, 0, 0, err
	}
	return int(sh.capacity), int(sh.partialRows), int(sh.maxSplits), nil
}

// BuildDecodeSchedule builds the decode schedule for seqused_k (one entry per
// request, each in [0, MaxPagesPerSeq*PageSize]) into dst, reusing its
// buffers when their capacity fits (dst may be nil). See DecodeSchedule for
// the rules. On error dst's contents are unspecified.
func BuildDecodeSchedule(dst *DecodeSchedule, sequsedK []int32, p DecodeParams) (*DecodeSchedule, error) {
	sh, err := shapeDecode(sequsedK, p)
	if err != nil {
		return nil, err
	}
	if dst == nil {
		dst = &DecodeSchedule{}
	}
	dst.Pages, _ = decodePages(dst.Pages, sequsedK, p) // checked by shapeDecode
	dst.SplitCounts = grow(dst.SplitCounts, p.Batch)
	for b, n := range dst.Pages {
		dst.SplitCounts[b] = int32(ceilDiv64(int64(n), sh.chunk))
	}
	dst.Params = p
	dst.ChunkPages = int(sh.chunk)
	dst.SplitKV = sh.splitKV
	dst.QTile, dst.NumQTiles, dst.QStride = sh.qt, sh.nqt, sh.qstride
	dst.WorkCount, dst.Capacity = int(sh.work), int(sh.capacity)
	dst.MaxSplits = int(sh.maxSplits)
	dst.PartialRows = int(sh.partialRows)
	dst.OIndptr = grow(dst.OIndptr, p.Batch+1)
	clear(dst.OIndptr)
	if p.FixedCapacity || sh.splitKV {
		// Checked by shapeDecode: the last offset, partialRows, fits in int32.
		for b := 0; b < p.Batch; b++ {
			step := sh.maxChunks
			if !p.FixedCapacity {
				step = int64(dst.SplitCounts[b])
			}
			dst.OIndptr[b+1] = dst.OIndptr[b] + int32(step*int64(sh.qstride))
		}
	}
	n := int(sh.capacity)
	dst.Request = grow(dst.Request, n)
	dst.QTileIdx = grow(dst.QTileIdx, n)
	dst.KVTile = grow(dst.KVTile, n)
	dst.KVHead = grow(dst.KVHead, n)
	dst.Valid = grow(dst.Valid, n)
	i := 0
	for b := 0; b < p.Batch; b++ {
		for q := 0; q < sh.nqt; q++ {
			for kv := int32(0); kv < dst.SplitCounts[b]; kv++ {
				for h := 0; h < p.Hkv; h++ {
					dst.Request[i], dst.QTileIdx[i], dst.KVTile[i], dst.KVHead[i], dst.Valid[i] = int32(b), int32(q), kv, int32(h), 1
					i++
				}
			}
		}
	}
	clear(dst.Request[i:])
	clear(dst.QTileIdx[i:])
	clear(dst.KVTile[i:])
	clear(dst.KVHead[i:])
	clear(dst.Valid[i:])
	return dst, nil
}

// ItemQueries, ItemPages and PartialRow are accessors for a built or
// validated schedule; i must be in [0, Capacity) and b in [0, Batch).

// ItemQueries returns the batch-local query range [begin, end) of item i
// (the global query rows are Request*SeqlenQ + begin .. end-1).
func (s *DecodeSchedule) ItemQueries(i int) (begin, end int) {
	begin = int(s.QTileIdx[i]) * s.QTile
	return begin, min(begin+s.QTile, s.Params.SeqlenQ)
}

// ItemPages returns the logical page range [begin, end) of item i for its
// request's current seqused_k, clamped to pages = max(1,
// ceil(seqused/PageSize)); begin == end (an empty chunk: LSE -inf, no
// contribution) happens only when seqused_k shrank after planning. Keys at
// token positions >= seqused are masked by the executor.
func (s *DecodeSchedule) ItemPages(i int, seqused int32) (begin, end int) {
	pages := int(max(1, ceilDiv64(int64(max(seqused, 0)), int64(max(s.Params.PageSize, 1)))))
	begin = min(int(s.KVTile[i])*s.ChunkPages, pages)
	return begin, min(begin+s.ChunkPages, pages)
}

// PartialRow is the partial-buffer row of (request b, split, batch-local
// query q): OIndptr[b] + split*QStride + q.
func (s *DecodeSchedule) PartialRow(b, split, q int) int {
	return int(s.OIndptr[b]) + split*s.QStride + q
}

// ValidateDecodeSchedule checks a reused schedule against p and a new
// seqused_k before it is executed (stale-plan detection). It refuses: params
// different from the ones the schedule was built with; seqused_k of the
// wrong length or outside [0, MaxPagesPerSeq*PageSize]; a request whose
// pages outgrow what its chunks cover (SplitCounts[b]*ChunkPages); and any
// inconsistent content (tile sizes, buffer lengths, WorkCount outside
// [0, Capacity], Valid not 1 exactly below WorkCount, item indices out of
// range, items not covering every (request, q tile, chunk, head) exactly
// once, overlapping or out-of-range partial rows). A request whose length
// shrank is accepted: its surplus chunks are empty (see ItemPages).
func ValidateDecodeSchedule(s *DecodeSchedule, sequsedK []int32, p DecodeParams) error {
	if s == nil {
		return fmt.Errorf("plan: decode schedule is nil")
	}
	if err := p.check(); err != nil {
		return err
	}
	if s.Params != p {
		return fmt.Errorf("plan: decode schedule is stale: %s: re-plan", paramsDiff(s.Params, p))
	}
	pages, err := decodePages(nil, sequsedK, p)
	if err != nil {
		return err
	}
	qt, nqt, qstride := decodeTiles(p)
	if s.QTile != qt || s.NumQTiles != nqt || s.QStride != qstride {
		return fmt.Errorf("plan: decode schedule (QTile, NumQTiles, QStride) = (%d, %d, %d): expected (%d, %d, %d)", s.QTile, s.NumQTiles, s.QStride, qt, nqt, qstride)
	}
	if s.ChunkPages < 1 || s.ChunkPages > maxInt32 {
		return fmt.Errorf("plan: decode schedule ChunkPages = %d: must be in [1, %d]", s.ChunkPages, maxInt32)
	}
	if s.Capacity < 1 || s.Capacity > maxInt32 || len(s.Request) != s.Capacity || len(s.QTileIdx) != s.Capacity ||
		len(s.KVTile) != s.Capacity || len(s.KVHead) != s.Capacity || len(s.Valid) != s.Capacity {
		return fmt.Errorf("plan: decode schedule capacity = %d: request/qo_tile/kv_tile/kv_head/valid lengths (%d, %d, %d, %d, %d) must all equal it (>= 1)",
			s.Capacity, len(s.Request), len(s.QTileIdx), len(s.KVTile), len(s.KVHead), len(s.Valid))
	}
	if s.WorkCount < 0 || s.WorkCount > s.Capacity {
		return fmt.Errorf("plan: decode schedule work_count = %d: must be in [0, capacity = %d]", s.WorkCount, s.Capacity)
	}
	if len(s.SplitCounts) != p.Batch || len(s.OIndptr) != p.Batch+1 {
		return fmt.Errorf("plan: decode schedule split_counts/o_indptr have %d/%d elements: expected [%d]/[%d]", len(s.SplitCounts), len(s.OIndptr), p.Batch, p.Batch+1)
	}
	perReq := mulSat(int64(nqt), int64(p.Hkv))
	first := make([]int64, p.Batch+1) // first item index of request b in the canonical order
	for b, c := range s.SplitCounts {
		if c < 1 || (!s.SplitKV && c != 1) {
			return fmt.Errorf("plan: decode schedule split_counts[%d] = %d: must be >= 1 (== 1 without split-KV)", b, c)
		}
		if int64(c)*int64(s.ChunkPages) < int64(pages[b]) {
			return fmt.Errorf("plan: decode seqused_k[%d] = %d needs %d pages but the plan covers %d pages (%d chunks of %d) for request %d: stale plan, re-plan", b, sequsedK[b], pages[b], int64(c)*int64(s.ChunkPages), c, s.ChunkPages, b)
		}
		first[b+1] = addSat(first[b], mulSat(int64(c), perReq))
		if first[b+1] > maxInt32 {
			return fmt.Errorf("plan: decode schedule split_counts[%d] = %d: too many work items", b, c)
		}
		if s.SplitKV {
			o := int64(s.OIndptr[b])
			if o < 0 || o+int64(c)*int64(qstride) > int64(s.OIndptr[b+1]) {
				return fmt.Errorf("plan: decode schedule o_indptr[%d] = %d: request %d's %d splits of %d rows must fit in [o_indptr[%d], o_indptr[%d] = %d)", b, o, b, c, qstride, b, b+1, s.OIndptr[b+1])
			}
		}
	}
	if s.SplitKV && (s.PartialRows < 0 || int64(s.OIndptr[p.Batch]) > int64(s.PartialRows) || s.PartialRows > maxInt32) {
		return fmt.Errorf("plan: decode schedule o_indptr[%d] = %d: must be <= partial_rows = %d", p.Batch, s.OIndptr[p.Batch], s.PartialRows)
	}
	if int64(s.WorkCount) != first[p.Batch] {
		return fmt.Errorf("plan: decode schedule work_count = %d: expected %d from split_counts", s.WorkCount, first[p.Batch])
	}
	seen := make([]bool, s.WorkCount)
	for i := 0; i < s.Capacity; i++ {
		if i >= s.WorkCount {
			if s.Valid[i] != 0 {
				return fmt.Errorf("plan: decode schedule block_valid_mask[%d] = %d: expected 0 at or after work_count = %d", i, s.Valid[i], s.WorkCount)
			}
			continue
		}
		b, q, kv, h := s.Request[i], s.QTileIdx[i], s.KVTile[i], s.KVHead[i]
		if s.Valid[i] != 1 {
			return fmt.Errorf("plan: decode schedule block_valid_mask[%d] = %d: expected 1 below work_count = %d", i, s.Valid[i], s.WorkCount)
		}
		if b < 0 || int(b) >= p.Batch || q < 0 || int(q) >= nqt || h < 0 || int(h) >= p.Hkv || kv < 0 || kv >= s.SplitCounts[b] {
			return fmt.Errorf("plan: decode schedule item %d (request, qo_tile, kv_tile, kv_head) = (%d, %d, %d, %d): out of range", i, b, q, kv, h)
		}
		k := first[b] + (int64(q)*int64(s.SplitCounts[b])+int64(kv))*int64(p.Hkv) + int64(h)
		if seen[k] {
			return fmt.Errorf("plan: decode schedule item %d (request, qo_tile, kv_tile, kv_head) = (%d, %d, %d, %d): duplicate", i, b, q, kv, h)
		}
		seen[k] = true
	}
	return nil
}

// paramsDiff names the first field where the planned params a differ from b.
func paramsDiff(a, b DecodeParams) string {
	type f struct {
		name string
		x, y any
	}
	for _, d := range []f{
		{"Batch", a.Batch, b.Batch}, {"SeqlenQ", a.SeqlenQ, b.SeqlenQ}, {"HQ", a.HQ, b.HQ},
		{"Hkv", a.Hkv, b.Hkv}, {"PageSize", a.PageSize, b.PageSize}, {"Workers", a.Workers, b.Workers},
		{"FixedSplitPages", a.FixedSplitPages, b.FixedSplitPages}, {"DisableSplit", a.DisableSplit, b.DisableSplit},
		{"MaxPagesPerSeq", a.MaxPagesPerSeq, b.MaxPagesPerSeq}, {"FixedCapacity", a.FixedCapacity, b.FixedCapacity},
		{"Executor", a.Executor, b.Executor},
	} {
		if d.x != d.y {
			return fmt.Sprintf("%s planned as %v, got %v", d.name, d.x, d.y)
		}
	}
	return "params differ"
}
