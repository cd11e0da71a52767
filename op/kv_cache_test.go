package op

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// randBF16 returns a BFloat16 [n, hkv, d] tensor of random values.
func randBF16(rng *rand.Rand, n, hkv, d int) *tensor.Dense {
	x := make([]lowp.BFloat16, n*hkv*d)
	for i := range x {
		x[i] = lowp.BF16(float32(rng.NormFloat64()))
	}
	return tensor.New(tensor.WithShape(n, hkv, d), tensor.WithBacking(x))
}

// TestPagedKVCacheContents runs admissions, prompt appends, decode steps
// and evictions on caches of both layouts and checks every held token's
// keys and values, read through the page table with the layout's own
// index formula, against a model of each request's tokens, and the page
// accounting (held pages + free pages = NumPages, no page held twice).
func TestPagedKVCacheContents(t *testing.T) {
	const hkv, d, ps, maxBatch = 2, 8, 4, 3
	for _, layout := range []PagedLayout{HND, NHD} {
		t.Run(fmt.Sprint(layout), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(layout)))
			kc, err := NewPagedKVCache(PagedKVCacheConfig{NumPages: 24, PageSize: ps, KVHeads: hkv, HeadDim: d,
				MaxBatch: maxBatch, MaxPagesPerSeq: 8, Layout: layout})
			if err != nil {
				t.Fatal(err)
			}
			model := make([][2][]lowp.BFloat16, maxBatch) // per row: K and V token rows
			// add appends rows [first, first+n) of k and v to row seq's model.
			add := func(seq int, k, v *tensor.Dense, first, n int) {
				w := hkv * d
				model[seq][0] = append(model[seq][0], validate.Backing[lowp.BFloat16](k)[first*w:(first+n)*w]...)
				model[seq][1] = append(model[seq][1], validate.Backing[lowp.BFloat16](v)[first*w:(first+n)*w]...)
			}
			for round := 0; round < 6; round++ {
				for seq := 0; seq < maxBatch; seq++ {
					if kc.Len(seq) == 0 && rng.IntN(2) == 0 {
						if _, err := kc.Admit(); err != nil {
							t.Fatal(err)
						}
					}
				}
				for seq := 0; seq < maxBatch; seq++ {
					if !kc.admitted[seq] || kc.Len(seq) > 0 {
						continue
					}
					n := 1 + rng.IntN(9)
					k, v := randBF16(rng, n, hkv, d), randBF16(rng, n, hkv, d)
					if err := kc.Append(seq, k, v); err != nil {
						t.Fatal(err)
					}
					add(seq, k, v, 0, n)
				}
				for step := 0; step < 2; step++ {
					k, v := randBF16(rng, maxBatch, hkv, d), randBF16(rng, maxBatch, hkv, d)
					if err := kc.AppendStep(k, v); err != nil {
						t.Fatal(err)
					}
					for seq := 0; seq < maxBatch; seq++ {
						if kc.admitted[seq] {
							add(seq, k, v, seq, 1)
						}
					}
				}
				checkCache(t, kc, model)
				if seq := rng.IntN(maxBatch); kc.admitted[seq] && kc.Len(seq) > 12 {
					if err := kc.Free(seq); err != nil {
						t.Fatal(err)
					}
					model[seq] = [2][]lowp.BFloat16{}
				}
			}
		})
	}
}

// checkCache compares every held token with the model and checks the
// page accounting.
func checkCache(t *testing.T, kc *PagedKVCache, model [][2][]lowp.BFloat16) {
	t.Helper()
	cfg := kc.Config()
	hkv, d, ps, cols := cfg.KVHeads, cfg.HeadDim, cfg.PageSize, cfg.MaxPagesPerSeq
	pt, su := validate.Int32s(kc.PageTable()), validate.Int32s(kc.SeqUsedK())
	held := map[int32]bool{}
	for seq := range model {
		if int(su[seq])*hkv*d != len(model[seq][0]) {
			t.Fatalf("row %d: seqused_k %d, model holds %d tokens", seq, su[seq], len(model[seq][0])/(hkv*d))
		}
		for j := 0; j < validate.CeilDiv(int(su[seq]), ps); j++ {
			p := pt[seq*cols+j]
			if p < 0 || int(p) >= cfg.NumPages || held[p] {
				t.Fatalf("row %d column %d: page %d out of range or held twice", seq, j, p)
			}
			held[p] = true
		}
		for pos := 0; pos < int(su[seq]); pos++ {
			page, slot := int(pt[seq*cols+pos/ps]), pos%ps
			for h := 0; h < hkv; h++ {
				off := ((page*hkv+h)*ps + slot) * d
				if cfg.Layout == NHD {
					off = ((page*ps+slot)*hkv + h) * d
				}
				for i, pool := range []*tensor.Dense{kc.K(), kc.V()} {
					got := validate.Backing[lowp.BFloat16](pool)[off : off+d]
					want := model[seq][i][(pos*hkv+h)*d:][:d]
					if !bytes.Equal(bf16Bytes(got), bf16Bytes(want)) {
						t.Fatalf("row %d position %d head %d: %s differs", seq, pos, h, []string{"K", "V"}[i])
					}
				}
			}
		}
	}
	if len(held)+kc.FreePages() != cfg.NumPages {
		t.Fatalf("%d pages held + %d free != NumPages = %d", len(held), kc.FreePages(), cfg.NumPages)
	}
}

