package cuda

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/sparseattn/msa/kernels/cuda/fatbin"
	"github.com/sparseattn/msa/kernels/plan"
)

func TestParseDecodeKernel(t *testing.T) {
	for s, want := range map[string]DecodeKernel{"": DecodeOld, "old": DecodeOld, "new": DecodeNew} {
		got, err := ParseDecodeKernel(s)
		if err != nil || got != want {
			t.Errorf("ParseDecodeKernel(%q) = %v, %v; want %v", s, got, err, want)
		}
		if s != "" && got.String() != s {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), s)
		}
	}
	for _, bad := range []string{"NEW", "pipe", " old"} {
		_, err := ParseDecodeKernel(bad)
		if err == nil || !strings.Contains(err.Error(), DecodeEnv) || !strings.Contains(err.Error(), "want old or new") {
			t.Errorf("ParseDecodeKernel(%q): error %v, want one naming %s and the choices", bad, err, DecodeEnv)
		}
	}
}

// TestDecodePipeParamsLayout pins MsaDecodePipeParams: the decode block,
// then split_counts and counters, 256 bytes in all.
func TestDecodePipeParamsLayout(t *testing.T) {
	src, err := os.ReadFile("../kernels/cuda/shared/msa_params.h")
	if err != nil {
		t.Fatal(err)
	}
	fields := cFields(t, string(src), "MsaDecodePipeParams")
	want := [][2]string{{"MsaDecodeParams", "d"}, {"uint64_t", "splitcounts"}, {"uint64_t", "counters"}}
	if !slices.Equal(fields, want) {
		t.Fatalf("MsaDecodePipeParams fields %v, want %v", fields, want)
	}
	if !regexp.MustCompile(`sizeof\(MsaDecodePipeParams\) == 256`).Match(src) {
		t.Error("msa_params.h does not static_assert the 256-byte MsaDecodePipeParams")
	}
	var p decodePipeKernelParams
	if unsafe.Sizeof(p) != 256 || unsafe.Offsetof(p.SplitCounts) != unsafe.Sizeof(p.Decode) || unsafe.Offsetof(p.Counters) != 248 {
		t.Errorf("decodePipeKernelParams: size %d, split_counts at %d, counters at %d; want 256, %d, 248",
			unsafe.Sizeof(p), unsafe.Offsetof(p.SplitCounts), unsafe.Offsetof(p.Counters), unsafe.Sizeof(p.Decode))
	}
}

func TestTCDecodePipePlan(t *testing.T) {
	ok := DecodeArgs{QDtype: BF16, KVDtype: BF16, D: 128, PVRound: RoundBF16}
	name, l, why := TCDecodePipePlan(ArchSM90, &ok)
	if why != "" || name != fatbin.SM90DecPipeBF16D128 || l != fatbin.DecodePipeLaunch[name] {
		t.Fatalf("bf16 d128: %q %+v %q", name, l, why)
	}
	for what, c := range map[string]struct {
		arch Arch
		mod  func(a *DecodeArgs)
		want string
	}{
		"sm100":      {ArchSM100, func(*DecodeArgs) {}, "sm_90a kernel"},
		"d256":       {ArchSM90, func(a *DecodeArgs) { a.D = 256 }, "head dim 256"},
		"nvfp4":      {ArchSM90, func(a *DecodeArgs) { a.KVDtype = NVFP4 }, "no pipelined decode variant"},
		"fp8 round":  {ArchSM90, func(a *DecodeArgs) { a.QDtype, a.KVDtype = E4M3, E4M3 }, "pv_round must be E4M3"},
		"misaligned": {ArchSM90, func(a *DecodeArgs) { a.K = 8 }, "16-byte aligned"},
	} {
		a := ok
		c.mod(&a)
		if name, _, why := TCDecodePipePlan(c.arch, &a); !strings.Contains(why, c.want) || name != "" {
			t.Errorf("%s: %q, why %q; want a refusal containing %q", what, name, why, c.want)
		}
	}
	names := PipeNames(ArchSM90)
	if len(names) != len(fatbin.DecodePipeLaunch) {
		t.Errorf("PipeNames lists %d kernels, the launch table %d", len(names), len(fatbin.DecodePipeLaunch))
	}
	for _, n := range names {
		if _, found := fatbin.DecodePipeLaunch[n]; !found {
			t.Errorf("%s is not in fatbin.DecodePipeLaunch", n)
		}
	}
	if PipeNames(ArchSM80) != nil || PipeNames(ArchSM100) != nil {
		t.Error("the pipelined kernels are looked up on sm90 only")
	}
}

func TestPipeCounters(t *testing.T) {
	p := plan.DecodeParams{Batch: 3, SeqlenQ: 40, HQ: 8, Hkv: 2, PageSize: 16, Workers: 132, MaxPagesPerSeq: 100, FixedSplitPages: 4,
		Executor: plan.CUDAExecutor}
	s, err := plan.BuildDecodeSchedule(nil, []int32{1600, 30, 0}, p)
	if err != nil {
		t.Fatal(err)
	}
	if !s.SplitKV || s.NumQTiles < 2 {
		t.Fatalf("want a split schedule with several q tiles, got split %v, %d tiles", s.SplitKV, s.NumQTiles)
	}
	if got, want := PipeCounters(s), 3*s.NumQTiles*2; got != want {
		t.Errorf("PipeCounters = %d, want batch x q tiles x Hkv = %d", got, want)
	}
	p.FixedSplitPages, p.DisableSplit = 0, true
	if s, err = plan.BuildDecodeSchedule(s, []int32{1600, 30, 0}, p); err != nil {
		t.Fatal(err)
	}
	if PipeCounters(s) != 0 || PipeCounters(nil) != 0 {
		t.Error("no counters without a split")
	}
	q := newDecodePipeParams(decodeKernelParams{SplitKV: 0}, 64, 128)
	if q.SplitCounts != 0 || q.Counters != 0 {
		t.Error("a block without split-KV must carry no counters")
	}
	if q = newDecodePipeParams(decodeKernelParams{SplitKV: 1}, 64, 128); q.SplitCounts != 64 || q.Counters != 128 {
		t.Errorf("split block: %+v", q)
	}
}
