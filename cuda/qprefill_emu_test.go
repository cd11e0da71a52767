package cuda

// A host emulation of the query-major kernels (sm80/sm80_qfwd.cu with
// 64-row tiles, sm100/sm100_qfwd.cu with 128-row tiles): the grid over
// QPlan tiles, the passes of a tile (qp.TileRows rows), the rows' tokens,
// heads and causal limits, the block walk with the per-row token mask and
// the online softmax, in float64, checked against the direct reference of
// ref_test.go. Like emu_test.go it pins the index arithmetic to the plan
// package's real schedules; device arithmetic needs a GPU.

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/plan"
)

// qCases are the prefill cases plus GQA extremes: one head per KV head (64
// tokens per tile), three (21 tokens, a 63-row tile) and 128 heads per KV
// head (one token, two 64-row passes).
func qCases() []*prefillCase {
	cs := prefillCases()
	cs = append(cs,
		&prefillCase{name: "bf16/dense/causal/qpk1", cuQ: []int32{0, 150, 171}, cuK: []int32{0, 400, 1000}, hkv: 2, qhpk: 1, d: 64, topK: 3, blk: 96,
			causal: true, qd: BF16, kvd: BF16, pd: F32, round: RoundBF16},
		&prefillCase{name: "bf16/dense/qpk3", cuQ: []int32{0, 50, 95}, cuK: []int32{0, 300, 500}, hkv: 1, qhpk: 3, d: 64, topK: 4, blk: 64,
			qd: BF16, kvd: BF16, pd: F32, round: RoundBF16},
		&prefillCase{name: "bf16/paged/causal/qpk128", cuQ: []int32{0, 5, 9}, cuK: []int32{0, 300, 700}, hkv: 1, qhpk: 128, d: 64, topK: 2, blk: 128,
			causal: true, paged: true, pageSize: 32, qd: BF16, kvd: BF16, pd: F32, round: RoundBF16, temp: 1.3})
	return cs
}

// qEmuOut is what the emulated kernel wrote: O, LSE, TLSE per output row
// (q*Hq + hq) and how often each row was written.
type qEmuOut struct {
	o, lse, tlse []float64
	written      []int
}

