package cuda

// Host emulation of the pipelined sm_90a decode's own index logic
// (kernels/cuda/sm90/sm90_decode_pipe.cu), line for line: the span stream
// (SpanGen), the cp.async ring (slot of each span, commit-group accounting,
// wait depth), the page-to-stage copy (issue_span: page lookup per key,
// zero-filled tail rows, the swizzled landing offsets) and the fused
// two-level combine's counter protocol, with the attention itself in float64 against
// the direct reference. NVFP4 K/V also go through the ring's block-scale
// copies and the unpacking to bf16 (widen_span_fp4), whose values must equal
// the reference's dequantised rows. Each emulator takes a mutation so the
// test can show that a broken index formula is caught.

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
)

const (
	pipeKeys = 64 // kPipeKeys
	pipeRows = 64 // kTileRows: M rows of one row tile
)

// pipeMut is a deliberate bug injected into the emulation.
type pipeMut int

const (
	pipeOK            pipeMut = iota
	pipeMutWait               // cp.async.wait_group S instead of S-1
	pipeMutSlot               // span n+S-1 issued into slot n % S (still being read)
	pipeMutPage               // the first key of a page (after the first page) read through the previous page-table entry
	pipeMutReset              // the combining CTA leaves its counter at n
	pipeMutLast               // a CTA combines when it saw n instead of n-1
	pipeMutSwizzle            // the landing swizzle drops the row bits
	pipeMutSpanEnd            // a span covers 64 keys even at the end of a block
	pipeMutBlock              // a block merged into split kt/G instead of its first split kt/G*G
	pipeMutScaleRow           // NVFP4: a key's block scales copied from the sequence's first page
	pipeMutScaleBlock         // NVFP4: raw chunk c unpacked with scale block c instead of 2c (+1)
	pipeMutNibble             // NVFP4: the two elements of a byte unpacked high nibble first
)

func (m pipeMut) String() string {
	return [...]string{"none", "wait depth S", "issue into the slot being read", "page index", "counter not reset",
		"last-CTA test", "swizzle", "span end", "block's first split", "scale row", "scale block", "nibble order"}[m]
}

// pipeSpan is Span: keys [t0, t0+nk), mask bit r = row r of the tile attends them.
type pipeSpan struct {
	t0, nk int
	mask   uint64
}

// pipeStream is SpanGen for one row tile [rt, rt+64) of an item: dense, the
// chunk [kvBegin, kvEnd) in 64-key spans; sparse, SparseWalk's blocks in
// ascending order (a row's candidates are its selected blocks above the
// previous one, overlapping the chunk and starting before its causal limit;
// rows whose minimum is the block get its mask bit), each cut into spans.
func pipeStream(c *decodeCase, b, q0, h, nrows, rt, kvBegin, kvEnd, seqused int, mut pipeMut) []pipeSpan {
	cut := func(out []pipeSpan, lo, hi int, mask uint64) []pipeSpan {
		for t := lo; t < hi; t += pipeKeys {
			nk := min(pipeKeys, hi-t)
			if mut == pipeMutSpanEnd {
				nk = pipeKeys
			}
			out = append(out, pipeSpan{t, nk, mask})
		}
		return out
	}
	if c.q2k == nil {
		return cut(nil, kvBegin, kvEnd, ^uint64(0))
	}
	rows := c.batch * c.seqlenQ
	var out []pipeSpan
	prev := -1
	for {
		jmin, own := math.MaxInt32, make([]int, pipeRows)
		for r := range own {
			own[r] = math.MaxInt32
			if idx := rt + r; idx < nrows {
				i := q0 + idx/c.qhpk
				lim := min(seqused, seqused-c.seqlenQ+i+1)
				for _, j32 := range c.q2k[(h*rows+b*c.seqlenQ+i)*c.topK:][:c.topK] {
					j := int(j32)
					if j > prev && j < own[r] && j*c.blk < kvEnd && (j+1)*c.blk > kvBegin && j*c.blk < lim {
						own[r] = j
					}
				}
			}
			jmin = min(jmin, own[r])
		}
		if jmin == math.MaxInt32 {
			return out
		}
		var mask uint64
		for r := range own {
			if own[r] == jmin {
				mask |= 1 << r
			}
		}
		out = cut(out, max(kvBegin, jmin*c.blk), min(kvEnd, (jmin+1)*c.blk), mask)
		prev = jmin
	}
}

