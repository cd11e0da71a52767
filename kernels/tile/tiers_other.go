//go:build !amd64 || purego

package tile

// simdTiers: only the generic tier exists on this platform or build.
func simdTiers() []*tier { return nil }
