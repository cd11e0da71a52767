package workload

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/causalselect"
)

// The correlated rows have lag-1 correlation Rho and the stationary mean
// and variance of their innovations (the normal table, rounded to bf16:
// mean m e/(1-Rho) with e = sqrt(1-Rho^2), which turns the table's own
// sample mean m, about 0.025, into about 0.16; variance the table's), and
// CorrelatedBF16 is CorrelatedRows rounded. Tolerances, for N = 4096 rows
// x 64 independent columns: the sample mean of an AR(1) series has
// variance (1+Rho)/(1-Rho)/N = 39/N (sd 0.012), the sample variance
// 2(1+Rho^2)/(1-Rho^2)/N (sd 0.012), the lag-1 correlation (1-Rho^2)/N
// (Bartlett; sd 0.0006); 0.05, 0.05 and 0.01 are 4 to 16 sd: a wrong Rho,
// scale or innovation fails, and a fixed seed makes the test exact.
func TestCorrelatedRows(t *testing.T) {
	const rows, width = 4096, 64
	x := CorrelatedRows(rows, width, 5)
	var s, ss, lag float64
	for i, v := range x {
		s += float64(v)
		ss += float64(v) * float64(v)
		if i >= width {
			lag += float64(v) * float64(x[i-width])
		}
	}
	n := float64(len(x))
	mean, vr := s/n, ss/n-(s/n)*(s/n)
	r1 := (lag/(n-width) - mean*mean) / vr
	var tm, tv float64
	for _, v := range roundedNormals() {
		tm += float64(v)
		tv += float64(v) * float64(v)
	}
	tm /= float64(len(roundedNormals()))
	tv = tv/float64(len(roundedNormals())) - tm*tm
	wantMean := tm * math.Sqrt(1-Rho*Rho) / (1 - Rho)
	if math.Abs(mean-wantMean) > 0.05 || math.Abs(vr-tv) > 0.05 || math.Abs(r1-Rho) > 0.01 {
		t.Errorf("mean %.4f, variance %.4f, lag-1 correlation %.4f: want %.4f, %.4f, %.2f", mean, vr, r1, wantMean, tv, Rho)
	}
	b := CorrelatedBF16(rows, width, 5)
	for i, v := range x {
		if b[i] != lowp.BF16(v) {
			t.Fatalf("CorrelatedBF16[%d] = %v, want BF16(%v)", i, b[i], v)
		}
	}
	if len(CorrelatedRows(0, width, 5)) != 0 || len(CorrelatedBF16(rows, 0, 5)) != 0 {
		t.Errorf("no rows or no columns: want no values")
	}
}

// CorrelatedQ2K at the bench's GQA-2 test shape is the list the bench's
// correlated case selected before its generator moved here (FNV-1a of the
// little-endian int32 list; bench's TestCorrelatedGolden pins the default
// shapes).
func TestCorrelatedQ2KGolden(t *testing.T) {
	q2k, err := CorrelatedQ2K(causalselect.Shape{T: 1536, Hq: 4, Hkv: 2, D: 64, TopK: 8, Blk: 64}, Seed(1536), 2)
	if err != nil {
		t.Fatal(err)
	}
	h := fnv.New64a()
	b := make([]byte, 4*len(q2k))
	for i, v := range q2k {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	h.Write(b)
	if got, want := h.Sum64(), uint64(0x314c966522b567b2); got != want {
		t.Errorf("q2k hash %#x, want %#x", got, want)
	}
	if _, err := CorrelatedQ2K(causalselect.Shape{T: 64, Hq: 4, Hkv: 2, D: 64, TopK: 0, Blk: 64}, 1, 1); err == nil || !strings.Contains(err.Error(), "TopK = 0") {
		t.Errorf("TopK 0: error %v, want one naming TopK", err)
	}
}

// MeanTileUnion counts distinct selected blocks per tile of each
// sequence (a short last tile included), per KV head, ignoring -1.
func TestMeanTileUnion(t *testing.T) {
	// two heads, sequences of 3 and 2 tokens, topK 2, tiles of 2 tokens:
	// tiles {t0,t1} {t2} {t3,t4} per head
	q2k := []int32{
		0, 1, 1, 2, 5, -1, 0, 0, -1, -1, // head 0: tiles {0,1,2}=3, {5}=1, {0}=1
		3, -1, 3, -1, 4, 4, 1, 2, 2, 3, // head 1: tiles {3}=1, {4}=1, {1,2,3}=3
	}
	u, err := MeanTileUnion(q2k, []int32{0, 3, 5}, 2, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := 10.0 / 6; u != want {
		t.Errorf("MeanTileUnion %.4f, want %.4f", u, want)
	}
	for _, c := range []struct {
		q2k                []int32
		cuQ                []int32
		hkv, topK, tileTok int
		want               string
	}{
		{q2k, []int32{0, 3, 5}, 2, 2, 0, "tileTokens 0"},
		{q2k, []int32{0, 3, 5}, 0, 2, 2, "hkv 0"},
		{q2k, []int32{1, 3, 5}, 2, 2, 2, "offsets from 0"},
		{q2k, []int32{0, 3, 6}, 2, 2, 2, "q2k has 20 entries: want hkv x total_q x topK = 2 x 6 x 2"},
		{q2k[:12], []int32{0, 4, 3}, 2, 2, 2, "non-decreasing"},
		{nil, []int32{0, 0}, 2, 2, 2, "holds no query"},
	} {
		if _, err := MeanTileUnion(c.q2k, c.cuQ, c.hkv, c.topK, c.tileTok); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("cuQ %v hkv %d topK %d tile %d: error %v, want one containing %q", c.cuQ, c.hkv, c.topK, c.tileTok, err, c.want)
		}
	}
}

// RandomQ2K refuses sizes below 1, by name.
func TestRandomQ2KRefuses(t *testing.T) {
	for _, c := range [][4]int{{0, 1, 1, 1}, {8, 0, 1, 1}, {8, 1, 0, 1}, {8, 1, 1, 0}} {
		if _, _, err := RandomQ2K(c[0], c[1], c[2], c[3], 1); err == nil || !strings.Contains(err.Error(), "want each >= 1") {
			t.Errorf("RandomQ2K%v: error %v, want a refusal", c, err)
		}
	}
}
