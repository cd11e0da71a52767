package op

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sparseattn/msa/op/internal/validate"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Option configures a graph constructor. Every graph constructor takes its
// input nodes positionally and everything else as options:
//
//	K2QCSR(q2k, cuQ, cuK, BlkKV(128), MaxSeqlenK(4096))
//	FwdSchedule(csr, cuQ, cuK, QheadPerKV(4), Workers(8))
//	SparseAttention(q, k, v, csr, sched, cuQ, cuK, Causal(), Temperature(2))
//
// A constructor rejects an option that does not apply to it with an
// *ArgError whose Arg is the option's name (e.g. "Causal"), and a missing
// required option the same way; an option given twice must have the same
// arguments both times (different ones are an *ArgError naming both calls
// rather than the last one silently winning). The options each constructor
// takes are listed in its documentation and in package op's overview; the
// one-call forms (SelectBlocks, BlockSparseAttention and their eager forms)
// take those of the stages they chain.
type Option struct {
	id   optID
	val  any    // the option's arguments (comparable): a repeat must equal it
	call string // the call that made it, e.g. "BlkKV(64)", for errors
	set  func(*attnConfig)
}

// newOption returns the option id with arguments val (a comparable value),
// args formatting them for errors.
func newOption(id optID, val any, args string, set func(*attnConfig)) Option {
	return Option{id: id, val: val, call: optNames[id] + "(" + args + ")", set: set}
}

// nodeArg formats a node argument of an option for errors.
func nodeArg(n *G.Node) string {
	if n == nil {
		return "nil"
	}
	return fmt.Sprintf("%q", n.Name())
}

// optID identifies an option kind (a bit of attnConfig.given).
type optID uint

const (
	optCausal optID = iota
	optSoftmaxScale
	optTemperature
	optPartialDtype
	optMMADtypes
	optWorkers
	optPaged
	optNVFP4KV
	optSharedKV
	optBlkKV
	optMaxSeqlenK
	optTopK
	optTotalQ
	optQheadPerKV
	optSeqlenQ
	optHeads
	optPageSize
	optFixedSplitSize
	optDisableSplitKV
	optReduce
	optKeepFirst
	optKeepLast
	optKVLayout
	optMaxWorkspaceBytes
	optPlanForCUDA
)

// optNames are the option functions' names, used in errors.
var optNames = [...]string{
	optCausal: "Causal", optSoftmaxScale: "SoftmaxScale", optTemperature: "Temperature",
	optPartialDtype: "PartialDtype", optMMADtypes: "MMADtypes", optWorkers: "Workers",
	optPaged: "Paged", optNVFP4KV: "NVFP4KV", optSharedKV: "SharedKV", optBlkKV: "BlkKV",
	optMaxSeqlenK: "MaxSeqlenK", optTopK: "TopK", optTotalQ: "TotalQ", optQheadPerKV: "QheadPerKV",
	optSeqlenQ: "SeqlenQ", optHeads: "Heads", optPageSize: "PageSize", optFixedSplitSize: "FixedSplitSize",
	optDisableSplitKV: "DisableSplitKV", optReduce: "Reduce", optKeepFirst: "KeepFirst", optKeepLast: "KeepLast",
	optKVLayout: "KVLayout", optMaxWorkspaceBytes: "MaxWorkspaceBytes", optPlanForCUDA: "PlanForCUDA",
}

// applyOptions applies opts for the constructor fn, which accepts the
// options in allowed; any other option, and an option given twice with
// different arguments, is an *ArgError naming it.
func applyOptions(fn string, opts []Option, allowed ...optID) (attnConfig, error) {
	var cfg attnConfig
	first := map[optID]Option{}
	for _, o := range opts {
		if o.set == nil {
			return cfg, validate.ArgErr(fn, "opts", "options made by this package's option functions", "a zero Option")
		}
		if !slices.Contains(allowed, o.id) {
			names := make([]string, len(allowed))
			for i, id := range allowed {
				names[i] = optNames[id]
			}
			return cfg, validate.ArgErr(fn, optNames[o.id], fmt.Sprintf("one of the options %s takes (%s)", fn, strings.Join(names, ", ")),
				optNames[o.id]+", which does not apply to "+fn)
		}
		if f, ok := first[o.id]; ok {
			if f.val != o.val {
				return cfg, validate.ArgErr(fn, optNames[o.id], fmt.Sprintf("one value for the %s option (it may be repeated with the same arguments)", optNames[o.id]),
					f.call+" and "+o.call)
			}
			continue
		}
		first[o.id] = o
		o.set(&cfg)
		cfg.given |= 1 << o.id
	}
	return cfg, nil
}

// has reports whether the option id was given.
func (c *attnConfig) has(id optID) bool { return c.given&(1<<id) != 0 }

// required returns an *ArgError naming the option id when it is absent.
func (c *attnConfig) required(fn string, id optID, what string) error {
	if c.has(id) {
		return nil
	}
	return validate.ArgErr(fn, optNames[id], fmt.Sprintf("the %s(...) option (%s)", optNames[id], what), "none")
}

