package cuda

// A host emulation of the kernels' scheduling, addressing, masking and
// combine index arithmetic (sparse_fwd.cu, decode.cu including the sparse
// decode block walk, combine.cu), line for line in float64, checked against
// the direct reference. It cannot catch
// device-side arithmetic bugs, but it pins every index formula the kernels
// use to the plan package's real schedules, on machines without a GPU.

import (
	"fmt"
	"math"
	"testing"

	"github.com/sparseattn/msa/kernels/plan"
)

type partialSet struct {
	o       map[int][]float64 // partial row -> D values
	lse     map[int]float64
	written map[int]int
}

func newPartialSet() *partialSet {
	return &partialSet{o: map[int][]float64{}, lse: map[int]float64{}, written: map[int]int{}}
}

func (p *partialSet) put(row int, o []float64, lse float64) {
	p.o[row], p.lse[row] = o, lse
	p.written[row]++
}

// combineEmu is combine_impl for one (q, hq) given the partial rows of its n slots.
func combineEmu(ps *partialSet, rows []int, d int) ([]float64, float64) {
	m := math.Inf(-1)
	for _, r := range rows {
		m = math.Max(m, ps.lse[r])
	}
	if math.IsInf(m, -1) {
		m = 0
	}
	var S float64
	for _, r := range rows {
		S += math.Exp(ps.lse[r] - m)
	}
	o := make([]float64, d)
	if len(rows) == 0 || !(S > 0) {
		return o, math.Inf(-1)
	}
	for _, r := range rows {
		w := math.Exp(ps.lse[r]-m) / S
		if w == 0 {
			continue
		}
		for c := range o {
			o[c] += w * ps.o[r][c]
		}
	}
	return o, m + math.Log(S)
}

func TestEmulatedPrefillIndexing(t *testing.T) {
	grew := 0
	for i, c := range prefillCases() {
		genPrefill(t, c, uint64(i+1))
		// The schedule as built, and cut into pieces for a GPU of 64 SMs
		// (SplitForOccupancy): every partial row must still be written once.
		split := SplitForOccupancy([]FwdWindow{{Q0: 0, Q1: c.totalQ, Sched: c.sched}}, c.qhpk, 64, 4*64)[0].Sched
		if split.WorkCount > c.sched.WorkCount {
			grew++
		}
		for _, s := range []*plan.FwdSchedule{c.sched, split} {
			emuPrefillSchedule(t, c, s)
		}
	}
	if grew == 0 {
		t.Fatalf("SplitForOccupancy split no case's items: the split schedules were not exercised")
	}
}

// emuPrefillSchedule runs the work items of s as sparse_fwd.cu indexes
// them, then the combine, and compares with the float64 reference.
func emuPrefillSchedule(t *testing.T, c *prefillCase, s *plan.FwdSchedule) {
	out, err := emuKVPrefill(c, c.csr, s)
	if err != nil {
		t.Fatalf("%s: %v", c.name, err)
	}
	if msg := qEmuMismatch(c, out); msg != "" {
		t.Fatalf("%s: %s", c.name, msg)
	}
}

