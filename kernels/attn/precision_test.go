package attn

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/sparseattn/msa/kernels/tile"
)

// TestBF16ProductsPredicate: the call predicate follows the dtypes and the
// tiers: exact dtypes take the bf16 twin's precision, a float32 tier named
// by SetTier keeps float32 products for every call, a bf16 tier named by
// it rounds every call, and a dtype that is not exact in bf16 never asks
// for the twin.
func TestBF16ProductsPredicate(t *testing.T) {
	exact := []Dtype{BF16, E4M3, NVFP4}
	other := Dtype(0)
	check := func(t *testing.T, wantExact, wantOther bool, exactTier string) {
		t.Helper()
		for _, q := range exact {
			for _, kv := range exact {
				if got := BF16Products(q, kv, kv); got != wantExact {
					t.Errorf("BF16Products(%v, %v, %v) = %v, want %v", q, kv, kv, got, wantExact)
				}
				if got := PrefillTier(q, kv, kv); got != exactTier {
					t.Errorf("PrefillTier(%v, %v, %v) = %s, want %s", q, kv, kv, got, exactTier)
				}
			}
		}
		if got := BF16Products(BF16, other, BF16); got != wantOther {
			t.Errorf("BF16Products with a dtype not exact in bf16 = %v, want %v", got, wantOther)
		}
		if got := PrefillTier(BF16, BF16, other); got != tile.Tier() {
			t.Errorf("PrefillTier with a dtype not exact in bf16 = %s, want the active tier %s", got, tile.Tier())
		}
	}
	t.Run("auto", func(t *testing.T) {
		useTier(t, tile.AutoTier)
		check(t, tile.BF16InputProducts(), false, tile.BF16InputTier())
	})
	for _, tier := range []string{"avx512", "avx2", "generic"} {
		t.Run(tier, func(t *testing.T) {
			useTier(t, tier)
			check(t, false, false, tier)
		})
	}
	t.Run("avx512bf16", func(t *testing.T) {
		useTier(t, "avx512bf16")
		check(t, true, true, "avx512bf16")
	})
}

// useTwin runs the rest of the test under the automatic choice, skipping
// it where the CPU has no bf16 tier (the twin is then the active tier),
// and returns the twin's name.
func useTwin(t *testing.T) string {
	t.Helper()
	useTier(t, tile.AutoTier)
	if !tile.BF16InputProducts() {
		t.Skipf("no bf16 tier on this CPU: low-precision calls run on %s", tile.BF16InputTier())
	}
	return tile.BF16InputTier()
}

// forced returns f's result with the process's tiers set to tier for the
// run (tile.SetTier), the automatic choice restored afterwards.
func forced[T any](t *testing.T, tier string, f func() T) T {
	t.Helper()
	if err := tile.SetTier(tier); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tile.SetTier(tile.AutoTier) }()
	return f()
}

// TestPrefillTwinConcurrent: under the automatic choice a BF16 prefill
// call (KV-major, query-major and auto paths) and a BF16 decode call run
// at the same time on their own pools, the prefill on the bf16 twin and
// the decode on the float32 tier: each gets bit for bit the result of its
// tier forced for the whole process. The twin's and the float32 tier's
// prefill bits differ, so a call that ignored the twin (or a decode that
// took it) fails.
func TestPrefillTwinConcurrent(t *testing.T) {
	twin := useTwin(t)
	float := tile.Tier()
	c := qmCase{seqQ: []int{200, 90}, seqK: []int{260, 90}, hkv: 2, qpk: 8, d: 64, blk: 64, topK: 3, causal: true,
		qDtype: BF16, kvDtype: BF16, pattern: "random"}
	p := c.build(t, 21).p
	dc := decodeCase{batch: 2, seqlenQ: 1, hkv: 1, qpk: 16, d: 64, pageSize: 16, workers: 2, used: []int32{300, 77}}
	dp := dc.build(t, rand.New(rand.NewPCG(21, 1)), nil)
	decode := func() *Output {
		pool := NewPool(2)
		defer pool.Close()
		out := newOutput(dp.Batch*dp.SeqlenQ*dp.HQ, dp.D)
		d := *dp // RunDecode sets the operands' decoders in the call
		RunDecode(&d, NewWorkspace(2, dp.D), pool, out)
		return out
	}
	decWant := forced(t, float, decode)
	if !sameOutput(decode(), decWant) {
		t.Fatal("decode under the automatic choice differs from decode on the float32 tier")
	}
	for _, path := range []PrefillPath{PathKV, PathQuery, PathAuto} {
		t.Run(path.String(), func(t *testing.T) {
			q := *p
			want := forced(t, twin, func() *Output { return runPath(&q, path, 2, false) })
			want32 := forced(t, float, func() *Output { return runPath(&q, path, 2, false) })
			if sameOutput(want, want32) {
				t.Fatalf("the twin %s and the float32 tier %s give the same bits: the test cannot tell them apart", twin, float)
			}
			var wg sync.WaitGroup
			var pre [3]*Output
			var dec [3]*Output
			for i := range pre {
				wg.Add(2)
				go func() {
					defer wg.Done()
					q := *p
					pre[i] = runPath(&q, path, 2, false)
				}()
				go func() {
					defer wg.Done()
					dec[i] = decode()
				}()
			}
			wg.Wait()
			for i := range pre {
				if !sameOutput(pre[i], want) {
					t.Errorf("prefill %d: not the bits of the twin %s (float32 tier's: %v)", i, twin, sameOutput(pre[i], want32))
				}
				if !sameOutput(dec[i], decWant) {
					t.Errorf("decode %d: not the bits of the float32 tier %s", i, float)
				}
			}
		})
	}
}

