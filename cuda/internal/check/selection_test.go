package check

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/sparseattn/msa/cuda"
	"github.com/sparseattn/msa/internal/workload"
	"github.com/sparseattn/msa/op/causalselect"
)

// TestSelectionUnion generates the bench's 8K prefill in the three
// patterns: the same Q, K and V, the correlated q2k that of
// workload.CorrelatedQ2K (the bench's correlated case, whose hash bench
// pins), the random one the bench's random case, and the mean union of
// blocks per query-major tile strictly ordered local < correlated <
// random, each equal to the mean block list of the query-major plan's
// tiles (what the kernel walks). A correlated row that generated the local
// (or the random) pattern fails here.
func TestSelectionUnion(t *testing.T) {
	const T = 8192
	sels := &Selections{Workers: 2}
	union := map[Selection]float64{}
	var enc []byte
	for _, sel := range []Selection{Local, Correlated, Random} {
		c := TimingPrefill("prefill bf16 8K "+string(sel), T, cuda.BF16, cuda.BF16)
		if err := c.GenTiming(1, sel, sels); err != nil {
			t.Fatal(err)
		}
		if enc == nil {
			enc = slices.Concat(c.Q.Enc, c.K.Enc, c.V.Enc)
		} else if !bytes.Equal(enc, slices.Concat(c.Q.Enc, c.K.Enc, c.V.Enc)) {
			t.Errorf("%s: Q, K, V differ from the local pattern's", sel)
		}
		var want []int32
		var err error
		switch sel {
		case Correlated:
			want, err = workload.CorrelatedQ2K(causalselect.Shape{T: T, Hq: BenchHq, Hkv: BenchHkv, D: BenchD, TopK: BenchTopK, Blk: BenchBlk}, workload.Seed(T), 1)
		case Random:
			want, _, err = workload.RandomQ2K(T, BenchHkv, BenchTopK, BenchBlk, workload.Seed(T)+3)
		case Local:
			want = localQ2K(causalselect.Shape{T: T, Hq: BenchHq, Hkv: BenchHkv, D: BenchD, TopK: BenchTopK, Blk: BenchBlk})
		}
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.Q2K, want) {
			t.Errorf("%s: q2k is not the pattern's", sel)
		}
		u, err := c.TileUnion()
		if err != nil {
			t.Fatal(err)
		}
		qp, err := cuda.BuildQPlan(c.CSR, c.Sched, c.CuQ, c.Hkv, c.QHPK, cuda.QTileRows)
		if err != nil {
			t.Fatal(err)
		}
		if walked := float64(len(qp.Blocks)) / float64(qp.NumTiles()); walked != u {
			t.Errorf("%s: TileUnion %.4f, the query-major plan's tiles walk %.4f blocks on average", sel, u, walked)
		}
		union[sel] = u
		t.Logf("%s: %.2f blocks per %d-token tile", sel, u, cuda.QTileTokens(c.QHPK))
	}
	if !(union[Local] < union[Correlated] && union[Correlated] < union[Random]) {
		t.Errorf("mean union per tile: local %.2f, correlated %.2f, random %.2f: want local < correlated < random", union[Local], union[Correlated], union[Random])
	}
	if len(sels.corr) != 1 {
		t.Errorf("%d correlated selections kept, want 1", len(sels.corr))
	}
	// another dtype of the same length takes the kept selection
	c := TimingPrefill("prefill fp8 8K correlated", T, cuda.E4M3, cuda.E4M3)
	if err := c.GenTiming(1, Correlated, sels); err != nil {
		t.Fatal(err)
	}
	if len(sels.corr) != 1 {
		t.Errorf("%d correlated selections after a second dtype, want 1", len(sels.corr))
	}
}

// GenTiming refuses what is not a timed prefill, and an unknown pattern.
func TestGenTimingRefuses(t *testing.T) {
	paged := TimingPrefill("p", 512, cuda.BF16, cuda.BF16)
	paged.Paged, paged.PageSize = true, 64
	ragged := TimingPrefill("r", 512, cuda.BF16, cuda.BF16)
	ragged.CuQ, ragged.CuK = []int32{0, 100, 512}, []int32{0, 100, 512}
	for _, c := range []struct {
		p    *Prefill
		sel  Selection
		sels *Selections
		want string
	}{
		{TimingPrefill("p", 512, cuda.BF16, cuda.BF16), "diagonal", &Selections{}, `selection "diagonal": want correlated, random or local`},
		{paged, Local, &Selections{}, "want a causal prefill of dense K/V"},
		{ragged, Local, &Selections{}, "want one sequence [0, T]"},
		{TimingPrefill("p", 512, cuda.BF16, cuda.BF16), Correlated, nil, "nil Selections"},
	} {
		if err := c.p.GenTiming(1, c.sel, c.sels); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: error %v, want one containing %q", c.p.Name, c.sel, err, c.want)
		}
	}
}
