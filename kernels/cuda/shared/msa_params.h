/*
 * msa_params.h - kernel parameter blocks shared by the CUDA kernels and the Go
 * launcher (package github.com/sparseattn/msa/cuda, file params.go).
 *
 * Layout rules (the Go mirror reproduces them field by field, no cgo):
 *   - every device pointer is a uint64_t (Go: uint64), 8-byte aligned;
 *   - then int32_t fields (Go: int32), then float fields (Go: float32);
 *   - the total size is a multiple of 8 (explicit pad fields);
 *   - a nullable pointer is 0.
 * A static_assert below and a Go test (unsafe.Sizeof / Offsetof) pin the
 * sizes: change both sides together.
 *
 * One struct per algorithm. Kernels take ONE argument: a pointer to the
 * struct in device memory (gorgonia.org/cu's Launch copies 8 bytes per
 * argument, so larger blocks cannot travel by value).
 */
#ifndef MSA_PARAMS_H
#define MSA_PARAMS_H

#include <stdint.h>

/* storage dtypes */
enum {
    MSA_DT_F32 = 0,
    MSA_DT_BF16 = 1,
    MSA_DT_F16 = 2,
    MSA_DT_E4M3 = 3,  /* OCP float8 e4m3fn */
    MSA_DT_NVFP4 = 4  /* packed E2M1 nibbles + E4M3 block scales (128x4 layout) */
};

/* rounding of P before the P.V product (mirrors kernels/tile.Round) */
enum { MSA_ROUND_NONE = 0, MSA_ROUND_BF16 = 1, MSA_ROUND_E4M3 = 2 };

/* Sparse prefill partials (contract §3-4, 6). Grid: (capacity), block 128. */
typedef struct MsaFwdParams {
    uint64_t q;              /* [total_q, Hq, D] bf16 | e4m3 */
    uint64_t k;              /* dense [total_k, Hkv, D] | paged [num_pages, Hkv, page_size, D] (nvfp4: D/2 bytes) */
    uint64_t v;
    uint64_t k_scale;        /* nvfp4 block scales, e4m3, cuBLAS 128x4 layout; 0 otherwise */
    uint64_t v_scale;
    uint64_t k_global_scale; /* float[1] nullable (nvfp4 K global scale, applied to the scores) */
    uint64_t cu_seqlens_q;   /* int32 [B+1] */
    uint64_t cu_seqlens_k;   /* int32 [B+1] */
    uint64_t seqused_k;      /* int32 [B] nullable */
    uint64_t page_table;     /* int32 [B, page_table_stride] nullable (0 = dense K/V) */
    uint64_t row_ptr;        /* int32 [Hkv, total_rows+1] k2q CSR row pointers */
    uint64_t qsplit;         /* int32 [Hkv, qsplit_stride] q_idx | slot << 24 */
    uint64_t metadata;       /* int32 [capacity, 6] (head_kv, row, q_begin, q_count, batch, kv_block) */
    uint64_t work_count;     /* int32 [1] */
    uint64_t o_partial;      /* [num_slots, total_q, Hq, D] partial dtype */
    uint64_t lse_partial;    /* float [num_slots, total_q, Hq] */
    uint64_t tlse_partial;   /* float [num_slots, total_q, Hq] nullable (temperature LSE) */
    int32_t total_q, num_heads_q, num_heads_kv, head_dim;
    int32_t qhead_per_kv, blk_kv, page_size, page_table_stride;
    int32_t num_batch, total_rows, qsplit_stride, num_slots;
    int32_t capacity, q_dtype, kv_dtype, partial_dtype;
    int32_t causal, pv_round, pad0, pad1;
    float softmax_scale_log2; /* softmax_scale * log2(e) */
    float inv_temperature;    /* 1/T; 0 disables the temperature LSE */
} MsaFwdParams;

/* Combine of per-slot / per-split partials (contract §5, 7). Grid: ceil(rows*Hq/4), block 128.
 * mode 0 (sparse prefill): slot s of row q is partial row s*total_q + q,
 *        n = split_counts[q*Hkv + hq/qhead_per_kv].
 * mode 1 (decode): row q = b*seqlen_q + i, split s is partial row
 *        o_indptr[b] + s*q_stride + i, n = split_counts[b]. */
