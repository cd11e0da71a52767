package attn

import (
	"sync"
	"sync/atomic"
	"time"
)

// The KV-major path with the combine fused into the work items (runFused).
//
// The separate form (runKVMajor's window loop) computes every work item of
// a large query window, then, after a barrier, combines the window: the
// partials of a window (up to MaxPartialBytes) are written to memory and
// read back by a second pass. The fused form cuts the queries into small
// windows whose partials stay in the workers' L2 caches (fusedWindow) and
// lists the work items of every window, in window order, as one run of
// tasks: the worker that finishes a window's last task combines that
// window at once, while its partials are still cached, and the other
// workers go on with the next window's tasks. The windows' partials live
// in a ring of fusedRing buffers; a task of window k waits until window
// k-fusedRing, the previous user of its buffer, is combined. Each K/V
// block is decoded and packed once per call into a block cache
// (kvblocks.go), which the tasks of every window read.
//
// A partial row and a combined row are computed exactly as in the
// separate form: each partial row by its own (query, block) work (Acc rows
// are independent of the tile they share), each output row by combineRow
// over the row's slots in increasing slot order. Which worker runs what,
// and when, changes no bit.
//
// The fused form is not the default (defaultCombine): on AMD Zen 4 it
// takes more process CPU time than the separate form in most cases, at
// 8K tokens 0.96-1.28x (less in 4 of 16 cases, by 0.5-4%, within the
// spread of the shared host) and at 32K 1.08-1.73x (random and local
// selection, BF16 and NVFP4 K/V, 1 and 2 workers, the avx512 and
// avx512bf16 tiers; BenchmarkKVCombine, figures in
// docs/results/kvcombine/amd-zen4.csv). Its partial stores and combine do
// get cheaper (in a CPU profile the BF16 partial stores fall from 13% to
// 3% of the call at 8K, local selection), but with 16 partial rows of
// 256 bytes per (query, block) an L2 of 1 MiB holds the partials of a few
// queries only, so a window gives each block the queries of one to three
// tokens: tiles of 16-48 rows instead of 128, whose smaller kernel
// shapes and per-tile set-up cost more than the partial traffic saved,
// and every such tile reads its block from the block cache, which at 32K
// tokens (68 MiB) is beyond the L3. Windows sized to the L3 instead (129
// and 384 queries, partials not in L2) came within 2-4% of the separate
// form at 8K without passing it.

// combineMode selects the KV-major path's combine.
type combineMode uint8

const (
	combineDefault  combineMode = iota // defaultCombine
	combineFused                       // runFused: small windows, combine in the work
	combineSeparate                    // large windows, combine after each window's items
)

// defaultCombine is the form the KV-major path runs unless a test or a
// benchmark sets Workspace.combine: the separate one, which measured
// faster (see above).
const defaultCombine = combineSeparate

// fusedRing is the number of query windows whose partials a fused call
// holds at once: the window being combined and the one the other workers
// compute meanwhile.
const fusedRing = 2

// fallbackL2Bytes is the L2 size assumed where the CPU does not report one
// (cpuL2Bytes): 1 MiB, the per-core L2 of AMD Zen 4 and, within a
// quarter, of Intel's server cores since Ice Lake (1.25 MiB; 2 MiB on
// Sapphire Rapids and later), so that windows are not sized beyond the
// cache on the CPUs this package targets.
const fallbackL2Bytes = 1 << 20

// l2Bytes is the L2 cache size of one core: CPUID's where it reports one,
// else fallbackL2Bytes.
var l2Bytes = sync.OnceValue(func() int {
	if n := cpuL2Bytes(); n > 0 {
		return n
	}
	return fallbackL2Bytes
})

// fusedWindow returns the query window of a fused call with slots partial
// slots per (query, head) on workers workers: the ring's fusedRing windows
// of partial rows and their LSEs take half of the workers' L2 caches
// together (the other half holds each worker's K/V block, its decoded
// float32 copy and the query rows), at least one query and at most the
// call.
func fusedWindow(p *Prefill, slots, workers int) int {
	perQuery := max(slots*p.HQ*(p.D*p.Partial.Size()+4), 1)
	w := l2Bytes() * max(workers, 1) / 2 / fusedRing / perQuery
	return max(min(w, p.TotalQ), 1)
}

// fusedMutation, when non-zero (mutation tests only), breaks the fused
// combine on purpose: mutSkipCombine leaves window 1 uncombined,
// mutEarlyCombine merges a window when one of its tasks is still left.
var fusedMutation int

// The mutations of fusedMutation.
const (
	mutSkipCombine = iota + 1
	mutEarlyCombine
)

// mergeAt returns the number of window k's tasks left when it is
// combined: 0 (its last task done), unless fusedMutation says otherwise.
func (ws *Workspace) mergeAt(k int) int32 {
	switch {
	case fusedMutation == mutSkipCombine && k == 1:
		return -1 // never
	case fusedMutation == mutEarlyCombine:
		return min(1, ws.winStart[k+1]-ws.winStart[k]-1)
	}
	return 0
}

// winCombined marks a window whose combine is done in Workspace.winLeft.
const winCombined = -1

