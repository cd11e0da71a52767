package op

import (
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"
)

// fakeMemory is a device allocator that never reuses an address and
// records what is live.
type fakeMemory struct {
	next  uint64
	live  map[uint64]int64
	frees int
	fail  bool
}

func newFakeMemory(base uint64) *fakeMemory { return &fakeMemory{next: base, live: map[uint64]int64{}} }

func (m *fakeMemory) alloc(n int64) (uint64, error) {
	p := m.next
	m.next += uint64(n+255) &^ 255
	m.live[p] = n
	return p, nil
}

func (m *fakeMemory) free(p uint64) error {
	if _, ok := m.live[p]; !ok {
		return errors.New("free of a pointer that is not live")
	}
	delete(m.live, p)
	m.frees++
	if m.fail {
		return errors.New("injected free failure")
	}
	return nil
}

// TestDevStatePerContext: a node alternating between two contexts keeps
// one set of buffers per context (no allocation per switch, no leak), and
// a new context (new ID, even at a reused handle) never sees old buffers.
func TestDevStatePerContext(t *testing.T) {
	st := &attnState{}
	a, b := newFakeMemory(1<<20), newFakeMemory(1<<30)
	for i := 0; i < 10; i++ {
		for _, c := range []struct {
			id  uint64
			mem *fakeMemory
		}{{101, a}, {202, b}} {
			ds := devState(st, c.id, true)
			if err := ds.oPart.ensure(c.mem, "test", "O partials", 4096); err != nil {
				t.Fatal(err)
			}
			if err := ds.lse.ensure(c.mem, "test", "LSE", 512); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(a.live) != 2 || len(b.live) != 2 {
		t.Fatalf("after 10 switches: %d and %d live buffers, want 2 each", len(a.live), len(b.live))
	}
	if ds := devState(st, 303, false); ds != nil {
		t.Error("a context the node never ran in has buffers")
	}
	fresh := devState(st, 303, true)
	if fresh.oPart.ptr != 0 || fresh.lseOK {
		t.Error("a new context ID reuses another context's buffers")
	}
	// The context with ID 101 is destroyed: its entries go, nothing is freed.
	dropContext(101)
	if devState(st, 101, false) != nil || a.frees != 0 {
		t.Errorf("after dropContext: state kept or %d frees", a.frees)
	}
	runtime.KeepAlive(st)
}

// TestDevStateCleanup: when a node is collected its buffers are queued per
// context and freed by freePending in that context only, all of them, with
// the errors joined.
func TestDevStateCleanup(t *testing.T) {
	mem := newFakeMemory(1 << 40)
	func() {
		st := &attnState{}
		ds := devState(st, 7001, true)
		for _, b := range []*devBuf{&ds.oPart, &ds.lsePart, &ds.lse} {
			if err := b.ensure(mem, "test", "buf", 1000); err != nil {
				t.Fatal(err)
			}
		}
		devState(st, 7002, true) // no buffers there
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		devStatesMu.Lock()
		n := len(pendingFree[7001])
		devStatesMu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cleanup queued %d buffers of context 7001, want 3", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := freePending(7002, mem); err != nil || mem.frees != 0 {
		t.Fatalf("freeing in another context: %v, %d frees", err, mem.frees)
	}
	mem.fail = true
	err := freePending(7001, mem)
	if mem.frees != 3 || len(mem.live) != 0 {
		t.Fatalf("freed %d of 3 (live %d)", mem.frees, len(mem.live))
	}
	if err == nil {
		t.Error("free failures not reported")
	}
	if err := freePending(7001, mem); err != nil || mem.frees != 3 {
		t.Errorf("second freePending: %v, %d frees", err, mem.frees)
	}
}

// TestDevBufEnsure: buffers grow (old one freed first), never shrink.
func TestDevBufEnsure(t *testing.T) {
	mem := newFakeMemory(4096)
	var b devBuf
	for _, n := range []int64{10, 300, 200, 5000, 100} {
		if err := b.ensure(mem, "test", "buf", n); err != nil {
			t.Fatal(err)
		}
	}
	if b.size != 5000 || len(mem.live) != 1 || mem.frees != 2 { // 256 -> 300 -> 5000
		t.Errorf("size %d, %d live, %d frees", b.size, len(mem.live), mem.frees)
	}
	if got := slices.Collect(func(yield func(uint64) bool) {
		for p := range mem.live {
			yield(p)
		}
	}); len(got) != 1 || got[0] != b.ptr {
		t.Errorf("live %v, buffer at %#x", got, b.ptr)
	}
}
