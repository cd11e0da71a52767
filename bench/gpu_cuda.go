//go:build cuda

package main

import (
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/sparseattn/msa/cuda"
	"github.com/sparseattn/msa/cuda/driver"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/kernels/plan"
)

// runGPU is the GPU mode (-device cuda): the suite's prefill, NVFP4 and
// decode cases on GPU 0 through package cuda, the kernels alone timed
// (inputs and plan uploaded first), and the same table, CSV, Markdown and
// plot as the CPU run, against the GPU's datasheet peaks (cuda/gpupeak/gpupeak.go). It
// returns the exit status: 2 without a usable GPU, 1 when a case failed.
func runGPU(cfg *config) int {
	dev, err := cuda.OpenDevice(0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -device cuda:", err)
		return 2
	}
	defer dev.Close()
	k, err := cuda.Load(dev)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -device cuda:", err)
		return 2
	}
	ver, _ := driver.DriverVersion()
	pk, known := gpuPeakFor(dev.Name)
	header := []string{fmt.Sprintf("GPU: %s (sm_%d%d, %d SMs, %.0f GiB), driver CUDA %d.%d, kernel family %s",
		dev.Name, dev.Major, dev.Minor, dev.SMs, float64(dev.Memory)/(1<<30), ver/1000, ver%1000/10, k.Arch())}
	if known {
		header = append(header, fmt.Sprintf("peaks (%s datasheet, dense): BF16 %.0f TFLOP/s, FP8 %.0f TFLOP/s, HBM %.0f GB/s", pk.name, pk.bf16, pk.fp8, pk.hbm))
	} else {
		header = append(header, fmt.Sprintf("peaks: %q is not in the table of known GPUs (cuda/gpupeak/gpupeak.go): no %% of peak or of HBM", dev.Name))
	}
	header = append(header, "times: CUDA events around the kernels alone (inputs and plan uploaded before); correctness is the GPU check's (kernels/cuda/GPU_CHECK.md)")
	for _, h := range header {
		fmt.Println(h)
	}
	benchTitle = "msa GPU benchmark"
	var rs []*result
	failed := false
	for _, c := range buildSuite(cfg) {
		r := &result{c: c}
		rs = append(rs, r)
		if gib := c.kvBytes() / (1 << 30); gib > cfg.maxKVGiB {
			r.err = fmt.Sprintf("skipped: K+V is %.2f GiB, above -max-kv-gib %.2f", gib, cfg.maxKVGiB)
			continue
		}
		if err := gpuCase(cfg, dev, k, c, r); err != nil {
			r.err = err.Error()
			failed = true
			fmt.Printf("%s: ERROR %v\n", c.Name, err)
			continue
		}
		r.sp = spreadOf(r.samples)
		r.gflops = r.flops / (r.timeMS / 1e3) / 1e9
		r.peakTier, r.peak = pk.peakFor(c.Kind, c.DType)
		if r.peak > 0 {
			r.pctBurst = 100 * r.gflops / r.peak
			r.pctPeak = r.pctBurst
		}
		if c.Kind == "decode" {
			r.gbps = r.bytes / (r.timeMS / 1e3) / 1e9
			if r.bw = pk.hbm; r.bw > 0 {
				r.pctBWBest = 100 * r.gbps / r.bw
				r.pctBW = r.pctBWBest
			}
		}
		fmt.Printf("%s: %.3f ms median of %d, %.1f TFLOP/s\n", c.Name, r.timeMS, r.reps, r.gflops/1e3)
	}
	if err := k.Close(dev); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		failed = true
	}
	fmt.Println()
	printTable(os.Stdout, rs)
	if cfg.out != "" {
		cal := calibration{peakTier: pk.name + " BF16", peak: pk.bf16 * 1e3, bw: pk.hbm, workers: dev.SMs}
		mi := &machineInfo{cpu: dev.Name, workers: dev.SMs, tier: fmt.Sprintf("cuda %s", k.Arch())}
		if err := writeOutputs(cfg.out, mi, cal, header, rs); err != nil {
			fmt.Fprintln(os.Stderr, "bench: writing results:", err)
			return 1
		}
		fmt.Printf("wrote %s/results.csv, results.md, plot.png\n", cfg.out)
	}
	if failed {
		fmt.Fprintln(os.Stderr, "bench: FAILED (see the errors above)")
		return 1
	}
	return 0
}

