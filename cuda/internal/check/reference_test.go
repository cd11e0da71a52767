package check

import (
	"testing"
)

// TestReferenceMatchesCPU: the CPU path (kernels/attn, planned through the
// CSR and the forward schedule) passes both criteria (the per-element
// bound and the statistical one) against the reference on the whole
// matrix (every 4th case with -short): ragged batches, causal and not,
// dense and shuffled pages, every dtype, partial dtype and GQA ratio of
// the matrices. The reference and the planner-driven path agree on what
// is attended and how, and the statistical model admits a real kernel.
func TestReferenceMatchesCPU(t *testing.T) {
	for i, c := range PrefillMatrix() {
		if err := c.Gen(uint64(i + 1)); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if testing.Short() && i%4 != 0 {
			continue
		}
		logDiff(t, c.Name, c.Reference().Check(c.CPU(2)))
	}
	for i, c := range DecodeMatrix() {
		if err := c.Gen(uint64(i + 1)); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if testing.Short() && i%4 != 0 {
			continue
		}
		logDiff(t, c.Name, c.Reference().Check(c.CPU(2)))
	}
}

// logDiff logs both criteria's errors, tolerances and margins of the CPU
// path against the reference, and fails unless both hold.
func logDiff(t *testing.T, name string, d Diff) {
	t.Helper()
	t.Logf("%-60s O err %.2e bound %.2e (margin %.3g) stat %.2e (margin %.3g) RMS %.2e/%.2e (margin %.3g) | "+
		"LSE err %.2e bound %.2e (margin %.3g) stat %.2e (margin %.3g) RMS %.2e/%.2e (margin %.3g) | masked %d", name,
		d.MaxRelO, d.TolO, d.MarginO, d.StatTolO, d.StatMarginO, d.RMSO, d.RMSTolO, d.RMSMarginO(),
		d.MaxRelLSE, d.TolLSE, d.MarginLSE, d.StatTolLSE, d.StatMarginLSE, d.RMSLSE, d.RMSTolLSE, d.RMSMarginLSE(), d.Masked)
	if !d.OK() {
		t.Errorf("%s: CPU path vs reference: %+v", name, d)
	}
}
