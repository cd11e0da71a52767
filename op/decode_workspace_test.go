package op

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sparseattn/msa/internal/allocs"
	"github.com/sparseattn/msa/kernels/lowp"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// wideDecode returns decode inputs whose split-KV partials would take about
// 137 GB: one request whose page table has 2^20 columns of page size 1, all
// pointing at the only page of k and v, seqused_k = 2^20, Hq 16 / Hkv 1,
// D 256, and a fixed split of one page (2^20 chunks of 8 query rows each,
// 4 * 2^23 * 16 * 257 bytes, plus 20 * 2^20 + 20 for the schedule). The
// inputs themselves take about 4 MiB.
func wideDecode() (args DecodeArgs, q, k, v *tensor.Dense) {
	const cols, hq, d = 1 << 20, 16, 256
	pt := tensor.New(tensor.WithShape(1, cols), tensor.WithBacking(make([]int32, cols)))
	su := tensor.New(tensor.WithShape(1), tensor.WithBacking([]int32{cols}))
	q = tensor.New(tensor.WithShape(1, hq, d), tensor.WithBacking(make([]lowp.BFloat16, hq*d)))
	k = tensor.New(tensor.WithShape(1, 1, 1, d), tensor.WithBacking(make([]lowp.BFloat16, d)))
	v = tensor.New(tensor.WithShape(1, 1, 1, d), tensor.WithBacking(make([]lowp.BFloat16, d)))
	return DecodeArgs{PageTable: pt, SeqUsedK: su, SeqlenQ: 1, FixedSplitSize: 1, Workers: 2}, q, k, v
}

// wantWorkspaceErr checks the refusal of a decode workspace over the limit:
// an *ArgError that names the bytes, the arguments they come from and the
// knobs that change them, raised before the partials exist (the call
// allocated at most 1 MiB: the page-table copy of 4 MiB is not made).
func wantWorkspaceErr(t *testing.T, err error, allocated uint64) {
	t.Helper()
	wantArgErr(t, err, "page_table/fixed_split_size", "bytes")
	for _, s := range []string{"137996795924 bytes", "max_num_pages_per_seq = 1048576", "fixed_split_size = 1",
		"num_qo_heads = 16", "head_dim = 256", "MaxWorkspaceBytes", fmt.Sprint(DefaultMaxWorkspaceBytes)} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %v: want it to name %q", err, s)
		}
	}
	if allocated > 1<<20 {
		t.Fatalf("the refusal came after %d bytes were allocated", allocated)
	}
}

// TestDecodeWorkspaceLimit: the decode entry points computed the partials'
// size only when allocating them, so a wide page table with a small fixed
// split killed the process (fatal error: out of memory) instead of
// returning an error. Plan (with and without EnableCUDAGraph),
// DecodeAttentionFunc and the DecodeAttention node now refuse it first,
// and MaxWorkspaceBytes moves the limit.
func TestDecodeWorkspaceLimit(t *testing.T) {
	args, q, k, v := wideDecode()
	for _, graph := range []bool{true, false} {
		w, err := NewDecodeWrapper(1)
		if err != nil {
			t.Fatal(err)
		}
		pa := PlanArgs{DecodeArgs: args, NumQOHeads: 16, NumKVHeads: 1, HeadDim: 256, EnableCUDAGraph: graph}
		got := allocs.Bytes(1, func() { err = w.Plan(pa, nil) })
		wantWorkspaceErr(t, err, got)
		w.Close()
	}
	var err error
	got := allocs.Bytes(1, func() { _, err = DecodeAttentionFunc(q, k, v, nil, args) })
	wantWorkspaceErr(t, err, got)

	// The limit is a knob: a smaller one refuses a plan that fits the
	// default, naming the value given.
	small := args
	small.PageTable = tensor.New(tensor.WithShape(1, 64), tensor.WithBacking(make([]int32, 64)))
	small.SeqUsedK = tensor.New(tensor.WithShape(1), tensor.WithBacking([]int32{64}))
	if _, err := DecodeAttentionFunc(q, k, v, nil, small); err != nil {
		t.Fatal(err)
	}
	small.MaxWorkspaceBytes = 1 << 10
	_, err = DecodeAttentionFunc(q, k, v, nil, small)
	wantArgErr(t, err, "page_table/fixed_split_size", "MaxWorkspaceBytes = 1024")
	small.MaxWorkspaceBytes = -1
	_, err = DecodeAttentionFunc(q, k, v, nil, small)
	wantArgErr(t, err, "max_workspace_bytes", "0 (the default")

	// The graph node is sized for the worst case of its shapes at
	// construction.
	g := G.NewGraph()
	in := func(name string, x *tensor.Dense) *G.Node {
		return G.NodeFromAny(g, x, G.WithName(name))
	}
	pt, su := in("pt", args.PageTable.(*tensor.Dense)), in("su", args.SeqUsedK.(*tensor.Dense))
	sched, err := DecodeSchedule(pt, su, Heads(16, 1), PageSize(1), FixedSplitSize(1), Workers(2))
	if err != nil {
		t.Fatal(err)
	}
	qn, kn, vn := in("q", q), in("k", k), in("v", v)
	got = allocs.Bytes(1, func() { _, err = DecodeAttention(qn, kn, vn, pt, su, sched, nil) })
	wantWorkspaceErr(t, err, got)
	_, err = DecodeAttention(qn, kn, vn, pt, su, sched, nil, MaxWorkspaceBytes(1<<40))
	if err != nil {
		t.Fatal(err)
	}
}
