package cuda

// SM100QFwdLayout is QFwdLayout<V, D> of sm100_layout.cuh: the maps of the
// SM100 query-major prefill (msa_sm100_qfwd_*): one 128-row pass of a
// query tile at a time, a softmax warpgroup, the MMA warp, a load warp,
// for the converted K/V variants a converter warpgroup, and a correction
// warpgroup (O rescale and epilogue); K/V in a ring of
// Stages slots. P has no shared memory: the softmax stores P_j over S_j in
// tensor memory, the A operand of O += P_j V_j.
type SM100QFwdLayout struct {
	ES            int    // bytes of one MMA element (Q, K, V, P)
	QRowBytes     int    // bytes of one Q row (and of one K/V row in shared memory)
	RawRow        int    // bytes of one K/V row in global memory (the TMA source)
	RawBytes      int    // bytes of the raw K (and of the raw V) tile: converted variants, else 0
	PRowBytes     int    // bytes of one P row as the MMA reads it: 128 keys
	QBytes        int    // bytes of the Q tile (128 rows)
	KVBytes       int    // bytes of one K or V ring slot (128 keys)
	Stages        int    // K/V ring slots
	QOff          int    // offset of the Q tile
	KOff          int    // offset of K slot 0 (slot i at KOff + i KVBytes)
	VOff          int    // offset of V slot 0
	RawKOff       int    // offset of the raw K tile (converted variants)
	RawVOff       int    // offset of the raw V tile
	BarOff        int    // offset of the mbarriers (qfwdNumBars of them)
	TmemSlot      int    // offset of the word that receives the tensor-memory address
	MapBytes      int    // bytes of the map, alignment slack included
	SmemBytes     int    // dynamic shared memory the launcher requests: MapBytes raised to sm100SoleCtaSmem
	Threads       int    // softmax warpgroup + MMA warp + load warp (+ converter warpgroup) + correction warpgroup
	CorrWarp0     int    // first warp of the correction warpgroup (the last four warps)
	TmemCols      int    // tensor-memory columns allocated (all 512)
	TmemS         [2]int // columns of the two S buffers
	TmemP         [2]int // first column of P_j: over S buffer j & 1
	PCols         int    // tensor-memory columns of one P row (two bf16 or four e4m3 per column)
	PColsPerStep  int    // P columns one P.V instruction consumes
	TmemRec       int    // column (in an S buffer) of the softmax's 4-column record for the correction warpgroup
	TmemO         int    // column of O (128 lanes x D)
	QKSteps       int    // UMMA instructions of S = Q K^T
	PVSteps       int    // UMMA instructions of O += P V
	KeysPerPVStep int    // keys one P.V instruction consumes
	IdescQK       uint32 // UMMA instruction descriptor of S = Q K^T
	IdescPV       uint32 // UMMA instruction descriptor of O += P V
}

// qfwdNumBars is QFwdLayout::num_bars: three ring slots' K / V full and
// empty barriers whatever Stages is, Q ready, two S full, two P ready, O
// done, the raw K / V tiles' full and empty barriers and O corrected (their
// indices, the timeout sites, are the table of sm100_wait.go);
// qfwdMaxStages its max_stages.
const (
	qfwdNumBars   = 23
	qfwdMaxStages = 3
)

// qfwdMapEnd is qfwd_map_end: the bytes of the map of variant v, head dim
// d, with st ring stages, without the alignment slack.
func qfwdMapEnd(v SM100Variant, d, st int) int {
	es := v.mmaBytes()
	raw := 0
	if v.converted() {
		raw = 2 * sm100BlockKeys * v.rawRowBytes(d)
	}
	return alignUp(alignUp(alignUp(sm100TileM*d*es, 1024)+2*st*sm100BlockKeys*d*es, 1024)+raw, 1024) +
		8*qfwdNumBars + 8
}

func qfwdFits(v SM100Variant, d, st int) bool {
	return qfwdMapEnd(v, d, st)+sm100AlignSlack <= sm100MaxDynSmem
}

// SM100QFwdOK reports whether variant v at head dim d has an SM100
// query-major kernel (qfwd_fits: every variant at D 64 and 128, all but
// bf16fp8 at D 256, whose raw E4M3 tiles beside the widened ring do not
// fit; the sm80 query-major kernel runs it).
func SM100QFwdOK(v SM100Variant, d int) bool { return qfwdFits(v, d, 1) }

// SM100QFwd returns the query-major prefill layout of variant v, head dim
// d (SM100QFwdOK).
func SM100QFwd(v SM100Variant, d int) SM100QFwdLayout {
	var l SM100QFwdLayout
	l.ES = v.mmaBytes()
	l.QRowBytes = d * l.ES
	l.RawRow = v.rawRowBytes(d)
	if v.converted() {
		l.RawBytes = sm100BlockKeys * l.RawRow
	}
	l.PRowBytes = sm100BlockKeys * l.ES
	l.QBytes = sm100TileM * l.QRowBytes
	l.KVBytes = sm100BlockKeys * l.QRowBytes
	// As many ring stages as fit, up to qfwdMaxStages.
	l.Stages = 1
	for st := qfwdMaxStages; st > 1; st-- {
		if qfwdFits(v, d, st) {
			l.Stages = st
			break
		}
	}
	l.KOff = alignUp(l.QBytes, 1024)
	l.VOff = l.KOff + l.Stages*l.KVBytes
	l.RawKOff = alignUp(l.VOff+l.Stages*l.KVBytes, 1024)
	l.RawVOff = l.RawKOff + l.RawBytes
	l.BarOff = alignUp(l.RawVOff+l.RawBytes, 1024)
	l.TmemSlot = l.BarOff + 8*qfwdNumBars
	l.MapBytes = l.TmemSlot + 8 + sm100AlignSlack
	l.SmemBytes = max(l.MapBytes, sm100SoleCtaSmem)
	l.Threads = sm100TileM + 64
	if v.converted() {
		l.Threads += 128
	}
	l.CorrWarp0 = l.Threads / 32
	l.Threads += 128
	l.TmemCols = tmemColumns
	l.TmemS = [2]int{0, sm100BlockKeys}
	l.TmemP = l.TmemS
	l.PCols = l.PRowBytes / 4
	l.PColsPerStep = sm100KStepBytes / 4
	l.TmemRec = sm100BlockKeys - 4
	l.TmemO = 2 * sm100BlockKeys
	l.QKSteps = l.QRowBytes / sm100KStepBytes
	l.PVSteps = l.PRowBytes / sm100KStepBytes
	l.KeysPerPVStep = sm100KStepBytes / l.ES
	f8 := v == SM100FP8
	l.IdescQK = ummaIdesc(f8, sm100TileM, sm100BlockKeys, false, false)
	l.IdescPV = ummaIdesc(f8, sm100TileM, d, false, true)
	return l
}
