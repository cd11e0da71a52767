package cuda

// A host emulation of sm90/sm90_fwd2.cu (the kv2 prefill): per query
// window, persistent CTAs whose producer, two consumer warpgroups and
// barriers run as separate actors in a random interleaving (one actor step
// at a time, the order drawn from a seed), with the kernel's tile
// scheduler, K/V ring and Q buffers (mbarrier parity semantics, every wait
// against its arrives), its row masking, its partial-row addressing in the
// window's buffer, its row counters and fused merge, and its empty-row
// sweep, all in float64, checked against the direct reference. The checks:
// no slot is refilled while a consumer still reads it, every partial row
// is written once, every (query, head) row is merged (or swept) exactly
// once, counters and scheduler words are 0 after every window, no
// interleaving deadlocks, and the outputs equal the reference. Mutations of
// each rule must be caught.

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

type kv2Mut int

const (
	kv2MutNone     kv2Mut = iota
	kv2MutKVParity        // the producer refills a K/V stage after the wrong completion of its empty barrier
	kv2MutQEarly          // a consumer releases its Q buffer before its Q.K^T has read it
	kv2MutReset           // the merging lane leaves the row counter at n
	kv2MutLast            // a row is merged when the count before the arrival is n, not n - 1
	kv2MutSched           // the last CTA does not reset the tile scheduler
	kv2MutCausal          // the causal limit is dropped from the row's key bound
	kv2MutWG              // the producer fills tile u into warpgroup (u + 1) % 2's buffer
	kv2MutSweep           // rows with no slot are not written
	kv2MutStride          // partial rows use the whole problem's total_q as the slot stride
	kv2MutEmptyCnt        // the K/V empty barrier counts one warpgroup's warps only
	kv2MutNamedBar        // only warpgroup 0 takes the named barrier after preparing a stage
	kv2MutLastMut         // sentinel
)

func (m kv2Mut) String() string {
	return [...]string{"none", "K/V empty parity", "Q released before Q.K^T", "counter not reset", "last-arrival test",
		"scheduler not reset", "causal bound", "Q buffer of the other warpgroup", "empty rows", "slot stride",
		"K/V empty count", "named barrier of one warpgroup"}[m]
}

// ---- cooperative actors: one runs at a time, the scheduler picks a random runnable one.

var errKilled = errors.New("killed")

type emuActor struct {
	name   string
	resume chan struct{}
	paused chan struct{}
	cond   func() bool // nil: runnable
	done   bool
	err    error
	kill   <-chan struct{}
}

// wait blocks the actor until cond holds (checked by the scheduler).
func (a *emuActor) wait(cond func() bool) {
	a.cond = cond
	a.paused <- struct{}{}
	select {
	case <-a.resume:
	case <-a.kill:
		panic(errKilled)
	}
	a.cond = nil
}

// yield lets other actors run.
func (a *emuActor) yield() { a.wait(func() bool { return true }) }

type emuRun struct {
	rng    *rand.Rand
	actors []*emuActor
	kill   chan struct{}
}

func (r *emuRun) spawn(name string, body func(a *emuActor) error) {
	a := &emuActor{name: name, resume: make(chan struct{}), paused: make(chan struct{}), kill: r.kill}
	r.actors = append(r.actors, a)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				if e, ok := v.(error); !ok || !errors.Is(e, errKilled) {
					a.err = fmt.Errorf("%s: panic %v", name, v)
				}
			}
			a.done = true
			a.paused <- struct{}{}
		}()
		select {
		case <-a.resume:
		case <-a.kill:
			panic(errKilled)
		}
		a.err = body(a)
	}()
}

