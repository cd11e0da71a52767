package attn

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPoolCalls checks the spin-then-park handshake: over many calls with
// random worker counts, spin times (0: park at once; short ones that
// expire between calls; long ones) and pauses, every call runs fn exactly
// once on each of its first k workers and on no other, and returns only
// after all of them.
func TestPoolCalls(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := NewPool(5)
	defer p.Close()
	spins := []time.Duration{0, time.Microsecond, 50 * time.Microsecond, BackToBackSpin}
	for call := 0; call < 3000; call++ {
		if call%100 == 0 {
			p.SetSpin(spins[rng.IntN(len(spins))])
		}
		k := 1 + rng.IntN(6) // 6 > Workers: capped at 5
		var hits [8]atomic.Int32
		var running atomic.Int32
		p.RunN(k, func(w int) {
			running.Add(1)
			hits[w].Add(1)
			if w%2 == 1 {
				runtime.Gosched()
			}
			running.Add(-1)
		})
		if n := running.Load(); n != 0 {
			t.Fatalf("call %d: RunN returned with %d workers still running", call, n)
		}
		for w := range hits {
			want := int32(0)
			if w < min(k, 5) {
				want = 1
			}
			if got := hits[w].Load(); got != want {
				t.Fatalf("call %d (k = %d): worker %d ran %d times, want %d", call, k, w, got, want)
			}
		}
		switch rng.IntN(8) {
		case 0:
			time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
		case 1:
			runtime.Gosched()
		}
	}
}

// TestPoolClose checks that Close stops every goroutine, whether polling
// or parked, and that a closed pool starts new ones when used again.
func TestPoolClose(t *testing.T) {
	base := runtime.NumGoroutine()
	for _, spin := range []time.Duration{0, time.Hour} {
		p := NewPool(4)
		p.SetSpin(spin)
		var n atomic.Int32
		p.Run(func(int) { n.Add(1) })
		if p.Started() != 4 {
			t.Fatalf("spin %v: %d started, want 4", spin, p.Started())
		}
		p.Close()
		waitGoroutines(t, base)
		p.Run(func(int) { n.Add(1) })
		if n.Load() != 8 || p.Started() != 4 {
			t.Fatalf("spin %v: after Close: %d calls, %d started; want 8, 4", spin, n.Load(), p.Started())
		}
		p.Close()
		p.Close() // a second Close is harmless
		waitGoroutines(t, base)
	}
}

// waitGoroutines fails unless the goroutine count drops to base within a
// second (stopped goroutines take a moment to exit).
func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	for end := time.Now().Add(time.Second); runtime.NumGoroutine() > base; {
		if time.Now().After(end) {
			t.Fatalf("%d goroutines left running, want %d", runtime.NumGoroutine(), base)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPoolSpinParks checks that polling goroutines park once their spin
// time is over: with a short spin, the pool's own (SetSpin) or the
// process's (SetProcessSpin, which reaches pools already made), a pool idle
// for a while holds no CPU (its goroutines' wake-up state says parked).
func TestPoolSpinParks(t *testing.T) {
	for _, own := range []bool{true, false} {
		p := NewPool(3)
		p.Run(func(int) {}) // starts the goroutines with the default spin
		if own {
			p.SetSpin(100 * time.Microsecond)
		} else {
			SetProcessSpin(100 * time.Microsecond)
		}
		p.Run(func(int) {})
		for end := time.Now().Add(time.Second); ; time.Sleep(time.Millisecond) {
			parked := 0
			p.mu.Lock()
			for _, me := range p.ws {
				if me.parked.Load() != 0 {
					parked++
				}
			}
			p.mu.Unlock()
			if parked == 2 {
				break
			}
			if time.Now().After(end) {
				t.Fatalf("own spin %v: %d of 2 goroutines parked a second after a 100 us spin", own, parked)
			}
		}
		var n atomic.Int32
		p.Run(func(int) { n.Add(1) })
		if n.Load() != 3 {
			t.Fatalf("own spin %v: parked pool ran %d workers, want 3", own, n.Load())
		}
		SetProcessSpin(0) // the default
		p.Close()
	}
}

// TestSharedPools checks AcquirePool and ReleasePool: a released pool is
// handed out again for the same worker count (and only for it), concurrent
// callers get distinct pools, and at most maxIdlePools stay idle, the
// others closed.
func TestSharedPools(t *testing.T) {
	a := AcquirePool(3)
	a.Run(func(int) {})
	ReleasePool(a)
	if b := AcquirePool(2); b == a {
		t.Fatal("AcquirePool(2) returned the released 3-worker pool")
	} else {
		ReleasePool(b)
	}
	if b := AcquirePool(3); b != a {
		t.Fatal("AcquirePool(3) did not reuse the released 3-worker pool")
	} else {
		ReleasePool(b)
		ReleasePool(b) // a second release keeps it once
		ReleasePool(nil)
	}
	if b, c := AcquirePool(3), AcquirePool(3); b == c {
		t.Fatal("a pool released twice was handed to two callers")
	} else {
		ReleasePool(b)
		ReleasePool(c)
	}
	var wg sync.WaitGroup
	got := make([]*Pool, 2*maxIdlePools)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = AcquirePool(2)
			got[i].Run(func(int) {})
		}()
	}
	wg.Wait()
	seen := map[*Pool]bool{}
	for _, p := range got {
		if seen[p] {
			t.Fatal("two concurrent callers got the same pool")
		}
		seen[p] = true
		ReleasePool(p)
	}
	idlePools.mu.Lock()
	n := len(idlePools.p)
	idlePools.mu.Unlock()
	if n != maxIdlePools {
		t.Fatalf("%d idle pools kept, want %d", n, maxIdlePools)
	}
	for _, p := range got[:len(got)-maxIdlePools] {
		p.mu.Lock()
		open := len(p.ws)
		p.mu.Unlock()
		if open != 0 {
			t.Fatalf("an evicted pool still has %d goroutines", open)
		}
	}
}

