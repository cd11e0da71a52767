package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/tile"
	"github.com/sparseattn/msa/op"
	"gorgonia.org/tensor"
)

// Soak mode (-soak DURATION): a serving-like loop over the public op API
// that runs for a given time while the Go heap, RSS and goroutine count
// are sampled; the heap and the goroutine count must stay flat
// (soak_check.go). bench/README.md, "Soak", describes the loop and the
// check.

// soakFlags are the flags of the soak mode.
type soakFlags struct {
	dur   time.Duration
	every time.Duration
	seed  uint64
}

var soakOpts soakFlags

// registerSoakFlags adds the soak flags to the command line (parseFlags).
func registerSoakFlags() {
	flag.DurationVar(&soakOpts.dur, "soak", 0, "run the serving-like soak loop for this long (e.g. 60s) instead of the suite; print steps, tokens, step time, heap, RSS and goroutines over time and exit 1 when the heap or the goroutine count grows (bench/README.md, Soak); takes -tiny, -out, -workers, -tier, -spin, -soak-every and -soak-seed")
	flag.DurationVar(&soakOpts.every, "soak-every", 0, "soak sampling interval (default: the duration / 30, at least 50ms)")
	flag.Uint64Var(&soakOpts.seed, "soak-seed", 1, "soak seed: the same seed gives the same sequence of requests and data")
}

// soakShape is the model and traffic of a soak run.
type soakShape struct {
	layers, hq, hkv, d int
	page               int // page size = prefill blk_kv (paged prefill requires it)
	topK               int
	maxBatch           int // request slots
	promptMin          int // prompt lengths, uniform in [promptMin, promptMax]
	promptMax          int
	genMin, genMax     int // generated tokens per request, uniform
}

// Default shapes: a 4-layer GQA-16 model with 8 request slots, prompts up
// to 1K (a prefill step runs a few hundred ms on 2 cores) and up to 256
// generated tokens; -tiny: shapes for a CI run of a few seconds.
var (
	soakDefault = soakShape{layers: 4, hq: 16, hkv: 1, d: 128, page: 128, topK: 8, maxBatch: 8,
		promptMin: 128, promptMax: 1024, genMin: 16, genMax: 256}
	soakTiny = soakShape{layers: 2, hq: 4, hkv: 1, d: 64, page: 16, topK: 4, maxBatch: 4,
		promptMin: 16, promptMax: 128, genMin: 4, genMax: 32}
)

// maxCols is the page-table width: the pages of the longest request.
func (s soakShape) maxCols() int { return (s.promptMax + s.genMax + s.page - 1) / s.page }

// soakStepHook, when set, runs at the end of every step. Only tests set
// it, to inject a leak and check that the detector names it.
var soakStepHook func()

// soakReq is one request slot. Slots and their page lists are allocated
// once, so that the loop's own state does not change size with traffic.
type soakReq struct {
	active bool
	target int // prompt + generated tokens
	length int // tokens in the cache
	pages  []int32
}

// soakLoop is the state of a soak run: one K and one V cache per layer,
// a page allocator, request slots, one DecodeWrapper shared by the layers
// (planned once per step) and reusable metadata and output buffers.
type soakLoop struct {
	sh             soakShape
	workers        int
	rng            *rand.Rand
	kc, vc         []*tensor.Dense
	arena          []lowp.BFloat16 // Q and new K/V rows are slices of it at random offsets
	free           []int32         // free pages (a stack)
	reqs           []soakReq
	w              *op.DecodeWrapper
	pt, su, cu     []int32 // page table [B, maxCols], seqused_k [B], cu_seqlens [B+1]
	out            []lowp.BFloat16
	lse            []float32
	lastQ          *tensor.Dense // the last decode step's last layer: q ...
	lastB          int           // ... and batch (out, pt and su hold the rest)
	prefillTokens  int64
	decodeTokens   int64
	admitted, done int64
}

