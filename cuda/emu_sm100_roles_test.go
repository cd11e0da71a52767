package cuda

// The warp roles of the SM100 prefill kernel (sm100_fwd.cu) as the
// emulation runs them: the S warp's and the O warp's issuing lanes and one
// softmax warpgroup per pipeline slot, each a program of steps that run when the
// mbarrier phase they wait for has completed. A scheduler interleaves the
// roles under every priority order, so the barrier ledger (parities, phase
// overruns, deadlocks) and the buffer hand-offs (which Q or P a slot's
// shared-memory tile holds when an MMA reads it, which S or O a slot's
// tensor-memory columns hold when a warpgroup reads them, and that nothing
// is overwritten while a product may still read it) are checked for every
// order the hardware could pick, not only one.

import (
	"fmt"
	"testing"
)

// roleStep is one step of a role: wait for phase `parity` of `bar` (nil: no
// wait), then act. An observing wait (observe) is a second waiter on a
// barrier whose phases another role consumes: it needs phase 0 complete and
// no later phase (the kernel's second waits are all on phase 0).
type roleStep struct {
	bar     *mbar
	parity  uint32
	observe bool
	act     func()
}

// fwdMutation breaks one rule of the kernel on purpose, so that a test can
// show the emulation notices (TestEmulatedSM100Roles).
type fwdMutation int

const (
	mutNone           fwdMutation = iota
	mutSkipQReadyWait             // the S issuer issues S(i) without waiting for Q ready
	mutGatherBeforeO              // a warpgroup gathers its next Q before O(i) has completed
	mutOneSBuffer                 // both slots' S in the same TMEM columns
	mutSkipPReadyWait             // the O issuer issues O(j) without waiting for P ready
)

// fwdRoles is the state of one work item's CTA: the barriers, what each
// slot's Q/P tile and S/O columns hold, and the roles' programs.
type fwdRoles struct {
	t       *testing.T
	slots   int
	tiles   int  // row tiles of the item
	conv    bool // converted K/V (warpgroup 0 converts; V lands after K)
	mut     fwdMutation
	landV   func(*mbar)
	barK    *mbar
	barV    *mbar
	qReady  []*mbar
	sDone   []*mbar
	pReady  []*mbar
	oDone   []*mbar
	qp      []string // content of slot s's Q/P tile: "Q3", "P3", "" (landed content only)
	qpBusy  []string // the product that may still read the tile until its completion is waited
	tmS     []string // content of slot s's S columns and whether it has been read
	tmSRead []bool
	tmO     []string
	tmORead []bool
	kReady  bool
	vReady  bool
}

func (r *fwdRoles) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("prefill roles: "+format, args...)
}

// emuFwdRoles runs one item's roles with `tiles` row tiles under every
// priority order of the roles. landK / landV arm and deliver the K and V
// tiles (landTile); epilogue(i) records row tile i's output rows and runs
// once per tile in the first order only.
func emuFwdRoles(t *testing.T, slots, tiles int, conv bool, mut fwdMutation, landK, landV func(*mbar), epilogue func(int)) {
	t.Helper()
	roles := slots + 2
	for oi, order := range permutations(roles) {
		r := &fwdRoles{t: t, slots: slots, tiles: tiles, conv: conv, mut: mut, landV: landV,
			barK: &mbar{name: "K", count: 1}, barV: &mbar{name: "V", count: 1}}
		for s := 0; s < slots; s++ {
			r.qReady = append(r.qReady, &mbar{name: fmt.Sprintf("Q ready %d", s), count: 1}) // 128 arrivals, one per row thread: the warpgroup as a unit
			r.sDone = append(r.sDone, &mbar{name: fmt.Sprintf("S done %d", s), count: 1})
			r.pReady = append(r.pReady, &mbar{name: fmt.Sprintf("P ready %d", s), count: 1})
			r.oDone = append(r.oDone, &mbar{name: fmt.Sprintf("O done %d", s), count: 1})
		}
		r.qp, r.qpBusy = make([]string, slots), make([]string, slots)
		r.tmS, r.tmO = make([]string, slots), make([]string, slots)
		r.tmSRead, r.tmORead = make([]bool, slots), make([]bool, slots)
		ep := func(int) {}
		if oi == 0 {
			ep = epilogue
		}
		progs := [][]roleStep{r.sProgram(landK), r.oProgram()}
		for s := 0; s < slots; s++ {
			progs = append(progs, r.softmaxProgram(s, ep))
		}
		r.run(progs, order)
		for _, b := range append([]*mbar{r.barK, r.barV}, append(append(r.qReady, r.sDone...), append(r.pReady, r.oDone...)...)...) {
			if b.completed != b.waited {
				r.fail("order %v: barrier %s completed %d phases, %d waited", order, b.name, b.completed, b.waited)
			}
		}
	}
}

