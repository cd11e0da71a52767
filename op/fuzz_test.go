package op

import (
	"math"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// fuzzMutate overwrites element idx of one int32 metadata tensor.
func fuzzMutate(ts []*tensor.Dense, which uint8, idx uint16, val int32) {
	var live []*tensor.Dense
	for _, t := range ts {
		if t != nil && len(validate.Backing[int32](t)) > 0 {
			live = append(live, t)
		}
	}
	if len(live) == 0 {
		return
	}
	d := validate.Backing[int32](live[int(which)%len(live)])
	d[int(idx)%len(d)] = val
}

// noNaN fails when an output holds NaN.
func noNaN(t *testing.T, res *Result) {
	for i, x := range validate.Backing[lowp.BFloat16](res.Out) {
		if math.IsNaN(float64(x.Float32())) {
			t.Fatalf("NaN in out[%d]", i)
		}
	}
	for i, x := range validate.Backing[float32](res.LSE) {
		if math.IsNaN(float64(x)) {
			t.Fatalf("NaN in lse[%d]", i)
		}
	}
}

// FuzzSparseAttenFunc mutates one metadata element of a valid call (q2k
// before the CSR build, cu_seqlens, page table, seqused_k, or the CSR
// itself); the call must return an error or a NaN-free result, never panic.
func FuzzSparseAttenFunc(f *testing.F) {
	f.Add(uint64(1), uint8(0), uint8(0), uint16(0), int32(5), false)
	f.Add(uint64(2), uint8(1), uint8(1), uint16(1), int32(-3), true)
	f.Add(uint64(3), uint8(2), uint8(2), uint16(7), int32(1<<30), true)
	f.Add(uint64(4), uint8(3), uint8(3), uint16(2), int32(0), false)
	f.Add(uint64(5), uint8(4), uint8(4), uint16(3), int32(-1), true)
	f.Add(uint64(6), uint8(5), uint8(5), uint16(9), int32(200), true)
	f.Add(uint64(7), uint8(6), uint8(6), uint16(0), int32(2), false)
	f.Fuzz(func(t *testing.T, seed uint64, stage, which uint8, idx uint16, val int32, paged bool) {
		s := sparseSpec{seed: seed, seqQ: []int{int(seed % 7), 5}, seqK: []int{int(seed % 300), 130}, hq: 2, hkv: 1,
			d: 64, topK: 3, blk: 128, paged: paged, causal: seed%2 == 0, qDt: "bf16", kvDt: "bf16", partial: tensor.Float32}
		pr := buildSparse(s)
		if stage%2 == 0 {
			fuzzMutate([]*tensor.Dense{pr.q2k, pr.cuQ, pr.cuK}, which, idx, val)
		}
		rp, qi, err := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, 128)
		if err != nil {
			return
		}
		args := SparseArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK, Causal: s.causal}
		if paged {
			args.PageTable, args.SeqUsedK = pr.pageTable, pr.seqused
		}
		if stage%2 == 1 {
			fuzzMutate([]*tensor.Dense{rp, qi, pr.cuQ, pr.cuK, pr.pageTable, pr.seqused}, which, idx, val)
		}
		res, err := SparseAttentionFunc(pr.q, pr.k, pr.v, rp, qi, 3, args)
		if err != nil {
			return
		}
		noNaN(t, res)
	})
}

// FuzzBuildK2QCSR feeds arbitrary q2k lists and sequence lengths to the CSR
// build: it must return an error or a CSR that ValidateCSR accepts.
func FuzzBuildK2QCSR(f *testing.F) {
	f.Add([]byte{0, 1, 2, 255, 3}, uint8(2), uint16(300), uint16(100))
	f.Add([]byte{5, 5}, uint8(1), uint16(0), uint16(1))
	f.Add([]byte{}, uint8(3), uint16(129), uint16(129))
	f.Fuzz(func(t *testing.T, raw []byte, topK uint8, lenA, lenB uint16) {
		k := int(topK%8) + 1
		totalQ := 3
		q2k := make([]int32, totalQ*k)
		for i := range q2k {
			q2k[i] = -1
			if i < len(raw) {
				q2k[i] = int32(int8(raw[i]))
			}
		}
		cuQ := i32T([]int{3}, 0, 2, 3)
		cuK := i32T([]int{3}, 0, int32(lenA%1000), int32(lenA%1000)+int32(lenB%1000))
		rp, qi, err := K2QCSRFunc(i32T([]int{1, totalQ, k}, q2k...), cuQ, cuK, 128)
		if err != nil {
			return
		}
		if _, err := FwdScheduleFunc(rp, qi, ScheduleArgs{CuSeqlensQ: cuQ, CuSeqlensK: cuK, TotalQ: totalQ, TopK: k, QheadPerKV: 1, Workers: 2}); err != nil {
			t.Fatalf("schedule of a built CSR fails: %v", err)
		}
	})
}

