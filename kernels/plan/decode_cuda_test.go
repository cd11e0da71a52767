package plan

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"
)

// gpuSMCounts are SM counts of current data-centre GPUs: H100 SXM 132,
// H100 PCIe 114, A100 108, B200 148, and a small part (RTX-class 46).
var gpuSMCounts = []int{132, 114, 108, 148, 46}

// fillsSMs reports whether schedule s of seq under CUDA params p meets the
// CUDA executor's goal: at least one item per SM, or the cap (chunks
// already at the smallest automatic chunk, max(ceil(128/page),
// ceil(max_pages/256)), or no split where the batch
// alone fills the SMs or a request is no longer than the smallest chunk),
// and fewer than 2 items per SM where the chunk is above the cap.
func fillsSMs(s *DecodeSchedule, p DecodeParams) error {
	minC := int(gpuMinChunk(p.PageSize))
	units := p.Batch * s.NumQTiles * p.Hkv
	maxP := int(slices.Max(s.Pages))
	capC := max(minC, (maxP+maxAutoSplits-1)/maxAutoSplits) // the smallest chunk the rule may pick
	switch {
	case s.WorkCount >= p.Workers && s.WorkCount < 2*p.Workers:
	case s.WorkCount >= p.Workers && (units >= p.Workers || s.ChunkPages == capC):
	case s.WorkCount < p.Workers && s.SplitKV && s.ChunkPages == capC:
	case s.WorkCount < p.Workers && s.MaxSplits == 1 && maxP <= minC:
	default:
		return fmt.Errorf("%d items on %d SMs (chunk %d pages, min %d, split %v, max splits %d)",
			s.WorkCount, p.Workers, s.ChunkPages, minC, s.SplitKV, s.MaxSplits)
	}
	if s.MaxSplits > maxAutoSplits {
		return fmt.Errorf("%d splits of one request: more than %d", s.MaxSplits, maxAutoSplits)
	}
	return nil
}

// TestDecodeCUDASplitFillsSMs: planned for the CUDA executor, batch 1-8 at
// 4K-128K contexts gives every SM an item (or the documented cap) for the
// SM counts of several GPUs, page sizes and GQA ratios.
func TestDecodeCUDASplitFillsSMs(t *testing.T) {
	for _, sms := range gpuSMCounts {
		for _, page := range []int{16, 64, 128} {
			for _, hkv := range []int{1, 2, 8} {
				for batch := 1; batch <= 8; batch++ {
					for ctx := 4096; ctx <= 131072; ctx *= 2 {
						p := DecodeParams{Batch: batch, SeqlenQ: 1, HQ: 16, Hkv: hkv, PageSize: page, Workers: sms,
							MaxPagesPerSeq: ctx / page, Executor: CUDAExecutor}
						seq := make([]int32, batch)
						for b := range seq {
							seq[b] = int32(ctx - b*ctx/(2*batch)) // a mildly ragged batch
						}
						for _, fixed := range []bool{false, true} {
							p.FixedCapacity = fixed
							s := mustDecode(t, seq, p)
							if err := fillsSMs(s, p); err != nil {
								t.Fatalf("%d SMs, page %d, Hkv %d, batch %d, %d tokens, fixed capacity %v: %v", sms, page, hkv, batch, ctx, fixed, err)
							}
						}
					}
				}
			}
		}
	}
	// the bench shape at batch 1 x 32K on an H100: 256 pages on 132 SMs
	// give chunks of 1 page (256 items); at 128K chunks of 7 pages (147)
	for _, c := range []struct{ ctx, chunk, items int }{{32768, 1, 256}, {131072, 7, 147}, {4096, 1, 32}} {
		p := DecodeParams{Batch: 1, SeqlenQ: 1, HQ: 16, Hkv: 1, PageSize: 128, Workers: 132, MaxPagesPerSeq: c.ctx / 128, Executor: CUDAExecutor}
		s := mustDecode(t, []int32{int32(c.ctx)}, p)
		if s.ChunkPages != c.chunk || s.WorkCount != c.items || !s.SplitKV {
			t.Fatalf("%d tokens: chunk %d, %d items, split %v; want chunk %d, %d items", c.ctx, s.ChunkPages, s.WorkCount, s.SplitKV, c.chunk, c.items)
		}
	}
}

