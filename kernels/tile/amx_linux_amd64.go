//go:build amd64 && !purego && linux

package tile

import (
	"fmt"
	"syscall"
)

// requestAMX asks Linux for the AMX tile data state of this process
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), Linux 5.16 on):
// "" when granted, else what failed. Once granted, every thread of the
// process may use the tiles; signal frames grow by the tile state (8 KiB),
// which the Go runtime's 32 KiB signal stacks hold.
func requestAMX() string {
	const archReqXcompPerm, xfeatureXTileData = 0x1023, 18
	if _, _, errno := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXTileData, 0); errno != 0 {
		return fmt.Sprintf("the kernel's AMX permission (arch_prctl: %v)", errno)
	}
	return ""
}
