package golden

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

var (
	loadOnce  sync.Once
	loaded    []Case
	loadError error
)

// all loads the committed cases once per test binary.
func all(t *testing.T) []Case {
	loadOnce.Do(func() { loaded, loadError = Load(Dir()) })
	if loadError != nil {
		t.Fatal(loadError)
	}
	return loaded
}

func TestLoadAll(t *testing.T) {
	cases := all(t)
	raw, err := os.ReadFile(filepath.Join(Dir(), "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var man struct {
		Cases []struct {
			File string `json:"file"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &man); err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 || len(cases) != len(man.Cases) {
		t.Fatalf("loaded %d cases, manifest lists %d", len(cases), len(man.Cases))
	}
	kinds := map[string]int{}
	for i := range cases {
		c := &cases[i]
		kinds[c.Kind]++
		t.Logf("%s: B=%d total_q=%d Hq=%d Hkv=%d D=%d %s/%s/%s topK=%d paged=%v", c.Name, c.Batch, c.TotalQ, c.Hq, c.Hkv, c.HeadDim, c.QDtype, c.KDtype, c.VDtype, c.TopK, c.Paged())
	}
	for _, k := range []string{KindPrefill, KindPrefillNVFP4, KindDecode} {
		if kinds[k] == 0 {
			t.Errorf("no case of kind %s", k)
		}
	}
}

// TestRecompute re-derives a sample of expected rows in Go from the stored
// bits, as a check of the file format (layouts, page table, scale tiling).
func TestRecompute(t *testing.T) {
	cases := all(t)
	for i := range cases {
		c := &cases[i]
		for b := 0; b < c.Batch; b++ {
			for r := int(c.CuSeqlensQ[b]); r < int(c.CuSeqlensQ[b+1]); r++ {
				for hq := 0; hq < c.Hq; hq += c.QheadPerKV/2 + 1 {
					lse, lseT, o := recompute(c, b, r, hq)
					want := c.LSE[r*c.Hq+hq]
					if !close(lse, want) {
						t.Fatalf("%s row %d head %d: lse %v, file %v", c.Name, r, hq, lse, want)
					}
					if c.LSETemperature != nil && !close(lseT, c.LSETemperature[r*c.Hq+hq]) {
						t.Fatalf("%s row %d head %d: temperature lse %v, file %v", c.Name, r, hq, lseT, c.LSETemperature[r*c.Hq+hq])
					}
					for x := range o {
						w := c.O[(r*c.Hq+hq)*c.HeadDim+x]
						if math.Abs(o[x]-w) > 1e-8*math.Max(1e-3, math.Abs(w)) {
							t.Fatalf("%s row %d head %d dim %d: o %v, file %v", c.Name, r, hq, x, o[x], w)
						}
					}
				}
			}
		}
	}
}

func close(a, b float64) bool {
	if math.IsInf(a, -1) || math.IsInf(b, -1) {
		return math.IsInf(a, -1) && math.IsInf(b, -1)
	}
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b))
}

func decode(bits uint16, dtype string) float64 {
	if dtype == DtypeBF16 {
		return float64(math.Float32frombits(uint32(bits) << 16))
	}
	s := 1.0
	if bits&0x80 != 0 {
		s = -1
	}
	e, m := int(bits>>3)&15, float64(bits&7)
	if e == 0 {
		return s * m / 8 * math.Ldexp(1, -6)
	}
	return s * (1 + m/8) * math.Ldexp(1, e-7)
}

var e2m1 = [8]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// kvRow returns the decoded D-vector of K (isV false) or V for batch-local
// token t of sequence b and KV head h (NVFP4 without V's global scale).
func kvRow(c *Case, isV bool, b, t, h int) []float64 {
	src, scales := c.K, c.KScale
	if isV {
		src, scales = c.V, c.VScale
	}
	var row int
	if c.Paged() {
		row = (int(c.PageTable[b][t/c.PageSize])*c.Hkv+h)*c.PageSize + t%c.PageSize
	} else {
		row = (int(c.CuSeqlensK[b])+t)*c.Hkv + h
	}
	d := c.HeadDim
	out := make([]float64, d)
	if c.KDtype != DtypeNVFP4 {
		for x := range out {
			out[x] = decode(src[row*d+x], c.KDtype)
		}
		return out
	}
	cols := d / 16
	for x := range out {
		nib := src[row*d/2+x/2] >> (4 * (x % 2)) & 15
		v := e2m1[nib&7]
		if nib&8 != 0 {
			v = -v
		}
		cc := x / 16
		off := (row/128*((cols+3)/4)+cc/4)*512 + (row%32)*16 + ((row%128)/32)*4 + cc%4
		out[x] = v * decode(uint16(scales[off]), DtypeE4M3)
		if !isV && c.KGlobalScale != 0 {
			out[x] *= c.KGlobalScale
		}
	}
	return out
}

// recompute returns LSE, temperature LSE and O of query row r, head hq.
func recompute(c *Case, b, r, hq int) (float64, float64, []float64) {
	h := hq / c.QheadPerKV
	sq, sk := c.SeqlenQBatch(b), c.SeqlenK(b)
	i := r - int(c.CuSeqlensQ[b])
	var toks []int
	if c.Q2KIndices == nil {
		for t := 0; t < sk; t++ {
			toks = append(toks, t)
		}
	} else {
		for _, j := range c.Q2KIndices[h][r] {
			for t := int(j) * c.BlkKV; j >= 0 && t < (int(j)+1)*c.BlkKV && t < sk; t++ {
				toks = append(toks, t)
			}
		}
	}
	d := c.HeadDim
	q := make([]float64, d)
	for x := range q {
		q[x] = decode(c.Q[(r*c.Hq+hq)*d+x], c.QDtype)
	}
	var s []float64
	var vs [][]float64
	m := math.Inf(-1)
	for _, t := range toks {
		if c.Causal && t > i+sk-sq {
			continue
		}
		k := kvRow(c, false, b, t, h)
		dot := 0.0
		for x := range k {
			dot += q[x] * k[x]
		}
		s = append(s, c.SoftmaxScale*dot)
		vs = append(vs, kvRow(c, true, b, t, h))
		m = math.Max(m, s[len(s)-1])
	}
	o := make([]float64, d)
	if len(s) == 0 {
		return math.Inf(-1), math.Inf(-1), o
	}
	sum, sumT := 0.0, 0.0
	for j := range s {
		if c.Temperature != 0 {
			sumT += math.Exp((s[j] - m) / c.Temperature)
		}
		p := math.Exp(s[j] - m)
		sum += p
		for x := range o {
			o[x] += p * vs[j][x]
		}
	}
	scale := 1 / sum
	if c.VGlobalScale != 0 {
		scale *= c.VGlobalScale
	}
	for x := range o {
		o[x] *= scale
	}
	return m + math.Log(sum), m/c.Temperature + math.Log(sumT), o
}