func bf16Bytes(x []lowp.BFloat16) []byte {
	b := make([]byte, 0, 2*len(x))
	for _, v := range x {
		b = append(b, byte(v), byte(v>>8))
	}
	return b
}

// TestPagedKVCacheRefusals: every misuse is an *ArgError naming the
// argument, and a refused append leaves the cache as it was (no page taken,
// no token counted, no byte written).
func TestPagedKVCacheRefusals(t *testing.T) {
	const hkv, d, ps = 1, 8, 4
	rng := rand.New(rand.NewPCG(3, 3))
	kc, err := NewPagedKVCache(PagedKVCacheConfig{NumPages: 4, PageSize: ps, KVHeads: hkv, HeadDim: d, MaxBatch: 2, MaxPagesPerSeq: 3})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := kc.Admit()
	b, _ := kc.Admit()
	if err := kc.Append(a, randBF16(rng, 6, hkv, d), randBF16(rng, 6, hkv, d)); err != nil {
		t.Fatal(err)
	}
	snapshot := func() string {
		return fmt.Sprint(validate.Int32s(kc.PageTable()), validate.Int32s(kc.SeqUsedK()), kc.FreePages(), kc.K().Header.Raw, kc.V().Header.Raw)
	}
	before := snapshot()
	_, err = kc.Admit()
	wantArgErr(t, err, "MaxBatch", "MaxBatch = 2")
	// b may take 2 more pages; 3 are needed.
	err = kc.Append(b, randBF16(rng, 9, hkv, d), randBF16(rng, 9, hkv, d))
	wantNames(t, err, "NumPages", "NumPages = 4", "out of pages")
	err = kc.Append(a, randBF16(rng, 7, hkv, d), randBF16(rng, 7, hkv, d))
	wantNames(t, err, "seq 0", "MaxPagesPerSeq * PageSize = 12")
	err = kc.Append(a, randBF16(rng, 2, hkv, d), randBF16(rng, 3, hkv, d))
	wantArgErr(t, err, "v", "k's shape")
	err = kc.Append(a, randBF16(rng, 2, 2, d), randBF16(rng, 2, 2, d))
	wantArgErr(t, err, "k", "KVHeads = 1")
	err = kc.Append(a, fp8T(2, hkv, d), fp8T(2, hkv, d))
	wantArgErr(t, err, "k", "bfloat16")
	err = kc.AppendStep(randBF16(rng, 3, hkv, d), randBF16(rng, 3, hkv, d))
	wantArgErr(t, err, "k", "MaxBatch = 2")
	if err := kc.Free(b); err != nil {
		t.Fatal(err)
	}
	err = kc.Append(b, randBF16(rng, 1, hkv, d), randBF16(rng, 1, hkv, d))
	wantArgErr(t, err, "seq", "admitted row")
	wantArgErr(t, kc.Free(b), "seq", "admitted row")
	wantArgErr(t, kc.Free(-1), "seq", "admitted row")
	kc.busy.Store(true) // a call in progress on another goroutine
	_, err = kc.Admit()
	wantNames(t, err, "cache", "PagedKVCache (it is not safe")
	wantArgErr(t, kc.Append(a, randBF16(rng, 1, hkv, d), randBF16(rng, 1, hkv, d)), "cache", "no concurrent call")
	kc.busy.Store(false)
	if after := snapshot(); after != before {
		t.Fatal("a refused call changed the cache")
	}

	for _, c := range []struct {
		cfg PagedKVCacheConfig
		arg string
	}{
		{PagedKVCacheConfig{PageSize: 4, KVHeads: 1, HeadDim: 8, MaxBatch: 1}, "NumPages"},
		{PagedKVCacheConfig{NumPages: 2, PageSize: 4, KVHeads: 1, HeadDim: 8}, "MaxBatch"},
		{PagedKVCacheConfig{NumPages: 2, PageSize: 4, KVHeads: 1, HeadDim: 8, MaxBatch: 1, MaxPagesPerSeq: 3}, "MaxPagesPerSeq"},
		{PagedKVCacheConfig{NumPages: 2, PageSize: 4, KVHeads: 1, HeadDim: 8, MaxBatch: 1, Dtype: tensor.Float32}, "Dtype"},
		{PagedKVCacheConfig{NumPages: 2, PageSize: 4, KVHeads: 1, HeadDim: 8, MaxBatch: 1, Layout: 7}, "kv_layout"},
		{PagedKVCacheConfig{NumPages: 1 << 30, PageSize: 1 << 30, KVHeads: 1 << 30, HeadDim: 8, MaxBatch: 1, MaxPagesPerSeq: 1}, "NumPages"},
		{PagedKVCacheConfig{NumPages: 1 << 20, PageSize: 1, KVHeads: 1, HeadDim: 1, MaxBatch: 1 << 20}, "MaxBatch"},
	} {
		_, err := NewPagedKVCache(c.cfg)
		wantArgErr(t, err, c.arg, "")
	}
}