// ringEmu runs the kernel's ring loop over a stream of n spans with S stages:
// prologue (spans 0..S-2, one commit each), then per iteration n: issue span
// n+S-1 into slot (n+S-1) % S, commit (always), stop when the consume side
// has no span n, wait_group S-1, read slot n % S, barrier. wait_group N is
// modelled by its guarantee: every group but the newest N is complete. It
// returns the slot each span was read from, or the first violation: a read
// of a slot that does not hold the span, of a group not yet complete, or an
// issue into a slot whose span has not been read.
func ringEmu(n, S int, mut pipeMut) ([]int, error) {
	type slotState struct{ span, group int }
	slots := make([]slotState, S)
	for i := range slots {
		slots[i].span = -1
	}
	read := make([]bool, n)
	committed, complete, issued := 0, 0, 0
	issue := func(slot int) error {
		if issued < n {
			if sp := slots[slot].span; sp >= 0 && !read[sp] {
				return fmt.Errorf("span %d issued into slot %d, whose span %d is not read yet", issued, slot, sp)
			}
			slots[slot] = slotState{issued, committed}
			issued++
		}
		committed++ // cp.async.commit_group, with or without copies
		return nil
	}
	for i := 0; i < S-1; i++ {
		if err := issue(i); err != nil {
			return nil, err
		}
	}
	wait := S - 1
	if mut == pipeMutWait {
		wait = S
	}
	var slotOf []int
	for it := 0; ; it++ {
		slot := (it + S - 1) % S
		if mut == pipeMutSlot {
			slot = it % S
		}
		if err := issue(slot); err != nil {
			return nil, err
		}
		if it >= n { // the consume generator has no span it: it was never issued, nothing waits on it
			break
		}
		complete = max(complete, committed-wait)
		s := slots[it%S]
		if s.span != it {
			return nil, fmt.Errorf("iteration %d reads slot %d holding span %d", it, it%S, s.span)
		}
		if s.group >= complete {
			return nil, fmt.Errorf("iteration %d reads span %d of commit group %d: only groups < %d are complete", it, it, s.group, complete)
		}
		read[it] = true
		slotOf = append(slotOf, it%S)
	}
	if issued != n {
		return nil, fmt.Errorf("%d of %d spans issued", issued, n)
	}
	return slotOf, nil
}

// swz is sm90_common.cuh's swz<SPAN, R>: byte offset of byte col of row in a
// tile of R rows stored as col/SPAN panels of [R][SPAN], 16-byte chunks
// XOR-swizzled with the row bits.
func swz(span, rows, row, col int, mut pipeMut) int {
	panel, cc := col/span, col%span
	var sw int
	switch span {
	case 128:
		sw = row & 7
	case 64:
		sw = (row >> 1) & 3
	default:
		sw = (row >> 2) & 1
	}
	if mut == pipeMutSwizzle {
		sw = 0
	}
	return panel*rows*span + row*span + ((((cc >> 4) ^ sw) << 4) | (cc & 15))
}