// emuQueryMajor runs the tiles of qp as sm80_qfwd.cu (64-row plans) and
// sm100_qfwd.cu (128-row plans) do: a row with no visible key in a block
// of the walk keeps its state (alpha = 1, P = 0).
func emuQueryMajor(c *prefillCase, qp *QPlan) *qEmuOut {
	rows := c.totalQ * c.hq
	out := &qEmuOut{o: make([]float64, rows*c.d), lse: make([]float64, rows), tlse: make([]float64, rows), written: make([]int, rows)}
	qpk := c.qhpk
	for t := 0; t < qp.NumTiles(); t++ { // blockIdx.x
		f := qp.Tiles[t*QTileFields:]
		b, h, first, ntok := int(f[0]), int(f[1]), int(f[2]), int(f[3])
		seqQ, seqK := c.seqQ(b), c.seqK(b)
		nrows := ntok * qpk
		for rt := 0; rt < nrows; rt += qp.TileRows {
			for r := 0; r < qp.TileRows; r++ {
				idx := rt + r
				if idx >= nrows {
					continue // padding row: no output
				}
				tok := idx / qpk
				hq := h*qpk + idx%qpk
				qrow := first + tok
				ql := qrow - int(c.cuQ[b])
				lim := seqK
				if c.causal {
					lim = min(lim, ql+seqK-seqQ+1)
				}
				qv := c.q.row(qrow*c.hq + hq)
				m, l, tl := math.Inf(-1), 0.0, 0.0
				o := make([]float64, c.d)
				for i := qp.TilePtr[t]; i < qp.TilePtr[t+1]; i++ {
					t0 := int(qp.Blocks[i]) * c.blk
					nkeys := min(c.blk, seqK-t0)
					if nkeys <= 0 {
						continue // the kernel's stream skips blocks past the sequence
					}
					bl := 0
					if qp.Masks[i]>>uint(tok)&1 != 0 {
						bl = min(max(lim-t0, 0), nkeys)
					}
					if bl == 0 {
						continue // empty for this row: alpha = 1, nothing added
					}
					s := make([]float64, bl)
					mx := math.Inf(-1)
					for j := range s {
						kr := c.k.row(c.kRow(b, t0+j, h))
						var acc float64
						for x := range qv {
							acc += float64(qv[x]) * float64(kr[x])
						}
						s[j] = acc * float64(c.scale)
						mx = math.Max(mx, s[j])
					}
					mnew := math.Max(m, mx)
					alpha := math.Exp(m - mnew)
					var sum, tsum float64
					for x := range o {
						o[x] *= alpha
					}
					for j := range s {
						p := math.Exp(s[j] - mnew)
						sum += p
						if c.temp > 0 {
							tsum += math.Exp((s[j] - mnew) / float64(c.temp))
						}
						vr := c.v.row(c.kRow(b, t0+j, h))
						for x := range o {
							o[x] += p * float64(vr[x])
						}
					}
					if c.temp > 0 {
						tl = tl*math.Exp((m-mnew)/float64(c.temp)) + tsum
					}
					l = l*alpha + sum
					m = mnew
				}
				row := qrow*c.hq + hq
				out.written[row]++
				if !(l > 0) {
					out.lse[row], out.tlse[row] = math.Inf(-1), math.Inf(-1)
					continue
				}
				for x := range o {
					out.o[row*c.d+x] = o[x] / l
				}
				out.lse[row] = m + math.Log(l)
				out.tlse[row] = out.lse[row]
				if c.temp > 0 {
					out.tlse[row] = m/float64(c.temp) + math.Log(tl)
				}
			}
		}
	}
	return out
}

// qEmuMismatch returns the first disagreement of got with the reference
// ("" when they agree within 1e-9; both -inf for an empty row; the
// temperature LSE only where got has it).
func qEmuMismatch(c *prefillCase, got *qEmuOut) string {
	wantO, wantLSE, wantTLSE := c.refPrefill()
	same := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 || math.IsInf(a, -1) && math.IsInf(b, -1) }
	for r := range got.written {
		if got.written[r] != 1 {
			return fmt.Sprintf("row %d written %d times", r, got.written[r])
		}
		if !same(got.lse[r], wantLSE[r]) {
			return fmt.Sprintf("row %d: LSE %v, want %v", r, got.lse[r], wantLSE[r])
		}
		if got.tlse != nil && !same(got.tlse[r], wantTLSE[r]) {
			return fmt.Sprintf("row %d: TLSE %v, want %v", r, got.tlse[r], wantTLSE[r])
		}
		for x := 0; x < c.d; x++ {
			if !same(got.o[r*c.d+x], wantO[r*c.d+x]) {
				return fmt.Sprintf("row %d: O[%d] = %v, want %v", r, x, got.o[r*c.d+x], wantO[r*c.d+x])
			}
		}
	}
	return ""
}

