package attn

import (
	"fmt"
	"os"
	"sync/atomic"
)

// PrefillPath selects how RunPrefill executes a call.
type PrefillPath uint8

const (
	// PathDefault takes the process setting: MSA_PREFILL_PATH, or PathAuto
	// when it is unset.
	PathDefault PrefillPath = iota
	// PathAuto chooses per query tile with the cost model of cost.go: a
	// call may run both paths, each over its own tiles' rows.
	PathAuto
	// PathKV is the KV-major path: work items (KV block x query chunk)
	// write per-slot partials, a combine merges them.
	PathKV
	// PathQuery is the query-major path: query tiles walk the union of
	// their selected blocks and write O and LSE once (runQueryMajor).
	PathQuery
)

// EnvPrefillPath is the environment variable that sets the process's
// prefill path: MSA_PREFILL_PATH=auto|query|kv (read once, at start-up).
const EnvPrefillPath = "MSA_PREFILL_PATH"

// processPath is the path of calls whose Prefill.Path is PathDefault.
var processPath = pathFromEnv(os.Getenv(EnvPrefillPath))

// pathFromEnv parses the environment setting; a bad value is reported on
// stderr and ignored.
func pathFromEnv(v string) PrefillPath {
	if v == "" {
		return PathAuto
	}
	p, err := ParsePrefillPath(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "attn: %s=%s ignored: %v; using auto\n", EnvPrefillPath, v, err)
		return PathAuto
	}
	return p
}

// ParsePrefillPath returns the path named auto, query or kv.
func ParsePrefillPath(s string) (PrefillPath, error) {
	switch s {
	case "auto":
		return PathAuto, nil
	case "query":
		return PathQuery, nil
	case "kv":
		return PathKV, nil
	}
	return PathDefault, fmt.Errorf("prefill path %q: want auto, query or kv", s)
}

// String returns the path's name (default, auto, kv or query).
func (p PrefillPath) String() string {
	switch p {
	case PathDefault:
		return "default"
	case PathAuto:
		return "auto"
	case PathKV:
		return "kv"
	case PathQuery:
		return "query"
	}
	return fmt.Sprintf("PrefillPath(%d)", uint8(p))
}

// ProcessPrefillPath returns the path of calls that leave Prefill.Path at
// PathDefault (MSA_PREFILL_PATH, else PathAuto).
func ProcessPrefillPath() PrefillPath { return processPath }

// prefillRuns counts RunPrefill calls by the path they ran (PathKV,
// PathQuery).
var prefillRuns [4]atomic.Uint64

// PrefillRuns returns how many RunPrefill calls of this process ran path
// p (PathKV or PathQuery; 0 for the others): a benchmark reads it around
// its calls to report which path auto chose.
func PrefillRuns(p PrefillPath) uint64 {
	if int(p) < len(prefillRuns) {
		return prefillRuns[p].Load()
	}
	return 0
}

// path returns the path p runs: its own, else the process's; auto stays
// auto (chosen per tile, qmchoice.go) where the model weighs the paths and
// becomes kv elsewhere (weighs).
func (p *Prefill) path() PrefillPath {
	path := p.Path
	if path == PathDefault {
		path = processPath
	}
	if path == PathAuto && !weighs(p) {
		path = PathKV
	}
	return path
}

// SetProcessPrefillPath sets the path of calls that leave Prefill.Path at
// PathDefault, in place of MSA_PREFILL_PATH (PathDefault restores auto).
// It is meant for start-up, tests and benchmarks: it must not run
// concurrently with RunPrefill.
func SetProcessPrefillPath(p PrefillPath) {
	if p == PathDefault {
		p = PathAuto
	}
	processPath = p
}
