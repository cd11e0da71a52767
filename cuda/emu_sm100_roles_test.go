package cuda

// The warp roles of the SM100 prefill kernel (sm100_fwd.cu) as the
// emulation runs them: the MMA warp's lane 0 (the CTA's only tcgen05.mma /
// tcgen05.commit issuer, polling the S and O chains) and one softmax
// warpgroup per pipeline slot, each running steps when the mbarrier phase
// they wait for has completed. A scheduler interleaves the
// roles under every priority order, so the barrier ledger (parities, phase
// overruns, deadlocks) and the buffer hand-offs (which Q or P a slot's
// shared-memory tile holds when an MMA reads it, which S or O a slot's
// tensor-memory columns hold when a warpgroup reads them, and that nothing
// is overwritten while a product may still read it) are checked for every
// order the hardware could pick, not only one.

import (
	"fmt"
	"os"
	"strings"
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
	mutSkipQReadyWait             // the issuer issues S(i) without waiting for Q ready
	mutGatherBeforeO              // a warpgroup gathers its next Q before O(i) has completed
	mutOneSBuffer                 // both slots' S in the same TMEM columns
	mutSkipPReadyWait             // the issuer issues O(j) without waiting for P ready
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
	for oi, order := range permutations(slots + 1) {
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
		roles := []role{&issuerRole{r: r, landK: landK}}
		for s := 0; s < slots; s++ {
			roles = append(roles, &progRole{r: r, order: order, prog: r.softmaxProgram(s, ep)})
		}
		r.run(roles, order)
		for _, b := range append([]*mbar{r.barK, r.barV}, append(append(r.qReady, r.sDone...), append(r.pReady, r.oDone...)...)...) {
			if b.completed != b.waited {
				r.fail("order %v: barrier %s completed %d phases, %d waited", order, b.name, b.completed, b.waited)
			}
		}
	}
}

// role is one thread group of the CTA: try runs its next step if that step
// can run now, and reports whether it ran and whether the role has ended.
type role interface {
	try() (ran, done bool)
}

// progRole runs a fixed program of steps.
type progRole struct {
	r     *fwdRoles
	order []int
	prog  []roleStep
	pc    int
}

func (p *progRole) try() (ran, done bool) {
	r := p.r
	if p.pc == len(p.prog) {
		return false, true
	}
	st := p.prog[p.pc]
	if st.observe {
		if !r.observe(st.bar, st.parity, p.order) {
			return false, false
		}
	} else if st.bar != nil {
		if st.bar.completed < st.bar.waited+1 {
			return false, false // blocked on an incomplete phase
		}
		st.bar.wait(r.t, st.parity)
	}
	if st.act != nil {
		st.act()
	}
	p.pc++
	return true, false
}

// observe is an observing wait on b (a second waiter that does not consume
// phases): phase 0 must have completed and no later phase.
func (r *fwdRoles) observe(b *mbar, parity uint32, order []int) bool {
	if b.completed < 1 {
		return false
	}
	if parity != 0 || b.completed != 1 {
		r.fail("order %v: observing wait on %s with parity %d after %d phases", order, b.name, parity, b.completed)
	}
	return true
}

// run interleaves the roles: at each step the first role in `order` whose
// next step can run runs it; when none can and some has not ended, every
// role waits on a phase that never completes (a hang on the GPU, which the
// kernel's bounded waits turn into a trap).
func (r *fwdRoles) run(roles []role, order []int) {
	r.t.Helper()
	if !runRoles(roles, func() []int { return order }) {
		r.fail("order %v: deadlock, every role waits", order)
	}
}

// runRoles runs roles to their ends: at each step the first role in the
// order next returns whose next step can run runs it. It reports false on
// a deadlock (no role can run and some has not ended).
func runRoles(roles []role, next func() []int) bool {
	for {
		ran, done := false, true
		for _, ri := range next() {
			rr, dd := roles[ri].try()
			if !dd {
				done = false
			}
			if rr {
				ran = true
				break
			}
		}
		if done {
			return true
		}
		if !ran {
			return false
		}
	}
}

