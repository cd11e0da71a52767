//go:build !linux

package attn

import "unsafe"

// adviseHugePages is a no-op outside Linux (see hugepage_linux.go).
func adviseHugePages(p unsafe.Pointer, n int) {}
