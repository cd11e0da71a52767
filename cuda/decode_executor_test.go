package cuda

import (
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/plan"
)

// TestDecodeRefusesCPUPlan: a decode schedule planned for the CPU executor
// (its split follows goroutine workers) is refused by the CUDA launcher with
// an error naming both executors; the same schedule planned for the CUDA
// executor passes that check.
func TestDecodeRefusesCPUPlan(t *testing.T) {
	da := DecodeArgs{Q: 0x10000, K: 0x20000, V: 0x30000, PageTable: 0x100, SequsedK: 0x200, Out: 0x40000, LSE: 0x50000, PageTableStride: 1,
		Batch: 1, SeqlenQ: 1, Hq: 1, Hkv: 1, D: 64, PageSize: 16, QDtype: BF16, KVDtype: BF16}
	p := plan.DecodeParams{Batch: 1, SeqlenQ: 1, HQ: 1, Hkv: 1, PageSize: 16, Workers: 8, MaxPagesPerSeq: 1}
	s, err := plan.BuildDecodeSchedule(nil, []int32{16}, p)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = newDecodeKernelParams(&da, s, DecodePlanPtrs{})
	if err == nil || !strings.Contains(err.Error(), "planned for the cpu executor") || !strings.Contains(err.Error(), "planned for the cuda executor") {
		t.Fatalf("CPU-planned schedule on the CUDA path: %v", err)
	}
	p.Executor = plan.CUDAExecutor
	if s, err = plan.BuildDecodeSchedule(nil, []int32{16}, p); err != nil {
		t.Fatal(err)
	}
	if _, _, err = newDecodeKernelParams(&da, s, DecodePlanPtrs{}); err != nil && strings.Contains(err.Error(), "executor") {
		t.Fatalf("CUDA-planned schedule refused: %v", err)
	}
}
