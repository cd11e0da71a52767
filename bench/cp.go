package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/sparseattn/msa/kernels/comm"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op"
	"gorgonia.org/tensor"
)

// The distributed mode (-cp, -cp-ranks) times context-parallel decode
// (op.CPDecodeWrapper) and context-parallel sparse prefill
// (op.ContextParallelPrefillFunc, each strategy) on P ranks against the
// same problem in one process on one rank's workers. Every rank builds the whole
// problem from fixed seeds and keeps its share, as the op tests do.
//
//   - time_ms, time_min_ms: the slowest rank's median and fastest call
//     time (decode: one CPDecodeWrapper.RunInto, a layer of a step;
//     prefill: one ContextParallelPrefillFunc, its planning and exchanges
//     included);
//   - single_ms, single_min_ms: the same for the single-process op on the
//     whole problem with one rank's workers (prefill: K2QCSRFunc and
//     SparseAttentionFunc, as ContextParallelPrefillFunc plans inside its
//     call too), timed on rank 0 while the others wait;
//   - speedup = single_min_ms / time_min_ms (the least disturbed calls: on
//     a shared machine the medians carry the other jobs' load),
//     efficiency = speedup / P;
//   - bytes_recv_max: the most payload bytes one rank received from the
//     others per call (decode: the all-gathered partials; prefill: the
//     replies and requests of CPPrefillStats), bytes_recv_total: the sum
//     over ranks, i.e. every byte that crossed between ranks once;
//   - load_1m: the load average when the row was written (above the CPU
//     count, other processes shared the cores).

var cpOpts struct {
	mpi         bool
	ranks       int
	workers     int
	csv         string
	prefillLen  int
	decodeCtx   int
	decodeBatch int
	reps        int
}

func registerCPFlags() {
	flag.BoolVar(&cpOpts.mpi, "cp", false, "distributed mode on the ranks of an MPI job: mpirun -np P bench -cp, with a binary built with -tags mpi; times context-parallel decode and sparse prefill per rank count (bench/README.md, Distributed mode); takes -tiny, -tier and the -cp-* flags")
	flag.IntVar(&cpOpts.ranks, "cp-ranks", 0, "distributed mode on P in-process ranks (goroutines over comm.NewLocal), for machines without MPI")
	flag.IntVar(&cpOpts.workers, "cp-workers", 1, "attention workers per rank (and of the single-process baseline)")
	flag.StringVar(&cpOpts.csv, "cp-csv", "", "append the distributed mode's rows to this CSV file (header written when it is new); default: print them")
	flag.IntVar(&cpOpts.prefillLen, "cp-prefill-len", 4096, "distributed mode: prefill sequence length (one causal sequence; 1024 with -tiny)")
	flag.IntVar(&cpOpts.decodeCtx, "cp-decode-ctx", 16384, "distributed mode: decode context per sequence, a multiple of -page (2048 with -tiny)")
	flag.IntVar(&cpOpts.decodeBatch, "cp-decode-batch", 8, "distributed mode: decode batch (2 with -tiny)")
	flag.IntVar(&cpOpts.reps, "cp-reps", 5, "distributed mode: timed calls per case (the median is reported)")
}

// cpMode reports whether a distributed-mode flag was given.
func cpMode() bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "cp" || strings.HasPrefix(f.Name, "cp-") })
	return set
}

// cpShapes are the distributed mode's bench shapes: those of the suite's
// prefill and decode cases (Hq 16, Hkv 1, D 128, BF16, blocks of 128,
// pages of -page tokens).
type cpShapes struct {
	hq, hkv, d, blk, topK int
	prefillLen            int
	ctx, batch, page      int
}

