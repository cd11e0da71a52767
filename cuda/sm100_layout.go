package cuda

// Go model of kernels/cuda/sm100/sm100_layout.cuh: the shared-memory and
// tensor-memory maps of the SM100 (tcgen05) kernels. The launcher takes the
// dynamic shared memory of a launch from here; TestSM100LayoutPins
// (emu_sm100_test.go) checks these numbers against the MSA_SM100_PIN lines of
// the header, which the CUDA compiler checks against the C++ functions.

// SM100Variant is an SM100 kernel variant (sm100_layout.cuh Variant).
type SM100Variant int

// SM100 kernel variants, in the header's order.
const (
	SM100BF16    SM100Variant = 0 // BF16 Q/K/V, kind::f16
	SM100FP8     SM100Variant = 1 // E4M3 Q/K/V, kind::f8f6f4
	SM100BF16FP8 SM100Variant = 2 // BF16 Q, E4M3 K/V converted to bf16
	SM100NVFP4   SM100Variant = 3 // NVFP4 K/V dequantised to bf16
)

// Constants of sm100_layout.cuh.
const (
	sm100Threads    = 128
	sm100TileM      = 128
	sm100BlockKeys  = 128
	sm100KStepBytes = 32
	sm100MaxDynSmem = 232448
	sm100AlignSlack = 1024
	sm100DecRows    = 64
	tmemColumns     = 512
	// sm100SmemPerSM is the shared memory of one SM100-family SM (228 KiB);
	// sm100SoleCtaSmem the smallest request two CTAs cannot share (the
	// prefill allocates all tmemColumns, so it must run alone on its SM).
	sm100SmemPerSM   = 233472
	sm100SoleCtaSmem = sm100SmemPerSM/2 + 1024
)

// sm100ResidentBySmem is resident_by_smem: an upper bound on the CTAs of
// one kernel resident on an SM, from their dynamic shared memory alone.
func sm100ResidentBySmem(smem int) int { return sm100SmemPerSM / smem }

func alignUp(x, a int) int { return (x + a - 1) / a * a }

func pow2Ceil(x int) int {
	p := 1
	for p < x {
		p *= 2
	}
	return p
}

func (v SM100Variant) mmaBytes() int {
	if v == SM100FP8 {
		return 1
	}
	return 2
}

func (v SM100Variant) converted() bool { return v == SM100BF16FP8 || v == SM100NVFP4 }

// rawRowBytes is kv_row_bytes: one K/V row of d elements in global memory.
func (v SM100Variant) rawRowBytes(d int) int {
	switch v {
	case SM100BF16:
		return 2 * d
	case SM100NVFP4:
		return d / 2
	}
	return d
}

func spanOf(rowBytes int) int   { return min(rowBytes, 128) }
func blocksOf(rowBytes int) int { return rowBytes / spanOf(rowBytes) }

