package comm

import (
	"fmt"
	"sync"
	"time"
)

// localWorld is the shared state of a group of goroutine ranks. Each
// ordered pair of ranks has a data channel and an acknowledgement channel
// of capacity 1: a collective sends its buffers (slice headers, no copy)
// to every peer, copies what the peers send in rank order, acknowledges
// each, and returns once every peer has acknowledged its own buffers, so a
// buffer is never read after its collective returns and at most one
// message per pair and direction is in flight. Nothing is allocated per
// call.
type localWorld struct {
	n       int
	timeout time.Duration
	data    [][]chan []byte   // data[from][to]
	ack     [][]chan struct{} // ack[from][to]: to has copied from's buffer
	done    chan struct{}     // closed by Abort
	once    sync.Once
	err     error // the abort cause, set before done is closed
}

// local is one rank of a localWorld.
type local struct {
	w      *localWorld
	rank   int
	timer  *time.Timer
	failed error
}

// NewLocal returns the n ranks of an in-process group, to be used by n
// goroutines (one Comm each). A collective waits at most timeout for the
// other ranks (0: DefaultTimeout) and then returns an error wrapping
// ErrTimeout on the ranks that wait; Abort on any rank makes every rank's
// pending and later calls fail at once.
func NewLocal(n int, timeout time.Duration) ([]Comm, error) {
	if n < 1 {
		return nil, fmt.Errorf("comm.NewLocal: n: expected at least 1 rank, got %d", n)
	}
	if timeout < 0 {
		return nil, fmt.Errorf("comm.NewLocal: timeout: expected >= 0 (0: %v), got %v", DefaultTimeout, timeout)
	}
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	w := &localWorld{n: n, timeout: timeout, done: make(chan struct{})}
	w.data, w.ack = make([][]chan []byte, n), make([][]chan struct{}, n)
	for i := range w.data {
		w.data[i], w.ack[i] = make([]chan []byte, n), make([]chan struct{}, n)
		for j := range w.data[i] {
			if i != j {
				w.data[i][j], w.ack[i][j] = make(chan []byte, 1), make(chan struct{}, 1)
			}
		}
	}
	cs := make([]Comm, n)
	for r := range cs {
		t := time.NewTimer(time.Hour)
		t.Stop()
		cs[r] = &local{w: w, rank: r, timer: t}
	}
	return cs, nil
}

func (c *local) Rank() int { return c.rank }
func (c *local) Size() int { return c.w.n }

func (c *local) AllGather(send, recv []byte) error {
	const op = "AllGather"
	if err := c.usable(op); err != nil {
		return err
	}
	if err := checkAllGather(send, recv, c.w.n); err != nil {
		return c.fail(op, err)
	}
	k := len(send)
	return c.exchange(op, func(int) []byte { return send }, func(j int) []byte { return recv[j*k : (j+1)*k] })
}

func (c *local) AllToAllV(send, recv [][]byte) error {
	const op = "AllToAllV"
	if err := c.usable(op); err != nil {
		return err
	}
	if err := checkAllToAllV(send, recv, c.w.n, c.rank); err != nil {
		return c.fail(op, err)
	}
	return c.exchange(op, func(j int) []byte { return send[j] }, func(j int) []byte { return recv[j] })
}

// usable returns the error of a closed or failed rank.
func (c *local) usable(op string) error {
	if c.failed != nil {
		return &Error{op, c.rank, c.failed}
	}
	select {
	case <-c.w.done:
		return c.aborted(op)
	default:
	}
	return nil
}

// exchange sends to(j) to every peer j and copies peer j's buffer into
// from(j); the own buffer is copied locally.
func (c *local) exchange(op string, to, from func(j int) []byte) error {
	w, r := c.w, c.rank
	if dst, src := from(r), to(r); len(dst) == len(src) {
		copy(dst, src)
	} else {
		return c.fail(op, argError(fmt.Sprintf("recv[%d]", r), fmt.Sprintf("%d bytes", len(src)), len(dst)))
	}
	if w.n == 1 {
		return nil
	}
	c.timer.Reset(w.timeout)
	defer c.timer.Stop()
	for j := 0; j < w.n; j++ {
		if j != r {
			select { // never blocks while the peers follow the protocol
			case w.data[r][j] <- to(j):
			case <-w.done:
				return c.aborted(op)
			case <-c.timer.C:
				return c.fail(op, ErrTimeout)
			}
		}
	}
	for j := 0; j < w.n; j++ {
		if j == r {
			continue
		}
		var b []byte
		select {
		case b = <-w.data[j][r]:
		case <-w.done:
			return c.aborted(op)
		case <-c.timer.C:
			return c.fail(op, fmt.Errorf("%w (rank %d)", ErrTimeout, j))
		}
		dst := from(j)
		if len(b) != len(dst) {
			return c.fail(op, fmt.Errorf("rank %d sent %d bytes, this rank expected %d", j, len(b), len(dst)))
		}
		copy(dst, b)
		w.ack[j][r] <- struct{}{} // capacity 1, one per collective
	}
	for j := 0; j < w.n; j++ {
		if j == r {
			continue
		}
		select {
		case <-w.ack[r][j]:
		case <-w.done:
			return c.aborted(op)
		case <-c.timer.C:
			return c.fail(op, fmt.Errorf("%w (rank %d)", ErrTimeout, j))
		}
	}
	return nil
}

// fail marks the rank unusable with err and aborts the group, so that the
// other ranks return at once instead of waiting for a collective this rank
// left (a partial world computes nothing).
func (c *local) fail(op string, err error) error {
	e := &Error{op, c.rank, err}
	c.failed = err
	c.w.abort(e)
	return e
}

// aborted is the error of a rank that finds the group aborted.
func (c *local) aborted(op string) error {
	c.failed = fmt.Errorf("%w: %v", ErrAborted, c.w.err)
	return &Error{op, c.rank, c.failed}
}

func (w *localWorld) abort(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.done)
	})
}

func (c *local) Abort(err error) {
	if err == nil {
		err = fmt.Errorf("rank %d aborted", c.rank)
	}
	c.w.abort(err)
}

func (c *local) Close() error {
	c.failed = ErrClosed
	return nil
}

// Each runs f on every rank of an in-process group (NewLocal's ranks), one
// goroutine per rank, waits for all of them and returns each rank's error,
// indexed like ranks.
func Each(ranks []Comm, f func(c Comm) error) []error {
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, c := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(c)
		}()
	}
	wg.Wait()
	return errs
}
