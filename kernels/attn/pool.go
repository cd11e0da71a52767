package attn

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// MaxWorkers caps the goroutines of a Pool (and so the per-worker scratch of
// a Workspace): NewPool(n) with n > MaxWorkers makes a pool of MaxWorkers.
// Worker counts are a performance knob only (results are bit-identical for
// any count), so the cap never changes a result.
const MaxWorkers = 256

// BackToBackSpin is a spin time (Pool.SetSpin, SetProcessSpin) for
// programs that call back to back: after a call the goroutines keep
// polling for the next one this long before they block. 5 ms covers the
// gap between back-to-back eager calls (one decode step per layer); a
// polling goroutine yields its thread to any other runnable goroutine
// (runtime.Gosched) on every turn.
//
// Pools do not spin by default (the process spin starts at 0). Waking a
// blocked goroutine costs a few microseconds on bare metal and 10-160 us
// on small virtual machines, where an idle vCPU halts until the host
// schedules it again and the guest may queue the woken thread on the
// busy caller's vCPU: up to 5-8% of a 2 ms decode step. Polling costs the
// rest of the process instead: after a pause longer than the spin, the
// caller, woken at the end of a short call, can queue behind a polling
// thread (a 1 ms two-worker call then takes up to about 3x as long on two
// vCPUs), and a Gorgonia machine's time between nodes grows.
// `go test ./kernels/attn -run '^$' -bench PoolWake` measures both costs,
// `go run ./bench -cases graph -spin 5ms` against `-spin 0` the graph's.
const BackToBackSpin = 5 * time.Millisecond

// processSpin is the spin time of every pool without its own (SetSpin):
// 0 (block at once) until SetProcessSpin.
var processSpin atomic.Int64

// SetProcessSpin sets the spin time of every pool that has none of its own
// (Pool.SetSpin), those already made included, from each goroutine's next
// wait: 0 makes idle goroutines block at once (no CPU time between calls, a
// wake-up cost on each); negative values count as 0.
func SetProcessSpin(d time.Duration) { processSpin.Store(int64(max(d, 0))) }

// Pool runs one function on a set of goroutines. The calling goroutine is
// worker 0; the others are started on first use (never more than a Run
// asks for) and live until Close. Run does not allocate once its goroutines
// exist, so a pool reused across calls keeps the steady state
// allocation-free.
//
// Between calls a goroutine polls for the next one for the pool's spin time
// (SetSpin; by default the process's, 0 unless SetProcessSpin),
// yielding to other goroutines as it does, then blocks until a call wakes
// it.
//
// Goroutines block on channels, so that a parked one holds no Go
// processor. A futex park on a locked thread, with the caller steering the
// thread off its own CPU before the wake, would start worker 1 sooner, but
// a thread blocked in a raw futex call keeps its Go processor, and the
// process's other goroutines then start late: BenchmarkPoolAfter measures
// that toll (the second of two goroutines started after a call waits for
// the first when a parked worker holds a processor).
type Pool struct {
	n  int
	mu sync.Mutex
	ws []*poolWorker // started goroutines 1..len(ws)
	wg sync.WaitGroup
	fn func(worker int)
	// call is the last call published: its number (calls so far) above
	// callShift, its worker count below, read and written as one word so
	// that a goroutine never pairs one call's number with another's count.
	call atomic.Uint64
	spin atomic.Int64 // polling time in nanoseconds; < 0: processSpin
}

// callShift splits Pool.call: worker counts (<= MaxWorkers) fit below it.
const callShift = 16

// poolWorker is one started goroutine's wake-up state. parked is 0 while
// it polls or runs, and parkedOn(seen) while it is blocked (or about to
// block) on wake waiting for a call after seen; quit tells it to return
// (Close).
type poolWorker struct {
	parked atomic.Uint64
	quit   atomic.Bool
	wake   chan struct{} // capacity 1: a caller never blocks on it
}

// parkedOn is poolWorker.parked for a goroutine waiting for a call after
// seen (call words never have the top bit set).
func parkedOn(seen uint64) uint64 { return seen | 1<<63 }

// NewPool returns a pool of min(max(n, 1), MaxWorkers) workers. It starts
// no goroutine: RunN starts them as the work needs them.
func NewPool(n int) *Pool {
	p := &Pool{n: min(max(n, 1), MaxWorkers)}
	p.spin.Store(-1)
	return p
}

