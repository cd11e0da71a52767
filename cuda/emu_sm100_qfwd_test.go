package cuda

// The roles of the SM100 query-major prefill kernel (sm100_qfwd.cu) as the
// emulation runs them: the load warp's lane 0 (K and V TMA into the ring,
// or into the raw tiles of the converted variants), the converter
// warpgroup (converted variants: raw tile to ring slot), the correction
// warpgroup (O rescale per block, the epilogue per pass), the TMA unit
// (which lands pending loads in any order), the MMA warp's
// lane 0 (every tcgen05.mma and tcgen05.commit, in program order), the
// tensor cores and the softmax warpgroup. The tensor cores execute the
// issued products in any order the PTX ISA allows: in issue order only
// for the same accumulator (the pipelined tcgen05.mma pairs), so S = Q K^T
// may overtake an earlier O += P V; a commit arrives once every product
// issued before it has executed; each product reads its operands when it
// executes (P from the S buffer the softmax stored it over). Each role runs a step when the mbarrier phase it waits for
// has completed; a scheduler interleaves them under every priority order
// and under random orders, so the barrier ledger (parities, phase
// overruns, deadlocks) and every hand-off (the Q, K, V and P a product
// reads when it executes, the S and O a warpgroup reads, nothing
// overwritten before it was read) are checked over many timings.

import (
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strings"
	"testing"
)

// qfwdMutation breaks one rule of the kernel on purpose
// (TestEmulatedSM100QFwdRoles shows the emulation notices each).
type qfwdMutation int

const (
	qmutNone           qfwdMutation = iota
	qmutSkipKEmpty                  // the load warp refills a K slot without waiting for K empty
	qmutSkipPReady                  // the correction warpgroup reads the record and arrives on O corrected without waiting for P ready
	qmutRescaleEarly                // the correction warpgroup rescales O without waiting for O done of the previous block
	qmutSkipOCorrected              // the issuer issues O += P V without waiting for O corrected
	qmutOnePReady                   // one P ready barrier for both S buffers (use n instead of buffer n & 1's use n >> 1)
	qmutOneSBuffer                  // every S in the same TMEM columns
	qmutEarlyGather                 // the next pass's Q gathered before the pass's last S was waited
	qmutSkipSReuse                  // S_{n+2} issued into the buffer holding P_n without waiting for O done(n)
	qmutSReuseStale                 // at a pass's start S_n waits O done(n-2) although O done(n-1) may have completed
	qmutZeroBeforeV                 // V rows past the block zeroed without waiting for V full
	qmutSkipVFull                   // the issuer issues O += P V without waiting for V full
	qmutConvSkipKEmpty              // the converter widens into a K slot without waiting for K empty
	qmutSkipRawEmpty                // the load warp refills the raw K tile before the converter released it
)

// qfwdCfg is one CTA's shape: ring stages, blocks in the tile's walk,
// 128-row passes and whether K/V are converted (raw tiles and the
// converter warpgroup).
type qfwdCfg struct {
	stages, nblk, npass int
	conv                bool
}

// qfwdEmu is one CTA: barriers, what each buffer holds, the pending TMA
// loads and the tensor cores' queue.
type qfwdEmu struct {
	t                            *testing.T
	c                            qfwdCfg
	mut                          qfwdMutation
	rng                          *rand.Rand // nil: loads land in issue order
	kFull, vFull, kEmpty, vEmpty []*mbar
	qReady, oDone, oCorr         *mbar
	pReady                       [2]*mbar // per S buffer: P and the row record stored over S
	sFull                        [2]*mbar
	rkFull, rvFull               *mbar // converted: raw K / V tile landed
	rkEmpty, rvEmpty             *mbar // converted: raw K / V tile widened
	rawK, rawV                   string
	q                            string    // Q tile: "Q<pass>", "" while a gather is in flight
	k, v                         []string  // ring slots: "K<n>" / "V<n>"
	s                            [2]string // TMEM S buffers: "S<n>", then "P<n>" stored over it
	sRead                        [2]bool   // the buffer's content was read (S by the softmax, P by its O += P V)
	rec                          [2]string // the softmax's record beside P: "R<n>"
	recRead                      [2]bool   // the record was read by the correction warpgroup
	o                            string    // "O<n>" (through block n), "O<n>*" (rescaled for n+1), "E<n>" (read by the epilogue)
	tma                          []qtma
	tc                           []tcOp // issued products and commits not yet executed
	loadEnded, issuerEnded       bool
	epilogues                    []string
}

// tcOp is an issued tcgen05.mma (acc: the accumulator it writes) or
// tcgen05.commit (acc "").
type tcOp struct {
	acc string
	f   func()
}

type qtma struct {
	slot *string
	val  string
	bar  *mbar
}

func (e *qfwdEmu) fail(format string, args ...any) {
	e.t.Helper()
	e.t.Fatalf("qfwd roles %+v: "+format, append([]any{e.c}, args...)...)
}

