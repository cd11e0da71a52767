package op

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/tile"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// decodeSpec describes a random paged decode problem.
type decodeSpec struct {
	seed         uint64
	seqused      []int
	seqlenQ      int
	hq, hkv, d   int
	pageSize     int
	dt           string // "bf16" or "e4m3" (q, k, v)
	topK, blk    int    // topK > 0: sparse decode over blocks of blk tokens
	extraCols    int
	fixedSplit   int
	disableSplit bool
	workers      int
	scale        float64 // softmax_scale (0 = 1/sqrt(D))
}

func (s decodeSpec) String() string {
	return fmt.Sprintf("seed=%d B=%d seqused=%v seqlenQ=%d hq=%d hkv=%d d=%d page=%d dt=%s topK=%d blk=%d split=%d/%v w=%d",
		s.seed, len(s.seqused), s.seqused, s.seqlenQ, s.hq, s.hkv, s.d, s.pageSize, s.dt, s.topK, s.blk, s.fixedSplit, s.disableSplit, s.workers)
}

type decodeProblem struct {
	q, k, v, pt, su, q2k *tensor.Dense
	qv, kv, vv           []float64
	ptv, q2kv            []int32
	cols                 int
	maxV                 float64
}

func buildDecode(s decodeSpec) *decodeProblem {
	rng := rand.New(rand.NewPCG(s.seed, 11))
	B := len(s.seqused)
	pr := &decodeProblem{}
	cols := 1
	for _, n := range s.seqused {
		cols = max(cols, (n+s.pageSize-1)/s.pageSize)
	}
	cols += s.extraCols
	pr.cols = cols
	numPages := B*cols + 2
	perm := rng.Perm(numPages)
	pt := make([]int32, B*cols)
	for i := range pt {
		pt[i] = int32(perm[i])
	}
	su := make([]int32, B)
	for b, n := range s.seqused {
		su[b] = int32(n)
	}
	totalQ := B * s.seqlenQ
	qd, qv := quantize(rng, totalQ*s.hq*s.d, s.dt, 1)
	kd, kv := quantize(rng, numPages*s.hkv*s.pageSize*s.d, s.dt, 1)
	vd, vv := quantize(rng, numPages*s.hkv*s.pageSize*s.d, s.dt, 1)
	pr.q = tensor.New(tensor.WithShape(totalQ, s.hq, s.d), tensor.WithBacking(qd))
	pr.k = tensor.New(tensor.WithShape(numPages, s.hkv, s.pageSize, s.d), tensor.WithBacking(kd))
	pr.v = tensor.New(tensor.WithShape(numPages, s.hkv, s.pageSize, s.d), tensor.WithBacking(vd))
	pr.pt = tensor.New(tensor.WithShape(B, cols), tensor.WithBacking(pt))
	pr.su = tensor.New(tensor.WithShape(B), tensor.WithBacking(su))
	pr.qv, pr.kv, pr.vv, pr.ptv = qv, kv, vv, pt
	for _, x := range vv {
		pr.maxV = math.Max(pr.maxV, math.Abs(x))
	}
	if s.topK > 0 {
		q2k := make([]int32, s.hkv*totalQ*s.topK)
		for i := range q2k {
			q2k[i] = -1
		}
		for h := 0; h < s.hkv; h++ {
			for gq := 0; gq < totalQ; gq++ {
				nb := (s.seqused[gq/s.seqlenQ] + s.blk - 1) / s.blk
				n := rng.IntN(min(nb, s.topK) + 1)
				slots := rng.Perm(s.topK)
				for i, j := range rng.Perm(max(nb, 1))[:n] {
					q2k[(h*totalQ+gq)*s.topK+slots[i]] = int32(j)
				}
			}
		}
		pr.q2kv = q2k
		pr.q2k = tensor.New(tensor.WithShape(s.hkv, totalQ, s.topK), tensor.WithBacking(q2k))
	}
	return pr
}

