package tile

import (
	"fmt"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sparseattn/msa/internal/calib"
	"github.com/sparseattn/msa/kernels/lowp"
)

// useTier switches to a tier for the duration of a (sub)test, skipping it
// with the missing feature when the CPU cannot run it.
func useTier(t testing.TB, name string) {
	t.Helper()
	m, ok := tierMissing(name)
	if !ok {
		t.Skipf("tier %s is not built for this platform (purego or non-amd64)", name)
	}
	if m != "" {
		t.Skipf("tier %s: CPU lacks %s", name, m)
	}
	restoreTiers(t)
	if err := SetTier(name); err != nil {
		t.Fatal(err)
	}
}

// restoreTiers puts the active tier and its bf16 twin back as they are now
// when the (sub)test ends.
func restoreTiers(t testing.TB) {
	prev, prevTwin := active, twin
	t.Cleanup(func() { active, twin = prev, prevTwin })
}

// problem is one randomised accumulation: m query rows against a sequence of
// key blocks with per-row prefix masks.
type problem struct {
	d, n, m int
	round   Round
	invT    float32
	scale   float32
	q       []float32   // [m][d]
	k, v    [][]float32 // per update [n][d]
	valid   [][]int32   // per update [m]
}

func newProblem(rng *rand.Rand, d, n, m, updates int, round Round, temp bool, mag float32) *problem {
	p := &problem{d: d, n: n, m: m, round: round, scale: float32(1 / math.Sqrt(float64(d)) * math.Log2E)}
	if temp {
		p.invT = 1 / 0.7
	}
	randv := func(size int, s float32) []float32 {
		x := make([]float32, size)
		for i := range x {
			x[i] = float32(rng.NormFloat64()) * s
		}
		return x
	}
	p.q = randv(m*d, mag)
	for u := 0; u < updates; u++ {
		p.k = append(p.k, randv(n*d, 1))
		p.v = append(p.v, randv(n*d, 1))
		val := make([]int32, m)
		for r := range val {
			switch x := rng.Intn(10); {
			case x < 2:
				val[r] = 0
			case x < 5:
				val[r] = int32(n)
			default:
				val[r] = int32(rng.Intn(n + 1))
			}
		}
		p.valid = append(p.valid, val)
	}
	return p
}

// result of Finish.
type result struct {
	o         []float32 // [m][d]
	lse, tlse []float32
}

// run executes the problem under the active tier.
func (p *problem) run() result {
	a := NewAcc(p.m+2, p.d)
	a.Reset(p.m, p.scale, p.round, p.invT)
	for r := 0; r < p.m; r++ {
		copy(a.Q(r), p.q[r*p.d:(r+1)*p.d])
	}
	return p.accumulate(NewBlock(p.d), a)
}

// accumulate runs p's blocks through a (reset, its query rows set) with b
// and returns the finished result.
func (p *problem) accumulate(b *Block, a *Acc) result {
	for u := range p.k {
		b.Load(p.n, p.k[u], p.v[u])
		a.Update(b, p.valid[u])
	}
	res := result{o: make([]float32, p.m*p.d), lse: make([]float32, p.m), tlse: make([]float32, p.m)}
	a.Finish(res.lse, res.tlse)
	for r := 0; r < p.m; r++ {
		copy(res.o[r*p.d:], a.O(r))
	}
	return res
}

// bf16Inputs returns the problem with Q, K and V rounded to bf16 and RoundNone
// replaced by RoundBF16: the generic tier then computes what the bf16 tier
// computes, up to reassociation.
func (p *problem) bf16Inputs() *problem {
	r := *p
	rd := func(x []float32) []float32 {
		y := make([]float32, len(x))
		for i, v := range x {
			y[i] = lowp.BF16(v).Float32()
		}
		return y
	}
	r.q = rd(p.q)
	r.k, r.v = nil, nil
	for u := range p.k {
		r.k = append(r.k, rd(p.k[u]))
		r.v = append(r.v, rd(p.v[u]))
	}
	if r.round == RoundNone {
		r.round = RoundBF16
	}
	return &r
}

