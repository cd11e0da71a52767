package cuda

import (
	"fmt"
	"math"
	"slices"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/plan"
)

// Field-by-field mirrors of the C structs in kernels/cuda/shared/msa_params.h (same
// order, same types: uint64 device pointers, then int32, then float32; 0 is
// a null pointer). TestParamsLayout checks them against the header.

// fwdKernelParams mirrors MsaFwdParams.
type fwdKernelParams struct {
	Q, K, V, KScale, VScale, KGlobalScale        uint64
	CuSeqlensQ, CuSeqlensK, SequsedK, PageTable  uint64
	RowPtr, QSplit, Metadata, WorkCount          uint64
	OPartial, LSEPartial, TLSEPartial            uint64
	TotalQ, NumHeadsQ, NumHeadsKV, HeadDim       int32
	QheadPerKV, BlkKV, PageSize, PageTableStride int32
	NumBatch, TotalRows, QSplitStride, NumSlots  int32
	Capacity, QDtype, KVDtype, PartialDtype      int32
	Causal, PVRound, pad0, pad1                  int32
	SoftmaxScaleLog2, InvTemperature             float32
}

// combineKernelParams mirrors MsaCombineParams.
type combineKernelParams struct {
	OPartial, LSEPartial, TLSEPartial, SplitCounts, OIndptr uint64
	OutputScale, Out, LSE, TLSE                             uint64
	TotalQ, NumHeadsQ, NumHeadsKV, HeadDim                  int32
	QheadPerKV, NumSlots, PartialDtype, Mode                int32
	SeqlenQ, QStride                                        int32
}

// decodeKernelParams mirrors MsaDecodeParams.
type decodeKernelParams struct {
	Q, K, V, KScale, VScale, KGlobalScale, OutputScale uint64
	SequsedK, PageTable                                uint64
	Request, QTileIdx, KVTile, KVHead, Valid, OIndptr  uint64
	OPartial, LSEPartial, Out, LSE                     uint64
	Q2K                                                uint64
	Batch, SeqlenQ, NumHeadsQ, NumHeadsKV              int32
	HeadDim, QheadPerKV, PageSize, PageTableStride     int32
	QTile, QStride, ChunkPages, SplitKV                int32
	WorkCount, QDtype, KVDtype, PVRound                int32
	TopK, BlkKV                                        int32
	SoftmaxScaleLog2                                   float32
	pad0                                               int32
}

// Dtype is a storage dtype code of msa_params.h.
type Dtype int32

const (
	F32   Dtype = 0 // IEEE float32 (partials only)
	BF16  Dtype = 1 // bfloat16
	F16   Dtype = 2 // IEEE float16 (partials only)
	E4M3  Dtype = 3 // OCP float8 e4m3fn
	NVFP4 Dtype = 4 // packed E2M1 + E4M3 block scales in the 128x4 layout
)

// Round selects the rounding of P before P.V (kernels/tile.Round).
type Round int32

const (
	RoundNone Round = 0 // P stays float32
	RoundBF16 Round = 1 // P rounded to bfloat16
	RoundE4M3 Round = 2 // P rounded to float8 e4m3fn
)

// Mainloop geometry of the portable kernels (msa_common.cuh).
const (
	Threads   = 128 // threads per CTA
	MaxBlockN = 128 // largest blk_kv
)

// HeadDimSupported reports whether the fatbin has kernels for head dim d.
func HeadDimSupported(d int) bool { return d == 64 || d == 128 || d == 256 }

// TileRows is the row tile (query-head rows per CTA pass) of the kernels for
// head dim d: Geo<D>::kRows of msa_common.cuh. D = 256 uses 16 rows (and
// 32-key K/V sub-tiles) to keep static shared memory under 48 KB.
func TileRows(d int) int {
	if d > 128 {
		return 16
	}
	return 32
}

// MaxDecodeTopK bounds top_k of sparse decode (the op layer allows 64).
const MaxDecodeTopK = 1024

const headDimErr = "the GPU kernels support 64, 128 and 256"

const log2e = 1.4426950408889634

func fits32(name string, v int) error {
	if v < 0 || v > math.MaxInt32 {
		return fmt.Errorf("cuda: %s = %d: must be in [0, %d]", name, v, math.MaxInt32)
	}
	return nil
}

