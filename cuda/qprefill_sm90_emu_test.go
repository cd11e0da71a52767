package cuda

// A host emulation of what the sm_90a query-major kernel
// (kernels/cuda/sm90/sm90_qfwd.cu) adds to the query-major path whose plan,
// rows and walk qprefill_emu_test.go already emulates:
//
//  1. the mbarrier protocol of its K, V and Q rings in the fifteen
//     configurations (variant x head dim: slots, overlap, rings widened by
//     the consumers; the fp8pv kernels' V landing ring and the producer's
//     transposition one step behind its TMA): the producer warp and the four consumer warps as the
//     kernel orders their waits, arrives, fills and reads, run under many
//     interleavings for walks of 0 to 9 blocks and 1 to 3 passes; every wait must be released by an arrive
//     (no hang), a slot is refilled only after all four warps released it,
//     and a warp reads only the stage it waits for;
//  2. the wgmma fragment ownership the consumer relies on: the kernel's
//     belief of which row / key a score register holds (tc_frag.cuh:
//     register 4j + 2i + e is row 16w + l/4 + 8i, key 8j + 2(l%4) + e), used
//     for the per-row mask and causal limit, against the hardware's
//     accumulator and register-A layouts (accRC, aRC: the PTX ISA's wgmma
//     fragments, CuTe's CLayout_64xN / ALayout_64x16, which
//     hosttest/sm90_gmma_layout_check.cu checks);
//  3. the CTA -> tiles mapping (two pipelines per CTA) and the epilogue's
//     staging of O through the swizzled Q buffer and its 16-byte copies,
//
// with the softmax, P.V and epilogue in float64, against the float64
// reference of ref_test.go.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sparseattn/msa/kernels/cuda/fatbin"
)

// ---- 1. ring protocol -------------------------------------------------------

// pbar is an mbarrier shared by concurrently running actors (the SM100
// emulation's mbar runs its threads in lock step): count arrivals complete
// a phase; a wait on parity p returns once the phase of that parity has
// completed (the current phase's parity differs from p), as
// mbarrier.try_wait.parity does.
type pbar struct{ count, pending, phase int }

func (b *pbar) arrive() {
	b.pending--
	if b.pending == 0 {
		b.phase++
		b.pending = b.count
	}
}

func (b *pbar) done(parity int) bool { return b.phase&1 != parity }

// ringProto is the kernel's protocol: ring sizes, overlap, the parity
// functions and the empty barriers' arrival count (mutations change them).
type ringProto struct {
	ks, vs              int
	overlap             bool
	kConv, vConv        bool // the landing slot is widened into an operand buffer and released at once
	fullPar, emptyPar   func(k, n int) int
	emptyCount          int
	qemptyBeforeLastUse bool // mutation: Q released before the epilogue's reads
	// fp8pv: V lands in a ring of ls slots and the producer transposes
	// each stage into the V ring one step after its TMA (flushed at the
	// end of each pass); the mutations drop the flush or, with one
	// landing slot, issue the TMA before the pending transposition.
	pv8, noFlush, tmaFirst bool
	ls                     int
}

// The parity functions of sm90_ring.cuh (ring_full_parity,
// ring_empty_parity), which sm90_qfwd.cu uses for its K/V rings and its Q
// buffer (a ring of one slot).
func fullParity(k, n int) int  { return (k / n) & 1 }
func emptyParity(k, n int) int { return (k/n - 1) & 1 }

// The rings and barriers of one pipeline.
const (
	ringK = iota
	ringV
	ringQ
	ringL // fp8pv: the V landing ring
)

type ringOpKind int

const (
	opWait ringOpKind = iota
	opArrive
	opFill    // the producer writes stage `stage` into a slot
	opUse     // a consumer warp starts reading a slot, expecting stage
	opRelease // that warp has finished reading it
)

type ringOp struct {
	kind              ringOpKind
	bar, parity       int
	ring, slot, stage int
	readers           int // opRelease: readers it stands for (0: one warp)
}

type ringBars struct{ p ringProto }

func (r ringBars) kfull(k int) int  { return k % r.p.ks }
func (r ringBars) kempty(k int) int { return r.p.ks + k%r.p.ks }
func (r ringBars) vfull(k int) int  { return 2*r.p.ks + k%r.p.vs }
func (r ringBars) vempty(k int) int { return 2*r.p.ks + r.p.vs + k%r.p.vs }
func (r ringBars) qfull() int       { return 2*r.p.ks + 2*r.p.vs }
func (r ringBars) qempty() int      { return 2*r.p.ks + 2*r.p.vs + 1 }
func (r ringBars) lfull(k int) int  { return 2*r.p.ks + 2*r.p.vs + 2 + k%max(r.p.ls, 1) }
func (r ringBars) count() int       { return 2*r.p.ks + 2*r.p.vs + 2 + r.p.ls }

