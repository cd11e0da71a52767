package grad

import (
	"math"
	"strings"
	"testing"

	"github.com/sparseattn/msa/kernels/attn"
)

// preparedShapes are a dense causal problem and a paged one with a shared
// page, run on two workers.
var preparedShapes = []shape{
	{seqQ: []int{40, 0, 23}, seqK: []int{90, 17, 64}, hq: 4, hkv: 2, d: 64, topK: 3, blk: 16, causal: true, pad: 0.1, seed: 31},
	{seqQ: []int{1, 4}, seqK: []int{70, 33}, hq: 8, hkv: 2, d: 64, topK: 2, blk: 32, causal: true, paged: true, pageSize: 16, shared: true, seed: 32},
}

// sameBits fails unless got and want are bit-identical.
func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

// TestPreparedMatchesForward: ForwardPrepared, BackwardPrepared and
// TemperatureLSEPrepared give Forward's, Backward's and TemperatureLSE's
// bits, and none of them allocates once the workspace is warm.
func TestPreparedMatchesForward(t *testing.T) {
	for _, s := range preparedShapes {
		in := newInstance(t, s)
		p := in.p
		pool := attn.NewPool(2)
		defer pool.Close()
		ws := NewWorkspace(pool)
		q, k, v, dO := toF32(in.q), toF32(in.k), toF32(in.v), toF32(in.dO)
		nq, nr := len(q), p.TotalQ*p.HQ
		o, lse, tl := make([]float32, nq), make([]float32, nr), make([]float32, nr)
		dq, dk, dv := make([]float32, nq), make([]float32, len(k)), make([]float32, len(v))
		if err := ws.Forward(p, q, k, v, o, lse); err != nil {
			t.Fatal(err)
		}
		if err := ws.TemperatureLSE(p, q, k, 0.5, tl); err != nil {
			t.Fatal(err)
		}
		if err := ws.Backward(p, q, k, v, o, lse, dO, nil, dq, dk, dv); err != nil {
			t.Fatal(err)
		}

		var pp Prepared
		if err := pp.Prepare(p); err != nil {
			t.Fatal(err)
		}
		po, plse, ptl := make([]float32, nq), make([]float32, nr), make([]float32, nr)
		pdq, pdk, pdv := make([]float32, nq), make([]float32, len(k)), make([]float32, len(v))
		fwd := func() {
			if err := ws.ForwardPrepared(&pp, q, k, v, po, plse); err != nil {
				t.Fatal(err)
			}
		}
		fwd()
		if err := ws.TemperatureLSEPrepared(&pp, q, k, 0.5, ptl); err != nil {
			t.Fatal(err)
		}
		if err := ws.BackwardPrepared(&pp, q, k, v, po, plse, dO, nil, pdq, pdk, pdv); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name      string
			got, want []float32
		}{{"O", po, o}, {"LSE", plse, lse}, {"TLSE", ptl, tl}, {"dQ", pdq, dq}, {"dK", pdk, dk}, {"dV", pdv, dv}} {
			sameBits(t, s.String()+" "+c.name, c.got, c.want)
		}
		if raceDetector {
			continue
		}
		for _, c := range []struct {
			name string
			run  func() error
		}{
			{"ForwardPrepared", func() error { return ws.ForwardPrepared(&pp, q, k, v, po, plse) }},
			{"TemperatureLSEPrepared", func() error { return ws.TemperatureLSEPrepared(&pp, q, k, 0.5, ptl) }},
			{"BackwardPrepared", func() error { return ws.BackwardPrepared(&pp, q, k, v, po, plse, dO, nil, pdq, pdk, pdv) }},
			// The non-prepared calls prepare into the workspace's Prepared,
			// whose buffers (the CSR check's scratch included) are reused.
			{"Forward", func() error { return ws.Forward(p, q, k, v, po, plse) }},
			{"Backward", func() error { return ws.Backward(p, q, k, v, po, plse, dO, nil, pdq, pdk, pdv) }},
		} {
			if n := testing.AllocsPerRun(10, func() {
				if err := c.run(); err != nil {
					t.Fatal(err)
				}
			}); n != 0 {
				t.Errorf("%v: warm %s allocates %v per call, want 0", s, c.name, n)
			}
		}
	}
}