// run interleaves the actors until all finish; an actor's error or a state
// where none can run (deadlock) ends it.
func (r *emuRun) run() (err error) {
	live := append([]*emuActor(nil), r.actors...)
	started := map[*emuActor]bool{}
	defer func() {
		// every actor still live is paused (or not started): killed, it
		// reports once more as it ends
		close(r.kill)
		for _, a := range live {
			<-a.paused
		}
	}()
	for len(live) > 0 {
		var ready []int
		for i, a := range live {
			if !started[a] || a.cond == nil || a.cond() {
				ready = append(ready, i)
			}
		}
		if len(ready) == 0 {
			names := ""
			for _, a := range live {
				names += " " + a.name
			}
			return fmt.Errorf("deadlock: every live actor waits (%s)", names)
		}
		i := ready[r.rng.IntN(len(ready))]
		a := live[i]
		started[a] = true
		a.resume <- struct{}{}
		<-a.paused
		if a.done {
			live = append(live[:i], live[i+1:]...)
			if a.err != nil {
				return a.err
			}
		}
	}
	return nil
}

// emuBar is an mbarrier: completes a phase after count arrivals;
// try_wait.parity(p) succeeds once the phase of parity p has completed
// (while the current phase's parity differs from p).
type emuBar struct{ count, pending, phases int }

func newEmuBar(n int) *emuBar { return &emuBar{count: n, pending: n} }
func (b *emuBar) arrive() {
	b.pending--
	if b.pending == 0 {
		b.phases++
		b.pending = b.count
	}
}
func (b *emuBar) ready(parity uint32) bool { return uint32(b.phases&1) != parity }

// ---- the kernel, per window.

// kv2Part is the window's partial buffer: O and LSE rows, and the
// temperature LSE rows.
type kv2Part struct {
	*partialSet
	tl map[int]float64
}

func (p *kv2Part) tlse(r int, v float64) { p.tl[r] = v }

type kv2Shared struct {
	c          *prefillCase
	sched      [2]int
	counters   []int // window rows x Hq (shifted by -q0*Hq)
	merged     map[int]int
	swept      map[int]int
	outO       map[int][]float64
	outLSE     map[int]float64
	outTLSE    map[int]float64
	mut        kv2Mut
	widen      bool // FP8: every item's V is widened by both warpgroups, then bar.sync 1, 256
	qhpk, tile int
}

type kv2Item struct {
	h, b, t0, nkeys, nrows int
	base                   int // entries of the item in QSplit
}

func kv2ItemAt(c *prefillCase, w *FwdWindow, i int) kv2Item {
	m := w.Sched.Metadata[6*i : 6*i+6]
	h, row, qBegin, qCount, b, jblk := int(m[0]), int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5])
	t0 := jblk * c.blk
	return kv2Item{h: h, b: b, t0: t0, nkeys: min(c.blk, c.seqK(b)-t0), nrows: qCount * c.qhpk,
		base: h*c.csr.Stride + int(c.csr.RowPtr[h*(c.csr.TotalRows+1)+row]) + qBegin}
}

// kv2Row is FwdRows.row: query offset row g (global (query, head) row, -1
// padding), partial row in the window buffer, key bound.
func (s *kv2Shared) kv2Row(it kv2Item, idx, n, q0 int) (g, prow, lim int) {
	c := s.c
	if idx >= it.nrows {
		return -1, -1, 0
	}
	e := uint32(c.sched.QSplit[it.base+idx/c.qhpk])
	ql, slot := int(e&0xFFFFFF), int(e>>24)
	hq := it.h*c.qhpk + idx%c.qhpk
	qrow := int(c.cuQ[it.b]) + ql
	stride := n
	if s.mut == kv2MutStride {
		stride = c.totalQ
	}
	prow = (slot*stride+qrow)*c.hq + hq - q0*c.hq // the launcher shifts the pointer by -q0 rows
	lim = c.seqK(it.b)
	if c.causal && s.mut != kv2MutCausal {
		lim = min(lim, ql+c.seqK(it.b)-c.seqQ(it.b)+1)
	}
	return qrow*c.hq + hq, prow, lim
}