// FwdArgs are the device tensors and shapes of one sparse prefill (contract §3-6).
// Pointers are device addresses; 0 = absent.
type FwdArgs struct {
	Q, K, V                uint64 // see MsaFwdParams for shapes
	KScale, VScale         uint64 // NVFP4 block scales (128x4 layout)
	KGlobalScale           uint64 // float32[1], NVFP4 only, optional
	CuSeqlensQ, CuSeqlensK uint64 // int32 [B+1]
	SequsedK, PageTable    uint64 // paged mode: page_table [B][PageTableStride]
	OPartial, LSEPartial   uint64 // [TopK][TotalQ][Hq][D] / [TopK][TotalQ][Hq]
	TLSEPartial            uint64 // optional temperature LSE partials

	TotalQ          int     // query rows of all sequences: cu_seqlens_q[NumBatch]
	Hq              int     // query heads, a positive multiple of Hkv
	Hkv             int     // K/V heads
	D               int     // head dim: 64, 128 or 256 (HeadDimSupported)
	BlkKV           int     // keys per K/V block, in [1, MaxBlockN]
	TopK            int     // partial slots per query and head: blocks a query attends, in [1, plan.MaxSlotTopK]
	NumBatch        int     // sequences B
	PageSize        int     // tokens per page; paged mode only
	PageTableStride int     // int32 entries per page_table row; paged mode only
	QDtype          Dtype   // BF16 or E4M3
	KVDtype         Dtype   // BF16, E4M3 or NVFP4 (then KScale and VScale are required)
	PartialDtype    Dtype   // element type of OPartial: F32, BF16, F16 or E4M3
	PVRound         Round   // rounding of P before P.V
	Causal          bool    // bottom-right aligned causal mask per sequence
	SoftmaxScale    float32 // 0: 1/sqrt(D)
	Temperature     float32 // used when TLSEPartial != 0
	// KVRows is the leading extent of K and V: total_k (dense) or the
	// number of pages (paged). Only the tensor-core kernels need it (their
	// tensor maps); 0 keeps a launch on the portable kernels.
	KVRows int
}

// FwdPlanPtrs are the device copies of the plan arrays a forward launch reads.
type FwdPlanPtrs struct {
	RowPtr    uint64 // int32 [Hkv][TotalRows+1]: plan.CSR.RowPtr
	QSplit    uint64 // int32, q_idx | slot<<24 per CSR entry: plan.FwdSchedule.QSplit
	Metadata  uint64 // int32 [Capacity][plan.MetaFields]: plan.FwdSchedule.Metadata
	WorkCount uint64 // int32[1]: plan.FwdSchedule.WorkCount
}

func softmaxLog2(scale float32, d int) float32 {
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(d)))
	}
	return float32(float64(scale) * log2e)
}

// operandAlign is the alignment the portable kernels' vector loads need of
// a Q, K or V base address: 16 bytes for BF16 rows (uint4 loads), 8 for
// E4M3 (uint2), 4 for packed NVFP4 (uint32). Every row is a multiple of it
// (D >= 64), so an aligned base keeps every row aligned.
func operandAlign(dt Dtype) uint64 {
	switch dt {
	case BF16, F16:
		return 16
	case E4M3:
		return 8
	}
	return 4
}

// checkAlign returns an error when a non-null device address is not a
// multiple of n: a misaligned vector load raises a sticky
// CUDA_ERROR_MISALIGNED_ADDRESS that kills the whole context.
func checkAlign(name string, ptr, n uint64) error {
	if ptr != 0 && ptr%n != 0 {
		return fmt.Errorf("cuda: %s at %#x: must be %d-byte aligned", name, ptr, n)
	}
	return nil
}

// checkOperands checks Q/K/V, partial and output alignment (0 = absent).
func checkOperands(q, k, v uint64, qd, kvd Dtype, more ...alignReq) error {
	for _, c := range []alignReq{{"q", q, operandAlign(qd)}, {"k", k, operandAlign(kvd)}, {"v", v, operandAlign(kvd)}} {
		if err := checkAlign(c.name, c.ptr, c.align); err != nil {
			return err
		}
	}
	for _, c := range more {
		if err := checkAlign(c.name, c.ptr, c.align); err != nil {
			return err
		}
	}
	return nil
}

type alignReq = struct {
	name  string
	ptr   uint64
	align uint64
}

func checkDtypes(q, kv Dtype, pr Round) error {
	if q != BF16 && q != E4M3 {
		return fmt.Errorf("cuda: q dtype %d: expected BF16 (%d) or E4M3 (%d)", q, BF16, E4M3)
	}
	if kv != BF16 && kv != E4M3 && kv != NVFP4 {
		return fmt.Errorf("cuda: k/v dtype %d: expected BF16, E4M3 or NVFP4", kv)
	}
	if pr < RoundNone || pr > RoundE4M3 {
		return fmt.Errorf("cuda: pv rounding %d: expected 0..2", pr)
	}
	return nil
}

