package tile

import (
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/sparseattn/msa/internal/calib"
)

// TestLanesStateLayout checks the offsets that asmgen/lanes/gen.go hard-codes.
func TestLanesStateLayout(t *testing.T) {
	var s lanesState
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"valid", unsafe.Offsetof(s.valid), 0},
		{"mx", unsafe.Offsetof(s.mx), 64},
		{"sum", unsafe.Offsetof(s.sum), 128},
		{"tsum", unsafe.Offsetof(s.tsum), 192},
		{"alpha", unsafe.Offsetof(s.alpha), 256},
		{"scale", unsafe.Offsetof(s.scale), 320},
		{"invT", unsafe.Offsetof(s.invT), 324},
		{"round", unsafe.Offsetof(s.round), 328},
	} {
		if f.got != f.want {
			t.Errorf("lanesState.%s at offset %d, want %d", f.name, f.got, f.want)
		}
	}
}

// TestLanesPrefetchLayout checks the lanesPrefetch offsets that
// asmgen/lanes/gen.go hard-codes.
func TestLanesPrefetchLayout(t *testing.T) {
	var p lanesPrefetch
	if unsafe.Offsetof(p.addr) != 0 || unsafe.Offsetof(p.step) != 8 || unsafe.Offsetof(p.last) != 16 {
		t.Errorf("lanesPrefetch offsets %d %d %d, want 0 8 16", unsafe.Offsetof(p.addr), unsafe.Offsetof(p.step), unsafe.Offsetof(p.last))
	}
}

// TestLanesPrefetchNext checks that PrefetchNext changes nothing but the
// cache: with a hint before every update (ranges shorter and longer than
// the kernels' iterations, and an empty one) the results equal those
// without, bit for bit, for Update and UpdateStaged, on every tier.
func TestLanesPrefetchNext(t *testing.T) {
	for _, tn := range []string{"generic", "avx512", "avx2"} {
		t.Run(tn, func(t *testing.T) {
			useTier(t, tn)
			rng := rand.New(rand.NewSource(5))
			buf := make([]byte, 1<<20)
			for _, d := range []int{16, 128} {
				for _, n := range []int{1, 7, 128} {
					p := newProblem(rng, d, n, 16, 3, RoundE4M3, true, 1)
					l := NewLanes(d)
					want := p.runLanes(l)
					wantStaged := p.runLanesStaged(t, l)
					hint := func(u int) {
						sizes := []int{0, 100, len(buf)}
						k, v := sizes[u%3], sizes[(u+1)%3]
						l.PrefetchNext(unsafe.Pointer(&buf[0]), k, unsafe.Pointer(&buf[len(buf)/2]), v)
					}
					l.Reset(p.m, p.scale, p.round, p.invT)
					for r := 0; r < p.m; r++ {
						l.SetQ(r, p.q[r*p.d:(r+1)*p.d])
					}
					for u := range p.k {
						hint(u)
						l.Update(p.k[u], p.v[u], p.n, p.valid[u])
					}
					if msg, ok := sameResult(p.lanesResult(l), want); !ok {
						t.Errorf("d%d n%d: Update with PrefetchNext: %s", d, n, msg)
					}
					l.Reset(p.m, p.scale, p.round, p.invT)
					for r := 0; r < p.m; r++ {
						l.SetQ(r, p.q[r*p.d:(r+1)*p.d])
					}
					st := &sliceStager{t: t, d: p.d, kb: make([]float32, (BlockN+1)*p.d), vb: make([]float32, (BlockN+1)*p.d)}
					for u := range p.k {
						hint(u + 1)
						st.k, st.v, st.kNext, st.vNext = p.k[u], p.v[u], 0, 0
						l.UpdateStaged(p.n, p.valid[u], st)
					}
					if msg, ok := sameResult(p.lanesResult(l), wantStaged); !ok {
						t.Errorf("d%d n%d: UpdateStaged with PrefetchNext: %s", d, n, msg)
					}
				}
			}
		})
	}
}

// runLanes executes the problem with a Lanes accumulator (reused across
// problems through Reset) under the active tier and normalises O with inv.
func (p *problem) runLanes(l *Lanes) result {
	l.Reset(p.m, p.scale, p.round, p.invT)
	for r := 0; r < p.m; r++ {
		l.SetQ(r, p.q[r*p.d:(r+1)*p.d])
	}
	for u := range p.k {
		l.Update(p.k[u], p.v[u], p.n, p.valid[u])
	}
	return p.lanesResult(l)
}

