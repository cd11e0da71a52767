package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// torchScript times dense attention in PyTorch: matmul + softmax (PyTorch
// 1.13, the Debian package, has no scaled_dot_product_attention). It reads
// the request as JSON on stdin and prints one JSON object.
const torchScript = `
import json, sys, time
try:
    import torch
except Exception as e:
    print(json.dumps({"error": "import torch failed: %s" % e})); sys.exit(0)
req = json.load(sys.stdin)
torch.set_num_threads(req["threads"])
dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[req["dtype"]]
res = {"version": torch.__version__, "threads": torch.get_num_threads(), "results": {}}
def bench(f):
    f()
    ts = []
    t0 = time.perf_counter()
    while len(ts) < req["min_reps"] or (time.perf_counter() - t0 < req["min_time"] and len(ts) < 100):
        a = time.perf_counter(); f(); ts.append(time.perf_counter() - a)
    ts.sort()
    return ts[len(ts) // 2] * 1e3
torch.manual_seed(0)
with torch.inference_mode():
    for c in req["cases"]:
        try:
            D = c["D"]; scale = D ** -0.5
            if c["kind"] == "prefill":
                T = c["T"]
                q = torch.randn(T, D).to(dt); k = torch.randn(T, D).to(dt); v = torch.randn(T, D).to(dt)
                mask = torch.ones(T, T, dtype=torch.bool).triu_(1)
                def f():
                    s = torch.matmul(q * scale, k.t())
                    s.masked_fill_(mask, float("-inf"))
                    return torch.matmul(torch.softmax(s, dim=-1), v)
            else:
                B, T, HQ, HKV = c["B"], c["T"], c["HQ"], c["HKV"]
                q = torch.randn(B, HKV, HQ // HKV, D).to(dt)
                k = torch.randn(B, HKV, T, D).to(dt); v = torch.randn(B, HKV, T, D).to(dt)
                def f():
                    s = torch.matmul(q * scale, k.transpose(-1, -2))
                    return torch.matmul(torch.softmax(s, dim=-1), v)
            res["results"][c["id"]] = bench(f)
        except Exception as e:
            res["results"][c["id"]] = "error: %s" % e
print(json.dumps(res))
`

type torchCase struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	T    int    `json:"T"`
	D    int    `json:"D"`
	B    int    `json:"B,omitempty"`
	HQ   int    `json:"HQ,omitempty"`
	HKV  int    `json:"HKV,omitempty"`
}

type torchRequest struct {
	Threads int         `json:"threads"`
	DType   string      `json:"dtype"`
	MinTime float64     `json:"min_time"`
	MinReps int         `json:"min_reps"`
	Cases   []torchCase `json:"cases"`
}

type torchReply struct {
	Error   string         `json:"error"`
	Version string         `json:"version"`
	Threads int            `json:"threads"`
	Results map[string]any `json:"results"`
}

// torchPlan is the measurement a result needs and how to scale it.
type torchPlan struct {
	id     string
	factor float64
	note   string
}

// planTorch decides what PyTorch measures for one case: prefill, one head
// at Tm = min(T, cfg.torchMax) scaled by Hq * (T/Tm)^2; decode, the first
// min(B, 8) requests (dense contiguous K/V, no paging) scaled by B/measured.
func planTorch(cfg *config, r *result, req map[string]torchCase) torchPlan {
	c := r.c
	switch c.Kind {
	case "prefill", "nvfp4":
		tm := min(c.SeqLen, cfg.torchMax)
		id := fmt.Sprintf("prefill/%d/%d", tm, c.D)
		req[id] = torchCase{ID: id, Kind: "prefill", T: tm, D: c.D}
		f := float64(c.HQ) * float64(c.SeqLen) / float64(tm) * float64(c.SeqLen) / float64(tm)
		note := fmt.Sprintf("PyTorch %s matmul+softmax: 1 of %d heads at T=%d, x%d heads", cfg.torchDType, c.HQ, tm, c.HQ)
		if tm != c.SeqLen {
			note += fmt.Sprintf(" x(%d/%d)^2", c.SeqLen, tm)
		}
		return torchPlan{id, f, note}
	default:
		nb := min(c.Batch, 8)
		id := fmt.Sprintf("decode/%d/%d/%d/%d/%d", nb, c.SeqLen, c.HQ, c.HKV, c.D)
		req[id] = torchCase{ID: id, Kind: "decode", T: c.SeqLen, D: c.D, B: nb, HQ: c.HQ, HKV: c.HKV}
		note := fmt.Sprintf("PyTorch %s batched matmul+softmax, contiguous K/V", cfg.torchDType)
		if nb != c.Batch {
			note += fmt.Sprintf(": %d of %d requests, x%d/%d", nb, c.Batch, c.Batch, nb)
		}
		return torchPlan{id, float64(c.Batch) / float64(nb), note}
	}
}

// runTorch measures the PyTorch baseline for every result in one Python
// process. It returns a status line ("" on success) and the version.
func runTorch(cfg *config, rs []*result) (status string) {
	if cfg.torch == "off" {
		if cfg.tiny {
			return "PyTorch baseline skipped: off by default with -tiny (-torch=auto to run it)"
		}
		return "PyTorch baseline skipped: -torch=off"
	}
	if _, err := os.Stat(cfg.python); err != nil {
		return fmt.Sprintf("PyTorch baseline skipped: %s not found", cfg.python)
	}
	req := map[string]torchCase{}
	plans := make([]torchPlan, len(rs))
	for i, r := range rs {
		if r.err == "" {
			plans[i] = planTorch(cfg, r, req)
		}
	}
	tr := torchRequest{Threads: cfg.workers, DType: cfg.torchDType, MinTime: cfg.denseMinTime.Seconds(), MinReps: 2}
	for _, c := range req {
		tr.Cases = append(tr.Cases, c)
	}
	in, _ := json.Marshal(tr)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.torchTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cfg.python, "-c", torchScript)
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Keep the library thread pools at the worker count too.
	cmd.Env = append(os.Environ(), fmt.Sprintf("OMP_NUM_THREADS=%d", cfg.workers), fmt.Sprintf("MKL_NUM_THREADS=%d", cfg.workers))
	t0 := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		return fmt.Sprintf("PyTorch baseline skipped: timed out after %v", cfg.torchTimeout)
	}
	if err != nil {
		return fmt.Sprintf("PyTorch baseline skipped: %s: %v: %s", cfg.python, err, lastLine(stderr.String()))
	}
	var rep torchReply
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return fmt.Sprintf("PyTorch baseline skipped: bad output from %s: %v", cfg.python, err)
	}
	if rep.Error != "" {
		return "PyTorch baseline skipped: " + rep.Error
	}
	for i, r := range rs {
		if plans[i].id == "" {
			continue
		}
		switch v := rep.Results[plans[i].id].(type) {
		case float64:
			r.torchMS = v * plans[i].factor
			r.torchNote = plans[i].note
		case string:
			r.torchNote = "PyTorch failed: " + v
		}
	}
	return fmt.Sprintf("PyTorch %s baseline: %d threads, %d measurements in %.1f s", rep.Version, rep.Threads, len(req), time.Since(t0).Seconds())
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
