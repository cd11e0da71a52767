//go:build !amd64 || purego

package attn

// cpuL2Bytes returns 0: without CPUID the L2 size is l2Bytes' fallback.
func cpuL2Bytes() int { return 0 }
