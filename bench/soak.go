package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/sparseattn/msa/kernels/tile"
	"github.com/sparseattn/msa/op"
)

// Soak mode (-soak DURATION): a serving-like loop over the public op API
// (soak_loop.go) runs for a given time while the Go heap, RSS and
// goroutine count are sampled (soak_measure.go); the heap and the
// goroutine count must stay flat (soak_check.go) and the sampled decode
// outputs right (soak_verify.go). bench/README.md, "Soak", describes the
// loop and the checks.

// soakFlags are the flags of the soak mode.
type soakFlags struct {
	dur   time.Duration
	every time.Duration
	seed  uint64
}

var soakOpts soakFlags

// registerSoakFlags adds the soak flags to the command line (parseFlags).
func registerSoakFlags() {
	flag.DurationVar(&soakOpts.dur, "soak", 0, "run the serving-like soak loop for this long (e.g. 60s) instead of the suite; print steps, tokens, step time, heap, RSS and goroutines over time and exit 1 when the heap or the goroutine count grows (bench/README.md, Soak); takes -tiny, -out, -workers, -tier, -spin, -soak-every and -soak-seed")
	flag.DurationVar(&soakOpts.every, "soak-every", 0, "soak sampling interval (default: the duration / 30, at least 50ms)")
	flag.Uint64Var(&soakOpts.seed, "soak-seed", 1, "soak seed: the same seed gives the same sequence of requests and data")
}

// soakMode reports whether any soak flag was given (main then runs the
// soak mode, which rejects -soak-every or -soak-seed without -soak).
func soakMode() bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || strings.HasPrefix(f.Name, "soak") })
	return set
}

// checkSoakFlags rejects flags the soak mode does not use and durations
// that are not positive.
func checkSoakFlags() error {
	var other []string
	soakSet := false
	flag.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "soak":
			soakSet = true
		case "soak-every", "soak-seed", "tiny", "out", "workers", "tier", "spin":
		default:
			other = append(other, "-"+f.Name)
		}
	})
	switch {
	case !soakSet:
		return fmt.Errorf("-soak-every and -soak-seed need -soak DURATION")
	case len(other) > 0:
		return fmt.Errorf("-soak takes only -tiny, -out, -workers, -tier, -spin, -soak-every and -soak-seed, not %s", strings.Join(other, ", "))
	case soakOpts.dur <= 0:
		return fmt.Errorf("-soak: want a positive duration, got %v", soakOpts.dur)
	case soakOpts.every < 0:
		return fmt.Errorf("-soak-every: want a positive duration (or 0: the duration / 30), got %v", soakOpts.every)
	}
	return nil
}

// runSoak runs the soak mode and returns the exit code: 0 when the heap
// and the goroutine count stayed flat and the sampled decode outputs were
// right, 1 when either grew, an output was wrong or an op failed, 2 for
// bad flags.
func runSoak(cfg *config) int {
	if err := checkSoakFlags(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	runtime.GOMAXPROCS(cfg.workers)
	op.SetWorkerSpin(cfg.spin)
	if cfg.tier != "" {
		if err := tile.SetTier(cfg.tier); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 2
		}
	}
	sh := soakDefault
	if cfg.tiny {
		sh = soakTiny
	}
	every := soakOpts.every
	if every == 0 {
		every = max(soakOpts.dur/30, 50*time.Millisecond)
	}
	if soakOpts.dur < 3*minPerThird*every {
		fmt.Fprintf(os.Stderr, "bench: -soak %v with samples every %v: want at least %d samples (%d per third), so -soak >= %v\n",
			soakOpts.dur, every, 3*minPerThird, minPerThird, 3*minPerThird*every)
		return 2
	}
	fmt.Printf("soak: %v, sampled every %v, seed %d, GOMAXPROCS %d, workers %d, kernel tier %s\n",
		soakOpts.dur, every, soakOpts.seed, runtime.GOMAXPROCS(0), cfg.workers, tile.Tier())
	fmt.Printf("model: %d layers, Hq %d, Hkv %d, D %d, BF16, page %d (= prefill blk_kv), topK %d; %d request slots, prompts %d-%d, generated %d-%d tokens\n",
		sh.layers, sh.hq, sh.hkv, sh.d, sh.page, sh.topK, sh.maxBatch, sh.promptMin, sh.promptMax, sh.genMin, sh.genMax)
	rep, err := soak(sh, cfg.workers, soakOpts.dur, every, soakOpts.seed)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: soak:", err)
		return 1
	}
	rep.print(os.Stdout)
	if cfg.out != "" {
		path := filepath.Join(cfg.out, "soak.csv")
		if err := os.MkdirAll(cfg.out, 0o755); err == nil {
			err = writeCSVRows(path, rep.rows(true))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: soak: writing", path+":", err)
			return 1
		}
		fmt.Println("wrote", path)
	}
	if fails := rep.failures(); len(fails) > 0 {
		for _, f := range fails {
			fmt.Fprintln(os.Stderr, "bench: soak FAILED:", f)
		}
		return 1
	}
	fmt.Println("soak: passed (heap and goroutines flat, decode outputs within tolerance)")
	return 0
}

// soak primes the loop, then runs steps for dur, sampling every interval
// between steps, and returns the report with the growth checks done.
func soak(sh soakShape, workers int, dur, every time.Duration, seed uint64) (*soakReport, error) {
	l, err := newSoakLoop(sh, workers, seed)
	if err != nil {
		return nil, err
	}
	defer l.close()
	if err := l.prime(); err != nil {
		return nil, err
	}
	m := newSoakMeter(int(dur/every) + 2)
	ck := &checker{tol: soakTolerance(sh)}
	start := time.Now()
	m.sample(0, l)
	next := every
	for {
		t0 := time.Now()
		if err := l.step(); err != nil {
			return nil, fmt.Errorf("step %d: %w", m.steps, err)
		}
		m.stepDone(time.Since(t0))
		el := time.Since(start)
		if el >= next || el >= dur {
			l.verifyDecode(ck) // before the sample's GC, which collects its garbage
			m.sample(el, l)
			next = el + every
		}
		if el >= dur {
			break
		}
	}
	return m.report(l, ck)
}
