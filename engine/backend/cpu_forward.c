/* engine/backend/cpu_forward.c — the Llama-family forward pass of the CPU backend over a
 * flat, already-validated batch (engine.c checks it) and the paged KV pool.
 *
 * Per layer: RMSNorm -> Q/K/V matmuls (+bias) -> per-head Q/K RMSNorm ->
 * RoPE -> K/V stored at each row's slot -> attention of every (row, GQA
 * group) over its sequence's blocks -> output matmul + residual -> RMSNorm -> SwiGLU
 * MLP + residual. Then the final norm and the LM head, for the rows that need
 * logits only. Matmuls are kcpu_matmul (threaded inside); everything else is
 * split over the pool here. Checked against numpy in tests/reference/.
 */
#include <math.h>
#include <string.h>

#include "engine/backend/cpu_backend.h"

struct fwd {
	struct cpu_backend *cb;
	const struct engine_batch *b;
	const struct cpu_layer *L;
	int layer;
	/* attention plan (plan_attention) */
	int attn_per_item; /* query heads per work item */
	int attn_tile;     /* rows per work item */
	/* add_norm job */
	const float *add_src; /* NULL: no residual add */
	const float *norm_w;
	int norm_rows;
	const int32_t *norm_row_idx; /* NULL: rows 0..norm_rows-1 */
	float *norm_out;
};

static float *scratch_of(struct cpu_backend *cb, int ith)
{
	return cb->scratch + (size_t)ith * cb->scratch_per_thread;
}

/* ---- embedding -------------------------------------------------------------- */

static void job_embed(void *p, int ith, int nth)
{
	struct fwd *f = p;
	long r0, r1;
	kpool_split(f->b->n_tokens, ith, nth, &r0, &r1);
	for (long r = r0; r < r1; r++)
		kcpu_dequant_row(&f->cb->tok_embd, f->b->tokens[r],
				 f->cb->x + r * (size_t)f->cb->cfg.hidden);
}

/* ---- x += add_src; norm_out = rmsnorm(x) ----------------------------------- */

static void job_add_norm(void *p, int ith, int nth)
{
	struct fwd *f = p;
	struct cpu_backend *cb = f->cb;
	const int H = cb->cfg.hidden;
	long i0, i1;
	if (f->add_src) { /* the residual add covers every row */
		kpool_split(f->b->n_tokens, ith, nth, &i0, &i1);
		for (long r = i0; r < i1; r++)
			kops_add(cb->isa, cb->x + r * (size_t)H, f->add_src + r * (size_t)H, H);
	}
	/* With norm_rows == n_tokens this is the same split as the add above, so
	 * a worker norms only rows it has finished; the gathered final norm
	 * (norm_row_idx) runs as its own job after the last add. */
	kpool_split(f->norm_rows, ith, nth, &i0, &i1);
	for (long i = i0; i < i1; i++) {
		long r = f->norm_row_idx ? f->norm_row_idx[i] : i;
		kops_rmsnorm(cb->isa, f->norm_out + i * (size_t)H, cb->x + r * (size_t)H, f->norm_w, H,
			     cb->cfg.rms_eps);
	}
}

/* ---- bias, Q/K norm, RoPE, KV store ---------------------------------------- */

static void add_bias(enum kops_isa isa, float *x, const float *bias, int n)
{
	if (bias)
		kops_add(isa, x, bias, n);
}