// newFwdKernelParams validates a, csr and s and fills the kernel parameter
// block; dev holds the device copies of csr.RowPtr, s.QSplit, s.Metadata and
// s.WorkCount.
func newFwdKernelParams(a *FwdArgs, csr *plan.CSR, s *plan.FwdSchedule, dev FwdPlanPtrs) (fwdKernelParams, error) {
	var p fwdKernelParams
	switch {
	case !HeadDimSupported(a.D):
		return p, fmt.Errorf("cuda: head dim %d: "+headDimErr, a.D)
	case a.BlkKV < 1 || a.BlkKV > MaxBlockN:
		return p, fmt.Errorf("cuda: blk_kv = %d: must be in [1, %d]", a.BlkKV, MaxBlockN)
	case a.Hkv < 1 || a.Hq%a.Hkv != 0 || a.Hq < a.Hkv:
		return p, fmt.Errorf("cuda: Hq = %d, Hkv = %d: Hq must be a positive multiple of Hkv", a.Hq, a.Hkv)
	case csr == nil || s == nil:
		return p, fmt.Errorf("cuda: nil CSR or forward schedule")
	case csr.Hkv != a.Hkv:
		return p, fmt.Errorf("cuda: CSR Hkv = %d: expected %d", csr.Hkv, a.Hkv)
	case len(csr.RowPtr) != a.Hkv*(csr.TotalRows+1):
		return p, fmt.Errorf("cuda: CSR RowPtr has %d entries: expected Hkv*(total_rows+1) = %d", len(csr.RowPtr), a.Hkv*(csr.TotalRows+1))
	case len(s.Metadata) < s.Capacity*plan.MetaFields || int(s.WorkCount) > s.Capacity:
		return p, fmt.Errorf("cuda: forward schedule: %d metadata entries, capacity %d, work count %d", len(s.Metadata), s.Capacity, s.WorkCount)
	case len(s.QSplit) != len(csr.QIdx):
		return p, fmt.Errorf("cuda: qsplit has %d entries: expected %d (the CSR's)", len(s.QSplit), len(csr.QIdx))
	case a.TopK < 1 || a.TopK > plan.MaxSlotTopK:
		return p, fmt.Errorf("cuda: topK = %d: must be in [1, %d]", a.TopK, plan.MaxSlotTopK)
	case a.PageTable != 0 && (a.PageSize < 1 || a.PageTableStride < 1):
		return p, fmt.Errorf("cuda: paged K/V: page_size = %d, page_table stride = %d: must be >= 1", a.PageSize, a.PageTableStride)
	case a.SequsedK != 0 && a.PageTable == 0:
		return p, fmt.Errorf("cuda: seqused_k is only valid with a page table")
	case a.KVDtype == NVFP4 && (a.KScale == 0 || a.VScale == 0):
		return p, fmt.Errorf("cuda: NVFP4 K/V need block scales")
	case a.PartialDtype < F32 || a.PartialDtype > E4M3:
		return p, fmt.Errorf("cuda: partial dtype %d: expected F32, BF16, F16 or E4M3", a.PartialDtype)
	case a.TLSEPartial != 0 && (!(a.Temperature > 0) || math.IsInf(float64(a.Temperature), 0)):
		return p, fmt.Errorf("cuda: temperature = %v: must be finite and > 0", a.Temperature)
	}
	if err := checkDtypes(a.QDtype, a.KVDtype, a.PVRound); err != nil {
		return p, err
	}
	if err := checkOperands(a.Q, a.K, a.V, a.QDtype, a.KVDtype,
		alignReq{"o_partial", a.OPartial, 16}, alignReq{"lse_partial", a.LSEPartial, 4}, alignReq{"tlse_partial", a.TLSEPartial, 4},
		alignReq{"k_scale", a.KScale, 4}, alignReq{"v_scale", a.VScale, 4}, alignReq{"k_global_scale", a.KGlobalScale, 4},
		alignReq{"cu_seqlens_q", a.CuSeqlensQ, 4}, alignReq{"cu_seqlens_k", a.CuSeqlensK, 4},
		alignReq{"seqused_k", a.SequsedK, 4}, alignReq{"page_table", a.PageTable, 4}); err != nil {
		return p, err
	}
	for _, c := range []struct {
		n string
		v int
	}{{"total_q", a.TotalQ}, {"batch", a.NumBatch}, {"qsplit stride", csr.Stride}, {"capacity", s.Capacity}, {"total_rows", csr.TotalRows}} {
		if err := fits32(c.n, c.v); err != nil {
			return p, err
		}
	}
	p = fwdKernelParams{
		Q: a.Q, K: a.K, V: a.V, KScale: a.KScale, VScale: a.VScale, KGlobalScale: a.KGlobalScale,
		CuSeqlensQ: a.CuSeqlensQ, CuSeqlensK: a.CuSeqlensK, SequsedK: a.SequsedK, PageTable: a.PageTable,
		RowPtr: dev.RowPtr, QSplit: dev.QSplit, Metadata: dev.Metadata, WorkCount: dev.WorkCount,
		OPartial: a.OPartial, LSEPartial: a.LSEPartial, TLSEPartial: a.TLSEPartial,
		TotalQ: int32(a.TotalQ), NumHeadsQ: int32(a.Hq), NumHeadsKV: int32(a.Hkv), HeadDim: int32(a.D),
		QheadPerKV: int32(a.Hq / a.Hkv), BlkKV: int32(a.BlkKV), PageSize: int32(a.PageSize), PageTableStride: int32(a.PageTableStride),
		NumBatch: int32(a.NumBatch), TotalRows: int32(csr.TotalRows), QSplitStride: int32(csr.Stride), NumSlots: int32(a.TopK),
		Capacity: int32(s.Capacity), QDtype: int32(a.QDtype), KVDtype: int32(a.KVDtype), PartialDtype: int32(a.PartialDtype),
		PVRound: int32(a.PVRound), SoftmaxScaleLog2: softmaxLog2(a.SoftmaxScale, a.D),
	}
	if a.Causal {
		p.Causal = 1
	}
	if a.TLSEPartial != 0 {
		p.InvTemperature = 1 / a.Temperature
	}
	return p, nil
}

