package check

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/sparseattn/msa/cuda"
)

// How each kernel accumulates, read from its source: the error model
// (tolerance.go, stat.go) takes the tile lengths of its row sums and of its
// P.V chains from here instead of assuming them. A kernel the fatbin names
// without an entry fails TestAccumCoversFatbin: a new kernel (or variant)
// gets a line below, with the source line that shows its accumulation.

// chain says which keys one float32 P.V accumulator (and one running row
// sum) spans before its result is normalised and written.
type chain int

const (
	// chainBlock: one selected block of blk_kv keys (prefill partials: one
	// work item per block, normalised within the block, merged by the
	// combine).
	chainBlock chain = iota
	// chainRow: every key the row attends in its work item (decode: the
	// split's keys; query-major prefill: the whole walk of selected
	// blocks), rescaled by the running max at every tile.
	chainRow
	// chainNone: no P.V (the combine merges partials; its float32 sums are
	// the model's u_comb).
	chainNone
)

// accum is the accumulation of the kernels whose names match pattern.
type accum struct {
	pattern *regexp.Regexp
	prefill bool  // a prefill kernel (else decode or combine)
	chain   chain // what one P.V accumulator spans
	// sumTile is the most keys whose P one float32 partial row sum adds
	// before it joins the running sum (l = l * alpha + tile sum); 0 for
	// chainNone.
	sumTile int
	// pvFP8: P.V on the FP8 tensor cores (E4M3 P and V, truncating
	// accumulator: uFP8MMA) for E4M3 Q/K/V; else P (rounded per pv_round:
	// float32, BF16 or E4M3) times BF16 V with a float32 accumulator.
	pvFP8 bool
	// pvFP8Span: each span's P.V from zero on the FP8 tensor cores, added
	// to a float32 O (o = o * alpha + P.V): the span's truncations add to
	// the float32 chain's error (uFP8Span) instead of replacing it.
	pvFP8Span bool
	// partials is where the kernel rounds partial results: "block" (each
	// block's normalised O in the partial dtype), "split" (float32 split
	// partials), "none" (O written once, rounded to BF16 only).
	partials string
	// pRound is what P is before P.V: "pv_round" (float32, BF16 or E4M3 as
	// the launch's pv_round says: the portable kernels), "bf16" (packed to
	// BF16 for the tensor cores, E4M3-rounded first for fp8: exact in
	// BF16), "e4m3" for FP8 P.V, "none" without P.V. The model allows BF16 P everywhere (the
	// contract), E4M3 for FP8 P.V; the field records the kernel.
	pRound string
	src    []string
}

