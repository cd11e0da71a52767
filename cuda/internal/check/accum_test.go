package check

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/sparseattn/msa/cuda"
)

// kernelsDir is kernels/cuda from this package's directory.
var kernelsDir = filepath.Join("..", "..", "..", "kernels", "cuda")

// fatbinNames reads every kernel name the fatbin package's name tables
// declare: the string constants "msa_..." of its (non-test) Go files, with
// the file that declares each.
func fatbinNames(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kernelsDir, "fatbin", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", filepath.Join(kernelsDir, "fatbin"), err)
	}
	out := map[string]string{}
	fs := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fs, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && strings.HasPrefix(s, "msa_") && !strings.ContainsAny(s, " .") {
					out[s] = filepath.Base(f)
				}
			}
			return true
		})
	}
	return out
}

// coverage checks table against the kernel names: every name matched by
// exactly one entry and every entry matching a name; it returns one line
// per failure.
func coverage(names map[string]string, table []accum) []string {
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	var out []string
	used := make([]bool, len(table))
	for _, n := range sorted {
		hit := -1
		for i, a := range table {
			if a.pattern.MatchString(n) {
				if hit >= 0 {
					out = append(out, fmt.Sprintf("%s matches two entries of accums: %s and %s", n, table[hit].pattern, a.pattern))
				}
				hit = i
				used[i] = true
			}
		}
		if hit < 0 {
			out = append(out, fmt.Sprintf("kernel %s (kernels/cuda/fatbin/%s) has no entry in accums (cuda/internal/check/accum.go): read how it "+
				"accumulates (keys per float32 row-sum tile, what one P.V accumulator spans, FP8 P.V, where it rounds partials) "+
				"and add an entry whose src quotes the source lines that show it", n, names[n]))
		}
	}
	for i, a := range table {
		if !used[i] {
			out = append(out, fmt.Sprintf("accums entry %s matches no kernel of the fatbin", a.pattern))
		}
	}
	return out
}

// TestAccumCoversFatbin: every kernel the fatbin names has an entry in the
// accumulation table (a new kernel or variant without one fails here), and
// every entry covers at least one of them (no entry for a kernel that is
// gone). The check itself fails a table without the decpipe entry, with an
// entry for no kernel, and with two entries for one kernel.
func TestAccumCoversFatbin(t *testing.T) {
	names := fatbinNames(t)
	if len(names) < 100 {
		t.Fatalf("only %d kernel names in the fatbin tables", len(names))
	}
	for _, e := range coverage(names, accums) {
		t.Error(e)
	}
	var noPipe []accum
	for _, a := range accums {
		if !strings.Contains(a.pattern.String(), "decpipe") {
			noPipe = append(noPipe, a)
		}
	}
	if e := coverage(names, noPipe); len(e) != len(cuda.PipeNames(cuda.ArchSM90)) || !strings.Contains(e[0], "msa_sm90_decpipe_") {
		t.Errorf("a table without the decpipe entry: %d failures %q, want its %d kernels", len(e), e, len(cuda.PipeNames(cuda.ArchSM90)))
	}
	gone := append(slices.Clone(accums), accum{pattern: re(`^msa_sm70_fwd_d64$`)})
	if e := coverage(names, gone); len(e) != 1 || !strings.Contains(e[0], "matches no kernel") {
		t.Errorf("an entry for no kernel: %q", e)
	}
	twice := append(slices.Clone(accums), accum{pattern: re(`^msa_combine_d64$`)})
	if e := coverage(names, twice); len(e) != 1 || !strings.Contains(e[0], "two entries") {
		t.Errorf("two entries for one kernel: %q", e)
	}
}

// sourceErrors checks each entry of table: its quoted source lines are in
// their files and its fields are consistent; one line per failure.
func sourceErrors(table []accum) []string {
	var out []string
	cache := map[string]string{}
	for _, a := range table {
		if len(a.src) == 0 {
			out = append(out, fmt.Sprintf("%s: no source line", a.pattern))
		}
		for _, s := range a.src {
			file, text, ok := strings.Cut(s, ": ")
			if !ok {
				out = append(out, fmt.Sprintf("%s: src %q is not \"file: text\"", a.pattern, s))
				continue
			}
			body, seen := cache[file]
			if !seen {
				b, err := os.ReadFile(filepath.Join(kernelsDir, file))
				if err != nil {
					out = append(out, fmt.Sprintf("%s: %v", a.pattern, err))
				}
				body = string(b)
				cache[file] = body
			}
			if !strings.Contains(body, text) {
				out = append(out, fmt.Sprintf("%s: kernels/cuda/%s no longer holds %q: read the kernel again and update its entry", a.pattern, file, text))
			}
		}
		if (a.chain == chainNone) != (a.sumTile == 0) || a.sumTile < 0 || a.sumTile > 128 {
			out = append(out, fmt.Sprintf("%s: chain %d with row-sum tile %d", a.pattern, a.chain, a.sumTile))
		}
		if ok := map[string]bool{"pv_round": true, "bf16": true, "e4m3": true, "none": true}[a.pRound]; !ok || (a.pRound == "e4m3") != a.pvFP8 || (a.pRound == "none") != (a.chain == chainNone) {
			out = append(out, fmt.Sprintf("%s: P before P.V %q with FP8 P.V %v and chain %d", a.pattern, a.pRound, a.pvFP8, a.chain))
		}
		if a.partials != "block" && a.partials != "split" && a.partials != "none" {
			out = append(out, fmt.Sprintf("%s: partials %q", a.pattern, a.partials))
		}
	}
	return out
}

