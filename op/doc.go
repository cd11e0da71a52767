// Package op provides block-sparse attention and paged decode attention as
// Gorgonia Ops, graph constructors in Gorgonia's style, and an eager,
// operator-level API that mirrors MiniMax's SM100 sparse-attention interface
// (sparse_atten_func, sparse_atten_nvfp4_kv_func, sparse_decode_atten_func,
// SparseDecodePagedAttentionWrapper).
//
// The common case is one call: BlockSparseAttention (graph) and
// BlockSparseAttentionFunc (eager) select each query's blocks from the
// scores of q and k and attend to them; SelectBlocks and SelectBlocksFunc
// stop after the selection; DenseAttention and DenseAttentionFunc attend
// to every key on the same kernels. For decode, PagedKVCache holds a serving
// loop's pages, page table and seqused_k, and DecodeWrapper plans and runs
// the attention over them; PagedPrefillWrapper plans and runs a chunked
// prefill over the same cache.
//
// The building blocks stay for the other cases: a graph builds the k2q CSR
// from q2k_indices (K2QCSR), then the forward schedule (FwdSchedule), then
// the attention node (SparseAttention); LSE and TemperatureLSE read the
// attention node's side results without computing anything twice.
//
// Names follow one rule: a graph constructor is named for what it adds
// (SparseAttention, K2QCSR, FwdSchedule, DecodeAttention, WritePagedKV) and
// its eager form is that name + Func (SparseAttentionFunc, K2QCSRFunc,
// FwdScheduleFunc, DecodeAttentionFunc, WritePagedKVFunc); each eager
// function's doc names the reference function it mirrors. The earlier
// reference-style names (SparseAttenFunc, BuildK2QCSR, ...) remain as
// deprecated forwarders.
//
// The eager functions take the reference's keyword arguments as structs
// (SparseArgs, DecodeArgs, PlanArgs, BlockScoreConfig, TopKConfig), except
// the eager one-call forms, which take the options of their graph forms. The
// graph constructors take their input nodes positionally and everything
// else as functional options of the one type Option:
//
//	K2QCSR            MaxSeqlenK (required), BlkKV
//	PackK2QCSR        TopK (required), TotalQ, BlkKV
//	FwdSchedule       QheadPerKV (required), Workers
//	SparseAttention   Causal, SoftmaxScale, Temperature, PartialDtype,
//	                  MMADtypes, Workers, Paged, KVLayout, NVFP4KV, SharedKV
//	BlockScores       MaxSeqlenK (required), BlkKV, Causal, SoftmaxScale,
//	                  Reduce, Workers
//	TopKBlocks        TopK (required), KeepFirst, KeepLast
//	DecodeSchedule    Heads, PageSize (required), SeqlenQ, Workers,
//	                  FixedSplitSize, DisableSplitKV, PlanForCUDA
//	DecodeAttention   BlkKV, SoftmaxScale, KVLayout, SharedKV,
//	                  MaxWorkspaceBytes
//	WritePagedKV      SeqlenQ, KVLayout
//	SelectBlocks      TopK, MaxSeqlenK (required), BlkKV, Causal,
//	                  SoftmaxScale, Reduce, Workers, KeepFirst, KeepLast
//	BlockSparseAttention  those of SelectBlocks and Temperature,
//	                  PartialDtype, MMADtypes, SharedKV
//	DenseAttention    MaxSeqlenK (required), BlkKV, Causal, SoftmaxScale,
//	                  Temperature, PartialDtype, MMADtypes, Workers, SharedKV
//
// An option a constructor does not take, a missing required one, or one
// given twice with different arguments is an *ArgError whose Arg is the
// option's name. A value given to two constructors (FwdSchedule's
// QheadPerKV and Workers, then SparseAttention's heads and Workers;
// BlockScores' blk_kv, through TopKBlocks, then K2QCSR's or
// DecodeAttention's; BlockScores' Causal, then SparseAttention's) is
// compared at construction and a mismatch names it.
// Every input is validated with the reference's checks plus index range
// checks; bad input returns an error naming the argument, never a panic.
//
// The package is thin: planning lives in kernels/plan, execution in
// kernels/attn, kernels/tile and kernels/grad, numerics in kernels/lowp.
// Its own files are grouped by concern: graph_*.go the graph nodes (their
// CUDA path in graph_cuda*.go), the eager functions in files named for
// what they compute (sparse.go, dense.go, select*.go, csr.go, schedule.go,
// merge.go), decode*.go, prefill_wrapper.go, paged_cache.go and
// kv_cache.go the decode and prefill wrappers and the cache, grad_*.go the
// gradients, cp_*.go and graph_cp*.go context parallelism, validate_*.go
// the sparse-argument checks. What these declarations run sits in
// op/internal, one concern per package, none of which imports op:
// validate (the error types, exported here as aliases, and the rules every
// entry point shares), decode (decode metadata, limits, stale plans, the
// float32 path), gradimpl (float32 forward and backward execution),
// selection (block scores and top-k selection), merge (the (O, LSE) merge)
// and blocks (dense attention's block lists).
package op