func checkCPFlags(cfg *config) (cpShapes, error) {
	s := cpShapes{hq: 16, hkv: 1, d: 128, blk: 128, topK: cfg.topK, prefillLen: cpOpts.prefillLen,
		ctx: cpOpts.decodeCtx, batch: cpOpts.decodeBatch, page: cfg.page}
	var other []string
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) {
		given[f.Name] = true
		switch {
		case f.Name == "cp" || strings.HasPrefix(f.Name, "cp-"), f.Name == "tiny", f.Name == "tier", f.Name == "page", f.Name == "topk":
		default:
			other = append(other, "-"+f.Name)
		}
	})
	if cfg.tiny {
		if !given["cp-prefill-len"] {
			s.prefillLen = 1024
		}
		if !given["cp-decode-ctx"] {
			s.ctx = 2048
		}
		if !given["cp-decode-batch"] {
			s.batch = 2
		}
	}
	switch {
	case len(other) > 0:
		return s, fmt.Errorf("the distributed mode takes -tiny, -tier, -page, -topk and the -cp-* flags, not %s", strings.Join(other, ", "))
	case cpOpts.mpi == (cpOpts.ranks > 0):
		return s, fmt.Errorf("distributed mode: want either -cp (under mpirun) or -cp-ranks P >= 1 (in-process), got -cp=%v -cp-ranks %d", cpOpts.mpi, cpOpts.ranks)
	case cpOpts.workers < 1:
		return s, fmt.Errorf("-cp-workers: want >= 1, got %d", cpOpts.workers)
	case cpOpts.reps < 1:
		return s, fmt.Errorf("-cp-reps: want >= 1, got %d", cpOpts.reps)
	case s.prefillLen < s.blk:
		return s, fmt.Errorf("-cp-prefill-len: want >= %d (one block), got %d", s.blk, s.prefillLen)
	case s.batch < 1:
		return s, fmt.Errorf("-cp-decode-batch: want >= 1, got %d", s.batch)
	case s.page < 1 || s.ctx < s.page || s.ctx%s.page != 0:
		return s, fmt.Errorf("-cp-decode-ctx: want a positive multiple of the page size %d, got %d", s.page, s.ctx)
	}
	return s, nil
}

// cpRow is one line of the distributed mode's CSV.
type cpRow struct {
	kind, shape, strategy string
	ranks                 int
	time, single          cpTime
	recvMax, recvTotal    int64
}

const cpHeader = "machine,date,command,transport,case,ranks,workers_per_rank,shape,strategy,time_ms,time_min_ms,single_ms,single_min_ms,speedup,efficiency,bytes_recv_max,bytes_recv_total,load_1m"

// runCP runs the distributed mode and returns the exit code.
func runCP(cfg *config) int {
	s, err := checkCPFlags(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	var ranks []comm.Comm
	transport := "in-process"
	if cpOpts.mpi {
		c, err := cpWorld()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -cp:", err)
			return 1
		}
		ranks, transport = []comm.Comm{c}, "mpi"
	} else if ranks, err = comm.NewLocal(cpOpts.ranks, time.Minute); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -cp-ranks:", err)
		return 2
	}
	rows, err := cpAllRanks(ranks, s)
	for _, c := range ranks {
		if cerr := c.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: distributed mode:", err)
		return 1
	}
	if ranks[0].Rank() != 0 {
		return 0
	}
	if err := writeCPRows(cfg, transport, ranks[0].Size(), rows); err != nil {
		fmt.Fprintln(os.Stderr, "bench: distributed mode:", err)
		return 1
	}
	return 0
}

// cpAllRanks runs every case on each of the given ranks (one per
// goroutine) and returns rank 0's rows (nil when rank 0 is elsewhere).
func cpAllRanks(ranks []comm.Comm, s cpShapes) ([]cpRow, error) {
	var rows []cpRow
	errs := comm.Each(ranks, func(c comm.Comm) error {
		r, err := cpRank(c, s)
		if c.Rank() == 0 {
			rows = r
		}
		if err != nil {
			c.Abort(err)
			return fmt.Errorf("rank %d: %w", c.Rank(), err)
		}
		return nil
	})
	// The cause, not a rank that only saw the group aborted by it.
	var first error
	for _, err := range errs {
		if err != nil && !errors.Is(err, comm.ErrAborted) {
			return nil, err
		}
		if first == nil {
			first = err
		}
	}
	return rows, first
}