static void job_qkv_post(void *p, int ith, int nth)
{
	struct fwd *f = p;
	struct cpu_backend *cb = f->cb;
	const struct model_config *c = &cb->cfg;
	const struct cpu_layer *L = f->L;
	const int hd = c->head_dim, q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd;
	const size_t esize = cb->kv_dtype == DT_F16 ? 2 : 4;
	char *k_pool = (char *)cb->kv + (size_t)(2 * f->layer) * cb->kv_layer_bytes;
	char *v_pool = k_pool + cb->kv_layer_bytes;
	float *cos_t = scratch_of(cb, ith), *sin_t = cos_t + hd / 2;
	const enum kops_rope_style style =
		c->rope_style == ROPE_STYLE_NORM ? KOPS_ROPE_NORM : KOPS_ROPE_NEOX;
	long r0, r1;
	kpool_split(f->b->n_tokens, ith, nth, &r0, &r1);
	for (long r = r0; r < r1; r++) {
		float *q = cb->q + r * (size_t)q_dim, *k = cb->k + r * (size_t)kv_dim,
		      *v = cb->v + r * (size_t)kv_dim;
		add_bias(cb->isa, q, L->bq, q_dim);
		add_bias(cb->isa, k, L->bk, kv_dim);
		add_bias(cb->isa, v, L->bv, kv_dim);
		if (L->q_norm) {
			for (int h = 0; h < c->n_heads; h++)
				kops_rmsnorm(cb->isa, q + h * hd, q + h * hd, L->q_norm, hd, c->rms_eps);
			for (int h = 0; h < c->n_kv_heads; h++)
				kops_rmsnorm(cb->isa, k + h * hd, k + h * hd, L->k_norm, hd, c->rms_eps);
		}
		kops_rope_angles(f->b->positions[r], cb->inv_freq, hd / 2, cos_t, sin_t);
		kops_rope(cb->isa, q, c->n_heads, hd, cos_t, sin_t, style);
		kops_rope(cb->isa, k, c->n_kv_heads, hd, cos_t, sin_t, style);
		const int32_t slot = f->b->slot_mapping[r], bs = cb->block_size;
		for (int h = 0; h < c->n_kv_heads; h++) {
			size_t off = (size_t)kops_kv_offset(slot / bs, slot % bs, h, c->n_kv_heads, bs,
							    hd) * esize;
			kops_store_row(cb->kv_dtype, k_pool + off, k + h * hd, hd);
			kops_store_row(cb->kv_dtype, v_pool + off, v + h * hd, hd);
		}
	}
}

/* ---- attention -------------------------------------------------------------- */

/* Work items are (tile, heads) pairs: a tile is up to attn_tile consecutive
 * rows of one sequence (a prefill chunk's rows share each K/V load in
 * kops_attn_rows; a decode row is a tile of one), the heads are one kv head's
 * group of query heads, or a single query head when there would be fewer
 * items than workers (small decode batches), so every worker has a share of
 * the cache to read. Items are handed out round-robin: in a prefill chunk
 * later rows see longer contexts, so contiguous ranges would be unbalanced.
 * kops_attn_rows gives each (row, head) the same bits whatever its tile and
 * head split, so this plan keeps batch invariance. */
static long attn_items(const struct engine_batch *b, int tile, int items_per_tile)
{
	long n = 0;
	for (int s = 0; s < b->n_seqs; s++)
		n += (b->seq_start[s + 1] - b->seq_start[s] + tile - 1) / tile;
	return n * items_per_tile;
}

static void plan_attention(struct fwd *f, int nth)
{
	const struct model_config *c = &f->cb->cfg;
	int per_item = c->n_heads / c->n_kv_heads;
	int tile = kops_attn_tile_rows(per_item);
	if (attn_items(f->b, tile, c->n_kv_heads) < nth) {
		per_item = 1;
		tile = kops_attn_tile_rows(1);
	}
	while (tile > 1 && attn_items(f->b, tile, c->n_heads / per_item) < nth)
		tile /= 2;
	f->attn_per_item = per_item;
	f->attn_tile = tile;
}

static void job_attention(void *p, int ith, int nth)
{
	struct fwd *f = p;
	struct cpu_backend *cb = f->cb;
	const struct engine_batch *b = f->b;
	const struct model_config *c = &cb->cfg;
	const int hd = c->head_dim, q_dim = c->n_heads * hd;
	const int group = c->n_heads / c->n_kv_heads;
	const int per_item = f->attn_per_item, tile = f->attn_tile;
	const int items_per_tile = c->n_heads / per_item;
	const char *k_pool = (const char *)cb->kv + (size_t)(2 * f->layer) * cb->kv_layer_bytes;
	struct kops_attn_args a = {
		.scratch = scratch_of(cb, ith),
		.k_cache = k_pool,
		.v_cache = k_pool + cb->kv_layer_bytes,
		.kv_dtype = cb->kv_dtype,
		.block_size = cb->block_size,
		.n_kv_heads = c->n_kv_heads,
		.head_dim = hd,
		.scale = 1.0f / sqrtf((float)hd),
	};
	long first = 0; /* index of sequence s's first item */
	for (int s = 0; s < b->n_seqs; s++) {
		const int r0 = b->seq_start[s], r1 = b->seq_start[s + 1];
		const long n = (long)((r1 - r0 + tile - 1) / tile) * items_per_tile;
		a.block_table = b->block_tables + (size_t)s * b->max_blocks_per_seq;
		for (long k = ((ith - first) % nth + nth) % nth; k < n; k += nth) {
			const int r = r0 + (int)(k / items_per_tile) * tile;
			const int h0 = (int)(k % items_per_tile) * per_item; /* first query head */
			const size_t off = r * (size_t)q_dim + (size_t)h0 * hd;
			a.q = cb->q + off;
			a.out = cb->attn + off;
			a.n_ctx = b->positions[r] + 1; /* causal: up to and including itself */
			a.kv_head = h0 / group;
			kops_attn_rows(cb->isa, &a, per_item, r1 - r < tile ? r1 - r : tile, q_dim,
			               q_dim);
		}
		first += n;
	}
}

