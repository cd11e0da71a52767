package cuda

import (
	"fmt"
	"os"
	"strings"

	"github.com/sparseattn/msa/kernels/cuda/fatbin"
	"github.com/sparseattn/msa/kernels/plan"
)

// PrefillPath selects the algorithm of a sparse prefill on the GPU.
type PrefillPath int

// Prefill paths.
const (
	// PrefillKV is the KV-major path: one CTA per forward-schedule item
	// (a KV block and the queries that selected it) writes per-slot
	// partials, the combine merges them.
	PrefillKV PrefillPath = iota
	// PrefillQuery is the query-major path (QPlan): one CTA per query tile
	// x KV head writes the output and LSE once, on the family's own
	// query-major kernel (QFwdName: the sm_90a wgmma kernels on Hopper,
	// the mma.sync kernels of sm80/sm80_qfwd.cu elsewhere).
	PrefillQuery
	// PrefillQuery80 is the query-major path on the mma.sync kernel of
	// sm80/sm80_qfwd.cu on every tensor-core family, so that one run on a
	// Hopper GPU can time both query-major kernels.
	PrefillQuery80
	// PrefillKV2 is the KV-major path on the persistent sm_90a kernel with
	// the combine fused (sm90/sm90_fwd2.cu, KV2Plan); elsewhere, and for
	// the variants it does not have, the KV path.
	PrefillKV2
	// PrefillAuto weighs every query tile with the model shared with the
	// CPU path (plan.PathCosts.Weigh, GPU constants of prefill_auto.go)
	// and runs each on the query-major kernel or the KV-major path, both in
	// one call (the KV-major launches first, the query-major one last);
	// where the query-major kernel does not apply (QFwdPlan) or the GPU is
	// not in the peak table, every tile runs KV-major and
	// Kernels.PrefillChoice says why.
	PrefillAuto
	// PrefillAutoKV2 is PrefillAuto with its KV-major tiles on the kv2
	// kernel (as PrefillKV2: where KV2Plan takes the call, else the kv
	// kernels with the reason in Fallbacks), weighed with the same
	// constants, so that one GPU run can check and time auto with either
	// KV-major kernel.
	PrefillAutoKV2
)

// Auto reports whether p weighs every query tile between the query-major
// and the KV-major path (PrefillAuto, PrefillAutoKV2).
func (p PrefillPath) Auto() bool { return p == PrefillAuto || p == PrefillAutoKV2 }

// KV2 reports whether p runs its KV-major launches on the kv2 kernel
// where KV2Plan takes the call (PrefillKV2, PrefillAutoKV2).
func (p PrefillPath) KV2() bool { return p == PrefillKV2 || p == PrefillAutoKV2 }

// PrefillEnv is the environment variable Load reads the prefill path
// from: "kv" (the default, also when unset), "kv2", "query", "query80",
// "auto" or "auto-kv2".
const PrefillEnv = "MSA_CUDA_PREFILL"

// String is the name ParsePrefillPath reads.
func (p PrefillPath) String() string {
	switch p {
	case PrefillQuery:
		return "query"
	case PrefillQuery80:
		return "query80"
	case PrefillKV2:
		return "kv2"
	case PrefillAuto:
		return "auto"
	case PrefillAutoKV2:
		return "auto-kv2"
	}
	return "kv"
}

// ParsePrefillPath parses "kv", "kv2", "query", "query80", "auto" or
// "auto-kv2" ("" is kv).
func ParsePrefillPath(s string) (PrefillPath, error) {
	switch s {
	case "", "kv":
		return PrefillKV, nil
	case "query":
		return PrefillQuery, nil
	case "query80":
		return PrefillQuery80, nil
	case "kv2":
		return PrefillKV2, nil
	case "auto":
		return PrefillAuto, nil
	case "auto-kv2":
		return PrefillAutoKV2, nil
	}
	return PrefillKV, fmt.Errorf("cuda: %s=%q: want kv, kv2, query, query80, auto or auto-kv2", PrefillEnv, s)
}

// queryArch is the family whose query-major kernel path p runs on a
// device of family a (ok false: p runs no query-major kernel); auto runs
// the family's own, as query does.
func (p PrefillPath) queryArch(a Arch) (Arch, bool) {
	switch p {
	case PrefillQuery, PrefillAuto, PrefillAutoKV2:
		return a, true
	case PrefillQuery80:
		if a == ArchPortable {
			return a, true
		}
		return ArchSM80, true
	}
	return a, false
}