// cpRank is one rank's share of the mode: decode, then prefill with each
// strategy.
func cpRank(c comm.Comm, s cpShapes) ([]cpRow, error) {
	tables()
	var rows []cpRow
	row, err := cpDecode(c, s)
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	rows = append(rows, row)
	pf, err := newCPPrefillProb(c, s)
	if err != nil {
		return nil, fmt.Errorf("prefill: %w", err)
	}
	single, err := cpSingle(c, pf.single)
	if err != nil {
		return nil, fmt.Errorf("prefill (single process): %w", err)
	}
	for _, st := range []op.CPStrategy{op.CPAuto, op.CPFetchKV, op.CPSendQueries} {
		row, err := pf.run(c, st, single)
		if err != nil {
			return nil, fmt.Errorf("prefill %v: %w", st, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// cpBarrier returns when every rank has reached it.
func cpBarrier(c comm.Comm) error {
	var one [1]byte
	return c.AllGather(one[:], make([]byte, c.Size()))
}

// cpTime is a case's median and fastest call time in milliseconds.
type cpTime struct{ med, min float64 }

// cpSingle times f on rank 0 while the other ranks wait, and gives every
// rank the times.
func cpSingle(c comm.Comm, f func() error) (cpTime, error) {
	var t cpTime
	if c.Rank() == 0 {
		var err error
		if t, err = cpTimes(f); err != nil {
			return t, err
		}
	}
	med, err := cpGather(c, t.med)
	if err != nil {
		return t, err
	}
	mins, err := cpGather(c, t.min)
	if err != nil {
		return t, err
	}
	return cpTime{med[0], mins[0]}, nil
}

// cpTimes runs f once untimed, then -cp-reps times, and returns the median
// and the fastest time.
func cpTimes(f func() error) (cpTime, error) {
	if err := f(); err != nil {
		return cpTime{}, err
	}
	ts := make([]float64, cpOpts.reps)
	for i := range ts {
		t0 := time.Now()
		if err := f(); err != nil {
			return cpTime{}, err
		}
		ts[i] = float64(time.Since(t0).Nanoseconds()) / 1e6
	}
	slices.Sort(ts)
	return cpTime{ts[len(ts)/2], ts[0]}, nil
}

// cpGather all-gathers one float64 per rank.
func cpGather(c comm.Comm, x float64) ([]float64, error) {
	send := binary.LittleEndian.AppendUint64(nil, math.Float64bits(x))
	recv := make([]byte, 8*c.Size())
	if err := c.AllGather(send, recv); err != nil {
		return nil, err
	}
	out := make([]float64, c.Size())
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(recv[8*i:]))
	}
	return out, nil
}

// cpTimed times run on every rank, each rank's calls between barriers, and
// returns the row with the slowest rank's median and the bytes received
// per call (recv, read after the calls).
func cpTimed(c comm.Comm, row cpRow, run func() error, recv func() int64) (cpRow, error) {
	if err := cpBarrier(c); err != nil {
		return row, err
	}
	t, err := cpTimes(run)
	if err != nil {
		return row, err
	}
	meds, err := cpGather(c, t.med)
	if err != nil {
		return row, err
	}
	mins, err := cpGather(c, t.min)
	if err != nil {
		return row, err
	}
	recvs, err := cpGather(c, float64(recv()))
	if err != nil {
		return row, err
	}
	row.ranks, row.time = c.Size(), cpTime{slices.Max(meds), slices.Max(mins)}
	for _, r := range recvs {
		row.recvMax, row.recvTotal = max(row.recvMax, int64(r)), row.recvTotal+int64(r)
	}
	return row, nil
}

// bf16Tensor returns a BF16 tensor of the given shape filled from the
// standard-normal table with seed.
func bf16Tensor(seed uint64, shape ...int) *tensor.Dense {
	n := 1
	for _, x := range shape {
		n *= x
	}
	s := make([]lowp.BFloat16, n)
	fillTable(s, bf16Table, seed, cpOpts.workers)
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(s))
}

func int32Tensor(x []int32, shape ...int) *tensor.Dense {
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(x))
}

// writeCPRows writes the rows as CSV, appending to -cp-csv when given.
func writeCPRows(cfg *config, transport string, p int, rows []cpRow) error {
	mi := readMachine(cfg)
	cmd := "bench " + strings.Join(os.Args[1:], " ")
	if transport == "mpi" {
		cmd = fmt.Sprintf("mpirun -np %d %s", p, cmd)
	}
	var b strings.Builder
	for _, r := range rows {
		speedup := r.single.min / r.time.min
		fmt.Fprintf(&b, "%q,%s,%q,%s,%s,%d,%d,%s,%s,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%d,%d,%s\n", fmt.Sprintf("%s, %d CPUs", mi.cpu, cpuCount()),
			time.Now().UTC().Format("2006-01-02"), cmd, transport, r.kind, r.ranks, cpOpts.workers, r.shape, r.strategy,
			r.time.med, r.time.min, r.single.med, r.single.min, speedup, speedup/float64(r.ranks), r.recvMax, r.recvTotal, loadAvg())
	}
	if cpOpts.csv == "" {
		fmt.Print(cpHeader + "\n" + b.String())
		return nil
	}
	_, statErr := os.Stat(cpOpts.csv)
	if err := os.MkdirAll(filepath.Dir(cpOpts.csv), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(cpOpts.csv, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if os.IsNotExist(statErr) {
		b2 := cpHeader + "\n" + b.String()
		b.Reset()
		b.WriteString(b2)
	}
	fmt.Print(b.String())
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cpuCount is the machine's logical CPUs (/proc/cpuinfo), not the rank's:
// mpirun may bind each rank to one core.
func cpuCount() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if k, _, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "processor" {
			n++
		}
	}
	if err != nil || n == 0 {
		return runtime.NumCPU()
	}
	return n
}