// Workers returns the number of workers.
func (p *Pool) Workers() int { return p.n }

// SetSpin sets how long the pool's goroutines poll for the next call before
// blocking (by default the process's spin time, SetProcessSpin; 0: block at
// once, as plain channel workers do; negative values count as 0). It takes
// effect from each goroutine's next wait and may be called at any time,
// also during a run.
func (p *Pool) SetSpin(d time.Duration) { p.spin.Store(int64(max(d, 0))) }

// Started returns the number of goroutines started so far, the calling
// goroutine included (at most Workers()).
func (p *Pool) Started() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ws) + 1
}

// loop is goroutine w's life: wait for a call newer than seen, run its part
// when it takes part (w below the call's worker count), repeat until Close.
func (p *Pool) loop(w int, me *poolWorker, seen uint64) {
	for {
		c := p.await(me, seen)
		if me.quit.Load() {
			return
		}
		seen = c
		if w < int(c&(1<<callShift-1)) {
			p.fn(w)
			p.wg.Done()
		}
	}
}

// await returns the first call after seen: polling for the spin time, then
// parked on me.wake. The park handshake: the worker sets parked (naming the
// call it has seen) before its last look at call; a caller publishes its
// call before it looks at parked, and wakes a worker parked on an older
// call, sending a token only when it is the one that cleared parked. Either
// the worker sees the new call (and clears parked itself when the caller
// has not), or the caller sees it parked and wakes it. A worker that has
// already run the call and parked again, on it, is left alone: its next
// wake-up is the next call's. A token the worker did not need is consumed
// here, so none is left for a later wait.
func (p *Pool) await(me *poolWorker, seen uint64) uint64 {
	d := time.Duration(p.spin.Load())
	if d < 0 {
		d = time.Duration(processSpin.Load())
	}
	if d > 0 {
		// The clock is read on every turn: a turn can last a whole
		// scheduler slice (10 ms) when Gosched hands the thread to a
		// goroutine that does not yield, and a spinner that then came
		// back 64 times would preempt that goroutine for 640 ms.
		for deadline := time.Now().Add(d); ; {
			if c := p.call.Load(); c != seen {
				return c
			}
			if time.Now().After(deadline) {
				break
			}
			runtime.Gosched()
		}
	}
	me.parked.Store(parkedOn(seen))
	if c := p.call.Load(); c != seen {
		if !me.parked.CompareAndSwap(parkedOn(seen), 0) {
			<-me.wake // the caller cleared parked and sent a token
		}
		return c
	}
	<-me.wake
	return p.call.Load()
}

// publish makes the next call the last one (k workers) and wakes the
// goroutines among ws parked on an older call.
func (p *Pool) publish(k int, ws []*poolWorker) {
	c := (p.call.Load()>>callShift+1)<<callShift | uint64(k)
	p.call.Store(c)
	for _, me := range ws {
		for {
			v := me.parked.Load()
			if v == 0 || v == parkedOn(c) {
				break
			}
			if me.parked.CompareAndSwap(v, 0) {
				me.wake <- struct{}{}
				break
			}
		}
	}
}

// Run calls fn(w) once on every worker w in [0, Workers()) and returns when
// all calls have returned. Calls to Run and RunN are serialised.
func (p *Pool) Run(fn func(worker int)) { p.RunN(p.n, fn) }

// RunN is Run on the first min(max(k, 1), Workers()) workers only: callers
// pass their number of work items, so that a call never runs (nor starts)
// more goroutines than it has items.
func (p *Pool) RunN(k int, fn func(worker int)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k = min(max(k, 1), p.n)
	for len(p.ws) < k-1 {
		me := &poolWorker{wake: make(chan struct{}, 1)}
		p.ws = append(p.ws, me)
		go p.loop(len(p.ws), me, p.call.Load())
	}
	p.fn = fn
	p.wg.Add(k - 1)
	p.publish(k, p.ws[:k-1]) // publishes fn, after it
	fn(0)
	p.wg.Wait()
	p.fn = nil
}

// Close stops the pool's goroutines (a later run starts new ones).
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, me := range p.ws {
		me.quit.Store(true)
	}
	p.publish(0, p.ws)
	p.ws = nil
}