// run interleaves the programs: at each step the first role in `order`
// whose next step can run (its barrier phase has completed) runs it.
func (r *fwdRoles) run(progs [][]roleStep, order []int) {
	r.t.Helper()
	pc := make([]int, len(progs))
	for {
		ran, done := false, true
		for _, ri := range order {
			if pc[ri] == len(progs[ri]) {
				continue
			}
			done = false
			st := progs[ri][pc[ri]]
			if st.observe {
				if st.bar.completed < 1 {
					continue
				}
				if st.parity != 0 || st.bar.completed != 1 {
					r.fail("order %v: observing wait on %s with parity %d after %d phases", order, st.bar.name, st.parity, st.bar.completed)
				}
			} else if st.bar != nil {
				if st.bar.completed < st.bar.waited+1 {
					continue // blocked on an incomplete phase
				}
				st.bar.wait(r.t, st.parity)
			}
			if st.act != nil {
				st.act()
			}
			pc[ri]++
			ran = true
			break
		}
		if done {
			return
		}
		if !ran {
			r.fail("order %v: deadlock, every role waits (program counters %v)", order, pc)
		}
	}
}

// sProgram is the S warp's lane 0: the K/V TMA, then S(i) for i = 0, 1, ...
func (r *fwdRoles) sProgram(landK func(*mbar)) []roleStep {
	S, tiles, conv, mut := r.slots, r.tiles, r.conv, r.mut
	p := []roleStep{{act: func() {
		landK(r.barK)
		if !conv {
			r.landV(r.barV)
		}
	}}}
	for i := 0; i < tiles; i++ {
		s := r.sCols(i % S)
		if mut != mutSkipQReadyWait {
			p = append(p, roleStep{bar: r.qReady[i%S], parity: uint32((i / S) & 1)})
		}
		if !conv && i == 0 {
			p = append(p, roleStep{bar: r.barK, parity: 0, act: func() { r.kReady = true }})
		}
		p = append(p, roleStep{act: func() {
			if !r.kReady {
				r.fail("S(%d) issued before the K tile is complete", i)
			}
			if r.qp[i%S] != fmt.Sprintf("Q%d", i) {
				r.fail("S(%d) reads slot %d's tile holding %q", i, i%S, r.qp[i%S])
			}
			if r.tmS[s] != "" && !r.tmSRead[s] {
				r.fail("S(%d) overwrites %s in slot %d's S columns before it was read", i, r.tmS[s], s)
			}
			r.tmS[s], r.tmSRead[s] = fmt.Sprintf("S%d", i), false
			r.qpBusy[i%S] = fmt.Sprintf("S%d", i)
			r.sDone[i%S].commit(r.t)
		}})
	}
	return p
}

// oProgram is the O warp's lane 0: O(j) for j = 0, 1, ...
func (r *fwdRoles) oProgram() []roleStep {
	S, tiles, conv, mut := r.slots, r.tiles, r.conv, r.mut
	var p []roleStep
	for j := 0; j < tiles; j++ {
		s := j % S
		if mut != mutSkipPReadyWait {
			p = append(p, roleStep{bar: r.pReady[s], parity: uint32((j / S) & 1)})
		}
		if !conv && j == 0 { // the O issuer observes the V TMA itself too
			p = append(p, roleStep{bar: r.barV, parity: 0, observe: true})
		}
		p = append(p, roleStep{act: func() {
			if !r.vReady {
				r.fail("O(%d) issued before the V tile is complete", j)
			}
			if r.qp[s] != fmt.Sprintf("P%d", j) {
				r.fail("O(%d) reads slot %d's tile holding %q", j, s, r.qp[s])
			}
			if r.tmO[s] != "" && !r.tmORead[s] {
				r.fail("O(%d) overwrites %s in slot %d's O columns before it was read", j, r.tmO[s], s)
			}
			r.tmO[s], r.tmORead[s] = fmt.Sprintf("O%d", j), false
			r.qpBusy[s] = fmt.Sprintf("O%d", j)
			r.oDone[s].commit(r.t)
		}})
	}
	return p
}

