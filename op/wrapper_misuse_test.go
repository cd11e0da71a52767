package op

import (
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// Tests of DecodeWrapper misuse: metadata given as views, outputs it must
// refuse, calls after Close, concurrent calls. Each must end in an error
// or the right result, never a panic, a race or a wrong result.

func misuseSpec() decodeSpec {
	return decodeSpec{seed: 5, seqused: []int{70, 33}, seqlenQ: 2, hq: 4, hkv: 2, d: 64, pageSize: 16, dt: "bf16",
		extraCols: 3, workers: 2}
}

// plannedWrapper returns a wrapper planned for s (the caller closes it).
func plannedWrapper(t testing.TB, s decodeSpec, pr *decodeProblem) *DecodeWrapper {
	t.Helper()
	w, err := NewDecodeWrapper(s.pageSize)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Plan(planArgs(s, pr), nil); err != nil {
		t.Fatal(err)
	}
	return w
}

func wantArgErr(t *testing.T, err error, arg, text string) {
	t.Helper()
	var ae *ArgError
	if !errors.As(err, &ae) || ae.Arg != arg || !strings.Contains(err.Error(), text) {
		t.Fatalf("error %v: want an *ArgError naming %q containing %q", err, arg, text)
	}
}

// TestDecodeWrapperRunAfterClose: Run after Close is an error, not
// a panic in the closed pool; Plan reopens the wrapper.
func TestDecodeWrapperRunAfterClose(t *testing.T) {
	s := misuseSpec()
	pr := buildDecode(s)
	w := plannedWrapper(t, s, pr)
	w.Close()
	_, err := w.Run(pr.q, pr.k, pr.v, 0)
	wantArgErr(t, err, "wrapper", "closed")
	w.Close() // twice is fine
	if err := w.Plan(planArgs(s, pr), nil); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	res, err := w.Run(pr.q, pr.k, pr.v, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkDecode(t, s, pr, res)
}

// sliceCols returns a view of the first cols columns of a wider copy of m
// (the other columns hold junk), so the view's storage differs from m's.
func sliceCols(t *testing.T, m *tensor.Dense, junk int32) *tensor.Dense {
	t.Helper()
	rows, cols := m.Shape()[0], m.Shape()[1]
	wide := make([]int32, rows*(cols+5))
	for i := range wide {
		wide[i] = junk
	}
	src := validate.Backing[int32](m)
	for r := 0; r < rows; r++ {
		copy(wide[r*(cols+5):], src[r*cols:(r+1)*cols])
	}
	p := tensor.New(tensor.WithShape(rows, cols+5), tensor.WithBacking(wide))
	v, err := p.Slice(nil, tensor.S(0, cols))
	if err != nil {
		t.Fatal(err)
	}
	return v.(*tensor.Dense)
}

// TestDecodeWrapperPlanViews: Plan with a sliced page_table and a
// sliced seqused_k gives the eager function's result (reading the views'
// raw storage instead would give wrong pages, or an index panic).
func TestDecodeWrapperPlanViews(t *testing.T) {
	s := misuseSpec()
	pr := buildDecode(s)
	args := planArgs(s, pr)
	args.PageTable = sliceCols(t, pr.pt, 0)
	su2 := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]int32{int32(s.seqused[0]), 9999, int32(s.seqused[1]), 9999}))
	col, err := su2.Slice(nil, tensor.S(0))
	if err != nil {
		t.Fatal(err)
	}
	args.SeqUsedK = col
	w, _ := NewDecodeWrapper(s.pageSize)
	defer w.Close()
	if err := w.Plan(args, nil); err != nil {
		t.Fatal(err)
	}
	res, err := w.Run(pr.q, pr.k, pr.v, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkDecode(t, s, pr, res)
	eager, err := DecodeAttentionFunc(pr.q, pr.k, pr.v, nil, args.DecodeArgs)
	if err != nil {
		t.Fatal(err)
	}
	checkDecode(t, s, pr, eager)
}

