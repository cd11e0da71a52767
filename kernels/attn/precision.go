package attn

import (
	"math"

	"github.com/sparseattn/msa/kernels/tile"
)

// The product precision of a prefill call.
//
// A call whose Q, K and V are all values bf16 holds exactly (exactBF16)
// asks its blocks, accumulators and lane groups for bf16 products
// (tile.Block, tile.Acc and tile.Lanes SetBF16Products): they run on the
// bf16 twin of the active tier (tile.BF16InputTier), amxbf16 or avx512bf16
// under the automatic choice where the CPU has them. Q, K and V then
// reach the products unrounded, and the one rounding the call adds to the
// float32 tiers' is P's to bf16 before P.V, which the reference interface
// and the GPU kernels do too. Where the twin is the active tier itself (a
// float32 tier named by MSA_CPU_TIER, or a CPU without AVX512_BF16) the
// call keeps float32 products. Decode is not a prefill call: its lane
// kernels are the active tier's. A decode tile is one token's query heads,
// so the bf16 lane kernels' per-key work (V's pairs, e4m3 widening) is
// shared by 16 rows at most and their faster products do not pay for it:
// on Zen 4 with bf16 products the bench's decode cases took 0.89-1.05x
// the float32 time with BF16 K/V and 1.07-1.18x with FP8 K/V (batch 8 and
// 32, 4K-64K; docs/results/bf16lanes/amd-zen4.csv), and the AMX lane path
// measured slower than avx512 on an AMX Xeon. The precision is the call's
// own, fixed when it starts: calls of both precisions may run at the same
// time.

// exactBF16 reports whether every value of dtype dt is a bf16 value:
// BF16; E4M3 (4 significant bits, exponents within bf16's); NVFP4 without
// its global scale (e2m1 times an e4m3 block scale: at most 6 significant
// bits, magnitudes 2^-10 .. 2688), the global scale going into the score
// scale (K) or the output factor (V) instead (foldsGlobal).
func exactBF16(dt Dtype) bool {
	switch dt {
	case BF16, E4M3, NVFP4:
		return true
	}
	return false
}

// exactBF16Call reports whether p asks for bf16 products: Q, K and V are
// all exact in bf16 (exactBF16), unless noBF16Calls.
func exactBF16Call(p *Prefill) bool {
	return !noBF16Calls && exactBF16(p.Q.Dtype) && exactBF16(p.K.Dtype) && exactBF16(p.V.Dtype)
}

// noBF16Calls, when true (tests only), makes every prefill call ask for
// the active tier's products, as a call whose dtypes are not exact in
// bf16 would.
var noBF16Calls bool

// BF16Products reports whether a prefill call with Q, K and V of dtypes q,
// k and v rounds P (and Q, K, V, which are bf16 values already) to bf16
// before its products on this process's tiers: dtypes that bf16 holds
// exactly on a bf16 twin (tile.BF16InputProducts), or any dtypes on a bf16
// tier made active by MSA_CPU_TIER or tile.SetTier (tile.BF16Products).
// Its results then carry bf16's rounding of P (about 2^-9 relative per
// probability) instead of float32's; tests widen their tolerances by it.
func BF16Products(q, k, v Dtype) bool {
	if exactBF16(q) && exactBF16(k) && exactBF16(v) {
		return tile.BF16InputProducts()
	}
	return tile.BF16Products()
}

// foldsGlobal reports whether an NVFP4 global scale g can leave the K
// decoding for the score scale scale (softmax_scale * log2(e)): the
// product stays a finite, normal float32 (or scale is 0).
func foldsGlobal(scale, g float32) bool {
	s := float64(scale * g)
	return !math.IsInf(s, 0) && !math.IsNaN(s) && (math.Abs(s) >= 0x1p-126 || scale == 0)
}

// kvOperands sets the KV-major path's K and V operands of call p, its
// score scale and its output factor: p's own, except that a call with
// bf16 products (BF16Products) keeps NVFP4 global scales out of the
// decoded values (which the bf16 blocks would round again) and applies
// K's on the score scale and V's on the output, as the query-major path's
// block cache does: the products see the exact e2m1 * e4m3 values, and
// the global scales cost one float32 rounding each instead of a bf16
// rounding of every value. A K global scale that would take the score
// scale out of float32's normal range stays in the decoding.
func (ws *Workspace) kvOperands(p *Prefill) {
	ws.kvK, ws.kvV = p.K, p.V
	ws.kvScale, ws.kvOut = p.Scale*math.Log2E, p.OutputScale
	if !BF16Products(p.Q.Dtype, p.K.Dtype, p.V.Dtype) {
		return
	}
	if k := &ws.kvK; k.Dtype == NVFP4 && k.Global != 1 && foldsGlobal(ws.kvScale, k.Global) {
		ws.kvScale *= k.Global
		k.Global = 1
	}
	if v := &ws.kvV; v.Dtype == NVFP4 && v.Global != 1 {
		ws.kvOut *= v.Global
		v.Global = 1
	}
}
