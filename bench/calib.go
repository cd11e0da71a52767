package main

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sparseattn/msa/internal/calib"
	"github.com/sparseattn/msa/internal/calib/updatemeter"
	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/tile"
)

// peakTier is the calibration loop that matches a kernel tier: the FP32
// FMA loop of the same vector width, or VDPBF16PS for the bf16 tier (whose
// flops count like two FP32 FMAs per bf16 pair, see calib.PeakGFLOPS).
func peakTier(t string) string {
	switch {
	case bf16Tier(t):
		return t
	case strings.HasPrefix(t, "avx512"):
		return "avx512"
	}
	return t
}

// decodePeakTier is the calibration loop for decode cases: decode runs FP32
// lane kernels on every tier but amxbf16, the avx512bf16 one included, so
// its peak is the FP32 FMA loop of the same width; on amxbf16 both of
// decode's products run on AMX tiles (tile.Lanes' AMX path, for head
// dimensions that are a multiple of 32, the bench's 128 among them), so its
// peak is the tier's own TDPBF16PS loop and its roof the read bandwidth.
func decodePeakTier(t string) string {
	if t == "amxbf16" {
		return t
	}
	if pt := peakTier(t); !bf16Tier(pt) {
		return pt
	}
	return "avx512"
}

// bf16Tier reports the bf16-product tiers with a calibration loop of their
// own (VDPBF16PS, TDPBF16PS); the emulated bf16 tier calibrates with the
// AVX-512 FP32 loop.
func bf16Tier(t string) bool { return t == "avx512bf16" || t == "amxbf16" }

// calibration holds the machine's peaks, measured in the same run.
type calibration struct {
	peakTier   string
	peak1      float64 // GFLOP/s, one goroutine
	peak       float64 // GFLOP/s, workers goroutines at once (sum)
	decodeTier string  // decode's peak loop (decodePeakTier)
	decPeak1   float64 // decode's peak, one goroutine (= peak1 when decodeTier == peakTier)
	decPeak    float64 // decode's peak, workers goroutines at once
	// mixScale is the bound of a prefill case whose query-major tiles take
	// Q.K on VDPBF16PS while its tier multiplies in float32 (mixed) over
	// peak: half its flops at the VDPBF16PS rate, half at the FP32 one,
	// 2 / (1 + peak/mixBF16), from the start-up windows of both loops (0
	// where no case can be mixed). The paired window after each call
	// runs the FP32 loop and is scaled by it.
	mixScale    float64
	mixBF16     float64 // GFLOP/s of the VDPBF16PS loop, workers goroutines at once (mixScale's)
	bw          float64 // GB/s, the better of bwSum and bwScan
	bwSum       float64 // GB/s, workers goroutines summing a buffer
	bwScan      float64 // GB/s, workers goroutines scanning it with bytes.IndexByte
	bwBytes     int
	calibTimeMS float64
	ncpu        int // logical CPUs, for the noise rules
	workers     int // this run's worker goroutines, for the noise rules
}

// measurePeak runs calib.PeakGFLOPS on one goroutine, then on workers
// goroutines at once (each locked to an OS thread) and sums their rates.
func measurePeak(tierName string, workers int, dur time.Duration) (one, all float64) {
	one = calib.PeakGFLOPS(tile.PeakLoop(tierName), dur)
	if workers == 1 {
		return one, one
	}
	all = calib.SumOnThreads(workers, func(int) float64 { return calib.PeakGFLOPS(tile.PeakLoop(tierName), dur) })
	return one, all
}

// bwSink keeps the sums of refMeter.bandwidth alive.
var bwSink uint64

// caseDtypes returns the kernels' dtypes of a prefill or nvfp4 case's Q,
// K and V.
func caseDtypes(c caseSpec) (q, k, v attn.Dtype) {
	q = attn.BF16
	if c.DType == "fp8" {
		q = attn.E4M3
	}
	if c.Kind == "nvfp4" {
		return q, attn.NVFP4, attn.NVFP4
	}
	return q, q, q
}

// prefillTier is the tile tier that runs the suite's prefill and nvfp4
// cases: their Q, K and V (BF16, FP8, NVFP4) are exact in bf16, so they run
// on the bf16 twin of the active tier (attn.PrefillTier; the active tier
// itself where it has none). Decode cases run on the active tier.
func prefillTier() string { return attn.PrefillTier(attn.BF16, attn.BF16, attn.BF16) }

