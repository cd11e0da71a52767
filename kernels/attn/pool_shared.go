package attn

import "sync"

// maxIdlePools bounds the pools ReleasePool keeps: at most this many idle
// pools (each at most MaxWorkers-1 parked goroutines) wait for reuse; a
// release beyond it closes the longest-idle one.
const maxIdlePools = 4

// idlePools are the released pools, the longest-idle first.
var idlePools struct {
	mu sync.Mutex
	p  []*Pool
}

// AcquirePool returns a pool of NewPool(n)'s worker count for one call that
// owns none (an eager function, a graph node): an idle one ReleasePool kept,
// whose goroutines are started (and, within their spin time, still
// polling), or else a new one. Its spin time is the process's
// (SetProcessSpin). Give it back with ReleasePool when the call
// is done. Concurrent callers get distinct pools, so they never wait for
// each other.
func AcquirePool(n int) *Pool {
	n = min(max(n, 1), MaxWorkers)
	idlePools.mu.Lock()
	defer idlePools.mu.Unlock()
	s := idlePools.p
	for i := len(s) - 1; i >= 0; i-- {
		if p := s[i]; p.n == n {
			idlePools.p = append(s[:i], s[i+1:]...)
			p.spin.Store(-1)
			return p
		}
	}
	return NewPool(n)
}

// ReleasePool gives back a pool AcquirePool returned; the caller must not
// use it afterwards. Releasing a pool twice keeps it once (so two later
// callers never share it), and nil is ignored.
func ReleasePool(p *Pool) {
	if p == nil {
		return
	}
	idlePools.mu.Lock()
	defer idlePools.mu.Unlock()
	for _, q := range idlePools.p {
		if q == p {
			return
		}
	}
	if len(idlePools.p) == maxIdlePools {
		idlePools.p[0].Close()
		idlePools.p = append(idlePools.p[:0], idlePools.p[1:]...)
	}
	idlePools.p = append(idlePools.p, p)
}

// CloseIdlePools closes the pools ReleasePool keeps (their goroutines
// return); pools in use are not affected.
func CloseIdlePools() {
	idlePools.mu.Lock()
	defer idlePools.mu.Unlock()
	for _, p := range idlePools.p {
		p.Close()
	}
	idlePools.p = nil
}