// CombineArgs are the tensors of a combine (contract §5) after a sparse forward.
type CombineArgs struct {
	OPartial     uint64 // [TopK][TotalQ][Hq][D] of PartialDtype, as written by the forward
	LSEPartial   uint64 // float32 [TopK][TotalQ][Hq]
	TLSEPartial  uint64 // float32 [TopK][TotalQ][Hq] temperature LSE partials; 0 = none
	OutputScale  uint64 // float32[1] optional (NVFP4 V global scale)
	Out, LSE     uint64 // bf16 [TotalQ][Hq][D], float32 [TotalQ][Hq]
	TLSE         uint64 // float32 [TotalQ][Hq] combined temperature LSE; 0 = none
	TotalQ       int    // query rows, as in FwdArgs
	Hq           int    // query heads
	Hkv          int    // K/V heads; Hq is a multiple of it
	D            int    // head dim: 64, 128 or 256
	TopK         int    // partial slots per query, as in FwdArgs
	PartialDtype Dtype  // element type of OPartial: F32, BF16, F16 or E4M3
}

// newCombineKernelParams fills the mode-0 (sparse prefill) combine block;
// splitCounts is the device copy of FwdSchedule.SplitCounts [TotalQ][Hkv].
func newCombineKernelParams(a *CombineArgs, splitCounts uint64) (combineKernelParams, error) {
	var p combineKernelParams
	switch {
	case !HeadDimSupported(a.D):
		return p, fmt.Errorf("cuda: head dim %d: "+headDimErr, a.D)
	case a.Hkv < 1 || a.Hq%a.Hkv != 0 || a.Hq < a.Hkv:
		return p, fmt.Errorf("cuda: Hq = %d, Hkv = %d: Hq must be a positive multiple of Hkv", a.Hq, a.Hkv)
	case a.PartialDtype < F32 || a.PartialDtype > E4M3:
		return p, fmt.Errorf("cuda: partial dtype %d: expected F32, BF16, F16 or E4M3", a.PartialDtype)
	case a.TopK < 1 || a.TopK > plan.MaxSlotTopK:
		return p, fmt.Errorf("cuda: topK = %d: must be in [1, %d]", a.TopK, plan.MaxSlotTopK)
	}
	if err := fits32("total_q*Hq", a.TotalQ*a.Hq); err != nil {
		return p, err
	}
	return combineKernelParams{
		OPartial: a.OPartial, LSEPartial: a.LSEPartial, TLSEPartial: a.TLSEPartial, SplitCounts: splitCounts,
		OutputScale: a.OutputScale, Out: a.Out, LSE: a.LSE, TLSE: a.TLSE,
		TotalQ: int32(a.TotalQ), NumHeadsQ: int32(a.Hq), NumHeadsKV: int32(a.Hkv), HeadDim: int32(a.D),
		QheadPerKV: int32(a.Hq / a.Hkv), NumSlots: int32(a.TopK), PartialDtype: int32(a.PartialDtype), Mode: 0,
		SeqlenQ: 1, QStride: 1,
	}, nil
}

