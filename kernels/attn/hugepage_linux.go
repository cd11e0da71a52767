//go:build linux

package attn

import (
	"syscall"
	"unsafe"
)

// adviseHugePages asks Linux to back the whole 2 MiB pages inside the n
// bytes at p with transparent huge pages (madvise MADV_HUGEPAGE). It is a
// hint: where THP is off, or the range is already backed, nothing
// changes, and errors are ignored. With THP in its common "madvise" mode,
// Go's heap gets none otherwise.
func adviseHugePages(p unsafe.Pointer, n int) {
	const huge = 2 << 20
	start := (uintptr(p) + huge - 1) &^ (huge - 1)
	end := (uintptr(p) + uintptr(n)) &^ (huge - 1)
	if end <= start {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Add(p, start-uintptr(p))), end-start)
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
}