typedef struct MsaCombineParams {
    uint64_t o_partial;    /* [partial rows, Hq, D] partial dtype */
    uint64_t lse_partial;  /* float [partial rows, Hq] */
    uint64_t tlse_partial; /* nullable */
    uint64_t split_counts; /* int32 */
    uint64_t o_indptr;     /* int32 [B+1] (mode 1) */
    uint64_t output_scale; /* float[1] nullable (NVFP4 V global scale) */
    uint64_t out;          /* bf16 [total_q, Hq, D] */
    uint64_t lse;          /* float [total_q, Hq] */
    uint64_t tlse;         /* float [total_q, Hq] nullable */
    int32_t total_q, num_heads_q, num_heads_kv, head_dim;
    int32_t qhead_per_kv, num_slots, partial_dtype, mode;
    int32_t seqlen_q, q_stride;
} MsaCombineParams;

/* Paged decode with split-KV (contract §7). Grid: (work_count), block 128.
 * Work item w (plan.DecodeSchedule): request[w], qtile_idx[w], kv_tile[w],
 * kv_head[w], valid[w]. With split_kv
 * the CTA writes float partials at row o_indptr[b] + kv_tile*q_stride + i,
 * else the final BF16 output (times output_scale) and LSE.
 * Sparse decode when q2k != 0: row b*seqlen_q + i of KV head h attends only
 * the blocks of blk_kv tokens listed in q2k[h][b*seqlen_q + i][0..top_k)
 * (-1 = unused slot), within the item's KV chunk and its causal limit. */
typedef struct MsaDecodeParams {
    uint64_t q;              /* [B*seqlen_q, Hq, D] bf16 | e4m3 */
    uint64_t k;              /* paged [num_pages, Hkv, page_size, D] */
    uint64_t v;
    uint64_t k_scale;
    uint64_t v_scale;
    uint64_t k_global_scale; /* nullable */
    uint64_t output_scale;   /* nullable, non-split output only */
    uint64_t seqused_k;      /* int32 [B] */
    uint64_t page_table;     /* int32 [B, page_table_stride] */
    uint64_t request;        /* int32 [capacity] */
    uint64_t qtile_idx;
    uint64_t kv_tile;
    uint64_t kv_head;
    uint64_t valid;
    uint64_t o_indptr;       /* int32 [B+1] */
    uint64_t o_partial;      /* float [partial_rows, Hq, D] */
    uint64_t lse_partial;    /* float [partial_rows, Hq] */
    uint64_t out;            /* bf16 [B*seqlen_q, Hq, D] */
    uint64_t lse;            /* float [B*seqlen_q, Hq] */
    uint64_t q2k;            /* int32 [Hkv, B*seqlen_q, top_k] nullable (0 = dense decode) */
    int32_t batch, seqlen_q, num_heads_q, num_heads_kv;
    int32_t head_dim, qhead_per_kv, page_size, page_table_stride;
    int32_t q_tile, q_stride, chunk_pages, split_kv;
    int32_t work_count, q_dtype, kv_dtype, pv_round;
    int32_t top_k, blk_kv;   /* sparse decode only */
    float softmax_scale_log2;
    int32_t pad0;
} MsaDecodeParams;

/* Pipelined paged decode (sm90/sm90_decode_pipe.cu): the decode block plus
 * what its fused combine reads. With split_kv, group g = (b*num_q_tiles +
 * qt)*num_heads_kv + h (num_q_tiles = ceil(seqlen_q / q_tile)) owns
 * counter_stride counters at counters[g*counter_stride]: [0] counts the
 * merged split blocks, [1 + k] the splits of block k (blocks of
 * pipe_block(split_counts[b]) splits, at most counter_stride - 1 of them).
 * The CTA that completes a counter sets it back to 0, so the counters
 * (zeroed once when allocated) need no reset between launches. */
typedef struct MsaDecodePipeParams {
    MsaDecodeParams d;
    uint64_t split_counts;   /* int32 [B] (split_kv only) */
    uint64_t counters;       /* int32 [B * num_q_tiles * Hkv * counter_stride], all 0 between launches (split_kv only) */
    int32_t counter_stride;  /* 1 + the most split blocks of a request */
    int32_t pad0;
} MsaDecodePipeParams;

/* KV-major sparse prefill with the combine fused (sm90/sm90_fwd2.cu), one
 * launch per query window [q0, q0 + f.total_q). Grid: persistent, at most
 * one CTA per SM; the CTAs take the window's work items (f.metadata,
 * f.work_count) in order from the tile scheduler sched[0] (an atomic
 * counter). f's partial pointers are shifted by -q0 rows as for
 * msa_sparse_fwd (slot s of global row g = (query, query head) is partial
 * row s * f.total_q * Hq + g). counters[g] (shifted by -q0 * Hq) counts the
 * slots of row g written so far; the CTA that writes the last of the
 * split_counts[query * Hkv + head_kv] slots resets it to 0 and merges the
 * row into out / lse / tlse (combine.cu's mode-0 arithmetic); rows with no
 * slot get O = 0 and LSE = -inf. sched[1] counts the CTAs that fetched
 * their last item; the last one sets sched[0] and sched[1] back to 0. So
 * counters and sched (zeroed once when allocated) need no reset between
 * launches, and no combine launch follows. Partial dtype F32 or BF16. */