// tierLine is the header line that names the kernel tiers of the run: the
// active tier, the bf16 twin the prefill and nvfp4 cases run on where it
// is another tier, and the tiers the CPU supports.
func tierLine(active string) string {
	sup := strings.Join(tile.Tiers(), ", ")
	if pt := prefillTier(); pt != active {
		return fmt.Sprintf("kernel tier: %s; prefill and nvfp4 cases on its bf16 twin %s (their inputs are bf16 values; supported: %s)", active, pt, sup)
	}
	return fmt.Sprintf("kernel tier: %s for every case (supported: %s)", active, sup)
}

// caseTier is the tile tier that runs case c: the active tier for decode,
// attn.PrefillTier of its dtypes for the others.
func caseTier(c caseSpec) string {
	if c.Kind == "decode" {
		return tile.Tier()
	}
	return attn.PrefillTier(caseDtypes(c))
}

// caseBF16 reports whether case c rounds P to bf16 before P.V: decode on a
// bf16 tier made active (tile.BF16Products), the others where
// attn.BF16Products says so for their dtypes.
func caseBF16(c caseSpec) bool {
	if c.Kind == "decode" {
		return tile.BF16Products()
	}
	return attn.BF16Products(caseDtypes(c))
}

func calibrate(cfg *config) (calibration, error) {
	t0 := time.Now()
	c := calibration{peakTier: peakTier(prefillTier()), bwBytes: cfg.bwBytes, ncpu: runtime.NumCPU(), workers: cfg.workers}
	c.peak1, c.peak = measurePeak(c.peakTier, cfg.workers, cfg.peakTime)
	c.decodeTier, c.decPeak1, c.decPeak = c.peakTier, c.peak1, c.peak
	if t := decodePeakTier(tile.Tier()); t != c.peakTier {
		c.decodeTier = t
		c.decPeak1, c.decPeak = measurePeak(t, cfg.workers, cfg.peakTime)
	}
	if !bf16Tier(c.peakTier) && attn.BF16Scores(attn.BF16, attn.BF16, 128) && slices.Contains(tile.Tiers(), "avx512bf16") {
		_, c.mixBF16 = measurePeak("avx512bf16", cfg.workers, cfg.peakTime)
		if c.mixBF16 > 0 && c.peak > 0 {
			c.mixScale = 2 / (1 + c.peak/c.mixBF16)
		}
	}
	var err error
	if c.bwSum, c.bwScan, err = calib.ReadBandwidth(cfg.bwBytes, cfg.workers, 5); err != nil {
		return c, err
	}
	c.bw = max(c.bwSum, c.bwScan)
	c.calibTimeMS = ms(time.Since(t0))
	return c, nil
}

// peakFor returns the name of the bound and the calibrated peak (all
// workers) that case cs is compared with: its calibration loop's, or for
// a mixed case (mixed) the FP32 loop's scaled by mixScale (loopFor).
func (c calibration) peakFor(cs caseSpec) (string, float64) {
	loop, scale := c.loopFor(cs)
	peak := c.peak
	if cs.Kind == "decode" {
		peak = c.decPeak
	}
	if scale != 1 {
		return loop + "+vdpbf16ps-qk", peak * scale
	}
	return loop, peak
}

// loopFor returns the calibration loop of case cs's paired windows and the
// factor their rate is scaled by (mixScale for a mixed case, else 1).
func (c calibration) loopFor(cs caseSpec) (string, float64) {
	switch {
	case cs.Kind == "decode":
		return c.decodeTier, 1
	case c.mixed(cs):
		return c.peakTier, c.mixScale
	}
	return c.peakTier, 1
}

// mixed reports whether prefill case cs is bounded by the mixed rate
// (mixScale): a BF16 prefill whose query-major tiles take Q.K on VDPBF16PS
// while its tier keeps float32 products (attn.BF16Scores). Its KV-major
// tiles, if auto chooses any, run below that bound, never above it.
func (c calibration) mixed(cs caseSpec) bool {
	if c.mixScale == 0 {
		return false
	}
	q, k, v := caseDtypes(cs)
	return !attn.BF16Products(q, k, v) && attn.BF16Scores(q, k, cs.D)
}

// refMeter measures the machine's reference rates over a given interval,
// right after each timed repetition of a case, so that a case and its
// reference share the conditions of the moment (on a shared VM the core can
// be taken away for a third of the time, see docs/performance.md). Both
// rates are sustained ones: everything done / elapsed wall time, with
// workers goroutines at once, like the op being timed.
type refMeter struct {
	cal     calibration // its peakFor names each case's calibration loop
	workers int
	buf     []byte                            // read by bandwidth windows, workers contiguous shares
	off     []int                             // where each worker's next bandwidth chunk starts
	upd     map[meterKey][]*updatemeter.Meter // in-cache update meters, one per worker
}

