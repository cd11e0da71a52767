package blas

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/sparseattn/msa/kernels/grad"
)

// rowBlock is the rows of C one goroutine computes at a time: 64 rows of
// A at k = 1024 are 256 KiB, which stay in L2 while the column panels of
// B pass over them.
const rowBlock = 64

// The tiles run over the whole reduction (k) per panel of B. Cutting k
// into 256- or 512-row blocks, so that a block of a panel stays in L1 for
// the eight row groups, gave 2-6% fewer GFLOP per CPU-second on the 2K
// projection shapes on Zen 4 (BenchmarkSgemm, GFLOP/CPU-s): reloading C
// per block costs more than the L1 residency saves while the panel
// streams from L2.

// sgemmArgs is one tiled Sgemm call: C[:, :n16] (+)= op(A) alpha*op(B).
type sgemmArgs struct {
	aT, bT      bool
	m, n16, k   int
	alpha, beta float32
	a           []float32
	lda         int
	b           []float32
	ldb         int
	c           []float32
	ldc         int
	packB       bool // B is packed into column panels (packPanel)
}

// job is a tiled Sgemm shared by the calling goroutine and the helpers it
// wakes. Work is claimed with atomic counters, first the panels of B to
// pack, then the blocks of C (rowBlock rows by a chunk of whole panels),
// so a participant that arrives late finds less to do and none waits for
// another that has not started: concurrent Sgemm calls sharing the
// helpers cannot deadlock. Jobs are pooled with their packing buffer.
type job struct {
	sgemmArgs
	bufB                     []float32 // packed B, kept across calls
	bp                       []float32 // B as the tiles read it: bufB or b
	lap                      int       // elements per packed row of A
	panels                   int
	blocks, chunks, colChunk int
	items                    int // blocks * chunks
	nextPanel, donePanels    atomic.Int64
	nextItem                 atomic.Int64
	mu                       sync.Mutex
	ready                    sync.Cond // broadcast when the last panel is packed
	helpers                  sync.WaitGroup
}

var jobs = sync.Pool{New: func() any {
	j := &job{}
	j.ready.L = &j.mu
	return j
}}

// state is one goroutine's tiler and buffer for its rows of A.
type state struct {
	tl *grad.GEMMTiler
	ap []float32
}

// newState makes a state (GEMMAvailable was checked by the caller).
func newState() *state {
	tl, err := grad.NewGEMMTiler()
	if err != nil {
		panic(err)
	}
	return &state{tl: tl}
}

// states holds the idle states of calling goroutines.
var states = sync.Pool{New: func() any { return newState() }}

// helperJobs hands jobs to the helper goroutines: one send per helper a
// job asks for.
var helperJobs = make(chan *job, 64)

var (
	helperMu    sync.Mutex
	helperCount int
)

// startHelpers makes sure n helper goroutines exist. They are parked on
// helperJobs while idle and live as long as the process: their number is
// the most helpers one call has asked for (Workers - 1, GOMAXPROCS - 1 by
// default).
func startHelpers(n int) {
	helperMu.Lock()
	defer helperMu.Unlock()
	for ; helperCount < n; helperCount++ {
		go func() {
			st := newState()
			for j := range helperJobs {
				j.work(st)
				j.helpers.Done()
			}
		}()
	}
}

// run splits the job among workers goroutines (0: GOMAXPROCS), the
// caller one of them, and returns when C is written. Columns are split
// only when there are too few row blocks to keep every goroutine busy
// (decode's few rows).
func (j *job) run(workers int) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	j.lap = j.k + aPad
	j.panels = (j.n16 + panelCols - 1) / panelCols
	j.blocks = (j.m + rowBlock - 1) / rowBlock
	j.chunks = 1
	if j.blocks < 2*workers {
		j.chunks = min(j.panels, (2*workers+j.blocks-1)/j.blocks)
	}
	j.colChunk = (j.panels + j.chunks - 1) / j.chunks * panelCols
	j.chunks = (j.n16 + j.colChunk - 1) / j.colChunk
	j.items = j.blocks * j.chunks
	j.nextPanel.Store(0)
	j.donePanels.Store(0)
	j.nextItem.Store(0)
	j.bp = j.b
	if j.packB {
		if need := j.k * j.n16; cap(j.bufB) < need {
			j.bufB = make([]float32, need)
		}
		j.bp = j.bufB[:j.k*j.n16]
	} else {
		j.donePanels.Store(int64(j.panels))
	}
	helpers := min(workers, j.items) - 1
	if helpers > 0 {
		startHelpers(helpers)
		j.helpers.Add(helpers)
		for range helpers {
			helperJobs <- j
		}
	}
	st := states.Get().(*state)
	j.work(st)
	states.Put(st)
	j.helpers.Wait()
}

// work packs panels of B while any are left, waits until every panel is
// packed (by participants already packing), then computes blocks of C
// while any are left.
func (j *job) work(st *state) {
	if j.packB {
		for {
			p := int(j.nextPanel.Add(1)) - 1
			if p >= j.panels {
				break
			}
			packPanel(j.bp, j.b, j.ldb, j.bT, j.k, j.n16, p, j.alpha)
			if int(j.donePanels.Add(1)) == j.panels {
				j.mu.Lock()
				j.ready.Broadcast()
				j.mu.Unlock()
			}
		}
		j.mu.Lock()
		for int(j.donePanels.Load()) < j.panels {
			j.ready.Wait()
		}
		j.mu.Unlock()
	}
	if need := rowBlock * j.lap; cap(st.ap) < need {
		st.ap = make([]float32, need)
	}
	ap := st.ap[:rowBlock*j.lap]
	for {
		i := int(j.nextItem.Add(1)) - 1
		if i >= j.items {
			return
		}
		rb, cb := i/j.chunks, i%j.chunks
		j.block(st.tl, ap, rb*rowBlock, min(j.m, (rb+1)*rowBlock), cb*j.colChunk, min(j.n16, (cb+1)*j.colChunk))
	}
}

// block computes C[r0:r1, j0:j1] from rows [r0, r1) of op(A), packed
// into ap, and the panels of B in [j0, j1).
func (j *job) block(tl *grad.GEMMTiler, ap []float32, r0, r1, j0, j1 int) {
	packA(ap, j.lap, j.a, j.lda, j.aT, r0, r1, j.k)
	cr := j.c[r0*j.ldc:]
	if j.beta != 0 && j.beta != 1 {
		for r := range r1 - r0 {
			row := cr[r*j.ldc+j0 : r*j.ldc+j1]
			for i := range row {
				row[i] *= j.beta
			}
		}
	}
	for p0 := j0; p0 < j1; p0 += panelCols {
		w := min(panelCols, j1-p0)
		bw, ldw := j.bp[p0:], j.ldb
		if j.packB {
			bw, ldw = j.bp[p0*j.k:], w
		}
		// The arguments were checked by fastSgemm, so Gemm cannot fail.
		if err := tl.Gemm(r1-r0, w, j.k, ap, j.lap, bw, ldw, cr[p0:], j.ldc, j.beta != 0); err != nil {
			panic(err)
		}
	}
}
