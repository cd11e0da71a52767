package cuda

// The decode kernel's K/V ring (sm100_decode.cu, DecLayout::stages) as a
// phase protocol alone: the stage a visit is issued into, the stage and
// parity it is consumed with, and the MMA barrier's two phases per visit,
// over every sequence of per-row-tile visit counts up to a bound. Visits
// of one CTA continue the ring across its row tiles (nvis), so a row tile
// with an odd number of visits shifts the next tile's stages; a tile with
// no visit (an empty union) issues and waits nothing.

import (
	"fmt"
	"testing"
)

// ringMutation breaks one rule of the ring on purpose (TestEmulatedSM100Ring).
type ringMutation int

const (
	ringOK             ringMutation = iota
	ringParityPerVisit              // consume with parity nvis & 1 instead of (nvis / S) & 1
	ringStagePerTile                // issue into stage issued % S, forgetting the visits of earlier tiles
	ringDeepPrologue                // the prologue issues S visits: one stage ahead of the ring's depth
)

// emuDecodeRing runs one CTA's ring with S stages over row tiles of the
// given visit counts, with the kernel's walk: a prologue issuing visits
// 0 .. S-2, then per visit the issue of visit visits + S - 1 and the
// consumption of visit `visits`. The ledger fails on a parity that is not
// the waiter's phase, a wait that would never complete, a stage re-armed
// before its phase was consumed, and a phase left unconsumed.
func emuDecodeRing(t *testing.T, S int, tiles []int, mut ringMutation) {
	t.Helper()
	var barK, barV []*mbar
	for s := 0; s < S; s++ {
		barK = append(barK, &mbar{name: fmt.Sprintf("K%d", s), count: 1})
		barV = append(barV, &mbar{name: fmt.Sprintf("V%d", s), count: 1})
	}
	barMMA := &mbar{name: "MMA", count: 1}
	nvis := 0
	for _, nv := range tiles {
		visits, issued := 0, 0
		walkIssue := func() bool {
			if issued == nv {
				return false
			}
			st := (nvis - visits + issued) % S
			if mut == ringStagePerTile {
				st = issued % S
			}
			barK[st].arriveExpectTx(t, 1)
			barK[st].deliver(1)
			barV[st].arriveExpectTx(t, 1)
			barV[st].deliver(1)
			issued++
			return true
		}
		more := true
		depth := S - 1
		if mut == ringDeepPrologue {
			depth = S
		}
		for i := 0; i < depth && more; i++ {
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
			par := uint32((nvis / S) & 1)
			if mut == ringParityPerVisit {
				par = uint32(nvis & 1)
			}
			barK[si].wait(t, par)
			barMMA.commit(t)
			barMMA.wait(t, uint32((2*nvis)&1))
			barV[si].wait(t, par)
			barMMA.commit(t)
			barMMA.wait(t, uint32((2*nvis+1)&1))
			nvis++
			visits++
		}
		if visits != nv {
			t.Fatalf("stages %d tiles %v: a row tile consumed %d of its %d visits", S, tiles, visits, nv)
		}
	}
	for _, b := range append(append([]*mbar{barMMA}, barK...), barV...) {
		if b.completed != b.waited {
			t.Fatalf("stages %d tiles %v: barrier %s: %d phases completed, %d waited", S, tiles, b.name, b.completed, b.waited)
		}
	}
}

// TestEmulatedSM100Ring runs the ring for one and two stages over every
// sequence of up to three row tiles with 0 to 5 visits each, and checks
// that each mutation of the ring's rules is caught on some sequence.
func TestEmulatedSM100Ring(t *testing.T) {
	var seqs [][]int
	var gen func(prefix []int)
	gen = func(prefix []int) {
		if len(prefix) > 0 {
			seqs = append(seqs, append([]int(nil), prefix...))
		}
		if len(prefix) == 3 {
			return
		}
		for v := 0; v <= 5; v++ {
			gen(append(prefix, v))
		}
	}
	gen(nil)
	for _, S := range []int{1, 2} {
		for _, s := range seqs {
			emuDecodeRing(t, S, s, ringOK)
		}
	}
	for _, m := range []struct {
		name string
		mut  ringMutation
	}{
		{"parity per visit instead of per stage use", ringParityPerVisit},
		{"stage from the tile's own visits", ringStagePerTile},
		{"a prologue one visit too deep", ringDeepPrologue},
	} {
		caught := false
		for _, s := range seqs {
			if failsOn(func(t *testing.T) { emuDecodeRing(t, 2, s, m.mut) }) {
				caught = true
				break
			}
		}
		if !caught {
			t.Errorf("ring emulation accepted: %s", m.name)
		}
	}
}