// landEmu is issue_span for one operand of span s: the 128 threads' 16-byte
// copies (chunk i: key j = i / cpr, chunk c = i % cpr; store row of key
// t0+j from the page table; zero fill for j >= nk) into a 64-row tile; it
// checks that every byte is written once, then reads every (key, byte) back
// through the swizzle as the wgmma descriptors do and compares it with the
// paged cache: store row of (b, h, t0+j) at byte col, 0 past nk.
// It returns the landed tile: per shared byte, the global byte it holds (-1: zero fill).
func landEmu(c *decodeCase, b, h int, s pipeSpan, rawRow int, mut pipeMut) ([]int, error) {
	span := min(rawRow, 128)
	cpr := rawRow / 16
	smem := make([]int, pipeKeys*rawRow)
	for i := range smem {
		smem[i] = -2 // unwritten
	}
	page := func(t int) int {
		if mut == pipeMutPage && t%c.pageSize == 0 && t > 0 {
			return int(c.pageTable[b*c.maxPages+t/c.pageSize-1])
		}
		return int(c.pageTable[b*c.maxPages+t/c.pageSize])
	}
	for i := 0; i < pipeKeys*cpr; i++ {
		j, ch := i/cpr, i%cpr
		live := j < s.nk
		srow := 0
		if live {
			t := s.t0 + j
			srow = (page(t)*c.hkv+h)*c.pageSize + t%c.pageSize
		}
		off := swz(span, pipeKeys, j, 16*ch, mut)
		for k := 0; k < 16; k++ {
			if smem[off+k] != -2 {
				return nil, fmt.Errorf("span %+v: shared byte %d written twice", s, off+k)
			}
			smem[off+k] = -1
			if live {
				smem[off+k] = srow*rawRow + 16*ch + k
			}
		}
	}
	for j := 0; j < pipeKeys; j++ {
		for col := 0; col < rawRow; col++ {
			want := -1
			if j < s.nk {
				want = c.pagedRow(b, h, s.t0+j)*rawRow + col
			}
			if got := smem[swz(span, pipeKeys, j, col, 0)]; got != want {
				return nil, fmt.Errorf("span %+v: key %d byte %d reads global byte %d, want %d", s, j, col, got, want)
			}
		}
	}
	return smem, nil
}

// landScalesEmu is issue_span's NVFP4 block-scale copies for one operand of
// span s: per key j and group q of 4 scales (D/64 groups a row), 4 bytes
// from Scale128x4Offset(store row of the key, 4q, D/16) into slot bytes
// j*D/16 + 4q, zero filled past nk. It checks that every slot byte is
// written once and returns the slot's scale bytes.
func landScalesEmu(c *decodeCase, st *kvStore, b, h int, s pipeSpan, mut pipeMut) ([]byte, error) {
	rowS, gpr := c.d/16, c.d/64
	out, writes := make([]byte, pipeKeys*rowS), make([]int, pipeKeys*rowS)
	for i := 0; i < pipeKeys*gpr; i++ {
		j, q := i/gpr, i%gpr
		off := j*rowS + 4*q
		for k := 0; k < 4; k++ {
			writes[off+k]++
		}
		if j >= s.nk {
			continue
		}
		t := s.t0 + j
		page := int(c.pageTable[b*c.maxPages+t/c.pageSize])
		if mut == pipeMutScaleRow {
			page = int(c.pageTable[b*c.maxPages])
		}
		src := lowp.Scale128x4Offset((page*c.hkv+h)*c.pageSize+t%c.pageSize, 4*q, rowS)
		copy(out[off:off+4], st.scales[src:src+4])
	}
	for i, n := range writes {
		if n != 1 {
			return nil, fmt.Errorf("span %+v: scale byte %d written %d times", s, i, n)
		}
	}
	return out, nil
}