// qstep is one step of a role program: wait for phase parity of bar (nil:
// no wait) or, observe >= 0, observe phase `observe` of bar as a second
// waiter (the phase must have completed and no later one); then act.
type qstep struct {
	bar     *mbar
	parity  uint32
	observe int
	act     func()
}

// qprog is a role running a fixed program of steps.
type qprog struct {
	e    *qfwdEmu
	prog []qstep
	pc   int
}

func (p *qprog) try() (ran, done bool) {
	if p.pc == len(p.prog) {
		return false, true
	}
	st, e := p.prog[p.pc], p.e
	switch {
	case st.bar != nil && st.observe >= 0:
		if st.bar.completed < st.observe+1 {
			return false, false
		}
		if st.bar.completed != st.observe+1 {
			e.fail("observing phase %d of %s after %d phases completed", st.observe, st.bar.name, st.bar.completed)
		}
	case st.bar != nil:
		if st.bar.completed < st.bar.waited+1 {
			return false, false
		}
		st.bar.wait(e.t, st.parity)
	}
	if st.act != nil {
		st.act()
	}
	p.pc++
	return true, false
}

// tmaRole lands one pending load per step (a random one under rng).
type tmaRole struct{ e *qfwdEmu }

func (r tmaRole) try() (ran, done bool) {
	e := r.e
	if len(e.tma) == 0 {
		return false, e.loadEnded
	}
	i := 0
	if e.rng != nil {
		i = e.rng.Intn(len(e.tma))
	}
	l := e.tma[i]
	e.tma = append(e.tma[:i], e.tma[i+1:]...)
	*l.slot = l.val
	l.bar.deliver(1)
	return true, false
}

// tensorRole executes one issued product or commit per step: a product
// once no earlier product into its accumulator is pending, a commit once
// no earlier product is; among those, a random one under rng, else the
// youngest (the one furthest from issue order).
type tensorRole struct{ e *qfwdEmu }

func (r tensorRole) try() (ran, done bool) {
	e := r.e
	if len(e.tc) == 0 {
		return false, e.issuerEnded
	}
	var ok []int
	for i, op := range e.tc {
		ready := true
		for _, prev := range e.tc[:i] {
			if prev.acc != "" && (op.acc == "" || prev.acc == op.acc) {
				ready = false
				break
			}
		}
		if ready {
			ok = append(ok, i)
		}
	}
	i := ok[len(ok)-1]
	if e.rng != nil {
		i = ok[e.rng.Intn(len(ok))]
	}
	op := e.tc[i]
	e.tc = append(e.tc[:i], e.tc[i+1:]...)
	op.f()
	return true, false
}

// product and commit queue a tcgen05.mma into accumulator acc and a
// tcgen05.commit.
func (e *qfwdEmu) product(acc string, f func()) { e.tc = append(e.tc, tcOp{acc, f}) }
func (e *qfwdEmu) commit(f func())              { e.tc = append(e.tc, tcOp{"", f}) }

func (e *qfwdEmu) sBuf(n int) int {
	if e.mut == qmutOneSBuffer {
		return 0
	}
	return n & 1
}

// qwait is a step waiting for use `use` of b (parity use & 1); qact a
// step that only acts.
func qwait(b *mbar, use int) qstep { return qstep{bar: b, parity: uint32(use & 1), observe: -1} }
func qact(f func()) qstep          { return qstep{act: f, observe: -1} }

// loadProgram is the load warp: K_n then V_n of every block of every pass,
// each after the product that read the slot's previous content committed.
func (e *qfwdEmu) loadProgram() []qstep {
	var p []qstep
	st := e.c.stages
	for n := 0; n < e.c.npass*e.c.nblk; n++ {
		s, u := n%st, n/st
		issue := func(slot *string, val string, full *mbar) qstep {
			return qact(func() {
				full.arriveExpectTx(e.t, 1)
				e.tma = append(e.tma, qtma{slot, val, full})
			})
		}
		if e.c.conv {
			if n > 0 && e.mut != qmutSkipRawEmpty {
				p = append(p, qwait(e.rkEmpty, n-1))
			}
			p = append(p, issue(&e.rawK, fmt.Sprintf("RK%d", n), e.rkFull))
			if n > 0 {
				p = append(p, qwait(e.rvEmpty, n-1))
			}
			p = append(p, issue(&e.rawV, fmt.Sprintf("RV%d", n), e.rvFull))
			continue
		}
		if u > 0 && e.mut != qmutSkipKEmpty {
			p = append(p, qwait(e.kEmpty[s], u-1))
		}
		p = append(p, issue(&e.k[s], fmt.Sprintf("K%d", n), e.kFull[s]))
		if u > 0 {
			p = append(p, qwait(e.vEmpty[s], u-1))
		}
		p = append(p, issue(&e.v[s], fmt.Sprintf("V%d", n), e.vFull[s]))
	}
	return append(p, qact(func() { e.loadEnded = true }))
}