func newSoakLoop(sh soakShape, workers int, seed uint64) (*soakLoop, error) {
	l := &soakLoop{sh: sh, workers: workers, rng: rand.New(rand.NewPCG(seed, 0x50a1))}
	cols := sh.maxCols()
	numPages := sh.maxBatch * cols
	tables()
	// Data streams: 2*layer (K) and 2*layer+1 (V) for the caches, 2*layers
	// for the arena.
	stream := func(i int) uint64 { return seed*131 + uint64(i) }
	for i := 0; i < sh.layers; i++ {
		for j, c := range []*[]*tensor.Dense{&l.kc, &l.vc} {
			// Random contents, so that a decode step's positions not yet
			// written (the priming step's) hold finite values.
			data := make([]lowp.BFloat16, numPages*sh.hkv*sh.page*sh.d)
			fillTable(data, bf16Table, stream(2*i+j), workers)
			*c = append(*c, tensor.New(tensor.WithShape(numPages, sh.hkv, sh.page, sh.d), tensor.WithBacking(data)))
		}
	}
	rows := max(sh.promptMax, sh.maxBatch)
	l.arena = make([]lowp.BFloat16, 2*rows*sh.hq*sh.d)
	fillTable(l.arena, bf16Table, stream(2*sh.layers), workers)
	for p := numPages - 1; p >= 0; p-- {
		l.free = append(l.free, int32(p))
	}
	l.reqs = make([]soakReq, sh.maxBatch)
	for i := range l.reqs {
		l.reqs[i].pages = make([]int32, 0, cols)
	}
	l.pt = make([]int32, sh.maxBatch*cols)
	l.su = make([]int32, sh.maxBatch)
	l.cu = make([]int32, sh.maxBatch+1)
	l.out = make([]lowp.BFloat16, rows*sh.hq*sh.d)
	l.lse = make([]float32, rows*sh.hq)
	var err error
	l.w, err = op.NewDecodeWrapper(sh.page)
	return l, err
}

func (l *soakLoop) close() { l.w.Close() }

// rows returns a tensor of n rows of heads x D values at a random offset
// of the arena (fresh-looking data without generating any per step).
func (l *soakLoop) rows(n, heads int) *tensor.Dense {
	size := n * heads * l.sh.d
	off := l.rng.IntN(len(l.arena) - size + 1)
	return tensor.New(tensor.WithShape(n, heads, l.sh.d), tensor.WithBacking(l.arena[off:off+size]))
}