// tolerance bounds the difference between two evaluations of p whose scores
// differ by at most eps*sqrt(d)*scale*sum|q_c k_c| (per-score error of a
// reassociated float32 dot product: a random-walk bound with a safety factor
// of 4 over the unit roundoff 2^-24 when eps = 2^-22), and whose other
// operations differ by `other` relatively (2^-20: exp2 within 1 ulp, sums of
// up to 128 terms reassociated, sqrt(128)*2^-24 < 2^-20). A score error ds moves every
// P = exp2(s - mx) by at most 2*ln2*ds relatively (s and mx both move), and
// the normalised output O = sum P V / sum P by twice that times max|V|.
type tolerance struct {
	o, lse, flip float64
}

func (p *problem) tolerance(eps, other float64) tolerance {
	var s1, vmax float64
	for u := range p.k {
		for r := 0; r < p.m; r++ {
			for i := 0; i < p.n; i++ {
				var a float64
				for c := 0; c < p.d; c++ {
					a += math.Abs(float64(p.q[r*p.d+c]) * float64(p.k[u][i*p.d+c]))
				}
				s1 = math.Max(s1, a)
			}
		}
		for _, x := range p.v[u] {
			vmax = math.Max(vmax, math.Abs(float64(x)))
		}
	}
	ds := eps * math.Sqrt(float64(p.d)) * float64(p.scale) * s1
	tf := math.Max(1, float64(p.invT))
	e := 2*math.Ln2*ds*tf + other
	var flip float64
	switch p.round {
	case RoundBF16:
		flip = math.Ldexp(1, -8)
	case RoundE4M3:
		flip = math.Ldexp(1, -3)
	}
	return tolerance{o: (2*e + other) * vmax, lse: e + other, flip: flip * vmax}
}

// compare checks got against want. Elements whose error exceeds tol.o but not
// tol.o+tol.flip are rounding flips: a P that lies on a bf16/e4m3 rounding
// boundary may round to the neighbouring value under a perturbation of one
// ulp, changing the normalised output by at most one rounding step of P
// (<= P*2^-8 or P*2^-3, P <= 1) times |V|; at most 1% of the outputs, or
// one row's outputs where that is more, may flip.
func compare(t *testing.T, what string, got, want result, tol tolerance) {
	t.Helper()
	flips, bad := 0, 0
	var worst float64
	for i := range want.o {
		e := math.Abs(float64(got.o[i]) - float64(want.o[i]))
		worst = math.Max(worst, e)
		if !(e <= tol.o) {
			if e <= tol.o+tol.flip {
				flips++
			} else {
				if bad < 5 {
					t.Errorf("%s: O[%d] = %g, want %g (diff %g > tol %g)", what, i, got.o[i], want.o[i], e, tol.o)
				}
				bad++
			}
		}
	}
	// One flipped P value (row r, key i) moves every output of row r, so
	// at least one row's outputs may flip even when that is more than 1%
	// (small m*d).
	allowed := len(want.o)/100 + 1
	if len(want.lse) > 0 {
		allowed = max(allowed, len(want.o)/len(want.lse))
	}
	if flips > allowed {
		t.Errorf("%s: %d of %d outputs beyond tolerance %g (rounding flips?)", what, flips, len(want.o), tol.o)
	}
	for r := range want.lse {
		for _, pair := range [][2]float32{{got.lse[r], want.lse[r]}, {got.tlse[r], want.tlse[r]}} {
			g, w := float64(pair[0]), float64(pair[1])
			if math.IsInf(w, -1) || math.IsInf(g, -1) {
				if g != w {
					t.Errorf("%s: lse row %d = %g, want %g", what, r, g, w)
				}
				continue
			}
			if e := math.Abs(g - w); !(e <= tol.lse*(1+math.Abs(w))) {
				t.Errorf("%s: lse row %d = %g, want %g (diff %g > %g)", what, r, g, w, e, tol.lse*(1+math.Abs(w)))
			}
		}
	}
}