// lanesResult finishes l and returns its normalised O and LSEs.
func (p *problem) lanesResult(l *Lanes) result {
	res := result{o: make([]float32, p.m*p.d), lse: make([]float32, p.m), tlse: make([]float32, p.m)}
	inv := make([]float32, p.m)
	l.FinishLSE(res.lse, res.tlse, inv)
	for r := 0; r < p.m; r++ {
		for c, x := range l.O(r) {
			res.o[r*p.d+c] = x * inv[r]
		}
	}
	return res
}

// sliceStager stages rows of k and v ([n][d]) into its own buffers, with
// NaN after the requested rows (a kernel reading past them poisons O), and
// checks that each side is requested as consecutive chunks from row 0.
type sliceStager struct {
	t            testing.TB
	k, v         []float32
	d            int
	kb, vb       []float32
	kNext, vNext int
}

func (s *sliceStager) stage(src, buf []float32, next *int, i0, i1 int, side string) []float32 {
	if i0 != *next || i1 <= i0 || i1 > BlockN {
		s.t.Fatalf("Stage%s(%d, %d): want a chunk starting at row %d", side, i0, i1, *next)
	}
	*next = i1
	nan := float32(math.NaN())
	for i := range buf {
		buf[i] = nan
	}
	copy(buf, src[i0*s.d:i1*s.d])
	return buf[:(i1-i0)*s.d]
}

func (s *sliceStager) StageK(i0, i1 int) []float32 {
	return s.stage(s.k, s.kb, &s.kNext, i0, i1, "K")
}

func (s *sliceStager) StageV(i0, i1 int) []float32 {
	return s.stage(s.v, s.vb, &s.vNext, i0, i1, "V")
}

// runLanesStaged is runLanes with UpdateStaged.
func (p *problem) runLanesStaged(t testing.TB, l *Lanes) result {
	l.Reset(p.m, p.scale, p.round, p.invT)
	for r := 0; r < p.m; r++ {
		l.SetQ(r, p.q[r*p.d:(r+1)*p.d])
	}
	st := &sliceStager{t: t, d: p.d, kb: make([]float32, (BlockN+1)*p.d), vb: make([]float32, (BlockN+1)*p.d)}
	for u := range p.k {
		st.k, st.v, st.kNext, st.vNext = p.k[u], p.v[u], 0, 0
		l.UpdateStaged(p.n, p.valid[u], st)
	}
	return p.lanesResult(l)
}

// lanesCases runs f over the Lanes test grid: m <= 16, several updates
// whose key magnitudes grow or shrink (online rescaling), random prefixes
// (0 for about 20% of the rows), every rounding mode, temperature on/off.
// d = 24 and 40 exercise the 8- and 24-column P.V kernels, d = 20 the
// generic fallback (d not a multiple of 8).
func lanesCases(t *testing.T, f func(t *testing.T, p *problem)) {
	rng := rand.New(rand.NewSource(7))
	for _, d := range []int{16, 20, 24, 40, 64, 128, 256} {
		for _, n := range []int{1, 5, 16, 127, 128} {
			for _, m := range []int{1, 3, 8, 16} {
				for _, round := range []Round{RoundNone, RoundBF16, RoundE4M3} {
					temp := rng.Intn(2) == 0
					mag := float32(1)
					if rng.Intn(4) == 0 {
						mag = 20
					}
					updates := 1 + rng.Intn(4)
					p := newProblem(rng, d, n, m, updates, round, temp, mag)
					g := []float32{0.5, 1.5, 3}[rng.Intn(3)]
					for u := range p.k {
						f := float32(math.Pow(float64(g), float64(u)))
						for i := range p.k[u] {
							p.k[u][i] *= f
						}
					}
					name := fmt.Sprintf("d%d/n%d/m%d/r%d/t%v/mag%g/u%d/g%g", d, n, m, round, temp, mag, updates, g)
					t.Run(name, func(t *testing.T) { f(t, p) })
				}
			}
		}
	}
}

func sameResult(got, want result) (string, bool) {
	for i := range want.o {
		if math.Float32bits(got.o[i]) != math.Float32bits(want.o[i]) {
			return fmt.Sprintf("O[%d] = %g, want %g", i, got.o[i], want.o[i]), false
		}
	}
	for r := range want.lse {
		if math.Float32bits(got.lse[r]) != math.Float32bits(want.lse[r]) || math.Float32bits(got.tlse[r]) != math.Float32bits(want.tlse[r]) {
			return fmt.Sprintf("row %d: lse %g/%g, want %g/%g", r, got.lse[r], got.tlse[r], want.lse[r], want.tlse[r]), false
		}
	}
	return "", true
}

