package check

import (
	"testing"
)

// TestReferenceMatchesCPU: the CPU path (kernels/attn, planned through the
// CSR and the forward schedule) lies within the reference's tolerance on
// problems of the matrices, so the reference and the planner-driven path
// agree on what is attended and how.
func TestReferenceMatchesCPU(t *testing.T) {
	for i, c := range PrefillMatrix() {
		if err := c.Gen(uint64(i + 1)); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if testing.Short() && i%4 != 0 {
			continue
		}
		d := c.Reference().Check(c.CPU(2))
		t.Logf("%-60s O err %.2e tol %.2e margin %.3g  LSE err %.2e tol %.2e margin %.3g masked %d", c.Name, d.MaxRelO, d.TolO, d.MarginO, d.MaxRelLSE, d.TolLSE, d.MarginLSE, d.Masked)
		if !d.OK() {
			t.Errorf("%s: CPU path vs reference: %+v", c.Name, d)
		}
	}
	for i, c := range DecodeMatrix() {
		if err := c.Gen(uint64(i + 1)); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if testing.Short() && i%4 != 0 {
			continue
		}
		d := c.Reference().Check(c.CPU(2))
		t.Logf("%-60s O err %.2e tol %.2e margin %.3g  LSE err %.2e tol %.2e margin %.3g masked %d", c.Name, d.MaxRelO, d.TolO, d.MarginO, d.MaxRelLSE, d.TolLSE, d.MarginLSE, d.Masked)
		if !d.OK() {
			t.Errorf("%s: CPU path vs reference: %+v", c.Name, d)
		}
	}
}