func newRefMeter(cal calibration, workers, size int) *refMeter {
	buf := make([]byte, size)
	for i := range buf { // touch every page; no byte is 0xff
		buf[i] = byte(i % 251)
	}
	return &refMeter{cal: cal, workers: workers, buf: buf, off: make([]int, workers)}
}

// refWindow bounds a reference window: long enough to average over the
// scheduler's time slices, short enough not to double a long case's time.
func refWindow(rep time.Duration) time.Duration {
	return min(max(rep, 20*time.Millisecond), 250*time.Millisecond)
}

// peak returns the summed sustained GFLOP/s of workers goroutines (each on
// its own OS thread) running calibration loop for about dur, times scale
// (a case's loop and factor: calibration.loopFor).
func (m *refMeter) peak(dur time.Duration, loop string, scale float64) float64 {
	return scale * calib.SumOnThreads(m.workers, func(int) float64 { return calib.SustainedGFLOPS(tile.PeakLoop(loop), dur) })
}

// meterKey selects an in-cache update meter (updatemeter.New).
type meterKey struct {
	rows, d int
	decode  bool
}

// kernel returns the summed sustained GFLOP/s of workers goroutines (each
// on its own OS thread) running the active tier's in-cache tile update for
// key (updatemeter.Meter) for about dur: the rate the op's kernels would
// reach if memory cost nothing, under the host's conditions of the moment.
// 0 if no meter can be made for key.
func (m *refMeter) kernel(dur time.Duration, key meterKey) float64 {
	us, ok := m.upd[key]
	if !ok {
		for range m.workers {
			u, err := updatemeter.New(key.rows, key.d, key.decode)
			if err != nil {
				us = nil
				break
			}
			us = append(us, u)
		}
		if m.upd == nil {
			m.upd = map[meterKey][]*updatemeter.Meter{}
		}
		m.upd[key] = us
	}
	if len(us) == 0 {
		return 0
	}
	return calib.SumOnThreads(len(us), func(w int) float64 { return us[w].Sustained(dur) })
}

// bandwidth returns the GB/s of workers goroutines scanning their shares of
// the buffer (bytes.IndexByte, 1 MiB at a time, wrapping around) for about
// dur: bytes read by all / elapsed wall time.
func (m *refMeter) bandwidth(dur time.Duration) float64 {
	const chunk = 1 << 20
	share := len(m.buf) / m.workers / chunk * chunk
	read := make([]int, m.workers)
	sums := make([]uint64, m.workers)
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := range read {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(t0) < dur {
				lo := w*share + m.off[w]
				sums[w] += uint64(bytes.IndexByte(m.buf[lo:lo+chunk], 0xff) + 1)
				read[w] += chunk
				m.off[w] = (m.off[w] + chunk) % share
			}
		}()
	}
	wg.Wait()
	el := time.Since(t0).Seconds()
	all := 0
	for w, r := range read {
		all += r
		bwSink += sums[w]
	}
	return float64(all) / el / 1e9
}

// bf16PeakNote says, for a run of a bf16-product tier (tier avx512bf16 or
// amxbf16), how far its instruction can carry it on this CPU: bf and fp
// are the one-goroutine peaks of the tier's calibration loop (VDPBF16PS or
// TDPBF16PS) and of the FP32 multiply-adds, both counting 2 flops per
// product. Where VDPBF16PS runs at half the FP32 rate (Intel cores with two
// 512-bit FMA units) the avx512bf16 tier does the same products in about
// twice the time.
func bf16PeakNote(tier string, bf, fp float64) string {
	instr := map[string]string{"amxbf16": "TDPBF16PS"}[tier]
	if instr == "" {
		instr = "VDPBF16PS"
	}
	r := bf / fp
	switch {
	case r < 0.95:
		return fmt.Sprintf("bf16 products: %s peaks at %.2fx the FP32 multiply-add rate on this CPU, so tier %s is slower here than tier avx512 for the same work", instr, r, tier)
	case r > 1.05:
		return fmt.Sprintf("bf16 products: %s peaks at %.2fx the FP32 multiply-add rate on this CPU, the most tier %s can gain over tier avx512", instr, r, tier)
	}
	return fmt.Sprintf("bf16 products: %s peaks at %.2fx the FP32 multiply-add rate on this CPU: tier %s gains nothing here over tier avx512", instr, r, tier)
}