// issuerRole is the MMA warp's lane 0 (sm100_fwd.cu): the K/V TMA, then a
// poll of two in-order chains, S(ns) once Q ready of its slot (and, tile 0
// of the TMA variants, K) has completed, O(no) once P ready of its slot
// (and V) has. One try is one iteration of the kernel's poll (S, then O);
// the scheduler's interleavings cover the timings in which either chain's
// barrier completes first.
type issuerRole struct {
	r            *fwdRoles
	landK        func(*mbar)
	started      bool
	ns, no       int
	kSeen, vSeen bool
}

func (q *issuerRole) try() (ran, done bool) {
	r := q.r
	S, tiles := r.slots, r.tiles
	if !q.started {
		q.landK(r.barK)
		if !r.conv {
			r.landV(r.barV)
		}
		q.kSeen, q.vSeen, q.started = r.conv, r.conv, true
		return true, false
	}
	if q.no == tiles {
		return false, true
	}
	if q.ns < tiles {
		if !q.kSeen && r.barK.completed >= 1 {
			r.barK.wait(r.t, 0)
			r.kReady, q.kSeen = true, true
		}
		b := r.qReady[q.ns%S]
		if q.kSeen && (r.mut == mutSkipQReadyWait || b.completed >= b.waited+1) {
			if r.mut != mutSkipQReadyWait {
				b.wait(r.t, uint32((q.ns/S)&1))
			}
			q.issueS(q.ns)
			q.ns++
			ran = true
		}
	}
	if q.no < q.ns {
		if !q.vSeen && r.barV.completed >= 1 {
			q.vSeen = r.observe(r.barV, 0, nil)
		}
		b := r.pReady[q.no%S]
		if q.vSeen && (r.mut == mutSkipPReadyWait || b.completed >= b.waited+1) {
			if r.mut != mutSkipPReadyWait {
				b.wait(r.t, uint32((q.no/S)&1))
			}
			q.issueO(q.no)
			q.no++
			ran = true
		}
	}
	return ran, false
}

// issueS is S(i) = Q K^T into slot i % slots's S columns, committed to S
// done: it checks what the product reads and overwrites.
func (q *issuerRole) issueS(i int) {
	r := q.r
	S := r.slots
	s := r.sCols(i % S)
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
}

// issueO is O(j) = P V into slot j % slots's O columns, committed to O done.
func (q *issuerRole) issueO(j int) {
	r := q.r
	s := j % r.slots
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
	b, err := os.ReadFile("../kernels/cuda/sm100/sm100_fwd.cu")
	if err != nil {
		t.Fatal(err)
	}
	checkOneIssuer(t, string(b))
	// Mutation: a commit issued by the softmax warpgroups too.
	twoIssuers := strings.Replace(string(b), "mbar_arrive(p_ready(slot));", "mbar_arrive(p_ready(slot)); umma_commit(o_done(slot));", 1)
	if twoIssuers == string(b) || !failsOn(func(t *testing.T) { checkOneIssuer(t, twoIssuers) }) {
		t.Error("single-issuer check accepted a second tcgen05.commit site")
	}
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

// checkOneIssuer checks sm100_fwd.cu's text: every tcgen05.mma (umma<) and
// tcgen05.commit (umma_commit) of the prefill lies in the MMA warp's lane-0
// block, the role the emulation's issuerRole models (the decode kernel's
// products are all issued by its thread 0).
func checkOneIssuer(t *testing.T, src string) {
	t.Helper()
	const open, end = "    if (warp == L::mma_warp) {\n", "\n    } else {\n        // ---- softmax warpgroup"
	i := strings.Index(src, open)
	j := strings.Index(src, end)
	if i < 0 || j < i {
		t.Fatal("sm100_fwd.cu: no MMA warp block followed by the softmax warpgroups")
	}
	block := src[i:j]
	if !strings.Contains(block, "if (lane == 0) {") {
		t.Error("sm100_fwd.cu: the MMA warp block does not restrict issuing to lane 0")
	}
	for _, call := range []string{"umma<", "umma_commit("} {
		if n, in := strings.Count(src, call), strings.Count(block, call); n == 0 || n != in {
			t.Errorf("sm100_fwd.cu: %d %s calls, %d of them in the MMA warp's block", n, call, in)
		}
	}
}