// referenceDecode is causal paged decode in float64: query i of request b
// sees keys t <= seqused[b] - seqlenQ + i (and, sparse, only in its blocks).
func referenceDecode(s decodeSpec, pr *decodeProblem) refOut {
	B, d := len(s.seqused), s.d
	totalQ := B * s.seqlenQ
	qpk := s.hq / s.hkv
	rc := &refCase{scale: 1 / math.Sqrt(float64(d))}
	if s.scale != 0 {
		rc.scale = s.scale
	}
	out := refOut{o: make([][]float64, totalQ*s.hq), lse: make([]float64, totalQ*s.hq), tlse: make([]float64, totalQ*s.hq)}
	for b := 0; b < B; b++ {
		for i := 0; i < s.seqlenQ; i++ {
			gq := b*s.seqlenQ + i
			pos := s.seqused[b] - s.seqlenQ + i
			for hq := 0; hq < s.hq; hq++ {
				h := hq / qpk
				row := gq*s.hq + hq
				out.o[row] = make([]float64, d)
				out.lse[row] = math.Inf(-1)
				var keys []int
				for t := 0; t <= pos && t < s.seqused[b]; t++ {
					if s.topK > 0 {
						sel := false
						for _, j := range pr.q2kv[(h*totalQ+gq)*s.topK : (h*totalQ+gq+1)*s.topK] {
							sel = sel || int(j) == t/s.blk
						}
						if !sel {
							continue
						}
					}
					keys = append(keys, t)
				}
				kvRow := func(t int) int { return (int(pr.ptv[b*pr.cols+t/s.pageSize])*s.hkv+h)*s.pageSize + t%s.pageSize }
				refRow(rc, out, row, pr.qv[row*d:(row+1)*d], keys, func(t int) ([]float64, []float64) {
					r := kvRow(t)
					return pr.kv[r*d : (r+1)*d], pr.vv[r*d : (r+1)*d]
				})
			}
		}
	}
	return out
}

func decodeArgs(s decodeSpec, pr *decodeProblem) DecodeArgs {
	maxK := 1
	for _, n := range s.seqused {
		maxK = max(maxK, n)
	}
	return DecodeArgs{PageTable: pr.pt, SeqUsedK: pr.su, SeqlenQ: s.seqlenQ, MaxSeqlenK: maxK, BlkKV: s.blk, SoftmaxScale: s.scale,
		Workers: s.workers, FixedSplitSize: s.fixedSplit, DisableSplitKV: s.disableSplit}
}

// planArgs is decodeArgs with the plan-only head counts and head dim.
func planArgs(s decodeSpec, pr *decodeProblem) PlanArgs { return planOf(s, decodeArgs(s, pr)) }

// planOf wraps run-time decode arguments with s's head counts and head dim.
func planOf(s decodeSpec, a DecodeArgs) PlanArgs {
	return PlanArgs{DecodeArgs: a, NumQOHeads: s.hq, NumKVHeads: s.hkv, HeadDim: s.d}
}

func runDecodeSpec(t testing.TB, s decodeSpec, pr *decodeProblem) *Result {
	t.Helper()
	var q2k tensor.Tensor
	if pr.q2k != nil {
		q2k = pr.q2k
	}
	res, err := DecodeAttentionFunc(pr.q, pr.k, pr.v, q2k, decodeArgs(s, pr))
	if err != nil {
		t.Fatalf("%v: %v", s, err)
	}
	return res
}

func checkDecode(t testing.TB, s decodeSpec, pr *decodeProblem, res *Result) {
	t.Helper()
	ref := referenceDecode(s, pr)
	// Split partials are float32: only the BF16 output rounding and, on the
	// FP8 path, the e4m3 rounding of P count (see oTolerance).
	rtol, atol := oTolerance(tensor.Float32, s.dt == "e4m3", tile.BF16Products())
	o := validate.Backing[lowp.BFloat16](res.Out)
	lse := validate.Backing[float32](res.LSE)
	bad := 0
	for row := range ref.o {
		for c := 0; c < s.d; c++ {
			got, want := float64(o[row*s.d+c].Float32()), ref.o[row][c]
			if math.IsNaN(got) || math.Abs(got-want) > rtol*math.Abs(want)+atol*pr.maxV {
				if bad < 5 {
					t.Errorf("%v: O[%d][%d] = %g, want %g", s, row, c, got, want)
				}
				bad++
			}
		}
		checkLSE(t, sparseSpec{}, "LSE", row, float64(lse[row]), ref.lse[row], tile.BF16Products(), &bad)
	}
	if bad > 0 {
		t.Fatalf("%v: %d mismatches", s, bad)
	}
}

