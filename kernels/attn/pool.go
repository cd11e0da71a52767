package attn

import "sync"

// MaxWorkers caps the goroutines of a Pool (and so the per-worker scratch of
// a Workspace): NewPool(n) with n > MaxWorkers makes a pool of MaxWorkers.
// Worker counts are a performance knob only (results are bit-identical for
// any count), so the cap never changes a result.
const MaxWorkers = 256

// Pool runs one function on a set of goroutines. The calling goroutine is
// worker 0; the others are started on first use (never more than a Run
// asks for) and live until Close. Run does not allocate once its goroutines
// exist, so a pool reused across calls keeps the steady state
// allocation-free.
type Pool struct {
	n    int
	mu   sync.Mutex
	wake []chan struct{} // started goroutines 1..len(wake)
	wg   sync.WaitGroup
	fn   func(worker int)
}

// NewPool returns a pool of min(max(n, 1), MaxWorkers) workers. It starts
// no goroutine: RunN starts them as the work needs them.
func NewPool(n int) *Pool {
	return &Pool{n: min(max(n, 1), MaxWorkers)}
}

// Workers returns the number of workers.
func (p *Pool) Workers() int { return p.n }

// Started returns the number of goroutines started so far, the calling
// goroutine included (at most Workers()).
func (p *Pool) Started() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.wake) + 1
}

func (p *Pool) loop(w int, ch chan struct{}) {
	for range ch {
		p.fn(w)
		p.wg.Done()
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
	for len(p.wake) < k-1 {
		ch := make(chan struct{})
		p.wake = append(p.wake, ch)
		go p.loop(len(p.wake), ch)
	}
	p.fn = fn
	p.wg.Add(k - 1)
	for _, ch := range p.wake[:k-1] {
		ch <- struct{}{}
	}
	fn(0)
	p.wg.Wait()
	p.fn = nil
}

// Close stops the pool's goroutines. The pool must not be used afterwards.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ch := range p.wake {
		close(ch)
	}
	p.wake = nil
}
