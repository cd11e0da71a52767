package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// torchScript times the PyTorch baselines (README.md, "Baselines"): dense
// attention in FP32 and BF16 (scaled_dot_product_attention when the
// installed torch has it, else matmul + softmax, in FP32 through the faster
// of torch.matmul and oneDNN), and the same sparse (prefill) or paged
// (decode) work in FP32 and BF16: gather, batched matmul, masked softmax.
// It reads the request as JSON on stdin and prints one JSON object: the
// torch it imported (version, its directory, the interpreter, threads,
// SDPA, oneDNN, MKL, the BLAS library FP32 matmul loaded) and one
// measurement per case (ms, best, worst, reps, method; slots for the
// sparse prefill), or an error per case.
const torchScript = `
import json, os, re, sys, time
try:
    import torch
    import torch.nn.functional as F
except Exception as e:
    print(json.dumps({"error": "import torch failed: %s" % e})); sys.exit(0)
req = json.load(sys.stdin)
torch.set_num_threads(req["threads"])
NEG = float("-inf")
has_sdpa = hasattr(F, "scaled_dot_product_attention")
has_onednn = torch.backends.mkldnn.is_available() and hasattr(torch._C._nn, "mkldnn_linear")
def blas():
    # A torch built against a BLAS (pip wheels: BLAS_INFO=mkl, linked in)
    # names it in its build settings; a generic build (Debian's) calls the
    # libblas.so.3 it has mapped after a matmul. numpy's own OpenBLAS
    # (numpy.libs) is mapped too but never serves torch.matmul.
    m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    if m and m.group(1) != "generic":
        return "linked into torch: BLAS_INFO=" + m.group(1)
    try:
        torch.matmul(torch.ones(64, 64), torch.ones(64, 64))
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()[-1]
                if "blas" in os.path.basename(p).lower() and "numpy" not in p:
                    return os.path.realpath(p)
    except Exception:
        pass
    return ""
res = {"version": torch.__version__, "path": os.path.dirname(os.path.realpath(torch.__file__)),
       "python": sys.executable, "threads": torch.get_num_threads(), "sdpa": has_sdpa,
       "onednn": has_onednn, "mkl": torch.backends.mkl.is_available(), "blas": blas(), "results": {}}
def bench(f, warm=True):
    if warm:
        f()
    ts = []
    t0 = time.perf_counter()
    while len(ts) < req["min_reps"] or (time.perf_counter() - t0 < req["min_time"] and len(ts) < 100):
        a = time.perf_counter(); f(); ts.append(time.perf_counter() - a)
    ts.sort()
    return {"ms": ts[len(ts) // 2] * 1e3, "best": ts[0] * 1e3, "worst": ts[-1] * 1e3, "reps": len(ts)}
def pick(cands):
    # One call of each candidate (its warm-up); the fastest one is timed.
    best = None
    for name, f in cands:
        a = time.perf_counter(); f(); t = time.perf_counter() - a
        if best is None or t < best[0]:
            best = (t, name, f)
    r = bench(best[2], warm=False)
    r["method"] = best[1]
    if len(cands) > 1:
        r["method"] += " (fastest of " + ", ".join(n for n, _ in cands) + ")"
    return r
def dense_prefill(c, dt):
    T, D = c["T"], c["D"]; scale = D ** -0.5
    q = torch.randn(T, D).to(dt); k = torch.randn(T, D).to(dt); v = torch.randn(T, D).to(dt)
    if has_sdpa:
        q4, k4, v4 = q.view(1, 1, T, D), k.view(1, 1, T, D), v.view(1, 1, T, D)
        return pick([("scaled_dot_product_attention(is_causal)", lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=True))])
    mask = torch.ones(T, T, dtype=torch.bool).triu_(1)
    def mm():
        s = torch.matmul(q * scale, k.t())
        s.masked_fill_(mask, NEG)
        return torch.matmul(torch.softmax(s, dim=-1), v)
    cands = [("matmul+softmax", mm)]
    if has_onednn and dt == torch.float32:
        km, vtm = k.to_mkldnn(), v.t().contiguous().to_mkldnn()
        def dnn():
            s = torch._C._nn.mkldnn_linear((q * scale).to_mkldnn(), km, None).to_dense()
            s.masked_fill_(mask, NEG)
            return torch._C._nn.mkldnn_linear(torch.softmax(s, dim=-1).to_mkldnn(), vtm, None).to_dense()
        cands.append(("oneDNN linear+softmax", dnn))
    return pick(cands)
def dense_decode(c, dt):
    B, T, HQ, HKV, D = c["B"], c["T"], c["HQ"], c["HKV"], c["D"]; G = HQ // HKV; scale = D ** -0.5
    q = torch.randn(B, HKV, G, D).to(dt)
    k = torch.randn(B, HKV, T, D).to(dt); v = torch.randn(B, HKV, T, D).to(dt)
    if has_sdpa:
        return pick([("scaled_dot_product_attention", lambda: F.scaled_dot_product_attention(q, k, v))])
    def mm():
        s = torch.matmul(q * scale, k.transpose(-1, -2))
        return torch.matmul(torch.softmax(s, dim=-1), v)
    cands = [("matmul+softmax", mm)]
    if has_onednn and dt == torch.float32:
        km = [[k[b, h].to_mkldnn() for h in range(HKV)] for b in range(B)]
        vtm = [[v[b, h].t().contiguous().to_mkldnn() for h in range(HKV)] for b in range(B)]
        def dnn():
            out = []
            for b in range(B):
                for h in range(HKV):
                    s = torch._C._nn.mkldnn_linear((q[b, h] * scale).to_mkldnn(), km[b][h], None).to_dense()
                    out.append(torch._C._nn.mkldnn_linear(torch.softmax(s, dim=-1).to_mkldnn(), vtm[b][h], None).to_dense())
            return out
        cands.append(("oneDNN linear+softmax per request", dnn))
    return pick(cands)
def sparse_prefill(c, dt):
    # The last nq queries of a causal sequence of T tokens, all G query heads
    # of one KV head: each query's selected blocks (the diagonal one and
    # random visible ones, as in the Go case) gathered, one batched matmul
    # per product, masked softmax.
    T, D, G, topk, blk, nq = c["T"], c["D"], c["G"], c["topk"], c["blk"], c["nq"]
    scale = D ** -0.5
    nblk = (T + blk - 1) // blk
    tk = min(topk, nblk)
    k = torch.randn(nblk * blk, D).to(dt); v = torch.randn(nblk * blk, D).to(dt)
    kb, vb = k.view(nblk, blk, D), v.view(nblk, blk, D)
    qpos = torch.arange(T - nq, T)
    q = torch.randn(nq, G, D).to(dt)
    diag = qpos // blk
    r = torch.rand(nq, nblk)
    r.masked_fill_(torch.arange(nblk)[None, :] > diag[:, None], -1.0)
    r[torch.arange(nq), diag] = 2.0
    val, sel = r.topk(tk, dim=1)
    sel = sel.masked_fill(val < 0, -1)
    slots = int((sel >= 0).sum())
    out = torch.empty(nq, G, D, dtype=dt)
    ar = torch.arange(blk)
    chunk = 32
    def f():
        for c0 in range(0, nq, chunk):
            c1 = min(c0 + chunk, nq); n = c1 - c0
            s_ = sel[c0:c1]
            idx = s_.clamp(min=0)
            kg = kb[idx].view(n, tk * blk, D)
            vg = vb[idx].view(n, tk * blk, D)
            pos = idx[:, :, None] * blk + ar
            masked = ((s_[:, :, None] < 0) | (pos > qpos[c0:c1, None, None])).view(n, 1, tk * blk)
            s = torch.bmm(q[c0:c1] * scale, kg.transpose(1, 2))
            s.masked_fill_(masked, NEG)
            out[c0:c1] = torch.bmm(torch.softmax(s, dim=-1), vg)
    rr = pick([("gather+bmm+masked softmax", f)])
    rr["slots"] = slots
    return rr
def paged_decode(c, dt):
    B, T, HQ, HKV, D, ps = c["B"], c["T"], c["HQ"], c["HKV"], c["D"], c["page"]
    G = HQ // HKV; scale = D ** -0.5
    cols = (T + ps - 1) // ps
    kp = torch.randn(B * cols, HKV, ps, D).to(dt); vp = torch.randn(B * cols, HKV, ps, D).to(dt)
    pt = torch.randperm(B * cols).view(B, cols)
    q = torch.randn(B, HKV, G, D).to(dt)
    tail = None
    if cols * ps != T:
        tail = (torch.arange(cols * ps) >= T).view(1, 1, 1, cols * ps)
    def f():
        kg = kp[pt].permute(0, 2, 1, 3, 4).reshape(B, HKV, cols * ps, D)
        vg = vp[pt].permute(0, 2, 1, 3, 4).reshape(B, HKV, cols * ps, D)
        s = torch.matmul(q * scale, kg.transpose(-1, -2))
        if tail is not None:
            s.masked_fill_(tail, NEG)
        return torch.matmul(torch.softmax(s, dim=-1), vg)
    return pick([("page gather+matmul+softmax", f)])
torch.manual_seed(0)
dts = {"fp32": torch.float32, "bf16": torch.bfloat16}
fns = {"dense-prefill": dense_prefill, "dense-decode": dense_decode, "sparse-prefill": sparse_prefill, "paged-decode": paged_decode}
with torch.inference_mode():
    for c in req["cases"]:
        try:
            res["results"][c["id"]] = fns[c["kind"]](c, dts[c["dtype"]])
        except Exception as e:
            res["results"][c["id"]] = {"error": "%s: %s" % (type(e).__name__, e)}
        sys.stderr.write("%d of %d measurements done (%s)\n" % (len(res["results"]), len(req["cases"]), c["id"])); sys.stderr.flush()
print(json.dumps(res))
`