// widenFp4Emu is widen_span_fp4 for one operand: the 128 threads' steps
// (chunk i: key j = i / (D/32), 16 raw bytes c = i % (D/32), read through
// the raw swizzle) unpack 32 elements with scale blocks 2c and 2c+1 into
// four 16-byte bf16 chunks at swz<128>(j, 64c + 16q). It checks that every
// bf16 element is written once and is exact in bf16, then reads the tile
// back as the wgmma descriptors do (element e of key j at swz<128>(j, 2e))
// and compares it, times the global scale (applied by the kernel to the
// scores and the output), with the reference's dequantised rows: equal in
// float32, both being E2M1 x block scale x global scale in that order.
func widenFp4Emu(c *decodeCase, st *kvStore, b, h int, s pipeSpan, tile []int, sc []byte, mut pipeMut) error {
	d, rawRow := c.d, c.d/2
	span, cpr := min(rawRow, 128), d/32
	raw := func(off int) byte {
		if g := tile[off]; g >= 0 {
			return st.enc[g]
		}
		return 0
	}
	dst, writes := make([]float32, pipeKeys*d), make([]int, pipeKeys*d) // by bf16 element of the 2D-byte rows
	for i := 0; i < pipeKeys*cpr; i++ {
		j, cc := i/cpr, i%cpr
		var u [16]byte
		base := swz(span, pipeKeys, j, 16*cc, 0)
		for k := range u {
			u[k] = raw(base + k)
		}
		blk := 2 * cc
		if mut == pipeMutScaleBlock {
			blk = cc
		}
		s0 := lowp.Float8E4M3FN(sc[j*(d/16)+blk]).Float32()
		s1 := lowp.Float8E4M3FN(sc[j*(d/16)+blk+1]).Float32()
		for q := 0; q < 4; q++ {
			sf := s0
			if q >= 2 {
				sf = s1
			}
			w := binary.LittleEndian.Uint32(u[4*q:])
			for e := 0; e < 8; e++ {
				nib := uint8(w>>(4*e)) & 15
				if mut == pipeMutNibble {
					nib = uint8(w>>(4*(e^1))) & 15
				}
				f := lowp.E2M1Value(nib) * sf
				if lowp.BF16(f).Float32() != f {
					return fmt.Errorf("span %+v: key %d element %d = %v is not exact in bf16", s, j, 32*cc+8*q+e, f)
				}
				o := (swz(128, pipeKeys, j, 64*cc+16*q, 0) + 2*e) / 2
				dst[o] = f
				writes[o]++
			}
		}
	}
	for i, n := range writes {
		if n != 1 {
			return fmt.Errorf("span %+v: bf16 element %d of the widened tile written %d times", s, i, n)
		}
	}
	for j := 0; j < pipeKeys; j++ {
		for e := 0; e < d; e++ {
			var want float32
			if j < s.nk {
				want = st.row(c.pagedRow(b, h, s.t0+j))[e]
			}
			if got := dst[swz(128, pipeKeys, j, 2*e, 0)/2] * st.gscale; got != want {
				return fmt.Errorf("span %+v: key %d element %d unpacks to %v (x global scale), want %v", s, j, e, got, want)
			}
		}
	}
	return nil
}

