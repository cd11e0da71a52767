package decode

import (
	"fmt"

	"github.com/sparseattn/msa/op/internal/validate"
)

// Snapshot holds the wrapper's own copies of the planned metadata.
type Snapshot struct {
	pt, seqused, q2k []int32
}

// Take copies m's metadata into the snapshot's buffers (reused when large
// enough) and points m at the copies.
func (s *Snapshot) Take(m *Meta) {
	s.pt = append(s.pt[:0], m.PT...)
	s.seqused = append(s.seqused[:0], m.SeqUsed...)
	s.q2k = append(s.q2k[:0], m.Q2K...)
	m.PT, m.SeqUsed = s.pt, s.seqused
	m.Q2K = nil
	if m.TopK > 0 {
		m.Q2K = s.q2k
	}
}

// StaleMeta returns a *StalePlanError naming the first entry in which the
// seqused_k or page table given to Plan (srcSU, srcPT) differs from the
// plan's copy (planSU, planPT; cols columns per page-table row).
func StaleMeta(fn string, srcSU, planSU, srcPT, planPT []int32, cols int) error {
	for b, x := range srcSU {
		if y := planSU[b]; x != y {
			return &validate.StalePlanError{Func: fn, Arg: fmt.Sprintf("seqused_k[%d]", b), Planned: y, Now: x}
		}
	}
	for i, x := range srcPT {
		if y := planPT[i]; x != y {
			return &validate.StalePlanError{Func: fn, Arg: fmt.Sprintf("page_table[%d, %d]", i/cols, i%cols), Planned: y, Now: x}
		}
	}
	return nil
}
