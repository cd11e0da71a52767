package op

// Bookkeeping of the device buffers of the attention nodes on the CUDA path
// (graph_cuda.go, build tag cuda). Plain Go without the tag, so that its
// rules are tested on any machine with a fake allocator
// (graph_cuda_state_test.go): buffers per (node, context ID), queued frees
// for collected nodes, nothing touched for a destroyed context.

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"weak"
)

// devMemory allocates and frees device memory in the current context.
type devMemory interface {
	alloc(n int64) (uint64, error)
	free(p uint64) error
}

// devBuf is one device allocation (0 = none).
type devBuf struct {
	ptr  uint64
	size int64
}

// ensure grows b to at least n bytes (at least 256).
func (b *devBuf) ensure(mem devMemory, fn, role string, n int64) error {
	n = max(n, 256)
	if b.size >= n {
		return nil
	}
	if b.ptr != 0 {
		if err := mem.free(b.ptr); err != nil {
			return fmt.Errorf("op: %s: freeing %s: %w", fn, role, err)
		}
		b.ptr, b.size = 0, 0
	}
	p, err := mem.alloc(n)
	if err != nil {
		return fmt.Errorf("op: %s: allocating %d bytes of device memory for %s: %w", fn, n, role, err)
	}
	b.ptr, b.size = p, n
	return nil
}

// attnDev is the device side of an attnState in one CUDA context: partial
// buffers and the LSE results the accessors read. Guarded by the
// attnState's mutex.
type attnDev struct {
	oPart, lsePart, tlsePart devBuf
	lse, tlse                devBuf
	lseOK, tlseOK            bool // lse / tlse hold the last run's results
}

func (d *attnDev) ptrs() []uint64 {
	var out []uint64
	for _, b := range []*devBuf{&d.oPart, &d.lsePart, &d.tlsePart, &d.lse, &d.tlse} {
		if b.ptr != 0 {
			out = append(out, b.ptr)
		}
	}
	return out
}

var (
	devStatesMu sync.Mutex
	// devStates holds every attention node's buffers per context ID
	// (cuCtxGetId: never reused in a process, unlike context handles).
	devStates = map[weak.Pointer[attnState]]map[uint64]*attnDev{}
	// pendingFree holds, per context ID, the buffers of collected nodes,
	// freed by the next CUDA call in that context (freePending).
	pendingFree = map[uint64][]uint64{}
)

// devState returns st's device state in the context with ID ctxID (created
// when create). Each context keeps its own buffers, so alternating between
// contexts allocates nothing after the first run in each.
func devState(st *attnState, ctxID uint64, create bool) *attnDev {
	key := weak.Make(st)
	devStatesMu.Lock()
	defer devStatesMu.Unlock()
	byCtx := devStates[key]
	if byCtx == nil {
		if !create {
			return nil
		}
		byCtx = map[uint64]*attnDev{}
		devStates[key] = byCtx
		runtime.AddCleanup(st, releaseState, key)
	}
	ds := byCtx[ctxID]
	if ds == nil && create {
		ds = &attnDev{}
		byCtx[ctxID] = ds
	}
	return ds
}

// releaseState runs when an attnState is collected: its buffers are queued
// for freeing in their contexts (a cleanup runs on an arbitrary goroutine
// with no context current, so it makes no driver call).
func releaseState(key weak.Pointer[attnState]) {
	devStatesMu.Lock()
	defer devStatesMu.Unlock()
	for id, ds := range devStates[key] {
		if p := ds.ptrs(); len(p) > 0 {
			pendingFree[id] = append(pendingFree[id], p...)
		}
	}
	delete(devStates, key)
}

// freePending frees the queued buffers of context ctxID, which must be
// current on the calling (locked) thread; it tries every buffer and joins
// the errors.
func freePending(ctxID uint64, mem devMemory) error {
	devStatesMu.Lock()
	ptrs := pendingFree[ctxID]
	delete(pendingFree, ctxID)
	devStatesMu.Unlock()
	var errs []error
	for _, p := range ptrs {
		if err := mem.free(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dropContext forgets everything of a destroyed context: its memory went
// with it (freeing it now would be an error, or worse, hit a new context's
// allocation at the same address).
func dropContext(ctxID uint64) {
	devStatesMu.Lock()
	defer devStatesMu.Unlock()
	delete(pendingFree, ctxID)
	for _, byCtx := range devStates {
		delete(byCtx, ctxID)
	}
}
