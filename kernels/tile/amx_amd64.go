//go:build amd64 && !purego

package tile

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// The amxbf16 tier (the automatic bf16 twin where it runs; active when
// named): the avx512bf16 tier's data path (Q, K, V and
// P rounded to bf16, products accumulated in float32, the same block and
// query layouts and the same softmax kernel) with the two block products
// run on Intel AMX tiles (TDPBF16PS, 16x16 float32 accumulators fed by
// 16 rows x 32 bf16 values). Per 16 query rows:
//
//   - S = Q.K^T: A = the rows' bf16 pairs (Acc.qPairs, d/2 pairs a row),
//     B = the block's key pairs [d/2][BlockN] (loadBF16's kb), one 16-key
//     column tile of S after d/32 steps;
//   - the online softmax, by the avx512bf16 kernel, in groups of up to 6
//     rows, over the keys the 16 rows' longest prefix needs (rounded up
//     to 32): every row's P is written there, 0 where the row sees no key;
//   - O = alpha*O + P.V: A = P as bf16 pairs (written by the softmax in
//     place of S), B = the value pairs [BlockN/2][d] (vb), 16 output
//     columns per tile, 32 keys per step.
//
// TDPBF16PS does not accumulate like VDPBF16PS (measured: one pair is
// rounded, then added, but a whole tile row follows none of the simple
// orders), so this tier is held to the bf16 tier's tolerances against the
// generic tier, not bit for bit to it. d must be a multiple of 32 (16
// pairs per step); other head dimensions run the avx512bf16 kernels.

// amxConfig is the 64-byte tile configuration LDTILECFG reads: palette 1,
// tiles 0, 3, 4, 5 (C) and 1 (A) with the update's row count, tiles 2 and
// 6 (B) and 7 16 rows, all 64 bytes wide.
type amxConfig [64]byte

// set configures the tiles for rows rows (1..16) of A and C.
func (c *amxConfig) set(rows int) {
	*c = amxConfig{}
	c[0] = 1 // palette
	for t := 0; t < 8; t++ {
		c[16+2*t] = 64 // colsb, little-endian uint16
		c[48+t] = 16
	}
	for _, t := range []int{0, 1, 3, 4, 5} {
		c[48+t] = byte(rows)
	}
}

//go:noescape
func amxMatmul(cfg *amxConfig, a unsafe.Pointer, lda uintptr, b unsafe.Pointer, ldb uintptr, c unsafe.Pointer, ldc uintptr, nt, kt, load int)

//go:noescape
func amxPeak(cfg *amxConfig, iters int)

//go:noescape
func amxScaleRows(o *float32, ldo uintptr, alpha *float32, rows, d int)

// amxPerm is the outcome of asking Linux for the AMX tile data state (the
// kernel hands it out per process, on request): "" when granted.
var amxPerm = sync.OnceValue(requestAMX)

// missingAMX names what the amxbf16 tier lacks here: the avx512bf16
// tier's features, AMX-TILE and AMX-BF16, and the operating system's
// permission to use the tile registers.
func missingAMX() string {
	if m := missingBF16(); m != "" {
		return m
	}
	switch {
	case !cpu.X86.HasAMXTile:
		return "AMX-TILE"
	case !cpu.X86.HasAMXBF16:
		return "AMX-BF16"
	}
	return amxPerm()
}

// amxRefused returns what the amxbf16 tier lacks on a CPU with AVX512_BF16,
// AMX-TILE and AMX-BF16 (Linux's permission for the tile state), "" where
// it runs or the CPU lacks those features: the automatic choice then runs
// low-precision prefill on another tier, and says so once on stderr.
func amxRefused() string {
	if missingBF16() != "" || !cpu.X86.HasAMXTile || !cpu.X86.HasAMXBF16 {
		return ""
	}
	return amxPerm()
}

// amxRows is the row count of an AMX update's tiles.
const amxRows = 16

// amxPeakFlops runs the amxbf16 calibration loop: 4 TDPBF16PS of 16x16
// outputs x 32 products (2 flops each) per iteration.
func amxPeakFlops(iters int) float64 {
	var cfg amxConfig
	cfg.set(amxRows)
	amxPeak(&cfg, iters)
	return float64(iters) * 4 * amxRows * 16 * 32 * 2
}

// amxUpdate is Acc.Update on the amxbf16 tier (see above).
func amxUpdate(a *Acc, b *Block, valid []int32) {
	d := a.d
	if d%32 != 0 || !b.bf16 {
		kbf16.update(a, b, valid)
		return
	}
	d2 := d / 2
	q2 := a.pairedQ()
	invT := a.tempInvT()
	first := a.fresh
	a.fresh = false
	var cfg amxConfig
	for r0 := 0; r0 < a.m; r0 += amxRows {
		a.pf.issue((a.m - r0 + amxRows - 1) / amxRows)
		R := min(amxRows, a.m-r0)
		nmax := a.groupKeys(b, valid, r0, R, first)
		if nmax <= 0 {
			continue
		}
		nv := (nmax + 31) / 32 * 2 // score vectors of 16 keys, even
		cfg.set(R)
		s := a.s[r0*BlockN:]
		amxMatmul(&cfg, unsafe.Pointer(&q2[r0*d2]), uintptr(d2*4), unsafe.Pointer(&b.kb[0]), BlockN*4,
			unsafe.Pointer(&s[0]), BlockN*4, nv, d2/16, 0)
		for g := r0; g < r0+R; g += rowGroup {
			G := min(rowGroup, r0+R-g)
			kbf16.softmax(&a.s[g*BlockN], nv, &valid[g], G, b.n, a.scale, invT, int(a.round), &a.mx[g], &a.sum[g], &a.tsum[g], &a.alpha[g])
		}
		load := 0
		if !first {
			amxScaleRows(&a.o[r0*d], uintptr(d*4), &a.alpha[r0], R, d)
			load = 1
		}
		amxMatmul(&cfg, unsafe.Pointer(&s[0]), BlockN*4, unsafe.Pointer(&b.vb[0]), uintptr(d*4),
			unsafe.Pointer(&a.o[r0*d]), uintptr(d*4), d/16, nv/2, load)
	}
}
