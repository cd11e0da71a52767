package attn

import (
	"math"
	"math/rand"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/sparseattn/msa/internal/calib"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/tile"
)

// BenchmarkDecodeBlock measures the compute side of one decode step's work
// per key block with every operand in cache: 16 query rows (one KV head's
// query heads at GQA 16) against one 128-key block at D = 128, as
// decodeTile runs it. Sub-benchmarks:
//
//   - kernel: the accumulator update alone on K/V already in float32
//     (Lanes, whose kernels both tiers have at D = 128), with
//     P rounded to e4m3 as FP8 decode does;
//   - stage=<dtype>: the K and V staging to float32 alone (e4m3, bf16);
//   - step=<dtype>: both, whole block staged, then the update;
//   - staged=<dtype>: the update with K and V decoded a few rows at a time
//     into L1 (tile.Lanes.UpdateStaged), as decode runs them, with BF16's V
//     overflow guard scanning each decoded V chunk and the block hinted as
//     its own successor (prefetch and keys widened ahead);
//   - callerstaged=<dtype>: the same with no chunk offered raw, so that
//     kvStager stages every chunk (the path before the lane kernels widened
//     or read K/V themselves; on a new machine kind it tells whether their
//     widening pays);
//   - dram=<dtype>/prefetch=<off|on>: staged updates streaming over 128 MiB
//     of K/V blocks (one block per iteration, the mean rate), without and
//     with the next-block prefetch hint: the memory side on one core.
//
// Tiers avx2, avx512 and amxbf16 (opt-in; its Lanes run both products on
// AMX tiles and read the e4m3fn and bf16 rows themselves, see
// tile.Lanes). Each reports the best repetition's rate as GFLOP/s of the
// block's attention math (4*16*128*128 flops, also for the staging-only
// run, so the times compare) and %peak against calib.PeakGFLOPS of the tier
// (amxbf16: of avx512, the FP32 FMA loop, so that the rows compare). A step's
// %peak is the ceiling of the end-to-end decode %roof on this machine when
// memory costs nothing; bench's decode cases report how far below it the
// whole call runs (docs/performance.md, Decode).
func BenchmarkDecodeBlock(b *testing.B) {
	const m, n, d = 16, tile.BlockN, 128
	benchTiers(b, []string{"avx2", "avx512", "amxbf16"}, func(b *testing.B, tn string, lv vec) {
		rng := rand.New(rand.NewSource(1))
		e4 := make([]lowp.Float8E4M3FN, 2*n*d)
		bf := make([]lowp.BFloat16, 2*n*d)
		for i := range e4 {
			x := float32(rng.NormFloat64())
			e4[i] = lowp.E4M3(x)
			bf[i] = lowp.BF16(x)
		}
		kf, vf := make([]float32, n*d), make([]float32, n*d)
		decodeE4M3(kf, e4[:n*d], lv)
		decodeE4M3(vf, e4[n*d:], lv)
		wk := newWorker(d, 1).buffers()
		ra := wk.decodeAcc(tile.LanesSIMD(d))
		valid := make([]int32, m)
		for r := range valid {
			valid[r] = n
		}
		resetRandomQ(ra, m, d, rng)
		// amxbf16 (Lanes' AMX path) is held to the FP32 FMA peak too, so
		// that its rows compare with the avx512 ones.
		pt := tn
		if tn == "amxbf16" {
			pt = "avx512"
		}
		peak := calib.PeakGFLOPS(tile.PeakLoop(pt), 50*time.Millisecond)
		run := func(name string, f func()) { bestRate(b, name, 4*float64(m*n*d), peak, f) }
		// Repeated updates of one block keep the running max; the sums
		// grow by at most n per update and stay finite for any b.N a
		// benchmark reaches.
		kernel := func() { ra.update(kf, vf, n, valid) }
		stage := map[string]func(){
			"e4m3": func() { decodeE4M3(kf, e4[:n*d], lv); decodeE4M3(vf, e4[n*d:], lv) },
			"bf16": func() { decodeBF16(kf, bf[:n*d], lv); decodeBF16(vf, bf[n*d:], lv) },
		}
		run("kernel", kernel)
		for _, dt := range []string{"e4m3", "bf16"} {
			run("stage="+dt, stage[dt])
			run("step="+dt, func() { stage[dt](); kernel() })
		}
		ops := map[string][2]Operand{
			"e4m3": {{Dtype: E4M3, D: d, E4M3: e4[:n*d], vec: lv}, {Dtype: E4M3, D: d, E4M3: e4[n*d:], vec: lv}},
			"bf16": {{Dtype: BF16, D: d, BF16: bf[:n*d], vec: lv}, {Dtype: BF16, D: d, BF16: bf[n*d:], vec: lv}},
		}
		la, ok := ra.(*lanesAcc)
		if !ok {
			return // no lane kernels for this tier and d: decode stages whole blocks
		}
		// The block as decode stages it: one dense sequence of n tokens.
		layout := &KVLayout{Hkv: 1, CuK: []int32{0, n}}
		for _, dt := range []string{"e4m3", "bf16"} {
			kv := ops[dt]
			var vs vScale
			// BF16 V is guarded: every decoded V chunk is scanned.
			st := benchStager(&kv[0], &kv[1], layout, kf, vf, &vs, la)
			// Each update hints the block as its successor, like decode's
			// next-block hint (prefetch, and the first key rows widened
			// ahead by the last value chunk's kernels).
			run("staged="+dt, func() {
				prefetchNext(la, st.k, st.v, layout, 0, 0, 0, n, st.foldK)
				la.updateStaged(st, n, valid)
			})
			run("callerstaged="+dt, func() {
				kp, kb := st.k.storage(0, n)
				vp, vb := st.v.storage(0, n)
				la.prefetchNext(kp, kb, vp, vb) // no keys widened ahead
				la.g[0].UpdateStaged(n, valid[:m], callerStaged{st})
			})
		}
		// The same staged updates streaming over dramBlocks blocks of one
		// dense sequence (128 MiB of K/V: far beyond the caches), with and
		// without the next-block prefetch hint decodeTile gives: the mean
		// rate over b.N blocks, not the best one.
		const dramBlocks = 2048
		for _, dt := range []string{"e4m3", "bf16"} {
			var k, v Operand
			switch dt {
			case "e4m3":
				big := make([]lowp.Float8E4M3FN, 2*dramBlocks*n*d)
				for i := range big {
					big[i] = e4[i%len(e4)]
				}
				k = Operand{Dtype: E4M3, D: d, E4M3: big[:dramBlocks*n*d], vec: lv}
				v = Operand{Dtype: E4M3, D: d, E4M3: big[dramBlocks*n*d:], vec: lv}
			default:
				big := make([]lowp.BFloat16, 2*dramBlocks*n*d/2) // half as many blocks: the same bytes
				for i := range big {
					big[i] = bf[i%len(bf)]
				}
				k = Operand{Dtype: BF16, D: d, BF16: big[:len(big)/2], vec: lv}
				v = Operand{Dtype: BF16, D: d, BF16: big[len(big)/2:], vec: lv}
			}
			blocks := k.Rows() / n
			layout := &KVLayout{Hkv: 1, CuK: []int32{0, int32(blocks * n)}}
			for _, pf := range []bool{false, true} {
				name := "dram=" + dt + "/prefetch=off"
				if pf {
					name = "dram=" + dt + "/prefetch=on"
				}
				b.Run(name, func(b *testing.B) {
					var vs vScale
					st := benchStager(&k, &v, layout, kf, vf, &vs, la)
					start := time.Now()
					for i := 0; i < b.N; i++ {
						j := i % blocks
						if pf {
							prefetchNext(la, &k, &v, layout, 0, 0, (j+1)%blocks*n, n, st.foldK)
						}
						st.t0 = j * n
						la.updateStaged(st, n, valid)
					}
					gf := 4 * float64(m*n*d) * float64(b.N) / time.Since(start).Seconds() / 1e9
					b.ReportMetric(gf, "GFLOP/s")
					if peak > 0 {
						b.ReportMetric(100*gf/peak, "%peak")
					}
				})
			}
		}
	})
}