// prefillPathFromEnv is the one place the prefill path is read from the
// environment (Load).
func prefillPathFromEnv() (PrefillPath, error) { return ParsePrefillPath(os.Getenv(PrefillEnv)) }

// qfwdKernelParams mirrors MsaQFwdParams.
type qfwdKernelParams struct {
	Q, K, V, KScale, VScale, KGlobalScale, OutputScale uint64
	CuSeqlensQ, CuSeqlensK, SequsedK, PageTable        uint64
	Tiles, TilePtr, Blocks, Masks                      uint64
	Out, LSE, TLSE                                     uint64
	TotalQ, NumHeadsQ, NumHeadsKV, HeadDim             int32
	QheadPerKV, BlkKV, PageSize, PageTableStride       int32
	NumBatch, NumTiles, QDtype, KVDtype                int32
	Causal, PVRound                                    int32
	SoftmaxScaleLog2, InvTemperature                   float32
}

// QPlanPtrs are the device copies of a QPlan's arrays.
type QPlanPtrs struct {
	Tiles, TilePtr, Blocks, Masks uint64
}

// QFwdName is the query-major kernel family a runs for variant v at head
// dim d: msa_sm90_qfwd_<v>_d<d> (TMA + wgmma, sm90/sm90_qfwd.cu) on sm90;
// msa_sm100_qfwd_<v>_d<d> (TMA + tcgen05, sm100/sm100_qfwd.cu) on SM100
// where its map fits (SM100QFwdOK: all but the converted K/V variants at D
// 256); msa_sm80_qfwd_<v>_d<d> (mma.sync, sm80/sm80_qfwd.cu, whose body
// every tensor-core image holds) otherwise.
func QFwdName(a Arch, v TCVariant, d int) string {
	switch {
	case a == ArchSM90:
		return TCName(ArchSM90, "qfwd", v, d)
	case a == ArchSM100 && SM100QFwdOK(v.SM100(), d):
		return TCName(ArchSM100, "qfwd", v, d)
	}
	return TCName(ArchSM80, "qfwd", v, d)
}

// QFwdTileRows is the row tile of query-major kernel name: SM100QTileRows
// for the SM100 kernels, QTileRows for the others. A QPlan for the kernel
// is built with these rows.
func QFwdTileRows(name string) int {
	if strings.HasPrefix(name, "msa_sm100_qfwd_") {
		return SM100QTileRows
	}
	return QTileRows
}

// QFwdNames lists the query-major kernels the launcher looks up on family
// a: the sm80 ones on every tensor-core family, the sm90 ones too on sm90
// and the SM100 ones on SM100, none on the portable family.
func QFwdNames(a Arch) []string {
	if a == ArchPortable {
		return nil
	}
	var out []string
	for _, d := range []int{64, 128, 256} {
		for _, v := range []TCVariant{VarBF16, VarFP8, VarBF16FP8, VarNVFP4} {
			out = append(out, QFwdName(ArchSM80, v, d))
			if a == ArchSM90 || a == ArchSM100 && SM100QFwdOK(v.SM100(), d) {
				out = append(out, QFwdName(a, v, d))
			}
		}
		if a == ArchSM90 {
			out = append(out, QFwdFP8PVName(d))
		}
	}
	return out
}

// QFwdPlan decides whether the prefill of fa can run on the query-major
// kernel of family arch with a plan of tiles query tiles (why is the
// reason when it cannot; the KV-major path then runs). It applies the
// limits of the tensor-core prefill (TCFwdPlan: dtype variant, P
// rounding, blk_kv, alignment, tensor-map shapes), names the query-major
// kernel (QFwdName) and sizes the grid: one CTA per tile, or per
// fatbin.SM90QFwdTilesPerCTA tiles.
func QFwdPlan(arch Arch, fa *FwdArgs, tiles int) (TCPlan, string) {
	if arch == ArchPortable {
		return TCPlan{}, "no query-major kernel for this GPU (the portable family)"
	}
	p, why := TCFwdPlan(ArchSM80, fa, tiles)
	if why != "" {
		return TCPlan{}, why
	}
	v, _ := FwdVariant(fa.QDtype, fa.KVDtype)
	p.Name = QFwdName(arch, v, fa.D)
	if arch == ArchSM100 && p.Name != QFwdName(ArchSM80, v, fa.D) {
		// The SM100 kernel's K/V boxes are the KV-major SM100 kernel's:
		// its paged-K/V limits apply.
		if _, why := TCFwdPlan(ArchSM100, fa, tiles); why != "" {
			return TCPlan{}, why
		}
	}
	if n, ok := fatbin.SM90QFwdTilesPerCTA[p.Name]; ok {
		p.GridBlocks = (tiles + n - 1) / n
	}
	p.SmemBytes = 0 // the launch table's
	return p, ""
}

