package cuda

import (
	"math"
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
// then split_counts, counters, counter_stride and a pad, 264 bytes in all.
func TestDecodePipeParamsLayout(t *testing.T) {
	src, err := os.ReadFile("../kernels/cuda/shared/msa_params.h")
	if err != nil {
		t.Fatal(err)
	}
	fields := cFields(t, string(src), "MsaDecodePipeParams")
	want := [][2]string{{"MsaDecodeParams", "d"}, {"uint64_t", "splitcounts"}, {"uint64_t", "counters"}, {"int32_t", "counterstride"}, {"int32_t", "pad0"}}
	if !slices.Equal(fields, want) {
		t.Fatalf("MsaDecodePipeParams fields %v, want %v", fields, want)
	}
	if !regexp.MustCompile(`sizeof\(MsaDecodePipeParams\) == 264`).Match(src) {
		t.Error("msa_params.h does not static_assert the 264-byte MsaDecodePipeParams")
	}
	var p decodePipeKernelParams
	d := unsafe.Sizeof(p.Decode)
	if unsafe.Sizeof(p) != 264 || unsafe.Offsetof(p.SplitCounts) != d || unsafe.Offsetof(p.Counters) != d+8 || unsafe.Offsetof(p.CounterStride) != d+16 {
		t.Errorf("decodePipeKernelParams: size %d, split_counts at %d, counters at %d, counter_stride at %d; want 264, %d, %d, %d",
			unsafe.Sizeof(p), unsafe.Offsetof(p.SplitCounts), unsafe.Offsetof(p.Counters), unsafe.Offsetof(p.CounterStride), d, d+8, d+16)
	}
}

func TestTCDecodePipePlan(t *testing.T) {
	ok := DecodeArgs{QDtype: BF16, KVDtype: BF16, D: 128, PVRound: RoundBF16}
	name, l, _, why := TCDecodePipePlan(ArchSM90, &ok, FP8PVWiden)
	if why != "" || name != fatbin.SM90DecPipeBF16D128 || l != fatbin.DecodePipeLaunch[name] {
		t.Fatalf("bf16 d128: %q %+v %q", name, l, why)
	}
	for what, c := range map[string]struct {
		arch Arch
		mod  func(a *DecodeArgs)
		want string
	}{
		"sm100":      {ArchSM100, func(*DecodeArgs) {}, "sm_90a kernel"},
		"d96":        {ArchSM90, func(a *DecodeArgs) { a.D = 96 }, "head dim 96"},
		"f16 q":      {ArchSM90, func(a *DecodeArgs) { a.QDtype, a.KVDtype = F16, NVFP4 }, "no pipelined decode variant"},
		"fp8 round":  {ArchSM90, func(a *DecodeArgs) { a.QDtype, a.KVDtype = E4M3, E4M3 }, "pv_round must be E4M3"},
		"misaligned": {ArchSM90, func(a *DecodeArgs) { a.K = 8 }, "16-byte aligned"},
	} {
		a := ok
		c.mod(&a)
		if name, _, _, why := TCDecodePipePlan(c.arch, &a, FP8PVFP8); !strings.Contains(why, c.want) || name != "" {
			t.Errorf("%s: %q, why %q; want a refusal containing %q", what, name, why, c.want)
		}
	}
	for _, c := range []struct {
		q, kv Dtype
		d     int
		want  string
	}{
		{BF16, BF16, 256, fatbin.SM90DecPipeBF16D256}, {E4M3, E4M3, 256, fatbin.SM90DecPipeFP8D256},
		{BF16, E4M3, 256, fatbin.SM90DecPipeBF16FP8D256}, {BF16, NVFP4, 64, fatbin.SM90DecPipeNVFP4D64},
		{E4M3, NVFP4, 128, fatbin.SM90DecPipeNVFP4D128}, {BF16, NVFP4, 256, fatbin.SM90DecPipeNVFP4D256},
	} {
		a := ok
		a.QDtype, a.KVDtype, a.D = c.q, c.kv, c.d
		if c.q == E4M3 && c.kv == E4M3 {
			a.PVRound = RoundE4M3
		}
		if name, l, _, why := TCDecodePipePlan(ArchSM90, &a, FP8PVWiden); why != "" || name != c.want || l != fatbin.DecodePipeLaunch[c.want] {
			t.Errorf("Q %s, K/V %s, D %d: %q %+v, why %q; want %s", c.q, c.kv, c.d, name, l, why, c.want)
		}
	}
	// MSA_CUDA_FP8PV=fp8: the fp8pv kernels for E4M3 Q/K/V at D <= 128,
	// the widened-V kernel with a note at D 256, other variants unchanged.
	for _, c := range []struct {
		q, kv      Dtype
		d          int
		want, note string
	}{
		{E4M3, E4M3, 64, fatbin.SM90DecPipeFP8PVD64, ""}, {E4M3, E4M3, 128, fatbin.SM90DecPipeFP8PVD128, ""},
		{E4M3, E4M3, 256, fatbin.SM90DecPipeFP8D256, "head dim 256"}, {BF16, E4M3, 128, fatbin.SM90DecPipeBF16FP8D128, ""},
		{BF16, BF16, 128, fatbin.SM90DecPipeBF16D128, ""}, {E4M3, NVFP4, 128, fatbin.SM90DecPipeNVFP4D128, ""},
	} {
		a := ok
		a.QDtype, a.KVDtype, a.D = c.q, c.kv, c.d
		if c.q == E4M3 && c.kv == E4M3 {
			a.PVRound = RoundE4M3
		}
		name, l, note, why := TCDecodePipePlan(ArchSM90, &a, FP8PVFP8)
		if why != "" || name != c.want || l != fatbin.DecodePipeLaunch[c.want] || (c.note == "") != (note == "") || !strings.Contains(note, c.note) {
			t.Errorf("fp8pv: Q %s, K/V %s, D %d: %q %+v, note %q, why %q; want %s, note %q", c.q, c.kv, c.d, name, l, note, why, c.want, c.note)
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
	if got, want := PipeCounters(s), 3*s.NumQTiles*2*PipeCounterStride(s); got != want {
		t.Errorf("PipeCounters = %d, want batch x q tiles x Hkv x stride = %d", got, want)
	}
	q := newDecodePipeParams(decodeKernelParams{SplitKV: 1}, s, 64, 128)
	if q.SplitCounts != 64 || q.Counters != 128 || int(q.CounterStride) != PipeCounterStride(s) {
		t.Errorf("split block: %+v", q)
	}
	p.FixedSplitPages, p.DisableSplit = 0, true
	if s, err = plan.BuildDecodeSchedule(s, []int32{1600, 30, 0}, p); err != nil {
		t.Fatal(err)
	}
	if PipeCounters(s) != 0 || PipeCounters(nil) != 0 {
		t.Error("no counters without a split")
	}
	if q = newDecodePipeParams(decodeKernelParams{SplitKV: 0}, s, 64, 128); q.SplitCounts != 0 || q.Counters != 0 || q.CounterStride != 0 {
		t.Error("a block without split-KV must carry no counters")
	}
}

// TestPipeBlock pins the two-level combine's blocks: every split in
// exactly one block, at most 16 (n <= 16) or ceil(sqrt(n)) splits per
// block and as many blocks, and the stride covering every count up to the
// schedule's largest.
func TestPipeBlock(t *testing.T) {
	for n := 1; n <= 3000; n++ {
		g := PipeBlock(n)
		nblk := (n + g - 1) / g
		c := int(math.Ceil(math.Sqrt(float64(n))))
		switch {
		case n <= 16 && (g != n || nblk != 1):
			t.Fatalf("n %d: block %d, %d blocks; want one block of all", n, g, nblk)
		case n > 16 && (g != c || nblk > c || (nblk-1)*g >= n):
			t.Fatalf("n %d: block %d, %d blocks; want ceil(sqrt(n)) = %d, at most as many blocks, none empty", n, g, nblk, c)
		}
		s := &plan.DecodeSchedule{MaxSplits: n}
		if st := PipeCounterStride(s); st < 1+nblk {
			t.Fatalf("n %d: stride %d < 1 + %d blocks", n, st, nblk)
		}
	}
}