typedef struct MsaFwd2Params {
    MsaFwdParams f;
    uint64_t out;          /* bf16 [total rows, Hq, D], global query rows */
    uint64_t lse;          /* float [total rows, Hq] */
    uint64_t tlse;         /* float [total rows, Hq] nullable */
    uint64_t output_scale; /* float[1] nullable (NVFP4 V global scale) */
    uint64_t split_counts; /* int32 [total rows, Hkv], global query rows */
    uint64_t counters;     /* int32 [f.total_q * Hq], shifted by -q0 * Hq; 0 between launches */
    uint64_t sched;        /* int32 [2]; 0 between launches */
    int32_t q0;            /* first global query row of the window */
    int32_t pad0;
} MsaFwd2Params;

/* Query-major sparse prefill (sm80/sm80_qfwd.cu). Grid: (num_tiles), block
 * 128 (256 at D = 256). Tile t (cuda.QPlan): tiles[4t..4t+3] = (batch, KV
 * head, first token as a global query row, tokens); its blocks are
 * blocks[tile_ptr[t] .. tile_ptr[t+1]), ascending batch-local block ids of
 * blk_kv keys, and bit k of masks[i] says whether token k of the tile
 * selected blocks[i]. Row idx of a tile is token idx / qhead_per_kv, query
 * head h * qhead_per_kv + idx % qhead_per_kv. The CTA writes the final
 * BF16 output (times output_scale), LSE and temperature LSE of its rows:
 * no partials, no combine. */
typedef struct MsaQFwdParams {
    uint64_t q;              /* [total_q, Hq, D] bf16 | e4m3 */
    uint64_t k;              /* as in MsaFwdParams */
    uint64_t v;
    uint64_t k_scale;        /* nvfp4 block scales; 0 otherwise */
    uint64_t v_scale;
    uint64_t k_global_scale; /* float[1] nullable (applied to the scores) */
    uint64_t output_scale;   /* float[1] nullable (NVFP4 V global scale) */
    uint64_t cu_seqlens_q;   /* int32 [B+1] */
    uint64_t cu_seqlens_k;   /* int32 [B+1] */
    uint64_t seqused_k;      /* int32 [B] nullable */
    uint64_t page_table;     /* int32 [B, page_table_stride] nullable (0 = dense K/V) */
    uint64_t tiles;          /* int32 [num_tiles, 4] */
    uint64_t tile_ptr;       /* int32 [num_tiles+1] */
    uint64_t blocks;         /* int32 [tile_ptr[num_tiles]] */
    uint64_t masks;          /* uint64 [tile_ptr[num_tiles]] token masks */
    uint64_t out;            /* bf16 [total_q, Hq, D] */
    uint64_t lse;            /* float [total_q, Hq] */
    uint64_t tlse;           /* float [total_q, Hq] nullable */
    int32_t total_q, num_heads_q, num_heads_kv, head_dim;
    int32_t qhead_per_kv, blk_kv, page_size, page_table_stride;
    int32_t num_batch, num_tiles, q_dtype, kv_dtype;
    int32_t causal, pv_round;
    float softmax_scale_log2; /* softmax_scale * log2(e) */
    float inv_temperature;    /* 1/T; 0: the temperature LSE equals the LSE */
} MsaQFwdParams;

#ifdef __cplusplus
static_assert(sizeof(MsaFwdParams) == 17 * 8 + 20 * 4 + 2 * 4, "MsaFwdParams layout");
static_assert(sizeof(MsaCombineParams) == 9 * 8 + 10 * 4, "MsaCombineParams layout");
static_assert(sizeof(MsaDecodeParams) == 20 * 8 + 18 * 4 + 8, "MsaDecodeParams layout");
static_assert(sizeof(MsaDecodePipeParams) == 264, "MsaDecodePipeParams layout");
static_assert(sizeof(MsaFwd2Params) == sizeof(MsaFwdParams) + 7 * 8 + 2 * 4, "MsaFwd2Params layout");
static_assert(sizeof(MsaQFwdParams) == 18 * 8 + 14 * 4 + 2 * 4, "MsaQFwdParams layout");
#endif

#endif /* MSA_PARAMS_H */