// SM100FwdLayout is FwdLayout<V, D>: byte offsets from the 1024-aligned
// dynamic shared memory base and tensor-memory columns of the prefill kernel.
type SM100FwdLayout struct {
	QRowBytes     int    // bytes of one Q row in shared memory (D MMA elements)
	KVRow         int    // bytes of one K/V row in shared memory (equal to QRowBytes)
	PRowBytes     int    // bytes of one P row: 128 keys of MMA elements
	RawRow        int    // bytes of one K/V row in global memory (the TMA source; NVFP4: D/2)
	QPOff         int    // offset of the Q tile, reused for P after S = Q K^T
	QPBytes       int    // bytes of the Q/P region: the larger of the two 128-row tiles
	KOff          int    // offset of the K tile (K-major, 128 keys x D)
	VOff          int    // offset of the V tile (MN-major for P.V)
	KVBytes       int    // bytes of one K or V tile
	RawOff        int    // offset of the raw K then V TMA tiles of the converted variants
	RawBytes      int    // bytes of one raw tile; 0 unless the variant converts K/V to BF16
	BarOff        int    // offset of the mbarriers: K ready, V ready, then per slot Q ready, S done, P ready, O done
	TmemSlot      int    // offset of the word that receives the tensor-memory address
	MapBytes      int    // bytes of the shared-memory map, alignment slack included
	SmemBytes     int    // dynamic shared memory the launcher requests: MapBytes raised to sm100SoleCtaSmem
	TmemS         [2]int // tensor-memory column of slot s's S (FP32, 128 lanes x 128 keys)
	TmemO         [2]int // tensor-memory column of slot s's O (128 lanes x D)
	TmemCols      int    // tensor-memory columns allocated: next power of 2 >= Slots (128 + D)
	QKSteps       int    // UMMA instructions of S = Q K^T (32 bytes of K each)
	PVSteps       int    // UMMA instructions of O = P V
	KeysPerPVStep int    // keys one P.V instruction consumes
	BoxSpan       int    // TMA box inner extent and swizzle span, bytes: min(RawRow, 128)
	Boxes         int    // TMA boxes per K or V tile: RawRow / BoxSpan
	IdescQK       uint32 // UMMA instruction descriptor of S = Q K^T
	IdescPV       uint32 // UMMA instruction descriptor of O = P V
	Slots         int    // pipeline slots (softmax warpgroups, Q/P tiles, S/O pairs): 2 when both fit, else 1
	QP1Off        int    // offset of slot 1's Q/P tile (Slots = 2), after the one-slot map
	Threads       int    // block size: 128 per softmax warpgroup plus the MMA warp (the one tcgen05.mma issuer)
}

// fwdNumBars is FwdLayout::num_bars, the prefill kernel's mbarriers: K and
// V ready, then for each of up to two slots Q ready, S done, P ready and
// O done.
const fwdNumBars = 10

// SM100Fwd returns the prefill layout of variant v, head dim d.
func SM100Fwd(v SM100Variant, d int) SM100FwdLayout {
	var l SM100FwdLayout
	l.QRowBytes = d * v.mmaBytes()
	l.KVRow = d * v.mmaBytes()
	l.PRowBytes = sm100BlockKeys * v.mmaBytes()
	l.RawRow = v.rawRowBytes(d)
	l.QPBytes = max(sm100TileM*l.QRowBytes, sm100TileM*l.PRowBytes)
	l.KVBytes = sm100BlockKeys * l.KVRow
	l.KOff = alignUp(l.QPOff+l.QPBytes, 1024)
	l.VOff = alignUp(l.KOff+l.KVBytes, 1024)
	if v.converted() {
		l.RawBytes = sm100BlockKeys * l.RawRow
	}
	l.RawOff = alignUp(l.VOff+l.KVBytes, 1024)
	l.BarOff = alignUp(l.RawOff+l.RawBytes, 1024)
	l.TmemSlot = l.BarOff + 8*fwdNumBars
	oneSlotEnd := l.TmemSlot + 8
	l.QP1Off = alignUp(oneSlotEnd, 1024)
	l.Slots = 1
	l.SmemBytes = oneSlotEnd + sm100AlignSlack
	if l.QP1Off+l.QPBytes+sm100AlignSlack <= sm100MaxDynSmem && 2*(sm100BlockKeys+d) <= tmemColumns {
		l.Slots = 2
		l.SmemBytes = l.QP1Off + l.QPBytes + sm100AlignSlack
	}
	l.MapBytes = l.SmemBytes
	l.SmemBytes = max(l.MapBytes, sm100SoleCtaSmem)
	l.Threads = 128*l.Slots + 32
	for s := 0; s < l.Slots; s++ {
		l.TmemS[s] = sm100BlockKeys * s
		l.TmemO[s] = sm100BlockKeys*l.Slots + d*s
	}
	l.TmemCols = pow2Ceil(l.Slots * (sm100BlockKeys + d))
	l.QKSteps = l.QRowBytes / sm100KStepBytes
	l.PVSteps = l.PRowBytes / sm100KStepBytes
	l.KeysPerPVStep = sm100KStepBytes / v.mmaBytes()
	l.BoxSpan, l.Boxes = spanOf(l.RawRow), blocksOf(l.RawRow)
	f8 := v == SM100FP8
	l.IdescQK = ummaIdesc(f8, sm100TileM, sm100BlockKeys, false, false)
	l.IdescPV = ummaIdesc(f8, sm100TileM, d, false, true)
	return l
}

