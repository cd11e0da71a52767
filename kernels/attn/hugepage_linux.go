//go:build linux

package attn

import (
	"runtime"
	"sync/atomic"
	"syscall"
)

// hugeMem is an anonymous private mapping of its own, advised to be backed
// by transparent huge pages (madvise MADV_HUGEPAGE): the storage of large
// partial buffers (growHuge). It lives outside the Go heap so that the
// advice stays on this buffer: advice on part of the heap stays on memory
// the runtime later hands to other objects and releases to the OS in
// pieces (splitting huge pages), so a prefill call after a larger one
// would find its partials on 4 KiB pages again. The mapping is unmapped by release, or by a
// cleanup once the handle is unreachable.
//
// The Go garbage collector does not count these mappings when it decides
// to run, so a program that drops workspaces without the heap growing
// could keep unreachable mappings for long: mapHuge therefore keeps the
// live mappings under hugeBudget bytes, and larger needs fall back to the
// Go heap.
type hugeMem struct {
	b       []byte
	cleanup runtime.Cleanup
}

// hugeBudget bounds the bytes of live huge-page mappings (4 prefill
// windows of MaxPartialBytes).
const hugeBudget = 4 * MaxPartialBytes

// hugeLive is the size of the live mappings.
var hugeLive atomic.Int64

// unmapHuge unmaps b and takes it off hugeLive.
func unmapHuge(b []byte) {
	_ = syscall.Munmap(b)
	hugeLive.Add(-int64(len(b)))
}

// mapHuge returns a zeroed mapping of n > 0 bytes advised for huge pages,
// or nil when the system refuses it (the caller then uses the Go heap).
// Where THP is off the advice changes nothing and the mapping is still
// valid memory.
func mapHuge(n int) *hugeMem {
	if hugeLive.Add(int64(n)) > hugeBudget {
		hugeLive.Add(-int64(n))
		return nil
	}
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		hugeLive.Add(-int64(n))
		return nil
	}
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE) // a hint: errors change nothing
	h := &hugeMem{b: b}
	h.cleanup = runtime.AddCleanup(h, unmapHuge, b)
	return h
}

// release unmaps the mapping now; nothing may use its memory afterwards.
// A nil handle is a no-op.
func (h *hugeMem) release() {
	if h == nil || h.b == nil {
		return
	}
	h.cleanup.Stop()
	unmapHuge(h.b)
	h.b = nil
}
