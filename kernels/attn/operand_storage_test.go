package attn

import (
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
)

// TestStorageNegativeRow: a page-table slot of -1 (a block the query-major
// block cache holds no copy of, because no token of the window may see it)
// gives a negative row; a prefetch hint for it must be dropped, not index
// the operand's storage.
func TestStorageNegativeRow(t *testing.T) {
	const d = 8
	bf := &Operand{Dtype: BF16, D: d, BF16: make([]lowp.BFloat16, 4*d)}
	e4 := &Operand{Dtype: E4M3, D: d, E4M3: make([]lowp.Float8E4M3FN, 4*d)}
	for _, o := range []*Operand{bf, e4} {
		if p, n := o.storage(-8, 4); p != nil || n != 0 {
			t.Errorf("%v: storage(-8, 4) = %v, %d; want nil, 0", o.Dtype, p, n)
		}
		if p, n := o.storage(0, 4); p == nil || n == 0 {
			t.Errorf("%v: storage(0, 4) = %v, %d; want the rows", o.Dtype, p, n)
		}
		if p, n := o.storage(1, 4); p != nil || n != 0 {
			t.Errorf("%v: storage(1, 4) past the end = %v, %d; want nil, 0", o.Dtype, p, n)
		}
	}
	l := &KVLayout{Hkv: 1, Paged: true, PageTable: []int32{0, -1}, PTCols: 2, PageSize: 2}
	if r, _ := l.Run(0, 0, 2, 2); r >= 0 {
		t.Fatalf("layout row of a -1 slot = %d; the test expects a negative row", r)
	}
}
