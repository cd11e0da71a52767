package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// torchReplyJSON is a reply as the script writes it, one measurement per
// kind of the given cases, as a generic object a test can cut fields from.
func torchReplyJSON(t *testing.T) (map[string]any, []torchCase) {
	t.Helper()
	cases := []torchCase{{ID: "d", Kind: "dense-prefill"}, {ID: "s", Kind: "sparse-prefill"}, {ID: "f", Kind: "paged-decode"}}
	body := `{"version": "2.15.0", "path": "/v/torch", "python": "/v/bin/python", "threads": 2, "sdpa": true,
		"onednn": true, "mkl": true, "blas": "linked into torch: BLAS_INFO=mkl", "results": {
		"d": {"ms": 90.5, "best": 88, "worst": 95, "reps": 4, "method": "scaled_dot_product_attention(is_causal)"},
		"s": {"ms": 10, "best": 9, "worst": 12, "reps": 5, "method": "gather+bmm+masked softmax", "slots": 2048},
		"f": {"error": "RuntimeError: out of memory"}}}`
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	return m, cases
}

func marshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A complete reply parses; a reply or a measurement lacking any field the
// script writes is refused with the field's name, never read as a zero
// (a dense BF16 time of 0 would be "no time", an absent mkl "no MKL").
func TestParseTorchReply(t *testing.T) {
	m, cases := torchReplyJSON(t)
	rep, err := parseTorchReply(marshal(t, m), cases)
	if err != nil {
		t.Fatalf("complete reply: %v", err)
	}
	if rep.Version != "2.15.0" || rep.Path != "/v/torch" || rep.Python != "/v/bin/python" || !rep.MKL ||
		rep.Results["d"].MS != 90.5 || rep.Results["s"].Slots != 2048 || rep.Results["f"].Error == "" {
		t.Fatalf("complete reply parsed as %+v", rep)
	}
	for _, f := range torchReplyFields {
		m, _ := torchReplyJSON(t)
		delete(m, f)
		if _, err := parseTorchReply(marshal(t, m), cases); err == nil || !strings.Contains(err.Error(), `the reply lacks field "`+f+`"`) {
			t.Errorf("reply without %s: error %v", f, err)
		}
	}
	for _, id := range []string{"d", "s"} {
		want := torchMeasureFields
		if id == "s" {
			want = append(want[:len(want):len(want)], "slots")
		}
		for _, f := range want {
			m, _ := torchReplyJSON(t)
			delete(m["results"].(map[string]any)[id].(map[string]any), f)
			if _, err := parseTorchReply(marshal(t, m), cases); err == nil || !strings.Contains(err.Error(), `measurement "`+id+`" lacks field "`+f+`"`) {
				t.Errorf("measurement %s without %s: error %v", id, f, err)
			}
		}
	}
	m, _ = torchReplyJSON(t)
	m["results"].(map[string]any)["d"].(map[string]any)["ms"] = nil
	if _, err := parseTorchReply(marshal(t, m), cases); err == nil || !strings.Contains(err.Error(), `lacks field "ms"`) {
		t.Errorf("null ms: error %v", err)
	}
	if _, err := parseTorchReply(marshal(t, m), cases[1:]); err == nil || !strings.Contains(err.Error(), `measurement "d": not a case that was asked for`) {
		t.Errorf("unasked measurement: error %v", err)
	}
	// The script's own error (no torch) is not bad output: it is reported.
	rep, err = parseTorchReply([]byte(`{"error": "import torch failed: No module named 'torch'"}`), cases)
	if err != nil || !strings.Contains(rep.Error, "import torch failed") {
		t.Errorf("script error: %+v, %v", rep, err)
	}
	if _, err := parseTorchReply([]byte(`{"version": `), cases); err == nil {
		t.Error("cut JSON parsed")
	}
}

// The plan times dense attention and the same work in both dtypes, the
// BF16 ones into tdbf16 and tbf16, with the dtype in each measurement's
// id; without -torch-bf16 only FP32.
func TestPlanTorchBF16(t *testing.T) {
	for _, bf16 := range []bool{true, false} {
		cfg := &config{torchMax: 8192, torchBF16: bf16}
		r := &result{c: caseSpec{Name: "prefill-bf16-8k", Kind: "prefill", SeqLen: 8192, HQ: 16, HKV: 1, D: 128, TopK: 16, Blk: 128}}
		req := map[string]torchCase{}
		ps := planTorch(cfg, r, req)
		got := map[*torchResult]string{}
		for _, p := range ps {
			got[p.dst] = req[p.id].Kind + "/" + req[p.id].DType
		}
		want := map[*torchResult]string{&r.torch: "dense-prefill/fp32", &r.tsparse: "sparse-prefill/fp32"}
		if bf16 {
			want[&r.tdbf16], want[&r.tbf16] = "dense-prefill/bf16", "sparse-prefill/bf16"
		}
		if len(got) != len(want) || len(req) != len(want) {
			t.Fatalf("-torch-bf16=%v: %d plans over %d measurements, want %d", bf16, len(got), len(req), len(want))
		}
		for dst, w := range want {
			if got[dst] != w {
				t.Errorf("-torch-bf16=%v: %q, want %q", bf16, got[dst], w)
			}
		}
	}
	// The dense BF16 baseline is scaled as the FP32 one (x16 heads) and is
	// never marked as run on the reference BLAS: torch sends BF16 to oneDNN.
	r := &result{c: caseSpec{Name: "c"}, timeMS: 100}
	applyTorch([]torchPlan{{dst: &r.tdbf16, id: "b", factor: 16, what: "PyTorch dense BF16", note: "1 of 16 heads"}},
		map[string]torchMeasure{"b": {MS: 25, Best: 24, Worst: 26, Reps: 4, Method: "scaled_dot_product_attention(is_causal)"}}, true)
	r.derive(calibration{ncpu: 2, workers: 2})
	if r.tdbf16.ms != 400 || r.tdbf16.speedup != 4 || r.tdbf16.refBLAS || !strings.HasPrefix(r.tdbf16.note, "PyTorch dense BF16: scaled_dot_product_attention") {
		t.Errorf("dense BF16 baseline: %+v", r.tdbf16)
	}
}