// torchSparseQueries is how many queries (the last ones of the sequence)
// the PyTorch sparse-work baseline times per prefill case.
const torchSparseQueries = 128

type torchCase struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"` // dense-prefill, dense-decode, sparse-prefill, paged-decode
	DType string `json:"dtype"`
	T     int    `json:"T"`
	D     int    `json:"D"`
	B     int    `json:"B,omitempty"`
	HQ    int    `json:"HQ,omitempty"`
	HKV   int    `json:"HKV,omitempty"`
	G     int    `json:"G,omitempty"`
	TopK  int    `json:"topk,omitempty"`
	Blk   int    `json:"blk,omitempty"`
	NQ    int    `json:"nq,omitempty"`
	Page  int    `json:"page,omitempty"`
}

type torchRequest struct {
	Threads int         `json:"threads"`
	MinTime float64     `json:"min_time"`
	MinReps int         `json:"min_reps"`
	Cases   []torchCase `json:"cases"`
}

// torchMeasure is one measurement of the script.
type torchMeasure struct {
	MS     float64 `json:"ms"`
	Best   float64 `json:"best"`
	Worst  float64 `json:"worst"`
	Reps   int     `json:"reps"`
	Method string  `json:"method"`
	Slots  int64   `json:"slots"` // sparse-prefill: selected (query, block) slots timed
	Error  string  `json:"error"`
}