// producerOps is qfwd_producer's sequence for passes passes of a walk of n blocks.
func producerOps(p ringProto, passes, n int) []ringOp {
	B := ringBars{p}
	var ops []ringOp
	k := 0
	for pass := 0; pass < passes; pass++ {
		if pass > 0 {
			ops = append(ops, ringOp{kind: opWait, bar: B.qempty(), parity: emptyParity(pass, 1)})
		}
		ops = append(ops, ringOp{kind: opFill, ring: ringQ, stage: pass}, ringOp{kind: opArrive, bar: B.qfull()})
		pend := -1
		for j := 0; j < n; j++ {
			if k >= p.ks {
				ops = append(ops, ringOp{kind: opWait, bar: B.kempty(k), parity: p.emptyPar(k, p.ks)})
			}
			ops = append(ops, ringOp{kind: opFill, ring: ringK, slot: k % p.ks, stage: k}, ringOp{kind: opArrive, bar: B.kfull(k)})
			if p.pv8 {
				// qfwd_producer's PV8 branch and qfwd_transpose_v
				first := p.ls == 1 && !p.tmaFirst
				if first && pend >= 0 {
					ops = append(ops, transposeOps(p, pend)...)
				}
				ops = append(ops, ringOp{kind: opFill, ring: ringL, slot: k % p.ls, stage: k}, ringOp{kind: opArrive, bar: B.lfull(k)})
				if !first && pend >= 0 {
					ops = append(ops, transposeOps(p, pend)...)
				}
				pend = k
				k++
				continue
			}
			if k >= p.vs {
				ops = append(ops, ringOp{kind: opWait, bar: B.vempty(k), parity: p.emptyPar(k, p.vs)})
			}
			ops = append(ops, ringOp{kind: opFill, ring: ringV, slot: k % p.vs, stage: k}, ringOp{kind: opArrive, bar: B.vfull(k)})
			k++
		}
		if pend >= 0 && !p.noFlush {
			ops = append(ops, transposeOps(p, pend)...)
		}
	}
	return ops
}

// transposeOps is qfwd_transpose_v of stage k: wait for its landing and
// for the consumers' release of the V slot, read the landing slot (the
// producer is its only reader, so it frees it), write the V slot.
func transposeOps(p ringProto, k int) []ringOp {
	B := ringBars{p}
	ops := []ringOp{{kind: opWait, bar: B.lfull(k), parity: p.fullPar(k, p.ls)}}
	if k >= p.vs {
		ops = append(ops, ringOp{kind: opWait, bar: B.vempty(k), parity: p.emptyPar(k, p.vs)})
	}
	return append(ops, ringOp{kind: opUse, ring: ringL, slot: k % p.ls, stage: k},
		ringOp{kind: opRelease, ring: ringL, slot: k % p.ls, stage: k, readers: 4},
		ringOp{kind: opFill, ring: ringV, slot: k % p.vs, stage: k}, ringOp{kind: opArrive, bar: B.vfull(k)})
}

// consumerOps is one consumer warp's sequence in qfwd_consumer (with
// QOperands' k_ready / k_done / v_ready / v_done).
func consumerOps(p ringProto, passes, n int) []ringOp {
	B := ringBars{p}
	var ops []ringOp
	use := func(ring, slot, stage int) {
		ops = append(ops, ringOp{kind: opUse, ring: ring, slot: slot, stage: stage})
	}
	rel := func(ring, slot, stage, bar int) {
		ops = append(ops, ringOp{kind: opRelease, ring: ring, slot: slot, stage: stage}, ringOp{kind: opArrive, bar: bar})
	}
	// ready / done of one ring (QOperands' k_ready / k_done, v_ready / v_done)
	ready := func(ring, k, n, full, empty int, conv bool) {
		ops = append(ops, ringOp{kind: opWait, bar: full, parity: p.fullPar(k, n)})
		use(ring, k%n, k)
		if conv {
			rel(ring, k%n, k, empty)
		}
	}
	done := func(ring, k, n, empty int, conv bool) {
		if !conv {
			rel(ring, k%n, k, empty)
		}
	}
	kReady := func(k int) { ready(ringK, k, p.ks, B.kfull(k), B.kempty(k), p.kConv) }
	kDone := func(k int) { done(ringK, k, p.ks, B.kempty(k), p.kConv) }
	vReady := func(k int) { ready(ringV, k, p.vs, B.vfull(k), B.vempty(k), p.vConv) }
	vDone := func(k int) { done(ringV, k, p.vs, B.vempty(k), p.vConv) }
	k := 0
	for pass := 0; pass < passes; pass++ {
		ops = append(ops, ringOp{kind: opWait, bar: B.qfull(), parity: fullParity(pass, 1)})
		use(ringQ, 0, pass)
		pk := -1
		for j := 0; j < n; j++ {
			kReady(k)
			if p.overlap && pk >= 0 {
				vReady(pk)
				kDone(k)
				vDone(pk)
			} else {
				kDone(k)
				if !p.overlap {
					vReady(k)
					vDone(k)
				}
			}
			pk = k
			k++
		}
		if p.overlap && pk >= 0 {
			vReady(pk)
			vDone(pk)
		}
		if p.qemptyBeforeLastUse {
			rel(ringQ, 0, pass, B.qempty())
			use(ringQ, 0, pass) // the epilogue's staging
			continue
		}
		use(ringQ, 0, pass) // the epilogue's staging
		rel(ringQ, 0, pass, B.qempty())
	}
	return ops
}