// pipeEmu runs every work item of c's schedule through the emulated kernel
// in a shuffled completion order (CTAs finish in any order) and returns the
// final output and LSE rows, or the first violation.
func pipeEmu(c *decodeCase, stages int, rng *rand.Rand, mut pipeMut) (o [][]float64, lse []float64, err error) {
	s := c.sched
	rawRow := rowBytes(c.kvd, c.d)
	rows := c.batch * c.seqlenQ
	o, lse = make([][]float64, rows*c.hq), make([]float64, rows*c.hq)
	outWrites := make([]int, rows*c.hq)
	ps := newPartialSet()
	counters := make([]int, PipeCounters(s))
	stride := 1
	if s.SplitKV {
		stride = PipeCounterStride(s)
	}
	combined := map[int]int{}    // group (its first counter) -> final merges
	blockMerged := map[int]int{} // partial row -> in-place block merges
	order := rng.Perm(s.WorkCount)
	for _, w := range order {
		b, qt, kt, h := int(s.Request[w]), int(s.QTileIdx[w]), int(s.KVTile[w]), int(s.KVHead[w])
		seqused := int(c.seqused[b])
		kvBegin, kvEnd := 0, seqused
		if s.SplitKV { // decode_item
			span := s.ChunkPages * c.pageSize
			kvBegin, kvEnd = min(kt*span, seqused), min((kt+1)*span, seqused)
		}
		i0 := qt * s.QTile
		nrows := min(s.QTile, c.seqlenQ-i0) * c.qhpk
		obase := 0
		if s.SplitKV {
			obase = int(s.OIndptr[b]) + kt*s.QStride
		}
		for rt := 0; rt < nrows; rt += pipeRows {
			spans := pipeStream(c, b, i0, h, nrows, rt, kvBegin, kvEnd, seqused, mut)
			if _, err := ringEmu(len(spans), stages, mut); err != nil {
				return nil, nil, fmt.Errorf("item %d row tile %d (%d spans, %d stages): %w", w, rt, len(spans), stages, err)
			}
			keys := make([][]int, pipeRows)
			for _, sp := range spans {
				tile, err := landEmu(c, b, h, sp, rawRow, mut)
				if err != nil {
					return nil, nil, fmt.Errorf("item %d: %w", w, err)
				}
				if c.kvd == NVFP4 { // K and V land at the same offsets; each has its scales
					for _, st := range []*kvStore{c.k, c.v} {
						sc, err := landScalesEmu(c, st, b, h, sp, mut)
						if err == nil {
							err = widenFp4Emu(c, st, b, h, sp, tile, sc, mut)
						}
						if err != nil {
							return nil, nil, fmt.Errorf("item %d: %w", w, err)
						}
					}
				}
				for r := 0; r < pipeRows && rt+r < nrows; r++ {
					i := i0 + (rt+r)/c.qhpk
					lim := min(seqused, seqused-c.seqlenQ+i+1)
					l := 0 // block_lim
					if sp.mask>>r&1 == 1 {
						l = min(max(lim-sp.t0, 0), sp.nk)
					}
					for j := 0; j < l; j++ {
						keys[r] = append(keys[r], c.pagedRow(b, h, sp.t0+j))
					}
				}
			}
			for r := 0; r < pipeRows && rt+r < nrows; r++ { // DecRows::row
				idx := rt + r
				i, hq := i0+idx/c.qhpk, h*c.qhpk+idx%c.qhpk
				qrow := b*c.seqlenQ + i
				ov, l, _ := attendRef(c.q.row(qrow*c.hq+hq), keys[r], c.k, c.v, float64(c.scale), 0)
				if s.SplitKV {
					ps.put((obase+i)*c.hq+hq, ov, l)
				} else {
					o[qrow*c.hq+hq], lse[qrow*c.hq+hq] = ov, l
					outWrites[qrow*c.hq+hq]++
				}
			}
		}
		if !s.SplitKV {
			continue
		}
		// fused two-level combine: count this split in its block; the CTA
		// completing a block merges it in place (into the block's first
		// split), then counts the block; the CTA completing the group merges
		// the blocks into the output (one block: straight into the output)
		n := max(int(s.SplitCounts[b]), 0)
		G := max(PipeBlock(n), 1)
		nblk, s0 := (n+G-1)/G, kt/G*G
		if mut == pipeMutBlock {
			s0 = kt / G
		}
		base := ((b*s.NumQTiles+qt)*c.hkv + h) * stride
		arrive := func(ci, want int) bool {
			before := counters[ci]
			counters[ci]++
			last := before == want-1
			if mut == pipeMutLast {
				last = before == want
			}
			if last && mut != pipeMutReset {
				counters[ci] = 0
			}
			return last
		}
		// merge is merge_row for every row of the item: cnt splits from
		// split first, sstep apart; final: into the output, else in place
		// into split first's partial row.
		merge := func(first, sstep, cnt int, final bool) error {
			for idx := 0; idx < nrows; idx++ {
				i, hq := i0+idx/c.qhpk, h*c.qhpk+idx%c.qhpk
				var prow []int
				for k := 0; k < cnt; k++ {
					r := (int(s.OIndptr[b])+(first+k*sstep)*s.QStride+i)*c.hq + hq
					if ps.written[r] != 1 || (sstep > 1 && blockMerged[r] != 1) {
						return fmt.Errorf("b %d: merging partial row %d (split %d): written %d times, block-merged %d times",
							b, r, first+k*sstep, ps.written[r], blockMerged[r])
					}
					prow = append(prow, r)
				}
				mo, ml := combineEmu(ps, prow, c.d)
				if final {
					gid := (b*c.seqlenQ+i)*c.hq + hq
					o[gid], lse[gid] = mo, ml
					outWrites[gid]++
				} else {
					ps.o[prow[0]], ps.lse[prow[0]] = mo, ml
					blockMerged[prow[0]]++
				}
			}
			return nil
		}
		if !arrive(base+1+kt/G, min(G, n-s0)) {
			continue
		}
		if nblk == 1 {
			combined[base]++
			if err := merge(0, 1, n, true); err != nil {
				return nil, nil, err
			}
			continue
		}
		if err := merge(s0, 1, min(G, n-s0), false); err != nil {
			return nil, nil, err
		}
		if !arrive(base, nblk) {
			continue
		}
		combined[base]++
		if err := merge(0, G, nblk, true); err != nil {
			return nil, nil, err
		}
	}
	for ci, v := range counters {
		if v != 0 {
			return nil, nil, fmt.Errorf("counter %d is %d after the launch, want 0", ci, v)
		}
		if ci%stride == 0 && combined[ci] != 1 {
			return nil, nil, fmt.Errorf("group %d combined %d times, want once", ci/stride, combined[ci])
		}
	}
	for r, n := range outWrites {
		if n != 1 {
			return nil, nil, fmt.Errorf("output row %d written %d times", r, n)
		}
	}
	return o, lse, nil
}

