package cuda

// SM100QFwdLayout is QFwdLayout<V, D> of sm100_layout.cuh: the maps of the
// SM100 query-major prefill (msa_sm100_qfwd_*): one 128-row pass of a
// query tile at a time, a softmax warpgroup, the MMA warp and a load warp,
// K/V in a ring of Stages slots, PBufs P tiles.
type SM100QFwdLayout struct {
	ES            int    // bytes of one MMA element (Q, K, V, P)
	QRowBytes     int    // bytes of one Q row (and of one K/V row)
	PRowBytes     int    // bytes of one P row: 128 keys
	QBytes        int    // bytes of the Q tile (128 rows)
	PBytes        int    // bytes of one P tile (128 rows x 128 keys)
	KVBytes       int    // bytes of one K or V ring slot (128 keys)
	Stages        int    // K/V ring slots
	PBufs         int    // P tiles
	QOff          int    // offset of the Q tile
	POff          int    // offset of P tile 0 (tile i at POff + i PBytes)
	KOff          int    // offset of K slot 0 (slot i at KOff + i KVBytes)
	VOff          int    // offset of V slot 0
	BarOff        int    // offset of the mbarriers (qfwdNumBars of them)
	TmemSlot      int    // offset of the word that receives the tensor-memory address
	MapBytes      int    // bytes of the map, alignment slack included
	SmemBytes     int    // dynamic shared memory the launcher requests: MapBytes raised to sm100SoleCtaSmem
	Threads       int    // softmax warpgroup + MMA warp + load warp
	TmemCols      int    // tensor-memory columns allocated (all 512)
	TmemS         [2]int // columns of the two S buffers
	TmemO         int    // column of O (128 lanes x D)
	QKSteps       int    // UMMA instructions of S = Q K^T
	PVSteps       int    // UMMA instructions of O += P V
	KeysPerPVStep int    // keys one P.V instruction consumes
	IdescQK       uint32 // UMMA instruction descriptor of S = Q K^T
	IdescPV       uint32 // UMMA instruction descriptor of O += P V
}

// Barrier indices of QFwdLayout (three ring slots reserved for each ring
// barrier, whatever Stages is): K full, V full, K empty, V empty per slot,
// then Q ready, S full per S buffer, P ready, O done.
const (
	qfwdBarK, qfwdBarV, qfwdBarKE, qfwdBarVE = 0, 3, 6, 9
	qfwdBarQ, qfwdBarS, qfwdBarP, qfwdBarO   = 12, 13, 15, 16
	qfwdNumBars                              = 17
	qfwdMaxStages                            = 3
)

// SM100QFwdOK reports whether variant v has an SM100 query-major kernel
// (bf16 and fp8; the converted K/V variants run the sm80 query-major kernel
// on SM100).
func SM100QFwdOK(v SM100Variant) bool { return v == SM100BF16 || v == SM100FP8 }

// SM100QFwd returns the query-major prefill layout of variant v (bf16 or
// fp8), head dim d.
func SM100QFwd(v SM100Variant, d int) SM100QFwdLayout {
	var l SM100QFwdLayout
	l.ES = v.mmaBytes()
	l.QRowBytes = d * l.ES
	l.PRowBytes = sm100BlockKeys * l.ES
	l.QBytes = sm100TileM * l.QRowBytes
	l.PBytes = sm100TileM * l.PRowBytes
	l.KVBytes = sm100BlockKeys * l.QRowBytes
	mapEnd := func(st, pb int) int {
		return alignUp(alignUp(alignUp(l.QBytes, 1024)+pb*l.PBytes, 1024)+2*st*l.KVBytes, 1024) + 8*qfwdNumBars + 8
	}
	fits := func(st, pb int) bool { return mapEnd(st, pb)+sm100AlignSlack <= sm100MaxDynSmem }
	// The first of (3 stages, 2 P tiles), (2, 2), (2, 1), (1, 1) that fits.
	l.Stages, l.PBufs = 1, 1
	for _, c := range [][2]int{{3, 2}, {2, 2}, {2, 1}} {
		if fits(c[0], c[1]) {
			l.Stages, l.PBufs = c[0], c[1]
			break
		}
	}
	l.POff = alignUp(l.QBytes, 1024)
	l.KOff = alignUp(l.POff+l.PBufs*l.PBytes, 1024)
	l.VOff = l.KOff + l.Stages*l.KVBytes
	l.BarOff = alignUp(l.VOff+l.Stages*l.KVBytes, 1024)
	l.TmemSlot = l.BarOff + 8*qfwdNumBars
	l.MapBytes = l.TmemSlot + 8 + sm100AlignSlack
	l.SmemBytes = max(l.MapBytes, sm100SoleCtaSmem)
	l.Threads = sm100TileM + 64
	l.TmemCols = tmemColumns
	l.TmemS = [2]int{0, sm100BlockKeys}
	l.TmemO = 2 * sm100BlockKeys
	l.QKSteps = l.QRowBytes / sm100KStepBytes
	l.PVSteps = l.PRowBytes / sm100KStepBytes
	l.KeysPerPVStep = sm100KStepBytes / l.ES
	f8 := v == SM100FP8
	l.IdescQK = ummaIdesc(f8, sm100TileM, sm100BlockKeys, false, false)
	l.IdescPV = ummaIdesc(f8, sm100TileM, d, false, true)
	return l
}
