package attn

import "testing"

// TestKVLayoutNHD checks NHD addressing against the transposition of HND:
// token t of head h sits at [page, t%page_size, h] instead of
// [page, h, t%page_size], and Run's runs cover exactly the rows Row gives.
func TestKVLayoutNHD(t *testing.T) {
	pt := []int32{2, 0, 1, 3}
	for _, hkv := range []int{1, 3} {
		const ps = 5
		hnd := KVLayout{Hkv: hkv, Paged: true, PageTable: pt, PTCols: 2, PageSize: ps}
		nhd := hnd
		nhd.NHD = true
		for b := 0; b < 2; b++ {
			for h := 0; h < hkv; h++ {
				for tok := 0; tok < 2*ps; tok++ {
					r := hnd.Row(b, h, tok)
					page, rest := r/(hkv*ps), r%(hkv*ps)
					hh, slot := rest/ps, rest%ps
					if want := (page*ps+slot)*hkv + hh; nhd.Row(b, h, tok) != want {
						t.Fatalf("hkv %d: NHD Row(%d, %d, %d) = %d, want %d", hkv, b, h, tok, nhd.Row(b, h, tok), want)
					}
					row, n := nhd.Run(b, h, tok, 2*ps-tok)
					if row != nhd.Row(b, h, tok) || n < 1 {
						t.Fatalf("Run(%d, %d, %d) = %d, %d", b, h, tok, row, n)
					}
					for i := 1; i < n; i++ {
						if nhd.Row(b, h, tok+i) != row+i {
							t.Fatalf("hkv %d: Run(%d, %d, %d) covers %d rows, row %d is not consecutive", hkv, b, h, tok, n, i)
						}
					}
				}
			}
		}
	}
}