/* ---- SwiGLU ------------------------------------------------------------------ */

static void job_silu_mul(void *p, int ith, int nth)
{
	struct fwd *f = p;
	struct cpu_backend *cb = f->cb;
	const size_t F = (size_t)cb->cfg.ffn;
	long r0, r1;
	kpool_split(f->b->n_tokens, ith, nth, &r0, &r1);
	for (long r = r0; r < r1; r++)
		kops_silu_mul(cb->isa, cb->gate + r * F, cb->gate + r * F, cb->up + r * F, (int)F);
}

/* ---- the step ---------------------------------------------------------------- */

static void run_add_norm(struct fwd *f, const float *add_src, const float *w, int rows,
			 const int32_t *row_idx, float *out)
{
	f->add_src = add_src;
	f->norm_w = w;
	f->norm_rows = rows;
	f->norm_row_idx = row_idx;
	f->norm_out = out;
	kpool_run(f->cb->pool, job_add_norm, f);
}

int cpu_forward(struct backend *be, const struct engine_batch *b, float *logits)
{
	struct cpu_backend *cb = (struct cpu_backend *)be;
	const struct model_config *c = &cb->cfg;
	const int T = b->n_tokens;
	struct fwd f = {.cb = cb, .b = b};
	plan_attention(&f, kpool_size(cb->pool));
	kpool_run(cb->pool, job_embed, &f);
	for (int l = 0; l < c->n_layers; l++) {
		const struct cpu_layer *L = &cb->layers[l];
		f.L = L;
		f.layer = l;
		/* the previous layer's MLP output joins the residual here */
		run_add_norm(&f, l == 0 ? NULL : cb->tmp, L->attn_norm, T, NULL, cb->xn);
		kcpu_matmul(cb->pool, &L->wq, cb->xn, T, cb->q);
		kcpu_matmul(cb->pool, &L->wk, cb->xn, T, cb->k);
		kcpu_matmul(cb->pool, &L->wv, cb->xn, T, cb->v);
		kpool_run(cb->pool, job_qkv_post, &f);
		kpool_run(cb->pool, job_attention, &f);
		kcpu_matmul(cb->pool, &L->wo, cb->attn, T, cb->tmp);
		run_add_norm(&f, cb->tmp, L->ffn_norm, T, NULL, cb->xn);
		kcpu_matmul(cb->pool, &L->w_gate, cb->xn, T, cb->gate);
		kcpu_matmul(cb->pool, &L->w_up, cb->xn, T, cb->up);
		kpool_run(cb->pool, job_silu_mul, &f);
		kcpu_matmul(cb->pool, &L->w_down, cb->gate, T, cb->tmp);
	}
	if (b->n_logits == 0)
		return 0; /* a prefill chunk mid-prompt: the KV writes were the point */
	/* The last residual add must finish on every row before the gathered
	 * final norm reads them, hence two runs. Only rows that need logits are
	 * normed, into xn[0, n_logits), and go through the LM head. */
	run_add_norm(&f, cb->tmp, cb->out_norm, 0, NULL, cb->xn);
	run_add_norm(&f, NULL, cb->out_norm, b->n_logits, b->logits_rows, cb->xn);
	kcpu_matmul(cb->pool, &cb->lm_head, cb->xn, b->n_logits, logits);
	return 0;
}
