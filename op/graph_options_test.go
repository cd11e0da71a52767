package op

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestSparseAttentionGraphOptions runs SparseAttention nodes with the
// optional inputs (paged K/V with and without seqused_k, NVFP4 block and
// global scales) and checks them bit for bit against the eager functions.
func TestSparseAttentionGraphOptions(t *testing.T) {
	for n, s := range []sparseSpec{
		{seed: 31, seqQ: []int{9, 4}, seqK: []int{300, 140}, hq: 4, hkv: 2, d: 64, topK: 3, blk: 128, causal: true,
			paged: true, trim: true, qDt: "bf16", kvDt: "e4m3", partial: tensor.Float32},
		{seed: 32, seqQ: []int{5, 7}, seqK: []int{200, 260}, hq: 8, hkv: 1, d: 128, topK: 2, blk: 128,
			qDt: "e4m3", kvDt: "nvfp4", partial: BFloat16, kGlobal: 0.5, vGlobal: 2},
		{seed: 33, seqQ: []int{6}, seqK: []int{250}, hq: 2, hkv: 2, d: 64, topK: 2, blk: 128, causal: true,
			paged: true, qDt: "bf16", kvDt: "nvfp4", partial: tensor.Float32, vGlobal: 3},
	} {
		for _, withSeqused := range []bool{true, false} {
			if !s.paged && !withSeqused {
				continue
			}
			t.Run(fmt.Sprintf("%d/seqused=%v", n, withSeqused), func(t *testing.T) {
				pr := buildSparse(s)
				if s.paged && !withSeqused {
					// Without seqused_k every page-table column counts: make
					// the table exactly cover the sequences' pages.
					pr.seqused = nil
				}
				g := G.NewGraph()
				in := func(name string, v *tensor.Dense) *G.Node {
					nd := G.NewTensor(g, v.Dtype(), v.Dims(), G.WithShape(v.Shape()...), G.WithName(name))
					if err := G.Let(nd, v); err != nil {
						t.Fatal(err)
					}
					return nd
				}
				q, k, v := in("q", pr.q), in("k", pr.k), in("v", pr.v)
				cuQ, cuK, q2k := in("cu_q", pr.cuQ), in("cu_k", pr.cuK), in("q2k", pr.q2k)
				csr, err := K2QCSR(q2k, cuQ, cuK, BlkKV(s.blk), MaxSeqlenK(512))
				if err != nil {
					t.Fatal(err)
				}
				sched, err := FwdSchedule(csr, cuQ, cuK, QheadPerKV(s.hq/s.hkv), Workers(2))
				if err != nil {
					t.Fatal(err)
				}
				opts := []Option{Workers(2), PartialDtype(s.partial)}
				if s.causal {
					opts = append(opts, Causal())
				}
				args := SparseArgs{CuSeqlensQ: pr.cuQ, CuSeqlensK: pr.cuK, Causal: s.causal,
					PartialDtype: s.partial, Workers: 2}
				if s.paged {
					var su *G.Node
					if pr.seqused != nil {
						su = in("seqused", pr.seqused)
						args.SeqUsedK = pr.seqused
					}
					opts = append(opts, Paged(in("page_table", pr.pageTable), su))
					args.PageTable = pr.pageTable
				}
				var kg, vg *G.Node
				var kgT, vgT tensor.Tensor
				if pr.kGlobal != nil {
					kg, kgT = in("k_global", pr.kGlobal), pr.kGlobal
				}
				if pr.vGlobal != nil {
					vg, vgT = in("v_global", pr.vGlobal), pr.vGlobal
				}
				if s.kvDt == "nvfp4" {
					opts = append(opts, NVFP4KV(in("k_scale", pr.kScale), in("v_scale", pr.vScale), kg, vg))
				}
				out, err := SparseAttention(q, k, v, csr, sched, cuQ, cuK, opts...)
				if err != nil {
					t.Fatal(err)
				}
				m := G.NewTapeMachine(g)
				defer m.Close()
				err = m.RunAll()
				if s.paged && !withSeqused && s.trim {
					// Without seqused_k every page-table column is in use,
					// including the -1 padding columns: a clear rejection.
					if err == nil || !strings.Contains(err.Error(), "page_table[") {
						t.Fatalf("padding columns without seqused_k: got %v, want a page_table error", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				rp, qi, err := K2QCSRFunc(pr.q2k, pr.cuQ, pr.cuK, s.blk)
				if err != nil {
					t.Fatal(err)
				}
				var want *Result
				if s.kvDt == "nvfp4" {
					want, err = SparseAttentionNVFP4KVFunc(pr.q, pr.k, pr.v, pr.kScale, pr.vScale, kgT, vgT, rp, qi, s.topK, args)
				} else {
					want, err = SparseAttentionFunc(pr.q, pr.k, pr.v, rp, qi, s.topK, args)
				}
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(out.Value().(*tensor.Dense).Header.Raw, want.Out.Header.Raw) {
					t.Fatal("graph output differs from the eager call")
				}
			})
		}
	}
}