// newQFwdKernelParams validates the prefill (fa, ca against csr and s, with
// the KV-major path's checks and errors: newFwdKernelParams and
// newCombineKernelParams), checks the output alignment and fills the
// query-major parameter block for the plan qp at dev.
func newQFwdKernelParams(fa *FwdArgs, ca *CombineArgs, csr *plan.CSR, s *plan.FwdSchedule, qp *QPlan, dev QPlanPtrs) (qfwdKernelParams, error) {
	var p qfwdKernelParams
	f, err := newFwdKernelParams(fa, csr, s, FwdPlanPtrs{})
	if err != nil {
		return p, err
	}
	if _, err := newCombineKernelParams(ca, 0); err != nil {
		return p, err
	}
	switch {
	case ca.Hq != fa.Hq || ca.Hkv != fa.Hkv || ca.D != fa.D || ca.TotalQ != fa.TotalQ:
		return p, fmt.Errorf("cuda: query-major prefill: combine arguments (total_q %d, Hq %d, Hkv %d, D %d) disagree with the forward's (%d, %d, %d, %d)",
			ca.TotalQ, ca.Hq, ca.Hkv, ca.D, fa.TotalQ, fa.Hq, fa.Hkv, fa.D)
	case ca.Out == 0 || ca.LSE == 0:
		return p, fmt.Errorf("cuda: query-major prefill: out and lse are required")
	case qp == nil:
		return p, fmt.Errorf("cuda: query-major prefill: nil plan")
	}
	// BF16 pairs and float LSEs are stored 4 bytes at a time.
	for _, c := range []alignReq{{"out", ca.Out, 4}, {"lse", ca.LSE, 4}, {"tlse", ca.TLSE, 4}, {"output_scale", ca.OutputScale, 4}} {
		if err := checkAlign(c.name, c.ptr, c.align); err != nil {
			return p, err
		}
	}
	if err := fits32("query tiles", qp.NumTiles()); err != nil {
		return p, err
	}
	p = qfwdKernelParams{
		Q: f.Q, K: f.K, V: f.V, KScale: f.KScale, VScale: f.VScale, KGlobalScale: f.KGlobalScale, OutputScale: ca.OutputScale,
		CuSeqlensQ: f.CuSeqlensQ, CuSeqlensK: f.CuSeqlensK, SequsedK: f.SequsedK, PageTable: f.PageTable,
		Tiles: dev.Tiles, TilePtr: dev.TilePtr, Blocks: dev.Blocks, Masks: dev.Masks,
		Out: ca.Out, LSE: ca.LSE, TLSE: ca.TLSE,
		TotalQ: f.TotalQ, NumHeadsQ: f.NumHeadsQ, NumHeadsKV: f.NumHeadsKV, HeadDim: f.HeadDim,
		QheadPerKV: f.QheadPerKV, BlkKV: f.BlkKV, PageSize: f.PageSize, PageTableStride: f.PageTableStride,
		NumBatch: f.NumBatch, NumTiles: int32(qp.NumTiles()), QDtype: f.QDtype, KVDtype: f.KVDtype,
		Causal: f.Causal, PVRound: f.PVRound, SoftmaxScaleLog2: f.SoftmaxScaleLog2,
	}
	// The temperature LSE as the KV-major path computes it: with a
	// temperature, 1/T; without, the kernel writes the LSE there.
	if ca.TLSE != 0 && fa.Temperature > 0 {
		p.InvTemperature = 1 / fa.Temperature
	}
	return p, nil
}