// converterProgram is the converter warpgroup (converted variants): per
// block, the raw K into ring slot n % stages once it has landed and the
// slot is empty, then V; each raw tile released after it was read.
func (e *qfwdEmu) converterProgram() []qstep {
	var p []qstep
	st := e.c.stages
	for n := 0; n < e.c.npass*e.c.nblk; n++ {
		s, u := n%st, n/st
		widen := func(raw *string, rawFull, rawEmpty *mbar, empty []*mbar, slot []string, full []*mbar, what string, skipEmpty bool) {
			p = append(p, qwait(rawFull, n))
			if u > 0 && !skipEmpty {
				p = append(p, qwait(empty[s], u-1))
			}
			p = append(p, qact(func() {
				if *raw != fmt.Sprintf("R%s%d", what, n) {
					e.fail("converter widens %s%d from a raw tile holding %q", what, n, *raw)
				}
				slot[s] = fmt.Sprintf("%s%d", what, n)
				full[s].commit(e.t) // 128 arrivals: the warpgroup as a unit
				rawEmpty.commit(e.t)
			}))
		}
		widen(&e.rawK, e.rkFull, e.rkEmpty, e.kEmpty, e.k, e.kFull, "K", e.mut == qmutConvSkipKEmpty)
		widen(&e.rawV, e.rvFull, e.rvEmpty, e.vEmpty, e.v, e.vFull, "V", false)
	}
	return p
}

// issuerProgram is the MMA warp's lane 0: per pass, Q ready, S_0, then per
// block S_{n+1} (once O done(n-1): its buffer holds P_{n-1}) before
// O += P_n V_n.
func (e *qfwdEmu) issuerProgram() []qstep {
	var p []qstep
	st := e.c.stages
	// S_n waits, as a second waiter of O done, for the last O product
	// issued (use u: n-2 inside a pass, n-1 at its start), which covers
	// O += P_{n-2} V_{n-2}, the reader of S_n's buffer.
	issueS := func(n, u, pass int) {
		s := n % st
		if n >= 2 && e.mut != qmutSkipSReuse {
			p = append(p, qstep{bar: e.oDone, observe: u})
		}
		p = append(p, qwait(e.kFull[s], n/st), qact(func() {
			b := e.sBuf(n)
			e.product(fmt.Sprintf("S%d", b), func() {
				if e.q != fmt.Sprintf("Q%d", pass) || e.k[s] != fmt.Sprintf("K%d", n) {
					e.fail("S%d reads Q %q and K slot %d %q", n, e.q, s, e.k[s])
				}
				if e.s[b] != "" && !e.sRead[b] || e.rec[b] != "" && !e.recRead[b] {
					e.fail("S%d overwrites %s / %s before it was read", n, e.s[b], e.rec[b])
				}
				e.s[b], e.sRead[b] = fmt.Sprintf("S%d", n), false
			})
			e.commit(func() { e.sFull[b].commit(e.t) })
			if n+st < e.c.npass*e.c.nblk { // only a slot that is refilled
				e.commit(func() { e.kEmpty[s].commit(e.t) })
			}
		}))
	}
	n := 0
	if e.c.nblk > 0 {
		for pass := 0; pass < e.c.npass; pass++ {
			p = append(p, qwait(e.qReady, pass))
			if e.mut == qmutSReuseStale {
				issueS(n, n-2, pass)
			} else {
				issueS(n, n-1, pass)
			}
			for i := 0; i < e.c.nblk; i, n = i+1, n+1 {
				n := n // the closures below keep this block's index
				if i+1 < e.c.nblk {
					issueS(n+1, n-1, pass)
				}
				s := n % st
				// O corrected(n) follows the correction's wait on P ready(n).
				if e.mut != qmutSkipOCorrected {
					p = append(p, qwait(e.oCorr, n))
				}
				if e.mut != qmutSkipVFull {
					p = append(p, qwait(e.vFull[s], n/st))
				}
				p = append(p, qact(func() {
					b := e.sBuf(n)
					e.product("O", func() {
						if e.s[b] != fmt.Sprintf("P%d", n) || e.v[s] != fmt.Sprintf("V%d", n) {
							e.fail("O += P%d V%d reads S buffer %d %q and V slot %d %q", n, n, b, e.s[b], s, e.v[s])
						}
						e.sRead[b] = true
						if want := fmt.Sprintf("O%d*", n-1); i > 0 && e.o != want || i == 0 && e.o != "" && !strings.HasPrefix(e.o, "E") {
							e.fail("O += P%d V%d (block %d of its pass) finds O %q", n, n, i, e.o)
						}
						e.o = fmt.Sprintf("O%d", n)
					})
					if n+st < e.c.npass*e.c.nblk {
						e.commit(func() { e.vEmpty[s].commit(e.t) })
					}
					e.commit(func() { e.oDone.commit(e.t) })
				}))
			}
		}
	}
	return append(p, qact(func() { e.issuerEnded = true }))
}