// runRings runs the producer and four consumer warps, picking the next
// actor with pick among the runnable ones; it returns the first protocol
// violation or hang.
func runRings(p ringProto, passes, n int, pick func(runnable []int) int) error {
	B := ringBars{p}
	bars := make([]*pbar, B.count())
	for i := range bars {
		bars[i] = &pbar{count: 1, pending: 1}
	}
	for k := 0; k < p.ks; k++ {
		bars[B.kempty(k)] = &pbar{count: p.emptyCount, pending: p.emptyCount}
	}
	for k := 0; k < p.vs; k++ {
		bars[B.vempty(k)] = &pbar{count: p.emptyCount, pending: p.emptyCount}
	}
	bars[B.qempty()] = &pbar{count: 4, pending: 4}
	type slot struct{ stage, released int }
	slots := [4][]slot{make([]slot, p.ks), make([]slot, p.vs), make([]slot, 1), make([]slot, p.ls)}
	for r := range slots {
		for i := range slots[r] {
			slots[r][i] = slot{stage: -1, released: 4}
		}
	}
	progs := [][]ringOp{producerOps(p, passes, n)}
	for w := 0; w < 4; w++ {
		progs = append(progs, consumerOps(p, passes, n))
	}
	pc := make([]int, len(progs))
	for {
		var runnable []int
		finished := 0
		for a, prog := range progs {
			if pc[a] == len(prog) {
				finished++
				continue
			}
			if op := prog[pc[a]]; op.kind != opWait || bars[op.bar].done(op.parity) {
				runnable = append(runnable, a)
			}
		}
		if finished == len(progs) {
			return nil
		}
		if len(runnable) == 0 {
			return fmt.Errorf("hang: every actor waits (pcs %v of %d, %d ops)", pc, len(progs[0]), len(progs[1]))
		}
		a := runnable[pick(runnable)]
		op := progs[a][pc[a]]
		pc[a]++
		s := &slots[op.ring][op.slot]
		switch op.kind {
		case opArrive:
			bars[op.bar].arrive()
		case opFill:
			if s.released != 4 {
				return fmt.Errorf("ring %d slot %d: stage %d written while stage %d is read (%d of 4 warps released it)", op.ring, op.slot, op.stage, s.stage, s.released)
			}
			s.stage, s.released = op.stage, 0
		case opUse:
			if s.stage != op.stage {
				return fmt.Errorf("ring %d slot %d: warp %d reads stage %d, the slot holds %d", op.ring, op.slot, a-1, op.stage, s.stage)
			}
		case opRelease:
			s.released += max(op.readers, 1)
		}
	}
}

// sm90QFwdGeometry mirrors QFwdCfg of sm90_qfwd.cu for variant v at head
// dim d (pv8: the fp8pv kernel, v = VarFP8): pipelines per CTA, ring
// slots, which rings are widened by the consumers, and the dynamic shared
// memory (checked against the launch table, which the kernel pins with
// static_asserts).
func sm90QFwdGeometry(v TCVariant, d int, pv8 bool) (p ringProto, pipes, smem int) {
	qkRow, raw := 2*d, d // bytes per Q / K operand row, per stored K / V row
	switch v {
	case VarFP8:
		qkRow = d
	case VarBF16:
		raw = 2 * d
	case VarNVFP4:
		raw = d / 2
	}
	p.kConv, p.vConv = v == VarBF16FP8 || v == VarNVFP4, v != VarBF16 && !pv8
	p.pv8 = pv8
	pipes = 2
	if d == 256 {
		pipes = 1
	}
	p.overlap = d != 256
	pipe := func(ks, vs, ls int) int {
		kl, vl, ops := 128*qkRow, 128*2*d, 0
		if p.kConv {
			kl, ops = 128*raw, ops+128*qkRow
		}
		if p.vConv {
			vl, ops = 128*raw, ops+128*2*d
		}
		if pv8 { // V ring: the transposed E4M3 V; ls landing slots of raw rows
			vl, ops = 128*raw, ops+ls*128*raw
		}
		return (ks*kl + vs*vl + ops + 64*qkRow + 8*(2*ks+2*vs+2+ls) + 1023) / 1024 * 1024
	}
	budget := (232448 - 1024) / pipes
	cands := [][3]int{{3, 2, 0}, {3, 1, 0}, {2, 1, 0}, {1, 1, 0}}
	if pv8 {
		cands = [][3]int{{3, 2, 2}, {3, 2, 1}, {2, 2, 1}, {2, 1, 1}, {1, 1, 1}}
	}
	c := cands[len(cands)-1]
	for _, x := range cands {
		if pipe(x[0], x[1], x[2]) <= budget {
			c = x
			break
		}
	}
	p.ks, p.vs, p.ls = c[0], c[1], c[2]
	p.fullPar, p.emptyPar, p.emptyCount = fullParity, emptyParity, 4
	return p, pipes, pipes * pipe(p.ks, p.vs, p.ls)
}

