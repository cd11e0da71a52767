package attn

import "sync"

// Pool runs one function on a fixed set of goroutines. The calling goroutine
// is worker 0; NewPool(n) starts n-1 more that live until Close. Run does not
// allocate, so a pool reused across calls keeps the steady state
// allocation-free.
type Pool struct {
	n    int
	mu   sync.Mutex
	wake []chan struct{}
	wg   sync.WaitGroup
	fn   func(worker int)
}

// NewPool returns a pool of n >= 1 workers.
func NewPool(n int) *Pool {
	if n < 1 {
		n = 1
	}
	p := &Pool{n: n, wake: make([]chan struct{}, n-1)}
	for i := range p.wake {
		ch := make(chan struct{})
		p.wake[i] = ch
		go p.loop(i+1, ch)
	}
	return p
}

// Workers returns the number of workers.
func (p *Pool) Workers() int { return p.n }

func (p *Pool) loop(w int, ch chan struct{}) {
	for range ch {
		p.fn(w)
		p.wg.Done()
	}
}

// Run calls fn(w) once on every worker w in [0, Workers()) and returns when
// all calls have returned. Calls to Run are serialised.
func (p *Pool) Run(fn func(worker int)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fn = fn
	p.wg.Add(len(p.wake))
	for _, ch := range p.wake {
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
