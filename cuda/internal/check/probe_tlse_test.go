package check

import (
	"math"
	"testing"
)

// TestTLSEOverflowCPU: the CPU path (KV-major and query-major, whichever
// the schedule runs) passes the overflow probes, with rows on both sides
// (attending a key and not), and the probe fails the results a merge that
// reads a +inf partial as an undefined sum gives (-inf temperature LSE on
// a row that sees keys), a finite temperature LSE in its place, and an
// LSE that overflowed too.
func TestTLSEOverflowCPU(t *testing.T) {
	for i, c := range TLSEOverflowMatrix() {
		if err := c.Gen(uint64(i + 201)); err != nil {
			t.Fatal(err)
		}
		if err := c.SetTLSEOverflow(uint64(i + 201)); err != nil {
			t.Fatal(err)
		}
		got := c.CPU(2)
		d := c.CheckTLSEOverflow(got)
		if !d.OK() {
			t.Fatalf("%s: CPU path: %+v", c.Name, d)
		}
		seen, masked := 0, 0
		for _, l := range got.LSE {
			if math.IsInf(float64(l), -1) {
				masked++
			} else {
				seen++
			}
		}
		if seen == 0 || masked == 0 {
			t.Fatalf("%s: %d rows attend a key, %d none: the probe needs both", c.Name, seen, masked)
		}
		t.Logf("%-64s %d rows, %d attend keys", c.Name, d.Rows, seen)
		row := -1
		for r, l := range got.TLSE {
			if math.IsInf(float64(l), 1) {
				row = r
				break
			}
		}
		for _, m := range []struct {
			name string
			f    func(r *Result)
		}{
			{"-inf merge of +inf partials", func(r *Result) { r.TLSE[row] = float32(math.Inf(-1)) }},
			{"finite temperature LSE", func(r *Result) { r.TLSE[row] = math.MaxFloat32 }},
			{"NaN temperature LSE", func(r *Result) { r.TLSE[row] = float32(math.NaN()) }},
			{"LSE overflowed too", func(r *Result) { r.LSE[row] = float32(math.Inf(1)) }},
			{"masked row's temperature LSE +inf", func(r *Result) {
				for i, l := range r.LSE {
					if math.IsInf(float64(l), -1) {
						r.TLSE[i] = float32(math.Inf(1))
						return
					}
				}
			}},
		} {
			bad := Result{O: got.O, LSE: append([]float32(nil), got.LSE...), TLSE: append([]float32(nil), got.TLSE...)}
			m.f(&bad)
			if d := c.CheckTLSEOverflow(bad); d.OK() || d.WrongCount != 1 {
				t.Errorf("%s: %s: probe %+v, want exactly one wrong row", c.Name, m.name, d)
			}
		}
	}
}