// TestAccumSources: each entry's quoted source lines are in their files
// (an entry whose kernel changed its accumulation is read again), and its
// fields are consistent; an entry quoting a line its file lacks, with a
// row-sum tile and no P.V, or with FP8 P.V and a P that is not E4M3 fails
// the check.
func TestAccumSources(t *testing.T) {
	for _, e := range sourceErrors(accums) {
		t.Error(e)
	}
	bad := accums[0]
	bad.src = []string{"portable/msa_core.cuh: sum += p * 2;"}
	if e := sourceErrors([]accum{bad}); len(e) != 1 || !strings.Contains(e[0], "no longer holds") {
		t.Errorf("a quoted line the file lacks: %q", e)
	}
	bad = accums[0]
	bad.chain = chainNone
	if e := sourceErrors([]accum{bad}); len(e) != 2 || !strings.Contains(e[0], "row-sum tile") || !strings.Contains(e[1], "P before P.V") {
		t.Errorf("no P.V with a row-sum tile and a P: %q", e)
	}
	bad = accums[0]
	bad.pvFP8 = true
	if e := sourceErrors([]accum{bad}); len(e) != 1 || !strings.Contains(e[0], "FP8 P.V true") {
		t.Errorf("FP8 P.V with P per pv_round: %q", e)
	}
}

// TestAccumModel: the model of a problem is the worst of its candidates,
// and the per-row counts follow it: a query-major prefill kernel chains P.V
// over the whole row, a per-block one over one block; a row of n keys has
// at most n products in a chain.
func TestAccumModel(t *testing.T) {
	m, err := modelOf(true, cuda.BF16, cuda.BF16, 128, 64)
	if err != nil {
		t.Fatal(err)
	}
	if !m.rowPV || m.sumTile != 128 || m.pvFP8 {
		t.Errorf("BF16 prefill: %+v, want row P.V chains (qfwd), 128-key tiles, no FP8 P.V", m)
	}
	if got := m.pvTerms(1, 1); got != 2 {
		t.Errorf("pvTerms(1, 1) = %d, want 1 product and 1 rescale", got)
	}
	if got := m.pvTerms(300, 5); got != 300+5 {
		t.Errorf("pvTerms(300, 5) = %d, want 305", got)
	}
	if got := m.sumTerms(300, 5); got != 128+2*5 {
		t.Errorf("sumTerms(300, 5) = %d, want 138", got)
	}
	block := accumModel{sumTile: 128, minTile: 64, blk: 64}
	if got := block.pvTerms(300, 5); got != 64+5 {
		t.Errorf("a per-block chain of a 300-key row: %d terms, want 69", got)
	}
	// Eight keys in eight blocks are eight visits, whatever the tile length.
	if got := block.visits([]int{0, 64, 128, 192, 256, 320, 384, 448}, []int{0, 1, 2, 3, 4, 5, 6, 7}); got != 8 {
		t.Errorf("one key in each of 8 blocks: %d visits", got)
	}
	// 128 contiguous keys in two pages of a 64-key tile: 2 visits; split at
	// a page of 16 the tiles restart, (page, tile) pairs count them.
	if got := (accumModel{sumTile: 128, minTile: 64}).visits([]int{0, 63, 64, 127}, []int{0, 0, 1, 1}); got != 2 {
		t.Errorf("128 keys in two 64-key pages: %d visits", got)
	}
	if got := (accumModel{sumTile: 128, minTile: 64}).visits([]int{0, 16, 32, 48}, []int{0, 1, 2, 3}); got != 4 {
		t.Errorf("one 64-key tile over four pages: %d visits, want one per page", got)
	}
	if m, _ := modelOf(false, cuda.E4M3, cuda.E4M3, 64, 0); !m.pvFP8 || !m.rowPV {
		t.Errorf("FP8 decode: %+v, want FP8 P.V (sm100) and row chains", m)
	}
	if m, _ := modelOf(true, cuda.BF16, cuda.E4M3, 64, 128); m.pvFP8 {
		t.Errorf("BF16 Q with E4M3 K/V: %+v, P.V is never on the FP8 tensor cores", m)
	}
	// Every kernel the launcher may look up, for every dtype pair and head
	// dim, has an entry (a kernel it gains without one fails here).
	for _, q := range []cuda.Dtype{cuda.BF16, cuda.E4M3} {
		for _, kv := range []cuda.Dtype{cuda.BF16, cuda.E4M3, cuda.NVFP4} {
			for _, d := range []int{64, 128, 256} {
				for _, prefill := range []bool{true, false} {
					if _, err := modelOf(prefill, q, kv, d, 64); err != nil {
						t.Error(err)
					}
				}
			}
		}
	}
	if c := candidates(false, cuda.BF16, cuda.BF16, 128); !slices.Contains(c, "msa_sm90_decpipe_bf16_d128") || !slices.Contains(c, "msa_sm100_decode_bf16_d128") ||
		slices.Contains(c, "msa_sm90_decode_bf16fp8_d128") || slices.Contains(c, "msa_sm90_fwd_bf16_d128") {
		t.Errorf("BF16 decode D 128 candidates: %v", c)
	}
	if _, err := accumOf("msa_sm90_newkernel_bf16_d64"); err == nil || !strings.Contains(err.Error(), "msa_sm90_newkernel_bf16_d64") {
		t.Errorf("a kernel without an entry: %v", err)
	}
	if got := (accumModel{sumTile: 128, blk: 64}).tilesOf([]int{0, 63, 64, 200, 70}); !slices.Equal(got, []int{0, 0, 1, 2, 1}) {
		t.Errorf("tiles of 128 keys never across 64-key blocks: %v", got)
	}
	if got := (accumModel{sumTile: 64}).tilesOf([]int{0, 63, 64, 200}); !slices.Equal(got, []int{0, 0, 1, 2}) {
		t.Errorf("64-key tiles: %v", got)
	}
}