// TestCloseIdlePools checks that CloseIdlePools stops the goroutines of the
// kept pools and that AcquirePool works afterwards.
func TestCloseIdlePools(t *testing.T) {
	CloseIdlePools()
	base := runtime.NumGoroutine()
	a, b := AcquirePool(3), AcquirePool(2)
	a.Run(func(int) {})
	b.Run(func(int) {})
	ReleasePool(a)
	ReleasePool(b)
	CloseIdlePools()
	waitGoroutines(t, base)
	c := AcquirePool(3)
	var n atomic.Int32
	c.Run(func(int) { n.Add(1) })
	ReleasePool(c)
	if n.Load() != 3 {
		t.Fatalf("pool after CloseIdlePools ran %d workers, want 3", n.Load())
	}
	CloseIdlePools()
	waitGoroutines(t, base)
}

// BenchmarkPoolWake times one two-worker call after a pause (gap) during
// which the workers park (spin=0) or poll (spin=5ms; a 20 ms gap outlasts
// the spin, so they park there too). With work=0 the call is empty and the
// caller waits for worker 1 at once; with work=1ms each worker computes
// for 1 ms, as a short decode call does, so the caller's thread stays busy
// while worker 1 is woken. late-us is the median delay from the call until
// worker 1 runs, wall-us the median time of the call. On a guest whose
// kernel places the woken thread on the busy caller's vCPU until it
// migrates, late-us with work=1ms and spin=0 is tens of microseconds and
// more (docs/performance.md, "Paged decode"); polling after a gap longer
// than the spin shows the opposite cost, the caller woken at the end
// queued behind worker 1's polling thread.
func BenchmarkPoolWake(b *testing.B) {
	for _, work := range []time.Duration{0, time.Millisecond} {
		for _, gap := range []time.Duration{time.Millisecond, 20 * time.Millisecond} {
			for _, spin := range []time.Duration{0, BackToBackSpin} {
				name := "work=" + work.String() + "/gap=" + gap.String() + "/spin=" + spin.String()
				b.Run(name, func(b *testing.B) { benchPoolWake(b, work, gap, spin) })
			}
		}
	}
}

func benchPoolWake(b *testing.B, work, gap, spin time.Duration) {
	p := NewPool(2)
	defer p.Close()
	p.SetSpin(spin)
	p.Run(func(int) {})
	late := make([]time.Duration, 0, b.N)
	wall := make([]time.Duration, 0, b.N)
	var start time.Time
	var w1 time.Duration
	for b.Loop() {
		b.StopTimer()
		time.Sleep(gap)
		b.StartTimer()
		start = time.Now()
		p.RunN(2, func(w int) {
			if w == 1 {
				w1 = time.Since(start)
			}
			busyFor(work)
		})
		wall = append(wall, time.Since(start))
		late = append(late, w1)
	}
	b.ReportMetric(quantileUS(late, 0.5), "late-us")
	b.ReportMetric(quantileUS(wall, 0.5), "wall-us")
}

// busyFor keeps the calling goroutine computing (no blocking, no yield)
// for d, as a worker's share of a call does.
func busyFor(d time.Duration) {
	for t0 := time.Now(); time.Since(t0) < d; {
	}
}

// quantileUS sorts ds and returns its q-quantile (0 <= q < 1, the element
// at index len*q) in microseconds.
func quantileUS(ds []time.Duration, q float64) float64 {
	slices.Sort(ds)
	return float64(ds[int(float64(len(ds))*q)]) / 1e3
}

// BenchmarkPoolAfter times what a pool call leaves behind for the rest of
// the process: after a two-worker call of 1 ms a worker, it starts two new
// goroutines of 1 ms of work each (as a graph's next node or the bench's
// reference windows do) and reports how late the second one started
// (late2-us, the median; late2p90-us, the 90th percentile). A pool whose
// parked goroutines hold a Go processor (a raw futex park) shows here as
// the second goroutine waiting for the first, about a millisecond; the
// channel pool's parked goroutines hold none.
func BenchmarkPoolAfter(b *testing.B) {
	p := NewPool(2)
	defer p.Close()
	p.Run(func(int) {})
	late := make([]time.Duration, 0, b.N)
	for b.Loop() {
		p.RunN(2, func(int) { busyFor(time.Millisecond) })
		start := time.Now()
		var wg sync.WaitGroup
		var l [2]time.Duration
		for i := range l {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l[i] = time.Since(start)
				busyFor(time.Millisecond)
			}()
		}
		wg.Wait()
		late = append(late, max(l[0], l[1]))
	}
	b.ReportMetric(quantileUS(late, 0.5), "late2-us")
	b.ReportMetric(quantileUS(late, 0.9), "late2p90-us")
}
