package main

import (
	"fmt"
	"math/rand/v2"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op"
	"gorgonia.org/tensor"
)

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
	q2k, _, err := causalQ2K(prompt, sh.hkv, sh.topK, sh.page, l.rng.Uint64())
	if err != nil {
		return false, fmt.Errorf("prefill: %w", err)
	}
	rowPtr, qIdx, err := op.K2QCSRFunc(i32(q2k, sh.hkv, prompt, sh.topK), cu, cu, sh.page)
	if err != nil {
		return false, fmt.Errorf("prefill: K2QCSRFunc: %w", err)
	}
	out := tensor.New(tensor.WithShape(prompt, sh.hq, sh.d), tensor.WithBacking(l.out[:prompt*sh.hq*sh.d]))
	lse := tensor.New(tensor.WithShape(prompt, sh.hq), tensor.WithBacking(l.lse[:prompt*sh.hq]))
	for layer := 0; layer < sh.layers; layer++ {
		if err := l.appendKV(layer, prompt, ptT, cu, su); err != nil {
			return false, fmt.Errorf("prefill: %w", err)
		}
		_, err := op.SparseAttentionFunc(l.rows(prompt, sh.hq), l.kc[layer], l.vc[layer], rowPtr, qIdx, sh.topK, op.SparseArgs{
			CuSeqlensQ: cu, CuSeqlensK: cu, PageTable: ptT, SeqUsedK: su, BlkKV: sh.page, Causal: true,
			Workers: l.workers, Out: out, OutLSE: lse})
		if err != nil {
			return false, fmt.Errorf("prefill: SparseAttentionFunc (layer %d): %w", layer, err)
		}
	}
	return true, nil
}

// appendKV writes n new K and V rows into layer's caches.
func (l *soakLoop) appendKV(layer, n int, pt, cu, su *tensor.Dense) error {
	for _, c := range []*tensor.Dense{l.kc[layer], l.vc[layer]} {
		if err := op.WritePagedKVFunc(c, l.rows(n, l.sh.hkv), pt, cu, su, op.HND); err != nil {
			return fmt.Errorf("WritePagedKVFunc (layer %d): %w", layer, err)
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