// TestDecodeWrapperRunIntoView: RunInto refuses an output view
// into a larger tensor instead of writing outside the view.
func TestDecodeWrapperRunIntoView(t *testing.T) {
	s := misuseSpec()
	pr := buildDecode(s)
	w := plannedWrapper(t, s, pr)
	defer w.Close()
	rows := len(s.seqused) * s.seqlenQ
	parent := tensor.New(tensor.WithShape(rows, s.hq, 3*s.d), tensor.WithBacking(make([]lowp.BFloat16, rows*s.hq*3*s.d)))
	for i := range validate.Backing[lowp.BFloat16](parent) {
		validate.Backing[lowp.BFloat16](parent)[i] = lowp.BFloat16(0x3f80) // 1.0
	}
	view, err := parent.Slice(nil, nil, tensor.S(0, s.d))
	if err != nil {
		t.Fatal(err)
	}
	err = w.RunInto(pr.q, pr.k, pr.v, 0, view.(*tensor.Dense), nil)
	wantArgErr(t, err, "out", "contiguous")
	for i, x := range validate.Backing[lowp.BFloat16](parent) {
		if x != 0x3f80 {
			t.Fatalf("parent element %d overwritten", i)
		}
	}
	big := tensor.New(tensor.WithShape(rows*2, s.hq, s.d), tensor.Of(BFloat16))
	wantArgErr(t, w.RunInto(pr.q, pr.k, pr.v, 0, big, nil), "out", "shape")
	lse := tensor.New(tensor.WithShape(rows, s.hq+1), tensor.Of(tensor.Float32))
	out := tensor.New(tensor.WithShape(rows, s.hq, s.d), tensor.Of(BFloat16))
	wantArgErr(t, w.RunInto(pr.q, pr.k, pr.v, 0, out, lse), "lse", "shape")
}

// TestDecodeWrapperRunIntoShared: RunInto refuses an out or lse that
// shares storage with q, k, v or each other (the kernels write them while
// reading those), and writes nothing then.
func TestDecodeWrapperRunIntoShared(t *testing.T) {
	s := misuseSpec()
	pr := buildDecode(s)
	w := plannedWrapper(t, s, pr)
	defer w.Close()
	rows := len(s.seqused) * s.seqlenQ
	qd := pr.q
	qCopy := slices.Clone(validate.Backing[lowp.BFloat16](qd))
	// q is [rows, Hq, D] BF16, like out.
	onQ := tensor.New(tensor.WithShape(rows, s.hq, s.d), tensor.WithBacking(validate.Backing[lowp.BFloat16](qd)))
	out := tensor.New(tensor.WithShape(rows, s.hq, s.d), tensor.Of(BFloat16))
	bytesOf := func(d *tensor.Dense) unsafe.Pointer { return unsafe.Pointer(&d.Header.Raw[0]) }
	lseOnOut := tensor.New(tensor.WithShape(rows, s.hq), tensor.WithBacking(unsafe.Slice((*float32)(bytesOf(out)), rows*s.hq)))
	kd := pr.k
	if len(kd.Header.Raw) < 4*rows*s.hq {
		t.Fatalf("k has %d bytes, too few for the lse-on-k case", len(kd.Header.Raw))
	}
	lseOnK := tensor.New(tensor.WithShape(rows, s.hq), tensor.WithBacking(unsafe.Slice((*float32)(bytesOf(kd)), rows*s.hq)))
	wantArgErr(t, w.RunInto(pr.q, pr.k, pr.v, 0, onQ, nil), "out", "shared with q")
	wantArgErr(t, w.RunInto(pr.q, pr.k, pr.v, 0, out, lseOnOut), "out", "shared with lse")
	wantArgErr(t, w.RunInto(pr.q, pr.k, pr.v, 0, out, lseOnK), "lse", "shared with k")
	if !slices.Equal(validate.Backing[lowp.BFloat16](qd), qCopy) {
		t.Fatal("q changed by a refused call")
	}
	if err := w.RunInto(pr.q, pr.k, pr.v, 0, out, nil); err != nil {
		t.Fatalf("disjoint out: %v", err)
	}
}