// TestPreparedOwnsMetadata: a prepared problem runs the metadata it was
// prepared with. Changing the caller's cu_seqlens_k, CSR and page table
// afterwards changes nothing (without the copies the paged call would read
// another page and the dense one other keys), and Prepare again picks the
// change up.
func TestPreparedOwnsMetadata(t *testing.T) {
	for _, s := range preparedShapes {
		in := newInstance(t, s)
		p := in.p
		ws := NewWorkspace(nil)
		q, k, v := toF32(in.q), toF32(in.k), toF32(in.v)
		o, lse := make([]float32, len(q)), make([]float32, p.TotalQ*p.HQ)
		var pp Prepared
		if err := pp.Prepare(p); err != nil {
			t.Fatal(err)
		}
		if err := ws.ForwardPrepared(&pp, q, k, v, o, lse); err != nil {
			t.Fatal(err)
		}
		want := append([]float32(nil), o...)
		if s.paged {
			p.PageTable[0] = int32(p.NumPages - 1) // an unused page of other data
		} else {
			p.CuK[1]-- // sequence 0 loses its last key
		}
		p.CSR.QIdx[0] = -7
		if err := ws.ForwardPrepared(&pp, q, k, v, o, lse); err != nil {
			t.Fatal(err)
		}
		sameBits(t, s.String()+" O after the caller's metadata changed", o, want)
		p.CSR.QIdx[0] = pp.qIdx[0]
		if err := pp.Prepare(p); err != nil {
			t.Fatal(err)
		}
		if err := ws.ForwardPrepared(&pp, q, k, v, o, lse); err != nil {
			t.Fatal(err)
		}
		same := true
		for i := range o {
			same = same && math.Float32bits(o[i]) == math.Float32bits(want[i])
		}
		if same {
			t.Errorf("%v: Prepare after a metadata change gave the old result", s)
		}
	}
}

// TestPreparedErrors: calls on an unprepared or failed Prepared, and run
// values (SetRun) that do not fit the prepared page table or are not
// finite, are errors naming what is wrong; a failed Prepare leaves no
// problem behind.
func TestPreparedErrors(t *testing.T) {
	in := newInstance(t, preparedShapes[1])
	p := in.p
	ws := NewWorkspace(nil)
	q, k, v := toF32(in.q), toF32(in.k), toF32(in.v)
	o, lse := make([]float32, len(q)), make([]float32, p.TotalQ*p.HQ)
	var pp Prepared
	want := func(what, sub string) {
		t.Helper()
		err := ws.ForwardPrepared(&pp, q, k, v, o, lse)
		if err == nil || !strings.Contains(err.Error(), sub) {
			t.Errorf("%s: got %v, want an error containing %q", what, err, sub)
		}
	}
	want("never prepared", "not prepared")
	if err := pp.Prepare(p); err != nil {
		t.Fatal(err)
	}
	pp.SetRun(math.NaN(), p.NumPages)
	want("NaN scale", "softmax_scale")
	pp.SetRun(p.Scale, int(pp.dv.maxPage))
	want("pool without the largest page", "must be a page index in [0, num_pages")
	pp.SetRun(p.Scale, -1)
	want("negative num_pages", "num_pages = -1")
	bad := *p
	bad.BlkKV = 0
	if err := pp.Prepare(&bad); err == nil {
		t.Fatal("Prepare with blk_kv = 0 gave no error")
	}
	want("after a failed Prepare", "not prepared")
	if err := pp.Prepare(nil); err == nil || !strings.Contains(err.Error(), "nil") {
		t.Errorf("Prepare(nil): got %v", err)
	}
}