type kv2CTA struct {
	kvfull, kvempty [2]*emuBar
	qfull, qempty   [2]*emuBar
	named           *emuBar // bar.sync 1, 256: both warpgroups
	item            [2]int
	stage           [2]int // item whose K/V the stage holds
	readers         [2]int // consumer warpgroups between their full wait and their release
	q               [2][2]int
	qReaders        [2]int
}

// emuKV2Window runs one window [q0, q0+n) on ctas persistent CTAs.
func emuKV2Window(s *kv2Shared, w *FwdWindow, ctas int, rng *rand.Rand) error {
	n := w.Q1 - w.Q0
	count := int(w.Sched.WorkCount)
	grid := max(min(count, ctas), 1)
	ps := &kv2Part{newPartialSet(), map[int]float64{}}
	r := &emuRun{rng: rng, kill: make(chan struct{})}
	for cta := 0; cta < grid; cta++ {
		x := &kv2CTA{named: newEmuBar(2)}
		emptyCount := 8
		if s.mut == kv2MutEmptyCnt {
			emptyCount = 4
		}
		for i := 0; i < 2; i++ {
			x.kvfull[i], x.kvempty[i] = newEmuBar(1), newEmuBar(emptyCount)
			x.qfull[i], x.qempty[i] = newEmuBar(32), newEmuBar(4) // qfull: one cp.async arrive per producer lane
			x.stage[i] = -2
		}
		r.spawn(fmt.Sprintf("cta%d/producer", cta), func(a *emuActor) error { return kv2Producer(s, x, w, count, grid, a) })
		for g := 0; g < 2; g++ {
			r.spawn(fmt.Sprintf("cta%d/wg%d", cta, g), func(a *emuActor) error {
				return kv2Consumer(s, x, w, ps, g, cta, grid, n, a)
			})
		}
	}
	if err := r.run(); err != nil {
		return err
	}
	for i, v := range s.counters {
		if v != 0 {
			return fmt.Errorf("window [%d, %d): counter of row %d left at %d", w.Q0, w.Q1, i, v)
		}
	}
	if s.sched != [2]int{} {
		return fmt.Errorf("window [%d, %d): scheduler left at %v", w.Q0, w.Q1, s.sched)
	}
	for row, k := range ps.written {
		if k != 1 {
			return fmt.Errorf("window [%d, %d): partial row %d written %d times", w.Q0, w.Q1, row, k)
		}
	}
	return nil
}

func kv2Producer(s *kv2Shared, x *kv2CTA, w *FwdWindow, count, grid int, a *emuActor) error {
	qn := [2]int{}
	u := 0
	for k := 0; ; k++ {
		st := k % 2
		if k >= 2 {
			par := uint32(k/2-1) & 1
			if s.mut == kv2MutKVParity {
				par ^= 1
			}
			a.wait(func() bool { return x.kvempty[st].ready(par) })
		}
		it := s.sched[0] // atomicAdd
		s.sched[0]++
		a.yield()
		if it >= count {
			x.item[st] = -1
			x.kvfull[st].arrive()
			break
		}
		if x.readers[st] != 0 {
			return fmt.Errorf("item %d loads into stage %d while a warpgroup still reads item %d", it, st, x.stage[st])
		}
		x.stage[st] = it
		x.item[st] = it
		x.kvfull[st].arrive()
		ki := kv2ItemAt(s.c, w, it)
		for rt := 0; rt < ki.nrows; rt += 64 {
			g := u % 2
			if s.mut == kv2MutWG {
				g = (u + 1) % 2
			}
			if qn[g] > 0 {
				par := uint32(qn[g]-1) & 1
				a.wait(func() bool { return x.qempty[g].ready(par) })
			}
			if x.qReaders[g] != 0 {
				return fmt.Errorf("Q tile (%d, %d) gathered into warpgroup %d's buffer while it is read", it, rt, g)
			}
			x.q[g] = [2]int{it, rt}
			for lane := 0; lane < 32; lane++ {
				x.qfull[g].arrive()
			}
			qn[g]++
			u++
			a.yield()
		}
	}
	s.sched[1]++ // atomicAdd; the last CTA resets the scheduler
	if s.sched[1] == grid && s.mut != kv2MutSched {
		s.sched = [2]int{}
	}
	return nil
}