// SM100DecLayout is DecLayout<V, D> of the decode kernel (swapped products).
type SM100DecLayout struct {
	RowBytes  int    // bytes of one Q/K/V row in shared memory (D MMA elements)
	QBytes    int    // bytes of the Q tile (64 rows)
	KVBytes   int    // bytes of one K or V tile (128 keys)
	PRowBytes int    // bytes of one key's row of P^T (64 query-head rows)
	PBytes    int    // bytes of the P^T tile
	RawRow    int    // bytes of one K/V row in global memory (the TMA box rows)
	RawBytes  int    // bytes of one raw E4M3 tile; 0 unless the variant is BF16FP8
	RawOff    int    // offset of the raw K then V TMA tiles (BF16FP8)
	QOff      int    // offset of the Q tile, the B operand of S^T = K Q^T
	KOff      int    // offset of the K tile, the A operand of S^T
	VOff      int    // offset of the V tile, the MN-major A operand of O^T
	POff      int    // offset of the P^T tile, the B operand of O^T
	RedOff    int    // offset of the per-row softmax state and reduction scratch
	OrowOff   int    // offset of the output row indices (int64 per row)
	BarOff    int    // offset of the three mbarriers (K ready, V ready, MMA done)
	TmemSlot  int    // offset of the word that receives the tensor-memory address
	SmemBytes int    // dynamic shared memory the launcher requests, alignment slack included
	OM        int    // UMMA M of O^T: 128 elements of D per product
	OMMAs     int    // O^T products per K step: max(1, D/128)
	OAtoms    int    // swizzle atoms of the O^T A operand per product
	TmemS     int    // tensor-memory column of S^T (128 lanes x 64 rows)
	TmemO     int    // tensor-memory column of the first O^T block
	TmemCols  int    // tensor-memory columns allocated (a power of 2)
	BoxSpan   int    // TMA box inner extent and swizzle span, bytes: min(RowBytes, 128)
	Boxes     int    // TMA boxes per K or V tile: RowBytes / BoxSpan
	IdescQK   uint32 // UMMA instruction descriptor of S^T = K Q^T
	IdescPV   uint32 // UMMA instruction descriptor of O^T = V^T P^T
	// K/V stages: 2 when the second stage fits, else 1. The second stage
	// follows the one-stage map: unconverted variants K1Off / V1Off;
	// converted ones the raw V of stage 0 (RV0Off) and the raw K / V of
	// stage 1 (RK1Off / RV1Off), stage 0's raw K being RawOff.
	Stages  int
	VExtent int // bytes the O^T A operand reads from a V tile (> KVBytes at D = 64)
	K1Off   int // offset of stage 1's K tile (unconverted)
	V1Off   int // offset of stage 1's V tile (unconverted)
	RV0Off  int // offset of stage 0's raw V tile (converted)
	RK1Off  int // offset of stage 1's raw K tile (converted)
	RV1Off  int // offset of stage 1's raw V tile (converted)
	Bar1Off int // offset of stage 1's two mbarriers (K, V ready)
	Vis1Off int // offset of stage 1's visible-key counts (int32 per row)
}

