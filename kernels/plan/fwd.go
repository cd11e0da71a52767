package plan

import "fmt"

// MaxSlotQueries bounds total_q for the qsplit packing q_idx | slot<<24.
const MaxSlotQueries = 1 << 24

// MaxSlotTopK bounds topK for the qsplit packing (slot < 128 keeps the packed
// value a non-negative int32).
const MaxSlotTopK = 127

// MetaFields is the number of int32 fields of one forward work item.
const MetaFields = 6

// Field offsets inside one forward work item of FwdSchedule.Metadata.
const (
	MetaHead   = 0 // head_kv
	MetaRow    = 1 // CSR row
	MetaQBegin = 2 // first entry, relative to the row's CSR slice
	MetaQCount = 3 // number of entries
	MetaBatch  = 4 // sequence of the row
	MetaBlock  = 5 // batch-local KV block of the row
)

// FwdParams are the shapes the forward schedule depends on. Workers plays
// the reference's numSM (capped by usable_SM_count) and must be >= 1.
// QheadPerKV must be in [1, 128] (the reference allows {1, 2, 4, 8, 16}).
type FwdParams struct {
	TotalQ     int // query tokens over the batch
	Hkv        int // KV heads
	QheadPerKV int // query heads per KV head
	TopK       int // selected blocks per query
	BlkKV      int // keys per block
	Workers    int // the reference's numSM, >= 1
}

func (p FwdParams) check() error {
	switch {
	case p.TotalQ < 0 || p.TotalQ >= MaxSlotQueries:
		return fmt.Errorf("plan: total_q = %d: must be in [0, %d) for the qsplit packing", p.TotalQ, MaxSlotQueries)
	case p.Hkv < 1 || p.Hkv > maxInt32:
		return fmt.Errorf("plan: head_kv = %d: must be >= 1", p.Hkv)
	case p.QheadPerKV < 1 || p.QheadPerKV > 128:
		return fmt.Errorf("plan: qhead_per_kv = %d: must be in [1, 128]", p.QheadPerKV)
	case p.TopK < 1 || p.TopK > MaxSlotTopK:
		return fmt.Errorf("plan: topK = %d: must be in [1, %d] for the qsplit packing", p.TopK, MaxSlotTopK)
	case p.BlkKV < 1 || p.BlkKV > maxInt32:
		return fmt.Errorf("plan: blk_kv = %d: must be >= 1", p.BlkKV)
	case p.Workers < 1:
		return fmt.Errorf("plan: workers (numSM) = %d: must be >= 1", p.Workers)
	}
	return nil
}