// DecodeArgs are the device tensors and shapes of a paged decode (contract §7).
type DecodeArgs struct {
	Q                    uint64 // [Batch*SeqlenQ][Hq][D] of QDtype
	K, V                 uint64 // paged [NumPages][Hkv][PageSize][D] of KVDtype (NVFP4: D/2 bytes a row)
	KScale               uint64 // NVFP4 K block scales, e4m3 in the 128x4 layout; 0 otherwise
	VScale               uint64 // NVFP4 V block scales, e4m3 in the 128x4 layout; 0 otherwise
	KGlobalScale         uint64 // float32[1] optional (NVFP4 K global scale, applied to the scores)
	OutputScale          uint64 // float32[1] optional (NVFP4 V global scale)
	SequsedK, PageTable  uint64 // int32 [B], int32 [B][PageTableStride]
	OPartial, LSEPartial uint64 // float32 [PartialRows][Hq][D] / [PartialRows][Hq] when SplitKV
	Out, LSE             uint64 // bf16 [B*SeqlenQ][Hq][D], float32 [B*SeqlenQ][Hq]
	// Q2K selects sparse decode: int32 [Hkv][Batch*SeqlenQ][TopK] ids of
	// blocks of BlkKV tokens (-1 = unused slot); 0 = dense decode.
	Q2K   uint64
	TopK  int // slots per row of Q2K, in [1, MaxDecodeTopK]; sparse decode only
	BlkKV int // tokens per block named in Q2K; sparse decode only

	Batch           int     // requests B
	SeqlenQ         int     // query tokens per request in this step
	Hq              int     // query heads, a positive multiple of Hkv
	Hkv             int     // K/V heads
	D               int     // head dim: 64, 128 or 256
	PageSize        int     // tokens per page
	PageTableStride int     // int32 entries per page_table row (>= 1)
	QDtype          Dtype   // BF16 or E4M3
	KVDtype         Dtype   // BF16, E4M3 or NVFP4 (then KScale and VScale are required)
	PVRound         Round   // rounding of P before P.V
	SoftmaxScale    float32 // 0: 1/sqrt(D)
	// NumPages is the page count of K and V; only the tensor-core kernels
	// need it (0 keeps a launch on the portable kernels).
	NumPages int
}

// DecodePlanPtrs are the device copies of the decode schedule arrays.
type DecodePlanPtrs struct {
	Request     uint64 // int32 [Capacity]: request (batch row) of each work item
	QTileIdx    uint64 // int32 [Capacity]: query tile of each work item
	KVTile      uint64 // int32 [Capacity]: KV chunk (split index) of each work item
	KVHead      uint64 // int32 [Capacity]: KV head of each work item
	Valid       uint64 // int32 [Capacity]: 1 for a live work item, 0 for padding
	OIndptr     uint64 // int32 [Batch+1]: first partial row of each request
	SplitCounts uint64 // int32 [Batch]: KV splits of each request, read by the combine
}

