package comm

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"
)

// pattern is rank r's deterministic buffer of n bytes for peer j.
func pattern(r, j, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(31*r + 7*j + i)
	}
	return b
}

// checkCollectives runs AllGather and AllToAllV (uneven and empty sizes)
// on one rank and checks what arrived; the in-process tests and the MPI
// run (mpi_test.go) share it.
func checkCollectives(c Comm) error {
	n, r := c.Size(), c.Rank()
	send := pattern(r, 0, 40)
	recv := make([]byte, n*40)
	for rep := 0; rep < 3; rep++ {
		if err := c.AllGather(send, recv); err != nil {
			return err
		}
		for j := 0; j < n; j++ {
			if !bytes.Equal(recv[j*40:(j+1)*40], pattern(j, 0, 40)) {
				return fmt.Errorf("rank %d: AllGather: block of rank %d differs", r, j)
			}
		}
	}
	// Rank r sends (r + 2*j) % 5 * 3 bytes to rank j (some empty).
	size := func(from, to int) int { return (from + 2*to) % 5 * 3 }
	s, rv := make([][]byte, n), make([][]byte, n)
	for j := 0; j < n; j++ {
		s[j], rv[j] = pattern(r, j, size(r, j)), make([]byte, size(j, r))
	}
	if err := c.AllToAllV(s, rv); err != nil {
		return err
	}
	for j := 0; j < n; j++ {
		if !bytes.Equal(rv[j], pattern(j, r, size(j, r))) {
			return fmt.Errorf("rank %d: AllToAllV: buffer from rank %d differs", r, j)
		}
	}
	// Every rank agrees on equal data; rank-dependent data is a mismatch
	// reported identically everywhere.
	if err := Agree(c, "shape", []byte("same")); err != nil {
		return err
	}
	err := Agree(c, "rank parity", []byte{byte(r % 2)})
	var me *MismatchError
	if n > 1 && (!errors.As(err, &me) || me.Error() != wantParity(n)) {
		return fmt.Errorf("rank %d: Agree on differing data: got %v, want %q", r, err, wantParity(n))
	}
	return nil
}

func wantParity(n int) string {
	var even, odd []int
	for r := 0; r < n; r++ {
		if r%2 == 0 {
			even = append(even, r)
		} else {
			odd = append(odd, r)
		}
	}
	return fmt.Sprintf("comm: ranks disagree on rank parity: ranks with equal values: %v, %v", even, odd)
}

func TestLocalCollectives(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		cs, err := NewLocal(n, 0)
		if err != nil {
			t.Fatal(err)
		}
		for r, err := range Each(cs, checkCollectives) {
			if err != nil {
				t.Errorf("n=%d rank %d: %v", n, r, err)
			}
		}
	}
}

// A rank that never calls makes the others time out, and a rank that
// aborts makes them fail at once.
func TestLocalTimeoutAndAbort(t *testing.T) {
	cs, _ := NewLocal(3, 50*time.Millisecond)
	start := time.Now()
	errs := Each(cs[:2], func(c Comm) error { return c.AllGather(make([]byte, 4), make([]byte, 12)) })
	if time.Since(start) > 5*time.Second {
		t.Errorf("ranks waited %v for a missing peer", time.Since(start))
	}
	timedOut := 0
	for _, err := range errs {
		if errors.Is(err, ErrTimeout) {
			timedOut++
		} else if !errors.Is(err, ErrAborted) {
			t.Errorf("missing peer: got %v, want ErrTimeout or ErrAborted", err)
		}
	}
	if timedOut == 0 {
		t.Error("no rank reported ErrTimeout")
	}
	// The group stays failed: the late rank's call fails too.
	if err := cs[2].AllGather(make([]byte, 4), make([]byte, 12)); !errors.Is(err, ErrAborted) {
		t.Errorf("late rank: got %v, want ErrAborted", err)
	}

	cs, _ = NewLocal(3, time.Minute)
	start = time.Now()
	errs = Each(cs, func(c Comm) error {
		if c.Rank() == 1 {
			c.Abort(errors.New("rank 1 failed its attention"))
			return nil
		}
		return c.AllGather(make([]byte, 4), make([]byte, 12))
	})
	for r, err := range errs {
		if r != 1 && (!errors.Is(err, ErrAborted) || !bytes.Contains([]byte(err.Error()), []byte("rank 1 failed its attention"))) {
			t.Errorf("rank %d after an abort: got %v", r, err)
		}
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("abort took %v", time.Since(start))
	}
}

func TestLocalErrors(t *testing.T) {
	cs, _ := NewLocal(2, time.Minute)
	errs := Each(cs, func(c Comm) error {
		s := [][]byte{make([]byte, 2), make([]byte, 2)}
		rv := [][]byte{make([]byte, 2), make([]byte, 2)}
		if c.Rank() == 0 {
			rv[1] = make([]byte, 3) // rank 1 sends 2
		}
		return c.AllToAllV(s, rv)
	})
	if errs[0] == nil || errs[1] == nil {
		t.Errorf("length mismatch: got %v", errs)
	}
	cs, _ = NewLocal(2, time.Minute)
	if err := cs[0].AllGather(make([]byte, 4), make([]byte, 4)); err == nil || !bytes.Contains([]byte(err.Error()), []byte("recv: expected 8 bytes")) {
		t.Errorf("short recv: got %v", err)
	}
	if err := cs[1].AllToAllV(nil, nil); !errors.Is(err, ErrAborted) {
		t.Errorf("after a peer's bad call: got %v, want ErrAborted", err)
	}
	cs, _ = NewLocal(1, 0)
	if err := cs[0].AllToAllV([][]byte{{1}}, [][]byte{{}}); err == nil {
		t.Error("AllToAllV own buffer of the wrong size: no error")
	}
	cs[0].Close()
	if err := cs[0].AllGather(nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: got %v", err)
	}
	if _, err := NewLocal(0, 0); err == nil {
		t.Error("NewLocal(0): no error")
	}
}

// Collectives allocate nothing per call (counted over both ranks).
func TestLocalAllocs(t *testing.T) {
	cs, _ := NewLocal(2, 0)
	send, recv, recv1 := make([]byte, 64), make([]byte, 128), make([]byte, 128)
	// AllocsPerRun calls f once to warm up, then 100 times.
	go func() {
		for i := 0; i < 102; i++ {
			if cs[1].AllGather(send, recv1) != nil {
				return
			}
		}
	}()
	cs[0].AllGather(send, recv)
	if n := testing.AllocsPerRun(100, func() { cs[0].AllGather(send, recv) }); n != 0 {
		t.Errorf("%v allocations per AllGather", n)
	}
}