// TestDecodeMatrix compares dense and sparse decode with the float64
// reference over batch sizes 1..64, seqlen_q 1..8, ragged seqused_k (one
// page exactly, one token past a page, < 16 tokens, 0), shuffled page
// tables, every qhead_per_kv, page sizes 16/64/128, split and unsplit.
func TestDecodeMatrix(t *testing.T) {
	batches := []int{1, 3, 8, 64}
	seqlens := []int{1, 2, 4, 8}
	gqas := [][2]int{{16, 1}, {8, 1}, {4, 1}, {4, 2}, {2, 2}}
	pages := []int{16, 64, 128}
	n := 0
	for _, B := range batches {
		for si, sq := range seqlens {
			for pi, ps := range pages {
				n++
				rng := rand.New(rand.NewPCG(uint64(n), 3))
				used := make([]int, B)
				for b := range used {
					switch (b + n) % 5 {
					case 0:
						used[b] = ps
					case 1:
						used[b] = ps + 1
					case 2:
						used[b] = 1 + rng.IntN(15)
					case 3:
						used[b] = 1 + rng.IntN(40*ps/16)
					default:
						used[b] = rng.IntN(3 * ps)
					}
				}
				g := gqas[(si+pi+n)%len(gqas)]
				s := decodeSpec{seed: uint64(n), seqused: used, seqlenQ: sq, hq: g[0], hkv: g[1],
					d: []int{64, 128, 256}[n%3], pageSize: ps, dt: []string{"bf16", "e4m3"}[n%2],
					extraCols: n % 2, workers: 1 + n%3}
				if B >= 8 && s.d == 256 {
					s.d = 64 // keep the test fast
				}
				if n%3 == 0 {
					s.topK, s.blk = 1+n%6, []int{ps, 128, 32}[n%3]
				}
				switch n % 4 {
				case 1:
					s.fixedSplit = 1 + n%3
				case 2:
					s.disableSplit = true
				}
				pr := buildDecode(s)
				checkDecode(t, s, pr, runDecodeSpec(t, s, pr))
			}
		}
	}
}

// TestDecodeSplitMatchesUnsplit checks split-KV and unsplit decode agree
// within tolerance on long contexts.
func TestDecodeSplitMatchesUnsplit(t *testing.T) {
	s := decodeSpec{seed: 77, seqused: []int{2000, 17, 1300}, seqlenQ: 2, hq: 8, hkv: 2, d: 128, pageSize: 16, dt: "bf16", workers: 8}
	pr := buildDecode(s)
	a := runDecodeSpec(t, s, pr)
	s2 := s
	s2.disableSplit = true
	b := runDecodeSpec(t, s2, pr)
	s3 := s
	s3.fixedSplit = 3
	c := runDecodeSpec(t, s3, pr)
	checkDecode(t, s, pr, a)
	checkDecode(t, s2, pr, b)
	checkDecode(t, s3, pr, c)
	if bytes.Equal(bytesOf(validate.Backing[lowp.BFloat16](a.Out)), bytesOf(validate.Backing[lowp.BFloat16](b.Out))) {
		t.Log("split and unsplit happen to be bit-identical")
	}
}

// TestDecodeBatchInvariant: with a fixed split size, a request's output
// bits do not depend on the other requests in the batch or the workers.
func TestDecodeBatchInvariant(t *testing.T) {
	full := decodeSpec{seed: 5, seqused: []int{700, 33, 1500, 90}, seqlenQ: 3, hq: 16, hkv: 1, d: 128, pageSize: 64,
		dt: "e4m3", fixedSplit: 2, workers: 2}
	pr := buildDecode(full)
	all := runDecodeSpec(t, full, pr)
	row := 3 * 16 * 128 // one request's output elements
	for b := range full.seqused {
		// The same request alone, with its own pages, other workers.
		one := full
		one.seqused = []int{full.seqused[b]}
		one.workers = 1 + b
		p1 := &decodeProblem{}
		*p1 = *pr
		p1.pt = tensor.New(tensor.WithShape(1, pr.cols), tensor.WithBacking(append([]int32{}, pr.ptv[b*pr.cols:(b+1)*pr.cols]...)))
		p1.su = tensor.New(tensor.WithShape(1), tensor.WithBacking([]int32{int32(full.seqused[b])}))
		p1.q = tensor.New(tensor.WithShape(3, 16, 128), tensor.WithBacking(append([]lowp.Float8E4M3FN{}, validate.Backing[lowp.Float8E4M3FN](pr.q)[b*row:(b+1)*row]...)))
		res := runDecodeSpec(t, one, p1)
		got := bytesOf(validate.Backing[lowp.BFloat16](res.Out))
		want := bytesOf(validate.Backing[lowp.BFloat16](all.Out)[b*row : (b+1)*row])
		if !bytes.Equal(got, want) {
			t.Fatalf("request %d: output depends on the batch", b)
		}
	}
}