// FuzzSparseAttenNVFP4KVFunc mutates the NVFP4 scale layout, global scales
// and metadata of a valid NVFP4 call; it must error or return NaN-free output.
func FuzzSparseAttenNVFP4KVFunc(f *testing.F) {
	f.Add(uint64(1), uint8(0), uint16(0), int32(3), uint8(0), float32(1))
	f.Add(uint64(2), uint8(1), uint16(5), int32(-7), uint8(1), float32(0))
	f.Add(uint64(3), uint8(2), uint16(9), int32(1000), uint8(2), float32(1e30))
	f.Add(uint64(4), uint8(3), uint16(1), int32(0), uint8(3), float32(-2))
	f.Fuzz(func(t *testing.T, seed uint64, which uint8, idx uint16, val int32, scaleSel uint8, g float32) {
		s := sparseSpec{seed: seed, seqQ: []int{3, int(seed % 5)}, seqK: []int{150, int(seed % 200)}, hq: 2, hkv: 1, d: 64,
			topK: 2, blk: 128, paged: seed%2 == 1, causal: true, qDt: "bf16", kvDt: "nvfp4", partial: tensor.Float32, kGlobal: 0.5}
		pr := buildSparse(s)
		rp, qi, err := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, 128)
		if err != nil {
			t.Fatal(err)
		}
		fuzzMutate([]*tensor.Dense{rp, qi, pr.cuQ, pr.cuK, pr.pageTable, pr.seqused}, which, idx, val)
		ks, vs := pr.kScale, pr.vScale
		switch scaleSel % 4 {
		case 1: // scale tensor too small
			ks = tensor.New(tensor.WithShape(1, 4), tensor.WithBacking(make([]uint8, 4)))
		case 2: // scale bytes: NaN / max scales
			b := validate.Backing[uint8](vs)
			b[int(idx)%len(b)] = uint8(val)
		}
		kg := tensor.New(tensor.WithShape(1), tensor.WithBacking([]float32{g}))
		args := SparseArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK, Causal: true}
		if s.paged {
			args.PageTable, args.SeqUsedK = pr.pageTable, pr.seqused
		}
		res, err := SparseAttentionNVFP4KVFunc(pr.q, pr.k, pr.v, ks, vs, kg, nil, rp, qi, 2, args)
		if err != nil {
			return
		}
		if scaleSel%4 != 2 && !math.IsInf(float64(g), 0) && math.Abs(float64(g)) < 1e6 {
			noNaN(t, res)
		}
	})
}

// FuzzDecodeWrapper mutates page table, seqused_k and q2k between Plan and
// Run (and the plan arguments); Plan and Run must error or succeed, never
// panic, and a successful run has no NaN.
func FuzzDecodeWrapper(f *testing.F) {
	f.Add(uint64(1), uint8(0), uint16(0), int32(5), false, uint8(0))
	f.Add(uint64(2), uint8(1), uint16(1), int32(-1), true, uint8(1))
	f.Add(uint64(3), uint8(2), uint16(3), int32(1<<20), true, uint8(2))
	f.Add(uint64(4), uint8(0), uint16(7), int32(2), false, uint8(3))
	f.Fuzz(func(t *testing.T, seed uint64, which uint8, idx uint16, val int32, sparse bool, mode uint8) {
		s := decodeSpec{seed: seed, seqused: []int{int(seed % 90), 40}, seqlenQ: 1 + int(seed%3), hq: 4, hkv: 2, d: 64,
			pageSize: 16, dt: "bf16", extraCols: 1, workers: 2}
		if sparse {
			s.topK, s.blk = 2, 32
		}
		switch mode % 4 {
		case 1:
			s.fixedSplit = 1
		case 2:
			s.disableSplit = true
		}
		pr := buildDecode(s)
		w, err := NewDecodeWrapper(16)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		args := planArgs(s, pr)
		args.EnableCUDAGraph = mode%4 == 3
		var q2k tensor.Tensor
		if pr.q2k != nil {
			q2k = pr.q2k
		}
		if which%2 == 0 { // mutate before Plan
			fuzzMutate([]*tensor.Dense{pr.pt, pr.su, pr.q2k}, which/2, idx, val)
		}
		if err := w.Plan(args, q2k); err != nil {
			return
		}
		if which%2 == 1 { // mutate between Plan and Run
			fuzzMutate([]*tensor.Dense{pr.pt, pr.su, pr.q2k}, which/2, idx, val)
		}
		res, err := w.Run(pr.q, pr.k, pr.v, 0)
		if err != nil {
			return
		}
		noNaN(t, res)
	})
}

