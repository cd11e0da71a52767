package op

import (
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// SparseArgs.Out and OutLSE: a call writes exactly what it would return in
// tensors of its own into the caller's tensors, which become Result.Out and
// Result.LSE, also when reused by the next call and when they held other
// values before; the NVFP4 entry point takes them too.
func TestSparseOutArgs(t *testing.T) {
	for _, paged := range []bool{false, true} {
		c, _ := validBase(t, paged)
		want, err := SparseAttentionFunc(c.q, c.k, c.v, c.rp, c.qi, c.topK, c.args)
		if err != nil {
			t.Fatal(err)
		}
		shape := want.Out.Shape()
		out, lse := bf16T(shape...), tensor.New(tensor.WithShape(shape[0], shape[1]), tensor.Of(tensor.Float32))
		for i := range validate.Backing[lowp.BFloat16](out) {
			validate.Backing[lowp.BFloat16](out)[i] = lowp.BF16(float32(i))
		}
		for i := range validate.Backing[float32](lse) {
			validate.Backing[float32](lse)[i] = float32(math.NaN())
		}
		args := c.args
		args.Out, args.OutLSE = out, lse
		for call := 0; call < 2; call++ {
			got, err := SparseAttentionFunc(c.q, c.k, c.v, c.rp, c.qi, c.topK, args)
			if err != nil {
				t.Fatalf("paged=%v call %d: %v", paged, call, err)
			}
			if got.Out != out || got.LSE != lse {
				t.Fatalf("paged=%v call %d: Result.Out/LSE are not the given tensors", paged, call)
			}
			wo, go_ := validate.Backing[lowp.BFloat16](want.Out), validate.Backing[lowp.BFloat16](out)
			for i := range wo {
				if wo[i] != go_[i] {
					t.Fatalf("paged=%v call %d: Out[%d] = %v, want %v", paged, call, i, go_[i].Float32(), wo[i].Float32())
				}
			}
			wl, gl := validate.Backing[float32](want.LSE), validate.Backing[float32](lse)
			for i := range wl {
				if math.Float32bits(wl[i]) != math.Float32bits(gl[i]) {
					t.Fatalf("paged=%v call %d: LSE[%d] = %v, want %v", paged, call, i, gl[i], wl[i])
				}
			}
		}
		// Out alone: the LSE is allocated as before.
		args.OutLSE = nil
		got, err := SparseAttentionFunc(c.q, c.k, c.v, c.rp, c.qi, c.topK, args)
		if err != nil || got.Out != out || got.LSE == nil || got.LSE == lse {
			t.Fatalf("paged=%v, Out only: %v (Out given %v, LSE allocated %v)", paged, err, got != nil && got.Out == out, got != nil && got.LSE != nil && got.LSE != lse)
		}
	}
}

// Bad Out / OutLSE arguments are errors naming the argument: wrong shape or
// dtype, a view, storage shared with an input or with each other, and any
// of them on the float32 path.
func TestSparseOutArgsRejected(t *testing.T) {
	c, _ := validBase(t, false)
	res, err := SparseAttentionFunc(c.q, c.k, c.v, c.rp, c.qi, c.topK, c.args)
	if err != nil {
		t.Fatal(err)
	}
	shape := []int(res.Out.Shape())
	tq, hq, d := shape[0], shape[1], shape[2]
	f32 := func(shape ...int) *tensor.Dense {
		return tensor.New(tensor.WithShape(shape...), tensor.Of(tensor.Float32))
	}
	view := func() *tensor.Dense {
		big := bf16T(tq+1, hq, d)
		v, err := big.Slice(tensor.S(0, tq))
		if err != nil {
			t.Fatal(err)
		}
		return v.(*tensor.Dense)
	}
	// An Out on q's storage: q is [total_q, Hq, D] BF16 too.
	onQ := tensor.New(tensor.WithShape(tq, hq, d), tensor.WithBacking(validate.Backing[lowp.BFloat16](c.q.(*tensor.Dense))))
	out := bf16T(tq, hq, d)
	lseOnOut := tensor.New(tensor.WithShape(tq, hq),
		tensor.WithBacking(unsafe.Slice((*float32)(unsafe.Pointer(&validate.Backing[lowp.BFloat16](out)[0])), tq*hq)))
	onCuQ := tensor.New(tensor.WithShape(tq, hq), tensor.WithBacking(make([]float32, tq*hq)))
	cases := []struct {
		name     string
		out, lse *tensor.Dense
		want     string
	}{
		{"out shape", bf16T(tq, hq, d+1), nil, "out:"},
		{"out dtype", f32(tq, hq, d), nil, "out:"},
		{"out view", view(), nil, "out:"},
		{"out on q", onQ, nil, "shared with q"},
		{"lse shape", nil, f32(tq, hq+1), "lse:"},
		{"lse dtype", nil, bf16T(tq, hq), "lse:"},
		{"lse on out", out, lseOnOut, "shared with lse"},
		{"lse on cu_seqlens_q", nil, onCuQ, "shared with cu_seqlens_q"},
	}
	for _, tc := range cases {
		args := c.args
		if tc.name == "lse on cu_seqlens_q" {
			args.CuSeqlensQ = tensor.New(tensor.WithShape(3), tensor.WithBacking(unsafe.Slice((*int32)(unsafe.Pointer(&validate.Backing[float32](onCuQ)[0])), 3)))
			copy(validate.Backing[int32](args.CuSeqlensQ.(*tensor.Dense)), validate.Backing[int32](c.args.CuSeqlensQ.(*tensor.Dense)))
		}
		args.Out, args.OutLSE = tc.out, tc.lse
		_, err := SparseAttentionFunc(c.q, c.k, c.v, c.rp, c.qi, c.topK, args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	// The float32 path takes neither.
	q32 := tensor.New(tensor.WithShape(tq, hq, d), tensor.Of(tensor.Float32))
	kd := c.k.(*tensor.Dense).Shape()
	k32 := tensor.New(tensor.WithShape(kd...), tensor.Of(tensor.Float32))
	v32 := tensor.New(tensor.WithShape(kd...), tensor.Of(tensor.Float32))
	args := c.args
	args.Out = f32(tq, hq, d)
	if _, err := SparseAttentionFunc(q32, k32, v32, c.rp, c.qi, c.topK, args); err == nil || !strings.Contains(err.Error(), "out/lse") {
		t.Errorf("float32 path with Out: error %v, want one naming out/lse", err)
	}
}

// The NVFP4 entry point takes Out and OutLSE too, and refuses an OutLSE on
// the storage of a global scale.
func TestSparseOutArgsNVFP4(t *testing.T) {
	s := sparseSpec{seed: 4, seqQ: []int{3}, seqK: []int{150}, hq: 2, hkv: 1, d: 64, topK: 2, blk: 128,
		qDt: "bf16", kvDt: "nvfp4", partial: tensor.Float32, kGlobal: 0.5}
	pr := buildSparse(s)
	rp, qi, err := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, 128)
	if err != nil {
		t.Fatal(err)
	}
	args := SparseArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK, PartialDtype: tensor.Float32}
	want, err := SparseAttentionNVFP4KVFunc(pr.q, pr.k, pr.v, pr.kScale, pr.vScale, pr.kGlobal, nil, rp, qi, 2, args)
	if err != nil {
		t.Fatal(err)
	}
	args.Out = bf16T(3, 2, 64)
	got, err := SparseAttentionNVFP4KVFunc(pr.q, pr.k, pr.v, pr.kScale, pr.vScale, pr.kGlobal, nil, rp, qi, 2, args)
	if err != nil || got.Out != args.Out {
		t.Fatalf("NVFP4 with Out: %v", err)
	}
	sameResult(t, "NVFP4 with Out", want, got)
	// An OutLSE ([3, 2] float32) whose first float is the K global scale's
	// storage.
	g := make([]float32, 6)
	g[0] = 0.5
	kg := tensor.New(tensor.WithShape(1), tensor.WithBacking(g[:1]))
	args.Out, args.OutLSE = nil, tensor.New(tensor.WithShape(3, 2), tensor.WithBacking(g))
	_, err = SparseAttentionNVFP4KVFunc(pr.q, pr.k, pr.v, pr.kScale, pr.vScale, kg, nil, rp, qi, 2, args)
	if err == nil || !strings.Contains(err.Error(), "shared with k_global_scale") {
		t.Fatalf("OutLSE on the K global scale: %v, want an error naming k_global_scale", err)
	}
}