// SM100Dec returns the decode layout of variant v (BF16, FP8 or BF16FP8:
// E4M3 K/V landing raw and widened to BF16), head dim d.
func SM100Dec(v SM100Variant, d int) SM100DecLayout {
	var l SM100DecLayout
	es := v.mmaBytes()
	l.RowBytes = d * es
	l.RawRow = v.rawRowBytes(d)
	if v.converted() {
		l.RawBytes = sm100BlockKeys * l.RawRow
	}
	l.QBytes = sm100DecRows * l.RowBytes
	l.KVBytes = sm100BlockKeys * l.RowBytes
	l.PRowBytes = sm100DecRows * es
	l.PBytes = sm100BlockKeys * l.PRowBytes
	l.KOff = alignUp(l.QOff+l.QBytes, 1024)
	l.VOff = alignUp(l.KOff+l.KVBytes, 1024)
	l.POff = alignUp(l.VOff+l.KVBytes, 1024)
	l.RawOff = alignUp(l.POff+l.PBytes, 1024)
	l.RedOff = alignUp(l.RawOff+l.RawBytes, 1024)
	redFloats := 4*sm100DecRows + 5*sm100DecRows // red, m, l, mcur, alpha, inv
	redInts := 3*sm100DecRows + 2                // vis, lim, sel, reduction
	l.OrowOff = alignUp(l.RedOff+4*redFloats+4*redInts, 16)
	l.BarOff = alignUp(l.OrowOff+8*sm100DecRows, 16)
	l.TmemSlot = l.BarOff + 8*3
	l.OM = 128
	l.OMMAs = max(1, d/128)
	l.TmemS, l.TmemO = 0, sm100DecRows
	l.TmemCols = pow2Ceil(sm100DecRows + l.OMMAs*sm100DecRows)
	l.BoxSpan, l.Boxes = spanOf(l.RowBytes), blocksOf(l.RowBytes)
	l.OAtoms = 128 * es / l.BoxSpan
	oneStageEnd := l.TmemSlot + 8
	l.VExtent = max(l.KVBytes, l.OMMAs*l.OAtoms*sm100BlockKeys*l.BoxSpan)
	s1 := alignUp(oneStageEnd, 1024)
	l.K1Off = s1
	l.V1Off = alignUp(l.K1Off+l.KVBytes, 1024)
	l.RV0Off = s1
	l.RK1Off = alignUp(l.RV0Off+l.RawBytes, 1024)
	l.RV1Off = alignUp(l.RK1Off+l.RawBytes, 1024)
	if v.converted() {
		l.Bar1Off = alignUp(l.RV1Off+l.RawBytes, 16)
	} else {
		l.Bar1Off = alignUp(l.V1Off+l.VExtent, 16)
	}
	l.Vis1Off = l.Bar1Off + 16
	twoStageEnd := l.Vis1Off + 4*sm100DecRows
	l.Stages = 1
	if twoStageEnd+sm100AlignSlack <= sm100MaxDynSmem {
		l.Stages = 2
	}
	if l.Stages == 2 {
		l.SmemBytes = twoStageEnd + sm100AlignSlack
	} else {
		l.SmemBytes = oneStageEnd + sm100AlignSlack
	}
	f8 := v == SM100FP8
	l.IdescQK = ummaIdesc(f8, sm100BlockKeys, sm100DecRows, false, false)
	l.IdescPV = ummaIdesc(f8, l.OM, sm100DecRows, true, true)
	return l
}

// ummaIdesc is umma_idesc: the instruction descriptor of a dense
// kind::f16 (BF16 operands) or kind::f8f6f4 (E4M3) MMA with F32 accumulate.
func ummaIdesc(f8 bool, m, n int, aMN, bMN bool) uint32 {
	b := func(x bool) uint32 {
		if x {
			return 1
		}
		return 0
	}
	return 1<<4 | b(!f8)<<7 | b(!f8)<<10 | b(aMN)<<15 | b(bMN)<<16 | uint32(n>>3)<<17 | uint32(m>>4)<<24
}

// sm100PagedRows is paged_rows: keys per TMA box of a paged K/V map.
func sm100PagedRows(pageSize int) int { return min(sm100BlockKeys, pageSize) }

// SM100PagedOK is paged_ok: the launcher's precondition for paged K/V on the
// SM100 kernels (else the portable kernel runs): a power-of-2 page size,
// boxes that land 1024-byte aligned, blocks starting on box boundaries.
func SM100PagedOK(pageSize, blkKV, boxSpan int) bool {
	r := sm100PagedRows(pageSize)
	return pageSize >= 1 && pageSize&(pageSize-1) == 0 && r*boxSpan%1024 == 0 && blkKV%r == 0
}