func kv2Consumer(s *kv2Shared, x *kv2CTA, w *FwdWindow, ps *kv2Part, g, cta, grid, n int, a *emuActor) error {
	c := s.c
	qn, u := 0, 0
	for k := 0; ; k++ {
		st := k % 2
		par := uint32(k/2) & 1
		a.wait(func() bool { return x.kvfull[st].ready(par) })
		it := x.item[st]
		if it < 0 {
			break
		}
		if x.stage[st] != it {
			return fmt.Errorf("warpgroup %d expects item %d in stage %d, it holds %d", g, it, st, x.stage[st])
		}
		x.readers[st]++
		ki := kv2ItemAt(c, w, it)
		if (s.widen || ki.nkeys < c.blk) && (g == 0 || s.mut != kv2MutNamedBar) { // prepare_block, then bar.sync 1, 256
			gen := x.named.phases
			x.named.arrive()
			a.wait(func() bool { return x.named.phases != gen })
		}
		for rt := 0; rt < ki.nrows; rt += 64 {
			if u%2 != g {
				u++
				continue
			}
			u++
			qpar := uint32(qn) & 1
			a.wait(func() bool { return x.qfull[g].ready(qpar) })
			qn++
			if s.mut == kv2MutQEarly {
				for i := 0; i < 4; i++ {
					x.qempty[g].arrive()
				}
				a.yield()
			}
			x.qReaders[g]++
			a.yield() // Q.K^T reads the Q buffer and the stage
			if x.q[g] != [2]int{it, rt} {
				return fmt.Errorf("warpgroup %d reads Q tile %v, expects (%d, %d)", g, x.q[g], it, rt)
			}
			x.qReaders[g]--
			if s.mut != kv2MutQEarly {
				for i := 0; i < 4; i++ {
					x.qempty[g].arrive()
				}
			}
			a.yield() // softmax, P.V
			if x.stage[st] != it {
				return fmt.Errorf("stage %d refilled with item %d while warpgroup %d computes item %d", st, x.stage[st], g, it)
			}
			if err := kv2Tile(s, ps, ki, rt, n, w.Q0, a); err != nil {
				return err
			}
		}
		x.readers[st]--
		for i := 0; i < 4; i++ {
			x.kvempty[st].arrive()
		}
	}
	if s.mut == kv2MutSweep {
		return nil
	}
	// empty-row sweep: thread index blockIdx.x * 256 + threadIdx.x, stride grid * 256
	for i := cta*256 + g*128; i < n*c.hq; i += grid * 256 {
		for t := i; t < min(i+128, n*c.hq); t++ {
			gr := w.Q0*c.hq + t
			if c.sched.SplitCounts[(gr/c.hq)*c.hkv+(gr%c.hq)/c.qhpk] > 0 {
				continue
			}
			s.swept[gr]++
			s.outO[gr], s.outLSE[gr], s.outTLSE[gr] = make([]float64, c.d), math.Inf(-1), math.Inf(-1)
		}
	}
	return nil
}