// TestFloat32TierKeepsFloat32: SetTier("avx512"), what MSA_CPU_TIER=avx512
// does, gives a BF16 call on both paths the bits of the same call asking
// for the active tier's float32 products under the automatic choice
// (noBF16Calls): the float32 path is the one the avx512 tier always ran.
func TestFloat32TierKeepsFloat32(t *testing.T) {
	useTwin(t)
	c := qmCase{seqQ: []int{150}, seqK: []int{230}, hkv: 1, qpk: 16, d: 128, blk: 64, topK: 3, causal: true,
		qDtype: BF16, kvDtype: BF16, pattern: "local"}
	p := c.build(t, 22).p
	for _, path := range []PrefillPath{PathKV, PathQuery} {
		got := forced(t, "avx512", func() *Output { return runPath(p, path, 2, false) })
		noBF16Calls = true
		want := runPath(p, path, 2, false)
		noBF16Calls = false
		if !sameOutput(got, want) {
			t.Errorf("%v: SetTier(avx512) differs from the float32 products of the automatic choice", path)
		}
		if sameOutput(got, runPath(p, path, 2, false)) {
			t.Errorf("%v: the automatic choice gave a BF16 call float32 bits", path)
		}
	}
}

// TestKVMajorGlobalFold: on the bf16 twin the KV-major path keeps NVFP4
// global scales out of the bf16 operands: a call with K and V global
// scales of 24 significant bits gives the bits of the same packed K/V
// without global scales, K's folded into the softmax scale by hand and
// V's into the output scale (the fold is exact there); decoding the
// scaled values and rounding them to bf16 would not. On the float32 tier
// the scales stay in the decoding (no fold, float32 products).
func TestKVMajorGlobalFold(t *testing.T) {
	useTwin(t)
	c := qmCase{seqQ: []int{120}, seqK: []int{200}, hkv: 1, qpk: 8, d: 64, blk: 64, topK: 3, causal: true,
		qDtype: BF16, kvDtype: NVFP4, pattern: "random"}
	pr := c.build(t, 23)
	kg, vg := float32(0.7123457), float32(1.3579113)
	p := *pr.p
	p.K.Global, p.V.Global, p.OutputScale = kg, vg, 1
	// The hand fold: a softmax scale whose base-2 form is the KV-major
	// path's kvScale (the call's base-2 scale times kg, rounded once).
	target := p.Scale * math.Log2E * kg
	plain := *pr.p
	plain.K.Global, plain.V.Global, plain.OutputScale = 1, 1, vg
	plain.Scale = 0
	for s := target / math.Log2E; s < target; s = math.Nextafter32(s, 1) {
		if s*math.Log2E == target {
			plain.Scale = s
			break
		}
	}
	for s := target / math.Log2E; plain.Scale == 0 && s > target/2; s = math.Nextafter32(s, 0) {
		if s*math.Log2E == target {
			plain.Scale = s
		}
	}
	if plain.Scale == 0 {
		t.Skip("no float32 softmax scale has the folded base-2 scale")
	}
	got, want := runPath(&p, PathKV, 2, false), runPath(&plain, PathKV, 2, false)
	if !sameOutput(got, want) {
		t.Error("NVFP4 global scales on the bf16 twin: not the bits of the folded call")
	}
	folded := *pr
	folded.p = &p
	checkQM(t, &folded, folded.reference(), got, true)
	f32 := forced(t, "avx512", func() *Output { return runPath(&p, PathKV, 2, false) })
	if sameOutput(f32, got) {
		t.Error("the float32 tier gave the twin's bits")
	}
}