// softmaxProgram is softmax warpgroup s: the first Q gather (warpgroup 0 of
// a converted variant also converts K and V), then per row tile i = s,
// s + slots, ...: wait S done, softmax (P over the Q tile), V rows past the
// block zeroed (tile 0, TMA variants), P ready, wait O done, the next
// gather, the epilogue, Q ready.
func (r *fwdRoles) softmaxProgram(s int, epilogue func(int)) []roleStep {
	S, tiles, conv, mut := r.slots, r.tiles, r.conv, r.mut
	var p []roleStep
	gather := func(i int) roleStep {
		return roleStep{act: func() {
			if r.qpBusy[s] != "" {
				r.fail("slot %d gathers Q%d while %s may still read its tile", s, i, r.qpBusy[s])
			}
			r.qp[s] = "" // cp.async in flight: the tile holds nothing usable until Q ready
		}}
	}
	publish := func(i int) roleStep {
		return roleStep{act: func() {
			r.qp[s] = fmt.Sprintf("Q%d", i)
			r.qReady[s].commit(r.t)
		}}
	}
	if s >= tiles {
		return nil
	}
	p = append(p, gather(s))
	if conv && s == 0 {
		p = append(p, roleStep{bar: r.barK, parity: 0, act: func() { r.kReady = true }},
			roleStep{act: func() { r.landV(r.barV) }},
			roleStep{bar: r.barV, parity: 0, act: func() { r.vReady = true }})
	}
	p = append(p, publish(s))
	for i, n := s, 0; i < tiles; i, n = i+S, n+1 {
		p = append(p, roleStep{bar: r.sDone[s], parity: uint32(n & 1), act: func() {
			r.qpBusy[s] = "" // S(i) has completed: its Q reads are done
			sc := r.sCols(s)
			if r.tmS[sc] != fmt.Sprintf("S%d", i) {
				r.fail("softmax of tile %d reads %q from slot %d's S columns", i, r.tmS[sc], sc)
			}
			r.qp[s] = fmt.Sprintf("P%d", i)
		}})
		if !conv && i == 0 {
			p = append(p, roleStep{bar: r.barV, parity: 0, act: func() { r.vReady = true }})
		}
		p = append(p, roleStep{act: func() {
			r.tmSRead[r.sCols(s)] = true
			r.pReady[s].commit(r.t)
		}})
		more := i+S < tiles
		if mut == mutGatherBeforeO && more {
			p = append(p, gather(i+S))
		}
		p = append(p, roleStep{bar: r.oDone[s], parity: uint32(n & 1), act: func() {
			if mut != mutGatherBeforeO {
				r.qpBusy[s] = "" // O(i) has completed: its P reads are done
			}
		}})
		if more && mut != mutGatherBeforeO {
			p = append(p, gather(i+S))
		}
		p = append(p, roleStep{act: func() {
			if r.tmO[s] != fmt.Sprintf("O%d", i) {
				r.fail("epilogue of tile %d reads %q from slot %d's O columns", i, r.tmO[s], s)
			}
			r.tmORead[s] = true
			epilogue(i)
		}})
		if more {
			p = append(p, publish(i+S))
		}
	}
	return p
}

// sCols is the slot whose S columns slot s's products use: s itself, or
// slot 0 for both under mutOneSBuffer.
func (r *fwdRoles) sCols(s int) int {
	if r.mut == mutOneSBuffer {
		return 0
	}
	return s
}

// permutations returns every order of 0..n-1.
func permutations(n int) [][]int {
	if n == 1 {
		return [][]int{{0}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for at := 0; at <= len(p); at++ {
			q := append(append(append([]int{}, p[:at]...), n-1), p[at:]...)
			out = append(out, q)
		}
	}
	return out
}

// TestEmulatedSM100Roles runs the role programs for one and two slots, 0 to
// 7 row tiles and both K/V paths (TMA, converted), and checks that each
// mutation of the kernel's rules is caught under some order.
func TestEmulatedSM100Roles(t *testing.T) {
	land := func(b *mbar) {
		b.arriveExpectTx(t, 64)
		b.deliver(64)
	}
	for _, slots := range []int{1, 2} {
		for _, conv := range []bool{false, true} {
			for tiles := 1; tiles <= 7; tiles++ {
				seen := make([]int, tiles)
				emuFwdRoles(t, slots, tiles, conv, mutNone, land, land, func(i int) { seen[i]++ })
				for i, n := range seen {
					if n != 1 {
						t.Errorf("slots %d conv %v tiles %d: tile %d's epilogue ran %d times", slots, conv, tiles, i, n)
					}
				}
			}
		}
	}
	landFT := func(t *testing.T) func(*mbar) {
		return func(b *mbar) {
			b.arriveExpectTx(t, 64)
			b.deliver(64)
		}
	}
	for _, m := range []struct {
		name  string
		slots int
		mut   fwdMutation
	}{
		{"S issued without waiting for Q ready", 2, mutSkipQReadyWait},
		{"S issued without waiting for Q ready, one slot", 1, mutSkipQReadyWait},
		{"next Q gathered before O(i) completed", 2, mutGatherBeforeO},
		{"next Q gathered before O(i) completed, one slot", 1, mutGatherBeforeO},
		{"both slots' S in one TMEM region", 2, mutOneSBuffer},
		{"O issued without waiting for P ready", 2, mutSkipPReadyWait},
	} {
		if !failsOn(func(t *testing.T) {
			emuFwdRoles(t, m.slots, 5, false, m.mut, landFT(t), landFT(t), func(int) {})
		}) {
			t.Errorf("role emulation accepted: %s", m.name)
		}
	}
}