// TestDecodeWrapperStale checks plan/run reuse, that Plan snapshots its
// metadata, and the refusal of inputs that do not match the plan.
func TestDecodeWrapperStale(t *testing.T) {
	s := decodeSpec{seed: 3, seqused: []int{100, 300}, seqlenQ: 1, hq: 8, hkv: 2, d: 64, pageSize: 16, dt: "bf16",
		extraCols: 30, workers: 2, fixedSplit: 4}
	pr := buildDecode(s)
	w, err := NewDecodeWrapper(16)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Run(pr.q, pr.k, pr.v, 0); err == nil || !strings.Contains(err.Error(), "Plan") {
		t.Fatalf("unplanned run: %v", err)
	}
	if info := w.Schedule(); info.Capacity != 0 || info.SplitCounts != nil {
		t.Fatalf("schedule before Plan: %+v", info)
	}
	if err := w.Plan(planArgs(s, pr), nil); err != nil {
		t.Fatal(err)
	}
	// fixed_split_size 4 pages: 100 and 300 keys in pages of 16 are 7 and
	// 19 pages, so 2 and 5 chunks.
	if info := w.Schedule(); !info.SplitKV || info.ChunkPages != 4 || fmt.Sprint(info.SplitCounts) != "[2 5]" || info.MaxSplits != 5 || info.WorkItems < 7 {
		t.Fatalf("schedule: %+v", info)
	}
	res, err := w.Run(pr.q, pr.k, pr.v, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkDecode(t, s, pr, res)

	// A later WritePagedKVFunc on the planned metadata makes the plan stale:
	// Run refuses it (it would attend over the planned lengths) and names
	// the changed entry; so does a page-table entry changed after Plan.
	su := validate.Backing[int32](pr.su)
	su[0]++
	cuNew := i32T([]int{3}, 0, 1, 1)
	// (into a copy of the cache: the reference below reads pr.k's keys)
	if err := WritePagedKVFunc(pr.k.Clone().(*tensor.Dense), bf16T(1, s.hkv, s.d), pr.pt, cuNew, pr.su, HND); err != nil {
		t.Fatal(err)
	}
	var stale *StalePlanError
	if _, err := w.Run(pr.q, pr.k, pr.v, 0); !errors.As(err, &stale) || stale.Arg != "seqused_k[0]" ||
		stale.Planned != 100 || stale.Now != 101 || !strings.Contains(err.Error(), "call Plan again") {
		t.Fatalf("run after WritePagedKVFunc without Plan: %v", err)
	}
	su[0] = 100
	ptv := validate.Backing[int32](pr.pt)
	old := ptv[1]
	ptv[1]++
	if _, err := w.Run(pr.q, pr.k, pr.v, 0); !errors.As(err, &stale) || stale.Arg != "page_table[0, 1]" {
		t.Fatalf("run after a page-table change without Plan: %v", err)
	}
	ptv[1] = old
	res, err = w.Run(pr.q, pr.k, pr.v, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkDecode(t, s, pr, res)
	su[0] = 120
	// Plan again for the new lengths: correct.
	s.seqused[0] = 120
	if err := w.Plan(planArgs(s, pr), nil); err != nil {
		t.Fatal(err)
	}
	res, err = w.Run(pr.q, pr.k, pr.v, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkDecode(t, s, pr, res)
	// Wrong shapes.
	if _, err := w.Run(bf16T(3, 8, 64), pr.k, pr.v, 0); err == nil || !strings.Contains(err.Error(), "planned shapes") {
		t.Fatalf("wrong q shape: %v", err)
	}
	// Page table entries outside k's pages.
	few := pr.k.Shape()[0] / 4
	kv, _ := pr.k.Slice(tensor.S(0, few))
	vv, _ := pr.v.Slice(tensor.S(0, few))
	if _, err := w.Run(pr.q, kv, vv, 0); err == nil || !strings.Contains(err.Error(), "page_table[") {
		t.Fatalf("bad page: %v", err)
	}

	// CUDA-graph mode: re-planning each step reuses the fixed-size buffers.
	args := planArgs(s, pr)
	args.EnableCUDAGraph = true
	args.FixedSplitSize = 0
	if err := w.Plan(args, nil); err != nil {
		t.Fatal(err)
	}
	capBefore := w.Schedule().Capacity
	for step := 0; step < 4; step++ {
		su[0] += 37
		s.seqused[0] = int(su[0])
		if err := w.Plan(args, nil); err != nil {
			t.Fatal(err)
		}
		res, err = w.Run(pr.q, pr.k, pr.v, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkDecode(t, s, pr, res)
		if w.Schedule().Capacity != capBefore {
			t.Fatal("fixed-capacity schedule changed size")
		}
	}
}

// BenchmarkDecodeWrapperRun shows the steady state of plan/run allocates
// nothing (allocs/op = 0).
func BenchmarkDecodeWrapperRun(b *testing.B) {
	s := decodeSpec{seed: 1, seqused: []int{1000, 2000, 500, 4000}, seqlenQ: 1, hq: 16, hkv: 1, d: 128, pageSize: 64,
		dt: "e4m3", workers: 2}
	pr := buildDecode(s)
	w := plannedWrapper(b, s, pr)
	defer w.Close()
	out := tensor.New(tensor.WithShape(4, 16, 128), tensor.Of(BFloat16))
	lse := tensor.New(tensor.WithShape(4, 16), tensor.Of(tensor.Float32))
	if err := w.RunInto(pr.q, pr.k, pr.v, 0, out, lse); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := w.RunInto(pr.q, pr.k, pr.v, 0, out, lse); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecodeWrapperNoAllocs asserts the zero-allocation steady state.
func TestDecodeWrapperNoAllocs(t *testing.T) {
	s := decodeSpec{seed: 1, seqused: []int{300, 20, 900}, seqlenQ: 2, hq: 8, hkv: 2, d: 64, pageSize: 16,
		dt: "bf16", workers: 2, fixedSplit: 8}
	pr := buildDecode(s)
	w, _ := NewDecodeWrapper(16)
	defer w.Close()
	if err := w.Plan(planArgs(s, pr), nil); err != nil {
		t.Fatal(err)
	}
	out := tensor.New(tensor.WithShape(6, 8, 64), tensor.Of(BFloat16))
	lse := tensor.New(tensor.WithShape(6, 8), tensor.Of(tensor.Float32))
	run := func() {
		if err := w.RunInto(pr.q, pr.k, pr.v, 0, out, lse); err != nil {
			t.Fatal(err)
		}
	}
	run()
	if a := testing.AllocsPerRun(20, run); a != 0 {
		t.Fatalf("steady-state RunInto allocates %v times per call", a)
	}
}

// TestDecodeMaxSeqlenKDerived checks that max_seqlen_k = 0 is derived from
// seqused_k (the prefill rule) and gives the same result as the explicit
// value, and that a negative value names max_seqlen_k.
func TestDecodeMaxSeqlenKDerived(t *testing.T) {
	s := decodeSpec{seed: 5, seqused: []int{40, 9}, seqlenQ: 1, hq: 4, hkv: 2, d: 64, pageSize: 16, dt: "bf16", workers: 2}
	pr := buildDecode(s)
	want := runDecodeSpec(t, s, pr)
	args := decodeArgs(s, pr)
	args.MaxSeqlenK = 0
	got, err := DecodeAttentionFunc(pr.q, pr.k, pr.v, nil, args)
	if err != nil {
		t.Fatal(err)
	}
	sameResult(t, "max_seqlen_k 0", want, got)
	args.MaxSeqlenK = -1
	_, err = DecodeAttentionFunc(pr.q, pr.k, pr.v, nil, args)
	wantArgErr(t, err, "max_seqlen_k", "0 (derived")
}
