//go:build linux

package attn

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/sparseattn/msa/kernels/lowp"
)

// TestGrowHugeLinux checks the partial buffers' own mappings: a buffer of
// hugeMinBytes or more is a zeroed mapping that the kernel counts as
// eligible for transparent huge pages (THPeligible in /proc/self/smaps,
// where THP is not switched off), a smaller one lives in the Go heap, a
// request within the capacity reuses the buffer, and growing replaces the
// mapping (the old one is unmapped: no smaps entry starts there any more).
func TestGrowHugeLinux(t *testing.T) {
	var pt Partials
	const d = 128
	small := (hugeMinBytes/2)/(2*d) - 1
	pt.Ensure(PartialBF16, d, small, false)
	if pt.mem[1] != nil {
		t.Fatalf("%d-byte buffer got a mapping of its own", small*d*2)
	}
	rows := hugeMinBytes / (2 * d)
	pt.Ensure(PartialBF16, d, rows, false)
	m := pt.mem[1]
	if m == nil {
		t.Fatal("no mapping for a buffer of hugeMinBytes")
	}
	if &pt.BF16[0] != (*lowp.BFloat16)(unsafe.Pointer(&m.b[0])) || len(pt.BF16) != rows*d {
		t.Fatal("BF16 is not the mapping")
	}
	for i, x := range pt.BF16 {
		if x != 0 {
			t.Fatalf("new mapping not zeroed at %d", i)
		}
	}
	for i := range pt.BF16 {
		pt.BF16[i] = lowp.BFloat16(i)
	}
	start := uintptr(unsafe.Pointer(&m.b[0]))
	if on, ok := thpEligible(t, start); ok && !on {
		t.Errorf("mapping at %#x is not eligible for huge pages", start)
	}
	pt.Ensure(PartialBF16, d, rows/2, false) // within capacity: same buffer
	if pt.mem[1] != m || pt.BF16[5] != 5 {
		t.Fatal("a smaller request replaced the buffer")
	}
	pt.Ensure(PartialBF16, d, 2*rows, false)
	if pt.mem[1] == m || m.b != nil {
		t.Fatal("growing kept the old mapping")
	}
	if _, ok := smapsEntry(t, start); ok {
		t.Errorf("old mapping at %#x still mapped", start)
	}
	pt.mem[1].release()
}

// TestHugeBudget checks that the live mappings stay within hugeBudget: a
// request beyond it gets none (the buffer then comes from the Go heap),
// and releasing a mapping returns its bytes to the budget, as the cleanup
// of an unreachable one does.
func TestHugeBudget(t *testing.T) {
	base := hugeLive.Load()
	left := hugeBudget - base
	if left < 2*hugeMinBytes {
		t.Skipf("only %d bytes of budget left", left)
	}
	a := mapHuge(int(left) - hugeMinBytes)
	if a == nil {
		t.Fatal("a mapping within the budget was refused")
	}
	if b := mapHuge(2 * hugeMinBytes); b != nil {
		b.release()
		t.Fatal("a mapping beyond the budget was granted")
	}
	var pt Partials
	pt.Ensure(PartialF32, 128, 2*hugeMinBytes/(4*128), false)
	if pt.mem[0] != nil || len(pt.F32) != 2*hugeMinBytes/4 {
		t.Fatal("over the budget, the buffer did not come from the Go heap")
	}
	a.release()
	if got := hugeLive.Load(); got != base {
		t.Fatalf("live bytes %d after release, want %d", got, base)
	}
	func() {
		m := mapHuge(hugeMinBytes)
		if m == nil {
			t.Fatal("mapping refused after release")
		}
	}()
	for i := 0; i < 20 && hugeLive.Load() != base; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := hugeLive.Load(); got != base {
		t.Fatalf("live bytes %d after the handle became unreachable, want %d", got, base)
	}
}

// thpEligible reads the THPeligible flag of the mapping that starts at
// addr (ok false when THP is off or the kernel does not report it).
func thpEligible(t *testing.T, addr uintptr) (on, ok bool) {
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || strings.Contains(string(b), "[never]") {
		return false, false
	}
	e, found := smapsEntry(t, addr)
	if !found {
		t.Fatalf("no smaps entry starts at %#x", addr)
	}
	for _, l := range e {
		if v, has := strings.CutPrefix(l, "THPeligible:"); has {
			return strings.TrimSpace(v) == "1", true
		}
	}
	return false, false
}

// smapsEntry returns the lines of the /proc/self/smaps entry whose range
// starts at addr.
func smapsEntry(t *testing.T, addr uintptr) ([]string, bool) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	prefix := fmt.Sprintf("%x-", addr)
	var e []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if f := strings.Fields(l); len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") { // a range's header
			if in {
				return e, true
			}
			in = strings.HasPrefix(l, prefix)
			continue
		}
		if in {
			e = append(e, l)
		}
	}
	return e, in
}

// TestWorkspaceRelease checks that Workspace.Release unmaps the partial
// buffers at once (the live mapped bytes return to where they were) and
// leaves a workspace that allocates again on its next use.
func TestWorkspaceRelease(t *testing.T) {
	base := hugeLive.Load()
	ws := NewWorkspace(1, 128)
	rows := 2 * hugeMinBytes / (2 * 128)
	ws.Partials.Ensure(PartialBF16, 128, rows, false)
	if ws.Partials.mem[1] == nil || hugeLive.Load() != base+2*hugeMinBytes {
		t.Fatalf("no mapping (live %d, base %d)", hugeLive.Load(), base)
	}
	ws.Release()
	if hugeLive.Load() != base || ws.Partials.BF16 != nil || ws.Partials.mem[1] != nil {
		t.Fatalf("after Release: live %d (base %d), %d values kept", hugeLive.Load(), base, len(ws.Partials.BF16))
	}
	ws.Partials.Ensure(PartialBF16, 128, rows, false)
	ws.Partials.BF16[rows*128-1] = 1
	ws.Release()
	ws.Release() // twice is harmless
}
