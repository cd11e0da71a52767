//go:build amd64 && !purego

package attn

// cpuid executes CPUID with EAX = leaf and ECX = sub.
func cpuid(leaf, sub uint32) (a, b, c, d uint32)

// cpuL2Bytes returns the L2 cache size of one core from CPUID leaf
// 0x80000006 (ECX bits 31-16: KiB; AMD and Intel both define it), or 0
// when the CPU does not report it.
func cpuL2Bytes() int {
	if maxExt, _, _, _ := cpuid(0x80000000, 0); maxExt < 0x80000006 {
		return 0
	}
	_, _, c, _ := cpuid(0x80000006, 0)
	return int(c>>16) << 10
}