// sm90QKernel is one sm90 query-major kernel: name, variant, head dim and
// whether it is an fp8pv kernel.
type sm90QKernel struct {
	name string
	v    TCVariant
	d    int
	pv8  bool
}

// sm90QFwdKernels lists the fifteen sm90 query-major kernels.
func sm90QFwdKernels() (out []sm90QKernel) {
	for _, d := range []int{64, 128, 256} {
		for _, v := range []TCVariant{VarBF16, VarFP8, VarBF16FP8, VarNVFP4} {
			out = append(out, sm90QKernel{QFwdName(ArchSM90, v, d), v, d, false})
		}
		out = append(out, sm90QKernel{QFwdFP8PVName(d), VarFP8, d, true})
	}
	return out
}

// ringProtos are the kernels' fifteen configurations, by kernel name.
func ringProtos() map[string]ringProto {
	out := map[string]ringProto{}
	for _, k := range sm90QFwdKernels() {
		p, _, _ := sm90QFwdGeometry(k.v, k.d, k.pv8)
		out[k.name] = p
	}
	return out
}

// TestSM90QFwdGeometry: the emulated ring configurations are the kernel's
// (their shared memory is the launch table's) and its grid's tiles per CTA.
func TestSM90QFwdGeometry(t *testing.T) {
	for _, k := range sm90QFwdKernels() {
		name := k.name
		p, pipes, smem := sm90QFwdGeometry(k.v, k.d, k.pv8)
		l := fatbin.HopperAmpereLaunch[name]
		if p.ks == 0 || smem != l.DynSmem || pipes != fatbin.SM90QFwdTilesPerCTA[name] {
			t.Errorf("%s: emulated rings %d / %d / %d, %d pipelines, %d B; the launch table says %d B, %d tiles per CTA", name, p.ks, p.vs, p.ls, pipes, smem, l.DynSmem, fatbin.SM90QFwdTilesPerCTA[name])
		}
	}
}

// checkRings runs p over walks of 0..9 blocks and 1..3 passes, with the
// producer always first, the consumers always first and 40 random
// interleavings each.
func checkRings(p ringProto) error {
	rng := rand.New(rand.NewPCG(7, 9))
	policies := []func([]int) int{
		func(r []int) int { return 0 },          // producer (actor 0) first when runnable
		func(r []int) int { return len(r) - 1 }, // consumer warps first
	}
	for i := 0; i < 40; i++ {
		policies = append(policies, func(r []int) int { return rng.IntN(len(r)) })
	}
	for passes := 1; passes <= 3; passes++ {
		for n := 0; n <= 9; n++ {
			for _, pick := range policies {
				if err := runRings(p, passes, n, pick); err != nil {
					return fmt.Errorf("%d passes, %d blocks: %w", passes, n, err)
				}
			}
		}
	}
	return nil
}