func TestEmulatedQueryMajorPrefill(t *testing.T) {
	for i, c := range qCases() {
		genPrefill(t, c, uint64(i+1))
		// The schedule as built and cut for a GPU of 64 SMs: the block
		// table must not depend on how the items are cut.
		split := SplitForOccupancy([]FwdWindow{{Q0: 0, Q1: c.totalQ, Sched: c.sched}}, c.qhpk, 64, 4*64)[0].Sched
		var first *QPlan
		for _, s := range []*plan.FwdSchedule{c.sched, split} {
			qp, err := BuildQPlan(c.csr, s, c.cuQ, c.hkv, c.qhpk, QTileRows)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			// The SM100 kernel's 128-row tiles: at most 64 tokens (one
			// mask bit each), several passes when qhead_per_kv > 128.
			qp100, err := BuildQPlan(c.csr, s, c.cuQ, c.hkv, c.qhpk, SM100QTileRows)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if want := QTileTokensFor(SM100QTileRows, c.qhpk); qp100.TileTokens != want || want > 64 || want < 64 && (want+1)*c.qhpk <= SM100QTileRows {
				t.Fatalf("%s: 128-row plan has %d tokens per tile, want %d", c.name, qp100.TileTokens, want)
			}
			if err := qp100.Validate(c.cuQ, seqKs(c), c.hkv, c.qhpk, c.blk); err != nil {
				t.Fatalf("%s: 128-row plan: %v", c.name, err)
			}
			if msg := qEmuMismatch(c, emuQueryMajor(c, qp100)); msg != "" {
				t.Fatalf("%s: 128-row plan: %s", c.name, msg)
			}
			if err := qp.Validate(c.cuQ, seqKs(c), c.hkv, c.qhpk, c.blk); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if first == nil {
				first = qp
			} else if !sameQPlan(first, qp) {
				t.Fatalf("%s: the block table depends on how the schedule's items are cut", c.name)
			}
			if msg := qEmuMismatch(c, emuQueryMajor(c, qp)); msg != "" {
				t.Fatalf("%s: %s", c.name, msg)
			}
		}
		// Mutation: a token's bit cleared from one mask (the token then
		// misses a block it selected) must be caught.
		bad := *first
		bad.Masks = append([]uint64(nil), first.Masks...)
		bad.Masks[0] &= bad.Masks[0] - 1 // lowest set bit cleared
		if bad.Masks[0] == 0 {
			bad.Masks[0] = 0 // a single-token block: Validate must refuse the empty mask instead
			if bad.Validate(c.cuQ, seqKs(c), c.hkv, c.qhpk, c.blk) == nil {
				t.Fatalf("%s: Validate accepted an empty mask", c.name)
			}
			continue
		}
		if qEmuMismatch(c, emuQueryMajor(c, &bad)) == "" {
			t.Fatalf("%s: the emulation did not notice a cleared mask bit", c.name)
		}
	}
}

func seqKs(c *prefillCase) []int32 {
	s := make([]int32, len(c.cuQ)-1)
	for b := range s {
		s[b] = int32(c.seqK(b))
	}
	return s
}

func sameQPlan(a, b *QPlan) bool {
	return slices.Equal(a.Tiles, b.Tiles) && slices.Equal(a.TilePtr, b.TilePtr) && slices.Equal(a.Blocks, b.Blocks) && slices.Equal(a.Masks, b.Masks)
}