// forCases runs f over the test grid.
func forCases(t *testing.T, short bool, f func(t *testing.T, p *problem)) {
	rng := rand.New(rand.NewSource(1))
	ds := []int{16, 64, 128, 256}
	ns := []int{1, 7, 64, 127, 128}
	ms := []int{1, 3, 16, 64, 128}
	if testing.Short() || short {
		ms = []int{1, 3, 16, 64}
	}
	for _, d := range ds {
		for _, n := range ns {
			for _, m := range ms {
				for _, round := range []Round{RoundNone, RoundBF16, RoundE4M3} {
					temp := rng.Intn(2) == 0
					mag := float32(1)
					if rng.Intn(4) == 0 {
						mag = 20 // large-magnitude scores
					}
					updates := 1 + rng.Intn(3)
					if m*d > 64*128 && n > 64 {
						updates = 2
					}
					p := newProblem(rng, d, n, m, updates, round, temp, mag)
					name := fmt.Sprintf("d%d/n%d/m%d/r%d/t%v/mag%g/u%d", d, n, m, round, temp, mag, updates)
					t.Run(name, func(t *testing.T) { f(t, p) })
				}
			}
		}
	}
}

// TestTiersMatchGeneric compares every SIMD tier with the generic one.
// fp32 tiers (avx2, avx512) differ from the generic tier only by
// reassociation (dot products and sums in another order, FMA contraction)
// and by the vectorised exp2 (< 1 ulp here, vs. correctly rounded): score
// error eps = 2^-22 per sqrt(d)*scale*sum|q k|, 2^-20 relative elsewhere.
// (Observed worst error: about 1% of this tolerance without P rounding.)
func TestTiersMatchGeneric(t *testing.T) {
	for _, tn := range []string{"avx2", "avx512"} {
		t.Run(tn, func(t *testing.T) {
			if m, ok := tierMissing(tn); !ok || m != "" {
				t.Skipf("tier %s: CPU lacks %s", tn, m)
			}
			forCases(t, false, func(t *testing.T, p *problem) {
				useTier(t, "generic")
				want := p.run()
				useTier(t, tn)
				got := p.run()
				compare(t, tn, got, want, p.tolerance(math.Ldexp(1, -22), math.Ldexp(1, -20)))
			})
		})
	}
}

// TestBF16Tier checks the avx512bf16 tier (and its emulated twin, which
// runs everywhere AVX-512F does) two ways:
//   - against the generic tier run on bf16-rounded Q, K, V with P rounded to
//     bf16: equal up to reassociation (products of two bf16 are exact in
//     float32), so the fp32 tolerance applies;
//   - against the generic tier on the original inputs, with the bf16 error
//     model: Q and K rounded to bf16 (relative error 2^-9 each) perturb a
//     score by at most 2*2^-9*scale*sum|q k| (eps = 2^-8/sqrt(d) in the
//     tolerance formula, i.e. no random-walk credit), P and V rounded to bf16
//     add 2^-8 relative to O.
func TestBF16Tier(t *testing.T) {
	for _, tn := range []string{"avx512bf16", "avx512bf16-emulated", "amxbf16"} {
		t.Run(tn, func(t *testing.T) {
			if m, ok := tierMissing(tn); !ok || m != "" {
				t.Skipf("tier %s: CPU lacks %s", tn, m)
			}
			forCases(t, true, func(t *testing.T, p *problem) {
				useTier(t, "generic")
				pr := p.bf16Inputs()
				wantR := pr.run()
				want := p.run()
				useTier(t, tn)
				got := p.run()
				compare(t, tn+" vs generic on bf16 inputs", got, wantR, pr.tolerance(math.Ldexp(1, -22), math.Ldexp(1, -20)))
				tol := p.tolerance(math.Ldexp(1, -8)/math.Sqrt(float64(p.d)), math.Ldexp(1, -8))
				tol.flip = math.Max(tol.flip, pr.tolerance(0, 0).flip)
				compare(t, tn+" vs generic", got, want, tol)
			})
		})
	}
}