// accums is the table, one entry per kernel name pattern. src lists the
// source lines that show the accumulation ("file: text", file under
// kernels/cuda; TestAccumSources requires each text in its file), the
// BF16 P.V of the fp8 variants included: a variant that moves P.V to the
// FP8 tensor cores (E4M3 P and V on wgmma / tcgen05 kind::f8f6f4) changes
// those lines and needs pvFP8, or a new name and entry of its own.
var accums = []accum{
	// The portable mainloop: 4 keys per lane and a 32-lane tree make a
	// block's sum (kBlockN = 128 keys), which joins the running sum;
	// sparse_fwd.cu folds one item's block and stores it normalised in the
	// partial dtype.
	{pattern: re(`^msa_sparse_fwd_d(64|128|256)$`), prefill: true, chain: chainBlock, sumTile: 128, partials: "block", pRound: "pv_round", src: []string{
		"shared/msa_common.cuh: constexpr int kBlockN = 128;",
		"portable/msa_core.cuh: sum += p;",
		"portable/msa_core.cuh: st.l[r] = st.l[r] * alpha + sum;",
		"portable/sparse_fwd.cu: block_update<D, Backend>(sm, st, src, t0, nkeys, scale, p.inv_temperature, p.pv_round);"}},
	// Every 128-key step of the split folds into one RowState.
	{pattern: re(`^msa_decode_d(64|128|256)$`), chain: chainRow, sumTile: 128, partials: "split", pRound: "pv_round", src: []string{
		"portable/decode.cu: block_update<D, Backend>(sm, st, src, t0, min(kBlockN, kv_end - t0), scale, 0.f, p.pv_round);",
		"portable/msa_core.cuh: for (int e = 0; e < D / 32; ++e) st.acc[r][e] *= alpha;"}},
	// Float32 sums of the partials' weights (the model's u_comb), in the
	// warp-level merge statistics every merge kernel shares.
	{pattern: re(`^msa_combine_d(64|128|256)$`), chain: chainNone, partials: "none", pRound: "none", src: []string{
		lseMergeSum,
		"portable/combine.cu: warp_lse_stats([&](int s) { return lse[rows.row(s)]; }, n, threadIdx.x & 31, m, S);"}},
	// The tensor-core softmax (shared/tc_frag.cuh): a quad_sum of a block
	// of up to 128 keys (float s[64]) joins the running sum; P packed to
	// BF16 (E4M3-rounded first for fp8: exact in BF16). sm80_fwd.cu runs
	// attend() on one block per item (kAccumulate = false).
	{pattern: re(`^msa_sm80_fwd_(bf16|fp8|bf16fp8|nvfp4)_d(64|128|256)$`), prefill: true, chain: chainBlock, sumTile: 128, partials: "block", pRound: "bf16", src: []string{
		"shared/tc_frag.cuh: st.l[i] = st.l[i] * alpha[i] + sum;",
		"shared/tc_frag.cuh: pa[2 * j + i] = pack_bf16x2(s[4 * j + 2 * i], s[4 * j + 2 * i + 1]);",
		"sm80/sm80_common.cuh: float s[64];",
		"sm80/sm80_common.cuh: kAccumulate = false: a single block"}},
	// attend() over the union of the tile's selected blocks, O rescaled and
	// accumulated across blocks, written once.
	{pattern: re(`^msa_sm80_qfwd_(bf16|fp8|bf16fp8|nvfp4)_d(64|128|256)$`), prefill: true, chain: chainRow, sumTile: 128, partials: "none", pRound: "bf16", src: []string{
		"sm80/sm80_common.cuh: for (int e = 0; e < 4; ++e) o[4 * j + e] *= alpha[e >> 1];",
		"sm80/sm80_qfwd.cu: The mainloop is attend() of sm80_common.cuh"}},
	// attend() in 128-key steps over the item's KV chunk, float partials
	// when split.
	{pattern: re(`^msa_sm80_decode_(bf16|fp8|bf16fp8)_d(64|128|256)$`), chain: chainRow, sumTile: 128, partials: "split", pRound: "bf16", src: []string{
		"sm80/sm80_decode.cu: [kv_begin, kv_end) in 128-key steps (dense)",
		"sm80/sm80_common.cuh: softmax_block(s, bl, scale_log2, invT, pv_round, st, pa, alpha);"}},
	// The item's block of up to 128 keys, stored normalised in the partial
	// dtype.
	{pattern: re(`^msa_sm90_fwd_(bf16|fp8|bf16fp8|nvfp4)_d(64|128|256)$`), prefill: true, chain: chainBlock, sumTile: 128, partials: "block", pRound: "bf16", src: []string{
		"sm90/sm90_fwd.cu: softmax_block(s, lim, scale, invT, p.pv_round, st, pa, alpha);",
		"sm90/sm90_fwd.cu: float s[64];",
		"sm90/sm90_fwd.cu: and the E4M3-rounded P are exact in bf16, so P.V runs on the bf16 wgmma"}},
	// kv2: the same work items as sm90_fwd (one block of up to 128 keys,
	// stored normalised in the partial dtype), merged in the kernel with the
	// combine's mode-0 arithmetic.
	{pattern: re(`^msa_sm90_fwd2_(bf16|fp8)_d(64|128)$`), prefill: true, chain: chainBlock, sumTile: 128, partials: "block", pRound: "bf16", src: []string{
		"sm90/sm90_fwd2.cu: softmax_block(s, lim, scale, invT, p.pv_round, sm, pa, alpha);",
		"sm90/sm90_fwd2.cu: float s[64];",
		"sm90/sm90_fwd2.cu: // FP8: widen the landed E4M3 V into the bf16 V operand (rows past",
		"sm90/sm90_fwd2.cu: // out / lse / tlse, by one warp: combine.cu's mode-0 arithmetic with the"}},
	// One O accumulator over the whole walk (rescaled per 128-key block),
	// written once.
	{pattern: re(`^msa_sm90_qfwd_(bf16|fp8|bf16fp8|nvfp4)_d(64|128|256)$`), prefill: true, chain: chainRow, sumTile: 128, partials: "none", pRound: "bf16", src: []string{
		"sm90/sm90_qfwd.cu: softmax_fold(s, bl, scale, invT, pv_round, st, alpha);",
		"sm90/sm90_qfwd.cu: rescale(o, alpha);",
		"sm90/sm90_qfwd.cu: float s[64];",
		"sm90/sm90_qfwd.cu: so P.V runs on the bf16 wgmma);"}},
	// fp8pv: the same walk with P rounded to E4M3 in the register A operand
	// and P.V on the e4m3 wgmma, O accumulated over the whole walk in the
	// FP8 tensor cores' accumulator (Prefill.PV8Walk takes its truncations).
	{pattern: re(`^msa_sm90_qfwd_fp8pv_d(64|128|256)$`), prefill: true, chain: chainRow, sumTile: 128, pvFP8: true, partials: "none", pRound: "e4m3", src: []string{
		"sm90/sm90_qfwd.cu: softmax_fold(s, bl, scale, invT, pv_round, st, alpha);",
		"sm90/sm90_qfwd.cu: rescale(o, alpha);",
		"sm90/sm90_qfwd.cu: whole walk in the wgmma's accumulator",
		"sm90/sm90_fp8_vt.cuh: asm(\"cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\" : \"=h\"(r) : \"f\"(hi), \"f\"(lo));"}},
	// 128-key spans of the item's chunk, O rescaled across spans.
	{pattern: re(`^msa_sm90_decode_(bf16|fp8|bf16fp8)_d(64|128|256)$`), chain: chainRow, sumTile: 128, partials: "split", pRound: "bf16", src: []string{
		"sm90/sm90_decode.cu: softmax_block(s, bl, scale, 0.f, p.pv_round, st, pa, alpha);",
		"sm90/sm90_decode.cu: float s[64];",
		"sm90/sm90_decode.cu: V converted to bf16 in shared memory for P.V)"}},
	// Spans of kPipeKeys = 64 keys, O rescaled across spans; the fused
	// combine sums the partials' weights in float32.
	{pattern: re(`^msa_sm90_decpipe_(bf16|fp8|bf16fp8|nvfp4)_d(64|128|256)$`), chain: chainRow, sumTile: 64, partials: "split", pRound: "bf16", src: []string{
		"sm90/sm90_decode_pipe.cu: constexpr int kPipeKeys = 64;",
		"sm90/sm90_decode_pipe.cu: P.V with V (bf16)",
		"sm90/sm90_decode_pipe.cu: softmax_block(sc, bl, scale, 0.f, p.pv_round, st, pa, alpha);",
		lseMergeSum,
		fusedCombineSum}},
	// fp8pv: the same spans with P rounded to E4M3 into the register A
	// operand and each span's P.V on the e4m3 wgmma from zero, added to the
	// float32 O.
	{pattern: re(`^msa_sm90_decpipe_fp8pv_d(64|128)$`), chain: chainRow, sumTile: 64, pvFP8: true, pvFP8Span: true, partials: "split", pRound: "e4m3", src: []string{
		"sm90/sm90_decode_pipe.cu: constexpr int kPipeKeys = 64;",
		"sm90/sm90_decode_pipe.cu: softmax_fold(sc, bl, scale, 0.f, MSA_ROUND_NONE, st, alpha);",
		"sm90/sm90_decode_pipe.cu: pv8_issue<D, kPipeKeys>(p8, smem_u32(sV), os, false);",
		"sm90/sm90_decode_pipe.cu: o[4 * j + e] = fmaf(o[4 * j + e], alpha[e >> 1], os[4 * j + e]);",
		"sm90/sm90_fp8_vt.cuh: asm(\"cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\" : \"=h\"(r) : \"f\"(hi), \"f\"(lo));",
		lseMergeSum}},
	// Thread = row: a sequential sum over the item's block of up to
	// kBlockKeys = 128 keys; P rounded to BF16 (kind::f16 P.V), or to E4M3
	// for fp8 (kind::f8f6f4: P.V on the FP8 tensor cores); partials
	// normalised in the partial dtype.
	{pattern: re(`^msa_sm100_fwd_(bf16|bf16fp8|nvfp4)_d(64|128|256)$`), prefill: true, chain: chainBlock, sumTile: 128, partials: "block", pRound: "bf16", src: sm100FwdSrc},
	{pattern: re(`^msa_sm100_fwd_fp8_d(64|128|256)$`), prefill: true, chain: chainBlock, sumTile: 128, pvFP8: true, partials: "block", pRound: "e4m3", src: slices.Concat(sm100FwdSrc, []string{
		"sm100/sm100_layout.cuh: kFP8:     E4M3 Q/K/V, kind::f8f6f4 for both products"})},
	// The SM100 query-major kernel: one thread's row over the tile's walk,
	// a block's 128-key sum joining the running sum, O accumulated in
	// tensor memory across the walk (rescaled by alpha in place); fp8 runs
	// P.V on kind::f8f6f4 with E4M3 P, the converted K/V variants on
	// kind::f16 with BF16 P.
	{pattern: re(`^msa_sm100_qfwd_((bf16|nvfp4)_d(64|128|256)|bf16fp8_d(64|128))$`), prefill: true, chain: chainRow, sumTile: 128, partials: "none", pRound: "bf16", src: sm100QFwdSrc},
	{pattern: re(`^msa_sm100_qfwd_fp8_d(64|128|256)$`), prefill: true, chain: chainRow, sumTile: 128, pvFP8: true, partials: "none", pRound: "e4m3", src: slices.Concat(sm100QFwdSrc, []string{
		"sm100/sm100_layout.cuh: kFP8:     E4M3 Q/K/V, kind::f8f6f4 for both products"})},
	// The SM100 decode: a 128-key block's sum (butterfly and 4-warp
	// exchange) joins the running sum; O^T accumulates in tensor memory
	// across the visits; fp8: E4M3 P on kind::f8f6f4 (Decode.PV8Walk takes
	// the truncations of the visits' k-groups).
	{pattern: re(`^msa_sm100_decode_(bf16|bf16fp8|nvfp4)_d(64|128|256)$`), chain: chainRow, sumTile: 128, partials: "split", pRound: "bf16", src: sm100DecSrc},
	{pattern: re(`^msa_sm100_decode_fp8_d(64|128|256)$`), chain: chainRow, sumTile: 128, pvFP8: true, partials: "split", pRound: "e4m3", src: slices.Concat(sm100DecSrc, []string{
		"sm100/sm100_decode.cu: pv_round = E4M3 (P is an E4M3 operand)"})},
}

