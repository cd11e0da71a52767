package cuda

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestSM100WaitSites: the Go table of wait sites matches the kernels'
// sources: the families and the code layout of sm100_ptx.cuh, the barrier
// indices of the FwdLayout, DecLayout and QFwdLayout of sm100_layout.cuh,
// every mbar_wait / tick site of sm100_fwd.cu, sm100_decode.cu and
// sm100_qfwd.cu in the table,
// and the symbol the launch layer sets.
func TestSM100WaitSites(t *testing.T) {
	dir := filepath.Join("..", "kernels", "cuda", "sm100")
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ptx, layout := read("sm100_ptx.cuh"), read("sm100_layout.cuh")
	if !strings.Contains(ptx, "enum WaitKernel : uint32_t { kWaitFwd = 1, kWaitDecode = 2, kWaitQFwd = 3 };") {
		t.Error("sm100_ptx.cuh: WaitKernel is no longer kWaitFwd = 1, kWaitDecode = 2, kWaitQFwd = 3 (sm100WaitFamilies)")
	}
	if !strings.Contains(ptx, "return ((uint32_t)k << 16) | (site << 8) | parity;") {
		t.Error("sm100_ptx.cuh: wait_code is no longer family << 16 | site << 8 | parity")
	}
	if !strings.Contains(ptx, "constexpr uint64_t kWaitTimeoutNs = "+strconv.Itoa(sm100WaitTimeoutS)+"000000000ull;") {
		t.Errorf("sm100_ptx.cuh: kWaitTimeoutNs is not %d s", sm100WaitTimeoutS)
	}
	if !strings.Contains(ptx, "__device__ unsigned int* "+SM100WaitSymbol+";") {
		t.Errorf("sm100_ptx.cuh: no __device__ unsigned int* %s", SM100WaitSymbol)
	}
	// The barrier constants of each layout: "static constexpr int bar_k = 0, ..., num_bars = N;".
	decl := regexp.MustCompile(`static constexpr int (bar_k = 0,[^;]*);`).FindAllStringSubmatch(layout, -1)
	if len(decl) != 3 {
		t.Fatalf("sm100_layout.cuh: %d barrier declarations, want 3 (FwdLayout, DecLayout, QFwdLayout)", len(decl))
	}
	consts := map[uint32]map[string]uint32{}
	for i, d := range decl {
		m := map[string]uint32{}
		for _, kv := range strings.Split(d[1], ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), " = ")
			n, err := strconv.Atoi(v)
			if !ok || err != nil {
				t.Fatalf("sm100_layout.cuh: %q", kv)
			}
			m[k] = uint32(n)
		}
		consts[uint32(i+1)] = m // FwdLayout comes first, DecLayout second, QFwdLayout third
	}
	if _, ok := consts[1]["bar_q"]; !ok {
		t.Fatalf("sm100_layout.cuh: the first barrier declaration is not FwdLayout's: %v", consts[1])
	}
	if _, ok := consts[3]["bar_ke"]; !ok {
		t.Fatalf("sm100_layout.cuh: the third barrier declaration is not QFwdLayout's: %v", consts[3])
	}
	covered := map[uint32]map[uint32]bool{1: {}, 2: {}, 3: {}}
	for _, s := range sm100WaitSites {
		base, off, _ := strings.Cut(s.bar, " + ")
		v, ok := consts[s.family][base]
		if !ok {
			t.Errorf("family %d: %s is not a barrier constant of its layout", s.family, base)
			continue
		}
		if off != "" {
			n, _ := strconv.Atoi(off)
			v += uint32(n)
		}
		if v != s.index {
			t.Errorf("family %d: %s is %d in sm100_layout.cuh, the table says %d", s.family, s.bar, v, s.index)
		}
		for i := s.index; i < s.index+s.slots; i++ {
			if covered[s.family][i] {
				t.Errorf("family %d: site %d twice", s.family, i)
			}
			covered[s.family][i] = true
		}
	}
	// Every site of the fwd layout's barriers (num_bars + 1 of them, the
	// issuer's poll last), of decode's (num_bars + 2: stage 1's K and V)
	// and of qfwd's (num_bars).
	for fam, n := range map[uint32]uint32{1: consts[1]["num_bars"] + 1, 2: consts[2]["num_bars"] + 2, 3: consts[3]["num_bars"]} {
		for i := uint32(0); i < n; i++ {
			if !covered[fam][i] {
				t.Errorf("family %d: site %d has no entry", fam, i)
			}
		}
	}
	// The kernels wait at no other site expressions than these.
	sites := regexp.MustCompile(`(?:kWaitFwd|kWaitDecode|kWaitQFwd), ([^)]+?)\)`)
	for _, f := range []string{"sm100_fwd.cu", "sm100_decode.cu", "sm100_qfwd.cu"} {
		for _, m := range sites.FindAllStringSubmatch(read(f), -1) {
			switch m[1] {
			case "L::bar_k", "L::bar_v", "L::bar_s + slot", "L::bar_o + slot", "L::bar_mma", "site_k", "site_v", "L::num_bars, 0",
				"L::bar_k + s", "L::bar_v + s", "L::bar_ke + s", "L::bar_ve + s", "L::bar_q", "L::bar_s + sb", "L::bar_p", "L::bar_o",
				"L::bar_p + sb", "L::bar_c",
				"L::bar_rk", "L::bar_rv", "L::bar_rke", "L::bar_rve":
			default:
				t.Errorf("%s: a wait at site %q the table does not describe", f, m[1])
			}
		}
	}
}