// TestGenericFloat64 checks the generic tier against a float64 evaluation of
// the same attention (no P rounding). The generic tier sums in sequence, so
// its score error is bounded by d*2^-24*scale*sum|q k| (eps = 2^-24*sqrt(d)
// in the tolerance formula, times 4 for safety).
func TestGenericFloat64(t *testing.T) {
	useTier(t, "generic")
	rng := rand.New(rand.NewSource(2))
	for _, d := range []int{16, 64, 128, 256} {
		for _, n := range []int{1, 7, 128} {
			for _, m := range []int{1, 3, 16} {
				for _, temp := range []bool{false, true} {
					p := newProblem(rng, d, n, m, 3, RoundNone, temp, 1+float32(rng.Intn(2))*10)
					got := p.run()
					want := p.float64Ref()
					compare(t, fmt.Sprintf("generic d%d n%d m%d t%v", d, n, m, temp), got, want,
						p.tolerance(4*math.Ldexp(1, -24)*math.Sqrt(float64(d)), math.Ldexp(1, -18)))
				}
			}
		}
	}
}

// float64Ref evaluates the problem in float64.
func (p *problem) float64Ref() result {
	res := result{o: make([]float32, p.m*p.d), lse: make([]float32, p.m), tlse: make([]float32, p.m)}
	for r := 0; r < p.m; r++ {
		var ss []float64
		var vs [][]float32
		for u := range p.k {
			for i := 0; i < int(p.valid[u][r]); i++ {
				var s float64
				for c := 0; c < p.d; c++ {
					s += float64(p.q[r*p.d+c]) * float64(p.k[u][i*p.d+c])
				}
				ss = append(ss, s*float64(p.scale))
				vs = append(vs, p.v[u][i*p.d:(i+1)*p.d])
			}
		}
		if len(ss) == 0 {
			res.lse[r] = float32(math.Inf(-1))
			if p.invT > 0 {
				res.tlse[r] = float32(math.Inf(-1))
			}
			continue
		}
		mx := math.Inf(-1)
		for _, s := range ss {
			mx = math.Max(mx, s)
		}
		var sum, tsum float64
		o := make([]float64, p.d)
		for i, s := range ss {
			w := math.Exp2(s - mx)
			sum += w
			tsum += math.Exp2((s - mx) * float64(p.invT))
			for c := range o {
				o[c] += w * float64(vs[i][c])
			}
		}
		for c := range o {
			res.o[r*p.d+c] = float32(o[c] / sum)
		}
		res.lse[r] = float32((mx + math.Log2(sum)) * math.Ln2)
		if p.invT > 0 {
			res.tlse[r] = float32((mx*float64(p.invT) + math.Log2(tsum)) * math.Ln2)
		}
	}
	return res
}

// sameBlock compares the packed K and the n value rows of two blocks.
func sameBlock(t *testing.T, what string, got, want *Block) {
	t.Helper()
	for i := range want.kt {
		if got.kt[i] != want.kt[i] {
			t.Fatalf("%s: kt[%d] = %g, want %g", what, i, got.kt[i], want.kt[i])
		}
	}
	if got.N() != want.N() {
		t.Fatalf("%s: n = %d, want %d", what, got.N(), want.N())
	}
	for i := 0; i < want.N()*want.d; i++ {
		if got.v[i] != want.v[i] {
			t.Fatalf("%s: v[%d] differs", what, i)
		}
	}
}

// TestLoadLayout checks the vectorised packing bit for bit.
func TestLoadLayout(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for _, tn := range []string{"avx512", "avx2"} {
		t.Run(tn, func(t *testing.T) {
			for _, d := range []int{16, 48, 128, 256} {
				for _, n := range []int{0, 1, 15, 16, 17, 100, 128} {
					k := make([]float32, n*d)
					v := make([]float32, n*d)
					for i := range k {
						k[i], v[i] = rng.Float32(), rng.Float32()
					}
					useTier(t, "generic")
					want := NewBlock(d)
					want.Load(n, k, v)
					useTier(t, tn)
					got := NewBlock(d)
					for i := range got.kt {
						got.kt[i] = 7 // the loader must zero unused columns
					}
					got.Load(n, k, v)
					sameBlock(t, fmt.Sprintf("d%d n%d Load", d, n), got, want)
				}
			}
		})
	}
}

