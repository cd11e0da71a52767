package fatbin

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDecodePipeLaunch checks the pipelined decode's table against the
// MSA_PIPE_PIN lines of sm90/sm90_decode_pipe.cu (static_asserts of the same
// numbers), the CTAs-per-SM budgets (shared memory, and the register cap of
// its gate row in gates/sm90_decode_pipe.tsv: two CTAs at D <= 128, one at
// D = 256), and that every kernel has a row in that gate file.
func TestDecodePipeLaunch(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "sm90", "sm90_decode_pipe.cu"))
	if err != nil {
		t.Fatal(err)
	}
	pins := regexp.MustCompile(`(?m)^MSA_PIPE_PIN\((\w+), (\d+), (\d+), (\d+), (\d+), (\d+)\)$`).FindAllStringSubmatch(string(src), -1)
	if len(pins) == 0 {
		t.Fatal("sm90_decode_pipe.cu: no MSA_PIPE_PIN lines")
	}
	seen := map[string]bool{}
	for _, m := range pins {
		name := fmt.Sprintf("msa_sm90_decpipe_%s_d%s", m[1], m[2])
		n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
		want := PipeLaunch{Threads: n(3), CTAs: n(4), DynSmem: n(5), Stages: n(6)}
		if got, ok := DecodePipeLaunch[name]; !ok {
			t.Errorf("%s is pinned but not in DecodePipeLaunch", name)
		} else if got != want {
			t.Errorf("%s pinned at %+v; the table says %+v", name, want, got)
		}
		if seen[name] {
			t.Errorf("%s pinned twice", name)
		}
		seen[name] = true
	}
	gates, err := os.ReadFile(filepath.Join("..", "gates", "sm90_decode_pipe.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range DecodePipeLaunch {
		if !seen[name] {
			t.Errorf("%s: in the table but pinned by no MSA_PIPE_PIN line", name)
		}
		wantCTAs := PipeCTAsPerSM
		if strings.HasSuffix(name, "_d256") {
			wantCTAs = 1
		}
		if l.CTAs != wantCTAs {
			t.Errorf("%s: sized for %d CTAs per SM, the design is %d", name, l.CTAs, wantCTAs)
		}
		if l.CTAs*(l.DynSmem+PipeSmemReservedCTA) > PipeSmemPerSM {
			t.Errorf("%s: %d CTAs x (%d + %d) B of shared memory > %d per SM", name, l.CTAs, l.DynSmem, PipeSmemReservedCTA, PipeSmemPerSM)
		}
		maxStages := 4
		if strings.Contains(name, "_nvfp4_") {
			maxStages = 8 // small spans: a deeper ring for the same bytes in flight
		}
		if l.Stages < 3 || l.Stages > maxStages || l.Threads != 128 {
			t.Errorf("%s: %d stages, %d threads: the design is 3-%d stages of one warpgroup", name, l.Stages, l.Threads, maxStages)
		}
		regs, rows := gateRegs(t, string(gates), name)
		if rows == 0 {
			t.Errorf("%s: no sm_90a row in gates/sm90_decode_pipe.tsv", name)
		}
		if regs < 0 || regs > PipeRegBudget(l.Threads, l.CTAs) {
			t.Errorf("%s: the gate allows %d registers, the %d-CTA budget at %d threads is %d", name, regs, l.CTAs, l.Threads, PipeRegBudget(l.Threads, l.CTAs))
		}
	}
}

// gateRegs returns the largest max_regs of the sm_90a gate rows matching
// name (-1 when one of them has no cap) and how many rows match.
func gateRegs(t *testing.T, tsv, name string) (regs, rows int) {
	t.Helper()
	for _, line := range strings.Split(tsv, "\n") {
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) < 10 {
			t.Fatalf("gate row %q: %d columns", line, len(cols))
		}
		if !regexp.MustCompile(cols[0]).MatchString(name) || !regexp.MustCompile("^(?:"+cols[1]+")$").MatchString("sm_90a") {
			continue
		}
		rows++
		r, err := strconv.Atoi(cols[5])
		if err != nil {
			return -1, rows
		}
		regs = max(regs, r)
	}
	return regs, rows
}

// TestPipeRegBudget pins the budget arithmetic: 65536 / (2 x 128) = 256,
// capped at 255; 65536 / (2 x 160) = 204.8 -> 200 in units of 8; one CTA
// of 384 threads: 170.7 -> 168.
func TestPipeRegBudget(t *testing.T) {
	for _, c := range []struct{ threads, ctas, want int }{{128, 2, 255}, {160, 2, 200}, {256, 2, 128}, {128, 1, 255}, {384, 1, 168}} {
		if got := PipeRegBudget(c.threads, c.ctas); got != c.want {
			t.Errorf("PipeRegBudget(%d, %d) = %d, want %d", c.threads, c.ctas, got, c.want)
		}
	}
}
