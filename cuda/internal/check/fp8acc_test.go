package check

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sparseattn/msa/cuda"
)

// fp8Model is a way an FP8 kernel accumulates on the FP8 tensor cores
// (fault.fp8Acc, E4M3 P): span 0 keeps P.V over the whole walk.
type fp8Model struct {
	name string
	span int
	walk bool // the bound the GPU check gives the kernel takes the walk term (PV8Walk)
}

func diffText(d Diff) string {
	return fmt.Sprintf("bound margin O %.3g LSE %.3g (bad %d / %d), stat margin O %.3g LSE %.3g (bad %d / %d), RMS O %.3g of %.3g, LSE %.3g of %.3g",
		d.MarginO, d.MarginLSE, d.BadO, d.BadLSE, d.StatMarginO, d.StatMarginLSE, d.BadStatO, d.BadStatLSE, d.RMSO, d.RMSTolO, d.RMSLSE, d.RMSTolLSE)
}

// oneSign clears the sign bit of every E4M3 value of the stores.
func oneSign(stores ...*Store) {
	for _, st := range stores {
		for i := range st.Enc {
			st.Enc[i] &^= 0x80
		}
	}
}

// signVariants are the inputs each FP8 case runs with: its random values;
// V of one sign, so that the P.V running sums grow with the keys and the
// truncations reach the magnitude sum sum P |v| the bound is relative to
// (random signs keep the sums near its square root); and Q and K of one
// sign too, the same for the scores' D products.
var signVariants = []struct {
	name string
	set  func(q, k, v *Store)
}{
	{"", func(q, k, v *Store) {}},
	{" (V >= 0)", func(q, k, v *Store) { oneSign(v) }},
	{" (Q, K, V >= 0)", func(q, k, v *Store) { oneSign(q, k) }},
}

// TestFP8AccumulatorModel holds the check's bounds against what FP8
// tensor cores with uFP8MMA's accumulator would return (both products with
// every k-group of 32 truncated toward zero to 14 bits, P rounded to
// E4M3), for every FP8 (E4M3 Q/K/V) case of the decode and prefill
// matrices with the inputs of signVariants, in the bound the GPU check
// gives each kernel's mode:
//   - decode, 64-key spans from zero added to a float32 O (the sm_90a
//     fp8pv decode): the default bound (pvFP8Span);
//   - decode, O kept in the FP8 accumulator over the walk (the SM100
//     decode): the bound with Decode.PV8Walk;
//   - prefill, O kept over the walk (the sm_90a query-major fp8pv and
//     SM100 query-major fp8 kernels): the bound with Prefill.PV8Walk;
//   - prefill, each block from zero (the KV-major FP8 P.V kernels): the
//     default bound.
//
// A GPU whose accumulator behaves as modelled must pass, or the first run
// of those kernels would fail on the check, not on the kernel. And the
// walk term must be needed: the long no-split FP8 decode (24K keys in one
// walk) with V of one sign, run with the whole walk in the FP8
// accumulator, fails the default bound.
func TestFP8AccumulatorModel(t *testing.T) {
	fp8 := func(q, kv cuda.Dtype) bool { return q == cuda.E4M3 && kv == cuda.E4M3 }
	needed := false
	for _, c := range DecodeMatrix() {
		if fp8(c.QD, c.KVD) {
			models := []fp8Model{{"spans of 64 (sm_90a fp8pv)", 64, false}, {"whole walk (SM100)", 0, true}}
			needed = fp8ModelCase(t, c, models, strings.HasSuffix(c.Name, "/no-split")) || needed
		}
	}
	if !needed {
		t.Error("no long FP8 decode with its whole walk in the FP8 accumulator fails the bound without the walk term: Decode.PV8Walk would be unneeded")
	}
	for _, c := range PrefillMatrix() {
		if fp8(c.QD, c.KVD) {
			models := []fp8Model{{"whole walk (query-major)", 0, true}, {"per block (KV-major)", c.Blk, false}}
			fp8ModelCase(t, c, models, false)
		}
	}
}

// fp8Problem is a prefill or decode problem of TestFP8AccumulatorModel.
type fp8Problem interface {
	gen() error
	name() string
	reference(f *fault) *Reference
	WalkReference() *Reference
	stores() (q, k, v *Store)
}

func (c *Prefill) stores() (q, k, v *Store) { return c.Q, c.K, c.V }
func (c *Decode) stores() (q, k, v *Store)  { return c.Q, c.K, c.V }

// fp8ModelCase generates c (gen) and checks, for each sign variant,
// the results of each accumulator model against the bound of its mode; with
// logWalk it logs the walk models' margins with and without the walk term
// and returns whether one failed without it.
func fp8ModelCase(t *testing.T, c fp8Problem, models []fp8Model, logWalk bool) (failsWithoutWalk bool) {
	t.Helper()
	if err := c.gen(); err != nil {
		t.Fatalf("%s: %v", c.name(), err)
	}
	for _, sv := range signVariants {
		sv.set(c.stores()) // cumulative: each variant on the previous one's inputs
		base, walk := c.reference(nil), c.WalkReference()
		for _, m := range models {
			got := asResult(c.reference(&fault{fp8Acc: true, fp8Span: m.span, pE4M3: true}))
			ref := base
			if m.walk {
				ref = walk
			}
			d := ref.Check(got)
			if !d.OK() {
				t.Errorf("%s%s, %s: fails its bound: %s", c.name(), sv.name, m.name, diffText(d))
			}
			if m.walk && logWalk {
				d0 := base.Check(got)
				t.Logf("%s%s, %s: with the walk term %s; without it %s", c.name(), sv.name, m.name, diffText(d), diffText(d0))
				failsWithoutWalk = failsWithoutWalk || !d0.OK()
			}
		}
	}
	return failsWithoutWalk
}