// callerStaged hides a kvStager's raw rows: every chunk is staged by it.
type callerStaged struct{ *kvStager }

func (callerStaged) RawK(int, int) (unsafe.Pointer, tile.RawFormat) { return nil, tile.RawNone }

func (callerStaged) RawV(int, int) (unsafe.Pointer, tile.RawFormat, bool) {
	return nil, tile.RawNone, false
}

// benchStager is the stager decode gives the lane accumulator la for the
// K/V operands k and v (decodeTile): BF16 V guarded (every decoded V chunk
// scanned), e4m3fn rows staged as value / e4m3Fold where the operand's
// decoder folds (the score scale and output factor are left as they are:
// the timings do not depend on them).
func benchStager(k, v *Operand, l *KVLayout, kbuf, vbuf []float32, vs *vScale, la *lanesAcc) *kvStager {
	return &kvStager{k: k, v: v, l: l, kbuf: kbuf, vbuf: vbuf, vs: vs, acc: la, scan: v.Dtype == BF16, foldK: k.foldsE4M3(), foldV: v.foldsE4M3()}
}

// BenchmarkPrefillTile measures the compute side of sparse prefill per
// accumulator tile with every operand in cache: 8 queries x 16 query heads
// (128 rows, D = 128) against one loaded 128-key block, as prefillItemRun
// runs it (the block's K/V decode is amortised over the many tiles of a
// work item and left out). Sub-benchmarks:
//
//   - kernel: Acc.Update alone (Q already float32; on the avx512bf16
//     tier Acc.Reset and the BF16 rows set as they are, Acc.SetQBF16, as
//     the product does, since Reset drops them);
//   - tile: the Q rows as prefillItemRun takes them (SetQBF16 on the
//     avx512bf16 tier, BF16 decode elsewhere), Acc.Reset, Update,
//     FinishLSE and the BF16 partial stores of the 128 rows into a buffer
//     that stays in cache.
//
// Each reports the best repetition as GFLOP/s of the tile's math
// (4*128*128*128 flops) and %peak against calib.PeakGFLOPS of the tier (the
// VDPBF16PS peak on avx512bf16): the ceiling of the end-to-end prefill
// %peak on this machine when the partials' memory traffic (written once,
// read back by the combine) costs nothing. %peak-mean is the mean over the
// repetitions (see bestRate).
func BenchmarkPrefillTile(b *testing.B) {
	const qpk, nq, n, d = 16, 8, tile.BlockN, 128
	const m = qpk * nq
	benchTiers(b, []string{"avx2", "avx512", "avx512bf16"}, func(b *testing.B, tn string, lv vec) {
		rng := rand.New(rand.NewSource(2))
		q := make([]lowp.BFloat16, m*d)
		for i := range q {
			q[i] = lowp.BF16(float32(rng.NormFloat64()))
		}
		qop := Operand{Dtype: BF16, D: d, BF16: q, vec: lv}
		kf, vf := make([]float32, n*d), make([]float32, n*d)
		for i := range kf {
			kf[i], vf[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
		}
		wk := newWorker(d, 1).blockKernel()
		wk.blk.Load(n, kf, vf)
		var pt Partials
		pt.Ensure(PartialBF16, d, m, false)
		pt.vec = lv
		for r := range m {
			wk.valid[r] = n
		}
		scale := float32(1/math.Sqrt(d)) * math.Log2E
		peak := calib.PeakGFLOPS(tile.PeakLoop(tn), 50*time.Millisecond)
		run := func(name string, f func()) { bestRate(b, name, 4*float64(m*n*d), peak, f) }
		wk.acc.Reset(m, scale, tile.RoundNone, 0)
		qop.DecodeRows(wk.acc.QRows(0, m), 0, m)
		bf16Q := tn == "avx512bf16"
		run("kernel", func() {
			wk.acc.Reset(m, scale, tile.RoundNone, 0)
			if bf16Q {
				qop.setQRows(wk.acc, 0, 0, m)
			}
			wk.acc.Update(wk.blk, wk.valid[:m])
		})
		// The tile streaming: query rows gathered from a large Q (as a
		// block's CSR row selects them) and partial rows written into a
		// large buffer, one goroutine, mean rate over b.N tiles, without
		// and with the Acc prefetch hint prefillItemRun gives (the next
		// tile's Q rows).
		const bigQ = 1 << 14 // queries: 64 MiB of BF16 Q, 64 MiB of partials
		qbig := make([]lowp.BFloat16, bigQ*qpk*d)
		for i := range qbig {
			qbig[i] = q[i%len(q)]
		}
		qbop := Operand{Dtype: BF16, D: d, BF16: qbig, vec: lv}
		var ptBig Partials
		ptBig.Ensure(PartialBF16, d, bigQ*qpk, false)
		ptBig.vec = lv
		// A block's CSR row lists its queries ascending; at topK 16 over
		// 64 blocks about one query in four selects a given block.
		var order []int
		for len(order) < bigQ {
			for gq := 0; gq < bigQ && len(order) < bigQ; gq++ {
				if rng.Intn(4) == 0 {
					order = append(order, gq)
				}
			}
		}
		for _, hint := range []bool{false, true} {
			name := "stream/hints=off"
			if hint {
				name = "stream/hints=on"
			}
			b.Run(name, func(b *testing.B) {
				start := time.Now()
				for it := 0; it < b.N; it++ {
					qs := order[(it*nq)%bigQ:][:nq]
					wk.acc.Reset(m, scale, tile.RoundNone, 0)
					for e, gq := range qs {
						qbop.setQRows(wk.acc, e*qpk, gq*qpk, qpk)
					}
					if hint {
						hs := wk.hints[:0]
						for _, gq := range order[((it+1)*nq)%bigQ:][:nq] {
							ptr, nb := qbop.storage(gq*qpk, qpk)
							hs = append(hs, tile.Hint{Addr: ptr, Bytes: nb})
						}
						wk.acc.Prefetch(hs)
					}
					wk.acc.Update(wk.blk, wk.valid[:m])
					wk.acc.FinishLSE(wk.lse[:m], wk.tlse[:m], wk.inv[:m])
					for e, gq := range qs {
						for g := range qpk {
							wk.dst[e*qpk+g] = int32(gq*qpk + g)
						}
					}
					ptBig.storeRows(wk.dst[:m], wk.acc.ORows(0, m), wk.inv[:m], wk.tmp)
				}
				gf := 4 * float64(m*n*d) * float64(b.N) / time.Since(start).Seconds() / 1e9
				b.ReportMetric(gf, "GFLOP/s")
				if peak > 0 {
					b.ReportMetric(100*gf/peak, "%peak")
				}
			})
		}
		run("tile", func() {
			wk.acc.Reset(m, scale, tile.RoundNone, 0)
			for e := range nq {
				qop.setQRows(wk.acc, e*qpk, e*qpk, qpk)
			}
			wk.acc.Update(wk.blk, wk.valid[:m])
			wk.acc.FinishLSE(wk.lse[:m], wk.tlse[:m], wk.inv[:m])
			for r := range m {
				wk.dst[r] = int32(r)
				pt.LSE[r] = wk.lse[r]
			}
			pt.storeRows(wk.dst[:m], wk.acc.ORows(0, m), wk.inv[:m], wk.tmp)
		})
	})
}

// benchVecLevels is forVecLevels for benchmarks: f runs as sub-benchmark
// tier=<name> under each tier with SIMD epilogue kernels (avx2, avx512),
// skipped where this CPU or build lacks it.
func benchVecLevels(b *testing.B, f func(b *testing.B, tn string, lv vec)) {
	benchTiers(b, []string{"avx2", "avx512"}, f)
}

// benchTiers is benchVecLevels over the given tiers.
func benchTiers(b *testing.B, tiers []string, f func(b *testing.B, tn string, lv vec)) {
	for _, tn := range tiers {
		b.Run("tier="+tn, func(b *testing.B) {
			useTier(b, tn)
			lv := vecLevel()
			if lv == vecGo {
				b.Skip("no SIMD epilogue kernels for this tier on this CPU/build")
			}
			f(b, tn, lv)
		})
	}
}

// bestRate runs f as sub-benchmark name and reports the best repetition's
// rate as GFLOP/s of flops and as %peak of peak (GFLOP/s, 0: unknown), the
// mean rate over all repetitions as %peak-mean, the median repetition's as
// %peak-p50 and the rate that 90% of the repetitions reach as %peak-p90.
// The work stays in cache and is the same each time, so the distance
// between the best and the rest is what the host (steal, other tenants,
// interrupts) took: the share of any end-to-end shortfall that no change to
// the code can recover. BenchmarkSpread (kernels/tile) shows how much of it
// a register-only loop sees at the same moments.
func bestRate(b *testing.B, name string, flops, peak float64, f func()) {
	b.Run(name, func(b *testing.B) {
		ds := make([]time.Duration, b.N)
		start := time.Now()
		for i := range ds {
			t0 := time.Now()
			f()
			ds[i] = time.Since(t0)
		}
		mean := time.Since(start) / time.Duration(b.N)
		slices.Sort(ds)
		rate := func(d time.Duration) float64 { return flops / d.Seconds() / 1e9 }
		b.ReportMetric(rate(ds[0]), "GFLOP/s")
		if peak > 0 {
			b.ReportMetric(100*rate(ds[0])/peak, "%peak")
			b.ReportMetric(100*rate(mean)/peak, "%peak-mean")
			b.ReportMetric(100*rate(ds[len(ds)/2])/peak, "%peak-p50")
			b.ReportMetric(100*rate(ds[len(ds)*9/10])/peak, "%peak-p90")
		}
	})
}

// resetRandomQ starts an accumulation of m rows of head dimension d on ra
// (E4M3-rounded P, the 1/sqrt(d) softmax scale) with standard normal
// query rows.
func resetRandomQ(ra rowAcc, m, d int, rng *rand.Rand) {
	q := make([]float32, d)
	ra.reset(m, float32(1/math.Sqrt(float64(d)))*math.Log2E, tile.RoundE4M3, 0)
	for r := 0; r < m; r++ {
		for c := range q {
			q[c] = float32(rng.NormFloat64())
		}
		ra.setQ(r, q)
	}
}