// kv2Tile is one tile's rows: partials (masked block attention), stores,
// counts and the merges they complete.
func kv2Tile(s *kv2Shared, ps *kv2Part, it kv2Item, rt, n, q0 int, a *emuActor) error {
	c := s.c
	type done struct{ g, cnt int }
	var last []done
	for r := 0; r < 64; r++ {
		g, prow, lim := s.kv2Row(it, rt+r, n, q0)
		if g < 0 {
			continue
		}
		if prow < 0 || prow >= c.topK*n*c.hq {
			return fmt.Errorf("partial row %d outside the window's buffer of %d rows", prow, c.topK*n*c.hq)
		}
		bl := min(max(lim-it.t0, 0), it.nkeys) // block_lim
		var keys []int
		for j := 0; j < bl; j++ {
			keys = append(keys, c.kRow(it.b, it.t0+j, it.h))
		}
		o, lse, tlse := attendRef(c.q.row(g), keys, c.k, c.v, float64(c.scale), float64(c.temp))
		ps.put(prow, o, lse)
		ps.tlse(prow, tlse)
	}
	a.yield() // the stores, fenced, before the counts
	for r := 0; r < 64; r++ {
		g, _, _ := s.kv2Row(it, rt+r, n, q0)
		if g < 0 {
			continue
		}
		cnt := int(c.sched.SplitCounts[(g/c.hq)*c.hkv+it.h])
		cnt = max(0, min(cnt, c.topK))
		before := s.counters[g-q0*c.hq]
		s.counters[g-q0*c.hq]++
		isLast := before == cnt-1
		if s.mut == kv2MutLast {
			isLast = before == cnt
		}
		if isLast {
			if s.mut != kv2MutReset {
				s.counters[g-q0*c.hq] = 0
			}
			last = append(last, done{g, cnt})
		}
		if r%16 == 15 {
			a.yield() // the next warp's counts
		}
	}
	for _, d := range last {
		rows := make([]int, d.cnt)
		for sl := range rows {
			rows[sl] = sl*n*c.hq + d.g - q0*c.hq
			if ps.written[rows[sl]] != 1 {
				return fmt.Errorf("row %d merged with slot %d written %d times", d.g, sl, ps.written[rows[sl]])
			}
		}
		o, lse := combineEmu(ps.partialSet, rows, c.d)
		s.merged[d.g]++
		s.outO[d.g], s.outLSE[d.g] = o, lse
		if c.temp > 0 {
			s.outTLSE[d.g] = kv2TLSE(ps, rows)
		}
	}
	return nil
}

// kv2TLSE is the temperature LSE merge (combine.cu's lse_stats on the
// temperature partials).
func kv2TLSE(ps *kv2Part, rows []int) float64 {
	m := math.Inf(-1)
	for _, r := range rows {
		m = math.Max(m, ps.tl[r])
	}
	if math.IsInf(m, -1) {
		m = 0
	}
	var S float64
	for _, r := range rows {
		S += math.Exp(ps.tl[r] - m)
	}
	if len(rows) == 0 || !(S > 0) {
		return math.Inf(-1)
	}
	return m + math.Log(S)
}

// runKV2 runs a whole prefill of c's CSR and schedule as the launcher
// does (windows of KV2Window queries for an L2 of l2 bytes,
// SplitForOccupancy for ctas SMs) and returns the rows it wrote; an error
// where the protocol failed or a row was not merged or swept exactly once.
func runKV2(c *prefillCase, l2, ctas int, seed uint64, mut kv2Mut, widen bool) (*kv2Shared, error) {
	w := KV2Window(c.totalQ, c.topK, c.hq, c.qhpk, c.d, partialSize(c.pd), l2)
	wins, err := FwdWindows(c.csr, c.sched, c.cuQ, c.totalQ, w)
	if err != nil {
		return nil, err
	}
	wins = SplitForOccupancy(wins, c.qhpk, 64, 4*ctas)
	s := &kv2Shared{c: c, counters: make([]int, w*c.hq), merged: map[int]int{}, swept: map[int]int{},
		outO: map[int][]float64{}, outLSE: map[int]float64{}, outTLSE: map[int]float64{}, mut: mut, widen: widen}
	rng := rand.New(rand.NewPCG(seed, 11))
	for i := range wins {
		if err := emuKV2Window(s, &wins[i], ctas, rng); err != nil {
			return nil, err
		}
	}
	for g := 0; g < c.totalQ*c.hq; g++ {
		if s.merged[g]+s.swept[g] != 1 {
			return nil, fmt.Errorf("row %d merged %d and swept %d times", g, s.merged[g], s.swept[g])
		}
	}
	return s, nil
}