// SharedKV declares that k and v are intentionally the same node (one
// tensor serving as both keys and values). Without it the attention
// constructors reject k == v: Gorgonia merges input nodes that have the
// same type and shape and no name, so an unnamed v silently becomes k.
// For SparseAttention and DecodeAttention.
func SharedKV() Option {
	return newOption(optSharedKV, true, "", func(c *attnConfig) { c.sharedKV = true })
}

// Causal applies bottom-right aligned causal masking (causal). For
// SparseAttention and BlockScores; decode is always causal. BlockScores
// with Causal() selects only visible blocks, SparseAttention with Causal()
// masks the later keys inside the selected blocks: a SparseAttention whose
// CSR descends from a BlockScores node must take Causal() exactly when that
// node does (otherwise an *ArgError naming Causal and both stages).
func Causal() Option { return newOption(optCausal, true, "", func(c *attnConfig) { c.causal = true }) }

// SoftmaxScale sets softmax_scale (default DefaultSoftmaxScale(D) =
// 1/sqrt(D)). For SparseAttention,
// DecodeAttention and BlockScores.
func SoftmaxScale(x float64) Option {
	return newOption(optSoftmaxScale, x, fmt.Sprint(x), func(c *attnConfig) { c.scale = x })
}

// Temperature sets lse_temperature_scale T for the TemperatureLSE node
// (the eager SparseArgs.Temperature). For SparseAttention.
func Temperature(t float64) Option {
	return newOption(optTemperature, t, fmt.Sprint(t), func(c *attnConfig) { c.temperature = t })
}

// PartialDtype sets partial_dtype: float32, BFloat16 (default), Float16 or
// Float8E4M3FN. For SparseAttention.
func PartialDtype(dt tensor.Dtype) Option {
	return newOption(optPartialDtype, dt, validate.DtypeName(dt), func(c *attnConfig) { c.partial = dt })
}

// MMADtypes sets qk_dtype and pv_dtype (zero Dtype = reference default).
// For SparseAttention.
func MMADtypes(qk, pv tensor.Dtype) Option {
	return newOption(optMMADtypes, [2]tensor.Dtype{qk, pv}, validate.DtypeName(qk)+", "+validate.DtypeName(pv), func(c *attnConfig) { c.qk, c.pv = qk, pv })
}

// Workers caps the goroutines (usable_SM_count; <= 0 uses
// runtime.GOMAXPROCS(0)). For FwdSchedule, SparseAttention, DecodeSchedule
// and BlockScores. SparseAttention after a FwdSchedule node takes the
// schedule's worker count when the option is absent and rejects a different
// one; with a schedule fed as an input node it must match the count the
// schedule was built for.
func Workers(n int) Option {
	return newOption(optWorkers, n, fmt.Sprint(n), func(c *attnConfig) { c.workers = n })
}

// Paged selects the paged K/V layout with page_table [B, pages] (not nil)
// and an optional seqused_k [B] (nil for none). For SparseAttention.
func Paged(pageTable, seqUsedK *G.Node) Option {
	return newOption(optPaged, [2]*G.Node{pageTable, seqUsedK}, nodeArg(pageTable)+", "+nodeArg(seqUsedK),
		func(c *attnConfig) { c.pageTable, c.seqused = pageTable, seqUsedK })
}

// NVFP4KV selects packed NVFP4 K/V with their 128x4 block scales and
// optional float32 global scales (nil for none). For SparseAttention.
func NVFP4KV(kScale, vScale, kGlobal, vGlobal *G.Node) Option {
	return newOption(optNVFP4KV, [4]*G.Node{kScale, vScale, kGlobal, vGlobal},
		nodeArg(kScale)+", "+nodeArg(vScale)+", "+nodeArg(kGlobal)+", "+nodeArg(vGlobal), func(c *attnConfig) {
			c.nvfp4, c.kScale, c.vScale, c.kGlobal, c.vGlobal = true, kScale, vScale, kGlobal, vGlobal
		})
}

// BlkKV sets blk_kv, the keys per sparse block. For K2QCSR, PackK2QCSR and
// BlockScores (0 or absent: 128) and DecodeAttention (0 or absent: the page
// size). SparseAttention reads it from its CSR node.
func BlkKV(n int) Option {
	return newOption(optBlkKV, n, fmt.Sprint(n), func(c *attnConfig) { c.blkKV = n })
}

// MaxSeqlenK sets max_seqlen_k, which fixes a node's shape: the CSR's row
// capacity B * ceil(max_seqlen_k / blk_kv) (K2QCSR) or the scores' last
// dimension (BlockScores). Required by both.
func MaxSeqlenK(n int) Option {
	return newOption(optMaxSeqlenK, n, fmt.Sprint(n), func(c *attnConfig) { c.maxSeqlenK = n })
}