// TestSM100WaitError: the code a timed-out wait leaves reaches the error:
// the kernel of its family launched last, the site's meaning and slot, the
// parity and the driver's error (still matched by errors.Is); code 0 leaves
// the error alone.
func TestSM100WaitError(t *testing.T) {
	drv := errors.New("cuCtxSynchronize: CUDA_ERROR_ILLEGAL_INSTRUCTION (700)")
	launched := []string{"msa_sm100_fwd_bf16_d128", "msa_combine_d128", "msa_sm100_decode_fp8_d64", "msa_combine_d64"}
	if got := sm100WaitError(0, launched, drv); got != drv {
		t.Errorf("code 0: %v", got)
	}
	if got := sm100WaitError(0x020201, launched, nil); got != nil {
		t.Errorf("no error: %v", got)
	}
	for _, tc := range []struct {
		code uint32
		want []string
	}{
		{0x020201, []string{"msa_sm100_decode_fp8_d64", "0x020201", "MMA done", "[bar_mma]", "parity 1", "within 10 s", "CUDA_ERROR_ILLEGAL_INSTRUCTION"}},
		{0x020400, []string{"msa_sm100_decode_fp8_d64", "stage 1", "V ready", "parity 0"}},
		{0x010900, []string{"msa_sm100_fwd_bf16_d128", "O done", "(slot 1)", "[bar_o]"}},
		{0x010a01, []string{"msa_sm100_fwd_bf16_d128", "the MMA issuer's poll"}},
		{0x010c00, []string{"fwd kernel site 12 not in the table"}},
		{0x070000, []string{"an SM100 kernel", "an unknown site"}},
	} {
		err := sm100WaitError(tc.code, launched, drv)
		var w *SM100WaitTimeout
		if !errors.As(err, &w) || w.Code != tc.code || !errors.Is(err, drv) {
			t.Errorf("%#x: %v", tc.code, err)
			continue
		}
		for _, s := range tc.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%#x: %q lacks %q", tc.code, err, s)
			}
		}
	}
	if err := sm100WaitError(0x020000, []string{"msa_decode_d64"}, drv); !strings.Contains(err.Error(), "cuda: an SM100 kernel:") {
		t.Errorf("no SM100 kernel launched: %v", err)
	}
}
