/* kernels/cuda/kcuda_attn.h — attention over the paged KV cache on the GPU.
 *
 * Two kernels behind one argument struct:
 *   k_attn_decode: flash-decoding. Each row attends independently (any
 *     number of rows per sequence works, but it is built for one). The
 *     context is cut into splits (see "Decode splits"); one CTA per
 *     (row, kv head, split) reads each K/V block once for the whole GQA group
 *     of query heads, keeps a running max/sum in F32, writes partial
 *     (max, sum, acc) to the workspace; a second kernel merges the splits
 *     (with split_counters, the last split of each row merges them itself).
 *     The grid depends only on n_rows and max_ctx, not on the contexts, so a
 *     step can be captured in a CUDA graph and replayed with other contexts
 *     up to max_ctx.
 *   k_attn_prefill: flash-attention-2 style for prefill chunks: one CTA per
 *     (tile of 64 query vectors of one sequence, kv head); a query vector is
 *     (row, query head), the heads of a GQA group side by side, so short
 *     chunks still fill the tile. K/V tiles streamed from the sequence's
 *     blocks (earlier cached blocks and the chunk's own, which
 *     k_qkv_rope_store has already written), causal by position, online
 *     softmax in F32. F16, BF16 and FP8 caches run on tensor cores
 *     (mma.sync m16n8k16, S, P and O in registers, K/V tiles double-buffered):
 *     Q is rounded to the cache's 16-bit type (F16 for FP8, whose values F16
 *     holds exactly), S = Q K^T and O += P V accumulate in F32, P is rounded
 *     to that type before P V (so outputs differ from F32 math by up to
 *     about 2^-9 |v| for BF16, 2^-12 |v| for F16); F32 caches run SIMT in
 *     F32. Handles variable-length sequences and sequences with a single row.
 *   k_attn_prefill_simt: k_attn_prefill on the SIMT F32 kernel for every
 *     kv_dt (tests and benchmarks compare the two).
 *
 * Semantics (both, and the CPU counterpart kops_attn_group_ref): row r of
 * sequence s = row_seq[r] attends to positions 0..positions[r] of s; position
 * t lives in slot block_tables[s * max_blocks_per_seq + t / block_size] *
 * block_size + t % block_size, layout kops_kv_offset (kernels/cpu/ops.h):
 * per block [n_kv_heads][block_size][head_dim]. Query head h uses kv head
 * h / (n_heads / n_kv_heads). out = softmax(scale * q·K) · V.
 *
 * A row with a negative position (graph padding) attends nothing and gets 0.
 *
 * head_dim: 64, 128 or 256 (others: ERR_UNSUPPORTED). kv_dt: DT_F16,
 * DT_BF16, DT_F32, and DT_F8_E4M3 (values stored as value / k_scale or
 * value / v_scale, both > 0, or per KV head kvh value / k_head_scale[kvh]
 * and / v_head_scale[kvh]; the scales are ignored for the other types).
 * out_dt: DT_F16, DT_BF16 or DT_F32 (others: ERR_UNSUPPORTED). q, k_cache
 * and v_cache must be 16-byte aligned (vector loads). Other argument errors:
 * ERR_INVAL; n_rows == 0 launches nothing. Plain C launchers, no
 * synchronization; kernels in kernels/cuda/k_attn.cu; tests:
 * tests/kernels/test_cuda_attn.c.
 *
 * Decode splits: n_splits (at most 32, at most max_ctx / 32) is chosen from
 * n_rows, the heads and max_ctx so that the grid fills the device; each row's
 * own context is cut into n_splits equal splits (rounded up to 32 positions)
 * inside the kernels, so a short context on a long-max_ctx graph still spreads
 * over many CTAs. Positions at or past max_ctx (or past the block table,
 * max_blocks_per_seq * block_size) are not attended: max_ctx must bound every
 * positions[r] + 1. The workspace is needed only when max_ctx > 32
 * (k_attn_workspace_bytes: 0 when one split always suffices).
 * Prefill reads seq_start, positions and max_rows_per_seq (not row_seq or
 * max_ctx); decode reads row_seq, positions and max_ctx (not seq_start).
 */
#ifndef AORTA_KERNELS_CUDA_KCUDA_ATTN_H
#define AORTA_KERNELS_CUDA_KCUDA_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct k_attn_args {
	const float *q;		    /* [n_rows, n_heads * head_dim] F32, RoPE applied */
	void *out;		    /* [n_rows, n_heads * head_dim] in out_dt */
	enum dtype out_dt;	    /* DT_F16, DT_BF16 or DT_F32 */
	const void *k_cache;	    /* this layer's K pool */
	const void *v_cache;	    /* this layer's V pool */
	enum dtype kv_dt;
	float k_scale, v_scale;	    /* DT_F8_E4M3 only */
	/* DT_F8_E4M3 only, optional: device [n_kv_heads] scales of each KV head
	 * (finite, > 0), used instead of k_scale / v_scale where not NULL */
	const float *k_head_scale, *v_head_scale;
	const int32_t *block_tables; /* [n_seqs * max_blocks_per_seq] */
	int max_blocks_per_seq;
	const int32_t *positions;   /* [n_rows] */
	const int32_t *row_seq;	    /* [n_rows] sequence of each row */
	const int32_t *seq_start;   /* [n_seqs + 1] row offsets (prefill) */
	int n_rows, n_seqs;
	int max_rows_per_seq;	    /* prefill grid: most rows any sequence has */
	int max_ctx;		    /* bound on positions[r] + 1 (decode grid) */
	int block_size, n_heads, n_kv_heads, head_dim;
	float scale;
	void *workspace;	    /* decode split partials */
	size_t workspace_bytes;
	/* Decode: NULL (a second kernel merges the splits), or n_rows * n_heads
	 * unsigned counters, zero before the call and left zero, one launch at a
	 * time per array: the last split of each (row, head chunk) to finish
	 * merges it, with the merge kernel's bits and one launch fewer. */
	unsigned *split_counters;
};

/* Workspace k_attn_decode needs for up to max_rows rows and max_ctx
 * positions (0 when one split covers max_ctx). Never decreases as max_rows or
 * max_ctx grow, so a buffer sized for the largest launch serves every
 * smaller one; the launcher checks workspace_bytes against it (ERR_INVAL). */
size_t k_attn_workspace_bytes(int max_rows, int n_heads, int head_dim, int max_ctx);

int k_attn_decode(void *stream, const struct k_attn_args *a);
int k_attn_prefill(void *stream, const struct k_attn_args *a);
int k_attn_prefill_simt(void *stream, const struct k_attn_args *a);

/* Self-test of the tensor-core helpers of kernels/cuda/kcuda_mma.h (one warp,
 * the layouts the prefill kernel relies on), for tests/kernels/test_cuda_mma.c,
 * which documents the operands (16-bit: bf16 ? BF16 : F16; 16-byte aligned)
 * and the three products written to out. 0, ERR_INVAL or ERR_DEVICE. */
int k_mma_selftest(void *stream, int bf16, const void *a, const void *bt, const void *v,
		   const float *c, float *out);

#ifdef __cplusplus
}
#endif

#endif
