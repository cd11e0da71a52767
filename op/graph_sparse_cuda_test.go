//go:build cuda

package op

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	mcuda "github.com/sparseattn/msa/cuda"
	"github.com/sparseattn/msa/internal/allocs"
	"github.com/sparseattn/msa/kernels/lowp"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// sparseCUDACase is a sparse prefill node (BF16, D 128, two sequences of
// 100 and 200 queries over 500 and 700 keys, 16 query heads, 1 KV head,
// blocks of 64 keys, top-4) with its CSR and schedule nodes, and host
// tensors for every input. Paged, K/V are 22 pages of 64 keys (HND), the
// page table [2, 11] a permutation of them, seqused_k the key counts.
// NVFP4, K/V are packed NVFP4 with their block scales and global scales.
type sparseCUDACase struct {
	op       *sparseAttnOp
	csrOp    *csrOp
	schedOp  *schedOp
	q2k      *tensor.Dense
	cuQ, cuK *tensor.Dense
	pt, su   *tensor.Dense // paged only
	kGlobal  *tensor.Dense // NVFP4 only
	in       []G.Value
	out      *tensor.Dense // the prealloc the tape machine would pass
}

func newSparseCUDACase(t *testing.T, paged, nvfp4 bool) *sparseCUDACase {
	t.Helper()
	const totalQ, totalK, hq, d, topK, blk, pages, cols = 300, 1200, 16, 128, 4, 64, 22, 11
	g := G.NewGraph()
	cuQ, cuK := i32T([]int{3}, 0, 100, 300), i32T([]int{3}, 0, 500, 1200)
	q2k := i32T([]int{1, totalQ, topK})
	fillQ2K(q2k, cuQ, cuK, blk, 1)
	q, k, v := bf16T(totalQ, hq, d), bf16T(totalK, 1, d), bf16T(totalK, 1, d)
	var opts []Option
	var pt, su *tensor.Dense
	if paged {
		k, v = bf16T(pages, 1, blk, d), bf16T(pages, 1, blk, d)
		perm := rand.New(rand.NewPCG(4, 4)).Perm(pages)
		ptv := make([]int32, 2*cols)
		for i := range ptv {
			ptv[i] = int32(perm[i])
		}
		pt, su = i32T([]int{2, cols}, ptv...), i32T([]int{2}, 500, 700)
		opts = append(opts, Paged(gnode(t, g, "pt", pt), gnode(t, g, "su", su)))
	}
	var nv []*tensor.Dense // k_scale, v_scale, k_global, v_global
	if nvfp4 {
		k, v = u8T(totalK, 1, d/2), u8T(totalK, 1, d/2)
		pr, pc := lowp.Scale128x4Shape(totalK, d/16)
		nv = []*tensor.Dense{u8T(pr, pc), u8T(pr, pc), f32T(1, 0.5), f32T(1, 2)}
		opts = append(opts, NVFP4KV(gnode(t, g, "k_scale", nv[0]), gnode(t, g, "v_scale", nv[1]),
			gnode(t, g, "k_global", nv[2]), gnode(t, g, "v_global", nv[3])))
	}
	cuQn, cuKn := gnode(t, g, "cu_q", cuQ), gnode(t, g, "cu_k", cuK)
	csr, err := K2QCSR(gnode(t, g, "q2k", q2k), cuQn, cuKn, BlkKV(blk), MaxSeqlenK(700))
	if err != nil {
		t.Fatal(err)
	}
	sched, err := FwdSchedule(csr, cuQn, cuKn, QheadPerKV(hq), Workers(8))
	if err != nil {
		t.Fatal(err)
	}
	node, err := SparseAttention(gnode(t, g, "q", q), gnode(t, g, "k", k), gnode(t, g, "v", v), csr, sched, cuQn, cuKn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	c := &sparseCUDACase{op: node.Op().(*sparseAttnOp), csrOp: csr.Op().(*csrOp), schedOp: sched.Op().(*schedOp),
		q2k: q2k, cuQ: cuQ, cuK: cuK, pt: pt, su: su, out: bf16T(totalQ, hq, d)}
	c.in = []G.Value{q, k, v, nil, nil, cuQ, cuK}
	if paged {
		c.in = append(c.in, pt, su)
	}
	for _, x := range nv {
		c.in = append(c.in, x)
	}
	if nvfp4 {
		c.kGlobal = nv[2]
	}
	c.plan(t)
	return c
}

func u8T(shape ...int) *tensor.Dense {
	n := 1
	for _, x := range shape {
		n *= x
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(make([]uint8, n)))
}

// f32T is a float32 [n] tensor of value x.
func f32T(n int, x float32) *tensor.Dense {
	v := make([]float32, n)
	for i := range v {
		v[i] = x
	}
	return tensor.New(tensor.WithShape(n), tensor.WithBacking(v))
}

// fillQ2K selects up to topK distinct blocks of its sequence for every
// query (-1 pads), from seed.
func fillQ2K(q2k, cuQ, cuK *tensor.Dense, blk int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 3))
	v, cq, ck := q2k.Data().([]int32), cuQ.Data().([]int32), cuK.Data().([]int32)
	topK := q2k.Shape()[2]
	for b := 0; b+1 < len(cq); b++ {
		nb := (int(ck[b+1]-ck[b]) + blk - 1) / blk
		for q := cq[b]; q < cq[b+1]; q++ {
			row := v[int(q)*topK : (int(q)+1)*topK]
			n := 1 + rng.IntN(topK)
			for j, x := range rng.Perm(nb)[:n] {
				row[j] = int32(x)
			}
			for j := n; j < topK; j++ {
				row[j] = -1
			}
		}
	}
}

