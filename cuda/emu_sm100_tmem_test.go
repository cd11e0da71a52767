package cuda

// Tensor memory of the SM100 kernels on a real SM: how many CTAs share an
// SM's 512 columns (a CTA whose tcgen05.alloc finds too few free columns
// blocks in the allocator), and which TMEM lanes each warp reads and
// writes (tcgen05.ld / st reach only the 32-lane quarter of the warp's rank
// modulo 4). The functions here restate sm100_layout.cuh's residency and
// lane-ownership rules; the kernels take them from the header.

import (
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/sparseattn/msa/kernels/cuda/fatbin"
)

// checkResidency fails when `resident` CTAs of a kernel with `cols` TMEM
// columns and `smem` bytes of dynamic shared memory may share an SM and
// together need more than its columns.
func checkResidency(t *testing.T, name string, smem, cols int) {
	t.Helper()
	if n := sm100ResidentBySmem(smem); n*cols > tmemColumns {
		t.Errorf("%s: %d B of shared memory lets %d CTAs share an SM; %d x %d TMEM columns > %d: a CTA would block in tcgen05.alloc",
			name, smem, n, n, cols, tmemColumns)
	}
}

// TestSM100Residency checks, for every kernel of the launch table, that the
// CTAs its shared memory lets share an SM fit the SM's TMEM columns
// together (the prefill, which takes all 512, requests enough shared
// memory to run alone), that the header's SM constants are the Go model's,
// and that the check fails on the prefill without its sole-CTA request.
func TestSM100Residency(t *testing.T) {
	src, err := os.ReadFile("../kernels/cuda/sm100/sm100_layout.cuh")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"kSmemPerSM":     fmt.Sprintf("constexpr int kSmemPerSM = %d;", sm100SmemPerSM),
		"kTmemColsPerSM": fmt.Sprintf("constexpr int kTmemColsPerSM = %d;", tmemColumns),
		"kSoleCtaSmem":   "constexpr int kSoleCtaSmem = kSmemPerSM / 2 + 1024;",
	} {
		if !regexp.MustCompile(regexp.QuoteMeta(want)).Match(src) {
			t.Errorf("sm100_layout.cuh: %s is not %q", name, want)
		}
	}
	if 2*sm100SoleCtaSmem <= sm100SmemPerSM {
		t.Errorf("sole-CTA request %d B: two fit in %d B", sm100SoleCtaSmem, sm100SmemPerSM)
	}
	for _, g := range fatbin.SM100Kernels {
		checkResidency(t, g.Name, g.DynSmem, g.TMEMCols)
		if g.Algo == "fwd" && g.DynSmem < sm100SoleCtaSmem {
			t.Errorf("%s: %d B of shared memory, below the sole-CTA request %d B", g.Name, g.DynSmem, sm100SoleCtaSmem)
		}
	}
	// Mutation: the prefill requesting its map alone (FP8 D = 64: 51200 B,
	// four CTAs by shared memory, 4 x 512 columns).
	l := SM100Fwd(SM100FP8, 64)
	if !failsOn(func(t *testing.T) { checkResidency(t, "fwd fp8 d64 map only", l.MapBytes, l.TmemCols) }) {
		t.Error("residency check accepted the prefill without its sole-CTA shared-memory request")
	}
}

// tmemLaneBase is tmem_lane_base: the lane field (bits [16, 32)) of the
// TMEM address warp w uses, 32 (w % 4).
func tmemLaneBase(warp int) uint32 { return uint32((warp&3)*32) << 16 }

// decLaneHoldsD is dec_lane_holds_d: whether warp w's lanes of O^T block j
// hold elements of D (false: the phantom lanes 64..127 at D = 64).
func decLaneHoldsD(d, j, warp int) bool { return 128*j+32*(warp&3) < d }

// laneMutation breaks one lane rule on purpose (TestEmulatedSM100Lanes).
type laneMutation int

const (
	laneOK           laneMutation = iota
	laneNoModulo                  // lane base 32 w instead of 32 (w % 4)
	lanePhantomStore              // decode stores the phantom O^T lanes (no dec_lane_holds_d test)
)

// tmemAccess is one warp's tcgen05.ld / st: the check that the address's
// lane field is the warp's quarter, and the TMEM lane its thread `lane`
// gets.
func tmemAccess(t *testing.T, what string, warp int, base uint32, lane int) int {
	t.Helper()
	q := int(base >> 16)
	if q != 32*(warp%4) {
		t.Fatalf("%s: warp %d addresses TMEM lanes %d..%d, outside its quarter %d..%d", what, warp, q, q+31, 32*(warp%4), 32*(warp%4)+31)
	}
	return q + lane
}

