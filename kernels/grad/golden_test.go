package grad

import (
	"compress/bzip2"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/sparseattn/msa/kernels/plan"
)

// goldenCase is one case written by testdata/gen_grad_golden.py (PyTorch
// autograd in float64); see the script for the fields.
type goldenCase struct {
	Name      string     `json:"name"`
	Causal    bool       `json:"causal"`
	Scale     float64    `json:"softmax_scale"`
	BlkKV     int        `json:"blk_kv"`
	TopK      int        `json:"topk"`
	TotalQ    int        `json:"total_q"`
	HQ        int        `json:"hq"`
	Hkv       int        `json:"hkv"`
	D         int        `json:"head_dim"`
	CuQ       []int32    `json:"cu_seqlens_q"`
	CuK       []int32    `json:"cu_seqlens_k"`
	TotalK    int        `json:"total_k"`
	NumPages  int        `json:"num_pages"`
	PageSize  int        `json:"page_size"`
	PageTable []int32    `json:"page_table"`
	SeqUsedK  []int32    `json:"seqused_k"`
	Q2K       []int32    `json:"q2k_indices"`
	Q         []float64  `json:"q"`
	K         []float64  `json:"k"`
	V         []float64  `json:"v"`
	DO        []float64  `json:"do"`
	DLSE      []float64  `json:"dlse"`
	O         []float64  `json:"o"`
	LSE       []*float64 `json:"lse"`
	DQ        []float64  `json:"dq"`
	DK        []float64  `json:"dk"`
	DV        []float64  `json:"dv"`
}

func loadGolden(t *testing.T, path string) *goldenCase {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var c goldenCase
	if err := json.NewDecoder(bzip2.NewReader(f)).Decode(&c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &c
}

// instance turns a golden case into a test instance.
func (c *goldenCase) instance(t *testing.T) *instance {
	t.Helper()
	p := &Problem{
		TotalQ: c.TotalQ, HQ: c.HQ, Hkv: c.Hkv, D: c.D, CuQ: c.CuQ, CuK: c.CuK, TotalK: c.TotalK,
		BlkKV: c.BlkKV, TopK: c.TopK, Causal: c.Causal, Scale: c.Scale,
	}
	if c.PageTable != nil {
		nb := len(c.CuQ) - 1
		p.Paged, p.PageTable, p.PTCols, p.PageSize, p.NumPages, p.SeqUsedK = true, c.PageTable, len(c.PageTable)/nb, c.PageSize, c.NumPages, c.SeqUsedK
	}
	csr, err := plan.BuildK2QCSR(nil, c.Q2K, c.Hkv, c.TotalQ, c.TopK, c.CuQ, c.CuK, c.BlkKV)
	if err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
	p.CSR = csr
	return &instance{p: p, q2k: c.Q2K, q: c.Q, k: c.K, v: c.V, dO: c.DO, dLSE: c.DLSE}
}

// TestTorchGolden compares the float32 kernels and the float64 reference
// with gradients computed by PyTorch autograd (testdata/*.grad.json.bz2).
func TestTorchGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.grad.json.bz2")
	if len(files) == 0 {
		t.Fatal("no golden files in testdata")
	}
	for _, path := range files {
		c := loadGolden(t, path)
		in := c.instance(t)
		lse := make([]float64, len(c.LSE))
		for i, x := range c.LSE {
			lse[i] = math.Inf(-1)
			if x != nil {
				lse[i] = *x
			}
		}
		want := &refResult{o: c.O, lse: lse, dq: c.DQ, dk: c.DK, dv: c.DV}
		// The float64 reference agrees with torch up to the 13 digits written.
		ref := in.reference(in.q, in.k, in.v, in.dO, in.dLSE)
		// The float32 kernels agree within the float32 tolerances.
		o, l32, dq, dk, dv := run32(t, in, 2, true)
		for _, q := range []struct {
			name       string
			want, ref  []float64
			got        []float32
			tol, tol64 float64
		}{
			{"O", want.o, ref.o, o, tolO, 1e-11}, {"LSE", want.lse, ref.lse, l32, tolLSE, 1e-11},
			{"dQ", want.dq, ref.dq, dq, tolGrad, 1e-11}, {"dK", want.dk, ref.dk, dk, tolGrad, 1e-11},
			{"dV", want.dv, ref.dv, dv, tolGrad, 1e-11},
		} {
			_, rel32 := errStat(q.got, q.want)
			_, rel64 := errStat64(q.ref, q.want)
			t.Logf("%s %s: float32 kernels %.3g, float64 reference %.3g (relative to max |torch|)", c.Name, q.name, rel32, rel64)
			if !(rel32 <= q.tol) {
				t.Errorf("%s %s: float32 kernels differ from torch by %.3g > %.3g", c.Name, q.name, rel32, q.tol)
			}
			if !(rel64 <= q.tol64) {
				t.Errorf("%s %s: float64 reference differs from torch by %.3g > %.3g", c.Name, q.name, rel64, q.tol64)
			}
		}
	}
}

// errStat64 is errStat for a float64 result.
func errStat64(got, want []float64) (maxAbs, rel float64) {
	var norm float64
	for _, w := range want {
		if !math.IsInf(w, 0) {
			norm = max(norm, math.Abs(w))
		}
	}
	for i, w := range want {
		if math.IsInf(w, -1) && math.IsInf(got[i], -1) {
			continue
		}
		d := math.Abs(got[i] - w)
		if math.IsNaN(d) {
			d = math.Inf(1)
		}
		maxAbs = max(maxAbs, d)
	}
	if norm == 0 {
		return maxAbs, maxAbs
	}
	return maxAbs, maxAbs / norm
}