func i32(v []int32, shape ...int) *tensor.Dense {
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

// admit takes a free slot for a request of the given lengths when the
// slot and its pages are available, writes its prompt's K/V into every
// layer's cache and runs sparse prefill over it, reading K/V from the
// cache. It reports whether the request was admitted.
func (l *soakLoop) admit(prompt, gen int) (bool, error) {
	sh := l.sh
	slot := -1
	for i := range l.reqs {
		if !l.reqs[i].active {
			slot = i
			break
		}
	}
	need := (prompt + gen + sh.page - 1) / sh.page
	if slot < 0 || len(l.free) < need {
		return false, nil
	}
	r := &l.reqs[slot]
	r.active, r.target, r.length = true, prompt+gen, prompt
	r.pages = append(r.pages[:0], l.free[len(l.free)-need:]...)
	l.free = l.free[:len(l.free)-need]
	l.admitted++
	l.prefillTokens += int64(prompt)

	cols := sh.maxCols()
	pt := l.pt[:cols]
	copy(pt, r.pages)
	clear(pt[len(r.pages):]) // columns past the request's pages are never read
	ptT, su := i32(pt, 1, cols), i32([]int32{int32(prompt)}, 1)
	cu := i32([]int32{0, int32(prompt)}, 2)
	q2k, _ := causalQ2K(prompt, sh.hkv, sh.topK, sh.page, l.rng.Uint64())
	rowPtr, qIdx, err := op.BuildK2QCSR(i32(q2k, sh.hkv, prompt, sh.topK), cu, cu, sh.page)
	if err != nil {
		return false, fmt.Errorf("prefill: BuildK2QCSR: %w", err)
	}
	out := tensor.New(tensor.WithShape(prompt, sh.hq, sh.d), tensor.WithBacking(l.out[:prompt*sh.hq*sh.d]))
	lse := tensor.New(tensor.WithShape(prompt, sh.hq), tensor.WithBacking(l.lse[:prompt*sh.hq]))
	for layer := 0; layer < sh.layers; layer++ {
		if err := l.appendKV(layer, prompt, ptT, cu, su); err != nil {
			return false, fmt.Errorf("prefill: %w", err)
		}
		_, err := op.SparseAttenFunc(l.rows(prompt, sh.hq), l.kc[layer], l.vc[layer], rowPtr, qIdx, sh.topK, op.SparseArgs{
			CuSeqlensQ: cu, CuSeqlensK: cu, PageTable: ptT, SeqUsedK: su, BlkKV: sh.page, Causal: true,
			Workers: l.workers, Out: out, OutLSE: lse})
		if err != nil {
			return false, fmt.Errorf("prefill: SparseAttenFunc (layer %d): %w", layer, err)
		}
	}
	return true, nil
}

// appendKV writes n new K and V rows into layer's caches.
func (l *soakLoop) appendKV(layer, n int, pt, cu, su *tensor.Dense) error {
	for _, c := range []*tensor.Dense{l.kc[layer], l.vc[layer]} {
		if err := op.AppendPagedKV(c, l.rows(n, l.sh.hkv), pt, cu, su, op.HND); err != nil {
			return fmt.Errorf("AppendPagedKV (layer %d): %w", layer, err)
		}
	}
	return nil
}

// decode runs one decode step for every active request: append one K/V
// row per request and layer, re-plan the wrapper for the new lengths,
// then run every layer.
func (l *soakLoop) decode() error {
	sh := l.sh
	cols := sh.maxCols()
	b := 0
	for i := range l.reqs {
		r := &l.reqs[i]
		if !r.active {
			continue
		}
		row := l.pt[b*cols : (b+1)*cols]
		copy(row, r.pages)
		clear(row[len(r.pages):])
		r.length++
		l.su[b] = int32(r.length)
		b++
		l.cu[b] = int32(b)
	}
	l.lastB = b
	if b == 0 {
		return nil
	}
	pt, su, cu := i32(l.pt[:b*cols], b, cols), i32(l.su[:b], b), i32(l.cu[:b+1], b+1)
	for layer := 0; layer < sh.layers; layer++ {
		if err := l.appendKV(layer, b, pt, cu, su); err != nil {
			return fmt.Errorf("decode: %w", err)
		}
	}
	err := l.w.Plan(op.PlanArgs{DecodeArgs: op.DecodeArgs{PageTable: pt, SeqUsedK: su, SeqlenQ: 1, Workers: l.workers},
		NumQOHeads: sh.hq, NumKVHeads: sh.hkv, HeadDim: sh.d}, nil)
	if err != nil {
		return fmt.Errorf("decode: Plan: %w", err)
	}
	out := tensor.New(tensor.WithShape(b, sh.hq, sh.d), tensor.WithBacking(l.out[:b*sh.hq*sh.d]))
	for layer := 0; layer < sh.layers; layer++ {
		l.lastQ = l.rows(b, sh.hq)
		if err := l.w.RunInto(l.lastQ, l.kc[layer], l.vc[layer], 0, out, nil); err != nil {
			return fmt.Errorf("decode: RunInto (layer %d): %w", layer, err)
		}
	}
	l.decodeTokens += int64(b)
	return nil
}

// soakTolerance bounds the error of a decode output element O against the
// float64 reference: |got - want| <= rtol |want| + atol max|v|.
//
// The float32 result before the output's BF16 rounding differs from the
// exact one by delta: the P.V sum and the normalisation over n <= keys
// terms by at most n u max|v| (u = 2^-24, recursive summation, weights
// summing to 1); a logit s = q.k / sqrt(D) by at most D u m^2 / sqrt(D)
// from the dot product plus u |s| <= u sqrt(D) m^2 from the scaling (m:
// the largest |value| the random data can take, bf16Table's), and a
// weight moves relatively by twice a logit's error (its own logit and the
// normalising sum), so O by 4 sqrt(D) m^2 u max|v|; exp and the split-KV
// rescaling add a few u. Rounding to BF16 then errs by at most its unit
// roundoff 2^-8 of |O + delta|, so |got - want| <= 2^-8 |want| +
// (1 + 2^-8) delta: rtol 2^-8, atol (1 + 2^-8)(n + 4 sqrt(D) m^2 + 8) u.
// The bf16 tiers round P to BF16 before P.V (tile.BF16Products): each
// weight errs by 2^-8 of itself, the sum by 2^-8 max|v| more.
func soakTolerance(sh soakShape) tolerance {
	const u = 1.0 / (1 << 24)
	tables()
	m := 0.0
	for _, x := range bf16Table {
		m = math.Max(m, math.Abs(bf16Val(x)))
	}
	n := float64(sh.promptMax + sh.genMax)
	t := tolerance{rtol: 1.0 / 256, atol: (1 + 1.0/256) * (n + 4*math.Sqrt(float64(sh.d))*m*m + 8) * u}
	if tile.BF16Products() {
		t.atol += 1.0 / 256
	}
	return t
}

// verifyDecode checks every request's output of the last decode step's
// last layer against the float64 reference over the request's pages (up
// to its seqused_k), with the suite's decode tolerance: pages are recycled
// between requests all the time, so a stale page table or a mixed-up page
// would show here. It must run before the next step overwrites the page
// table and the output (finish releases pages but writes nothing).
func (l *soakLoop) verifyDecode(ck *checker) {
	sh := l.sh
	if l.lastB == 0 {
		return
	}
	cols, layer, qpk := sh.maxCols(), sh.layers-1, sh.hq/sh.hkv
	kr := bf16Rows(l.kc[layer].Data().([]lowp.BFloat16))
	vr := bf16Rows(l.vc[layer].Data().([]lowp.BFloat16))
	qr := bf16Rows(l.lastQ.Data().([]lowp.BFloat16))
	scale := 1 / math.Sqrt(float64(sh.d))
	got := make([]float32, sh.d)
	for b := 0; b < l.lastB; b++ {
		n := int(l.su[b])
		keys, vals := make([][]float64, n), make([][]float64, n)
		for h := 0; h < sh.hkv; h++ {
			for t := 0; t < n; t++ {
				r := (int(l.pt[b*cols+t/sh.page])*sh.hkv+h)*sh.page + t%sh.page
				keys[t], vals[t] = kr.row(r, sh.d), vr.row(r, sh.d)
			}
			maxV := maxAbs(vals)
			for head := h * qpk; head < (h+1)*qpk; head++ {
				want := refAttention(qr.row(b*sh.hq+head, sh.d), keys, vals, scale)
				for i := range got {
					got[i] = l.out[(b*sh.hq+head)*sh.d+i].Float32()
				}
				ck.row(fmt.Sprintf("decode O[batch row %d, head %d] (context %d)", b, head, n), got, want, maxV)
			}
		}
	}
}

// finish releases the slots and pages of requests that reached their
// length.
func (l *soakLoop) finish() {
	for i := range l.reqs {
		r := &l.reqs[i]
		if r.active && r.length >= r.target {
			l.free = append(l.free, r.pages...)
			r.pages, r.active = r.pages[:0], false
			l.done++
		}
	}
}

// step is one serving step: admit at most one new request (prefill in
// between decode steps), decode every active request, release the
// finished ones. The lengths are drawn every step, admitted or not, so a
// seed fixes the whole sequence.
func (l *soakLoop) step() error {
	sh := l.sh
	prompt := sh.promptMin + l.rng.IntN(sh.promptMax-sh.promptMin+1)
	gen := sh.genMin + l.rng.IntN(sh.genMax-sh.genMin+1)
	if _, err := l.admit(prompt, gen); err != nil {
		return err
	}
	if err := l.decode(); err != nil {
		return err
	}
	l.finish()
	if soakStepHook != nil {
		soakStepHook()
	}
	return nil
}

// prime runs the largest shapes once before sampling starts: a prefill of
// the longest prompt in every slot, then one decode step of the full batch
// at the longest context. The library keeps its largest buffers and its
// worker goroutines for the next call (eager workspaces, the wrapper's
// pool and partials), so after this they are at their high-water marks
// and what remains to grow is what leaks. Every slot is released after.
func (l *soakLoop) prime() error {
	sh := l.sh
	for range l.reqs {
		if ok, err := l.admit(sh.promptMax, sh.genMax); err != nil || !ok {
			return fmt.Errorf("priming: admit (admitted %v): %v", ok, err)
		}
	}
	for i := range l.reqs {
		l.reqs[i].length = l.reqs[i].target - 1 // the positions in between hold the caches' random contents
	}
	if err := l.decode(); err != nil {
		return fmt.Errorf("priming: %w", err)
	}
	l.finish()
	l.prefillTokens, l.decodeTokens, l.admitted, l.done = 0, 0, 0, 0
	return nil
}

// soakMode reports whether any soak flag was given (main then runs the
// soak mode, which rejects -soak-every or -soak-seed without -soak).
func soakMode() bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || strings.HasPrefix(f.Name, "soak") })
	return set
}