// emuSM100Lanes runs the TMEM accesses of both kernels thread by thread:
// the decode S^T reads (thread t = key t), its O^T rescale and stores (block
// j, thread t = element 128 j + t of D), and the prefill's softmax and
// epilogue reads (warpgroup s's thread t = row t of the slot's tile). Every
// access must stay in the warp's lane quarter, each thread's lane must hold
// the key / element / row the thread uses, and every element of D must be
// stored exactly once per row tile.
func emuSM100Lanes(t *testing.T, mut laneMutation) {
	t.Helper()
	base := tmemLaneBase
	if mut == laneNoModulo {
		base = func(w int) uint32 { return uint32(w*32) << 16 }
	}
	for _, d := range []int{64, 128, 256} {
		l := SM100Dec(SM100BF16, d)
		stored := make([]int, d)
		for tid := 0; tid < sm100Threads; tid++ {
			warp, lane := tid/32, tid%32
			what := fmt.Sprintf("decode d%d thread %d", d, tid)
			if key := tmemAccess(t, what+" S^T", warp, base(warp), lane); key != tid {
				t.Fatalf("%s: reads key %d of S^T, masks with key %d", what, key, tid)
			}
			for j := 0; j < l.OMMAs; j++ {
				if mut != lanePhantomStore && !decLaneHoldsD(d, j, warp) {
					continue
				}
				elem := 128*j + tmemAccess(t, what+" O^T", warp, base(warp), lane)
				if elem != 128*j+tid {
					t.Fatalf("%s: reads element %d of D from TMEM, stores it as %d", what, elem, 128*j+tid)
				}
				if elem >= d {
					t.Fatalf("%s: stores element %d of a D = %d row (a phantom lane of the M = 128 product)", what, elem, d)
				}
				stored[elem]++
			}
		}
		for e, n := range stored {
			if n != 1 {
				t.Fatalf("decode d%d: element %d of D stored %d times", d, e, n)
			}
		}
		for _, slots := range []int{1, 2} {
			rows := make([]int, slots*sm100TileM)
			for tid := 0; tid < 128*slots; tid++ {
				warp, lane := tid/32, tid%32
				slot, rtid := tid>>7, tid&(sm100TileM-1)
				row := tmemAccess(t, fmt.Sprintf("fwd slots %d thread %d", slots, tid), warp, base(warp), lane)
				if row != rtid {
					t.Fatalf("fwd slots %d thread %d: reads TMEM lane %d, owns row %d", slots, tid, row, rtid)
				}
				rows[slot*sm100TileM+row]++
			}
			for r, n := range rows {
				if n != 1 {
					t.Fatalf("fwd slots %d: slot %d row %d read by %d threads", slots, r/sm100TileM, r%sm100TileM, n)
				}
			}
		}
	}
}

// TestEmulatedSM100Lanes checks that the header's lane rules are the ones
// emulated here and that the kernels take their lane bases and the D = 64
// phantom test from them, runs the lane emulation, and checks that each
// mutation of the lane rules is caught.
func TestEmulatedSM100Lanes(t *testing.T) {
	for file, wants := range map[string][]string{
		"sm100_layout.cuh": {"return (uint32_t)((warp & 3) * 32) << 16;", "return 128 * j + 32 * (warp & 3) < d;"},
		"sm100_decode.cu":  {"= dec_lane_base(warp);", "if (!dec_lane_holds_d(D, j, warp)) continue;"},
		"sm100_fwd.cu":     {"= fwd_lane_base(warp);"},
	} {
		src, err := os.ReadFile("../kernels/cuda/sm100/" + file)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range wants {
			if !regexp.MustCompile(regexp.QuoteMeta(w)).Match(src) {
				t.Errorf("%s: no %q", file, w)
			}
		}
	}
	emuSM100Lanes(t, laneOK)
	for m, name := range map[laneMutation]string{
		laneNoModulo:     "lane base 32 w (warps 4..7 of the second softmax warpgroup)",
		lanePhantomStore: "D = 64 decode stores its phantom O^T lanes",
	} {
		if !failsOn(func(t *testing.T) { emuSM100Lanes(t, m) }) {
			t.Errorf("lane emulation accepted: %s", name)
		}
	}
}