// emuKV2 runs a whole prefill (runKV2) and compares with the reference.
func emuKV2(c *prefillCase, l2, ctas int, seed uint64, mut kv2Mut, widen bool) error {
	s, err := runKV2(c, l2, ctas, seed, mut, widen)
	if err != nil {
		return err
	}
	wantO, wantLSE, wantTLSE := c.refPrefill()
	for g := 0; g < c.totalQ*c.hq; g++ {
		if !kv2Close(s.outLSE[g], wantLSE[g]) || c.temp > 0 && !kv2Close(s.outTLSE[g], wantTLSE[g]) {
			return fmt.Errorf("row %d: LSE %v / %v, want %v / %v", g, s.outLSE[g], s.outTLSE[g], wantLSE[g], wantTLSE[g])
		}
		for cc := 0; cc < c.d; cc++ {
			if math.Abs(s.outO[g][cc]-wantO[g*c.d+cc]) > 1e-9 {
				return fmt.Errorf("row %d: O[%d] %v, want %v", g, cc, s.outO[g][cc], wantO[g*c.d+cc])
			}
		}
	}
	return nil
}

func kv2Close(a, b float64) bool {
	return math.Abs(a-b) < 1e-9 || math.IsInf(a, -1) && math.IsInf(b, -1)
}

// kv2Cases are the prefill cases the kernel takes (BF16 at D 64 / 128)
// plus shapes that stress the protocol: the bench's head ratio with few
// tokens per window, a sequence with queries that select nothing, tails
// of blocks (nkeys < 128).
func kv2Cases(t *testing.T) []*prefillCase {
	cs := []*prefillCase{
		{name: "bench-like/causal/hq16", cuQ: []int32{0, 300}, cuK: []int32{0, 300}, hkv: 1, qhpk: 16, d: 64, topK: 4, blk: 128,
			causal: true, qd: BF16, kvd: BF16, pd: BF16},
		{name: "two-seq/causal/f32/hkv2", cuQ: []int32{0, 70, 133}, cuK: []int32{0, 400, 529}, hkv: 2, qhpk: 4, d: 64, topK: 3, blk: 128,
			causal: true, qd: BF16, kvd: BF16, pd: F32},
		{name: "temp/paged/blk64", cuQ: []int32{0, 90}, cuK: []int32{0, 700}, hkv: 1, qhpk: 8, d: 64, topK: 5, blk: 64,
			paged: true, pageSize: 64, temp: 0.7, qd: BF16, kvd: BF16, pd: F32},
	}
	for i, c := range cs {
		genPrefill(t, c, uint64(40+i))
	}
	// queries with no block: the sweep's rows
	c := cs[1]
	for q := 10; q < 14; q++ {
		for j := 0; j < c.topK; j++ {
			c.q2k[q*c.topK+j] = -1
		}
	}
	return cs
}

func TestKV2Emulation(t *testing.T) {
	for _, c := range kv2Cases(t) {
		rebuildSchedule(t, c)
		// L2 budgets: one window for everything, and small windows (a few row tiles each)
		for _, l2 := range []int{0, 2 * 24 * c.topK * c.hq * (c.d*partialSize(c.pd) + 8)} {
			for seed := uint64(1); seed <= 3; seed++ {
				// the BF16 kernel (a named barrier for tail blocks only) and the FP8 one (every item)
				if err := emuKV2(c, l2, 3, seed, kv2MutNone, seed == 2); err != nil {
					t.Fatalf("%s (L2 %d, seed %d): %v", c.name, l2, seed, err)
				}
			}
		}
	}
}

func TestKV2EmulationMutations(t *testing.T) {
	cases := kv2Cases(t)
	for _, c := range cases {
		rebuildSchedule(t, c)
	}
	for m := kv2MutKVParity; m < kv2MutLastMut; m++ {
		var caught error
		for _, c := range cases {
			for _, l2 := range []int{0, 2 * 24 * c.topK * c.hq * (c.d*partialSize(c.pd) + 8)} {
				for seed := uint64(1); seed <= 4 && caught == nil; seed++ {
					caught = emuKV2(c, l2, 3, seed, m, seed == 2)
				}
			}
			if caught != nil {
				t.Logf("mutation %q caught on %s: %v", m, c.name, caught)
				break
			}
		}
		if caught == nil {
			t.Errorf("mutation %q is not caught", m)
		}
	}
}