// pReadyOf is the barrier and use the softmax arrives on and the
// correction warpgroup waits for block n (its only waiter: the issuer's
// wait on O corrected(n) follows it).
func (e *qfwdEmu) pReadyOf(n int) (*mbar, int) {
	if e.mut == qmutOnePReady {
		return e.pReady[0], n
	}
	return e.pReady[n&1], n >> 1
}

// softmaxProgram is the softmax warpgroup: the Q gathers, per block the S
// read with P and the row's record stored over it, V zeroing and P ready.
// It waits for no product of O.
func (e *qfwdEmu) softmaxProgram() []qstep {
	var p []qstep
	st := e.c.stages
	gather := func(pass int) {
		p = append(p, qact(func() { e.q = "" }), qact(func() {
			e.q = fmt.Sprintf("Q%d", pass)
			e.qReady.commit(e.t)
		}))
	}
	if e.c.nblk > 0 {
		gather(0)
	}
	n := 0
	for pass := 0; pass < e.c.npass; pass++ {
		if e.mut == qmutEarlyGather && pass+1 < e.c.npass && e.c.nblk > 0 {
			gather(pass + 1)
		}
		for i := 0; i < e.c.nblk; i, n = i+1, n+1 {
			n := n // the closures below keep this block's index
			b := e.sBuf(n)
			p = append(p, qwait(e.sFull[b], n>>1), qact(func() {
				if e.s[b] != fmt.Sprintf("S%d", n) {
					e.fail("softmax of block %d reads %q", n, e.s[b])
				}
				e.s[b], e.sRead[b] = fmt.Sprintf("P%d", n), false // P over the S just read, in its own lane
				e.rec[b], e.recRead[b] = fmt.Sprintf("R%d", n), false
			}))
			zero := qact(func() {
				if e.v[n%st] != fmt.Sprintf("V%d", n) {
					e.fail("V rows of block %d zeroed in slot %d holding %q", n, n%st, e.v[n%st])
				}
			})
			if e.mut != qmutZeroBeforeV {
				zero.bar, zero.observe = e.vFull[n%st], n/st
			}
			if !e.c.conv { // the converter zeroes the rows past the block itself
				p = append(p, zero)
			}
			bar, _ := e.pReadyOf(n)
			p = append(p, qact(func() { bar.commit(e.t) }))
		}
		if e.c.nblk > 0 && e.mut != qmutEarlyGather && pass+1 < e.c.npass {
			gather(pass + 1)
		}
	}
	return p
}

// correctionProgram is the correction warpgroup: per block the record
// read, O rescaled once O done of the previous block (not at a pass's
// first block) and O corrected; per pass the epilogue once O done of its
// last block.
func (e *qfwdEmu) correctionProgram() []qstep {
	var p []qstep
	n := 0
	for pass := 0; pass < e.c.npass; pass++ {
		for i := 0; i < e.c.nblk; i, n = i+1, n+1 {
			n := n // the closures below keep this block's index
			b := e.sBuf(n)
			bar, use := e.pReadyOf(n)
			if e.mut != qmutSkipPReady {
				p = append(p, qwait(bar, use))
			}
			p = append(p, qact(func() {
				if e.rec[b] != fmt.Sprintf("R%d", n) {
					e.fail("correction of block %d reads the record %q", n, e.rec[b])
				}
				e.recRead[b] = true
			}))
			if i > 0 {
				if e.mut != qmutRescaleEarly {
					p = append(p, qwait(e.oDone, n-1))
				}
				p = append(p, qact(func() {
					if e.o != fmt.Sprintf("O%d", n-1) {
						e.fail("O rescaled for block %d holds %q", n, e.o)
					}
					e.o += "*"
				}))
			}
			p = append(p, qact(func() { e.oCorr.commit(e.t) }))
		}
		if e.c.nblk > 0 {
			p = append(p, qwait(e.oDone, n-1))
		}
		last := n - 1
		p = append(p, qact(func() {
			if e.c.nblk > 0 && e.o != fmt.Sprintf("O%d", last) {
				e.fail("epilogue of pass %d reads %q", pass, e.o)
			}
			e.o = fmt.Sprintf("E%d", pass)
			e.epilogues = append(e.epilogues, e.o)
		}))
	}
	return p
}