// runFused is the fused form of the KV-major path (see above) with query
// windows of w queries and slots partial slots.
func (ws *Workspace) runFused(p *Prefill, pool *Pool, slots, w int) {
	ws.win = w
	ws.ringRows = slots * w * p.HQ
	ws.Partials.Ensure(p.Partial, p.D, fusedRing*ws.ringRows, p.InvT > 0)
	ws.Partials.stream = false // read back from the cache by the combine
	t0 := time.Now()
	if n := ws.fusedTasks(p); n > 0 {
		ws.fillBlockCache(p, pool)
		ws.cacheOn = true
		ws.next.Store(0)
		pool.RunN(n, ws.fusedItems)
		ws.cacheOn = false
	}
	if phaseClock != nil {
		phaseClock(time.Since(t0), 0) // the combine runs inside the items
	}
}

// fusedTasks lists the tasks of every window of ws.win queries in window
// order (within a window, in work-item order), one combine-only task
// (item -1) for a window without work, sets ws.winLeft[k] to the number of
// window k's tasks and returns the number of tasks. It allocates only to
// grow its buffers.
func (ws *Workspace) fusedTasks(p *Prefill) int {
	nw := (p.TotalQ + ws.win - 1) / ws.win
	ws.winStart = grow(ws.winStart, nw+1)
	start := ws.winStart
	clear(start)
	ws.scanFused(p, nil) // counts, at start[k+1]
	for k := range nw {
		start[k+1] = start[k] + max(start[k+1], 1)
	}
	ws.tasks = grow(ws.tasks, int(start[nw]))
	// Each window's next free task, at fill[k]; the tasks of a window
	// follow in the order scanFused meets them.
	ws.winFill = grow(ws.winFill, nw)
	fill := ws.winFill
	copy(fill, start[:nw])
	ws.scanFused(p, fill)
	if cap(ws.winLeft) < nw {
		ws.winLeft = make([]atomic.Int32, nw)
	}
	ws.winLeft = ws.winLeft[:nw]
	for k := range nw {
		if fill[k] == start[k] {
			ws.tasks[start[k]] = prefillTask{item: -1, win: int32(k)}
		}
		ws.winLeft[k].Store(start[k+1] - start[k])
	}
	return int(start[nw])
}

// scanFused walks every work item's queries, cut at window ends, skipping
// the parts with no row of the KV-major part (kvRow). With fill nil it
// counts each window's parts at ws.winStart[k+1]; otherwise it stores each
// part as a task at ws.tasks[fill[k]] and advances fill[k].
func (ws *Workspace) scanFused(p *Prefill, fill []int32) {
	c := p.CSR
	w := ws.win
	for i := 0; i < int(p.Sched.WorkCount); i++ {
		m := p.Sched.Metadata[i*6 : i*6+6]
		h, row, qBegin, qCount, b := int(m[0]), int(m[1]), int(m[2]), int(m[3]), int(m[4])
		base := h*c.Stride + int(c.RowPtr[h*(c.TotalRows+1)+row]) + qBegin
		qs := c.QIdx[base : base+qCount] // batch-local, strictly ascending
		off := int(p.CuQ[b])
		for e := 0; e < qCount; {
			k := (off + int(qs[e])) / w
			end := (k+1)*w - off // batch-local end of window k
			e1, keep := e, !ws.mixed
			for ; e1 < qCount && int(qs[e1]) < end; e1++ {
				keep = keep || ws.kvRow(h, b, int(qs[e1]))
			}
			if keep {
				if fill == nil {
					ws.winStart[k+1]++
				} else {
					ws.tasks[fill[k]] = prefillTask{item: int32(i), e0: int32(qBegin + e), e1: int32(qBegin + e1), win: int32(k)}
					fill[k]++
				}
			}
			e = e1
		}
	}
}

// runFusedItems takes the fused call's tasks from the shared counter until
// none is left; the worker that finishes a window's last task combines the
// window.
func (ws *Workspace) runFusedItems(w int) {
	p := ws.pf
	wk := ws.combiner(w).blockKernel()
	n := int64(len(ws.tasks))
	for {
		i := ws.next.Add(1) - 1
		if i >= n {
			return
		}
		t := ws.tasks[i]
		k := int(t.win)
		if k >= fusedRing {
			ws.awaitCombined(k - fusedRing)
		}
		w0, pbase := k*ws.win, (k%fusedRing)*ws.ringRows
		if t.item >= 0 {
			ws.runTask(wk, t, w0, pbase)
		}
		left := ws.winLeft[k].Add(-1)
		if left == ws.mergeAt(k) {
			ws.combineQueries(wk, w0, min(p.TotalQ, w0+ws.win), w0, pbase)
		}
		if left == 0 {
			ws.winLeft[k].Store(winCombined)
			ws.winMu.Lock()
			ws.winCond.Broadcast()
			ws.winMu.Unlock()
		}
	}
}

// awaitCombined returns once window k is combined. The buffer's previous
// window's tasks were all taken before the caller's, by workers that wait
// only on earlier windows, so it comes. The caller blocks rather than
// polls: the wait lasts as long as the combining worker is off its CPU,
// which on a busy host can be a whole scheduler slice.
func (ws *Workspace) awaitCombined(k int) {
	if ws.winLeft[k].Load() == winCombined {
		return
	}
	ws.winMu.Lock()
	for ws.winLeft[k].Load() != winCombined {
		ws.winCond.Wait()
	}
	ws.winMu.Unlock()
}
