//go:build amd64 && !purego

package tile

// prefetchLines prefetches the lines of [p, p+64*lines) into L2
// (prefetch_amd64.s); lines >= 1.
//
//go:noescape
func prefetchLines(p uintptr, lines int)