// emuQFwd runs one CTA of shape c under every priority order of its six
// roles (seven with the converter: only for walks of up to 2 blocks and 2
// passes) and `random` random schedules, and checks the barriers' ledgers
// and that every pass wrote its output once.
func emuQFwd(t *testing.T, c qfwdCfg, mut qfwdMutation, random int) {
	t.Helper()
	orders := permutations(6)
	if c.conv {
		orders = nil
		if c.nblk <= 2 && c.npass <= 2 {
			orders = permutations(7)
		}
	}
	for run := 0; run < len(orders)+random; run++ {
		e := &qfwdEmu{t: t, c: c, mut: mut, k: make([]string, c.stages), v: make([]string, c.stages),
			qReady: &mbar{name: "Q ready", count: 1}, oDone: &mbar{name: "O done", count: 1}, oCorr: &mbar{name: "O corrected", count: 1},
			pReady: [2]*mbar{{name: "P ready 0", count: 1}, {name: "P ready 1", count: 1}}}
		for s := 0; s < c.stages; s++ {
			e.kFull = append(e.kFull, &mbar{name: fmt.Sprintf("K full %d", s), count: 1})
			e.vFull = append(e.vFull, &mbar{name: fmt.Sprintf("V full %d", s), count: 1})
			e.kEmpty = append(e.kEmpty, &mbar{name: fmt.Sprintf("K empty %d", s), count: 1})
			e.vEmpty = append(e.vEmpty, &mbar{name: fmt.Sprintf("V empty %d", s), count: 1})
		}
		e.sFull = [2]*mbar{{name: "S full 0", count: 1}, {name: "S full 1", count: 1}}
		e.rkFull, e.rvFull = &mbar{name: "raw K full", count: 1}, &mbar{name: "raw V full", count: 1}
		e.rkEmpty, e.rvEmpty = &mbar{name: "raw K empty", count: 1}, &mbar{name: "raw V empty", count: 1}
		roles := []role{&qprog{e: e, prog: e.loadProgram()}, tmaRole{e}, &qprog{e: e, prog: e.issuerProgram()}, tensorRole{e},
			&qprog{e: e, prog: e.softmaxProgram()}, &qprog{e: e, prog: e.correctionProgram()}}
		if c.conv {
			roles = append(roles, &qprog{e: e, prog: e.converterProgram()})
		}
		next := func() []int { return orders[run] }
		if run >= len(orders) {
			e.rng = rand.New(rand.NewSource(int64(run)))
			next = func() []int { return e.rng.Perm(len(roles)) }
		}
		if !runRoles(roles, next) {
			e.fail("run %d: deadlock, every role waits", run)
		}
		if len(e.epilogues) != c.npass {
			e.fail("run %d: %d epilogues for %d passes", run, len(e.epilogues), c.npass)
		}
		// Every phase of the barriers with one waiter per phase was
		// waited; a slot's empty barriers complete once per refill.
		blocks := c.npass * c.nblk
		for _, b := range append([]*mbar{e.pReady[0], e.pReady[1], e.oDone, e.oCorr, e.sFull[0], e.sFull[1], e.rkFull, e.rvFull}, append(e.kFull, e.vFull...)...) {
			if b.completed != b.waited {
				e.fail("run %d: %s completed %d phases, %d waited", run, b.name, b.completed, b.waited)
			}
		}
		for s := 0; s < c.stages; s++ {
			uses := (blocks - s + c.stages - 1) / c.stages
			for _, b := range []*mbar{e.kEmpty[s], e.vEmpty[s]} {
				if b.completed != max(uses-1, 0) || b.waited != b.completed {
					e.fail("run %d: %s completed %d phases, %d waited; slot %d has %d uses", run, b.name, b.completed, b.waited, s, uses)
				}
			}
		}
		if c.conv {
			for _, b := range []*mbar{e.rkEmpty, e.rvEmpty} {
				if b.completed != blocks || b.waited != max(blocks-1, 0) {
					e.fail("run %d: %s completed %d phases, %d waited; %d blocks", run, b.name, b.completed, b.waited, blocks)
				}
			}
		} else if e.rkFull.completed+e.rvFull.completed+e.rkEmpty.completed+e.rvEmpty.completed != 0 {
			e.fail("run %d: raw tile barriers used without converted K/V", run)
		}
		if want := min(c.npass, map[bool]int{true: c.npass, false: 0}[c.nblk > 0]); e.qReady.completed != want || e.qReady.waited != want {
			e.fail("run %d: Q ready completed %d, waited %d: want %d", run, e.qReady.completed, e.qReady.waited, want)
		}
	}
}