func TestSM90QFwdRingProtocol(t *testing.T) {
	for name, p := range ringProtos() {
		if err := checkRings(p); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Mutations: each must be caught in every configuration.
	muts := map[string]func(p *ringProto){
		"empty parity off by one": func(p *ringProto) { p.emptyPar = func(k, n int) int { return (k / n) & 1 } },
		"full parity off by one":  func(p *ringProto) { p.fullPar = func(k, n int) int { return (k/n + 1) & 1 } },
		"empty count 5":           func(p *ringProto) { p.emptyCount = 5 },
		"empty count 3":           func(p *ringProto) { p.emptyCount = 3 },
		"Q released early":        func(p *ringProto) { p.qemptyBeforeLastUse = true },
	}
	for name, p := range ringProtos() {
		for mname, mut := range muts {
			q := p
			mut(&q)
			if err := checkRings(q); err == nil {
				t.Errorf("%s: mutation %q not caught", name, mname)
			}
		}
		if !p.pv8 {
			continue
		}
		// fp8pv: the pending transposition left past the pass must hang;
		// with one landing slot, the next TMA before it overwrites the
		// landed block still to be transposed.
		q := p
		q.noFlush = true
		if err := checkRings(q); err == nil {
			t.Errorf("%s: mutation \"no flush at the end of a pass\" not caught", name)
		}
		for ls := 1; ls <= 2; ls++ {
			q := p
			q.ls, q.tmaFirst = ls, true
			if err := checkRings(q); (err == nil) == (ls == 1) {
				t.Errorf("%s: TMA before the pending transposition with %d landing slots: %v", name, ls, err)
			}
		}
	}
}

// ---- 2, 3. fragments, masking, CTA mapping and epilogue ----------------------

// accRC is the hardware's wgmma m64nN f32 accumulator fragment: register r
// of warpgroup thread t (warp w = t/32, lane l) holds row
// 16w + l/4 + 8((r/2)%2), column 8(r/4) + 2(l%4) + r%2.
func accRC(t, r int) (row, col int) {
	w, l := t/32, t%32
	return 16*w + l/4 + 8*((r/2)%2), 8*(r/4) + 2*(l%4) + r%2
}

// aRC is the hardware's register A operand of wgmma m64nNk16 (BF16): half h
// of 32-bit register q (0..3) of thread t holds row 16w + l/4 + 8(q%2),
// k 8(q/2) + 2(l%4) + h.
func aRC(t, q, h int) (row, k int) {
	w, l := t/32, t%32
	return 16*w + l/4 + 8*(q%2), 8*(q/2) + 2*(l%4) + h
}

// sm90Frag is the kernel's belief of its fragment rows: fragment row i of
// warp w, lane l (qfwd_consumer: 16 * warp + (lane >> 2) + 8 * i); pv8,
// when set, runs P.V as the fp8pv kernels do.
type sm90Frag struct {
	rowOf func(w, l, i int) int
	pv8   *pv8Map
}

// pv8Map is what the fp8pv kernels (sm90_fp8_vt.cuh) believe of the e4m3
// P.V operands: the key of column k of the transposed V (vt_key) and the
// score register that byte b of register 4kc + q of the P operand takes
// (pack_p_e4m3).
type pv8Map struct {
	vtKey   func(k int) int
	packReg func(kc, q, b int) int
}

// kernelPV8 is sm90_fp8_vt.cuh's mapping.
func kernelPV8() *pv8Map {
	return &pv8Map{
		vtKey: func(k int) int {
			return 32*(k>>5) + 8*(2*((k>>4)&1)+((k>>1)&1)) + 2*((k>>2)&3) + k&1
		},
		packReg: func(kc, q, b int) int { return 16*kc + 8*(q>>1) + 4*(b>>1) + 2*(q&1) + b&1 },
	}
}

// a8RC is the hardware's register A operand of wgmma m64nNk32 (E4M3,
// CuTe's ALayout_64x32): byte b of 32-bit register q (0..3) of thread t
// holds row 16w + l/4 + 8(q%2), k 16(q/2) + 4(l%4) + b.
func a8RC(t, q, b int) (row, k int) {
	w, l := t/32, t%32
	return 16*w + l/4 + 8*(q%2), 16*(q/2) + 4*(l%4) + b
}

func kernelFrag() sm90Frag { return sm90Frag{rowOf: func(w, l, i int) int { return 16*w + l/4 + 8*i }} }

// swz90 is swz<SPAN, R>() of sm90_common.cuh: byte c of row `row` of a
// swizzled panel tile of R rows.
func swz90(span, rows, row, c int) int {
	panel, cc := c/span, c%span
	sw := (row >> 2) & 1
	switch span {
	case 128:
		sw = row & 7
	case 64:
		sw = (row >> 1) & 3
	}
	return panel*rows*span + row*span + ((((cc >> 4) ^ sw) << 4) | (cc & 15))
}

// emuSM90QueryMajor runs qp as sm90_qfwd.cu does on grid CTAs of pipes
// tiles each (CTA c, pipeline g: tile pipes*c + g), through the hardware
// fragment layouts and the kernel's beliefs fr.
func emuSM90QueryMajor(c *prefillCase, qp *QPlan, pipes, grid int, fr sm90Frag) *qEmuOut {
	rows := c.totalQ * c.hq
	out := &qEmuOut{o: make([]float64, rows*c.d), lse: make([]float64, rows), tlse: make([]float64, rows), written: make([]int, rows)}
	qpk, d := c.qhpk, c.d
	span := min(128, 2*d)
	invT := 0.0
	if c.temp > 0 {
		invT = 1 / float64(c.temp)
	}
	for cta := 0; cta < grid; cta++ {
		for pipe := 0; pipe < pipes; pipe++ {
			tl := pipes*cta + pipe
			if tl >= qp.NumTiles() {
				continue
			}
			f := qp.Tiles[tl*QTileFields:]
			b, h, first, ntok := int(f[0]), int(f[1]), int(f[2]), int(f[3])
			seqQ, seqK := c.seqQ(b), c.seqK(b)
			nrows := ntok * qpk
			// R.row: (output row, key bound, token) of tile row idx; orow -1 past nrows
			rowInfo := func(idx int) (orow, lim, tok int) {
				if idx >= nrows {
					return -1, 0, 0
				}
				tok = idx / qpk
				ql := first + tok - int(c.cuQ[b])
				lim = seqK
				if c.causal {
					lim = min(lim, ql+seqK-seqQ+1)
				}
				return (first+tok)*c.hq + h*qpk + idx%qpk, lim, tok
			}
			for rt := 0; rt < nrows; rt += QTileRows {
				emuSM90Pass(c, qp, tl, b, h, rt, span, invT, fr, rowInfo, out)
			}
		}
	}
	return out
}

// emuSM90Pass is one 64-row pass of qfwd_consumer and store_tile.
func emuSM90Pass(c *prefillCase, qp *QPlan, tl, b, h, rt, span int, invT float64, fr sm90Frag,
	rowInfo func(idx int) (orow, lim, tok int), out *qEmuOut) {
	d := c.d
	// the hardware's Q rows: tile row r is the query row of rowInfo(rt + r)
	qOf := func(r int) []float32 {
		orow, _, _ := rowInfo(rt + r)
		if orow < 0 {
			return make([]float32, d) // padding rows are zero-filled
		}
		return c.q.row(orow)
	}
	type thr struct {
		orow, lim, tok [2]int
		m, l, tl       [2]float64
		o              []float64
	}
	th := make([]thr, 128)
	for t := range th {
		th[t].o = make([]float64, d/2)
		for i := 0; i < 2; i++ {
			th[t].orow[i], th[t].lim[i], th[t].tok[i] = rowInfo(rt + fr.rowOf(t/32, t%32, i))
			th[t].m[i] = math.Inf(-1)
		}
	}
	for e := qp.TilePtr[tl]; e < qp.TilePtr[tl+1]; e++ {
		t0 := int(qp.Blocks[e]) * c.blk
		if t0 >= c.seqK(b) {
			continue // QWalk::at skips it
		}
		nkeys := min(c.blk, c.seqK(b)-t0)
		// K / V rows of the block's keys (rows past the block: V zeroed, scores masked)
		ks, vs := make([][]float32, nkeys), make([][]float32, nkeys)
		for key := range ks {
			r := c.kRow(b, t0+key, h)
			ks[key], vs[key] = c.k.row(r), c.v.row(r)
		}
		// S = Q K^T into the hardware accumulator; the kernel masks by its beliefs.
		p := make([][64]float64, 128)
		for t := range th {
			var bl [2]int
			for i := 0; i < 2; i++ {
				if qp.Masks[e]>>uint(th[t].tok[i])&1 != 0 {
					bl[i] = min(max(th[t].lim[i]-t0, 0), nkeys)
				}
			}
			for reg := 0; reg < 64; reg++ {
				j, i, ee := reg/4, (reg/2)%2, reg%2
				key := 8*j + 2*(t%4) + ee // the kernel's key of the register (softmax_fold)
				if key >= bl[i] {
					p[t][reg] = math.Inf(-1)
					continue
				}
				hr, hk := accRC(t, reg)
				var acc float64
				if hk < nkeys {
					kr := ks[hk]
					for x, qx := range qOf(hr) {
						acc += float64(qx) * float64(kr[x])
					}
				}
				p[t][reg] = acc * float64(c.scale)
			}
		}
		// softmax_fold: per-thread row maxima and sums, reduced over the quad.
		alpha := make([][2]float64, 128)
		for q0 := 0; q0 < 128; q0 += 4 {
			for i := 0; i < 2; i++ {
				mx := math.Inf(-1)
				for t := q0; t < q0+4; t++ {
					for j := 0; j < 16; j++ {
						for ee := 0; ee < 2; ee++ {
							mx = math.Max(mx, p[t][4*j+2*i+ee])
						}
					}
				}
				empty := math.IsInf(mx, -1)
				var sum, tsum float64
				mnew := math.Max(th[q0].m[i], mx)
				if empty {
					mnew = th[q0].m[i]
				}
				for t := q0; t < q0+4; t++ {
					for j := 0; j < 16; j++ {
						for ee := 0; ee < 2; ee++ {
							x := &p[t][4*j+2*i+ee]
							if math.IsInf(*x, -1) {
								*x = 0
								continue
							}
							pr := math.Exp(*x - mnew)
							sum += pr
							tsum += math.Exp((*x - mnew) * invT)
							*x = pr
						}
					}
				}
				for t := q0; t < q0+4; t++ {
					a := 1.0
					if !empty {
						a = math.Exp(th[t].m[i] - mnew)
						if invT > 0 {
							th[t].tl[i] = th[t].tl[i]*math.Exp((th[t].m[i]-mnew)*invT) + tsum
						}
					}
					alpha[t][i] = a
					th[t].l[i] = th[t].l[i]*a + sum
					th[t].m[i] = mnew
				}
			}
		}
		// pack_p into the hardware's register A operand: P as the wgmma reads it.
		var phw [64][128]float64
		// V as the wgmma reads it: vhw[key] of operand column key (the
		// fp8pv transposed V: V[vt_key(k)], keys past the block zero).
		vhw := vs
		if fr.pv8 != nil {
			vhw = make([][]float32, 128)
			for k := range vhw {
				if key := fr.pv8.vtKey(k); key >= 0 && key < nkeys {
					vhw[k] = vs[key]
				}
			}
			for t := range th {
				for kc := 0; kc < 4; kc++ {
					for q := 0; q < 4; q++ {
						for bb := 0; bb < 4; bb++ {
							r, k := a8RC(t, q, bb)
							phw[r][32*kc+k] = p[t][fr.pv8.packReg(kc, q, bb)]
						}
					}
				}
			}
		}
		for t := range th {
			if fr.pv8 != nil {
				break
			}
			for kk := 0; kk < 8; kk++ {
				for q := 0; q < 4; q++ {
					pair := 4*kk + q // pa index 2j + i
					j, i := pair/2, pair%2
					for hh := 0; hh < 2; hh++ {
						r, k := aRC(t, q, hh)
						phw[r][16*kk+k] = p[t][4*j+2*i+hh]
					}
				}
			}
		}
		// rescale, then O += P V into the hardware accumulator.
		for t := range th {
			for reg := range th[t].o {
				hr, hc := accRC(t, reg)
				o := th[t].o[reg] * alpha[t][(reg/2)%2]
				for key, vr := range vhw {
					if pk := phw[hr][key]; pk != 0 && vr != nil {
						o += pk * float64(vr[hc])
					}
				}
				th[t].o[reg] = o
			}
		}
	}
	// store_tile: stage through the swizzled buffer, copy 16 bytes at a time.
	stage := make([]float64, QTileRows*2*d/2)
	for t := range th {
		w, l := t/32, t%32
		for i := 0; i < 2; i++ {
			inv, lse, tlse := 0.0, math.Inf(-1), math.Inf(-1)
			if th[t].l[i] > 0 && !math.IsInf(th[t].m[i], -1) {
				inv = 1 / th[t].l[i]
				lse = th[t].m[i] + math.Log(th[t].l[i])
				tlse = lse
				if invT > 0 {
					tlse = th[t].m[i]*invT + math.Log(th[t].tl[i])
				}
			}
			r := fr.rowOf(w, l, i)
			for j := 0; j < d/8; j++ {
				col := 8*j + 2*(l%4)
				at := swz90(span, QTileRows, r, 2*col) / 2
				stage[at] = th[t].o[4*j+2*i] * inv
				stage[at+1] = th[t].o[4*j+2*i+1] * inv
			}
			if th[t].orow[i] >= 0 && l%4 == 0 {
				out.lse[th[t].orow[i]], out.tlse[th[t].orow[i]] = lse, tlse
			}
		}
	}
	cpr := 2 * d / 16
	for ch := 0; ch < QTileRows*cpr; ch++ {
		r, u := ch/cpr, ch%cpr
		orow, _, _ := rowInfo(rt + r)
		if orow < 0 {
			continue
		}
		src := swz90(span, QTileRows, r, 16*u) / 2
		copy(out.o[orow*d+8*u:orow*d+8*u+8], stage[src:src+8])
		if u == 0 {
			out.written[orow]++
		}
	}
}

// TestSM90QFwdFragmentLayouts: the kernel's register beliefs (score
// register 4j + 2i + e is row i, key 8j + 2(l%4) + e; O register r is row
// (r/2)%2 of the same form; the P.V A operand of step kk takes the pairs
// pa[4kk..4kk+3], pair 2j + i packing registers 4j + 2i, 4j + 2i + 1) are
// the hardware's layouts, each (row, column) held exactly once.
func TestSM90QFwdFragmentLayouts(t *testing.T) {
	fr := kernelFrag()
	for _, n := range []int{64, 128, 256} {
		seen := map[[2]int]int{}
		for th := 0; th < 128; th++ {
			for reg := 0; reg < n/2; reg++ {
				r, c := accRC(th, reg)
				seen[[2]int{r, c}]++
				j, i, e := reg/4, (reg/2)%2, reg%2
				if r != fr.rowOf(th/32, th%32, i) || c != 8*j+2*(th%4)+e {
					t.Fatalf("N %d: thread %d register %d holds (%d, %d), the kernel believes (%d, %d)", n, th, reg, r, c, fr.rowOf(th/32, th%32, i), 8*j+2*(th%4)+e)
				}
			}
		}
		if len(seen) != 64*n {
			t.Fatalf("N %d: the accumulator covers %d of %d elements", n, len(seen), 64*n)
		}
	}
	seen := map[[2]int]int{}
	for th := 0; th < 128; th++ {
		for kk := 0; kk < 8; kk++ {
			for q := 0; q < 4; q++ {
				j, i := (4*kk+q)/2, (4*kk+q)%2
				for h := 0; h < 2; h++ {
					r, k := aRC(th, q, h)
					seen[[2]int{r, 16*kk + k}]++
					if r != fr.rowOf(th/32, th%32, i) || 16*kk+k != 8*j+2*(th%4)+h {
						t.Fatalf("A operand: thread %d step %d register %d half %d is (%d, %d), pa holds score (%d, %d)", th, kk, q, h, r, 16*kk+k, fr.rowOf(th/32, th%32, i), 8*j+2*(th%4)+h)
					}
				}
			}
		}
	}
	if len(seen) != 64*128 {
		t.Fatalf("A operand covers %d of %d elements", len(seen), 64*128)
	}
}

// TestEmulatedSM90QueryMajorPrefill runs every query-major case through
// emuSM90QueryMajor with the kernel's CTA mapping (two tiles per CTA at D
// 64 / 128, the fatbin table's) and compares with the float64 reference;
// a kernel that believed the wrong fragment row, or a CTA mapping that
// dropped the second tile, must be caught.
func TestEmulatedSM90QueryMajorPrefill(t *testing.T) {
	for i, c := range qCases() {
		genPrefill(t, c, uint64(i+1))
		qp, err := BuildQPlan(c.csr, c.sched, c.cuQ, c.hkv, c.qhpk, QTileRows)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		// the kernel and grid the Go launch picks for this head dim
		fa, _ := qArgs()
		fa.D, fa.QDtype, fa.KVDtype, fa.PVRound = c.d, c.qd, c.kvd, c.round
		tp, why := QFwdPlan(ArchSM90, fa, qp.NumTiles())
		pipes := fatbin.SM90QFwdTilesPerCTA[tp.Name]
		if why != "" || pipes < 1 {
			t.Fatalf("%s: no sm90 query-major kernel at D %d (%s, %q)", c.name, c.d, tp.Name, why)
		}
		if msg := qEmuMismatch(c, emuSM90QueryMajor(c, qp, pipes, tp.GridBlocks, kernelFrag())); msg != "" {
			t.Fatalf("%s: %s", c.name, msg)
		}
		if i > 0 {
			continue // the mutations on the first case
		}
		wrongRow := sm90Frag{rowOf: func(w, l, i int) int { return 16*w + l%8 + 8*i }}
		if qEmuMismatch(c, emuSM90QueryMajor(c, qp, pipes, tp.GridBlocks, wrongRow)) == "" {
			t.Errorf("%s: a wrong fragment row went unnoticed", c.name)
		}
		swapped := sm90Frag{rowOf: func(w, l, i int) int { return 16*w + l/4 + 8*(1-i) }}
		if qEmuMismatch(c, emuSM90QueryMajor(c, qp, pipes, tp.GridBlocks, swapped)) == "" {
			t.Errorf("%s: swapped fragment rows went unnoticed", c.name)
		}
		if qEmuMismatch(c, emuSM90QueryMajor(c, qp, pipes, tp.GridBlocks-1, kernelFrag())) == "" {
			t.Errorf("%s: a grid one CTA short went unnoticed", c.name)
		}
	}
}

// TestEmulatedSM90QueryMajorFP8PV runs every query-major case with P.V as
// the fp8pv kernels do it (P packed by pack_p_e4m3 into the hardware's
// e4m3 register operand, V through the transposed operand's key order) in
// float64 against the reference, on the fp8pv kernels' CTA mapping. The
// mapping is first checked to cover every (row, key) of the operand once;
// a transposed V in natural key order, or P packed as the bf16 fragment
// pairs, must be caught.
func TestEmulatedSM90QueryMajorFP8PV(t *testing.T) {
	m := kernelPV8()
	seen := map[[2]int]int{}
	for th := 0; th < 128; th++ {
		for kc := 0; kc < 4; kc++ {
			for q := 0; q < 4; q++ {
				for b := 0; b < 4; b++ {
					r, k := a8RC(th, q, b)
					reg := m.packReg(kc, q, b)
					hr, hk := accRC(th, reg)
					seen[[2]int{r, 32*kc + k}]++
					if hr != r || hk != m.vtKey(32*kc+k) {
						t.Fatalf("thread %d, k-group %d, register %d byte %d: operand (%d, column %d = key %d), score register %d holds (%d, key %d)",
							th, kc, q, b, r, 32*kc+k, m.vtKey(32*kc+k), reg, hr, hk)
					}
				}
			}
		}
	}
	if len(seen) != 64*128 {
		t.Fatalf("e4m3 A operand covers %d of %d elements", len(seen), 64*128)
	}
	natural := &pv8Map{vtKey: func(k int) int { return k }, packReg: m.packReg}
	bf16Pairs := &pv8Map{vtKey: m.vtKey, packReg: func(kc, q, b int) int { return 16*kc + 4*q + b }}
	for i, c := range qCases() {
		genPrefill(t, c, uint64(i+1))
		qp, err := BuildQPlan(c.csr, c.sched, c.cuQ, c.hkv, c.qhpk, QTileRows)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		name := QFwdFP8PVName(c.d)
		pipes := fatbin.SM90QFwdTilesPerCTA[name]
		if pipes < 1 {
			t.Fatalf("%s: no fp8pv kernel at D %d", c.name, c.d)
		}
		grid := (qp.NumTiles() + pipes - 1) / pipes
		fr := kernelFrag()
		fr.pv8 = m
		if msg := qEmuMismatch(c, emuSM90QueryMajor(c, qp, pipes, grid, fr)); msg != "" {
			t.Fatalf("%s: %s", c.name, msg)
		}
		if i > 0 {
			continue // the mutations on the first case
		}
		for mname, mut := range map[string]*pv8Map{"transposed V in natural key order": natural, "P packed as bf16 pairs": bf16Pairs} {
			fr.pv8 = mut
			if qEmuMismatch(c, emuSM90QueryMajor(c, qp, pipes, grid, fr)) == "" {
				t.Errorf("%s: %s went unnoticed", c.name, mname)
			}
		}
	}
}