// FuzzPagedKVCache drives a small cache (6 pages of 3 tokens, 3 rows of at
// most 4 pages) with admissions, appends, decode steps and frees read from
// the input, against a model of each row's tokens: a call fails exactly
// when the model says it must (row not admitted, row full, batch full, out
// of pages), a failed call changes nothing, and every held token reads
// back through the page table (checkCache).
func FuzzPagedKVCache(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 7, 2, 2, 1, 0, 5, 3, 0, 0, 1, 1, 9})
	f.Add([]byte{0, 0, 0, 0, 1, 1, 8, 1, 2, 8, 1, 0, 4, 2, 3, 1, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const hkv, d, ps, rows, cols, pages = 1, 2, 3, 3, 4, 6
		kc, err := NewPagedKVCache(PagedKVCacheConfig{NumPages: pages, PageSize: ps, KVHeads: hkv, HeadDim: d, MaxBatch: rows, MaxPagesPerSeq: cols})
		if err != nil {
			t.Fatal(err)
		}
		model := make([][2][]lowp.BFloat16, rows)
		admitted := make([]bool, rows)
		next := 0 // distinct token values
		tokens := func(n int) *tensor.Dense {
			x := make([]lowp.BFloat16, n*hkv*d)
			for i := range x {
				next++
				x[i] = lowp.BF16(float32(next))
			}
			return tensor.New(tensor.WithShape(n, hkv, d), tensor.WithBacking(x))
		}
		held := func() int {
			n := 0
			for _, m := range model {
				n += validate.CeilDiv(len(m[0])/(hkv*d), ps)
			}
			return n
		}
		for i := 0; i+2 < len(ops) && i < 90; i += 3 {
			seq, n := int(ops[i+1])%rows, int(ops[i+2])%8
			var err error
			var ok bool
			switch ops[i] % 4 {
			case 0:
				free := slices.Index(admitted, false)
				var got int
				got, err = kc.Admit()
				if ok = free >= 0; ok {
					if got != free {
						t.Fatalf("Admit = %d, want the lowest free row %d", got, free)
					}
					admitted[free] = true
				}
			case 1, 2:
				step := ops[i]%4 == 2
				need, fits := 0, true
				for b := range model {
					if !admitted[b] || (!step && b != seq) {
						continue
					}
					have := len(model[b][0]) / (hkv * d)
					fits = fits && have+n <= cols*ps
					need += validate.CeilDiv(have+n, ps) - validate.CeilDiv(have, ps)
				}
				ok = (step || admitted[seq]) && fits && need <= pages-held()
				if step {
					k, v := tokens(rows*n), tokens(rows*n)
					if err = kc.AppendStep(k, v); ok {
						for b := range model {
							if admitted[b] {
								w := n * hkv * d
								model[b][0] = append(model[b][0], validate.Backing[lowp.BFloat16](k)[b*w:(b+1)*w]...)
								model[b][1] = append(model[b][1], validate.Backing[lowp.BFloat16](v)[b*w:(b+1)*w]...)
							}
						}
					}
				} else {
					k, v := tokens(n), tokens(n)
					if err = kc.Append(seq, k, v); ok {
						model[seq][0] = append(model[seq][0], validate.Backing[lowp.BFloat16](k)...)
						model[seq][1] = append(model[seq][1], validate.Backing[lowp.BFloat16](v)...)
					}
				}
			case 3:
				err = kc.Free(seq)
				if ok = admitted[seq]; ok {
					admitted[seq], model[seq] = false, [2][]lowp.BFloat16{}
				}
			}
			if (err == nil) != ok {
				t.Fatalf("op %d (%d, seq %d, n %d): error %v, model expects success = %v", i/3, ops[i]%4, seq, n, err, ok)
			}
			checkCache(t, kc, model)
		}
	})
}
