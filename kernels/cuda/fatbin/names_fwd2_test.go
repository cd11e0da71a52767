package fatbin

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestFwd2Launch checks Fwd2Launch against the MSA_FWD2_PIN lines of
// sm90_fwd2.cu (static_asserts of the same numbers) and the sm_90 budgets:
// dynamic shared memory within 227 KB less the 1 KB the CTA reserves, one
// CTA of whole warps.
func TestFwd2Launch(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "sm90", "sm90_fwd2.cu"))
	if err != nil {
		t.Fatal(err)
	}
	pin := regexp.MustCompile(`(?m)^MSA_FWD2_PIN\((\w+), (\d+), (\d+), (\d+)\)$`)
	ms := pin.FindAllStringSubmatch(string(src), -1)
	if len(ms) != len(Fwd2Launch) {
		t.Fatalf("sm90_fwd2.cu pins %d kernels, Fwd2Launch lists %d", len(ms), len(Fwd2Launch))
	}
	for _, m := range ms {
		name := fmt.Sprintf("msa_sm90_fwd2_%s_d%s", m[1], m[2])
		threads, _ := strconv.Atoi(m[3])
		smem, _ := strconv.Atoi(m[4])
		got, ok := Fwd2Launch[name]
		switch {
		case !ok:
			t.Errorf("%s is pinned but not in Fwd2Launch", name)
		case got.Threads != threads || got.DynSmem != smem:
			t.Errorf("%s pinned at %d threads, %d B; the table says %+v", name, threads, smem, got)
		}
		if smem > 232448-1024 || threads%32 != 0 || threads > 1024 {
			t.Errorf("%s: %d threads, %d B of dynamic shared memory: over the sm_90 budget", name, threads, smem)
		}
	}
}