// pipeCases are the decodeCases, plus a batch-1 long context that splits
// over the SMs, a case with 16-token pages (4 pages per span) and a chunk
// ending mid-page, and NVFP4 K/V at D 128 (E4M3 Q, 16-token pages) and
// D 256 (sparse, blocks straddling spans and chunks).
func pipeCases() []*decodeCase {
	return append(decodeCases(),
		&decodeCase{name: "bf16/b1/long/auto-split", batch: 1, seqlenQ: 1, hkv: 1, qhpk: 16, d: 128, pageSize: 128,
			seqused: []int32{40000 + 77}, qd: BF16, kvd: BF16, round: RoundBF16},
		&decodeCase{name: "bf16fp8/page16/fixed-split", batch: 3, seqlenQ: 2, hkv: 2, qhpk: 8, d: 64, pageSize: 16, fixedSplit: 5,
			seqused: []int32{1000, 81, 0}, qd: BF16, kvd: E4M3, round: RoundBF16},
		&decodeCase{name: "bf16/q2k/blk200/page16", batch: 2, seqlenQ: 3, hkv: 1, qhpk: 16, d: 128, pageSize: 16, fixedSplit: 7,
			topK: 6, blk: 200, seqused: []int32{2500, 333}, qd: BF16, kvd: BF16, round: RoundBF16},
		&decodeCase{name: "nvfp4/e4m3q/d128/page16/fixed-split", batch: 2, seqlenQ: 1, hkv: 2, qhpk: 8, d: 128, pageSize: 16, fixedSplit: 5,
			seqused: []int32{900, 77}, qd: E4M3, kvd: NVFP4, round: RoundBF16},
		&decodeCase{name: "nvfp4/q2k/d256/blk96/page32", batch: 2, seqlenQ: 2, hkv: 1, qhpk: 4, d: 256, pageSize: 32, fixedSplit: 3,
			topK: 4, blk: 96, seqused: []int32{1300, 200}, qd: BF16, kvd: NVFP4, round: RoundBF16},
	)
}