// checkSoakFlags rejects flags the soak mode does not use and durations
// that are not positive.
func checkSoakFlags() error {
	var other []string
	soakSet := false
	flag.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "soak":
			soakSet = true
		case "soak-every", "soak-seed", "tiny", "out", "workers", "tier", "spin":
		default:
			other = append(other, "-"+f.Name)
		}
	})
	switch {
	case !soakSet:
		return fmt.Errorf("-soak-every and -soak-seed need -soak DURATION")
	case len(other) > 0:
		return fmt.Errorf("-soak takes only -tiny, -out, -workers, -tier, -spin, -soak-every and -soak-seed, not %s", strings.Join(other, ", "))
	case soakOpts.dur <= 0:
		return fmt.Errorf("-soak: want a positive duration, got %v", soakOpts.dur)
	case soakOpts.every < 0:
		return fmt.Errorf("-soak-every: want a positive duration (or 0: the duration / 30), got %v", soakOpts.every)
	}
	return nil
}

// runSoak runs the soak mode and returns the exit code: 0 when the heap
// and the goroutine count stayed flat, 1 when either grew or an op failed,
// 2 for bad flags.
func runSoak(cfg *config) int {
	if err := checkSoakFlags(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	runtime.GOMAXPROCS(cfg.workers)
	op.SetWorkerSpin(cfg.spin)
	if cfg.tier != "" {
		if err := tile.SetTier(cfg.tier); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 2
		}
	}
	sh := soakDefault
	if cfg.tiny {
		sh = soakTiny
	}
	every := soakOpts.every
	if every == 0 {
		every = max(soakOpts.dur/30, 50*time.Millisecond)
	}
	if soakOpts.dur < 3*minPerThird*every {
		fmt.Fprintf(os.Stderr, "bench: -soak %v with samples every %v: want at least %d samples (%d per third), so -soak >= %v\n",
			soakOpts.dur, every, 3*minPerThird, minPerThird, 3*minPerThird*every)
		return 2
	}
	fmt.Printf("soak: %v, sampled every %v, seed %d, GOMAXPROCS %d, workers %d, kernel tier %s\n",
		soakOpts.dur, every, soakOpts.seed, runtime.GOMAXPROCS(0), cfg.workers, tile.Tier())
	fmt.Printf("model: %d layers, Hq %d, Hkv %d, D %d, BF16, page %d (= prefill blk_kv), topK %d; %d request slots, prompts %d-%d, generated %d-%d tokens\n",
		sh.layers, sh.hq, sh.hkv, sh.d, sh.page, sh.topK, sh.maxBatch, sh.promptMin, sh.promptMax, sh.genMin, sh.genMax)
	rep, err := soak(sh, cfg.workers, soakOpts.dur, every, soakOpts.seed)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: soak:", err)
		return 1
	}
	rep.print(os.Stdout)
	if cfg.out != "" {
		path := filepath.Join(cfg.out, "soak.csv")
		if err := os.MkdirAll(cfg.out, 0o755); err == nil {
			err = writeCSVRows(path, rep.rows(true))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: soak: writing", path+":", err)
			return 1
		}
		fmt.Println("wrote", path)
	}
	if fails := rep.failures(); len(fails) > 0 {
		for _, f := range fails {
			fmt.Fprintln(os.Stderr, "bench: soak FAILED:", f)
		}
		return 1
	}
	fmt.Println("soak: passed (heap and goroutines flat, decode outputs within tolerance)")
	return 0
}

// soak primes the loop, then runs steps for dur, sampling every interval
// between steps, and returns the report with the growth checks done.
func soak(sh soakShape, workers int, dur, every time.Duration, seed uint64) (*soakReport, error) {
	l, err := newSoakLoop(sh, workers, seed)
	if err != nil {
		return nil, err
	}
	defer l.close()
	if err := l.prime(); err != nil {
		return nil, err
	}
	m := newSoakMeter(int(dur/every) + 2)
	ck := &checker{tol: soakTolerance(sh)}
	start := time.Now()
	m.sample(0, l)
	next := every
	for {
		t0 := time.Now()
		if err := l.step(); err != nil {
			return nil, fmt.Errorf("step %d: %w", m.steps, err)
		}
		m.stepDone(time.Since(t0))
		el := time.Since(start)
		if el >= next || el >= dur {
			l.verifyDecode(ck) // before the sample's GC, which collects its garbage
			m.sample(el, l)
			next = el + every
		}
		if el >= dur {
			break
		}
	}
	return m.report(l, ck)
}
