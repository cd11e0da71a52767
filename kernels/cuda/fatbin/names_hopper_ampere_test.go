package fatbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestHopperAmpereLaunch checks the launch table against the MSA_HA_PIN lines
// of the kernel sources (which static_assert the same numbers at compile
// time) and the budgets: sm_80 kernels within 99 KB of shared memory (so that
// sm_86 / sm_89 can launch them), sm_90a kernels within 227 KB, whole warps.
func TestHopperAmpereLaunch(t *testing.T) {
	pin := regexp.MustCompile(`(?m)^MSA_HA_PIN\((sm\d+), (\w+), (\w+), (\d+), (\d+), (\d+)\)$`)
	seen := map[string]bool{}
	for _, f := range []string{"sm90/sm90_fwd.cu", "sm90/sm90_decode.cu", "sm80/sm80_fwd.cu", "sm80/sm80_decode.cu", "sm80/sm80_qfwd.cu", "sm90/sm90_qfwd.cu"} {
		src, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		ms := pin.FindAllStringSubmatch(string(src), -1)
		if len(ms) == 0 {
			t.Errorf("%s: no MSA_HA_PIN lines", f)
		}
		for _, m := range ms {
			name := fmt.Sprintf("msa_%s_%s_%s_d%s", m[1], m[2], m[3], m[4])
			threads, _ := strconv.Atoi(m[5])
			smem, _ := strconv.Atoi(m[6])
			got, ok := HopperAmpereLaunch[name]
			switch {
			case !ok:
				t.Errorf("%s: %s is pinned but not in HopperAmpereLaunch", f, name)
			case got.Threads != threads || got.DynSmem != smem:
				t.Errorf("%s: %s pinned at %d threads, %d B; the table says %+v", f, name, threads, smem, got)
			}
			if seen[name] {
				t.Errorf("%s: %s pinned twice", f, name)
			}
			seen[name] = true
		}
	}
	for name, l := range HopperAmpereLaunch {
		if !seen[name] {
			t.Errorf("%s: in the table but pinned by no kernel source", name)
		}
		limit := 232448
		if strings.HasPrefix(name, "msa_sm80_") {
			limit = 99 * 1024
		}
		if l.DynSmem <= 0 || l.DynSmem > limit {
			t.Errorf("%s: %d B of dynamic shared memory, limit %d", name, l.DynSmem, limit)
		}
		if l.Threads < 32 || l.Threads%32 != 0 || l.Threads > 1024 {
			t.Errorf("%s: %d threads", name, l.Threads)
		}
	}
	// 2 architectures x (4 fwd + 3 decode + 4 query-major variants) x 3
	// head dims, and the sm90 fp8pv query-major kernels at 3 head dims
	if len(HopperAmpereLaunch) != 69 {
		t.Errorf("%d kernels in the table, want 69 (per architecture: 12 fwd + 9 decode + 12 query-major; sm90: 3 fp8pv)", len(HopperAmpereLaunch))
	}
	if len(SM90QFwdTilesPerCTA) != 15 {
		t.Errorf("SM90QFwdTilesPerCTA has %d kernels, want the 15 sm90 query-major ones (12 and 3 fp8pv)", len(SM90QFwdTilesPerCTA))
	}
	for name, n := range SM90QFwdTilesPerCTA {
		l, ok := HopperAmpereLaunch[name]
		want := 128*n + 32 // consumer warpgroups and a producer warp
		if n > 1 {
			want = 128*n + 128 // a whole producer warpgroup (setmaxnreg)
		}
		if !ok || n < 1 || l.Threads != want {
			t.Errorf("%s: %d tiles per CTA with geometry %+v: want one consumer warpgroup per tile and a producer warp (warpgroup with two tiles)", name, n, l)
		}
	}
}

// TestE4M3Conversions compiles and runs hosttest/e4m3_conv_test.cpp (the integer E4M3
// conversions of the sm_80 kernels, checked exhaustively on the host).
func TestE4M3Conversions(t *testing.T) {
	cxx, err := exec.LookPath("c++")
	if err != nil {
		t.Skip("no C++ compiler")
	}
	bin := filepath.Join(t.TempDir(), "conv")
	if out, err := exec.Command(cxx, "-O2", "-std=c++17", "-I", "..", "-o", bin, filepath.Join("..", "hosttest", "e4m3_conv_test.cpp")).CombinedOutput(); err != nil {
		t.Fatalf("building hosttest/e4m3_conv_test.cpp: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("hosttest/e4m3_conv_test: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestSM80FragmentEmulation runs hosttest/sm80_frag_emu.py (the ldmatrix / mma.sync
// fragment and address math of the sm_80 kernels against direct products).
func TestSM80FragmentEmulation(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	out, err := exec.Command(py, filepath.Join("..", "hosttest", "sm80_frag_emu.py")).CombinedOutput()
	if err != nil {
		t.Fatalf("hosttest/sm80_frag_emu.py: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