// FuzzSparseDecodeAttenFunc mutates the metadata of a valid eager decode
// call; it must error or return NaN-free output.
func FuzzSparseDecodeAttenFunc(f *testing.F) {
	f.Add(uint64(1), uint8(0), uint16(0), int32(7), false, 0)
	f.Add(uint64(2), uint8(1), uint16(2), int32(-5), true, 1)
	f.Add(uint64(3), uint8(2), uint16(4), int32(100000), true, 3)
	f.Fuzz(func(t *testing.T, seed uint64, which uint8, idx uint16, val int32, sparse bool, seqlenQ int) {
		s := decodeSpec{seed: seed, seqused: []int{int(seed % 70), 33, 0}, seqlenQ: 1 + int(seed%4), hq: 8, hkv: 2, d: 64,
			pageSize: 16, dt: "e4m3", workers: 2, fixedSplit: int(seed % 3)}
		if sparse {
			s.topK, s.blk = 3, 16
		}
		pr := buildDecode(s)
		fuzzMutate([]*tensor.Dense{pr.pt, pr.su, pr.q2k}, which, idx, val)
		args := decodeArgs(s, pr)
		if seqlenQ%5 == 4 {
			args.SeqlenQ = seqlenQ // inconsistent with q
		}
		var q2k tensor.Tensor
		if pr.q2k != nil {
			q2k = pr.q2k
		}
		res, err := DecodeAttentionFunc(pr.q, pr.k, pr.v, q2k, args)
		if err != nil {
			return
		}
		noNaN(t, res)
	})
}

// FuzzPrepareSparseFwdSchedule corrupts a valid CSR before the schedule is
// prepared, and a valid schedule before it is used.
func FuzzPrepareSparseFwdSchedule(f *testing.F) {
	f.Add(uint64(1), uint8(0), uint16(0), int32(9), uint8(0))
	f.Add(uint64(2), uint8(1), uint16(3), int32(-1), uint8(1))
	f.Add(uint64(3), uint8(2), uint16(8), int32(1<<24), uint8(2))
	f.Fuzz(func(t *testing.T, seed uint64, which uint8, idx uint16, val int32, target uint8) {
		s := sparseSpec{seed: seed, seqQ: []int{4, int(seed % 6)}, seqK: []int{260, int(seed%300) + 1}, hq: 4, hkv: 2, d: 64,
			topK: 3, blk: 128, qDt: "bf16", kvDt: "bf16", partial: tensor.Float32}
		pr := buildSparse(s)
		rp, qi, err := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, 128)
		if err != nil {
			t.Fatal(err)
		}
		totalQ := pr.q.Shape()[0]
		if target%2 == 0 {
			fuzzMutate([]*tensor.Dense{rp, qi}, which, idx, val)
		}
		sched, err := FwdScheduleFunc(rp, qi, ScheduleArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK, TotalQ: totalQ,
			TopK: 3, QheadPerKV: 2, Workers: 1 + int(seed%3)})
		if err != nil {
			return
		}
		if target%2 == 1 {
			fuzzMutate([]*tensor.Dense{sched.SchedulerMetadata(), sched.WorkCount(), sched.QSplitIndices(), sched.SplitCounts()}, which, idx, val)
		}
		res, err := SparseAttentionFunc(pr.q, pr.k, pr.v, rp, qi, 3, SparseArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK,
			Schedule: sched})
		if err != nil {
			return
		}
		noNaN(t, res)
	})
}