// emuKVPrefill runs the work items of s over csr as sparse_fwd.cu indexes
// them, then the combine over every (query, head) row as combine.cu does
// (O = 0, LSE = -inf for a row with no split), and returns the rows it
// wrote (no temperature LSE); an error is a partial row not written
// exactly once.
func emuKVPrefill(c *prefillCase, csr *plan.CSR, s *plan.FwdSchedule) (*qEmuOut, error) {
	ps := newPartialSet()
	qhpk := c.qhpk
	for w := 0; w < int(s.WorkCount); w++ {
		meta := s.Metadata[6*w : 6*w+6]
		h, row, qBegin, qCount, b, jblk := int(meta[0]), int(meta[1]), int(meta[2]), int(meta[3]), int(meta[4]), int(meta[5])
		q0 := int(c.cuQ[b])
		seqlenQ := int(c.cuQ[b+1]) - q0
		seqlenK := c.seqK(b) // paged: seqused_k = seqlen (test data)
		t0 := jblk * c.blk
		nkeys := min(c.blk, seqlenK-t0)
		if nkeys <= 0 {
			return nil, fmt.Errorf("item %d has an empty block", w)
		}
		base := h*csr.Stride + int(csr.RowPtr[h*(csr.TotalRows+1)+row]) + qBegin
		for idx := 0; idx < qCount*qhpk; idx++ {
			e := uint32(s.QSplit[base+idx/qhpk])
			ql, slot := int(e&0xFFFFFF), int(e>>24)
			hq := h*qhpk + idx%qhpk
			qrow := q0 + ql
			lim := seqlenK
			if c.causal {
				lim = min(lim, ql+seqlenK-seqlenQ+1)
			}
			lim = min(max(lim-t0, 0), nkeys)
			var keys []int
			for j := 0; j < lim; j++ {
				keys = append(keys, c.kRow(b, t0+j, h))
			}
			o, lse, _ := attendRef(c.q.row(qrow*c.hq+hq), keys, c.k, c.v, float64(c.scale), 0)
			ps.put((slot*c.totalQ+qrow)*c.hq+hq, o, lse)
		}
	}
	rows := c.totalQ * c.hq
	out := &qEmuOut{o: make([]float64, rows*c.d), lse: make([]float64, rows), written: make([]int, rows)}
	for q := 0; q < c.totalQ; q++ {
		for hq := 0; hq < c.hq; hq++ {
			n := int(s.SplitCounts[q*c.hkv+hq/qhpk])
			var prows []int
			for sl := 0; sl < n; sl++ {
				r := (sl*c.totalQ+q)*c.hq + hq
				if ps.written[r] != 1 {
					return nil, fmt.Errorf("partial row of (slot %d, q %d, hq %d) written %d times", sl, q, hq, ps.written[r])
				}
				prows = append(prows, r)
			}
			o, lse := combineEmu(ps, prows, c.d)
			r := q*c.hq + hq
			copy(out.o[r*c.d:], o)
			out.lse[r] = lse
			out.written[r]++
		}
	}
	return out, nil
}

func TestEmulatedDecodeIndexing(t *testing.T) {
	for i, c := range decodeCases() {
		genDecode(t, c, uint64(i+1))
		s := c.sched
		ps := newPartialSet()
		rows := c.batch * c.seqlenQ
		direct := newPartialSet()
		for w := 0; w < s.WorkCount; w++ {
			if s.Valid[w] == 0 {
				continue
			}
			b, qt, kt, h := int(s.Request[w]), int(s.QTileIdx[w]), int(s.KVTile[w]), int(s.KVHead[w])
			seqused := int(c.seqused[b])
			kvBegin, kvEnd := 0, seqused
			if s.SplitKV {
				span := s.ChunkPages * c.pageSize
				kvBegin, kvEnd = min(kt*span, seqused), min((kt+1)*span, seqused)
			}
			nq := min(s.QTile, c.seqlenQ-qt*s.QTile)
			obase := 0
			if s.SplitKV {
				obase = int(s.OIndptr[b]) + kt*s.QStride
			}
			nrows := nq * c.qhpk
			// sparse decode: the keys of each row of the item, walked per row tile
			var rowKeys [][]int
			if c.q2k != nil {
				rowKeys = emuSparseDecodeKeys(t, c, b, qt*s.QTile, h, nrows, kvBegin, kvEnd, seqused)
			}
			for idx := 0; idx < nrows; idx++ {
				qi := qt*s.QTile + idx/c.qhpk
				hq := h*c.qhpk + idx%c.qhpk
				qrow := b*c.seqlenQ + qi
				lim := min(seqused, seqused-c.seqlenQ+qi+1)
				var keys []int
				if c.q2k != nil {
					keys = rowKeys[idx]
				} else {
					for t0 := kvBegin; t0 < kvEnd; t0 += 128 {
						nk := min(128, kvEnd-t0)
						l := min(max(lim-t0, 0), nk)
						for j := 0; j < l; j++ {
							keys = append(keys, c.pagedRow(b, h, t0+j))
						}
					}
				}
				o, lse, _ := attendRef(c.q.row(qrow*c.hq+hq), keys, c.k, c.v, float64(c.scale), 0)
				if s.SplitKV {
					ps.put((obase+qi)*c.hq+hq, o, lse)
				} else {
					direct.put(qrow*c.hq+hq, o, lse)
				}
			}
		}
		wantO, wantLSE := c.refDecode()
		for q := 0; q < rows; q++ {
			for hq := 0; hq < c.hq; hq++ {
				r := q*c.hq + hq
				var o []float64
				var lse float64
				if s.SplitKV {
					b, qi := q/c.seqlenQ, q%c.seqlenQ
					var prow []int
					for sp := 0; sp < int(s.SplitCounts[b]); sp++ {
						pr := (int(s.OIndptr[b])+sp*s.QStride+qi)*c.hq + hq
						if ps.written[pr] != 1 {
							t.Fatalf("%s: partial row %d (b %d split %d q %d) written %d times", c.name, pr, b, sp, qi, ps.written[pr])
						}
						prow = append(prow, pr)
					}
					o, lse = combineEmu(ps, prow, c.d)
				} else {
					if direct.written[r] != 1 {
						t.Fatalf("%s: output row %d written %d times", c.name, r, direct.written[r])
					}
					o, lse = direct.o[r], direct.lse[r]
				}
				if !(math.Abs(lse-wantLSE[r]) < 1e-9 || math.IsInf(lse, -1) && math.IsInf(wantLSE[r], -1)) {
					t.Fatalf("%s: row %d LSE %v, want %v", c.name, r, lse, wantLSE[r])
				}
				for cc := 0; cc < c.d; cc++ {
					if math.Abs(o[cc]-wantO[r*c.d+cc]) > 1e-9 {
						t.Fatalf("%s: row %d O[%d] %v, want %v", c.name, r, cc, o[cc], wantO[r*c.d+cc])
					}
				}
			}
		}
		t.Logf("%s: split %v chunk %d items %d", c.name, s.SplitKV, s.ChunkPages, s.WorkCount)
	}
}