// TopK sets topK, the blocks each query selects. Required by TopKBlocks
// and PackK2QCSR (K2QCSR reads it from q2k_indices' last dimension).
func TopK(n int) Option {
	return newOption(optTopK, n, fmt.Sprint(n), func(c *attnConfig) { c.topK = n })
}

// TotalQ sets total_q for PackK2QCSR; absent, it is
// k2q_q_indices.shape[1] / topK (the exact size K2QCSRFunc returns).
func TotalQ(n int) Option {
	return newOption(optTotalQ, n, fmt.Sprint(n), func(c *attnConfig) { c.totalQ = n })
}

// QheadPerKV sets qhead_per_kv = Hq / Hkv of the attention a FwdSchedule
// node serves (required by FwdSchedule; SparseAttention compares it with
// q's and k's head counts).
func QheadPerKV(n int) Option {
	return newOption(optQheadPerKV, n, fmt.Sprint(n), func(c *attnConfig) { c.qpk = n })
}

// SeqlenQ sets seqlen_q, the queries per request: for DecodeSchedule
// (absent: 1) and WritePagedKV (absent: derived from the shapes).
func SeqlenQ(n int) Option {
	return newOption(optSeqlenQ, n, fmt.Sprint(n), func(c *attnConfig) { c.seqlenQ = n })
}

// Heads sets num_qo_heads and num_kv_heads (Hq and Hkv) of a DecodeSchedule
// node (required).
func Heads(numQOHeads, numKVHeads int) Option {
	return newOption(optHeads, [2]int{numQOHeads, numKVHeads}, fmt.Sprintf("%d, %d", numQOHeads, numKVHeads),
		func(c *attnConfig) { c.hq, c.hkv = numQOHeads, numKVHeads })
}

// PageSize sets the K/V page size in tokens of a DecodeSchedule node
// (required; the reference wrapper's blk_kv).
func PageSize(n int) Option {
	return newOption(optPageSize, n, fmt.Sprint(n), func(c *attnConfig) { c.pageSize = n })
}

// FixedSplitSize sets fixed_split_size (> 0: a fixed KV chunk of that many
// pages, the batch-invariant mode) of a DecodeSchedule node.
func FixedSplitSize(n int) Option {
	return newOption(optFixedSplitSize, n, fmt.Sprint(n), func(c *attnConfig) { c.fixedSplit = n })
}

// DisableSplitKV sets disable_split_kv of a DecodeSchedule node: a
// request's keys are never split. It conflicts with a FixedSplitSize(n > 0).
func DisableSplitKV() Option {
	return newOption(optDisableSplitKV, true, "", func(c *attnConfig) { c.disableSplit = true })
}

// PlanForCUDA plans a DecodeSchedule node for the CUDA path (the ops'
// CUDADo under the cuda build tag) of a GPU with sms streaming
// multiprocessors (the driver's multiprocessor count, e.g. 132 on an H100
// SXM): the KV split then gives every SM a work item at small batches (see
// plan.DecodeSchedule) instead of following the CPU's goroutine count. A
// decode attention node refuses a schedule planned for the other path: one
// with this option runs only on the CUDA path, one without it only on the
// CPU path. It conflicts with Workers (goroutines of the CPU path).
func PlanForCUDA(sms int) Option {
	return newOption(optPlanForCUDA, sms, fmt.Sprint(sms), func(c *attnConfig) { c.cudaSMs = sms })
}

// Reduce sets how BlockScores combines the query heads of a group
// (ReduceMax, the default, or ReduceMean).
func Reduce(r HeadReduce) Option {
	return newOption(optReduce, r, fmt.Sprint(r), func(c *attnConfig) { c.reduce = r })
}

// KeepFirst makes TopKBlocks always select block 0 when it is visible (the
// "attention sink").
func KeepFirst() Option {
	return newOption(optKeepFirst, true, "", func(c *attnConfig) { c.keepFirst = true })
}

// KeepLast makes TopKBlocks always select the query's last visible block
// (with causal scores, its own diagonal block).
func KeepLast() Option {
	return newOption(optKeepLast, true, "", func(c *attnConfig) { c.keepLast = true })
}

// KVLayout sets the paged K/V layout (FlashInfer's kv_layout): HND
// [num_pages, Hkv, page_size, D] (the default) or NHD
// [num_pages, page_size, Hkv, D]. For SparseAttention (with Paged),
// DecodeAttention and WritePagedKV; the CUDA path takes HND only.
func KVLayout(l PagedLayout) Option {
	return newOption(optKVLayout, l, fmt.Sprint(l), func(c *attnConfig) { c.layout = l })
}

// MaxWorkspaceBytes caps the bytes of a DecodeAttention node's split-KV
// partials and schedule, checked at construction for the longest sequences
// its page table allows (absent or 0: DefaultMaxWorkspaceBytes).
func MaxWorkspaceBytes(n int64) Option {
	return newOption(optMaxWorkspaceBytes, n, fmt.Sprint(n), func(c *attnConfig) { c.maxWorkspace = n })
}