// TestQPlanValidateRejects corrupts a valid plan one index at a time: each
// must be refused with an error.
func TestQPlanValidateRejects(t *testing.T) {
	c := prefillCases()[1]
	genPrefill(t, c, 3)
	qp, err := BuildQPlan(c.csr, c.sched, c.cuQ, c.hkv, c.qhpk, QTileRows)
	if err != nil {
		t.Fatal(err)
	}
	sk := seqKs(c)
	if err := qp.Validate(c.cuQ, sk, c.hkv, c.qhpk, c.blk); err != nil {
		t.Fatal(err)
	}
	// a tile with at least two blocks
	tl := 0
	for qp.TilePtr[tl+1]-qp.TilePtr[tl] < 2 {
		tl++
	}
	i := qp.TilePtr[tl]
	muts := map[string]func(p *QPlan){
		"batch out of range":     func(p *QPlan) { p.Tiles[0] = int32(len(c.cuQ)) },
		"head out of range":      func(p *QPlan) { p.Tiles[1] = int32(c.hkv) },
		"token past sequence":    func(p *QPlan) { p.Tiles[2] = c.cuQ[p.Tiles[0]+1] },
		"too many tokens":        func(p *QPlan) { p.Tiles[3] = int32(p.TileTokens + 1) },
		"blocks not ascending":   func(p *QPlan) { p.Blocks[i], p.Blocks[i+1] = p.Blocks[i+1], p.Blocks[i] },
		"block past sequence":    func(p *QPlan) { p.Blocks[i+1] = int32((int(sk[p.Tiles[4*tl]]) + c.blk - 1) / c.blk) },
		"mask bit past tokens":   func(p *QPlan) { p.Masks[i] |= 1 << uint(p.Tiles[4*tl+3]) },
		"empty mask":             func(p *QPlan) { p.Masks[i] = 0 },
		"pointer past blocks":    func(p *QPlan) { p.TilePtr[len(p.TilePtr)-1]++ },
		"token in two tiles":     func(p *QPlan) { p.Tiles[4+0], p.Tiles[4+1], p.Tiles[4+2] = p.Tiles[0], p.Tiles[1], p.Tiles[2] },
		"wrong tile size":        func(p *QPlan) { p.TileTokens++ },
		"unknown row tile":       func(p *QPlan) { p.TileRows = 96 },
		"rows of another kernel": func(p *QPlan) { p.TileRows = SM100QTileRows },
		"mask count":             func(p *QPlan) { p.Masks = p.Masks[1:] },
		"decreasing tile start":  func(p *QPlan) { p.TilePtr[1] = p.TilePtr[2] + 1 },
	}
	if err := qp.Validate(c.cuQ, nil, c.hkv, c.qhpk, c.blk); err != nil {
		t.Errorf("without key lengths: %v", err)
	}
	for name, mut := range muts {
		p := &QPlan{TileRows: qp.TileRows, TileTokens: qp.TileTokens, Tiles: append([]int32(nil), qp.Tiles...), TilePtr: append([]int32(nil), qp.TilePtr...),
			Blocks: append([]int32(nil), qp.Blocks...), Masks: append([]uint64(nil), qp.Masks...)}
		mut(p)
		if err := p.Validate(c.cuQ, sk, c.hkv, c.qhpk, c.blk); err == nil {
			t.Errorf("%s: Validate accepted the corrupted plan", name)
		}
	}
}

func TestBuildQPlanRejects(t *testing.T) {
	c := prefillCases()[1]
	genPrefill(t, c, 5)
	if _, err := BuildQPlan(nil, c.sched, c.cuQ, c.hkv, c.qhpk, QTileRows); err == nil {
		t.Error("nil CSR accepted")
	}
	if _, err := BuildQPlan(c.csr, c.sched, c.cuQ, c.hkv+1, c.qhpk, QTileRows); err == nil {
		t.Error("Hkv mismatch accepted")
	}
	if _, err := BuildQPlan(c.csr, c.sched, c.cuQ, c.hkv, 0, QTileRows); err == nil {
		t.Error("qhead_per_kv 0 accepted")
	}
	if _, err := BuildQPlan(c.csr, c.sched, c.cuQ, c.hkv, c.qhpk, 32); err == nil || !strings.Contains(err.Error(), "32 rows per tile") {
		t.Errorf("a 32-row tile: %v", err)
	}
	bad := *c.sched
	bad.Metadata = append([]int32(nil), c.sched.Metadata...)
	bad.Metadata[0] = int32(c.hkv)
	if _, err := BuildQPlan(c.csr, &bad, c.cuQ, c.hkv, c.qhpk, QTileRows); err == nil {
		t.Error("schedule item with a head out of range accepted")
	}
	dup := *c.sched
	dup.Metadata = append(append([]int32(nil), c.sched.Metadata[:int(dup.WorkCount)*plan.MetaFields]...), c.sched.Metadata[:plan.MetaFields]...)
	dup.WorkCount++
	dup.Capacity = int(dup.WorkCount)
	if _, err := BuildQPlan(c.csr, &dup, c.cuQ, c.hkv, c.qhpk, QTileRows); err == nil {
		t.Error("schedule covering an entry twice accepted")
	}
}
