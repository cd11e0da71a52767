package op

import (
	"errors"
	"testing"

	"gorgonia.org/tensor"
)

// pagedFixture: 4 pages of 2 tokens, Hkv 2, D 2; request 0 owns pages 3, 1,
// request 1 owns pages 0, 2.
func pagedFixture(t *testing.T) (cache, pt *tensor.Dense) {
	t.Helper()
	cache, err := NewBF16(make([]float32, 4*2*2*2), 4, 2, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	return cache, tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]int32{3, 1, 0, 2}))
}

func i32(v ...int32) *tensor.Dense {
	return tensor.New(tensor.WithShape(len(v)), tensor.WithBacking(v))
}

// TestAppendPagedKVPrefillThenDecode writes a ragged prompt (3 and 1 tokens)
// then one decode token per request and checks every cache element against
// positions computed by hand.
func TestAppendPagedKVPrefillThenDecode(t *testing.T) {
	cache, pt := pagedFixture(t)
	// new row r, head h, element e holds 10*(r+1) + 4*h + e (exact in bf16).
	rows := func(n int, base int) *tensor.Dense {
		v := make([]float32, n*2*2)
		for r := 0; r < n; r++ {
			for h := 0; h < 2; h++ {
				for e := 0; e < 2; e++ {
					v[(r*2+h)*2+e] = float32(10*(base+r+1) + 4*h + e)
				}
			}
		}
		x, err := NewBF16(v, n, 2, 2)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	if err := WritePagedKVFunc(cache, rows(4, 0), pt, i32(0, 3, 4), i32(3, 1), HND); err != nil {
		t.Fatal(err)
	}
	if err := WritePagedKVFunc(cache, rows(2, 4), pt, i32(0, 1, 2), i32(4, 2), HND); err != nil {
		t.Fatal(err)
	}
	got, _ := Float32s(cache)
	at := func(page, h, slot, e int) float32 { return got[((page*2+h)*2+slot)*2+e] }
	// request 0: positions 0,1 -> page 3 slots 0,1; 2 -> page 1 slot 0 (prompt rows 1..3); 3 -> page 1 slot 1 (decode row 5).
	// request 1: position 0 -> page 0 slot 0 (prompt row 4); 1 -> page 0 slot 1 (decode row 6).
	want := []struct{ page, slot, row int }{{3, 0, 1}, {3, 1, 2}, {1, 0, 3}, {1, 1, 5}, {0, 0, 4}, {0, 1, 6}}
	for _, w := range want {
		for h := 0; h < 2; h++ {
			for e := 0; e < 2; e++ {
				if g, x := at(w.page, h, w.slot, e), float32(10*w.row+4*h+e); g != x {
					t.Errorf("page %d head %d slot %d elem %d = %v, want %v", w.page, h, w.slot, e, g, x)
				}
			}
		}
	}
	for h := 0; h < 2; h++ { // page 2 untouched
		for s := 0; s < 2; s++ {
			if at(2, h, s, 0) != 0 || at(2, h, s, 1) != 0 {
				t.Errorf("page 2 was written")
			}
		}
	}
}

func TestAppendPagedKVErrors(t *testing.T) {
	cache, pt := pagedFixture(t)
	one, _ := NewBF16(make([]float32, 4), 1, 2, 2)
	two, _ := NewBF16(make([]float32, 8), 2, 2, 2)
	fp8, _ := NewE4M3(make([]float32, 4), 1, 2, 2)
	view, _ := cache.Slice(tensor.S(0, 2))
	badPT := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]int32{3, 9, 0, 2}))
	dupPT := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]int32{3, 1, 3, 2}))
	snapshot, _ := Float32s(cache)
	cases := []struct {
		name                    string
		cache, nw, pt, cu, used tensor.Tensor
		arg                     string
	}{
		{"nil cache", nil, one, pt, i32(0, 1, 1), i32(1, 0), "cache"},
		{"typed nil new", cache, (*tensor.Dense)(nil), pt, i32(0, 1, 1), i32(1, 0), "new_kv"},
		{"view cache", view, one, pt, i32(0, 1, 1), i32(1, 0), "cache"},
		{"dtype", cache, fp8, pt, i32(0, 1, 1), i32(1, 0), "new_kv"},
		{"cu total", cache, one, pt, i32(0, 1, 2), i32(1, 1), "cu_seqlens_new[2]"},
		{"cu order", cache, two, pt, i32(0, 3, 2), i32(3, 0), "cu_seqlens_new[2]"},
		{"used < n", cache, two, pt, i32(0, 2, 2), i32(1, 0), "seqused_k[0]"},
		{"used > capacity", cache, one, pt, i32(0, 1, 1), i32(5, 0), "seqused_k[0]"},
		{"page range", cache, one, badPT, i32(0, 1, 1), i32(3, 0), "page_table[0, 1]"},
		{"collision", cache, two, dupPT, i32(0, 1, 2), i32(1, 1), "page_table"},
	}
	for _, tc := range cases {
		err := WritePagedKVFunc(tc.cache, tc.nw, tc.pt, tc.cu, tc.used, HND)
		var ae *ArgError
		if !errors.As(err, &ae) || ae.Arg != tc.arg {
			t.Errorf("%s: got %v, want an *ArgError for %s", tc.name, err, tc.arg)
		}
	}
	after, _ := Float32s(cache)
	for i := range after {
		if after[i] != snapshot[i] {
			t.Fatal("a rejected call modified the cache")
		}
	}
}