// TestLanes compares Lanes with the generic Acc tier, the reference:
//   - the generic Lanes code performs the generic tier's operations in the
//     same order: bit-identical on amd64 (where Go does not contract
//     multiply-adds), the fp32 tolerance elsewhere;
//   - the SIMD lane kernels differ by FMA contraction and the vectorised
//     exp2 only, and are held to the tolerance of TestTiersMatchGeneric for
//     the fp32 tiers (score eps 2^-22 per sqrt(d)*scale*sum|q k|, 2^-20
//     relative elsewhere, rounding flips of P allowed at <= 1%); they are
//     also compared with the avx512 Acc tier (Block.Load + Acc.Update) with
//     twice that tolerance (both sides deviate from the reference).
func TestLanes(t *testing.T) {
	simd := lanesSIMDTier()
	lanes := map[int]*Lanes{}
	lanesCases(t, func(t *testing.T, p *problem) { checkLanes(t, lanes, simd, p) })
}

// TestLanesTails covers the splits of a block into the Q.K key groups
// (AVX-512: 12, 8, 4, 2, 1, every combination below 28 keys; AVX2: 6, 4,
// 2, 1), the staging chunk boundaries (64 rows; 48 before) and the P.V
// column groups (AVX-512: 8 alone at d = 8, 16 + 16 at d = 32, 24 + 16 +
// 16 at d = 56; AVX2: 4 + 4, 6 + 6 + 4 + 4, 6 x 8 + 4 + 4), with all 16
// rows.
func TestLanesTails(t *testing.T) {
	simd := lanesSIMDTier()
	lanes := map[int]*Lanes{}
	rng := rand.New(rand.NewSource(11))
	var ns []int
	for n := 1; n <= 27; n++ {
		ns = append(ns, n)
	}
	ns = append(ns, 47, 48, 49, 63, 64, 65, 97, 127, 128)
	for _, d := range []int{8, 32, 56} {
		for _, n := range ns {
			round := []Round{RoundNone, RoundBF16, RoundE4M3}[rng.Intn(3)]
			p := newProblem(rng, d, n, 16, 2, round, rng.Intn(2) == 0, 1)
			t.Run(fmt.Sprintf("d%d/n%d/r%d", d, n, round), func(t *testing.T) { checkLanes(t, lanes, simd, p) })
		}
	}
}

// lanesSIMDTier returns the AVX-512 tier that runs the lane kernels on this
// machine, or "".
func lanesSIMDTier() string {
	for _, tn := range []string{"avx512", "avx512bf16-emulated"} {
		if m, ok := tierMissing(tn); ok && m == "" {
			return tn
		}
	}
	return ""
}

// checkLanes runs p with a Lanes accumulator (one per d, reused) under the
// generic tier and, when simd != "", the avx512 tier, and compares it with
// the Acc tiers as described for TestLanes.
func checkLanes(t *testing.T, lanes map[int]*Lanes, simd string, p *problem) {
	l := lanes[p.d]
	if l == nil {
		l = NewLanes(p.d)
		lanes[p.d] = l
	}
	tol := p.tolerance(math.Ldexp(1, -22), math.Ldexp(1, -20))
	useTier(t, "generic")
	want := p.run()
	got := p.runLanes(l)
	if msg, ok := sameResult(p.runLanesStaged(t, l), got); !ok {
		t.Errorf("generic Lanes: UpdateStaged differs from Update: %s", msg)
	}
	if runtime.GOARCH == "amd64" {
		if msg, ok := sameResult(got, want); !ok {
			t.Errorf("generic Lanes differs from the generic Acc tier: %s", msg)
		}
	} else {
		compare(t, "generic Lanes", got, want, tol)
	}
	for _, tn := range []string{"avx512", "avx2"} {
		if m, ok := tierMissing(tn); !ok || m != "" || (tn == "avx512" && simd == "") {
			continue
		}
		useTier(t, tn)
		if !LanesSIMD(p.d) {
			continue // generic fallback: checked above
		}
		got = p.runLanes(l)
		if msg, ok := sameResult(p.runLanesStaged(t, l), got); !ok {
			t.Errorf("%s Lanes: UpdateStaged differs from Update: %s", tn, msg)
		}
		compare(t, tn+" Lanes vs generic Acc", got, want, tol)
		acc := p.run()
		tol2 := p.tolerance(math.Ldexp(1, -21), math.Ldexp(1, -19))
		tol2.flip *= 2
		compare(t, tn+" Lanes vs "+tn+" Acc", got, acc, tol2)
	}
}

