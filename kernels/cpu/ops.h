/* kernels/cpu/ops.h — the non-matmul ops of the CPU forward pass: RMSNorm,
 * RoPE, SiLU·mul, residual add, KV row stores and paged attention.
 *
 * Every op has a plain reference (`kops_*_ref`: readable, scalar, one thread)
 * and a fast version (`kops_*`) that takes the instruction set to use, so a
 * test can run each ISA the machine has against the reference
 * (tests/kernels/test_ops.c). kops_isa_detect() picks the best one at run time;
 * the engine stores it. Ops work on one row at a time, attention on one
 * KV head's query heads for one row or a run of consecutive rows of one
 * sequence (kops_attn_rows): threading is the caller's (engine/backend/cpu_forward.c
 * splits rows, row tiles and heads over the pool). Stateless; any thread.
 * All pointers are borrowed for the call. Attention results are batch
 * invariant: bit for bit the same however rows and heads are grouped into
 * calls (see kops_attn_rows).
 *
 * Paged KV layout, per layer and for K and V separately: n_blocks blocks,
 * each [n_kv_heads][block_size][head_dim] values in F32 or F16, so the keys
 * of one head inside a block are contiguous (attention streams them; a
 * slot-major layout would stride by n_kv_heads * head_dim and alias in the
 * caches). Slot s = block_id * block_size + j. See kops_kv_offset.
 */
#ifndef AORTA_KERNELS_CPU_OPS_H
#define AORTA_KERNELS_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

/* Element offset of (block, position j in it, kv head) in one layer's K or V pool. */
static inline long kops_kv_offset(long block, int j, int kv_head, int n_kv_heads, int block_size,
				  int head_dim)
{
	return ((block * n_kv_heads + kv_head) * block_size + j) * (long)head_dim;
}

enum kops_isa {
	KOPS_ISA_SCALAR = 0, /* portable C */
	KOPS_ISA_AVX2,	     /* AVX2 + FMA + F16C */
	KOPS_ISA_AVX512,     /* AVX-512F (+ the AVX2 set) */
	KOPS_ISA__COUNT
};

/* The best ISA this CPU supports (and this build can emit). */
enum kops_isa kops_isa_detect(void);
const char *kops_isa_name(enum kops_isa isa);

/* RoPE pairing (same meaning as engine/model/model.h's enum rope_style). */
enum kops_rope_style { KOPS_ROPE_NEOX = 0, KOPS_ROPE_NORM = 1 };

/* out[i] = x[i] / rms(x) * w[i]; out may alias x. */
void kops_rmsnorm_ref(float *out, const float *x, const float *w, int n, float eps);
void kops_rmsnorm(enum kops_isa isa, float *out, const float *x, const float *w, int n, float eps);

/* x[i] += y[i] */
void kops_add_ref(float *x, const float *y, int n);
void kops_add(enum kops_isa isa, float *x, const float *y, int n);

/* out[i] = silu(gate[i]) * up[i]; out may alias gate. */
void kops_silu_mul_ref(float *out, const float *gate, const float *up, int n);
void kops_silu_mul(enum kops_isa isa, float *out, const float *gate, const float *up, int n);

/* cos/sin of pos * inv_freq[i] for i < half (angles computed in double so a
 * large position keeps its precision). */
void kops_rope_angles(int pos, const float *inv_freq, int half, float *cos_out, float *sin_out);
/* Rotate n_heads heads of head_dim (even) values in x in place by the angles
 * above (half = head_dim / 2). NEOX pairs (i, i+half); NORM pairs (2i, 2i+1). */
void kops_rope_ref(float *x, int n_heads, int head_dim, const float *cos_t, const float *sin_t,
		   enum kops_rope_style style);
void kops_rope(enum kops_isa isa, float *x, int n_heads, int head_dim, const float *cos_t,
	       const float *sin_t, enum kops_rope_style style);

/* Store n floats from src into dst of dtype kv (DT_F32 or DT_F16). */
void kops_store_row(enum dtype kv, void *dst, const float *src, int n);

/* One query head attending over a sequence's paged KV.
 * q: [head_dim]; out: [head_dim]; scratch: [n_ctx] floats.
 * Positions 0..n_ctx-1 of the sequence live in slots
 * block_table[t / block_size] * block_size + t % block_size; the caller has
 * checked every block id. kv_head selects the head inside a slot.
 * out = softmax(scale * q·K[t]) · V[t] over t < n_ctx. */
struct kops_attn_args {
	const float *q;
	float *out;
	float *scratch;
	const void *k_cache; /* layer's K pool, kv dtype */
	const void *v_cache; /* layer's V pool, kv dtype */
	enum dtype kv_dtype; /* DT_F32 or DT_F16 */
	const int32_t *block_table;
	int block_size;
	int n_ctx;
	int kv_head;
	int n_kv_heads;
	int head_dim;
	float scale;
};
void kops_attn_head_ref(const struct kops_attn_args *a);
void kops_attn_head(enum kops_isa isa, const struct kops_attn_args *a);

/* The n_q query heads that share kv_head (GQA), in one pass over the cache
 * so each K/V row is read once for all of them: q and out are [n_q, head_dim]
 * (consecutive heads); scratch is kops_attn_scratch_floats(n_q, n_ctx,
 * head_dim) floats (the reference needs [n_ctx]). Same math as n_q calls of
 * kops_attn_head; kops_attn_group(isa, a, n_q) is kops_attn_rows(isa, a, n_q,
 * 1, ...). */
void kops_attn_group_ref(const struct kops_attn_args *a, int n_q);
void kops_attn_group(enum kops_isa isa, const struct kops_attn_args *a, int n_q);

/* n_rows consecutive query rows of one sequence (rows of a prefill chunk are
 * at consecutive positions) for the n_q heads of kv_head: row i's queries are
 * at q + i * q_stride ([n_q, head_dim]), its output at out + i * out_stride,
 * its context is n_ctx + i. On AVX-512 the rows are cut into tiles of
 * kops_attn_tile_rows(n_q) rows whose queries share every K/V load; other
 * ISAs take one row at a time.
 *
 * Batch invariance: for every ISA, each (row, head) result is bit for bit the
 * same as with that row alone (n_rows 1) and with any split of the heads
 * (n_q 1 per head): the floating-point operations of one (row, head) do not
 * depend on which other rows and heads share the call. So a sequence's
 * output does not depend on how its prompt is chunked or batched. */
void kops_attn_rows(enum kops_isa isa, const struct kops_attn_args *a, int n_q, int n_rows,
                    long q_stride, long out_stride);

/* Rows per tile for n_q heads: about KOPS_ATTN_TILE_Q queries share each
 * transposed K block (the AVX-512 kernel cuts tiles shorter past 2048
 * positions, to bound its scratch). A caller splitting work should hand out
 * whole tiles. */
#define KOPS_ATTN_TILE_Q 64
static inline int kops_attn_tile_rows(int n_q)
{
	return n_q >= KOPS_ATTN_TILE_Q ? 1 : KOPS_ATTN_TILE_Q / n_q;
}

/* Scratch floats that kops_attn_group and kops_attn_rows need with at most
 * n_q heads, rows of at most head_dim values and last-row contexts of at most
 * max_ctx positions. */
size_t kops_attn_scratch_floats(int n_q, int max_ctx, int head_dim);

/* Index of the largest value (the first on ties); -1 when n <= 0. */
int kops_argmax(const float *x, int n);

#endif