var (
	// The float32 sum of the partials' weights exp(lse - m), lane-strided
	// then a 32-lane tree, of every merge kernel.
	lseMergeSum = "shared/lse_merge.cuh: for (int s = lane; s < n; s += 32) sum += expf(lse_at(s) - mx);"
	// The decode kernels' fused combine (the sm_90a pipelined decode, and
	// the SM100 decode launched with counters) merges with the same sum.
	fusedCombineSum = "shared/fused_combine.cuh: warp_lse_stats([&](int k) { return __ldcg(lse_p + first + k * pstep); }, cnt, lane, mx, sum);"
	sm100FwdSrc     = []string{
		"sm100/sm100_layout.cuh: constexpr int kBlockKeys = 128;",
		"sm100/sm100_common.cuh: sum += pj;"}
	sm100QFwdSrc = []string{
		"sm100/sm100_layout.cuh: constexpr int kBlockKeys = 128;",
		"sm100/sm100_qfwd.cu: l = l * alpha + sum;",
		"sm100/sm100_qfwd.cu: L::idesc_pv, (i > 0 || k > 0) ? 1u : 0u);"}
	sm100DecSrc = []string{
		"sm100/sm100_layout.cuh: constexpr int kBlockKeys = 128;",
		"sm100/sm100_decode.cu: s_l[tid] = s_l[tid] * s_alpha[tid] + (s_red[tid] + s_red[R + tid]) + (s_red[2 * R + tid] + s_red[3 * R + tid]);",
		"sm100/sm100_decode.cu: bdesc, L::idesc_pv, (visits > 0 || k > 0) ? 1u : 0u);",
		lseMergeSum, fusedCombineSum}
)