func TestKV2Window(t *testing.T) {
	per := 16 * 16 * (128*2 + 8) // bench shape, BF16 partials: bytes per query
	for _, c := range []struct{ w, l2, want int }{
		{8192, 0, 8192},                          // no L2 figure: the caller's window
		{8192, 50 << 20, 25 << 20 / per / 4 * 4}, // half of 50 MB, whole tiles of 4 queries
		{100, 50 << 20, 100},                     // the caller's window is smaller
		{8192, 1000, 4},                          // at least one tile
	} {
		if got := KV2Window(c.w, 16, 16, 16, 128, 2, c.l2); got != c.want {
			t.Errorf("KV2Window(%d, L2 %d) = %d, want %d", c.w, c.l2, got, c.want)
		}
	}
}

// kv2StageOff is stage_off of sm90_fwd2.cu: byte b of 16-byte chunk c of
// staged row r, chunks XOR-swizzled by r & 7.
func kv2StageOff(r, rowBytes, c, b int, flat bool) int {
	if flat {
		return r*rowBytes + c<<4 | b
	}
	return r*rowBytes + ((c^(r&7))<<4 | b)
}

// kv2StageCheck checks the epilogue's staging for head dim d and element
// size es: the accumulator fragment writes (lane l, fragment row i, column
// group j: columns 8j + 2(l%4), +1 of row l/4 + 8i) cover the warp's 16
// staged rows exactly once, the 16-byte copy-out reads each row's columns
// in order, and each fragment store instruction (fixed i, j) touches every
// 4-byte bank at most as often as its 32 x 2 x es bytes require.
func kv2StageCheck(d, es int, flat bool) error {
	rb := es * d
	owner := make([]int, 16*rb) // byte -> row*d + column + 1
	for i := 0; i < 2; i++ {
		for j := 0; j < d/8; j++ {
			banks := map[int]int{}
			for l := 0; l < 32; l++ {
				r := l>>2 + 8*i
				for e := 0; e < 2; e++ {
					col := 8*j + 2*(l&3) + e
					byteInRow := es * col
					for k := 0; k < es; k++ {
						off := kv2StageOff(r, rb, (byteInRow+k)>>4, (byteInRow+k)&15, flat)
						if owner[off] != 0 {
							return fmt.Errorf("d %d es %d: byte %d written twice", d, es, off)
						}
						owner[off] = r*d + col + 1
						banks[off/4%32]++
					}
				}
			}
			need := (32 * 2 * es) / 128 // wavefronts the bytes need: 128 bytes each
			for b, n := range banks {
				if n/4 > need {
					return fmt.Errorf("d %d es %d: fragment store (i %d, j %d) hits bank %d %d times (%d wavefronts needed)", d, es, i, j, b, n/4, need)
				}
			}
		}
	}
	for r := 0; r < 16; r++ {
		for q := 0; q < rb/16; q++ {
			for k := 0; k < 16; k++ {
				want := r*d + (16*q+k)/es + 1
				if got := owner[kv2StageOff(r, rb, q, k, flat)]; got != want {
					return fmt.Errorf("d %d es %d: copy-out of row %d chunk %d byte %d reads element %d, want %d", d, es, r, q, k, got-1, want-1)
				}
			}
		}
	}
	return nil
}

func TestKV2Staging(t *testing.T) {
	for _, d := range []int{64, 128} {
		for _, es := range []int{4, 2} {
			if err := kv2StageCheck(d, es, false); err != nil {
				t.Error(err)
			}
		}
	}
	// mutation: without the swizzle the 8 rows of a store share banks
	if err := kv2StageCheck(128, 4, true); err == nil {
		t.Error("unswizzled staging passes the bank check")
	}
}
