// Package golden reads golden sparse-prefill and paged-decode attention
// cases: inputs stored as raw storage bit patterns and the exact float64
// outputs computed by an independent framework (PyTorch, float64) straight
// from the definitions in docs/contract.md.
//
// The cases live in testdata/ beside this file, one bzip2-compressed JSON
// file per case (*.case.json.bz2; plain *.case.json and gzip *.case.json.gz
// are read too). They are produced by gen_golden.py, which documents the
// inputs, the reference computation and the pinned tool versions;
// testdata/manifest.json records the versions and a checksum per case, and
// README.md describes the format field by field.
//
// The expected outputs are exact float64 attention over the decoded inputs:
// no float32 accumulation, no BF16 rounding of O and no E4M3 rounding of P on
// the FP8 P.V path are emulated, so a comparison needs a tolerance. O is
// stored with 9 significant digits (relative error at most 5e-10).
package golden

import (
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// Kinds of case.
const (
	KindPrefill      = "prefill"       // sparse prefill, BF16 / FP8 Q, K, V
	KindPrefillNVFP4 = "prefill_nvfp4" // sparse prefill with NVFP4 K/V
	KindDecode       = "decode"        // paged decode (sparse when Q2KIndices is set)
)

// Storage dtypes.
const (
	DtypeBF16  = "bf16"  // values are uint16 bfloat16 bit patterns
	DtypeE4M3  = "e4m3"  // values are uint8 float8 e4m3fn bit patterns
	DtypeNVFP4 = "nvfp4" // packed e2m1 nibbles (element 2i low) + 128x4 E4M3 scales
)

// Case is one golden case. Field names mirror the JSON keys (given in the
// tags). Nullable JSON integers and floats decode as 0 when null; nullable
// arrays decode as nil. All tensors are flat, row-major.
type Case struct {
	FormatVersion int    `json:"format_version"` // version of this file format
	Name          string `json:"name"`           // unique case name
	Description   string `json:"description"`    // what the case exercises
	Kind          string `json:"kind"`           // KindPrefill, KindPrefillNVFP4 or KindDecode
	Seed          int64  `json:"seed"`           // generator seed of the inputs

	Batch      int `json:"batch"`        // B
	TotalQ     int `json:"total_q"`      // rows of Q (decode: B*SeqlenQ)
	TotalK     int `json:"total_k"`      // rows of dense K/V; 0 in paged mode
	NumPages   int `json:"num_pages"`    // pages of paged K/V; 0 in dense mode
	Hq         int `json:"hq"`           // query heads
	Hkv        int `json:"hkv"`          // KV heads
	HeadDim    int `json:"head_dim"`     // D
	QheadPerKV int `json:"qhead_per_kv"` // Hq / Hkv

	QDtype string `json:"q_dtype"` // DtypeBF16 or DtypeE4M3
	KDtype string `json:"k_dtype"` // DtypeBF16, DtypeE4M3 or DtypeNVFP4
	VDtype string `json:"v_dtype"` // same as KDtype

	Causal bool `json:"causal"` // bottom-right aligned: batch-local query i sees keys t <= i + seqlen_k - seqlen_q
	// SoftmaxScale is always the value used; SoftmaxScaleIsDefault says it
	// is 1/sqrt(D), i.e. the op should be called without an explicit scale.
	SoftmaxScale          float64 `json:"softmax_scale"`
	SoftmaxScaleIsDefault bool    `json:"softmax_scale_is_default"` // SoftmaxScale is 1/sqrt(D)
	// Temperature T of the temperature LSE (logsumexp(s/T), s already
	// scaled); 0 when the case has none.
	Temperature float64 `json:"temperature"`

	TopK     int `json:"topk"`      // q2k list length; 0 when Q2KIndices is nil (dense decode)
	BlkKV    int `json:"blk_kv"`    // tokens per q2k block (128)
	PageSize int `json:"page_size"` // 0 in dense mode
	SeqlenQ  int `json:"seqlen_q"`  // decode only: queries per sequence; 0 for prefill

	// KVValues names the distribution of the K/V values: "full" (every
	// mantissa bit occurs), "coarse" (low entropy, see gen_golden.py) or
	// "nvfp4_coarse".
	KVValues string `json:"kv_values"`

	CuSeqlensQ []int32 `json:"cu_seqlens_q"` // [B+1]
	// CuSeqlensK is [B+1]; in paged mode (prefill and decode) it holds the
	// prefix sums of SequsedK, the effective lengths.
	CuSeqlensK []int32   `json:"cu_seqlens_k"`
	SequsedK   []int32   `json:"seqused_k"`  // [B] in paged mode, else nil
	PageTable  [][]int32 `json:"page_table"` // [B][max_pages] in paged mode, else nil
	// Q2KIndices is [Hkv][TotalQ][TopK]: distinct batch-local block ids
	// (block j = tokens [j*BlkKV, (j+1)*BlkKV)), -1 padding only at the end
	// of a list. nil for a dense (non-sparse) decode case.
	Q2KIndices [][][]int32 `json:"q2k_indices"`
	// FullyMaskedRows lists (kv head, query row) pairs whose selected blocks
	// are all fully masked (expected O = 0, LSE = -inf for the whole group).
	FullyMaskedRows [][2]int `json:"fully_masked_rows"`

	QShape  []int `json:"q_shape"`  // [TotalQ, Hq, D]
	KVShape []int `json:"kv_shape"` // dense [TotalK, Hkv, Dk], paged [NumPages, Hkv, PageSize, Dk]; Dk = D, or D/2 for NVFP4

	// Q, K, V hold storage bit patterns: bfloat16 bits, e4m3 bytes, or
	// packed NVFP4 bytes (one byte per value, see Bytes).
	Q []uint16 `json:"q"`
	K []uint16 `json:"k"` // K in KVShape
	V []uint16 `json:"v"` // V in KVShape

	// NVFP4 only: E4M3 block-scale bytes, one per 16 elements along D, in
	// the cuBLAS 128x4 tiled layout of a [rows, D/16] matrix padded to
	// ScaleShape (padding bytes are 0). Row r is t*Hkv+h (dense) or
	// (page*Hkv+h)*PageSize+i (paged).
	KScale     []uint8 `json:"k_scale"`
	VScale     []uint8 `json:"v_scale"`     // V's block scales, laid out as KScale
	ScaleShape []int   `json:"scale_shape"` // [round_up(rows,128), round_up(D/16,4)]
	// NVFP4 fp32 global scales (exact float32 values); 0 when absent. K's
	// multiplies K before the scores, V's multiplies the output.
	KGlobalScale float64 `json:"k_global_scale"`
	VGlobalScale float64 `json:"v_global_scale"` // V's global scale: multiplies the output

	// O is the expected output [TotalQ, Hq, D], exact float64 (before BF16
	// rounding), 0 for rows without an unmasked key.
	O []float64 `json:"o"`
	// LSE is the expected natural-log LSE [TotalQ, Hq]; -Inf (JSON null)
	// for rows without an unmasked key.
	LSE Floats `json:"lse"`
	// LSETemperature is logsumexp(s/T) [TotalQ, Hq], nil when Temperature
	// is 0.
	LSETemperature Floats `json:"lse_temperature"`
}

// Floats is a []float64 whose JSON form also accepts null and the strings
// "-inf", "inf" and "nan"; null means -Inf.
type Floats []float64

// UnmarshalJSON implements json.Unmarshaler.
func (f *Floats) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		*f = nil
		return nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make([]float64, len(raw))
	for i, r := range raw {
		switch strings.ToLower(strings.Trim(string(bytes.TrimSpace(r)), `"`)) {
		case "null", "-inf", "-infinity":
			out[i] = math.Inf(-1)
		case "inf", "+inf", "infinity":
			out[i] = math.Inf(1)
		case "nan":
			out[i] = math.NaN()
		default:
			if err := json.Unmarshal(r, &out[i]); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
	}
	*f = out
	return nil
}

// Bytes converts bit patterns stored one per uint16 (e4m3 or packed NVFP4
// data) to bytes; it fails when a value does not fit in a byte.
func Bytes(x []uint16) ([]byte, error) {
	out := make([]byte, len(x))
	for i, v := range x {
		if v > 0xff {
			return nil, fmt.Errorf("golden: element %d = %d does not fit in a byte", i, v)
		}
		out[i] = byte(v)
	}
	return out, nil
}

// Paged reports whether K/V are paged ([NumPages, Hkv, PageSize, Dk]).
func (c *Case) Paged() bool { return c.PageTable != nil }

// SeqlenK returns the key length of sequence b used for masking.
func (c *Case) SeqlenK(b int) int {
	if c.SequsedK != nil {
		return int(c.SequsedK[b])
	}
	return int(c.CuSeqlensK[b+1] - c.CuSeqlensK[b])
}

// SeqlenQBatch returns the number of query rows of sequence b.
func (c *Case) SeqlenQBatch(b int) int { return int(c.CuSeqlensQ[b+1] - c.CuSeqlensQ[b]) }

// Dir returns the directory holding the committed golden cases, found from
// this source file's location so that it works from any test's directory.
func Dir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "testdata"
	}
	return filepath.Join(filepath.Dir(file), "testdata")
}

// Load reads every *.case.json, *.case.json.gz and *.case.json.bz2 file of
// dir, in name order, and checks each with Check.
func Load(dir string) ([]Case, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		n := e.Name()
		if !e.IsDir() && (strings.HasSuffix(n, ".case.json") || strings.HasSuffix(n, ".case.json.gz") || strings.HasSuffix(n, ".case.json.bz2")) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	cases := make([]Case, 0, len(names))
	for _, n := range names {
		c, err := loadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, fmt.Errorf("golden: %s: %w", n, err)
		}
		if err := c.Check(); err != nil {
			return nil, fmt.Errorf("golden: %s: %w", n, err)
		}
		cases = append(cases, c)
	}
	return cases, nil
}

func loadFile(path string) (Case, error) {
	var c Case
	f, err := os.Open(path)
	if err != nil {
		return c, err
	}
	defer f.Close()
	var r io.Reader = f
	switch {
	case strings.HasSuffix(path, ".gz"):
		gz, err := gzip.NewReader(f)
		if err != nil {
			return c, err
		}
		defer gz.Close()
		r = gz
	case strings.HasSuffix(path, ".bz2"):
		r = bzip2.NewReader(f)
	}
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, err
	}
	return c, nil
}