// TestDecodeCPURuleFailsSMFill is the mutation check of
// TestDecodeCUDASplitFillsSMs' predicate: the CPU executor's rule, given
// the SM count as workers, leaves SMs idle at batch 1 (chunks of at least
// 16 pages) and the predicate says so.
func TestDecodeCPURuleFailsSMFill(t *testing.T) {
	p := DecodeParams{Batch: 1, SeqlenQ: 1, HQ: 16, Hkv: 1, PageSize: 128, Workers: 132, MaxPagesPerSeq: 256}
	s := mustDecode(t, []int32{32768}, p)
	if err := fillsSMs(s, p); err == nil {
		t.Fatalf("the CPU rule's %d items (chunk %d) passed the SM-fill check", s.WorkCount, s.ChunkPages)
	}
}

// TestDecodeCPUExecutorUnchanged pins the CPU rule's choices at the shapes
// the CUDA rule changes: the Executor field leaves the CPU path as it was.
func TestDecodeCPUExecutorUnchanged(t *testing.T) {
	for _, c := range []struct{ batch, pages, workers, chunk int }{
		{1, 256, 132, 16}, {1, 1024, 132, 16}, {4, 256, 132, 16}, {1, 256, 8, 32}, {2, 64, 4, 32}, {1, 8, 132, 8},
	} {
		seq := make([]int32, c.batch)
		for b := range seq {
			seq[b] = int32(c.pages * 128)
		}
		s := mustDecode(t, seq, dp(c.batch, 1, c.workers, c.pages))
		if s.ChunkPages != c.chunk {
			t.Fatalf("CPU rule, batch %d, %d pages, %d workers: chunk %d, want %d", c.batch, c.pages, c.workers, s.ChunkPages, c.chunk)
		}
	}
}

// TestDecodeExecutorMismatch: a schedule planned for one executor is
// refused on the other, naming both.
func TestDecodeExecutorMismatch(t *testing.T) {
	cpu := DecodeParams{Batch: 1, SeqlenQ: 1, HQ: 16, Hkv: 1, PageSize: 128, Workers: 132, MaxPagesPerSeq: 256}
	gpu := cpu
	gpu.Executor = CUDAExecutor
	seq := []int32{32768}
	wantErr(t, ValidateDecodeSchedule(mustDecode(t, seq, cpu), seq, gpu), "stale", "Executor planned as cpu, got cuda")
	wantErr(t, ValidateDecodeSchedule(mustDecode(t, seq, gpu), seq, cpu), "stale", "Executor planned as cuda, got cpu")
	bad := gpu
	bad.Executor = 7
	_, err := BuildDecodeSchedule(nil, seq, bad)
	wantErr(t, err, "executor = DecodeExecutor(7)", "cpu or cuda")
}

// TestDecodeCUDARandom: random CUDA-executor params and lengths build valid,
// deterministic schedules whose fixed capacity covers every length.
func TestDecodeCUDARandom(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for it := 0; it < 300; it++ {
		p := DecodeParams{
			Batch: 1 + rng.Intn(8), SeqlenQ: 1 + rng.Intn(4), Hkv: 1 + rng.Intn(4),
			PageSize: []int{1, 16, 64, 128, 256}[rng.Intn(5)], Workers: 1 + rng.Intn(200),
			MaxPagesPerSeq: 1 + rng.Intn(2000), FixedCapacity: rng.Intn(2) == 0, Executor: CUDAExecutor,
		}
		p.HQ = p.Hkv * []int{1, 2, 4, 8, 16}[rng.Intn(5)]
		seq := make([]int32, p.Batch)
		for b := range seq {
			seq[b] = int32(rng.Intn(p.MaxPagesPerSeq*p.PageSize + 1))
		}
		s := mustDecode(t, seq, p)
		again := mustDecode(t, seq, p)
		if s.ChunkPages != again.ChunkPages || !slices.Equal(s.KVTile, again.KVTile) || !slices.Equal(s.OIndptr, again.OIndptr) {
			t.Fatalf("it %d: two builds differ", it)
		}
		if err := fillsSMs(s, p); err != nil {
			t.Fatalf("it %d %+v: %v", it, p, err)
		}
		if p.FixedCapacity {
			full := make([]int32, p.Batch)
			for b := range full {
				full[b] = int32(p.MaxPagesPerSeq * p.PageSize)
			}
			w := mustDecode(t, full, p)
			if w.Capacity != s.Capacity || w.PartialRows != s.PartialRows {
				t.Fatalf("it %d: fixed capacity differs", it)
			}
		}
	}
}
