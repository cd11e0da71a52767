//go:build cuda

package cuda

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"

	"github.com/sparseattn/msa/internal/allocs"
	"github.com/sparseattn/msa/kernels/cuda/fatbin"
	"github.com/sparseattn/msa/kernels/plan"
)

// TestDecodeRunAllocatesNothing: once a decode's tensors and shapes have
// been seen, Kernels.Decode and Prepared.Launch allocate nothing (the
// plan/run contract's 0 allocations per run) on every launch route: the
// sm_90a TMA decode + combine, the pipelined decode with its fused
// combine (and, under MSA_CUDA_FP8PV=fp8, its fp8pv kernels at D 64 and
// 128, the widened-V kernel at D 256 with the note in Fallbacks), a
// fallback with a recorded reason, the portable kernels; a different
// layer's K/V (another key) costs allocations once, then none. The
// recording fake checks that the expected kernels ran.
func TestDecodeRunAllocatesNothing(t *testing.T) {
	const fp8pvNote = "msa_sm90_decpipe_fp8pv"
	for _, c := range []struct {
		name     string
		arch     Arch
		kernel   DecodeKernel
		fp8pv    FP8PV
		qdt      Dtype
		kvdt     Dtype
		round    Round
		d        int
		want     []string
		fallback string // a Fallbacks key the route must record
		fused    bool   // an SM100 decode whose parameter block carries the fused combine's counters
	}{
		{name: "sm90 old", arch: ArchSM90, kernel: DecodeOld, qdt: BF16, kvdt: BF16, round: RoundBF16, d: 128,
			want: []string{"msa_sm90_decode_bf16_d128", fatbin.CombineD128}},
		{name: "sm90 new", arch: ArchSM90, kernel: DecodeNew, qdt: BF16, kvdt: BF16, round: RoundBF16, d: 128,
			want: []string{fatbin.SM90DecPipeBF16D128}},
		{name: "sm90 new fp8", arch: ArchSM90, kernel: DecodeNew, qdt: E4M3, kvdt: E4M3, round: RoundE4M3, d: 128,
			want: []string{fatbin.SM90DecPipeFP8D128}},
		{name: "sm90 new fp8pv d128", arch: ArchSM90, kernel: DecodeNew, fp8pv: FP8PVFP8, qdt: E4M3, kvdt: E4M3, round: RoundE4M3, d: 128,
			want: []string{fatbin.SM90DecPipeFP8PVD128}},
		{name: "sm90 new fp8pv d64", arch: ArchSM90, kernel: DecodeNew, fp8pv: FP8PVFP8, qdt: E4M3, kvdt: E4M3, round: RoundE4M3, d: 64,
			want: []string{fatbin.SM90DecPipeFP8PVD64}},
		{name: "sm90 new fp8pv d256", arch: ArchSM90, kernel: DecodeNew, fp8pv: FP8PVFP8, qdt: E4M3, kvdt: E4M3, round: RoundE4M3, d: 256,
			want: []string{fatbin.SM90DecPipeFP8D256}, fallback: fp8pvNote},
		{name: "sm90 fallback", arch: ArchSM90, kernel: DecodeNew, qdt: E4M3, kvdt: E4M3, round: RoundBF16, d: 128,
			want: []string{fatbin.DecodeD128, fatbin.CombineD128}, fallback: "msa_sm90_decpipe"},
		{name: "portable", arch: ArchPortable, kernel: DecodeOld, qdt: BF16, kvdt: BF16, round: RoundBF16, d: 128,
			want: []string{fatbin.DecodeD128, fatbin.CombineD128}},
		{name: "sm100 old", arch: ArchSM100, kernel: DecodeOld, qdt: BF16, kvdt: BF16, round: RoundBF16, d: 128,
			want: []string{fatbin.SM100DecodeBF16D128, fatbin.CombineD128}},
		{name: "sm100 new", arch: ArchSM100, kernel: DecodeNew, qdt: BF16, kvdt: BF16, round: RoundBF16, d: 128,
			want: []string{fatbin.SM100DecodeBF16D128}, fused: true},
		{name: "sm100 new fp8 d256", arch: ArchSM100, kernel: DecodeNew, qdt: E4M3, kvdt: E4M3, round: RoundE4M3, d: 256,
			want: []string{fatbin.SM100DecodeFP8D256}, fused: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var f FakeDriver
			k := FakeKernels(c.arch, &f)
			k.decode, k.fp8pv = c.kernel, c.fp8pv
			const pages, page = 64, 128
			p := plan.DecodeParams{Batch: 2, SeqlenQ: 1, HQ: 16, Hkv: 1, PageSize: page, Workers: 132, MaxPagesPerSeq: pages,
				Executor: plan.CUDAExecutor}
			s, err := plan.BuildDecodeSchedule(nil, []int32{pages * page, 1000}, p)
			if err != nil {
				t.Fatal(err)
			}
			if !s.SplitKV {
				t.Fatal("want a split-KV schedule (the combine's route)")
			}
			a := &DecodeArgs{Q: 0x10000, K: 0x100000, V: 0x200000, PageTable: 0x300, SequsedK: 0x400, Out: 0x20000, LSE: 0x30000,
				OPartial: 0x40000, LSEPartial: 0x50000, PageTableStride: pages, Batch: 2, SeqlenQ: 1, Hq: 16, Hkv: 1, D: c.d,
				PageSize: page, QDtype: c.qdt, KVDtype: c.kvdt, PVRound: c.round, NumPages: 2 * pages}
			layer2 := *a
			layer2.K, layer2.V = 0x600000, 0x700000
			run := func(x *DecodeArgs) func() {
				return func() {
					if err := k.Decode(nil, x, s); err != nil {
						t.Fatal(err)
					}
				}
			}
			run(a)()
			if got := k.LastKernels(); !slices.Equal(got, c.want) {
				t.Fatalf("launched %v, want %v", got, c.want)
			}
			if f.Launches != len(c.want) {
				t.Fatalf("%d driver launches, want %d", f.Launches, len(c.want))
			}
			if n := allocs.Warm(50, run(a)); n != 0 {
				t.Errorf("Decode: %v allocations per run, want 0", n)
			}
			run(&layer2)() // a new key: its choice is made once
			for _, x := range []*DecodeArgs{a, &layer2} {
				if n := allocs.Warm(20, run(x)); n != 0 {
					t.Errorf("Decode of layer K %#x: %v allocations per run, want 0", x.K, n)
				}
			}
			if c.fallback != "" && k.Fallbacks()[c.fallback] == "" {
				t.Errorf("Fallbacks does not record %s: %v", c.fallback, k.Fallbacks())
			}
			if c.fallback != fp8pvNote && k.Fallbacks()[fp8pvNote] != "" {
				t.Errorf("Fallbacks records an fp8pv note on a route with its kernel: %v", k.Fallbacks())
			}
			pl, err := k.PrepareDecode(nil, a, s)
			if err != nil {
				t.Fatal(err)
			}
			if c.arch == ArchSM100 {
				// The SM100 decode takes MsaDecodePipeParams: counters only
				// when it merges the splits itself.
				pp := (*decodePipeKernelParams)(unsafe.Pointer(&pl.steps[0].value[0]))
				if len(pl.steps[0].value) != int(unsafe.Sizeof(*pp)) || (pp.Counters != 0) != c.fused || pp.Decode.Out != a.Out ||
					c.fused && (pp.SplitCounts == 0 || pp.CounterStride < 2) {
					t.Errorf("SM100 decode block: %d bytes, counters %#x, split counts %#x, stride %d, out %#x",
						len(pl.steps[0].value), pp.Counters, pp.SplitCounts, pp.CounterStride, pp.Decode.Out)
				}
			}
			checkPreparedLaunch(t, &f, pl, len(c.want))
			if err := k.Decode(nil, a, s); err != nil {
				t.Fatal(err)
			}
			if err := pl.Launch(nil); err == nil {
				t.Error("a Prepared outlived a later Decode's uploads")
			}
		})
	}
}