// The PyTorch set-up script is valid bash (CI never runs it: it installs
// about 4 GB), and the environment it makes by default is ignored by git.
func TestTorchVenvScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	if out, err := exec.Command(bash, "-n", "torch-venv.sh").CombinedOutput(); err != nil {
		t.Fatalf("bash -n torch-venv.sh: %v: %s", err, out)
	}
	// The check fails on a syntax error.
	if err := exec.Command(bash, "-n", "-c", "if true; then echo").Run(); err == nil {
		t.Fatal("bash -n accepted an unfinished if")
	}
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	if exec.Command(git, "rev-parse", "--is-inside-work-tree").Run() != nil {
		t.Skip("not in a git work tree")
	}
	if err := exec.Command(git, "check-ignore", "-q", ".torch-venv/bin/python").Run(); err != nil {
		t.Errorf("bench/.torch-venv (torch-venv.sh's default) is not ignored by git: %v", err)
	}
}

// runTorch with -python naming an interpreter: a stand-in that answers
// as the script does fills the dense BF16 column and names the torch in
// the status line; one whose reply lacks a field is skipped with the
// field named, and the columns stay empty; a missing interpreter is
// skipped. No torch is needed.
func TestRunTorchPython(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no shell")
	}
	m, _ := torchReplyJSON(t)
	m["results"] = map[string]any{
		"dense-prefill/fp32/8192/128": map[string]any{"ms": 200, "best": 190, "worst": 210, "reps": 3, "method": "scaled_dot_product_attention(is_causal)"},
		"dense-prefill/bf16/8192/128": map[string]any{"ms": 100, "best": 95, "worst": 110, "reps": 3, "method": "scaled_dot_product_attention(is_causal)"},
	}
	good := marshal(t, m)
	delete(m, "mkl")
	bad := marshal(t, m)
	dir := t.TempDir()
	for _, c := range []struct {
		name  string
		reply []byte
		want  string
		ms    float64
	}{
		{"good", good, "PyTorch 2.15.0 baselines (torch /v/torch, python /v/bin/python): 2 threads, 4 measurements", 1600},
		{"bad", bad, `bad output from ` + dir + `/bad.sh: the reply lacks field "mkl"`, 0},
	} {
		script := dir + "/" + c.name + ".sh"
		// The stand-in reads the request (stdin) and prints the reply,
		// ignoring -c and the script text.
		body := "#!" + sh + "\ncat >/dev/null\ncat <<'EOF'\n" + string(c.reply) + "\nEOF\n"
		if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := &config{torch: "auto", python: script, workers: 2, torchBF16: true, torchMax: 8192, torchTimeout: time.Minute}
		r := &result{c: caseSpec{Name: "prefill-bf16-8k", Kind: "prefill", SeqLen: 8192, HQ: 16, HKV: 1, D: 128, TopK: 16, Blk: 128}, timeMS: 400}
		var buf bytes.Buffer
		status := runTorch(cfg, []*result{r}, newProgressTo(1, false, &buf))
		if !strings.Contains(status, c.want) {
			t.Errorf("%s: status %q, want it to contain %q", c.name, status, c.want)
		}
		if r.tdbf16.ms != c.ms || r.torch.ms != 2*c.ms {
			t.Errorf("%s: dense BF16 %v ms, FP32 %v ms; want %v, %v", c.name, r.tdbf16.ms, r.torch.ms, c.ms, 2*c.ms)
		}
		if c.ms > 0 && (!strings.Contains(status, "MKL true") || !strings.Contains(r.tsparse.note, "no result")) {
			t.Errorf("%s: status %q, same-work note %q", c.name, status, r.tsparse.note)
		}
	}
	if s := runTorch(&config{torch: "auto", python: dir + "/none"}, nil, nil); !strings.Contains(s, "none not found") {
		t.Errorf("missing interpreter: %q", s)
	}
}