// TestLanesEdges checks empty updates, m = 0, lanes beyond m and a
// block whose keys are visible to no row.
func TestLanesEdges(t *testing.T) {
	for _, tn := range []string{"generic", "avx512", "avx2"} {
		t.Run(tn, func(t *testing.T) {
			useTier(t, tn)
			const d = 32
			l := NewLanes(d)
			l.Reset(0, 1, RoundNone, 0)
			l.Update(nil, nil, 0, nil)
			l.FinishLSE(nil, nil, nil)
			l.Reset(2, 1, RoundNone, 1)
			q := make([]float32, d)
			q[0] = 1
			l.SetQ(0, q)
			l.SetQ(1, q)
			k := make([]float32, 3*d)
			v := make([]float32, 3*d)
			for i := range v {
				v[i] = float32(i % 7)
			}
			l.Update(k, v, 3, []int32{0, 0})
			l.Update(k, v, 3, []int32{0, 2})
			lse, tlse, inv := make([]float32, 2), make([]float32, 2), make([]float32, 2)
			l.FinishLSE(lse, tlse, inv)
			if !math.IsInf(float64(lse[0]), -1) || !math.IsInf(float64(tlse[0]), -1) || inv[0] != 0 {
				t.Errorf("row without keys: lse %g tlse %g inv %g", lse[0], tlse[0], inv[0])
			}
			for c, x := range l.O(0) {
				if x != 0 {
					t.Fatalf("row without keys: O[%d] = %g", c, x)
				}
			}
			// Row 1: two keys with score 0: lse = ln 2, O = (v0 + v1).
			if math.Abs(float64(lse[1])-math.Ln2) > 1e-6 || math.Abs(float64(tlse[1])-math.Ln2) > 1e-6 || inv[1] != 0.5 {
				t.Errorf("row 1: lse %g tlse %g inv %g", lse[1], tlse[1], inv[1])
			}
			for c, x := range l.O(1) {
				if w := v[c] + v[d+c]; x != w {
					t.Fatalf("row 1: O[%d] = %g, want %g", c, x, w)
				}
			}
		})
	}
}

// BenchmarkLanesUpdate times Lanes.Update of m = 16 rows against n = 128
// keys read in place (4*m*n*d flops; on avx512bf16 also with bf16 products,
// lanes-bf16: SetBF16Products), and, for comparison, the Acc path of
// the same tier at m = 16 including the Block.Load that decode must pay per
// block (acc+load) and without it (acc). best-GFLOP/s is the fastest single
// call; %peak compares it with calib.PeakGFLOPS of the tier's loop.
func BenchmarkLanesUpdate(b *testing.B) {
	for _, tn := range []string{"generic", "avx2", "avx512", "avx512bf16", "amxbf16"} {
		for _, d := range []int{64, 128, 256} {
			for _, path := range []string{"lanes", "lanes-bf16", "acc+load", "acc"} {
				if path == "lanes-bf16" && tn != "avx512bf16" {
					continue // the bf16-product lane kernels run on avx512bf16 only
				}
				const m, n = 16, 128
				b.Run(fmt.Sprintf("tier=%s/path=%s/m=%d/n=%d/d=%d", tn, path, m, n, d), func(b *testing.B) {
					useTier(b, tn)
					rng := rand.New(rand.NewSource(1))
					p := newProblem(rng, d, n, m, 1, RoundNone, false, 1)
					for r := range p.valid[0] {
						p.valid[0][r] = n
					}
					l := NewLanes(d)
					l.SetBF16Products(path == "lanes-bf16")
					l.Reset(m, p.scale, RoundNone, 0)
					blk := NewBlock(d)
					blk.Load(n, p.k[0], p.v[0])
					a := NewAcc(m, d)
					a.Reset(m, p.scale, RoundNone, 0)
					for r := 0; r < m; r++ {
						l.SetQ(r, p.q[r*d:(r+1)*d])
						copy(a.Q(r), p.q[r*d:(r+1)*d])
					}
					var step func()
					switch path {
					case "lanes", "lanes-bf16":
						step = func() { l.Update(p.k[0], p.v[0], n, p.valid[0]) }
					case "acc+load":
						step = func() { blk.Load(n, p.k[0], p.v[0]); a.Update(blk, p.valid[0]) }
					default:
						step = func() { a.Update(blk, p.valid[0]) }
					}
					flops := 4 * float64(m*n*d)
					b.ResetTimer()
					start := time.Now()
					best := time.Duration(math.MaxInt64)
					for i := 0; i < b.N; i++ {
						t0 := time.Now()
						step()
						best = min(best, time.Since(t0))
					}
					el := time.Since(start)
					b.ReportMetric(flops*float64(b.N)/el.Seconds()/1e9, "GFLOP/s")
					bestGF := flops / best.Seconds() / 1e9
					b.ReportMetric(bestGF, "best-GFLOP/s")
					if peak := calib.PeakGFLOPS(PeakLoop(tn), 50*time.Millisecond); peak > 0 {
						b.ReportMetric(peak, "peak-GFLOP/s")
						b.ReportMetric(100*bestGF/peak, "%peak")
					}
				})
			}
		}
	}
}