// plan runs the CSR and schedule nodes (once per step).
func (c *sparseCUDACase) plan(t *testing.T) {
	t.Helper()
	csr, err := c.csrOp.Do(c.q2k, c.cuQ, c.cuK)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := c.schedOp.Do(csr, c.cuQ, c.cuK)
	if err != nil {
		t.Fatal(err)
	}
	c.in[3], c.in[4] = csr, sched
}

func (c *sparseCUDACase) register(f *fakeGPU) {
	for _, v := range c.in {
		f.register(v.(*tensor.Dense))
	}
}

// TestSparseCUDARunAllocatesNothing: the sparse prefill node's CUDA path
// (CUDADo's body, past the context push that needs a driver) allocates
// nothing in a warm run on every launch route - the portable kernels,
// the KV-major tensor-core forward + combine, kv2, the query-major
// kernel - with the metadata copied into host storage the node keeps and
// validated into the node. After the next step's plan (new CSR and
// schedule values) the run allocates nothing either. The recorded
// launches check that the kernels ran.
func TestSparseCUDARunAllocatesNothing(t *testing.T) {
	for _, r := range []struct {
		name    string
		arch    mcuda.Arch
		prefill mcuda.PrefillPath
		paged   bool
		nvfp4   bool
		first   string // the first kernel launched
		// auto: the query-major kernel must run too (the auto path's
		// alternate chooser gives it every other query tile).
		also    string
		chooser mcuda.TileChooser
	}{
		{"portable", mcuda.ArchPortable, mcuda.PrefillKV, false, false, "msa_sparse_fwd_d128", "", nil},
		{"portable paged", mcuda.ArchPortable, mcuda.PrefillKV, true, false, "msa_sparse_fwd_d128", "", nil},
		{"portable nvfp4", mcuda.ArchPortable, mcuda.PrefillKV, false, true, "msa_sparse_fwd_d128", "", nil},
		{"sm90 kv", mcuda.ArchSM90, mcuda.PrefillKV, false, false, mcuda.TCName(mcuda.ArchSM90, "fwd", mcuda.VarBF16, 128), "", nil},
		{"sm90 kv paged", mcuda.ArchSM90, mcuda.PrefillKV, true, false, mcuda.TCName(mcuda.ArchSM90, "fwd", mcuda.VarBF16, 128), "", nil},
		{"sm90 kv nvfp4", mcuda.ArchSM90, mcuda.PrefillKV, false, true, mcuda.TCName(mcuda.ArchSM90, "fwd", mcuda.VarNVFP4, 128), "", nil},
		{"sm90 kv2", mcuda.ArchSM90, mcuda.PrefillKV2, false, false, "msa_sm90_fwd2_bf16_d128", "", nil},
		{"sm90 query", mcuda.ArchSM90, mcuda.PrefillQuery, false, false, mcuda.QFwdName(mcuda.ArchSM90, mcuda.VarBF16, 128), "", nil},
		{"sm90 auto mixed", mcuda.ArchSM90, mcuda.PrefillAuto, false, false, mcuda.TCName(mcuda.ArchSM90, "fwd", mcuda.VarBF16, 128),
			mcuda.QFwdName(mcuda.ArchSM90, mcuda.VarBF16, 128), mcuda.AlternateTiles},
		{"sm90 auto mixed paged", mcuda.ArchSM90, mcuda.PrefillAuto, true, false, mcuda.TCName(mcuda.ArchSM90, "fwd", mcuda.VarBF16, 128),
			mcuda.QFwdName(mcuda.ArchSM90, mcuda.VarBF16, 128), mcuda.AlternateTiles},
		{"sm90 auto-kv2 mixed", mcuda.ArchSM90, mcuda.PrefillAutoKV2, false, false, "msa_sm90_fwd2_bf16_d128",
			mcuda.QFwdName(mcuda.ArchSM90, mcuda.VarBF16, 128), mcuda.AlternateTiles},
	} {
		t.Run(r.name, func(t *testing.T) {
			c := newSparseCUDACase(t, r.paged, r.nvfp4)
			f := newFakeGPU(r.arch)
			f.k.SetPrefillPath(r.prefill)
			if r.chooser != nil {
				f.k.SetPrefillChooser(r.chooser)
			}
			c.register(f)
			e := f.envFor("SparseAttention")
			run := func() {
				if _, err := c.op.gpu(e, c.out, c.in); err != nil {
					t.Fatal(err)
				}
			}
			run()
			got := f.k.LastKernels()
			if len(got) == 0 || got[0] != r.first {
				t.Fatalf("launched %v, want %s first", got, r.first)
			}
			if r.also != "" && !slices.Contains(got, r.also) {
				t.Fatalf("launched %v, want %s among them (auto choice %+v)", got, r.also, f.k.PrefillChoice())
			}
			if f.syncs != 1 || f.allocs == 0 {
				t.Fatalf("%d synchronizations and %d device allocations after one run, want 1 and > 0", f.syncs, f.allocs)
			}
			devAllocs, launches := f.allocs, f.drv.Launches
			if n := allocs.Warm(20, run); n != 0 {
				t.Errorf("warm run: %v allocations per run, want 0", n)
			}
			if f.allocs != devAllocs || (f.drv.Launches-launches)%len(got) != 0 || f.drv.Launches-launches < 21*len(got) {
				t.Errorf("warm runs: %d device allocations and %d launches, want 0 and a multiple of %d", f.allocs-devAllocs, f.drv.Launches-launches, len(got))
			}
			if !slices.Equal(f.k.LastKernels(), got) {
				t.Errorf("warm run launched %v, the first %v", f.k.LastKernels(), got)
			}
			c.plan(t) // the next step: new CSR and schedule values, same selection
			c.register(f)
			if n := allocs.Warm(20, run); n != 0 {
				t.Errorf("run after the next step's plan: %v allocations per run, want 0", n)
			}
			// Another selection: its first run may grow the storage (more
			// work items), later runs allocate nothing.
			fillQ2K(c.q2k, c.cuQ, c.cuK, 64, 2)
			c.plan(t)
			c.register(f)
			run()
			if n := allocs.Warm(20, run); n != 0 {
				t.Errorf("run of another selection: %v allocations per run, want 0", n)
			}
		})
	}
}