// BenchmarkUpdate times Acc.Update of m query rows against a full block of
// 128 keys (4*m*n*d flops). GFLOP/s is the mean over b.N; best-GFLOP/s the
// fastest single Update (robust to other processes on shared cores), and
// %peak compares it with calib.PeakGFLOPS of the tier's loop (avx512 for the emulated
// bf16 tier).
func BenchmarkUpdate(b *testing.B) {
	for _, tn := range []string{"generic", "avx2", "avx512", "avx512bf16", "avx512bf16-emulated", "amxbf16"} {
		for _, md := range [][2]int{{64, 64}, {64, 128}, {64, 256}, {16, 128}, {128, 128}} {
			m, d := md[0], md[1]
			b.Run(fmt.Sprintf("tier=%s/m=%d/d=%d", tn, m, d), func(b *testing.B) {
				useTier(b, tn)
				const n = 128
				rng := rand.New(rand.NewSource(1))
				p := newProblem(rng, d, n, m, 1, RoundNone, false, 1)
				for r := range p.valid[0] {
					p.valid[0][r] = n
				}
				blk := NewBlock(d)
				blk.Load(n, p.k[0], p.v[0])
				a := NewAcc(m, d)
				a.Reset(m, p.scale, RoundNone, 0)
				for r := 0; r < m; r++ {
					copy(a.Q(r), p.q[r*d:(r+1)*d])
				}
				flops := 4 * float64(m*n*d)
				b.ResetTimer()
				start := time.Now()
				best := time.Duration(math.MaxInt64)
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					a.Update(blk, p.valid[0])
					best = min(best, time.Since(t0))
				}
				el := time.Since(start)
				gf := flops * float64(b.N) / el.Seconds() / 1e9
				bestGF := flops / best.Seconds() / 1e9
				b.ReportMetric(gf, "GFLOP/s")
				// The best single Update is robust to other processes on
				// shared cores; compare it with the best-window peak.
				b.ReportMetric(bestGF, "best-GFLOP/s")
				if peak := calib.PeakGFLOPS(PeakLoop(peakTier(tn)), 50*time.Millisecond); peak > 0 {
					b.ReportMetric(peak, "peak-GFLOP/s")
					b.ReportMetric(100*bestGF/peak, "%peak")
				}
			})
		}
	}
}

// peakTier names the calibration loop a tier is measured against.
func peakTier(tn string) string {
	if tn == "avx512bf16-emulated" {
		return "avx512"
	}
	return tn
}

func BenchmarkLoad(b *testing.B) {
	for _, tn := range []string{"generic", "avx2", "avx512", "avx512bf16", "avx512bf16-emulated"} {
		b.Run("tier="+tn, func(b *testing.B) {
			useTier(b, tn)
			const n, d = 128, 128
			k := make([]float32, n*d)
			v := make([]float32, n*d)
			blk := NewBlock(d)
			for i := 0; i < b.N; i++ {
				blk.Load(n, k, v)
			}
		})
	}
}