// TestEmulatedSM100QFwdRoles runs the query-major kernel's roles for every
// ring depth the layouts use, walks of 0 to 7 blocks and
// 1 to 3 passes, checks the layouts' ring configurations against the
// emulated ones, and shows that each mutation of the kernel's rules is
// caught.
func TestEmulatedSM100QFwdRoles(t *testing.T) {
	b, err := os.ReadFile("../kernels/cuda/sm100/sm100_qfwd.cu")
	if err != nil {
		t.Fatal(err)
	}
	checkQFwdIssuer(t, string(b))
	twoIssuers := strings.Replace(string(b), "mbar_arrive(B(L::bar_p + sb));", "mbar_arrive(B(L::bar_p + sb)); umma_commit(B(L::bar_o));", 1)
	if twoIssuers == string(b) || !failsOn(func(t *testing.T) { checkQFwdIssuer(t, twoIssuers) }) {
		t.Error("single-issuer check accepted a commit outside the MMA warp")
	}
	used := map[int]bool{}
	for _, v := range []SM100Variant{SM100BF16, SM100FP8, SM100BF16FP8, SM100NVFP4} {
		for _, d := range []int{64, 128, 256} {
			if SM100QFwdOK(v, d) {
				used[SM100QFwd(v, d).Stages] = true
			}
		}
	}
	for stages := 1; stages <= qfwdMaxStages; stages++ {
		delete(used, stages)
		for _, conv := range []bool{false, true} {
			for _, nblk := range []int{0, 1, 2, 3, 4, 7} {
				for npass := 1; npass <= 3; npass++ {
					emuQFwd(t, qfwdCfg{stages, nblk, npass, conv}, qmutNone, 40)
				}
			}
		}
	}
	if len(used) != 0 {
		t.Errorf("layouts use ring configurations the emulation does not run: %v", used)
	}
	for _, m := range []struct {
		name string
		c    qfwdCfg
		mut  qfwdMutation
	}{
		{"K slot refilled before K empty", qfwdCfg{2, 5, 1, false}, qmutSkipKEmpty},
		{"O corrected before P ready", qfwdCfg{2, 3, 1, false}, qmutSkipPReady},
		{"O rescaled before O done", qfwdCfg{2, 3, 1, false}, qmutRescaleEarly},
		{"O issued before O corrected", qfwdCfg{2, 3, 1, false}, qmutSkipOCorrected},
		{"one P ready barrier for both S buffers", qfwdCfg{3, 5, 1, false}, qmutOnePReady},
		{"one S buffer", qfwdCfg{2, 3, 1, false}, qmutOneSBuffer},
		{"next pass's Q gathered before its last S", qfwdCfg{2, 2, 2, false}, qmutEarlyGather},
		{"S issued over a P before O done read it", qfwdCfg{3, 4, 1, false}, qmutSkipSReuse},
		{"a pass's first S waits an O done phase two behind", qfwdCfg{2, 2, 3, false}, qmutSReuseStale},
		{"V zeroed before V full", qfwdCfg{2, 3, 1, false}, qmutZeroBeforeV},
		{"O issued before V full", qfwdCfg{2, 3, 1, false}, qmutSkipVFull},
		{"O issued before the converted V", qfwdCfg{2, 3, 1, true}, qmutSkipVFull},
		{"K slot widened into before K empty", qfwdCfg{2, 5, 1, true}, qmutConvSkipKEmpty},
		{"raw K refilled before the converter read it", qfwdCfg{2, 3, 1, true}, qmutSkipRawEmpty},
	} {
		if !failsOn(func(t *testing.T) { emuQFwd(t, m.c, m.mut, 200) }) {
			t.Errorf("role emulation accepted: %s", m.name)
		}
	}
}

// checkQFwdIssuer checks sm100_qfwd.cu's text: every tcgen05.mma and
// tcgen05.commit lies in the MMA warp's lane-0 block (the issuer the
// emulation models), and the load warp is the only TMA issuer.
func checkQFwdIssuer(t *testing.T, src string) {
	t.Helper()
	const open, end = "    } else if (warp == L::mma_warp) {\n", "\n    } else if (warp >= L::corr_warp0) {\n        // ---- correction warpgroup"
	i, j := strings.Index(src, open), strings.Index(src, end)
	if i < 0 || j < i {
		t.Fatal("sm100_qfwd.cu: no MMA warp block followed by the softmax warpgroup")
	}
	block := src[i:j]
	if !strings.Contains(block, "if (lane == 0 && nblk > 0) {") {
		t.Error("sm100_qfwd.cu: the MMA warp block does not restrict issuing to lane 0")
	}
	for _, call := range []string{"umma<", "umma_ts<", "umma_commit("} {
		if n, in := strings.Count(src, call), strings.Count(block, call); n == 0 || n != in {
			t.Errorf("sm100_qfwd.cu: %d %s calls, %d of them in the MMA warp's block", n, call, in)
		}
	}
	lo := strings.Index(src, "    if (warp == L::load_warp) {\n")
	if lo < 0 || lo > i {
		t.Fatal("sm100_qfwd.cu: no load warp block before the MMA warp's")
	}
	if n, in := strings.Count(src, "issue_kv_tile<"), strings.Count(src[lo:i], "issue_kv_tile<"); n < 2 || in != n {
		t.Errorf("sm100_qfwd.cu: %d issue_kv_tile calls, %d of them in the load warp's block", n, in)
	}
}