// TestDecodeWrapperConcurrentUse: overlapping calls on one
// wrapper get an error; the calls that run give correct results.
func TestDecodeWrapperConcurrentUse(t *testing.T) {
	s := misuseSpec()
	pr := buildDecode(s)
	w := plannedWrapper(t, s, pr)
	defer w.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	busy := 0
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				res, err := w.Run(pr.q, pr.k, pr.v, 0)
				if err != nil {
					if !strings.Contains(err.Error(), "concurrent") {
						t.Error(err)
						return
					}
					mu.Lock()
					busy++
					mu.Unlock()
					continue
				}
				checkDecode(t, s, pr, res)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d of 100 calls refused as concurrent", busy)
	// The flag is set during a call: simulate an overlap deterministically.
	w.busy.Store(true)
	_, err := w.Run(pr.q, pr.k, pr.v, 0)
	wantArgErr(t, err, "wrapper", "concurrent")
	wantArgErr(t, w.Plan(planArgs(s, pr), nil), "wrapper", "concurrent")
	w.busy.Store(false)
}

// TestDecodeWrapperNegativeScale: a negative softmax_scale is
// accepted and matches the reference, eager and planned.
func TestDecodeWrapperNegativeScale(t *testing.T) {
	s := misuseSpec()
	s.scale = -0.2
	pr := buildDecode(s)
	checkDecode(t, s, pr, runDecodeSpec(t, s, pr))
	w := plannedWrapper(t, s, pr)
	defer w.Close()
	res, err := w.Run(pr.q, pr.k, pr.v, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkDecode(t, s, pr, res)
}

// TestDecodeScalarRule: softmax_scale values whose float32 kernel
// value overflows or vanishes are rejected with the same error by the
// eager function, Plan and Run.
func TestDecodeScalarRule(t *testing.T) {
	s := misuseSpec()
	pr := buildDecode(s)
	w := plannedWrapper(t, s, pr)
	defer w.Close()
	for _, x := range []float64{1e39, 3e38, -1e39, 1e-50, math.NaN(), math.Inf(1), math.Inf(-1)} {
		args := decodeArgs(s, pr)
		args.SoftmaxScale = x
		_, err := DecodeAttentionFunc(pr.q, pr.k, pr.v, nil, args)
		wantArgErr(t, err, "softmax_scale", validate.ScaleRule)
		wantArgErr(t, w.Plan(planOf(s, args), nil), "softmax_scale", validate.ScaleRule)
		_, err = w.Run(pr.q, pr.k, pr.v, x)
		wantArgErr(t, err, "softmax_scale", validate.ScaleRule)
	}
}

// TestDecodeSizeCaps (op side): Plan with a huge seqlen_q and no
// q fails before allocating its schedule; a BlkKV of MaxInt gives a clear
// error or a correct result, not an overflow.
func TestDecodeSizeCaps(t *testing.T) {
	s := misuseSpec()
	pr := buildDecode(s)
	w, _ := NewDecodeWrapper(s.pageSize)
	defer w.Close()
	args := planArgs(s, pr)
	args.SeqlenQ = 1 << 27
	args.MaxSeqlenK = 1 << 30
	alloc := allocDuring(func() { wantArgErr(t, w.Plan(args, nil), "seqlen_q", "batch * seqlen_q") })
	if alloc > 1<<20 {
		t.Fatalf("rejected Plan allocated %d bytes", alloc)
	}
	args = planArgs(s, pr)
	args.BlkKV = math.MaxInt
	_, err := DecodeAttentionFunc(pr.q, pr.k, pr.v, nil, args.DecodeArgs)
	wantArgErr(t, err, "blk_kv", "blk_kv <=")
	_, err = NewDecodeWrapper(0)
	wantArgErr(t, err, "page_size", "page size")
}