// TestTierSelection checks SetTier, Tiers and the MSA_CPU_TIER override (in
// a child process, since the variable is read at start-up).
func TestTierSelection(t *testing.T) {
	if os.Getenv("MSA_TILE_CHILD") == "1" {
		fmt.Printf("TIER=%s BF16=%s\n", Tier(), BF16InputTier())
		return
	}
	tiers := Tiers()
	if len(tiers) == 0 || tiers[len(tiers)-1] != "generic" {
		t.Fatalf("Tiers() = %v, want generic last", tiers)
	}
	if err := SetTier("nonsense"); err == nil {
		t.Fatal("SetTier(nonsense) succeeded")
	}
	for _, tn := range []string{"amxbf16", "avx512bf16", "avx512", "avx2"} {
		if m, ok := tierMissing(tn); ok && m != "" {
			if err := SetTier(tn); err == nil || !strings.Contains(err.Error(), m) {
				t.Errorf("SetTier(%s) = %v, want an error naming %s", tn, err, m)
			}
		}
	}
	restoreTiers(t)
	if err := SetTier(AutoTier); err != nil {
		t.Fatal(err)
	}
	if slices.Contains([]string{"amxbf16", "avx512bf16", "avx512bf16-emulated"}, Tier()) {
		t.Errorf("the bf16 tier %s was chosen automatically for float32 work", Tier())
	}
	// The child reports the active tier and the bf16 twin: a tier named
	// by the variable is both, and "auto" (like no variable) the
	// automatic choice.
	autoTwin := BF16InputTier()
	for _, c := range [][3]string{{"generic", "generic", "generic"}, {tiers[0], tiers[0], tiers[0]}, {AutoTier, Tier(), autoTwin}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTierSelection$")
		cmd.Env = append(os.Environ(), "MSA_TILE_CHILD=1", EnvTier+"="+c[0])
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		if want := "TIER=" + c[1] + " BF16=" + c[2] + "\n"; !strings.Contains(string(out), want) {
			t.Errorf("%s=%s: child reports %q, want %q", EnvTier, c[0], out, want)
		}
	}
}

// TestSetQBF16 checks that query rows given as bf16 bits (Acc.SetQBF16)
// give bit for bit the results of the same rows given as float32 (QRows)
// on the tiers that keep queries as bf16, with special patterns (NaN,
// infinities, signed zeros, subnormals) among the bits, and that the other
// tiers decline and leave the rows to QRows. A Reset after SetQBF16 must
// take the next accumulation's rows from QRows again.
func TestSetQBF16(t *testing.T) {
	for _, tn := range []string{"amxbf16", "avx512bf16", "avx512bf16-emulated", "avx512", "avx2", "generic"} {
		t.Run(tn, func(t *testing.T) {
			useTier(t, tn)
			takes := active.bf16
			forCases(t, true, func(t *testing.T, p *problem) {
				rng := rand.New(rand.NewSource(int64(p.d*1000 + p.m)))
				bits := make([]lowp.BFloat16, p.m*p.d)
				for i, v := range p.q {
					bits[i] = lowp.BF16(v)
					if rng.Intn(97) == 0 {
						bits[i] = []lowp.BFloat16{0x7fc1, 0xff80, 0x7f80, 0x8000, 0x0000, 0x0001, 0x807f}[rng.Intn(7)]
					}
				}
				b := NewBlock(p.d)
				run := func(a *Acc, bits []lowp.BFloat16, raw bool) result {
					a.Reset(p.m, p.scale, p.round, p.invT)
					for r := 0; r < p.m; r++ {
						row := bits[r*p.d : (r+1)*p.d]
						if raw {
							if got := a.SetQBF16(r, row); got != (takes && p.d%16 == 0) {
								t.Fatalf("SetQBF16 = %v on tier %s, d %d", got, tn, p.d)
							} else if got {
								continue
							}
						}
						for c, x := range row {
							a.Q(r)[c] = x.Float32()
						}
					}
					return p.accumulate(b, a)
				}
				want := run(NewAcc(p.m+2, p.d), bits, false)
				a := NewAcc(p.m+2, p.d)
				got := run(a, bits, true)
				same := func(what string, x, y []float32) {
					for i := range x {
						if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
							t.Fatalf("%s[%d] = %v with SetQBF16, %v with QRows", what, i, y[i], x[i])
						}
					}
				}
				same("o", want.o, got.o)
				same("lse", want.lse, got.lse)
				same("tlse", want.tlse, got.tlse)
				neg := make([]lowp.BFloat16, len(bits))
				for i, x := range bits {
					neg[i] = x ^ 0x8000
				}
				wantNeg := run(NewAcc(p.m+2, p.d), neg, false)
				again := run(a, neg, false)
				same("o after Reset", wantNeg.o, again.o)
				same("lse after Reset", wantNeg.lse, again.lse)
			})
		})
	}
}