// emuSM100QFwdData runs qfwd_body's index arithmetic for every tile of the
// 128-row plan qp of case c (variant v; seqused: the kernel's seqused_k,
// nil for dense K/V): the walk (blocks past the sequence trimmed), each
// block's K and V boxes landed through the transaction ledger, each row's
// token, head, mask bit and visible keys. It returns, per output row
// q*Hq + hq, the K store rows it attends per block id, and fails on a row
// written twice or a visible key whose K and V tile rows disagree or were
// not loaded.
func emuSM100QFwdData(t *testing.T, c *prefillCase, v SM100Variant, qp *QPlan, seqused []int32) map[int]map[int][]int {
	t.Helper()
	l, lf := SM100QFwd(v, c.d), SM100Fwd(v, c.d)
	if l.RawRow != lf.RawRow || !v.converted() && l.QRowBytes != lf.RawRow || v.converted() && l.RawBytes != sm100BlockKeys*lf.RawRow {
		t.Fatalf("K/V row %d B in shared memory, %d B in global memory, raw tile %d B: the TMA boxes would not fill the tiles", l.QRowBytes, lf.RawRow, l.RawBytes)
	}
	elemBytes := 1 // the tensor maps' element: bf16, or bytes of E4M3 / packed E2M1
	if v == SM100BF16 {
		elemBytes = 2
	}
	ps, kvRows := 0, int(c.cuK[len(c.cuK)-1])
	if c.paged {
		ps, kvRows = c.pageSize, c.numPages
	}
	kmap, err := KVMapSpec("k", 1<<20, c.kvd, c.d, c.hkv, ps, kvRows)
	if err != nil {
		t.Fatal(err)
	}
	written := map[int]map[int][]int{}
	for tile := 0; tile < qp.NumTiles(); tile++ {
		f := qp.Tiles[tile*QTileFields:]
		b, h, first, ntok := int(f[0]), int(f[1]), int(f[2]), int(f[3])
		seqlenQ := c.seqQ(b)
		seqlenK := int(c.cuK[b+1] - c.cuK[b])
		switch {
		case seqused != nil:
			seqlenK = int(seqused[b])
		case c.paged:
			seqlenK = c.maxPages * c.pageSize
		}
		lo, hi := int(qp.TilePtr[tile]), int(qp.TilePtr[tile+1])
		nblk := hi - lo // qwalk_len
		for nblk > 0 && int(qp.Blocks[lo+nblk-1])*c.blk >= seqlenK {
			nblk--
		}
		var pageRow []int32
		denseBase := 0
		if c.paged {
			pageRow = c.pageTable[b*c.maxPages:]
		} else {
			denseBase = int(c.cuK[b])
		}
		nrows := ntok * c.qhpk
		for pass := 0; pass < (nrows+sm100TileM-1)/sm100TileM; pass++ {
			for i := 0; i < nblk; i++ {
				t0 := int(qp.Blocks[lo+i]) * c.blk
				nk := min(min(c.blk, sm100BlockKeys), seqlenK-t0)
				land := func() map[int]int {
					boxes, tx := sm100KVTile(lf.RawRow, elemBytes, c.paged, pageRow, ps, denseBase, h, t0, nk)
					return landTile(t, tile, &mbar{name: "ring", count: 1}, boxes, tx, kmap.Dims, c.hkv, ps, lf.BoxSpan,
						sm100BoxCheck(t, c, tile, lf.BoxSpan, t0, seqlenK))
				}
				kRows, vRows := land(), land()
				for r := 0; r < sm100TileM; r++ {
					idx := pass*sm100TileM + r
					if idx >= nrows {
						continue // padding row: zero Q, no store
					}
					tok := idx / c.qhpk
					hq := h*c.qhpk + idx%c.qhpk
					q := first + tok
					lim := seqlenK
					if c.causal {
						lim = min(lim, q-int(c.cuQ[b])+seqlenK-seqlenQ+1)
					}
					vis := 0
					if qp.Masks[lo+i]>>uint(tok)&1 != 0 {
						vis = min(max(lim-t0, 0), nk)
					}
					orow := q*c.hq + hq
					if written[orow] == nil {
						written[orow] = map[int][]int{}
					}
					if _, dup := written[orow][int(qp.Blocks[lo+i])]; dup {
						t.Fatalf("tile %d: row %d visits block %d twice", tile, orow, qp.Blocks[lo+i])
					}
					keys := []int{}
					for k := 0; k < vis; k++ {
						kr, ok := kRows[k]
						if !ok || kr < 0 || vRows[k] != kr {
							t.Fatalf("tile %d row %d: visible key %d: K tile row %d is store row %d (loaded %v), V's %d", tile, r, t0+k, k, kr, ok, vRows[k])
						}
						keys = append(keys, kr)
					}
					written[orow][int(qp.Blocks[lo+i])] = keys
				}
			}
			for r := 0; r < sm100TileM && pass*sm100TileM+r < nrows; r++ { // the epilogue: every row of the pass stored once
				idx := pass*sm100TileM + r
				orow := (first+idx/c.qhpk)*c.hq + h*c.qhpk + idx%c.qhpk
				if written[orow] == nil {
					written[orow] = map[int][]int{}
				}
				if written[orow][-1] != nil {
					t.Fatalf("tile %d: output row %d stored twice", tile, orow)
				}
				written[orow][-1] = []int{}
			}
		}
	}
	return written
}