// newDecodeKernelParams validates a against s and fills the decode block and
// (used when s.SplitKV) the mode-1 combine block.
func newDecodeKernelParams(a *DecodeArgs, s *plan.DecodeSchedule, dev DecodePlanPtrs) (decodeKernelParams, combineKernelParams, error) {
	var p decodeKernelParams
	var c combineKernelParams
	switch {
	case s == nil:
		return p, c, fmt.Errorf("cuda: nil decode schedule")
	case s.Params.Executor != plan.CUDAExecutor:
		return p, c, fmt.Errorf("cuda: decode schedule planned for the %v executor (its split follows %d %v workers): the CUDA path runs schedules planned for the %v executor (plan.DecodeParams.Executor, Workers = the GPU's SM count)",
			s.Params.Executor, s.Params.Workers, s.Params.Executor, plan.CUDAExecutor)
	case !HeadDimSupported(a.D):
		return p, c, fmt.Errorf("cuda: head dim %d: "+headDimErr, a.D)
	case a.Hkv < 1 || a.Hq%a.Hkv != 0 || a.Hq < a.Hkv:
		return p, c, fmt.Errorf("cuda: Hq = %d, Hkv = %d: Hq must be a positive multiple of Hkv", a.Hq, a.Hkv)
	case s.Params.Batch != a.Batch || s.Params.SeqlenQ != a.SeqlenQ || s.Params.HQ != a.Hq || s.Params.Hkv != a.Hkv || s.Params.PageSize != a.PageSize:
		return p, c, fmt.Errorf("cuda: decode schedule built for batch %d, seqlen_q %d, Hq %d, Hkv %d, page %d: got %d, %d, %d, %d, %d",
			s.Params.Batch, s.Params.SeqlenQ, s.Params.HQ, s.Params.Hkv, s.Params.PageSize, a.Batch, a.SeqlenQ, a.Hq, a.Hkv, a.PageSize)
	case a.PageTableStride < 1 || a.PageTable == 0 || a.SequsedK == 0:
		return p, c, fmt.Errorf("cuda: decode needs page_table (stride %d >= 1) and seqused_k", a.PageTableStride)
	case s.SplitKV && (a.OPartial == 0 || a.LSEPartial == 0):
		return p, c, fmt.Errorf("cuda: split-KV decode schedule: partial buffers of %d rows are required", s.PartialRows)
	case a.KVDtype == NVFP4 && (a.KScale == 0 || a.VScale == 0):
		return p, c, fmt.Errorf("cuda: NVFP4 K/V need block scales")
	case a.Q2K != 0 && (a.TopK < 1 || a.TopK > MaxDecodeTopK):
		return p, c, fmt.Errorf("cuda: sparse decode: topK = %d: must be in [1, %d]", a.TopK, MaxDecodeTopK)
	case a.Q2K != 0 && a.BlkKV < 1:
		return p, c, fmt.Errorf("cuda: sparse decode: blk_kv = %d: must be >= 1", a.BlkKV)
	case s.WorkCount > s.Capacity || len(s.Request) < s.Capacity || len(s.KVHead) < s.Capacity:
		return p, c, fmt.Errorf("cuda: decode schedule: work count %d, capacity %d, %d items", s.WorkCount, s.Capacity, len(s.Request))
	}
	if err := checkDtypes(a.QDtype, a.KVDtype, a.PVRound); err != nil {
		return p, c, err
	}
	if err := checkOperands(a.Q, a.K, a.V, a.QDtype, a.KVDtype,
		alignReq{"o_partial", a.OPartial, 16}, alignReq{"lse_partial", a.LSEPartial, 4},
		alignReq{"out", a.Out, 16}, alignReq{"lse", a.LSE, 4}, alignReq{"q2k", a.Q2K, 4},
		alignReq{"k_scale", a.KScale, 4}, alignReq{"v_scale", a.VScale, 4},
		alignReq{"seqused_k", a.SequsedK, 4}, alignReq{"page_table", a.PageTable, 4}); err != nil {
		return p, c, err
	}
	if err := fits32("batch*seqlen_q*Hq", a.Batch*a.SeqlenQ*a.Hq); err != nil {
		return p, c, err
	}
	if a.Q2K != 0 {
		if err := fits32("Hkv*batch*seqlen_q*topK", a.Hkv*a.Batch*a.SeqlenQ*a.TopK); err != nil {
			return p, c, err
		}
		if err := fits32("blk_kv", a.BlkKV); err != nil {
			return p, c, err
		}
	}
	p = decodeKernelParams{
		Q: a.Q, K: a.K, V: a.V, KScale: a.KScale, VScale: a.VScale, KGlobalScale: a.KGlobalScale, OutputScale: a.OutputScale,
		SequsedK: a.SequsedK, PageTable: a.PageTable,
		Request: dev.Request, QTileIdx: dev.QTileIdx, KVTile: dev.KVTile, KVHead: dev.KVHead, Valid: dev.Valid, OIndptr: dev.OIndptr,
		OPartial: a.OPartial, LSEPartial: a.LSEPartial, Out: a.Out, LSE: a.LSE, Q2K: a.Q2K,
		Batch: int32(a.Batch), SeqlenQ: int32(a.SeqlenQ), NumHeadsQ: int32(a.Hq), NumHeadsKV: int32(a.Hkv),
		HeadDim: int32(a.D), QheadPerKV: int32(a.Hq / a.Hkv), PageSize: int32(a.PageSize), PageTableStride: int32(a.PageTableStride),
		QTile: int32(s.QTile), QStride: int32(s.QStride), ChunkPages: int32(s.ChunkPages),
		WorkCount: int32(s.WorkCount), QDtype: int32(a.QDtype), KVDtype: int32(a.KVDtype), PVRound: int32(a.PVRound),
		SoftmaxScaleLog2: softmaxLog2(a.SoftmaxScale, a.D),
	}
	if s.SplitKV {
		p.SplitKV = 1
	}
	if a.Q2K != 0 {
		p.TopK, p.BlkKV = int32(a.TopK), int32(a.BlkKV)
	}
	maxSplits := max(s.MaxSplits, 1)
	for _, n := range s.SplitCounts {
		maxSplits = max(maxSplits, int(n))
	}
	c = combineKernelParams{
		OPartial: a.OPartial, LSEPartial: a.LSEPartial, SplitCounts: dev.SplitCounts, OIndptr: dev.OIndptr,
		OutputScale: a.OutputScale, Out: a.Out, LSE: a.LSE,
		TotalQ: int32(a.Batch * a.SeqlenQ), NumHeadsQ: int32(a.Hq), NumHeadsKV: int32(a.Hkv), HeadDim: int32(a.D),
		QheadPerKV: int32(a.Hq / a.Hkv), NumSlots: int32(maxSplits), PartialDtype: int32(F32), Mode: 1,
		SeqlenQ: int32(a.SeqlenQ), QStride: int32(s.QStride),
	}
	return p, c, nil
}

// MaxPartialBytes bounds the prefill partials of one launch window on the
// GPU, as attn.MaxPartialBytes does on the CPU: 256 MiB.
const MaxPartialBytes = attn.MaxPartialBytes