// pagedRow is the store row of (request b, KV head h, token t) in the paged cache.
func (c *decodeCase) pagedRow(b, h, t int) int {
	page := int(c.pageTable[b*c.maxPages+t/c.pageSize])
	return (page*c.hkv+h)*c.pageSize + t%c.pageSize
}

// emuSparseDecodeKeys is decode.cu's sparse-decode loop for one work item
// (request b, first query q0 of its q tile, KV head h, nrows query-head
// rows, KV chunk [kvBegin, kvEnd)): per row tile of TileRows(D) rows, warp 0
// finds the next block as the minimum over the rows' smallest selected id
// above the previous block (in the chunk, starting before the row's causal
// limit); a row is selected iff its own minimum is that block; the block is
// folded in spans of at most 128 keys with the row's causal prefix. It
// returns the keys (store rows) each row attends, in visiting order, and
// checks that the blocks come in strictly ascending order.
func emuSparseDecodeKeys(t *testing.T, c *decodeCase, b, q0, h, nrows, kvBegin, kvEnd, seqused int) [][]int {
	t.Helper()
	const intMax = math.MaxInt32
	R := TileRows(c.d)
	rows := c.batch * c.seqlenQ
	out := make([][]int, nrows)
	for rt := 0; rt < nrows; rt += R {
		causal := make([]int, R) // sm.aux
		for r := 0; r < R; r++ {
			if idx := rt + r; idx < nrows {
				i := q0 + idx/c.qhpk
				causal[r] = min(seqused, seqused-c.seqlenQ+i+1)
			}
		}
		prev := -1
		for {
			own := make([]int, 32)
			jmin := intMax
			for lane := 0; lane < 32; lane++ {
				own[lane] = intMax
				idx := rt + lane
				if lane < R && idx < nrows {
					i := q0 + idx/c.qhpk
					sel := c.q2k[(h*rows+b*c.seqlenQ+i)*c.topK:][:c.topK]
					for _, j32 := range sel {
						j := int(j32)
						if j > prev && j < own[lane] && j*c.blk < kvEnd && (j+1)*c.blk > kvBegin && j*c.blk < causal[lane] {
							own[lane] = j
						}
					}
				}
				jmin = min(jmin, own[lane])
			}
			if jmin == intMax {
				break
			}
			if jmin <= prev {
				t.Fatalf("%s: sparse decode visits block %d after %d", c.name, jmin, prev)
			}
			lo, hi := max(kvBegin, jmin*c.blk), min(kvEnd, (jmin+1)*c.blk)
			if lo >= hi {
				t.Fatalf("%s: block %d is empty in chunk [%d, %d)", c.name, jmin, kvBegin, kvEnd)
			}
			for t0 := lo; t0 < hi; t0 += 128 {
				nk := min(128, hi-t0)
				for r := 0; r < R && rt+r < nrows; r++ {
					lim := 0
					if own[r] == jmin {
						lim = causal[r]
					}
					l := min(max(lim-t0, 0), nk)
					for j := 0; j < l; j++ {
						out[rt+r] = append(out[rt+r], c.pagedRow(b, h, t0+j))
					}
				}
			}
			prev = jmin
		}
	}
	return out
}