// TestEmulatedSM100QFwdData: on dense ragged and paged K/V (pages of 64 and
// 256 keys, blk_kv 64 and 128), every variant, one to 128 heads per KV head
// (the planner's limit, so one 128-row pass per tile), every output row is stored exactly once and attends exactly
// the reference's visible keys of each block its token selected, and none
// of the other blocks of its tile's walk.
func TestEmulatedSM100QFwdData(t *testing.T) {
	cases := []struct {
		c *prefillCase
		v SM100Variant
	}{
		{&prefillCase{name: "dense/ragged/qpk2", cuQ: []int32{0, 37, 100, 101}, cuK: []int32{0, 300, 700, 829}, hkv: 2, qhpk: 2, d: 128, topK: 4, blk: 128,
			causal: true, qd: BF16, kvd: BF16, pd: BF16}, SM100BF16},
		{&prefillCase{name: "dense/qpk16/fp8", cuQ: []int32{0, 300}, cuK: []int32{0, 1000}, hkv: 1, qhpk: 16, d: 64, topK: 3, blk: 128,
			causal: true, qd: E4M3, kvd: E4M3, pd: F32, round: RoundE4M3}, SM100FP8},
		{&prefillCase{name: "dense/blk64/qpk1", cuQ: []int32{0, 150, 171}, cuK: []int32{0, 130, 400}, hkv: 2, qhpk: 1, d: 256, topK: 3, blk: 64,
			qd: BF16, kvd: BF16, pd: F32}, SM100BF16},
		{&prefillCase{name: "paged/64", cuQ: []int32{0, 129, 300}, cuK: []int32{0, 500, 1200}, hkv: 2, qhpk: 8, d: 128, topK: 8, blk: 128,
			causal: true, paged: true, pageSize: 64, qd: E4M3, kvd: E4M3, pd: F32, round: RoundE4M3}, SM100FP8},
		{&prefillCase{name: "dense/bf16fp8/blk64", cuQ: []int32{0, 50, 90}, cuK: []int32{0, 130, 200}, hkv: 2, qhpk: 4, d: 128, topK: 3, blk: 64,
			qd: BF16, kvd: E4M3, pd: F32}, SM100BF16FP8},
		{&prefillCase{name: "paged/128/nvfp4", cuQ: []int32{0, 64, 70}, cuK: []int32{0, 600, 1000}, hkv: 1, qhpk: 8, d: 64, topK: 4, blk: 128,
			causal: true, paged: true, pageSize: 128, qd: E4M3, kvd: NVFP4, pd: F32}, SM100NVFP4},
		{&prefillCase{name: "paged/256/qpk128", cuQ: []int32{0, 5, 9}, cuK: []int32{0, 300, 700}, hkv: 1, qhpk: 128, d: 64, topK: 2, blk: 128,
			causal: true, paged: true, pageSize: 256, qd: BF16, kvd: BF16, pd: F32}, SM100BF16},
	}
	for _, tc := range cases {
		c := tc.c
		t.Run(c.name, func(t *testing.T) {
			genPrefill(t, c, 17)
			var seqused []int32
			if c.paged {
				seqused = seqKs(c)
				if !SM100PagedOK(c.pageSize, c.blk, SM100Fwd(tc.v, c.d).BoxSpan) {
					t.Fatal("case violates the launcher's paged precondition")
				}
			}
			qp, err := BuildQPlan(c.csr, c.sched, c.cuQ, c.hkv, c.qhpk, SM100QTileRows)
			if err != nil {
				t.Fatal(err)
			}
			written := emuSM100QFwdData(t, c, tc.v, qp, seqused)
			for q := 0; q < c.totalQ; q++ {
				for hq := 0; hq < c.hq; hq++ {
					h, orow := hq/c.qhpk, q*c.hq+hq
					got := written[orow]
					if got[-1] == nil {
						t.Fatalf("q %d head %d: output row never stored", q, hq)
					}
					sel := map[int]bool{}
					for j := 0; j < c.topK; j++ {
						if blk := int(c.q2k[(h*c.totalQ+q)*c.topK+j]); blk >= 0 {
							sel[blk] = true
						}
					}
					for blk, keys := range got {
						switch {
						case blk < 0:
						case sel[blk]:
							if want := c.visibleKeys(q, h, blk); !slices.Equal(keys, want) && len(keys)+len(want) > 0 {
								t.Fatalf("q %d head %d block %d: attends %v, want %v", q, hq, blk, keys, want)
							}
						case len(keys) > 0:
							t.Fatalf("q %d head %d: attends block %d it did not select", q, hq, blk)
						}
					}
					for blk := range sel {
						if _, ok := got[blk]; !ok && len(c.visibleKeys(q, h, blk)) > 0 {
							t.Fatalf("q %d head %d: selected block %d is not in its tile's walk", q, hq, blk)
						}
					}
				}
			}
			if len(written) != c.totalQ*c.hq {
				t.Fatalf("%d output rows stored, want %d", len(written), c.totalQ*c.hq)
			}
		})
	}
}
