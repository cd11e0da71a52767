package plan

import (
	"math/rand"
	"slices"
	"strings"
	"testing"
)

// problem is a random varlen sparse problem.
type problem struct {
	hkv, totalQ, topK, blkKV int
	cuQ, cuK                 []int32
	q2k                      []int32
}

// randProblem draws ragged batches (including empty sequences), -1 padding
// at random positions, Hkv 1..4 and topK 1..64.
func randProblem(rng *rand.Rand) problem {
	var p problem
	nb := rng.Intn(6)
	p.hkv = 1 + rng.Intn(4)
	p.topK = 1 + rng.Intn(64)
	if rng.Intn(2) == 0 {
		p.topK = []int{1, 4, 8, 16, 32}[rng.Intn(5)]
	}
	p.blkKV = []int{1, 2, 3, 4, 8, 16}[rng.Intn(6)]
	p.cuQ = make([]int32, nb+1)
	p.cuK = make([]int32, nb+1)
	if rng.Intn(4) == 0 {
		p.cuK[0] = int32(rng.Intn(10)) // the reference does not require cu_k[0] == 0
	}
	for b := 0; b < nb; b++ {
		sq, sk := rng.Intn(7), rng.Intn(p.blkKV*12+1)
		if rng.Intn(5) == 0 {
			sq = 0
		}
		if rng.Intn(5) == 0 {
			sk = 0
		}
		p.cuQ[b+1] = p.cuQ[b] + int32(sq)
		p.cuK[b+1] = p.cuK[b] + int32(sk)
	}
	p.totalQ = int(p.cuQ[nb])
	p.q2k = make([]int32, p.hkv*p.totalQ*p.topK)
	for i := range p.q2k {
		p.q2k[i] = -1
	}
	for h := 0; h < p.hkv; h++ {
		for b := 0; b < nb; b++ {
			nblk := (int(p.cuK[b+1]-p.cuK[b]) + p.blkKV - 1) / p.blkKV
			for q := p.cuQ[b]; q < p.cuQ[b+1]; q++ {
				list := p.q2k[(h*p.totalQ+int(q))*p.topK:][:p.topK]
				perm := rng.Perm(nblk)
				n := min(len(perm), rng.Intn(p.topK+1))
				pos := rng.Perm(p.topK)[:n] // random positions, -1 elsewhere
				for i := 0; i < n; i++ {
					list[pos[i]] = int32(perm[i])
				}
			}
		}
	}
	return p
}

// naiveCSR is the deliberately naive reference: for every row (b, j) in the
// block-major numbering, scan every query of b and every slot.
func naiveCSR(p problem) (rowPtr, qIdx []int32, total int) {
	nb := len(p.cuK) - 1
	cnt := make([]int, nb)
	maxb := 0
	for b := range cnt {
		cnt[b] = (int(p.cuK[b+1]-p.cuK[b]) + p.blkKV - 1) / p.blkKV
		maxb = max(maxb, cnt[b])
	}
	type rc struct{ b, j int }
	var order []rc
	for j := 0; j < maxb; j++ {
		for b := 0; b < nb; b++ {
			if j < cnt[b] {
				order = append(order, rc{b, j})
			}
		}
	}
	total = len(order)
	stride := p.totalQ * p.topK
	rowPtr = make([]int32, p.hkv*(total+1))
	qIdx = make([]int32, p.hkv*stride)
	for h := 0; h < p.hkv; h++ {
		n := 0
		for r, o := range order {
			for q := p.cuQ[o.b]; q < p.cuQ[o.b+1]; q++ {
				for k := 0; k < p.topK; k++ {
					if p.q2k[(h*p.totalQ+int(q))*p.topK+k] == int32(o.j) {
						qIdx[h*stride+n] = q - p.cuQ[o.b]
						n++
					}
				}
			}
			rowPtr[h*(total+1)+r+1] = int32(n)
		}
		for i := n; i < stride; i++ {
			qIdx[h*stride+i] = -1
		}
	}
	return rowPtr, qIdx, total
}

func wantErr(t *testing.T, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected an error containing %q, got nil", subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not contain %q", err, s)
		}
	}
	if !strings.HasPrefix(err.Error(), "plan: ") {
		t.Fatalf("error %q lacks the plan: prefix", err)
	}
}

func fwdParams(p problem) FwdParams {
	return FwdParams{TotalQ: p.totalQ, Hkv: p.hkv, QheadPerKV: 4, TopK: p.topK, BlkKV: p.blkKV, Workers: 3}
}

// buildAll builds rows, CSR and forward schedule of p.
func buildAll(t testing.TB, p problem, fp FwdParams) (*Rows, *CSR, *FwdSchedule) {
	t.Helper()
	rows, err := NewRows(p.cuK, p.blkKV)
	if err != nil {
		t.Fatal(err)
	}
	c, err := BuildK2QCSR(nil, p.q2k, p.hkv, p.totalQ, p.topK, p.cuQ, p.cuK, p.blkKV)
	if err != nil {
		t.Fatal(err)
	}
	s, err := BuildFwdSchedule(nil, c, rows, p.cuQ, fp)
	if err != nil {
		t.Fatal(err)
	}
	return rows, c, s
}

// naiveSlots returns, for (global q, h, block j), the rank of j among the
// sorted selected blocks of q's list.
func naiveSlot(p problem, h, q int, j int32) int32 {
	list := slices.Clone(p.q2k[(h*p.totalQ+q)*p.topK:][:p.topK])
	slices.Sort(list)
	rank := int32(0)
	for _, v := range list {
		if v >= 0 && v < j {
			rank++
		}
	}
	return rank
}