type torchReply struct {
	Error   string                  `json:"error"`
	Version string                  `json:"version"`
	Path    string                  `json:"path"`   // the torch package's directory
	Python  string                  `json:"python"` // the interpreter that ran the script (sys.executable)
	Threads int                     `json:"threads"`
	SDPA    bool                    `json:"sdpa"`
	OneDNN  bool                    `json:"onednn"`
	MKL     bool                    `json:"mkl"`
	BLAS    string                  `json:"blas"`
	Results map[string]torchMeasure `json:"results"`
}

// Fields the script always writes: a reply or measurement lacking one is
// bad output (a script from another version, a cut line), never a zero
// that would read as "no time" or "no MKL".
var (
	torchReplyFields   = []string{"version", "path", "python", "threads", "sdpa", "onednn", "mkl", "blas", "results"}
	torchMeasureFields = []string{"ms", "best", "worst", "reps", "method"}
)

// parseTorchReply decodes the script's output, refusing a reply or a
// measurement (other than a failed one, which carries its error) that
// lacks a field the script writes, a sparse-prefill measurement without
// its slots, and a measurement of a case that was not asked for.
func parseTorchReply(out []byte, cases []torchCase) (torchReply, error) {
	var rep torchReply
	if err := json.Unmarshal(out, &rep); err != nil {
		return rep, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(out, &top); err != nil {
		return rep, err
	}
	if _, ok := top["error"]; ok {
		return rep, nil // the script's own error (no torch): reported as such
	}
	if err := hasFields("the reply", top, torchReplyFields); err != nil {
		return rep, err
	}
	var results map[string]map[string]json.RawMessage
	if err := json.Unmarshal(top["results"], &results); err != nil {
		return rep, fmt.Errorf("results: %v", err)
	}
	kinds := map[string]string{}
	for _, c := range cases {
		kinds[c.ID] = c.Kind
	}
	ids := make([]string, 0, len(results))
	for id := range results {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		m := results[id]
		kind, ok := kinds[id]
		if !ok {
			return rep, fmt.Errorf("measurement %q: not a case that was asked for", id)
		}
		if _, failed := m["error"]; failed {
			continue
		}
		want := torchMeasureFields
		if kind == "sparse-prefill" {
			want = append(slices.Clip(want), "slots")
		}
		if err := hasFields("measurement "+strconv.Quote(id), m, want); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// hasFields reports the first of names that obj lacks or holds as null.
func hasFields(what string, obj map[string]json.RawMessage, names []string) error {
	for _, n := range names {
		if v, ok := obj[n]; !ok || string(v) == "null" {
			return fmt.Errorf("%s lacks field %q (want %s)", what, n, strings.Join(names, ", "))
		}
	}
	return nil
}

// torchPlan is a measurement a result needs and how to scale it to the
// whole case.
type torchPlan struct {
	dst    *torchResult
	id     string
	factor float64 // ms x factor, or with slots > 0: ms / measured slots x slots
	slots  int64
	extrap bool
	what   string // the column's name in the notes
	note   string
}

// selectedSlots counts the (query, block) pairs a causal prefill case of
// T tokens selects per KV head: min(topK, q/blk + 1) for each query q.
func selectedSlots(T, topK, blk int) int64 {
	var n int64
	for b := 0; b*blk < T; b++ {
		n += int64(min(topK, b+1)) * int64(min(blk, T-b*blk))
	}
	return n
}

// planTorch decides what PyTorch measures for one case, in each dtype of
// torchDTypes (FP32 into torch and tsparse, BF16 into tdbf16 and tbf16).
// Prefill dense:
// one head at Tm = min(T, cfg.torchMax), scaled by Hq * (T/Tm)^2. Prefill
// sparse: the last torchSparseQueries queries with all their query heads,
// scaled by the case's selected (query, block) slots over the timed ones.
// Decode: the first min(B, 8) requests, scaled by B/measured.
func planTorch(cfg *config, r *result, req map[string]torchCase) []torchPlan {
	c := r.c
	var ps []torchPlan
	add := func(dst *torchResult, tc torchCase, p torchPlan) {
		req[tc.ID] = tc
		p.dst, p.id = dst, tc.ID
		ps = append(ps, p)
	}
	switch c.Kind {
	case "prefill", "nvfp4":
		tm := min(c.SeqLen, cfg.torchMax)
		note := fmt.Sprintf("1 of %d heads at T=%d, x%d heads", c.HQ, tm, c.HQ)
		if tm != c.SeqLen {
			note += fmt.Sprintf(", extrapolated x(%d/%d)^2", c.SeqLen, tm)
		}
		f := float64(c.HQ) * float64(c.SeqLen) / float64(tm) * float64(c.SeqLen) / float64(tm)
		nq := min(c.SeqLen, torchSparseQueries)
		total := selectedSlots(c.SeqLen, c.TopK, c.Blk) * int64(c.HKV)
		for _, dt := range torchDTypes(cfg) {
			dense, same := r.torchDst(dt)
			tc := torchCase{ID: fmt.Sprintf("dense-prefill/%s/%d/%d", dt, tm, c.D), Kind: "dense-prefill", DType: dt, T: tm, D: c.D}
			add(dense, tc, torchPlan{factor: f, extrap: tm != c.SeqLen, what: "PyTorch dense " + strings.ToUpper(dt), note: note})
			tc = torchCase{ID: fmt.Sprintf("sparse-prefill/%s/%d/%d/%d/%d/%d/%d", dt, c.SeqLen, c.D, c.HQ/c.HKV, c.TopK, c.Blk, nq),
				Kind: "sparse-prefill", DType: dt, T: c.SeqLen, D: c.D, G: c.HQ / c.HKV, TopK: c.TopK, Blk: c.Blk, NQ: nq}
			add(same, tc, torchPlan{slots: total, what: "PyTorch same sparse work " + strings.ToUpper(dt),
				note: fmt.Sprintf("the last %d of %d queries x %d heads of one KV head timed, scaled to the case's %d selected (query, block) pairs", nq, c.SeqLen, c.HQ/c.HKV, total)})
		}
	default:
		nb := min(c.Batch, 8)
		scaled := ""
		if nb != c.Batch {
			scaled = fmt.Sprintf(", %d of %d requests timed, x%d/%d", nb, c.Batch, c.Batch, nb)
		}
		f := float64(c.Batch) / float64(nb)
		for _, dt := range torchDTypes(cfg) {
			dense, same := r.torchDst(dt)
			tc := torchCase{ID: fmt.Sprintf("dense-decode/%s/%d/%d/%d/%d/%d", dt, nb, c.SeqLen, c.HQ, c.HKV, c.D), Kind: "dense-decode", DType: dt,
				T: c.SeqLen, D: c.D, B: nb, HQ: c.HQ, HKV: c.HKV}
			add(dense, tc, torchPlan{factor: f, what: "PyTorch dense " + strings.ToUpper(dt), note: "contiguous K/V" + scaled})
			tc = torchCase{ID: fmt.Sprintf("paged-decode/%s/%d/%d/%d/%d/%d/%d", dt, nb, c.SeqLen, c.HQ, c.HKV, c.D, c.Page), Kind: "paged-decode", DType: dt,
				T: c.SeqLen, D: c.D, B: nb, HQ: c.HQ, HKV: c.HKV, Page: c.Page}
			add(same, tc, torchPlan{factor: f, what: "PyTorch same paged work " + strings.ToUpper(dt), note: fmt.Sprintf("%d-token pages gathered by a shuffled page table", c.Page) + scaled})
		}
	}
	return ps
}

// torchDst returns the result's dense and same-work PyTorch baselines of
// dtype dt (fp32 or bf16).
func (r *result) torchDst(dt string) (dense, same *torchResult) {
	if dt == "bf16" {
		return &r.tdbf16, &r.tbf16
	}
	return &r.torch, &r.tsparse
}

// torchDTypes are the dtypes of the dense and same-work baselines: FP32,
// and BF16 with -torch-bf16.
func torchDTypes(cfg *config) []string {
	if cfg.torchBF16 {
		return []string{"fp32", "bf16"}
	}
	return []string{"fp32"}
}

// refBLASFix says how to give PyTorch an optimised BLAS.
const refBLASFix = "apt-get install libopenblas0 switches Debian's libblas.so.3 to OpenBLAS; a pip torch wheel brings MKL and oneDNN"

// isRefBLAS reports whether the BLAS library PyTorch loaded (its real path,
// symlinks resolved) is the reference implementation: Debian installs it as
// .../blas/libblas.so.3, while OpenBLAS, BLIS and MKL provide the same name
// under their own directories (openblas-pthread/libblas.so.3, ...).
func isRefBLAS(path string) bool {
	low := strings.ToLower(path)
	for _, opt := range []string{"openblas", "blis", "mkl", "atlas"} {
		if strings.Contains(low, opt) {
			return false
		}
	}
	return strings.Contains(low, "/blas/libblas")
}

// blasName names the BLAS library PyTorch's FP32 matmul went to.
func blasName(path string) string {
	low := strings.ToLower(path)
	switch {
	case path == "":
		return "none found (statically linked or not loaded)"
	case strings.Contains(low, "openblas"):
		return "OpenBLAS (" + path + ")"
	case strings.Contains(low, "blis"):
		return "BLIS (" + path + ")"
	case strings.Contains(low, "mkl"):
		return "MKL (" + path + ")"
	case isRefBLAS(path):
		return "the reference BLAS, unoptimised (" + path + "; " + refBLASFix + ")"
	}
	return path
}

// runTorch measures the PyTorch baselines for every result in one Python
// process and returns a status line.
func runTorch(cfg *config, rs []*result, prog *progress) (status string) {
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
	var plans []torchPlan
	for _, r := range rs {
		if r.err == "" {
			plans = append(plans, planTorch(cfg, r, req)...)
		}
	}
	tr := torchRequest{Threads: cfg.workers, MinTime: cfg.denseMinTime.Seconds(), MinReps: minReps}
	for _, c := range req {
		tr.Cases = append(tr.Cases, c)
	}
	sort.Slice(tr.Cases, func(i, j int) bool { return tr.Cases[i].ID < tr.Cases[j].ID })
	in, _ := json.Marshal(tr)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.torchTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, cfg.python, "-c", torchScript)
	cmd.Stdin = bytes.NewReader(in)
	var stdout bytes.Buffer
	stderr := &noteWriter{p: prog, name: "PyTorch"}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	// Keep the library thread pools at the worker count too.
	cmd.Env = append(os.Environ(), fmt.Sprintf("OMP_NUM_THREADS=%d", cfg.workers), fmt.Sprintf("MKL_NUM_THREADS=%d", cfg.workers),
		fmt.Sprintf("OPENBLAS_NUM_THREADS=%d", cfg.workers))
	t0 := time.Now()
	before := readCPUSample()
	err := cmd.Run()
	ls := loadBetween(before, withChild(readCPUSample(), cmd.ProcessState))
	if ctx.Err() != nil {
		return fmt.Sprintf("PyTorch baseline skipped: timed out after %v (-torch-timeout)", cfg.torchTimeout)
	}
	if err != nil {
		return fmt.Sprintf("PyTorch baseline skipped: %s: %v: %s", cfg.python, err, lastLine(stderr.all.String()))
	}
	rep, err := parseTorchReply(stdout.Bytes(), tr.Cases)
	if err != nil {
		return fmt.Sprintf("PyTorch baseline skipped: bad output from %s: %v", cfg.python, err)
	}
	if rep.Error != "" {
		return "PyTorch baseline skipped: " + rep.Error
	}
	ref := isRefBLAS(rep.BLAS)
	applyTorch(plans, rep.Results, ref)
	sdpa := "no scaled_dot_product_attention (matmul + softmax instead)"
	if rep.SDPA {
		sdpa = "scaled_dot_product_attention"
	}
	s := fmt.Sprintf("PyTorch %s baselines (torch %s, python %s): %d threads, %d measurements in %.1f s; %s; oneDNN %v; MKL %v; FP32 matmul BLAS: %s",
		rep.Version, rep.Path, rep.Python, rep.Threads, len(req), time.Since(t0).Seconds(), sdpa, rep.OneDNN, rep.MKL, blasName(rep.BLAS))
	if ref {
		s += "; WARNING: PyTorch's matmuls ran on the reference BLAS, unoptimised: the FP32 speed-ups over PyTorch computed through it (marked !) overstate ours; " + refBLASFix
	}
	if ls.ok {
		s += fmt.Sprintf("; meanwhile others used %.0f%% and steal %.0f%% of the CPUs", 100*ls.others, 100*ls.steal)
		if ls.others > noisyOthers || ls.steal > noisySteal {
			s += " (NOISY)"
		}
	}
	return s
}

// applyTorch fills the results' PyTorch columns from the measurements.
// With refBLAS (PyTorch loaded the reference BLAS), it marks the FP32
// results whose matmuls went to that BLAS: not those computed through
// oneDNN, nor the BF16 ones (torch sends BF16 matmuls to oneDNN).
func applyTorch(plans []torchPlan, got map[string]torchMeasure, refBLAS bool) {
	for _, p := range plans {
		m, ok := got[p.id]
		switch {
		case !ok:
			p.dst.note = p.what + ": no result"
		case m.Error != "":
			p.dst.note = p.what + " failed: " + m.Error
		case m.MS <= 0:
			p.dst.note = p.what + ": no time"
		default:
			scale := p.factor
			if p.slots > 0 {
				if m.Slots <= 0 {
					p.dst.note = p.what + ": no slots timed"
					continue
				}
				scale = float64(p.slots) / float64(m.Slots)
			}
			p.dst.ms = m.MS * scale
			p.dst.extrap = p.extrap
			p.dst.method = m.Method
			p.dst.refBLAS = refBLAS && strings.HasSuffix(p.what, "FP32") && !strings.HasPrefix(m.Method, "oneDNN")
			spread := ""
			if m.Best > 0 {
				spread = fmt.Sprintf(", %d reps, max/min %.2f", m.Reps, m.Worst/m.Best)
			}
			p.dst.note = fmt.Sprintf("%s: %s, %s%s", p.what, m.Method, p.note, spread)
			if p.dst.refBLAS {
				p.dst.note += ", on the reference BLAS (unoptimised)"
			}
		}
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