func re(s string) *regexp.Regexp { return regexp.MustCompile(s) }

// accumOf is the table entry of kernel name, or an error naming it.
func accumOf(name string) (accum, error) {
	for _, a := range accums {
		if a.pattern.MatchString(name) {
			return a, nil
		}
	}
	return accum{}, fmt.Errorf("check: kernel %q has no entry in the accumulation table (accum.go)", name)
}

// candidates lists the kernels that may run a problem (prefill or decode,
// Q and K/V dtypes, head dim d), whichever the dispatcher picks: the
// portable kernels and every tensor-core kernel the launcher looks up on
// any family (cuda.TCNames, QFwdNames, PipeNames) for the dtypes' variant.
func candidates(prefill bool, q, kv cuda.Dtype, d int) []string {
	var names []string
	for _, a := range []cuda.Arch{cuda.ArchSM80, cuda.ArchSM90, cuda.ArchSM100} {
		names = append(append(append(names, cuda.TCNames(a)...), cuda.QFwdNames(a)...), cuda.PipeNames(a)...)
	}
	var out []string
	if prefill {
		out = append(out, fmt.Sprintf("msa_sparse_fwd_d%d", d))
	} else {
		out = append(out, fmt.Sprintf("msa_decode_d%d", d), fmt.Sprintf("msa_combine_d%d", d))
	}
	seen := map[string]bool{}
	for _, n := range names {
		var v cuda.TCVariant
		var ok bool
		switch {
		case prefill && (strings.Contains(n, "_fwd_") || strings.Contains(n, "_fwd2_") || strings.Contains(n, "_qfwd_")):
			v, ok = cuda.FwdVariant(q, kv)
		case !prefill && (strings.Contains(n, "_decode_") || strings.Contains(n, "_decpipe_")):
			for _, a := range []cuda.Arch{cuda.ArchSM80, cuda.ArchSM90, cuda.ArchSM100} {
				if strings.HasPrefix(n, "msa_"+a.String()+"_") {
					v, ok = cuda.DecodeVariant(a, q, kv)
				}
			}
		}
		// The decode fp8pv kernels run the fp8 variant (MSA_CUDA_FP8PV=fp8).
		fp8pv := !prefill && v == cuda.VarFP8 && strings.HasSuffix(n, fmt.Sprintf("_fp8pv_d%d", d))
		if ok && (strings.HasSuffix(n, fmt.Sprintf("_%s_d%d", v, d)) || fp8pv) && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// accumModel is what the error model takes from the table for one
// problem: the worst accumulation over the kernels that may run it.
type accumModel struct {
	sumTile int  // longest float32 partial row sum (keys)
	minTile int  // shortest visit (keys folded with one running max)
	rowPV   bool // some kernel keeps one P.V accumulator over the row's keys
	blk     int  // keys per block (a chainBlock accumulator's most)
	pvFP8   bool // some kernel runs P.V on the FP8 tensor cores
	// some kernel runs each span's P.V on the FP8 tensor cores and adds it
	// to a float32 O (the truncations add to the float32 chain's error)
	pvFP8Span bool
}

// modelOf combines the entries of the candidates of a problem. A candidate
// without an entry (a kernel the launcher gained without one) is an error.
func modelOf(prefill bool, q, kv cuda.Dtype, d, blk int) (accumModel, error) {
	m := accumModel{blk: blk}
	for _, name := range candidates(prefill, q, kv, d) {
		a, err := accumOf(name)
		if err != nil {
			return m, err
		}
		m.sumTile = max(m.sumTile, a.sumTile)
		if a.sumTile > 0 && (m.minTile == 0 || a.sumTile < m.minTile) {
			m.minTile = a.sumTile
		}
		m.rowPV = m.rowPV || a.chain == chainRow
		m.pvFP8 = m.pvFP8 || a.pvFP8
		m.pvFP8Span = m.pvFP8Span || a.pvFP8Span
	}
	return m, nil
}

// pvTerms bounds the float32 roundings on the way of one product into the
// P.V result of a row of n keys folded in visits visits (visits): the keys
// of its longest chain (a block, or all n) and one rescale by the running
// max per visit.
func (m accumModel) pvTerms(n, visits int) int {
	c := n
	if !m.rowPV {
		c = min(n, m.blk)
	}
	return c + visits
}

// sumTerms bounds the float32 roundings of a row sum of n keys folded in
// visits visits: a visit's own (at most min(n, sumTile) - 1 additions),
// and per visit the addition of its sum to the running sum and the
// running sum's rescale.
func (m accumModel) sumTerms(n, visits int) int {
	return min(n, m.sumTile) + 2*visits
}

// visits bounds the number of visits (tiles folded with one running max)
// in which any kernel that may run the problem folds tokens toks (slot[j]:
// their partial, a block in prefill, a page in decode): the distinct
// (slot, tile of the shortest tile length) pairs. A kernel's tiles start at
// its block or at its split's first key, and a split never divides a
// page, so within a slot its tiles are no more than these.
func (m accumModel) visits(toks, slot []int) int {
	f := m.minTile
	if m.blk > 0 {
		f = min(f, m.blk)
	}
	type key struct{ s, t int }
	seen := map[key]bool{}
	for j, t := range toks {
		seen[key{slot[j], t / f}] = true
	}
	return len(seen)
}

// tileOf numbers the row-sum tile of key token t (tiles of sumTile keys,
// never across a block of blk keys, which every kernel visits alone).
func (m accumModel) tileOf(t int) int {
	if m.blk > 0 && m.sumTile > m.blk {
		return t / m.blk
	}
	return t / m.sumTile
}

// tilesOf numbers the row-sum tiles of sequence-local key tokens toks (in
// order of first appearance).
func (m accumModel) tilesOf(toks []int) []int { return numberBy(toks, m.tileOf) }

// oneVisit reports whether every kernel that may run the problem folds
// the tokens toks (sequence-local) in one visit, with one running max: all
// in one tile of minTile keys (and one block, which every kernel visits
// alone).
func (m accumModel) oneVisit(toks []int) bool {
	t := m.minTile
	if m.blk > 0 {
		t = min(t, m.blk)
	}
	for _, x := range toks {
		if x/t != toks[0]/t {
			return false
		}
	}
	return true
}