// TestSparseCUDARefusals: the sparse node's CUDA path refuses, after warm
// runs (so through the recheck of a validated key), what the CPU path
// refuses, with the same errors: page ids outside k, seqused_k or a
// sequence beyond the page table's capacity, bad cu_seqlens_q /
// cu_seqlens_k prefix sums, a CSR entry outside its sequence, a tampered
// schedule; and a good run after a refusal runs again.
func TestSparseCUDARefusals(t *testing.T) {
	for _, bad := range []struct {
		name  string
		paged bool
		edit  func(c *sparseCUDACase)
	}{
		{"non-finite k_global_scale", false, func(c *sparseCUDACase) { c.kGlobal.Data().([]float32)[0] = float32(math.Inf(1)) }},
		{"page beyond k", true, func(c *sparseCUDACase) { c.pt.Data().([]int32)[3] = 22 }},
		{"negative page", true, func(c *sparseCUDACase) { c.pt.Data().([]int32)[12] = -1 }},
		{"seqused beyond capacity", true, func(c *sparseCUDACase) { c.su.Data().([]int32)[1] = 705 }},
		{"negative seqused", true, func(c *sparseCUDACase) { c.su.Data().([]int32)[0] = -1 }},
		{"sequence beyond capacity", true, func(c *sparseCUDACase) { c.cuK.Data().([]int32)[2] = 1300 }},
		{"cu_seqlens_q decreasing", false, func(c *sparseCUDACase) { c.cuQ.Data().([]int32)[1] = 301 }},
		{"cu_seqlens_k beyond total_k", false, func(c *sparseCUDACase) { c.cuK.Data().([]int32)[2] = 1300 }},
		{"cu_seqlens_k shorter", false, func(c *sparseCUDACase) { c.cuK.Data().([]int32)[2] = 1100 }},
		{"csr entry outside its sequence", false, func(c *sparseCUDACase) {
			l := c.op.sched.csr
			c.in[3].(*tensor.Dense).Data().([]int32)[l.RowCap+1] = 250
		}},
		{"schedule split count", false, func(c *sparseCUDACase) {
			v := c.in[4].(*tensor.Dense).Data().([]int32)
			v[len(v)-1]++
		}},
		{"schedule work count", false, func(c *sparseCUDACase) { c.in[4].(*tensor.Dense).Data().([]int32)[0] = 0 }},
	} {
		t.Run(bad.name, func(t *testing.T) {
			c := newSparseCUDACase(t, bad.paged, bad.name == "non-finite k_global_scale")
			f := newFakeGPU(mcuda.ArchPortable)
			c.register(f)
			e := f.envFor("SparseAttention")
			for range 2 { // warm: the refusal must come through the recheck
				if _, err := c.op.gpu(e, c.out, c.in); err != nil {
					t.Fatal(err)
				}
			}
			good := make([][]byte, len(c.in))
			for i, v := range c.in[3:] {
				good[i+3] = slices.Clone(v.(*tensor.Dense).Header.Raw)
			}
			bad.edit(c)
			_, cpuErr := c.op.Do(c.in...)
			_, gpuErr := c.op.gpu(e, c.out, c.in)
			wantSameRefusal(t, cpuErr, gpuErr)
			for i, v := range c.in[3:] {
				copy(v.(*tensor.Dense).Header.Raw, good[i+3])
			}
			if _, err := c.op.gpu(e, c.out, c.in); err != nil {
				t.Fatalf("good run after the refusal: %v", err)
			}
		})
	}
}
