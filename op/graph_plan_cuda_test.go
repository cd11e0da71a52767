package op

import (
	"testing"

	"github.com/sparseattn/msa/kernels/plan"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestPlanForCUDAOption: PlanForCUDA plans the decode schedule node with
// the CUDA executor's split (every SM gets an item at batch 1), a decode
// node with such a schedule refuses the CPU path naming both paths, and the
// option's bad values and its conflict with Workers are errors.
func TestPlanForCUDAOption(t *testing.T) {
	const pages, page = 256, 128 // batch 1 x 32K tokens
	g, pt, su := onePageRunGraph(t, pages, page)
	_, err := DecodeSchedule(pt, su, Heads(16, 1), PageSize(page), PlanForCUDA(0))
	wantArgErr(t, err, "PlanForCUDA", "streaming-multiprocessor count")
	_, err = DecodeSchedule(pt, su, Heads(16, 1), PageSize(page), PlanForCUDA(132), Workers(8))
	wantArgErr(t, err, "PlanForCUDA/Workers", "at most one")

	sched, err := DecodeSchedule(pt, su, Heads(16, 1), PageSize(page), PlanForCUDA(132))
	if err != nil {
		t.Fatal(err)
	}
	so := sched.Op().(*decodeSchedOp)
	if so.l.p.Executor != plan.CUDAExecutor || so.l.p.Workers != 132 {
		t.Fatalf("planned params %+v", so.l.p)
	}
	v, err := so.Do(pt.Value(), su.Value())
	if err != nil {
		t.Fatal(err)
	}
	s := so.l.unpack(v.(*tensor.Dense).Data().([]int32))
	if s.WorkCount < 132 || !s.SplitKV {
		t.Fatalf("CUDA plan at batch 1 x 32K: %d items (chunk %d pages), want >= 132", s.WorkCount, s.ChunkPages)
	}
	cpuSched, err := DecodeSchedule(pt, su, Heads(16, 1), PageSize(page), Workers(132))
	if err != nil {
		t.Fatal(err)
	}
	cv, err := cpuSched.Op().(*decodeSchedOp).Do(pt.Value(), su.Value())
	if err != nil {
		t.Fatal(err)
	}
	if cs := cpuSched.Op().(*decodeSchedOp).l.unpack(cv.(*tensor.Dense).Data().([]int32)); cs.WorkCount >= 132 {
		t.Fatalf("the CPU rule with 132 workers gives %d items: the test above cannot tell the rules apart", cs.WorkCount)
	}

	_, err = decodeNodeOf(t, g, pages, page, pt, su, sched).Do()
	wantArgErr(t, err, "schedule", "planned for the cuda path")
	wantArgErr(t, err, "schedule", "runs on (DecodeSchedule without PlanForCUDA)")
}

// TestCPUPlanRefusedOnCUDA is the reverse of TestPlanForCUDAOption's last
// check: a decode node whose schedule was planned for the CPU path (its
// split follows goroutine workers) is refused by the CUDA path's check
// (CUDADo runs it before touching the GPU) with an error naming both
// paths, and accepted by the CPU path's.
func TestCPUPlanRefusedOnCUDA(t *testing.T) {
	const pages, page = 16, 128
	g, pt, su := onePageRunGraph(t, pages, page)
	sched, err := DecodeSchedule(pt, su, Heads(16, 1), PageSize(page), Workers(8))
	if err != nil {
		t.Fatal(err)
	}
	da := decodeNodeOf(t, g, pages, page, pt, su, sched)
	err = da.executorCheck(plan.CUDAExecutor)
	wantArgErr(t, err, "schedule", "planned for the cuda path it runs on (DecodeSchedule with PlanForCUDA(sms))")
	wantArgErr(t, err, "schedule", "one planned for the cpu path (DecodeSchedule without PlanForCUDA, 8 workers)")
	if err := da.executorCheck(plan.CPUExecutor); err != nil {
		t.Errorf("CPU-planned schedule on the CPU path: %v", err)
	}
}

// onePageRunGraph is a graph with the page table and seqused_k of one
// request holding pages full pages 0, 1, ... (16 query heads, 1 KV head).
func onePageRunGraph(t *testing.T, pages, page int) (g *G.ExprGraph, pt, su *G.Node) {
	g = G.NewGraph()
	ptv := make([]int32, pages)
	for i := range ptv {
		ptv[i] = int32(i)
	}
	return g, gnode(t, g, "pt", i32T([]int{1, pages}, ptv...)), gnode(t, g, "su", i32T([]int{1}, int32(pages*page)))
}

// decodeNodeOf is the dense BF16 decode node (D 128) of onePageRunGraph's
// request with schedule sched.
func decodeNodeOf(t *testing.T, g *G.ExprGraph, pages, page int, pt, su, sched *G.Node) *decodeAttnOp {
	q := G.NewTensor(g, BFloat16, 3, G.WithShape(1, 16, 128), G.WithName("q"))
	k := G.NewTensor(g, BFloat16, 4, G.WithShape(pages, 1, page, 128), G.WithName("k"))
	v := G.NewTensor(g, BFloat16, 4, G.WithShape(pages, 1, page, 128), G.WithName("v"))
	out, err := DecodeAttention(q, k, v, pt, su, sched, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out.Op().(*decodeAttnOp)
}