// pipeStages is PipeCfg::kStages of the kernel a case runs on (the launch table).
func pipeStages(t *testing.T, c *decodeCase) int {
	v, _ := pipeVariant(c.qd, c.kvd)
	name, l, _, why := TCDecodePipePlan(ArchSM90, &DecodeArgs{QDtype: c.qd, KVDtype: c.kvd, D: c.d, PVRound: c.round}, FP8PVWiden)
	if why != "" {
		t.Fatalf("%s: %s (%s)", c.name, why, v)
	}
	if name != PipeName(v, c.d) {
		t.Fatalf("%s: kernel %s", c.name, name)
	}
	return l.Stages
}

// TestPipeDecodeEmulation runs every case through the emulated kernel and
// compares the outputs with the direct reference (float64 on both sides:
// the emulation reorders sums only, so 1e-9 absolute bounds the difference).
func TestPipeDecodeEmulation(t *testing.T) {
	for i, c := range pipeCases() {
		genDecode(t, c, uint64(100+i))
		o, lse, err := pipeEmu(c, pipeStages(t, c), rand.New(rand.NewPCG(uint64(i), 3)), pipeOK)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		wantO, wantLSE := c.refDecode()
		for r := range lse {
			if !(math.Abs(lse[r]-wantLSE[r]) < 1e-9 || math.IsInf(lse[r], -1) && math.IsInf(wantLSE[r], -1)) {
				t.Fatalf("%s: row %d LSE %v, want %v", c.name, r, lse[r], wantLSE[r])
			}
			for cc := 0; cc < c.d; cc++ {
				if math.Abs(o[r][cc]-wantO[r*c.d+cc]) > 1e-9 {
					t.Fatalf("%s: row %d O[%d] %v, want %v", c.name, r, cc, o[r][cc], wantO[r*c.d+cc])
				}
			}
		}
		t.Logf("%s: split %v, %d items, %d counters", c.name, c.sched.SplitKV, c.sched.WorkCount, PipeCounters(c.sched))
	}
}

// TestPipeRing checks the ring for every stream length from 0 to 13 spans at
// every stage count of the launch table (3, 4, 7, 8): span n is read from
// slot n % S, after its group completed, and no span is overwritten before
// it is read.
func TestPipeRing(t *testing.T) {
	for _, S := range []int{3, 4, 7, 8} {
		for n := 0; n <= 13; n++ {
			slots, err := ringEmu(n, S, pipeOK)
			if err != nil {
				t.Fatalf("S %d, %d spans: %v", S, n, err)
			}
			for i, sl := range slots {
				if sl != i%S {
					t.Fatalf("S %d: span %d read from slot %d", S, i, sl)
				}
			}
		}
	}
}

// TestPipeEmulationMutations shows each injected bug is caught: by the ring
// check, the landing check, the counter protocol or the comparison with the
// reference.
func TestPipeEmulationMutations(t *testing.T) {
	cases := pipeCases()
	for m := pipeMutWait; m <= pipeMutNibble; m++ {
		caught := false
		for i, c := range cases {
			genDecode(t, c, uint64(100+i))
			o, lse, err := pipeEmu(c, pipeStages(t, c), rand.New(rand.NewPCG(uint64(i), 3)), m)
			if err == nil {
				wantO, wantLSE := c.refDecode()
				for r := range lse {
					bad := !(math.Abs(lse[r]-wantLSE[r]) < 1e-9 || math.IsInf(lse[r], -1) && math.IsInf(wantLSE[r], -1))
					for cc := 0; cc < c.d && !bad; cc++ {
						bad = math.Abs(o[r][cc]-wantO[r*c.d+cc]) > 1e-9
					}
					if bad {
						err = fmt.Errorf("row %d differs from the reference", r)
						break
					}
				}
			}
			if err != nil {
				t.Logf("mutation %q caught on %s: %v", m, c.name, err)
				caught = true
				break
			}
		}
		if !caught {
			t.Errorf("mutation %q is not caught by any case", m)
		}
	}
}