// ceilDiv64 returns ceil(a/b) for a >= 0 and b >= 1 without overflow.
func ceilDiv64(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// FwdTarget is the target chunk size in queries of contract §3, with
// g = 128/qhead_per_kv:
//
//	tg     = min(512, max(1, ceil(ceil(total_q*topK*Hkv / g) / (2*numSM))))
//	target = round_up(min(max(tg*g, g), max(g, 2*topK*blk_kv)), g)
//
// Out-of-range parameters are clamped to 1 so the result is always >= 1.
func FwdTarget(p FwdParams) int {
	qpk := max(int64(p.QheadPerKV), 1)
	g := max(128/qpk, 1)
	workers := max(int64(p.Workers), 1)
	n := max(int64(p.TotalQ), 0) * max(int64(p.TopK), 0) * max(int64(p.Hkv), 0)
	tg := min(512, max(1, ceilDiv64(ceilDiv64(n, g), mulSat(2, workers))))
	lim := max(g, 2*max(int64(p.TopK), 1)*max(int64(p.BlkKV), 1))
	t := min(max(tg*g, g), lim)
	return int(ceilDiv64(t, g) * g)
}

// FwdCapacity is the work-item capacity of contract §3:
// max(1, totalRows*Hkv + ceil(total_q*topK*Hkv / target)). It bounds the
// item count of any schedule over a CSR with at most topK blocks per
// (query, head).
func FwdCapacity(totalRows int, p FwdParams) int {
	t := int64(FwdTarget(p))
	n := max(int64(p.TotalQ), 0) * max(int64(p.TopK), 0) * max(int64(p.Hkv), 0)
	c := max(int64(totalRows), 0)*max(int64(p.Hkv), 0) + ceilDiv64(n, t)
	return int(max(c, 1))
}

// FwdSchedule is the forward ("prepare scheduler") schedule of contract §3.
//
// Metadata holds Capacity items of MetaFields int32 each:
// (head_kv, row, q_begin, q_count, batch, kv_block), where q_begin and q_count
// index into the CSR row's slice QIdx[h][RowPtr[h][row]:RowPtr[h][row+1]].
// Items are ordered by head, then row ascending, then chunk; empty rows have
// no item; each row is cut greedily into chunks of FwdTarget queries, the
// last one shorter. Items at index >= WorkCount are all zero.
//
// QSplit has the layout of CSR.QIdx: each valid entry is q_idx | slot<<24
// (q_idx batch-local), -1 elsewhere. The slot of a (query, head)'s block is
// its rank among that query's selected blocks in ascending block order, so
// slots are 0..n-1 and deterministic. SplitCounts is [TotalQ][Hkv] indexed by
// global query row: n for that (query, head); 0 for rows outside every
// sequence.
type FwdSchedule struct {
	Capacity    int     // length of Metadata in items
	Metadata    []int32 // [Capacity][MetaFields]
	WorkCount   int32   // valid items (reference work_count[0])
	QSplit      []int32 // same shape as CSR.QIdx
	SplitCounts []int32 // [TotalQ][Hkv]
	Target      int     // chunk size used, FwdTarget(p)
}

// BuildFwdSchedule validates c (ValidateCSR) and builds the forward schedule
// into dst, reusing its buffers when their capacity fits (dst may be nil).
// p must agree with c (Hkv) and rows (BlkKV). It also requires TotalQ <
// 1<<24 and TopK <= 127 (slot packing).
func BuildFwdSchedule(dst *FwdSchedule, c *CSR, rows *Rows, cuQ []int32, p FwdParams) (*FwdSchedule, error) {
	return BuildFwdScheduleInto(nil, dst, c, rows, cuQ, p)
}

// BuildFwdScheduleInto is BuildFwdSchedule validating c with the scratch
// of x (nil: a fresh one): the same schedule and errors, and no
// allocation once x and dst have held a build of at least this size,
// except to format an error.
func BuildFwdScheduleInto(x *FwdScheduleScratch, dst *FwdSchedule, c *CSR, rows *Rows, cuQ []int32, p FwdParams) (*FwdSchedule, error) {
	var cs *CSRScratch
	if x != nil {
		cs = &x.csr
	}
	if err := checkFwdInputsInto(cs, c, rows, cuQ, p); err != nil {
		return nil, err
	}
	target := FwdTarget(p)
	capacity := FwdCapacity(rows.Total, p)
	if int64(capacity)*MetaFields > maxInt32 {
		return nil, fmt.Errorf("plan: scheduler_metadata capacity = %d items: must be <= %d", capacity, maxInt32/MetaFields)
	}
	if int64(p.TotalQ)*int64(p.Hkv) > maxInt32 {
		return nil, fmt.Errorf("plan: split_counts would have total_q*Hkv = %d*%d elements: must be <= %d", p.TotalQ, p.Hkv, maxInt32)
	}
	if dst == nil {
		dst = &FwdSchedule{}
	}
	dst.Capacity = capacity
	dst.Target = target
	dst.Metadata = grow(dst.Metadata, capacity*MetaFields)
	dst.QSplit = grow(dst.QSplit, len(c.QIdx))
	dst.SplitCounts = grow(dst.SplitCounts, p.TotalQ*p.Hkv)
	clear(dst.Metadata)
	clear(dst.SplitCounts)
	for i := range dst.QSplit {
		dst.QSplit[i] = -1
	}
	tr := c.TotalRows
	items := 0
	for h := 0; h < c.Hkv; h++ {
		rp := c.RowPtr[h*(tr+1) : (h+1)*(tr+1)]
		qi := c.QIdx[h*c.Stride : (h+1)*c.Stride]
		qs := dst.QSplit[h*c.Stride : (h+1)*c.Stride]
		for r := 0; r < tr; r++ {
			b := rows.Batch[r]
			for e := rp[r]; e < rp[r+1]; e++ {
				g := int(cuQ[b]+qi[e])*p.Hkv + h
				slot := dst.SplitCounts[g]
				dst.SplitCounts[g] = slot + 1
				qs[e] = qi[e] | slot<<24
			}
			n := int(rp[r+1] - rp[r])
			for beg := 0; beg < n; beg += target {
				if items >= capacity {
					return nil, fmt.Errorf("plan: forward schedule needs more than capacity = %d items", capacity)
				}
				m := dst.Metadata[items*MetaFields : (items+1)*MetaFields]
				m[MetaHead] = int32(h)
				m[MetaRow] = int32(r)
				m[MetaQBegin] = int32(beg)
				m[MetaQCount] = int32(min(target, n-beg))
				m[MetaBatch] = b
				m[MetaBlock] = rows.Block[r]
				items++
			}
		}
	}
	dst.WorkCount = int32(items)
	return dst, nil
}

// checkFwdInputsInto checks the parameters, the CSR and rows of a forward
// schedule, validating c with scratch s (nil: a fresh one).
func checkFwdInputsInto(s *CSRScratch, c *CSR, rows *Rows, cuQ []int32, p FwdParams) error {
	if err := p.check(); err != nil {
		return err
	}
	if c == nil {
		return fmt.Errorf("plan: k2q CSR is nil")
	}
	if rows == nil {
		return fmt.Errorf("plan: rows is nil")
	}
	if c.Hkv != p.Hkv {
		return fmt.Errorf("plan: k2q_row_ptr head dimension = %d: expected head_kv = %d", c.Hkv, p.Hkv)
	}
	if rows.BlkKV != p.BlkKV {
		return fmt.Errorf("plan: blk_kv = %d: rows were built with blk_kv = %d", p.BlkKV, rows.BlkKV)
	}
	if s == nil {
		s = new(CSRScratch)
	}
	return ValidateCSRInto(s, c, p.TotalQ, p.TopK, cuQ, rows)
}

// ValidateFwdSchedule validates a prebuilt or reused schedule against the CSR
// and shapes, like the reference's _validate_fwd_schedule (shapes), plus
// content checks so an executor can trust every index. It validates c too
// (ValidateCSR), so callers need not call ValidateCSR separately.
//
// Checks: len(Metadata) = Capacity*6 with Capacity >= 1; WorkCount in
// [0, Capacity]; every valid item's head < Hkv, row < total_rows, batch and
// kv_block equal to the row's, q_begin >= 0, q_count >= 0, and
// [q_begin, q_begin+q_count) inside the row's CSR slice; the valid items
// cover every CSR entry exactly once; len(QSplit) = len(QIdx) and
// len(SplitCounts) = TotalQ*Hkv; every valid QSplit entry carries the same
// q_idx as QIdx and a slot < SplitCounts[q][h] <= TopK; each (q, h) uses each
// slot 0..SplitCounts[q][h]-1 exactly once. The chunk size and item order
// are not checked.
func ValidateFwdSchedule(s *FwdSchedule, c *CSR, rows *Rows, cuQ []int32, p FwdParams) error {
	return ValidateFwdScheduleInto(nil, s, c, rows, cuQ, p)
}

// FwdScheduleScratch is the reusable scratch of ValidateFwdScheduleInto.
// The zero value is ready to use; it grows to the largest CSR and
// total_q * Hkv it has checked.
type FwdScheduleScratch struct {
	csr     CSRScratch
	covered []bool      // per CSR entry: a work item covers it
	masks   [][2]uint64 // per (q, h): the slots used
	used    []int32     // per (q, h): how many
}

// ValidateFwdScheduleInto is ValidateFwdSchedule with its scratch taken
// from x (nil: a fresh one): the same checks and the same errors, and no
// allocation once x has held a call of at least this size, except to
// format an error.
func ValidateFwdScheduleInto(x *FwdScheduleScratch, s *FwdSchedule, c *CSR, rows *Rows, cuQ []int32, p FwdParams) error {
	if x == nil {
		x = new(FwdScheduleScratch)
	}
	if s == nil {
		return fmt.Errorf("plan: forward schedule is nil")
	}
	if err := checkFwdInputsInto(&x.csr, c, rows, cuQ, p); err != nil {
		return err
	}
	if s.Capacity < 1 || int64(len(s.Metadata)) != int64(s.Capacity)*MetaFields {
		return fmt.Errorf("plan: schedule.scheduler_metadata has %d elements for capacity %d: must have shape [capacity, 6] with capacity >= 1", len(s.Metadata), s.Capacity)
	}
	if s.WorkCount < 0 || int(s.WorkCount) > s.Capacity {
		return fmt.Errorf("plan: schedule.work_count[0] = %d: must be in [0, capacity = %d]", s.WorkCount, s.Capacity)
	}
	if len(s.QSplit) != len(c.QIdx) {
		return fmt.Errorf("plan: schedule.qsplit_indices has %d elements: shape must match k2q_q_indices [%d, %d]", len(s.QSplit), c.Hkv, c.Stride)
	}
	if int64(len(s.SplitCounts)) != int64(p.TotalQ)*int64(p.Hkv) {
		return fmt.Errorf("plan: schedule.split_counts has %d elements: expected shape (%d, %d)", len(s.SplitCounts), p.TotalQ, p.Hkv)
	}
	tr := c.TotalRows
	covered := zeroed(&x.covered, len(c.QIdx))
	for i := 0; i < int(s.WorkCount); i++ {
		m := s.Metadata[i*MetaFields : (i+1)*MetaFields]
		h, r := m[MetaHead], m[MetaRow]
		if h < 0 || int(h) >= c.Hkv {
			return fmt.Errorf("plan: schedule.scheduler_metadata[%d].head_kv = %d: out of range [0, %d)", i, h, c.Hkv)
		}
		if r < 0 || int(r) >= tr {
			return fmt.Errorf("plan: schedule.scheduler_metadata[%d].row = %d: out of range [0, %d)", i, r, tr)
		}
		if m[MetaBatch] != rows.Batch[r] || m[MetaBlock] != rows.Block[r] {
			return fmt.Errorf("plan: schedule.scheduler_metadata[%d] (batch, kv_block) = (%d, %d): expected (%d, %d) for row %d", i, m[MetaBatch], m[MetaBlock], rows.Batch[r], rows.Block[r], r)
		}
		lo, hi := c.RowPtr[int(h)*(tr+1)+int(r)], c.RowPtr[int(h)*(tr+1)+int(r)+1]
		beg, cnt := int64(m[MetaQBegin]), int64(m[MetaQCount])
		if beg < 0 || cnt < 0 || beg+cnt > int64(hi-lo) {
			return fmt.Errorf("plan: schedule.scheduler_metadata[%d] (q_begin, q_count) = (%d, %d): must lie inside [0, %d), the CSR slice of row %d, head %d", i, beg, cnt, hi-lo, r, h)
		}
		base := int(h)*c.Stride + int(lo)
		for e := base + int(beg); e < base+int(beg+cnt); e++ {
			if covered[e] {
				return fmt.Errorf("plan: schedule.scheduler_metadata[%d]: CSR entry %d of row %d, head %d is covered twice", i, e-base, r, h)
			}
			covered[e] = true
		}
	}
	// Slot checks: one 128-bit mask per (q, h).
	masks, used := zeroed(&x.masks, len(s.SplitCounts)), zeroed(&x.used, len(s.SplitCounts))
	for h := 0; h < c.Hkv; h++ {
		rp := c.RowPtr[h*(tr+1) : (h+1)*(tr+1)]
		for r := 0; r < tr; r++ {
			b := rows.Batch[r]
			for e := rp[r]; e < rp[r+1]; e++ {
				k := h*c.Stride + int(e)
				if !covered[k] {
					return fmt.Errorf("plan: schedule.scheduler_metadata: CSR entry %d of row %d, head %d is covered by no work item", e-rp[r], r, h)
				}
				v, q := s.QSplit[k], c.QIdx[k]
				if v < 0 || v&(1<<24-1) != q {
					return fmt.Errorf("plan: schedule.qsplit_indices[h=%d, %d] = %d: expected q_idx %d | slot<<24", h, e, v, q)
				}
				g := int(cuQ[b]+q)*p.Hkv + h
				slot := v >> 24
				n := s.SplitCounts[g]
				if n < 0 || int(n) > p.TopK {
					return fmt.Errorf("plan: schedule.split_counts[%d, %d] = %d: must be in [0, topK = %d]", cuQ[b]+q, h, n, p.TopK)
				}
				if slot >= n {
					return fmt.Errorf("plan: schedule.qsplit_indices[h=%d, %d]: slot %d of query row %d must be < split_counts[%d, %d] = %d", h, e, slot, cuQ[b]+q, cuQ[b]+q, h, n)
				}
				w, bit := slot/64, uint64(1)<<(slot%64)
				if masks[g][w]&bit != 0 {
					return fmt.Errorf("plan: schedule.qsplit_indices[h=%d, %d]: slot %d of query row %d is used twice", h, e, slot, cuQ[b]+q)
				}
				masks[g][w] |= bit
				used[g]++
			}
		}
	}
	for g, n := range s.SplitCounts {
		if n != used[g] {
			return fmt.Errorf("plan: schedule.split_counts[%d, %d] = %d: expected %d, the number of blocks that query row selects", g/p.Hkv, g%p.Hkv, n, used[g])
		}
	}
	return nil
}

// zeroed returns n zero elements of *buf, grown (and kept) as needed.
func zeroed[T any](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n)
	}
	*buf = (*buf)[:n]
	clear(*buf)
	return *buf
}
