package op

import (
	"sync"
	"time"

	"github.com/sparseattn/msa/kernels/attn"
	"github.com/sparseattn/msa/kernels/lowp"
	"github.com/sparseattn/msa/op/internal/validate"
	"gorgonia.org/tensor"
)

// SparseAttentionFunc runs CSR block-sparse varlen attention on the CPU (the
// reference's sparse_atten_func). q is [total_q, Hq, D] BFloat16 or
// Float8E4M3FN; k and v are dense [total_k, Hkv, D] or, with
// args.PageTable, paged [num_pages, Hkv, blk_kv, D] (BF16 Q may use FP8
// K/V); k2qRowPtr [Hkv, total_rows+1] and k2qQIndices [Hkv, >= total_q*topK]
// come from K2QCSRFunc. The result's Out is BFloat16 [total_q, Hq, D];
// LSE (natural log, [total_q, Hq] float32) is always set (the kernels compute
// it anyway; the reference's return_softmax_lse has no Go counterpart), and
// TemperatureLSE when args.ReturnTemperatureLSE is set. Out and LSE are
// args.Out and args.OutLSE when those are given (reuse them across calls
// to spare an allocation per call), else new tensors. Float32 q, k and v
// (all three) run without any low-precision rounding and give a float32
// Out (see grad_f32.go).
func SparseAttentionFunc(q, k, v, k2qRowPtr, k2qQIndices tensor.Tensor, topK int, args SparseArgs) (*Result, error) {
	if isFloat32(q) {
		return sparseAttenF32("SparseAttentionFunc", q, k, v, k2qRowPtr, k2qQIndices, topK, args)
	}
	sc, err := validateSparse("SparseAttentionFunc", q, k, v, k2qRowPtr, k2qQIndices, topK, &args, nil)
	if err != nil {
		return nil, err
	}
	return sc.run(nil, nil), nil
}

// SparseAttentionNVFP4KVFunc is SparseAttentionFunc with packed NVFP4 K/V (the
// reference's sparse_atten_nvfp4_kv_func): k and v are uint8
// [total_k, Hkv, D/2] or [num_pages, Hkv, blk_kv, D/2], two E2M1 values per
// byte (element 2i in the low nibble); kScale and vScale hold one E4M3 scale
// per 16 elements in the cuBLAS 128x4 tiled layout; kGlobal and vGlobal are
// optional float32 global scales (nil for none). K's global scale applies
// before the scores, V's in the combine.
func SparseAttentionNVFP4KVFunc(q, k, v, kScale, vScale, kGlobal, vGlobal, k2qRowPtr, k2qQIndices tensor.Tensor, topK int, args SparseArgs) (*Result, error) {
	nv := &nvfp4Inputs{kScale: kScale, vScale: vScale, kGlobal: kGlobal, vGlobal: vGlobal}
	sc, err := validateSparse("SparseAttentionNVFP4KVFunc", q, k, v, k2qRowPtr, k2qQIndices, topK, &args, nv)
	if err != nil {
		return nil, err
	}
	return sc.run(nil, nil), nil
}

// idle holds workspaces of finished eager calls for reuse (see
// sparseCall.run). Unlike a sync.Pool it survives garbage collections: a
// prefill's partial buffers are hundreds of MB at long sequence lengths, and
// re-faulting them every call costs more than the attention's epilogue.
// At most maxIdleWorkspaces are kept; FreeWorkspaces drops them.
var idle struct {
	sync.Mutex
	ws []*attn.Workspace
}

const maxIdleWorkspaces = 4

func getWorkspace() *attn.Workspace {
	idle.Lock()
	defer idle.Unlock()
	if n := len(idle.ws); n > 0 {
		ws := idle.ws[n-1]
		idle.ws = idle.ws[:n-1]
		return ws
	}
	return attn.NewWorkspace(0, 0)
}

func putWorkspace(ws *attn.Workspace) {
	idle.Lock()
	defer idle.Unlock()
	if len(idle.ws) < maxIdleWorkspaces {
		idle.ws = append(idle.ws, ws)
	}
}

// FreeWorkspaces releases the buffers the eager functions keep between
// calls (partials of the largest recent calls; the large ones are memory
// mappings of their own, returned to the system at once) and stops the
// idle worker goroutines kept for the next call (eager functions and graph
// nodes share a few started pools). Graph ops and DecodeWrapper own their
// buffers and are not affected; calls in progress are not affected.
func FreeWorkspaces() {
	idle.Lock()
	for _, ws := range idle.ws {
		ws.Release()
	}
	idle.ws = nil
	idle.Unlock()
	attn.CloseIdlePools()
}

// SetWorkerSpin sets how long the worker goroutines of every op (eager
// functions, graph nodes, DecodeWrapper) keep polling for the next call
// after finishing one before they block; the default is 0 (block at once),
// attn.BackToBackSpin (5 ms) suits programs that call back to back.
//
// Polling goroutines yield to any other runnable goroutine of the process
// (they still lengthen the time a Gorgonia machine spends between nodes
// on a machine with few CPUs), and they hold their CPU against other
// processes: on a machine shared with other work, or where calls are rare,
// 0 (block at once) gives the CPU back.
// Blocking costs the next call a wake-up per goroutine (10-160 us on
// small virtual machines, a few microseconds on bare metal; attn
// BenchmarkPoolWake), which is what the spin saves on back-to-back calls
// such as one decode step per layer.
// Negative values count as 0. It applies from each goroutine's next wait.
func SetWorkerSpin(d time.Duration) { attn.SetProcessSpin(d) }

// run executes a validated call. ws and pool may be nil (temporary ones are
// used).
func (sc *sparseCall) run(ws *attn.Workspace, pool *attn.Pool) *Result {
	p := &sc.p
	if pool == nil {
		pool = attn.AcquirePool(sc.workers)
		defer attn.ReleasePool(pool)
	}
	if ws == nil {
		// Eager calls borrow a workspace so that repeated calls reuse the
		// partial buffers (hundreds of MB at long sequence lengths) instead
		// of allocating and zeroing them every time.
		ws = getWorkspace()
		defer putWorkspace(ws)
	}
	res := &Result{Out: sc.out, LSE: sc.outLSE}
	var o []lowp.BFloat16
	var lse []float32
	if res.Out != nil {
		o = validate.Backing[lowp.BFloat16](res.Out)
	} else {
		o = make([]lowp.BFloat16, p.TotalQ*p.HQ*p.D)
		res.Out = tensor.New(tensor.WithShape(p.TotalQ, p.HQ, p.D), tensor.WithBacking(o))
	}
	if res.LSE != nil {
		lse = validate.Backing[float32](res.LSE)
	} else {
		lse = make([]float32, p.TotalQ*p.HQ)
		res.LSE = tensor.New(tensor.WithShape(p.TotalQ, p.HQ), tensor.WithBacking(lse))
	}
	out := &attn.Output{O: o, LSE: lse}
	if sc.returnTLSE {
		out.TLSE = make([]float32, p.TotalQ*p.HQ)
	}
	attn.RunPrefill(p, ws, pool, out)
	if sc.returnTLSE {
		res.TemperatureLSE = tensor.New(tensor.WithShape(p.TotalQ, p.HQ), tensor.WithBacking(out.TLSE))
	}
	return res
}
