package cuda

// Emulation of OUR logic in the SM100 kernels (kernels/cuda/sm100/sm100_fwd.cu,
// sm100_decode.cu, sm100_common.cuh, sm100_layout.cuh), statement for
// statement where it is index arithmetic, on the plan package's real
// schedules, without a GPU: the CTA -> work item mapping, the K/V TMA box
// origins and out-of-bounds edges for dense (ragged) and paged K/V, the
// mbarrier phase and transaction-byte ledger for 0, 1 and many row tiles
// (prefill) and block visits (decode), the tensor-memory and shared-memory
// regions, and the slot / partial addressing. What it cannot check is the hardware's part (TMA, tcgen05,
// the swizzle as the MMA reads it): that runs only on an SM100 GPU.

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/sparseattn/msa/kernels/cuda/fatbin"
	"github.com/sparseattn/msa/kernels/plan"
)

// TestSM100LayoutPins checks the Go layout model (sm100_layout.go), from
// which the launcher takes the dynamic shared memory, against the
// MSA_SM100_PIN lines of sm100_layout.cuh, which nvcc checks against the
// C++ layout with static_assert.
func TestSM100LayoutPins(t *testing.T) {
	src, err := os.ReadFile("../kernels/cuda/sm100/sm100_layout.cuh")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^MSA_SM100_PIN\((\w+), (\w+), (\d+), (\w+), (0x[0-9a-fA-F]+|\d+)u?\);`)
	pins := re.FindAllStringSubmatch(string(src), -1)
	if len(pins) < 12 {
		t.Fatalf("%d MSA_SM100_PIN lines in sm100_layout.cuh: expected the prefill and decode pins", len(pins))
	}
	variants := map[string]SM100Variant{"kBF16": SM100BF16, "kFP8": SM100FP8, "kBF16FP8": SM100BF16FP8, "kNVFP4": SM100NVFP4}
	for _, p := range pins {
		v, ok := variants[p[2]]
		if !ok {
			t.Fatalf("pin %s: unknown variant", p[0])
		}
		d, _ := strconv.Atoi(p[3])
		want, err := strconv.ParseUint(p[5], 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		var got uint64
		switch p[1] + "." + p[4] {
		case "FwdLayout.smem_bytes":
			got = uint64(SM100Fwd(v, d).SmemBytes)
		case "FwdLayout.map_bytes":
			got = uint64(SM100Fwd(v, d).MapBytes)
		case "FwdLayout.tmem_cols":
			got = uint64(SM100Fwd(v, d).TmemCols)
		case "FwdLayout.idesc_qk":
			got = uint64(SM100Fwd(v, d).IdescQK)
		case "FwdLayout.idesc_pv":
			got = uint64(SM100Fwd(v, d).IdescPV)
		case "FwdLayout.num_bars":
			got = fwdNumBars
		case "FwdLayout.slots":
			got = uint64(SM100Fwd(v, d).Slots)
		case "FwdLayout.threads":
			got = uint64(SM100Fwd(v, d).Threads)
		case "QFwdLayout.stages":
			got = uint64(SM100QFwd(v, d).Stages)
		case "QFwdLayout.p_cols":
			got = uint64(SM100QFwd(v, d).PCols)
		case "QFwdLayout.threads":
			got = uint64(SM100QFwd(v, d).Threads)
		case "QFwdLayout.smem_bytes":
			got = uint64(SM100QFwd(v, d).SmemBytes)
		case "QFwdLayout.map_bytes":
			got = uint64(SM100QFwd(v, d).MapBytes)
		case "QFwdLayout.idesc_pv":
			got = uint64(SM100QFwd(v, d).IdescPV)
		case "DecLayout.smem_bytes":
			got = uint64(SM100Dec(v, d).SmemBytes)
		case "DecLayout.tmem_cols":
			got = uint64(SM100Dec(v, d).TmemCols)
		case "DecLayout.idesc_qk":
			got = uint64(SM100Dec(v, d).IdescQK)
		case "DecLayout.idesc_pv":
			got = uint64(SM100Dec(v, d).IdescPV)
		case "DecLayout.stages":
			got = uint64(SM100Dec(v, d).Stages)
		default:
			t.Errorf("pin %s: field not modelled in sm100_layout.go", p[0])
			continue
		}
		if got != want {
			t.Errorf("%s: Go model %#x (%d), header pins %#x (%d)", p[0], got, got, want, want)
		}
	}
}

type region struct {
	name     string
	off, end int
}

func checkDisjoint(t *testing.T, what string, rs []region, limit int) {
	t.Helper()
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b region) int { return a.off - b.off })
	for i, r := range rs {
		if r.off < 0 || r.end < r.off || r.end > limit {
			t.Errorf("%s: %s [%d, %d) outside [0, %d)", what, r.name, r.off, r.end, limit)
		}
		if i > 0 && r.off < rs[i-1].end {
			t.Errorf("%s: %s [%d, %d) overlaps %s [%d, %d)", what, r.name, r.off, r.end, rs[i-1].name, rs[i-1].off, rs[i-1].end)
		}
	}
}

// TestSM100MemoryRegions: the tensor-memory column regions of S and O (and
// of the decode kernel's S^T and O^T blocks, and of the query-major
// kernel's two S buffers and O) never overlap and fit the
// power-of-2 allocation of at most 512 columns; the shared-memory regions
// never overlap, the operand tiles start 1024-byte aligned (the swizzle
// atom the UMMA descriptors assume), and everything fits the 227 KB
// opt-in with the alignment slack.
func TestSM100MemoryRegions(t *testing.T) {
	for _, v := range []SM100Variant{SM100BF16, SM100FP8, SM100BF16FP8, SM100NVFP4} {
		for _, d := range []int{64, 128, 256} {
			what := fmt.Sprintf("fwd v%d d%d", v, d)
			l := SM100Fwd(v, d)
			if c := l.TmemCols; c > tmemColumns || c < 32 || c&(c-1) != 0 {
				t.Errorf("%s: %d TMEM columns", what, c)
			}
			var trs []region
			for sl := 0; sl < l.Slots; sl++ {
				trs = append(trs, region{fmt.Sprintf("S%d", sl), l.TmemS[sl], l.TmemS[sl] + sm100BlockKeys},
					region{fmt.Sprintf("O%d", sl), l.TmemO[sl], l.TmemO[sl] + d})
			}
			checkDisjoint(t, what+" TMEM", trs, l.TmemCols)
			if l.Slots < 1 || l.Slots > 2 || l.Threads != 128*l.Slots+32 { // softmax warpgroups + the one MMA warp
				t.Errorf("%s: %d slots, %d threads", what, l.Slots, l.Threads)
			}
			rs := []region{{"Q/P", l.QPOff, l.QPOff + l.QPBytes}, {"K", l.KOff, l.KOff + l.KVBytes}, {"V", l.VOff, l.VOff + l.KVBytes},
				{"bars", l.BarOff, l.TmemSlot + 8}}
			if l.TmemSlot != l.BarOff+8*fwdNumBars {
				t.Errorf("%s: TMEM address word at %d, after %d mbarriers at %d", what, l.TmemSlot, fwdNumBars, l.BarOff)
			}
			if l.RawBytes > 0 {
				rs = append(rs, region{"raw", l.RawOff, l.RawOff + l.RawBytes})
			}
			if l.Slots == 2 {
				if l.QP1Off%1024 != 0 {
					t.Errorf("%s: second Q/P tile at %d is not 1024-aligned", what, l.QP1Off)
				}
				rs = append(rs, region{"Q/P 1", l.QP1Off, l.QP1Off + l.QPBytes})
			}
			checkDisjoint(t, what+" smem", rs, l.SmemBytes-sm100AlignSlack)
			for _, r := range rs[:3] {
				if r.off%1024 != 0 {
					t.Errorf("%s: %s tile at %d is not 1024-aligned", what, r.name, r.off)
				}
			}
			if l.SmemBytes > sm100MaxDynSmem {
				t.Errorf("%s: %d B of shared memory", what, l.SmemBytes)
			}
			if l.QRowBytes != l.KVRow || l.QKSteps*sm100KStepBytes != l.QRowBytes || l.PVSteps*l.KeysPerPVStep != sm100BlockKeys {
				t.Errorf("%s: MMA K steps %d / %d do not cover D / the block", what, l.QKSteps, l.PVSteps)
			}
			if SM100QFwdOK(v, d) {
				ql := SM100QFwd(v, d)
				what := fmt.Sprintf("qfwd v%d d%d", v, d)
				checkDisjoint(t, what+" TMEM", []region{{"S0", ql.TmemS[0], ql.TmemS[0] + sm100BlockKeys},
					{"S1", ql.TmemS[1], ql.TmemS[1] + sm100BlockKeys}, {"O", ql.TmemO, ql.TmemO + d}}, ql.TmemCols)
				// P_j lies over S_j: inside its S buffer, from its first
				// column (the softmax stores the P of a 32-key chunk below
				// the chunks it has still to read), in whole P.V steps.
				for b := 0; b < 2; b++ {
					if ql.TmemP[b] != ql.TmemS[b] || ql.PCols > sm100BlockKeys || ql.PCols*4 != ql.PRowBytes ||
						ql.PVSteps*ql.PColsPerStep != ql.PCols || 32*ql.PCols/sm100BlockKeys > 32 {
						t.Errorf("%s: P %d at column %d (%d columns, %d per step) against S at %d", what, b, ql.TmemP[b], ql.PCols, ql.PColsPerStep, ql.TmemS[b])
					}
				}
				rs := []region{{"Q", ql.QOff, ql.QOff + ql.QBytes}}
				for i := 0; i < ql.Stages; i++ {
					rs = append(rs, region{fmt.Sprintf("K%d", i), ql.KOff + i*ql.KVBytes, ql.KOff + (i+1)*ql.KVBytes},
						region{fmt.Sprintf("V%d", i), ql.VOff + i*ql.KVBytes, ql.VOff + (i+1)*ql.KVBytes})
				}
				if ql.RawBytes > 0 {
					rs = append(rs, region{"raw K", ql.RawKOff, ql.RawKOff + ql.RawBytes}, region{"raw V", ql.RawVOff, ql.RawVOff + ql.RawBytes})
				}
				for _, r := range rs { // operand tiles: the 1024-byte swizzle atom
					if r.off%1024 != 0 {
						t.Errorf("%s: %s tile at %d is not 1024-aligned", what, r.name, r.off)
					}
				}
				if ql.TmemSlot != ql.BarOff+8*qfwdNumBars {
					t.Errorf("%s: TMEM address word at %d, after %d mbarriers at %d", what, ql.TmemSlot, qfwdNumBars, ql.BarOff)
				}
				checkDisjoint(t, what+" smem", append(rs, region{"bars", ql.BarOff, ql.TmemSlot + 8}), ql.SmemBytes-sm100AlignSlack)
				if ql.Stages < 1 || ql.Stages > qfwdMaxStages || ql.SmemBytes > sm100MaxDynSmem ||
					ql.Stages < qfwdMaxStages && qfwdFits(v, d, ql.Stages+1) {
					t.Errorf("%s: %d stages, %d B of shared memory", what, ql.Stages, ql.SmemBytes)
				}
				if ql.QKSteps*sm100KStepBytes != ql.QRowBytes || ql.PVSteps*ql.KeysPerPVStep != sm100BlockKeys ||
					ql.IdescQK != l.IdescQK || ql.IdescPV != l.IdescPV {
					t.Errorf("%s: MMA steps %d / %d or descriptors differ from the KV-major prefill's", what, ql.QKSteps, ql.PVSteps)
				}
			}
			{
				dl := SM100Dec(v, d)
				what := fmt.Sprintf("decode v%d d%d", v, d)
				trs := []region{{"S^T", dl.TmemS, dl.TmemS + sm100DecRows}}
				for j := 0; j < dl.OMMAs; j++ {
					trs = append(trs, region{fmt.Sprintf("O^T[%d]", j), dl.TmemO + j*sm100DecRows, dl.TmemO + (j+1)*sm100DecRows})
				}
				checkDisjoint(t, what+" TMEM", trs, dl.TmemCols)
				if dl.TmemCols > tmemColumns || dl.TmemCols < 32 {
					t.Errorf("%s: %d TMEM columns", what, dl.TmemCols)
				}
				srs := []region{{"Q", dl.QOff, dl.QOff + dl.QBytes}, {"K", dl.KOff, dl.KOff + dl.KVBytes},
					{"V", dl.VOff, dl.VOff + dl.KVBytes}, {"P", dl.POff, dl.POff + dl.PBytes}, {"raw", dl.RawOff, dl.RawOff + dl.RawBytes}, {"red", dl.RedOff, dl.OrowOff},
					{"orow", dl.OrowOff, dl.OrowOff + 8*sm100DecRows}, {"bars", dl.BarOff, dl.TmemSlot + 8}}
				if dl.Stages == 2 {
					// Stage 1: K, V (with the O^T operand's full read extent) or
					// the converted variants' three raw tiles; bars, vis.
					tiles := []region{{"K1", dl.K1Off, dl.K1Off + dl.KVBytes}, {"V1", dl.V1Off, dl.V1Off + dl.VExtent}}
					if v.converted() {
						tiles = []region{{"rawV0", dl.RV0Off, dl.RV0Off + dl.RawBytes}, {"rawK1", dl.RK1Off, dl.RK1Off + dl.RawBytes},
							{"rawV1", dl.RV1Off, dl.RV1Off + dl.RawBytes}}
					}
					for _, r := range tiles {
						if r.off%1024 != 0 {
							t.Errorf("%s: stage-1 tile %s at %d is not 1024-aligned", what, r.name, r.off)
						}
					}
					srs = append(append(srs, tiles...), region{"bars1", dl.Bar1Off, dl.Bar1Off + 16},
						region{"vis1", dl.Vis1Off, dl.Vis1Off + 4*sm100DecRows})
				}
				if dl.Stages < 1 || dl.Stages > 2 {
					t.Errorf("%s: %d K/V stages", what, dl.Stages)
				}
				checkDisjoint(t, what+" smem", srs, dl.SmemBytes-sm100AlignSlack)
				if end := dl.VOff + dl.OMMAs*dl.OAtoms*sm100BlockKeys*dl.BoxSpan; end > dl.RedOff {
					t.Errorf("%s: the O^T A operand reaches %d past the tile map (%d)", what, end, dl.RedOff)
				}
			}
		}
	}
}

// mbar is one mbarrier as the emulation sees it: completed phases, the
// arrivals and transaction bytes of the phase in progress, and the phases
// each waiter has consumed.
type mbar struct {
	name      string
	count     int // arrivals per phase (mbar_init)
	completed int
	arrivals  int
	txPending int64 // expected minus delivered bytes of the phase in progress
	armed     bool
	waited    int // phases consumed by the waits (all threads wait in lock step here)
}

func (b *mbar) check(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Fatalf("mbarrier %s: "+format, append([]any{b.name}, args...)...)
	}
}

// arriveExpectTx is mbar_arrive_expect_tx: one arrival, tx bytes expected.
func (b *mbar) arriveExpectTx(t *testing.T, tx int64) {
	t.Helper()
	b.check(t, b.completed-b.waited <= 0, "armed for phase %d while phase %d is completed but not waited (phase overrun)", b.completed, b.completed-1)
	b.arrivals++
	b.txPending += tx
	b.armed = true
	b.maybeComplete()
}

// deliver is the TMA unit's complete_tx of one box.
func (b *mbar) deliver(bytes int64) {
	b.txPending -= bytes
	b.maybeComplete()
}

// commit is tcgen05.commit: one arrival when the MMAs finish.
func (b *mbar) commit(t *testing.T) {
	t.Helper()
	b.check(t, b.completed-b.waited <= 0, "commit for phase %d while phase %d is not waited", b.completed, b.completed-1)
	b.arrivals++
	b.armed = true
	b.maybeComplete()
}

func (b *mbar) maybeComplete() {
	if b.armed && b.arrivals == b.count && b.txPending == 0 {
		b.completed++
		b.arrivals, b.armed = 0, false
	}
}

// wait is mbar_wait(bar, parity): it passes when the phase of that parity
// has completed. The waiter's phase is the number of its earlier waits; the
// kernel's parity must be that phase's, the phase must have completed (no
// deadlock), and no later phase may have (a parity wait cannot tell phase n
// from n+2).
func (b *mbar) wait(t *testing.T, parity uint32) {
	t.Helper()
	n := b.waited
	b.check(t, parity == uint32(n&1), "waits parity %d for its phase %d", parity, n)
	b.check(t, b.completed >= n+1, "phase %d never completes (%d arrivals of %d, %d tx bytes missing): deadlock", n, b.arrivals, b.count, b.txPending)
	b.check(t, b.completed == n+1, "phase %d waited after %d phases completed: parity %d is ambiguous", n, b.completed, parity)
	b.waited++
}

// emuBox is one TMA box a CTA issues: its tile destination (bytes from the
// tile start), its coordinates (innermost first) and box extents.
type emuBox struct {
	dst    int
	coord  []int
	extent []int
}

// sm100KVTile is issue_kv_tile for one K or V tile: the boxes, and the
// transaction bytes it arms the barrier with (kv_tx_bytes).
func sm100KVTile(rawRow, elemBytes int, paged bool, pageRow []int32, pageSize, denseBase, h, t0, nkeys int) ([]emuBox, int64) {
	span, boxes := spanOf(rawRow), blocksOf(rawRow)
	inner := span / elemBytes
	var out []emuBox
	if !paged {
		for bx := 0; bx < boxes; bx++ {
			out = append(out, emuBox{dst: bx * sm100BlockKeys * span, coord: []int{bx * inner, h, denseBase + t0}, extent: []int{inner, 1, sm100BlockKeys}})
		}
		return out, int64(sm100BlockKeys * rawRow)
	}
	rows := sm100PagedRows(pageSize)
	nseg := (nkeys + rows - 1) / rows
	for s := 0; s < nseg; s++ {
		t := t0 + s*rows
		page := int(pageRow[t/pageSize])
		for bx := 0; bx < boxes; bx++ {
			out = append(out, emuBox{dst: bx*sm100BlockKeys*span + s*rows*span, coord: []int{bx * inner, t % pageSize, h, page}, extent: []int{inner, rows, 1, 1}})
		}
	}
	return out, int64(nseg * rows * rawRow)
}

// boxRows maps the rows a box lands to K/V store rows (-1: out of bounds,
// zero-filled) and returns the box's bytes as the TMA unit counts them (in
// full, out-of-bounds fill included). dims are the map's dims.
func boxRows(b emuBox, dims []uint64, hkv, pageSize int, span int) (rows map[int]int, bytes int64) {
	rows = map[int]int{}
	if len(b.coord) == 3 { // dense {col, h, token}
		for i := 0; i < b.extent[2]; i++ {
			tok := b.coord[2] + i
			r := -1
			if tok < int(dims[2]) {
				r = tok*hkv + b.coord[1]
			}
			rows[b.dst/span+i] = r // row within the column block (dst / span = block*128 + row)
		}
		return rows, int64(b.extent[2] * span)
	}
	for i := 0; i < b.extent[1]; i++ { // paged {col, i, h, page}
		pos := b.coord[1] + i
		r := -1
		if pos < int(dims[1]) && b.coord[3] < int(dims[3]) {
			r = (b.coord[3]*hkv+b.coord[2])*pageSize + pos
		}
		rows[b.dst/span+i] = r
	}
	return rows, int64(b.extent[1] * span)
}

// landTile is the ledger side of issue_kv_tile for work item w: it arms
// bar with tx bytes, checks each box (check), delivers the boxes' bytes,
// fails unless they add up to tx, and returns the tile rows -> store rows
// (-1 = zero fill, absent = not loaded) of the first box column.
func landTile(t *testing.T, w int, bar *mbar, boxes []emuBox, tx int64, dims []uint64, hkv, pageSize, span int, check func(emuBox)) map[int]int {
	t.Helper()
	bar.arriveExpectTx(t, tx)
	rows := map[int]int{}
	var sum int64
	for _, bx := range boxes {
		check(bx)
		r, n := boxRows(bx, dims, hkv, pageSize, span)
		sum += n
		if bx.coord[0] == 0 {
			for k, v := range r {
				rows[k] = v
			}
		}
		bar.deliver(n)
	}
	if sum != tx {
		t.Fatalf("item %d: barrier armed with %d tx bytes, the boxes deliver %d", w, tx, sum)
	}
	return rows
}

// sm100BoxCheck returns the checks of every box of a K/V tile of keys from
// t0 that CTA w issues: it lands on a swizzle atom and, paged, stays inside
// one page and reads no page-table entry past the sequence's seqlenK keys.
func sm100BoxCheck(t *testing.T, c *prefillCase, w, span, t0, seqlenK int) func(emuBox) {
	return func(bx emuBox) {
		t.Helper()
		if bx.dst%(8*span) != 0 {
			t.Fatalf("CTA %d: box lands at %d, not on a %d-byte swizzle atom", w, bx.dst, 8*span)
		}
		if c.paged {
			tok := t0 + (bx.dst%(sm100BlockKeys*span))/span
			if bx.coord[1]+bx.extent[1] > c.pageSize {
				t.Fatalf("CTA %d: box of keys from %d crosses a page end", w, tok)
			}
			if tok >= seqlenK {
				t.Fatalf("CTA %d: box for key %d reads the page table past the sequence (%d keys)", w, tok, seqlenK)
			}
		}
	}
}

// emuSM100Fwd runs fwd_body's logic for every CTA of a grid of `grid`
// blocks on case c with variant v and returns the partial rows written
// (orow -> the K store rows the row attends, in tile order).
func emuSM100Fwd(t *testing.T, c *prefillCase, v SM100Variant, grid int, seqused []int32) map[int][]int {
	t.Helper()
	l := SM100Fwd(v, c.d)
	kvd := c.kvd
	elemBytes := 1
	if v == SM100BF16 {
		elemBytes = 2
	}
	ps := 0
	kvRows := int(c.cuK[len(c.cuK)-1])
	if c.paged {
		ps, kvRows = c.pageSize, c.numPages
	}
	kmap, err := KVMapSpec("k", 1<<20, kvd, c.d, c.hkv, ps, kvRows)
	if err != nil {
		t.Fatal(err)
	}
	if kmap.Swizzle != l.BoxSpan || int(kmap.Box[0])*elemBytes != l.BoxSpan {
		t.Fatalf("host map inner box %d x %d B, swizzle %d: the kernel's boxes are %d B", kmap.Box[0], elemBytes, kmap.Swizzle, l.BoxSpan)
	}
	written := map[int][]int{}
	s := c.sched
	for w := 0; w < grid; w++ {
		// if (w >= p.capacity || w >= *work_count) return;
		if w >= s.Capacity || w >= int(s.WorkCount) {
			continue
		}
		m := s.Metadata[6*w : 6*w+6]
		h, row, qBegin, qCount, b, jblk := int(m[0]), int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5])
		q0 := int(c.cuQ[b])
		seqlenQ := int(c.cuQ[b+1]) - q0
		var seqlenK int
		switch {
		case seqused != nil:
			seqlenK = int(seqused[b])
		case c.paged:
			seqlenK = c.maxPages * c.pageSize
		default:
			seqlenK = int(c.cuK[b+1] - c.cuK[b])
		}
		t0 := jblk * c.blk
		nkeys := min(min(c.blk, sm100BlockKeys), seqlenK-t0)
		if nkeys <= 0 || qCount <= 0 {
			continue // CTA-uniform exit before any TMA, barrier or TMEM use
		}
		entries := c.csr.QIdx[h*c.csr.Stride+int(c.csr.RowPtr[h*(c.csr.TotalRows+1)+row])+qBegin:]
		qsplit := s.QSplit[h*c.csr.Stride+int(c.csr.RowPtr[h*(c.csr.TotalRows+1)+row])+qBegin:]

		var pageRow []int32
		denseBase := 0
		if c.paged {
			pageRow = c.pageTable[b*c.maxPages:]
		} else {
			denseBase = int(c.cuK[b])
		}
		// Rows of the K and V tiles -> store rows (-1 = zero fill, absent = not loaded).
		tileOf := func(bar *mbar) map[int]int {
			boxes, tx := sm100KVTile(l.RawRow, elemBytes, c.paged, pageRow, ps, denseBase, h, t0, nkeys)
			return landTile(t, w, bar, boxes, tx, kmap.Dims, c.hkv, ps, l.BoxSpan, sm100BoxCheck(t, c, w, l.BoxSpan, t0, seqlenK))
		}
		var kRows, vRows map[int]int
		nrows := qCount * c.qhpk
		tiles := (nrows + sm100TileM - 1) / sm100TileM
		// The warp roles under every scheduling order; the epilogue of row
		// tile `tile` (first order) records the rows it writes.
		emuFwdRoles(t, l.Slots, tiles, v.converted(), mutNone,
			func(b *mbar) { kRows = tileOf(b) }, func(b *mbar) { vRows = tileOf(b) }, func(tile int) {
				rt := tile * sm100TileM
				for tid := 0; tid < sm100TileM; tid++ {
					idx := rt + tid
					if idx >= nrows {
						continue
					}
					e := uint32(qsplit[idx/c.qhpk])
					ql, slot := int(e&0xFFFFFF), int(e>>24)
					if int32(ql) != entries[idx/c.qhpk] {
						t.Fatalf("item %d: qsplit entry %d holds query %d, the CSR %d", w, idx/c.qhpk, ql, entries[idx/c.qhpk])
					}
					hq := h*c.qhpk + idx%c.qhpk
					qrow := q0 + ql
					orow := (slot*c.totalQ+qrow)*c.hq + hq
					lim := seqlenK
					if c.causal {
						lim = min(lim, ql+seqlenK-seqlenQ+1)
					}
					vis := min(max(lim-t0, 0), nkeys)
					var keys []int
					for r := 0; r < vis; r++ {
						kr, ok := kRows[r]
						if !ok || kr < 0 {
							t.Fatalf("item %d row %d: visible key %d not loaded (K tile row %d)", w, tid, t0+r, r)
						}
						if vr := vRows[r]; vr != kr {
							t.Fatalf("item %d: K tile row %d is store row %d, V tile row %d", w, r, kr, vr)
						}
						keys = append(keys, kr)
					}
					if _, dup := written[orow]; dup {
						t.Fatalf("item %d: partial row %d (slot %d, q %d, head %d) written twice", w, orow, slot, qrow, hq)
					}
					written[orow] = keys
				}
			})
	}
	return written
}

// TestEmulatedSM100Prefill: for dense ragged and paged K/V, every dtype
// variant and 0, 1 and many row tiles per item, every (slot, query, head)
// partial row is written exactly once by the CTA of its item, attends
// exactly the keys the reference sees for that block, in slot order of its
// selected blocks, at an address inside the partial buffer with 16-byte
// aligned rows (the vectorised stores), also after the window shift.
func TestEmulatedSM100Prefill(t *testing.T) {
	cases := []struct {
		c *prefillCase
		v SM100Variant
	}{
		// ragged dense, causal, one row tile per item (qhpk 2)
		{&prefillCase{name: "dense/ragged", cuQ: []int32{0, 37, 100, 101}, cuK: []int32{0, 300, 700, 829}, hkv: 2, qhpk: 2, d: 128, topK: 4, blk: 128,
			causal: true, qd: BF16, kvd: BF16, pd: BF16}, SM100BF16},
		// many row tiles: 16 heads per KV head, items of up to FwdTarget queries
		{&prefillCase{name: "dense/many-tiles", cuQ: []int32{0, 300}, cuK: []int32{0, 1000}, hkv: 1, qhpk: 16, d: 64, topK: 3, blk: 128,
			causal: true, qd: E4M3, kvd: E4M3, pd: F32}, SM100FP8},
		// blk_kv 64 < 128: the dense box loads 128 rows, the second half masked (and OOB at the tensor end)
		{&prefillCase{name: "dense/blk64", cuQ: []int32{0, 50, 90}, cuK: []int32{0, 130, 200}, hkv: 2, qhpk: 4, d: 256, topK: 3, blk: 64,
			causal: false, qd: BF16, kvd: E4M3, pd: F16}, SM100BF16FP8},
		// paged, page 64 < 128: two segments per block, last segment partial
		{&prefillCase{name: "paged/64", cuQ: []int32{0, 129, 300}, cuK: []int32{0, 500, 1200}, hkv: 2, qhpk: 8, d: 128, topK: 8, blk: 128,
			causal: true, paged: true, pageSize: 64, qd: E4M3, kvd: E4M3, pd: E4M3}, SM100FP8},
		// paged, page 256 > 128: one box per block inside a page
		{&prefillCase{name: "paged/256", cuQ: []int32{0, 64, 70}, cuK: []int32{0, 600, 1000}, hkv: 1, qhpk: 4, d: 64, topK: 4, blk: 128,
			causal: true, paged: true, pageSize: 256, qd: BF16, kvd: NVFP4, pd: BF16}, SM100NVFP4},
	}
	for _, tc := range cases {
		c := tc.c
		t.Run(c.name, func(t *testing.T) {
			genPrefill(t, c, 11)
			if c.name == "dense/many-tiles" { // one worker: long items, several row tiles each
				rows, err := plan.NewRows(c.cuK, c.blk)
				if err != nil {
					t.Fatal(err)
				}
				if c.sched, err = plan.BuildFwdSchedule(nil, c.csr, rows, c.cuQ, plan.FwdParams{
					TotalQ: c.totalQ, Hkv: c.hkv, QheadPerKV: c.qhpk, TopK: c.topK, BlkKV: c.blk, Workers: 1}); err != nil {
					t.Fatal(err)
				}
			}
			var seqused []int32
			if c.paged {
				seqused = make([]int32, len(c.cuQ)-1)
				for b := range seqused {
					seqused[b] = int32(c.seqK(b))
				}
				l := SM100Fwd(tc.v, c.d)
				if !SM100PagedOK(c.pageSize, c.blk, l.BoxSpan) {
					t.Fatalf("case violates the launcher's paged precondition")
				}
			}
			maxTiles := 0
			for w := 0; w < int(c.sched.WorkCount); w++ {
				maxTiles = max(maxTiles, (int(c.sched.Metadata[6*w+3])*c.qhpk+sm100TileM-1)/sm100TileM)
			}
			// grid = capacity (CUDA-graph launch): the items past work_count exit.
			written := emuSM100Fwd(t, c, tc.v, c.sched.Capacity, seqused)
			psz := partialSize(c.pd)
			slots := 0
			for q := 0; q < c.totalQ; q++ {
				for hq := 0; hq < c.hq; hq++ {
					h := hq / c.qhpk
					var blocks []int
					for j := 0; j < c.topK; j++ {
						if blk := c.q2k[(h*c.totalQ+q)*c.topK+j]; blk >= 0 {
							blocks = append(blocks, int(blk))
						}
					}
					slices.Sort(blocks)
					for slot, blk := range blocks {
						orow := (slot*c.totalQ+q)*c.hq + hq
						keys, ok := written[orow]
						if !ok {
							t.Fatalf("q %d head %d block %d (slot %d): partial row never written", q, hq, blk, slot)
						}
						if want := c.visibleKeys(q, h, blk); !slices.Equal(keys, want) {
							t.Fatalf("q %d head %d block %d: attends %v, want %v", q, hq, blk, keys, want)
						}
						if orow*c.d*psz%16 != 0 {
							t.Fatalf("partial row %d: byte offset not 16-aligned", orow)
						}
						delete(written, orow)
						slots = max(slots, slot+1)
					}
				}
			}
			if len(written) != 0 {
				t.Fatalf("%d partial rows written that no (query, head, block) owns", len(written))
			}
			if maxTiles < 1 {
				t.Fatal("no item with a row tile")
			}
			if c.name == "dense/many-tiles" && maxTiles < 3 {
				t.Fatalf("many-tiles case has at most %d row tiles per item", maxTiles)
			}
			// Windowed launch: the shifted partial base keeps every written
			// row inside the window's buffer.
			for _, wq := range []int{1, 33, c.totalQ} {
				wins, err := FwdWindows(c.csr, c.sched, c.cuQ, c.totalQ, wq)
				if err != nil {
					t.Fatal(err)
				}
				for _, win := range wins {
					n := win.Q1 - win.Q0
					for i := 0; i < int(win.Sched.WorkCount); i++ {
						m := win.Sched.Metadata[6*i : 6*i+6]
						base := int(m[0])*c.csr.Stride + int(c.csr.RowPtr[int(m[0])*(c.csr.TotalRows+1)+int(m[1])])
						for e := int(m[2]); e < int(m[2]+m[3]); e++ {
							qs := uint32(c.sched.QSplit[base+e])
							qrow, slot := int(c.cuQ[m[4]])+int(qs&0xFFFFFF), int(qs>>24)
							// kernel: orow = (slot*n + qrow)*Hq + hq from a base shifted by -Q0*Hq rows
							rel := (slot*n+qrow)*c.hq - win.Q0*c.hq
							if rel < 0 || rel+c.hq > slots*n*c.hq {
								t.Fatalf("window [%d, %d): slot %d q %d writes row %d outside [0, %d)", win.Q0, win.Q1, slot, qrow, rel, slots*n*c.hq)
							}
						}
					}
				}
			}
		})
	}
}

// failsOn runs f on a fresh testing.T in its own goroutine (so that
// Fatal ends only f) and reports whether f failed it: the mutation tests'
// check that a model rejects a mistake.
func failsOn(f func(t *testing.T)) bool {
	ft := &testing.T{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ft)
	}()
	<-done
	return ft.Failed()
}

// TestEmulatedSM100Ledger checks that the barrier model rejects the
// mistakes it exists to catch: a wrong parity, two commits before a wait,
// and an expect-tx that the boxes do not match. (The prefill roles' phase
// sequences are driven by TestEmulatedSM100Roles, the decode ring's by
// TestEmulatedSM100Decode.)
func TestEmulatedSM100Ledger(t *testing.T) {
	mustFail := func(name string, f func(t *testing.T)) {
		if !failsOn(f) {
			t.Errorf("ledger model accepted: %s", name)
		}
	}
	mustFail("wrong parity", func(t *testing.T) {
		b := &mbar{name: "x", count: 1}
		b.commit(t)
		b.wait(t, 1)
	})
	mustFail("two commits before a wait", func(t *testing.T) {
		b := &mbar{name: "x", count: 1}
		b.commit(t)
		b.commit(t)
		b.wait(t, 0)
	})
	mustFail("tx bytes short", func(t *testing.T) {
		b := &mbar{name: "x", count: 1}
		b.arriveExpectTx(t, 128)
		b.deliver(64)
		b.wait(t, 0)
	})
}

// TestSM100KernelTable checks the SM100 launch data of
// kernels/cuda/fatbin/names_sm100.go (what the launcher requests) against the Go
// layout model and the dispatch names: every table kernel is a name the
// launcher looks up, runs the modelled block size (decode 128 threads,
// prefill 128 per softmax warpgroup plus the one MMA-issuer warp), and
// has the modelled shared memory and tensor-memory columns where the model
// covers its layout.
func TestSM100KernelTable(t *testing.T) {
	names := append(TCNames(ArchSM100), QFwdNames(ArchSM100)...)
	variants := map[string]SM100Variant{"bf16": SM100BF16, "fp8": SM100FP8, "bf16fp8": SM100BF16FP8, "nvfp4": SM100NVFP4}
	if len(fatbin.SM100Kernels) == 0 {
		t.Fatal("no SM100 kernels in names_sm100.go")
	}
	for _, g := range fatbin.SM100Kernels {
		if !slices.Contains(names, g.Name) {
			t.Errorf("%s: not a name the launcher looks up (TCNames)", g.Name)
		}
		if want := TCName(ArchSM100, g.Algo, TCVariant(g.Variant), g.HeadDim); want != g.Name {
			t.Errorf("%s: algo/variant/D say %s", g.Name, want)
		}
		threads := sm100Threads
		switch g.Algo {
		case "fwd":
			threads = SM100Fwd(variants[g.Variant], g.HeadDim).Threads
		case "qfwd":
			threads = SM100QFwd(variants[g.Variant], g.HeadDim).Threads
		}
		if g.Threads != threads || g.DynSmem > sm100MaxDynSmem || g.TMEMCols > tmemColumns {
			t.Errorf("%s: %d threads, %d B shared, %d TMEM columns", g.Name, g.Threads, g.DynSmem, g.TMEMCols)
		}
		v := variants[g.Variant]
		switch {
		case g.Algo == "fwd":
			if l := SM100Fwd(v, g.HeadDim); l.SmemBytes != g.DynSmem || l.TmemCols != g.TMEMCols {
				t.Errorf("%s: table %d B / %d cols, model %d B / %d cols", g.Name, g.DynSmem, g.TMEMCols, l.SmemBytes, l.TmemCols)
			}
		case g.Algo == "qfwd":
			if l := SM100QFwd(v, g.HeadDim); l.SmemBytes != g.DynSmem || l.TmemCols != g.TMEMCols || g.RowTile != SM100QTileRows {
				t.Errorf("%s: table %d B / %d cols, model %d B / %d cols", g.Name, g.DynSmem, g.TMEMCols, l.SmemBytes, l.TmemCols)
			}
		default:
			if l := SM100Dec(v, g.HeadDim); l.SmemBytes != g.DynSmem || l.TmemCols != g.TMEMCols {
				t.Errorf("%s: table %d B / %d cols, model %d B / %d cols", g.Name, g.DynSmem, g.TMEMCols, l.SmemBytes, l.TmemCols)
			}
		}
	}
}

// emuSM100Decode runs sm100_decode.cu's logic for every CTA of the decode
// schedule: the work-item decoding, the KV chunk, the row tiles of kDecRows
// query-head rows, the block visits (dense: the chunk in 128-key spans;
// sparse: the union of the tile's selected blocks in ascending order), the
// paged K/V boxes of each visit with the barrier ledger (phases counted
// across row tiles), and each row's visible keys. It returns, per output
// row (partial row with split-KV, else final row), the K store rows the row
// attends.
func emuSM100Decode(t *testing.T, c *decodeCase, v SM100Variant) (written map[int][]int, maxTiles, emptyTiles int) {
	t.Helper()
	const R = sm100DecRows
	l := SM100Dec(v, c.d)
	elemBytes := 1
	if v == SM100BF16 {
		elemBytes = 2
	}
	kmap, err := KVMapSpec("k", 1<<20, c.kvd, c.d, c.hkv, c.pageSize, c.numPages)
	if err != nil {
		t.Fatal(err)
	}
	rawRow := v.rawRowBytes(c.d)
	if kmap.Swizzle != spanOf(rawRow) {
		t.Fatalf("host map swizzle %d, kernel box span %d", kmap.Swizzle, spanOf(rawRow))
	}
	s := c.sched
	rows := c.batch * c.seqlenQ
	written = map[int][]int{}
	for w := 0; w < s.WorkCount; w++ {
		if s.Valid[w] == 0 {
			continue
		}
		h, b, qt, kt := int(s.KVHead[w]), int(s.Request[w]), int(s.QTileIdx[w]), int(s.KVTile[w])
		seqused := int(c.seqused[b])
		kvBegin, kvEnd := 0, seqused
		if s.SplitKV {
			span := s.ChunkPages * c.pageSize
			kvBegin, kvEnd = min(kt*span, seqused), min((kt+1)*span, seqused)
		}
		nq := min(s.QTile, c.seqlenQ-qt*s.QTile)
		nrows := nq * c.qhpk
		if nrows <= 0 {
			continue
		}
		obase := 0
		if s.SplitKV {
			obase = int(s.OIndptr[b]) + kt*s.QStride
		}
		// The kernel's barriers: K and V ready per stage, MMA done.
		S := l.Stages
		barK := []*mbar{{name: "K0", count: 1}, {name: "K1", count: 1}}[:S]
		barV := []*mbar{{name: "V0", count: 1}, {name: "V1", count: 1}}[:S]
		barMMA := &mbar{name: "MMA", count: 1}
		pageRow := c.pageTable[b*c.maxPages:]
		nvis := 0
		maxTiles = max(maxTiles, (nrows+R-1)/R)
		// tile is issue_kv_tile of keys [t0, t0+nk) into the barrier ledger:
		// the tile rows -> store rows the boxes land.
		tile := func(bar *mbar, t0, nk int) map[int]int {
			boxes, tx := sm100KVTile(rawRow, elemBytes, true, pageRow, c.pageSize, 0, h, t0, nk)
			return landTile(t, w, bar, boxes, tx, kmap.Dims, c.hkv, c.pageSize, spanOf(rawRow), func(bx emuBox) {
				if bx.coord[1]+bx.extent[1] > c.pageSize {
					t.Fatalf("item %d: box at key %d crosses a page end", w, t0)
				}
			})
		}
		// One stage's visit: its keys, the rows' visible counts and the
		// tiles' rows; busy from its issue until its O^T MMA completed.
		type stageVisit struct {
			t0, nk       int
			vis          [R]int
			kRows, vRows map[int]int
			busy         bool
		}
		stages := make([]stageVisit, S)
		for rt := 0; rt < nrows; rt += R {
			visBefore := nvis
			var orow, lim [R]int
			for tid := 0; tid < R; tid++ {
				orow[tid] = -1
				if idx := rt + tid; idx < nrows {
					i := qt*s.QTile + idx/c.qhpk
					hq := h*c.qhpk + idx%c.qhpk
					qrow := b*c.seqlenQ + i
					if s.SplitKV {
						orow[tid] = (obase+i)*c.hq + hq
					} else {
						orow[tid] = qrow*c.hq + hq
					}
					lim[tid] = min(seqused, seqused-c.seqlenQ+i+1)
				}
			}
			keys := make([][]int, R)
			cur, hi := kvBegin, kvEnd
			if c.q2k != nil {
				hi = kvBegin
			}
			prev := -1
			var sel [R]bool
			visits, issued := 0, 0
			// walkIssue is the kernel's walk_issue: the next visit of the
			// walk into stage (its CTA-wide index) mod S, K (and unconverted
			// V) issued; false when the row tile's stream ends. Its sparse
			// step is what SparseWalk.next (tc_frag.cuh; warp 0 in the
			// kernel, lane l holding rows l and l + 32) returns: the least
			// block above prev that a row selects, and the rows that do.
			walkIssue := func() bool {
				if c.q2k != nil && cur >= hi {
					jmin := math.MaxInt32
					own := make([]int, R)
					for tid := 0; tid < R; tid++ {
						own[tid] = math.MaxInt32
						if rt+tid < nrows {
							i := qt*s.QTile + (rt+tid)/c.qhpk
							list := c.q2k[(h*rows+b*c.seqlenQ+i)*c.topK : (h*rows+b*c.seqlenQ+i+1)*c.topK]
							for _, j32 := range list {
								j := int(j32)
								if j > prev && j < own[tid] && j*c.blk < kvEnd && (j+1)*c.blk > kvBegin && j*c.blk < lim[tid] {
									own[tid] = j
								}
							}
						}
						jmin = min(jmin, own[tid])
					}
					for tid := 0; tid < R; tid++ {
						sel[tid] = jmin != math.MaxInt32 && own[tid] == jmin
					}
					if jmin == math.MaxInt32 {
						return false
					}
					if jmin <= prev {
						t.Fatalf("item %d: block %d visited after %d", w, jmin, prev)
					}
					cur, hi, prev = max(kvBegin, jmin*c.blk), min(kvEnd, (jmin+1)*c.blk), jmin
				}
				if cur >= hi {
					return false
				}
				si := (nvis - visits + issued) % S
				st := &stages[si]
				if st.busy {
					t.Fatalf("item %d: K/V stage %d reissued while its visit is in flight", w, si)
				}
				st.t0, st.nk, st.busy = cur, min(sm100BlockKeys, hi-cur), true
				cur += sm100BlockKeys
				for tid := 0; tid < R; tid++ {
					st.vis[tid] = 0
					if c.q2k == nil || sel[tid] {
						st.vis[tid] = min(max(lim[tid]-st.t0, 0), st.nk)
					}
				}
				st.kRows = tile(barK[si], st.t0, st.nk)
				if !v.converted() || S == 2 { // one converted stage: the raw V follows the K conversion
					st.vRows = tile(barV[si], st.t0, st.nk)
				}
				issued++
				return true
			}
			more := true
			for i := 0; i+1 < S && more; i++ {
				more = walkIssue()
			}
			for {
				if more {
					more = walkIssue()
				}
				if visits == issued {
					break
				}
				si := nvis % S
				st := &stages[si]
				par := uint32((nvis / S) & 1)
				barK[si].wait(t, par)
				if v.converted() && S == 1 {
					st.vRows = tile(barV[si], st.t0, st.nk) // the raw V after the K conversion
				}
				barMMA.commit(t) // S^T
				barMMA.wait(t, uint32((2*nvis)&1))
				barV[si].wait(t, par)
				barMMA.commit(t) // O^T
				barMMA.wait(t, uint32((2*nvis+1)&1))
				st.busy = false
				nvis++
				visits++
				for tid := 0; tid < R; tid++ {
					for r := 0; r < st.vis[tid]; r++ {
						kr, ok := st.kRows[r]
						if !ok || kr < 0 || st.vRows[r] != kr {
							t.Fatalf("item %d: key %d (tile row %d) not loaded: K %d, V %d", w, st.t0+r, r, kr, st.vRows[r])
						}
						if want := c.pagedRow(b, h, st.t0+r); kr != want {
							t.Fatalf("item %d: tile row %d is store row %d, key %d is %d", w, r, kr, st.t0+r, want)
						}
						keys[tid] = append(keys[tid], kr)
					}
				}
			}
			if nvis == visBefore {
				emptyTiles++
			}
			for tid := 0; tid < R; tid++ {
				if orow[tid] < 0 {
					continue
				}
				if _, dup := written[orow[tid]]; dup {
					t.Fatalf("item %d: output row %d written twice", w, orow[tid])
				}
				written[orow[tid]] = keys[tid]
			}
		}
		for _, bar := range append(append([]*mbar{barMMA}, barK...), barV...) {
			if bar.completed != bar.waited {
				t.Fatalf("item %d: barrier %s: %d phases completed, %d waited", w, bar.name, bar.completed, bar.waited)
			}
		}
		if l.TmemCols > tmemColumns {
			t.Fatal("TMEM")
		}
	}
	return written, maxTiles, emptyTiles
}

// TestEmulatedSM100Decode: dense and sparse (q2k) decode, split-KV and not,
// pages of 64 to 256 tokens, blocks of 128 and 256 tokens (two 128-key
// spans), 1 and 2 row tiles, items with no visit: every output row is
// written once and, over the KV chunks of its request, attends every
// visible key of its selection exactly once.
func TestEmulatedSM100Decode(t *testing.T) {
	cases := []struct {
		c *decodeCase
		v SM100Variant
	}{
		{&decodeCase{name: "dense/split/page64", batch: 3, seqlenQ: 2, hkv: 2, qhpk: 16, d: 128, pageSize: 64, fixedSplit: 4,
			seqused: []int32{1000, 130, 3}, qd: BF16, kvd: BF16}, SM100BF16},
		{&decodeCase{name: "dense/nosplit/page256", batch: 2, seqlenQ: 1, hkv: 1, qhpk: 8, d: 64, pageSize: 256,
			seqused: []int32{700, 2000}, qd: E4M3, kvd: E4M3}, SM100FP8},
		{&decodeCase{name: "sparse/split/blk256", batch: 2, seqlenQ: 4, hkv: 2, qhpk: 8, d: 256, pageSize: 128, fixedSplit: 3,
			topK: 4, blk: 256, seqused: []int32{1500, 900}, qd: BF16, kvd: E4M3}, SM100BF16FP8},
		{&decodeCase{name: "sparse/auto/blk128", batch: 4, seqlenQ: 1, hkv: 4, qhpk: 16, d: 128, pageSize: 64,
			topK: 8, blk: 128, seqused: []int32{6000, 300, 64, 1}, qd: E4M3, kvd: E4M3}, SM100FP8},
		// 16 heads x 6 query tokens: two row tiles per item; sparse rows selecting nothing in a chunk
		{&decodeCase{name: "sparse/split/two-tiles", batch: 2, seqlenQ: 6, hkv: 1, qhpk: 16, d: 64, pageSize: 128, fixedSplit: 2,
			topK: 2, blk: 128, seqused: []int32{3000, 700}, qd: BF16, kvd: BF16}, SM100BF16},
		// a converted variant with the two-stage ring (raw K/V per stage)
		{&decodeCase{name: "sparse/split/bf16fp8-ring", batch: 3, seqlenQ: 1, hkv: 2, qhpk: 16, d: 128, pageSize: 64, fixedSplit: 2,
			topK: 6, blk: 128, seqused: []int32{2500, 129, 700}, qd: BF16, kvd: E4M3}, SM100BF16FP8},
		// NVFP4 K/V (rows of D/2 bytes: 32-byte TMA boxes at D = 64), E4M3 and BF16 Q
		{&decodeCase{name: "nvfp4/dense/split/page128", batch: 2, seqlenQ: 1, hkv: 2, qhpk: 8, d: 64, pageSize: 128, fixedSplit: 3,
			seqused: []int32{900, 260}, qd: E4M3, kvd: NVFP4}, SM100NVFP4},
		{&decodeCase{name: "nvfp4/sparse/blk256", batch: 2, seqlenQ: 2, hkv: 1, qhpk: 16, d: 256, pageSize: 256,
			topK: 3, blk: 256, seqused: []int32{2000, 513}, qd: BF16, kvd: NVFP4}, SM100NVFP4},
	}
	maxTiles, empty := 0, 0
	for _, tc := range cases {
		c := tc.c
		t.Run(c.name, func(t *testing.T) {
			genDecode(t, c, 3)
			blk := sm100PagedRows(c.pageSize)
			if c.q2k != nil {
				blk = c.blk
			}
			if !SM100PagedOK(c.pageSize, blk, spanOf(tc.v.rawRowBytes(c.d))) {
				t.Fatal("case violates the launcher's precondition")
			}
			written, mt, et := emuSM100Decode(t, c, tc.v)
			maxTiles, empty = max(maxTiles, mt), empty+et
			got := map[int][]int{} // final row -> keys over all chunks
			for b := 0; b < c.batch; b++ {
				for i := 0; i < c.seqlenQ; i++ {
					for hq := 0; hq < c.hq; hq++ {
						r := (b*c.seqlenQ+i)*c.hq + hq
						if !c.sched.SplitKV {
							keys, ok := written[r]
							if !ok {
								t.Fatalf("row %d never written", r)
							}
							got[r] = keys
							continue
						}
						for kt := 0; kt < int(c.sched.SplitCounts[b]); kt++ {
							pr := (int(c.sched.OIndptr[b])+kt*c.sched.QStride+i)*c.hq + hq
							keys, ok := written[pr]
							if !ok {
								t.Fatalf("partial row %d (request %d chunk %d) never written", pr, b, kt)
							}
							got[r] = append(got[r], keys...)
						}
					}
				}
			}
			for b := 0; b < c.batch; b++ {
				su := int(c.seqused[b])
				for i := 0; i < c.seqlenQ; i++ {
					lim := min(su, su-c.seqlenQ+i+1)
					for hq := 0; hq < c.hq; hq++ {
						h := hq / c.qhpk
						var want []int
						if c.q2k == nil {
							for k := 0; k < lim; k++ {
								want = append(want, c.pagedRow(b, h, k))
							}
						} else {
							for _, blk := range c.selectedBlocks(h, b*c.seqlenQ+i) {
								for k := blk * c.blk; k < min((blk+1)*c.blk, lim); k++ {
									want = append(want, c.pagedRow(b, h, k))
								}
							}
						}
						r := (b*c.seqlenQ+i)*c.hq + hq
						if !slices.Equal(got[r], want) {
							t.Fatalf("request %d query %d head %d: %d keys, want %d", b, i, hq, len(got[r]), len(want))
						}
					}
				}
			}
		})
	}
	if maxTiles < 2 || empty == 0 {
		t.Errorf("the cases reach %d row tiles per item and %d row tiles without a visit: want >= 2 and >= 1", maxTiles, empty)
	}
}