// TestPrepareDecodeOwnsItsSteps: a Prepared keeps its own copy of the
// parameter blocks, so a later Decode (which rewrites Kernels' storage)
// does not change what it holds.
func TestPrepareDecodeOwnsItsSteps(t *testing.T) {
	var f FakeDriver
	k := FakeKernels(ArchSM90, &f)
	k.decode = DecodeNew
	p := plan.DecodeParams{Batch: 1, SeqlenQ: 1, HQ: 8, Hkv: 1, PageSize: 16, Workers: 132, MaxPagesPerSeq: 4, Executor: plan.CUDAExecutor}
	s, err := plan.BuildDecodeSchedule(nil, []int32{64}, p)
	if err != nil {
		t.Fatal(err)
	}
	a := DecodeArgs{Q: 0x10000, K: 0x100000, V: 0x200000, PageTable: 0x300, SequsedK: 0x400, Out: 0x20000, LSE: 0x30000,
		OPartial: 0x40000, LSEPartial: 0x50000, PageTableStride: 4, Batch: 1, SeqlenQ: 1, Hq: 8, Hkv: 1, D: 64, PageSize: 16,
		QDtype: BF16, KVDtype: BF16, PVRound: RoundBF16, NumPages: 4}
	pl, err := k.PrepareDecode(nil, &a, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(pl.steps) != 1 || pl.steps[0].name != fatbin.SM90DecPipeBF16D64 {
		t.Fatalf("prepared %v", pl.Kernels())
	}
	held := fmt.Sprint(pl.steps[0].value)
	b := a
	b.Out = 0x90000
	if err := k.Decode(nil, &b, s); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(pl.steps[0].value) != held {
		t.Error("a later Decode rewrote the parameter block a Prepared holds")
	}
	if got := (*decodePipeKernelParams)(unsafe.Pointer(&pl.steps[0].value[0])).Decode.Out; got != a.Out {
		t.Errorf("prepared block's out = %#x, want %#x", got, a.Out)
	}
}