// minWindow is the CPU path's smallest query window (kernels/attn).
const minWindow = 1024

// WindowQueries returns the query window W of a prefill with totalQ
// queries, slots partial slots of hq heads x d elements of psz bytes: all
// queries when their partials fit in MaxPartialBytes, else the largest
// window that fits, raised to 1024 queries as long as that stays within 4x
// the cap (at least one query) -- the CPU path's rule (attn.RunPrefill).
func WindowQueries(totalQ, slots, hq, d, psz int) int {
	perQuery := max(slots*hq*d*psz, 1)
	w := MaxPartialBytes / perQuery
	if w < minWindow {
		w = min(minWindow, 4*MaxPartialBytes/perQuery)
	}
	return max(min(w, totalQ), 1)
}

// PartialBytes is the device memory of the O partials and of the LSE (and
// temperature LSE) partials of a window of w queries: what a caller
// allocates for SparsePrefill.
func PartialBytes(w, slots, hq, d, psz int) (o, lse int64) {
	rows := int64(slots) * int64(w) * int64(hq)
	return rows * int64(d) * int64(psz), rows * 4
}

// FwdWindow is the part of a forward schedule whose queries lie in
// [Q0, Q1): its work items are the schedule's items clipped to those
// queries (q_begin / q_count narrowed; items without such queries dropped).
type FwdWindow struct {
	Q0    int               // first global query row of the window
	Q1    int               // end (exclusive) of the window's query rows
	Sched *plan.FwdSchedule // Metadata/Capacity/WorkCount of the window; QSplit and SplitCounts shared
}

// FwdWindows cuts s into windows of w queries (global query rows; cuQ is
// the host copy of cu_seqlens_q). One window covering every query returns
// s itself, so a call that fits the cap launches exactly the schedule it
// was given. Entries of a CSR row are batch-local query indices in
// ascending order (plan.CSR), so each item's part in a window is one
// contiguous entry range.
func FwdWindows(csr *plan.CSR, s *plan.FwdSchedule, cuQ []int32, totalQ, w int) ([]FwdWindow, error) {
	var st windowStore
	return st.cut(csr, s, cuQ, totalQ, w)
}

// windowStore holds a prefill's windows and the schedules it made for
// them, reused by the next call of the same or a smaller window count, so
// that a warm launch allocates nothing. The windows it returns are valid
// until its next use.
type windowStore struct {
	wins   []FwdWindow
	scheds []plan.FwdSchedule // the schedule of window i, when the store made one
	meta   [][]int32          // the metadata storage of scheds[i]
}

// reset empties the windows and makes room for n (the schedules' storage
// never moves while their windows are in use: pointers to it are taken).
func (st *windowStore) reset(n int) {
	if len(st.scheds) < n {
		st.wins = make([]FwdWindow, 0, n)
		st.scheds = make([]plan.FwdSchedule, n)
		st.meta = append(st.meta, make([][]int32, n-len(st.meta))...)
	}
	st.wins = st.wins[:0]
}

// sched returns window i's schedule, a copy of s with empty metadata over
// the store's storage.
func (st *windowStore) sched(i int, s *plan.FwdSchedule) *plan.FwdSchedule {
	ws := &st.scheds[i]
	*ws = *s
	ws.Metadata = st.meta[i][:0]
	return ws
}

// done records the metadata of window i's schedule (kept for reuse).
func (st *windowStore) done(i int) {
	ws := &st.scheds[i]
	st.meta[i] = ws.Metadata
	ws.Capacity = len(ws.Metadata) / plan.MetaFields
	ws.WorkCount = int32(ws.Capacity)
}