// bytesOf is the storage of a BF16, E4M3 or byte slice (nil for any
// other, which the upload then rejects as empty).
func bytesOf(x any) []byte {
	switch s := x.(type) {
	case []uint8:
		return s
	case []lowp.Float8E4M3FN:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s))
	case []lowp.BFloat16:
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 2*len(s))
	}
	return nil
}

// dtypeOf maps the bench's dtype names to the kernels'.
func dtypeOf(s string) cuda.Dtype {
	if s == "fp8" {
		return cuda.E4M3
	}
	return cuda.BF16
}

// gpuCase builds case c on the host (the CPU run's inputs), uploads it and
// its plan, and times the kernels.
func gpuCase(cfg *config, dev *cuda.Device, k *cuda.Kernels, c caseSpec, r *result) error {
	m := cuda.NewArena(dev)
	defer m.Free()
	var pl *cuda.Prepared
	var out uint64
	var outElems int
	switch c.Kind {
	case "prefill", "nvfp4":
		p, err := buildPrefill(cfg, c)
		if err != nil {
			return err
		}
		T := c.SeqLen
		r.pairs = p.pairs
		r.flops = 4 * float64(c.D) * float64(c.HQ/c.HKV) * float64(p.pairs)
		r.bytes = float64(T*c.HQ*c.D)*elemBytes(c.DType) + c.kvBytes()
		cu := []int32{0, int32(T)}
		t0 := time.Now()
		csr, err := plan.BuildK2QCSR(nil, p.q2k, c.HKV, T, c.TopK, cu, cu, c.Blk)
		if err != nil {
			return err
		}
		rows, err := plan.NewRows(cu, c.Blk)
		if err != nil {
			return err
		}
		sched, err := plan.BuildFwdSchedule(nil, csr, rows, cu, plan.FwdParams{TotalQ: T, Hkv: c.HKV, QheadPerKV: c.HQ / c.HKV,
			TopK: c.TopK, BlkKV: c.Blk, Workers: dev.SMs})
		if err != nil {
			return err
		}
		r.planMS = ms(time.Since(t0))
		qd, kvd, round := dtypeOf(c.DType), dtypeOf(c.DType), cuda.RoundNone
		if c.Kind == "nvfp4" {
			kvd = cuda.NVFP4
		} else if qd == cuda.E4M3 {
			round = cuda.RoundE4M3 // FP8 P.V (docs/contract.md section 4)
		}
		a := &cuda.FwdArgs{Q: m.Put(bytesOf(p.q.Data())), K: m.Put(bytesOf(p.k.Data())), V: m.Put(bytesOf(p.v.Data())),
			CuSeqlensQ: m.PutI32(cu), CuSeqlensK: m.PutI32(cu), TotalQ: T, Hq: c.HQ, Hkv: c.HKV, D: c.D, BlkKV: c.Blk, TopK: c.TopK,
			NumBatch: 1, QDtype: qd, KVDtype: kvd, PartialDtype: cuda.BF16, PVRound: round, Causal: true, KVRows: T}
		window := cuda.WindowQueries(T, c.TopK, c.HQ, c.D, 2)
		ob, lb := cuda.PartialBytes(window, c.TopK, c.HQ, c.D, 2)
		a.OPartial, a.LSEPartial = m.Alloc(int(ob)), m.Alloc(int(lb))
		outElems = T * c.HQ * c.D
		out = m.Alloc(2 * outElems)
		ca := &cuda.CombineArgs{OPartial: a.OPartial, LSEPartial: a.LSEPartial, Out: out, LSE: m.Alloc(4 * T * c.HQ),
			TotalQ: T, Hq: c.HQ, Hkv: c.HKV, D: c.D, TopK: c.TopK, PartialDtype: cuda.BF16}
		if c.Kind == "nvfp4" {
			a.KScale, a.VScale, a.KGlobalScale = m.Put(bytesOf(p.kScale.Data())), m.Put(bytesOf(p.vScale.Data())), m.PutF32(nvK)
			ca.OutputScale = m.PutF32(nvV)
		}
		if m.Err() != nil {
			return m.Err()
		}
		if pl, err = k.PrepareSparsePrefill(dev, a, ca, csr, sched, cu, window); err != nil {
			return err
		}
	case "decode":
		p := buildDecode(cfg, c)
		r.pairs = int64(c.Batch) * int64(c.SeqLen) * int64(c.HKV)
		r.flops = 4 * float64(c.D) * float64(c.HQ/c.HKV) * float64(r.pairs)
		r.bytes = float64(c.Batch*c.HQ*c.D)*elemBytes(c.DType) + c.kvBytes()
		su := p.su.Data().([]int32)
		t0 := time.Now()
		sched, err := plan.BuildDecodeSchedule(nil, su, plan.DecodeParams{Batch: c.Batch, SeqlenQ: 1, HQ: c.HQ, Hkv: c.HKV,
			PageSize: c.Page, Workers: dev.SMs, MaxPagesPerSeq: p.cols, Executor: plan.CUDAExecutor})
		if err != nil {
			return err
		}
		r.planMS = ms(time.Since(t0))
		dt := dtypeOf(c.DType)
		round := cuda.RoundNone
		if dt == cuda.E4M3 {
			round = cuda.RoundE4M3
		}
		outElems = c.Batch * c.HQ * c.D
		out = m.Alloc(2 * outElems)
		a := &cuda.DecodeArgs{Q: m.Put(bytesOf(p.q.Data())), K: m.Put(bytesOf(p.k.Data())), V: m.Put(bytesOf(p.v.Data())),
			SequsedK: m.PutI32(su), PageTable: m.PutI32(p.ptv), Out: out, LSE: m.Alloc(4 * c.Batch * c.HQ),
			Batch: c.Batch, SeqlenQ: 1, Hq: c.HQ, Hkv: c.HKV, D: c.D, PageSize: c.Page, PageTableStride: p.cols,
			QDtype: dt, KVDtype: dt, PVRound: round, NumPages: c.Batch * p.cols}
		if sched.SplitKV {
			a.OPartial = m.Alloc(sched.PartialRows * c.HQ * c.D * 4)
			a.LSEPartial = m.Alloc(sched.PartialRows * c.HQ * 4)
		}
		if m.Err() != nil {
			return m.Err()
		}
		if pl, err = k.PrepareDecode(dev, a, sched); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown case kind %q", c.Kind)
	}
	if err := timeGPU(cfg, dev, pl, r); err != nil {
		return err
	}
	return cuda.CheckFiniteBF16(dev, out, outElems)
}

// timeGPU times pl's launches like the CPU run times a call: at least 3
// timed runs and until -min-time has passed (at most 200), each timed by
// CUDA events after a warm-up run.
func timeGPU(cfg *config, dev *cuda.Device, pl *cuda.Prepared, r *result) error {
	start := time.Now()
	for r.reps < 3 || (time.Since(start) < cfg.minTime && r.reps < 200) {
		t, err := dev.Time(1, func() error { return pl.Launch(dev) })
		if err != nil {
			return err
		}
		r.samples = append(r.samples, t)
		r.reps++
	}
	r.timeMS, r.bestMS = median(r.samples), r.samples[0]
	for _, t := range r.samples {
		r.bestMS = min(r.bestMS, t)
	}
	return nil
}