// cut is FwdWindows over the store's storage.
func (st *windowStore) cut(csr *plan.CSR, s *plan.FwdSchedule, cuQ []int32, totalQ, w int) ([]FwdWindow, error) {
	if w >= totalQ {
		st.reset(1)
		st.wins = append(st.wins, FwdWindow{Q0: 0, Q1: totalQ, Sched: s})
		return st.wins, nil
	}
	if w < 1 {
		return nil, fmt.Errorf("cuda: query window %d: must be >= 1", w)
	}
	nb := len(cuQ) - 1
	st.reset((totalQ + w - 1) / w)
	for q0 := 0; q0 < totalQ; q0 += w {
		q1 := min(totalQ, q0+w)
		i := len(st.wins)
		ws := st.sched(i, &plan.FwdSchedule{QSplit: s.QSplit, SplitCounts: s.SplitCounts, Target: s.Target})
		for i := 0; i < int(s.WorkCount); i++ {
			m := s.Metadata[i*plan.MetaFields : (i+1)*plan.MetaFields]
			h, row, qBegin, qCount, b := int(m[0]), int(m[1]), int(m[2]), int(m[3]), int(m[4])
			if b < 0 || b >= nb || h < 0 || h >= csr.Hkv || row < 0 || row >= csr.TotalRows {
				return nil, fmt.Errorf("cuda: forward schedule item %d: (head %d, row %d, batch %d) out of range", i, h, row, b)
			}
			if int(cuQ[b]) >= q1 || int(cuQ[b+1]) <= q0 {
				continue
			}
			base := h*csr.Stride + int(csr.RowPtr[h*(csr.TotalRows+1)+row]) + qBegin
			if base < 0 || qCount < 0 || base+qCount > len(csr.QIdx) {
				return nil, fmt.Errorf("cuda: forward schedule item %d: entries [%d, %d) outside the CSR", i, base, base+qCount)
			}
			qs := csr.QIdx[base : base+qCount]
			lo, _ := slices.BinarySearch(qs, int32(q0)-cuQ[b])
			hi, _ := slices.BinarySearch(qs, int32(q1)-cuQ[b])
			if lo < hi {
				ws.Metadata = append(ws.Metadata, m[0], m[1], int32(qBegin+lo), int32(hi-lo), m[4], m[5])
			}
		}
		st.done(i)
		st.wins = append(st.wins, FwdWindow{Q0: q0, Q1: q1, Sched: ws})
	}
	return st.wins, nil
}

// partialSize is the element size of a partial dtype.
func partialSize(d Dtype) int {
	switch d {
	case F32:
		return 4
	case BF16, F16:
		return 2
	}
	return 1
}

// DefaultItemWaves is the number of CTAs per SM SplitForOccupancy aims
// for in each prefill window (MSA_CUDA_ITEM_WAVES overrides it at Load).
const DefaultItemWaves = 4

// SplitForOccupancy cuts the work items of each window into pieces of at
// most P entries (queries of one K/V block), so that a window offers about
// ctas CTAs or more (the launcher passes DefaultItemWaves x the SM count):
// the schedule's chunk target is chosen for the CPU path's workers and the
// whole problem, and on a GPU a window of a long prefill can hold fewer
// items than the device has SMs (a 4K-query window of the benchmark's
// 32K-token prefill holds a few dozen items of one-CTA-per-SM kernels,
// against 132 SMs on an H100 or H200), and most SMs would idle. The GPU
// check's "prefill ... 8K" and "32K" timing rows compare the two lengths
// per pair (kernels/cuda/gpucheck.sh -only '^timing'; H200 results in
// docs/results/gpu-h200-sm90a.csv).
//
// P is the window's entry count over ctas, rounded up to a whole number
// of row tiles (tileRows / qhpk queries, at least 1), so pieces fill the
// kernels' row tiles; items no longer than P stay as they are. A piece
// writes exactly the partial slots its entries wrote before (slots belong to
// (query, block) pairs, not to items): the outputs are bit-identical, only
// the grid changes. ctas < 1 returns the windows unchanged.
func SplitForOccupancy(wins []FwdWindow, qhpk, tileRows, ctas int) []FwdWindow {
	var st windowStore
	return st.split(wins, qhpk, tileRows, ctas)
}

// split is SplitForOccupancy over the store's storage (wins must not be
// the store's own windows).
func (st *windowStore) split(wins []FwdWindow, qhpk, tileRows, ctas int) []FwdWindow {
	if ctas < 1 || qhpk < 1 {
		return wins
	}
	g := max(tileRows/qhpk, 1)
	st.reset(len(wins))
	for i, w := range wins {
		st.wins = append(st.wins, w)
		if w.Sched == nil {
			continue
		}
		n := int(w.Sched.WorkCount)
		total := 0
		for j := 0; j < n; j++ {
			total += int(w.Sched.Metadata[j*plan.MetaFields+plan.MetaQCount])
		}
		if n >= ctas || total == 0 {
			continue
		}
		piece := (total + ctas - 1) / ctas
		piece = (piece + g - 1) / g * g
		ws := st.sched(i, w.Sched)
		for j := 0; j < n; j++ {
			m := w.Sched.Metadata[j*plan.MetaFields : (j+1)*plan.MetaFields]
			beg, cnt := int(m[plan.MetaQBegin]), int(m[plan.MetaQCount])
			for off := 0; off < cnt || (cnt == 0 && off == 0); off += piece {
				ws.Metadata = append(ws.Metadata, m...)
				k := len(ws.Metadata) - plan.MetaFields
				ws.Metadata[k+plan.MetaQBegin] = int32(beg + off)
				ws.Metadata[k+plan.MetaQCount] = int32(min(piece, cnt-off))
			}
		}
		st.done(i)
		st.wins[i].Sched = ws
	}
	return st.wins
}
