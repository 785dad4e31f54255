/* engine/backend/cuda_forward.c — the CUDA backend's step (forward and
 * forward_sample of the vtable), the decode CUDA graphs and the sampling on
 * the device. The reference it must match is engine/backend/cpu_forward.c.
 *
 * A step: copy the batch metadata, embed, then per layer
 *   xn = rmsnorm(x); qkv = xn Wqkv; q, K/V-store = rope(...); attn = paged
 *   attention (flash-decoding when every sequence has one row, else the
 *   prefill kernel); x += attn Wo (the residual add is the GEMM's beta = 1);
 *   xn = rmsnorm(x); gu = xn Wgu; act = silu(g) * u; x += act Wdown;
 * then the final norm of the rows that need logits, the LM head, and one copy
 * of the logits to the host. Where a projection runs as a GEMV (few rows),
 * the norm after it (the next layer's input norm after down) and SwiGLU are
 * its epilogue (k_gemv_epi), and decode attention merges its own splits:
 * six launches a layer instead of ten, with the same bits. Where a
 * projection runs W8A8 (INT8 / FP8 weights past W8_GEMV_MAX_T rows: prefill
 * and larger decode batches), the norm or SwiGLU in front of it writes the
 * per-token codes of its rows (k_rmsnorm_quant, k_silu_mul_quant) instead
 * of the 16-bit rows k_quant_rows would read back, again with the same bits
 * (struct proj_in). AORTA_CUDA_FUSION=0
 * turns all of it off, for the benchmark's A/B. Pure-decode steps of up to
 * GRAPH_MAX sequences are captured once per padded batch size into a CUDA
 * graph and replayed (padding rows write no KV: slot -1). Everything runs on
 * one stream; forward returns after the logits are on the host (forward_sample:
 * after the sampled tokens are).
 *
 * Tests: tests/engine/test_cuda_engine.c (logits vs the CPU engine, greedy
 * batch invariance, graphs vs eager, device sampling vs k_sample_ref);
 * kernels: tests/kernels/.
 */
#include "engine/backend/backend.h"

#if AORTA_HAVE_CUDA

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "engine/backend/cuda_internal.h"
#include "kernels/cpu/sample_ref.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_attn.h"
#include "kernels/cuda/kcuda_gemm.h"
#include "kernels/cuda/kcuda_gemv.h"
#include "kernels/cuda/kcuda_ops.h"
#include "kernels/cuda/kcuda_quant.h"
#include "kernels/sample.h"

void cuda_drop_graphs(struct cuda_backend *cb)
{
	for (int i = 0; i < N_GRAPH_SIZES; i++) {
		k_cuda_graph_destroy(cb->graphs[i]);
		cb->graphs[i] = NULL;
	}
}

/* ---- the step ------------------------------------------------------------------- */

/* 8-bit weights for a long batch: dequantize to the compute dtype, then the
 * 16-bit GEMM (the weight-only dequantizing GEMM). */
static int dequant_gemm(struct cuda_backend *cb, const struct cu_w *w, const void *x, int t,
			float *y, int accumulate)
{
	int rc = k_dequant_w8(cb->stream, w->d, w->dt, w->d_scale, w->d_scale ? w->n : 0, w->d_q8d,
			      w->n, w->k, cb->wscratch, cb->gdt);
	return rc ? rc : k_gemm(cb->blas, cb->wscratch, cb->gdt, w->n, w->k, x, t, y, accumulate);
}

/* Y (+)= X W^T for any weight dtype; x is the 16-bit activation [t, w->k].
 * Few rows (see GEMV16_MAX_T & co.): k_gemv, which reads W once at memory
 * bandwidth. Above: cuBLAS for 16-bit weights; W8A8 through cuBLASLt for
 * INT8 / FP8 (FP8 only with FP8 tensor cores; shapes cuBLASLt's 8-bit
 * kernels refuse fall back) and the dequantizing GEMM for Q8_0. A shape
 * k_gemv refuses (k not a multiple of its granularity) takes the older
 * kernels (k_gemv_w8, cuBLAS). */
static int gemv_max_t(const struct cu_w *w)
{
	const bool w16 = w->dt == DT_F16 || w->dt == DT_BF16;
	return w16 ? GEMV16_MAX_T : w->dt == DT_Q8_0 ? Q8_GEMV_MAX_T : W8_GEMV_MAX_T;
}

/* Whether a projection of t rows with w runs W8A8 in matmul (per-token codes
 * of its input, then k_gemm_w8a8): INT8 / FP8 weights past the GEMV rows,
 * shapes cuBLASLt's 8-bit kernels take, FP8 only with FP8 tensor cores. */
static bool w8a8_path(const struct cuda_backend *cb, const struct cu_w *w, int t)
{
	if (t <= gemv_max_t(w) || (w->dt != DT_I8 && w->dt != DT_F8_E4M3))
		return false;
	return w->n % 16 == 0 && w->k % 16 == 0 && (w->dt == DT_I8 || cb->props.has_fp8);
}

/* x NULL: the input's per-token codes are in xq / xq_scale already (a
 * W8A8 projection only, w8a8_path); ERR_UNSUPPORTED then means the GEMM
 * turned the shape down and wants the 16-bit rows (project). */
static int matmul(struct cuda_backend *cb, const struct cu_w *w, const void *x, int t, float *y,
		  int accumulate)
{
	const bool w16 = w->dt == DT_F16 || w->dt == DT_BF16;
	if (t <= gemv_max_t(w)) {
		int rc = k_gemv(cb->stream, w->d, w->dt, w->d_scale, w->d_scale ? w->n : 0,
				w->d_q8d, w->n, w->k, x, cb->gdt, t, y, accumulate);
		if (rc != ERR_UNSUPPORTED)
			return rc;
		if (w->dt == DT_Q8_0)
			return k_gemv_q8_0r(cb->stream, w->d, w->d_q8d, w->n, w->k, x, cb->gdt, t,
					    y, accumulate);
		if (!w16)
			return k_gemv_w8(cb->stream, w->d, w->dt, w->d_scale,
					 w->d_scale ? w->n : 0, w->n, w->k, x, cb->gdt, t, y,
					 accumulate);
	}
	if (w16)
		return k_gemm(cb->blas, w->d, w->dt, w->n, w->k, x, t, y, accumulate);
	/* Q8_0; cuBLASLt's 8-bit kernels want n and k multiples of 16 (e.g. not
	 * an 8-bit LM head over a ragged vocabulary) and FP8 tensor cores for FP8 */
	if (!w8a8_path(cb, w, t))
		return dequant_gemm(cb, w, x, t, y, accumulate);
	int rc = x ? k_quant_rows(cb->stream, x, cb->gdt, t, w->k, w->dt, cb->xq, cb->xq_scale) : 0;
	if (!rc)
		rc = k_gemm_w8a8(cb->blas, w->d, w->dt, w->d_scale, w->n, w->n, w->k, cb->xq,
				 cb->xq_scale, t, y, accumulate);
	if (rc == ERR_UNSUPPORTED && x) /* the GEMM refused the shape */
		rc = dequant_gemm(cb, w, x, t, y, accumulate);
	return rc;
}

/* A projection's input: the 16-bit rows at x, or (quantized) their
 * per-token codes in xq / xq_scale, which the kernel that made them wrote
 * instead of x (k_rmsnorm_quant, k_silu_mul_quant: the W8A8 prefill of
 * 8-bit weights, with fusion on). If the GEMM then turns the shape down
 * after all, x is made: the norm of the residual x with remake_norm, or
 * (NULL) SwiGLU of gu. */
struct proj_in {
	const void *x;
	bool quantized;
	const float *remake_norm;
};

static int project(struct cuda_backend *cb, const struct cu_w *w, const struct proj_in *in, int t,
		   float *y, int accumulate)
{
	if (!in->quantized)
		return matmul(cb, w, in->x, t, y, accumulate);
	int rc = matmul(cb, w, NULL, t, y, accumulate);
	if (rc != ERR_UNSUPPORTED)
		return rc;
	const struct model_config *c = &cb->cfg;
	rc = in->remake_norm ? k_add_rmsnorm(cb->stream, cb->x, NULL, in->remake_norm, t, c->hidden,
					     c->rms_eps, cb->xn, cb->gdt)
			     : k_silu_mul(cb->stream, cb->gu, t, c->ffn, cb->act, cb->gdt);
	return rc ? rc : matmul(cb, w, in->x, t, y, accumulate);
}

/* The projection with its epilogue fused (k_gemv_epi) when fusion is on and
 * the step is a GEMV of a shape k_gemv_epi takes: *fused tells. Otherwise
 * nothing is launched and the caller runs the unfused steps. */
static int try_fused(struct cuda_backend *cb, const struct cu_w *w, const void *x, int t,
		     float *y, const struct k_gemv_epi *e, bool *fused)
{
	*fused = false;
	if (!cb->fuse || t > gemv_max_t(w) || (t + 7) / 8 > GEMV_COUNTERS)
		return 0;
	int rc = k_gemv_epi(cb->stream, w->d, w->dt, w->d_scale, w->d_scale ? w->n : 0, w->d_q8d,
			    w->n, w->k, x, cb->gdt, t, y, 1, e);
	if (rc == ERR_UNSUPPORTED)
		return 0;
	*fused = !rc;
	return rc;
}

/* xn = rmsnorm(x) * norm_w, the input of projection next: as its per-token
 * codes (k_rmsnorm_quant) when next runs W8A8 and fusion is on, else the
 * 16-bit rows. */
static int norm_for(struct cuda_backend *cb, const float *norm_w, int t, const struct cu_w *next,
		    struct proj_in *in)
{
	const struct model_config *c = &cb->cfg;
	*in = (struct proj_in){ .x = cb->xn, .remake_norm = norm_w };
	if (cb->fuse && w8a8_path(cb, next, t)) {
		int rc = k_rmsnorm_quant(cb->stream, cb->x, norm_w, t, c->hidden, c->rms_eps, cb->gdt,
					 next->dt, cb->xq, cb->xq_scale);
		if (rc != ERR_UNSUPPORTED) {
			in->quantized = !rc;
			return rc;
		}
	}
	return k_add_rmsnorm(cb->stream, cb->x, NULL, norm_w, t, c->hidden, c->rms_eps, cb->xn,
			     cb->gdt);
}

/* x += in W^T, then the input of projection next: rmsnorm(x) * norm_w
 * (norm_w NULL: no norm, next and *out unused). */
static int proj_add_norm(struct cuda_backend *cb, const struct cu_w *w, const struct proj_in *in,
			 int t, const float *norm_w, const struct cu_w *next, struct proj_in *out)
{
	bool fused = false;
	int rc = 0;
	if (norm_w && !in->quantized) {
		const struct k_gemv_epi e = {
			.kind = K_GEMV_EPI_RMSNORM, .out = cb->xn, .out_dt = cb->gdt,
			.norm_w = norm_w, .eps = cb->cfg.rms_eps, .counters = cb->gemv_cnt,
		};
		*out = (struct proj_in){ .x = cb->xn, .remake_norm = norm_w };
		if ((rc = try_fused(cb, w, in->x, t, cb->x, &e, &fused)) || fused)
			return rc;
	}
	if ((rc = project(cb, w, in, t, cb->x, 1)) || !norm_w)
		return rc;
	return norm_for(cb, norm_w, t, next, out);
}

/* silu(gate) * up of in W_gu^T, the input of projection next (down). */
static int proj_swiglu(struct cuda_backend *cb, const struct cu_w *w, const struct proj_in *in,
		       int t, const struct cu_w *next, struct proj_in *out)
{
	const struct k_gemv_epi e = {
		.kind = K_GEMV_EPI_SILU_MUL, .out = cb->act, .out_dt = cb->gdt,
	};
	*out = (struct proj_in){ .x = cb->act };
	bool fused = false;
	int rc = in->quantized ? 0 : try_fused(cb, w, in->x, t, NULL, &e, &fused);
	if (rc || fused)
		return rc;
	if ((rc = project(cb, w, in, t, cb->gu, 0)))
		return rc;
	if (cb->fuse && w8a8_path(cb, next, t)) {
		rc = k_silu_mul_quant(cb->stream, cb->gu, t, cb->cfg.ffn, cb->gdt, next->dt, cb->xq,
				      cb->xq_scale);
		if (rc != ERR_UNSUPPORTED) {
			out->quantized = !rc;
			return rc;
		}
	}
	return k_silu_mul(cb->stream, cb->gu, t, cb->cfg.ffn, cb->act, cb->gdt);
}

/* Everything from the embedding to the logits of rows [0, n_out) of the
 * gathered rows (d_meta's logit_rows), for t rows in n_seqs sequences. All
 * inputs are in d_meta already; nothing here synchronizes, so it can be
 * captured. decode: every sequence has one row (flash-decoding kernel). */
static int run_layers(struct cuda_backend *cb, int t, int n_seqs, int max_rows, int max_ctx,
		      bool decode, int n_out)
{
	const struct model_config *c = &cb->cfg;
	const int32_t *dm = cb->d_meta;
	int rc = k_embed(cb->stream, cb->embd, cb->gdt, c->hidden, dm + cb->meta.tokens, t, cb->x);
	struct proj_in in; /* the QKV input; later layers' end the layer before (proj_add_norm) */
	if (!rc)
		rc = norm_for(cb, cb->layers[0].attn_norm, t, &cb->layers[0].qkv, &in);
	for (int l = 0; l < c->n_layers && !rc; l++) {
		const struct cu_layer *L = &cb->layers[l];
		char *k_pool = (char *)cb->kv + (size_t)(2 * l) * cb->kv_layer_bytes;
		struct k_qkv_args qa = {
			.qkv = cb->qkv, .bias = L->bqkv, .q_norm = L->q_norm, .k_norm = L->k_norm,
			.eps = c->rms_eps, .inv_freq = cb->inv_freq,
			.rope_style = c->rope_style == ROPE_STYLE_NORM ? 1 : 0,
			.positions = dm + cb->meta.positions, .slots = dm + cb->meta.slots,
			.n_rows = t, .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads,
			.head_dim = c->head_dim, .block_size = cb->block_size, .q = cb->q,
			.k_cache = k_pool, .v_cache = k_pool + cb->kv_layer_bytes, .kv_dt = cb->kv_dt,
			.k_scale = L->k_scale, .v_scale = L->v_scale,
			.k_head_scale = L->k_head_scale, .v_head_scale = L->v_head_scale,
		};
		struct k_attn_args aa = {
			.q = cb->q, .out = cb->attn, .out_dt = cb->gdt, .k_cache = k_pool,
			.v_cache = k_pool + cb->kv_layer_bytes, .kv_dt = cb->kv_dt,
			.k_scale = L->k_scale, .v_scale = L->v_scale,
			.k_head_scale = L->k_head_scale, .v_head_scale = L->v_head_scale,
			.block_tables = dm + cb->meta.tables,
			.max_blocks_per_seq = cb->o.max_blocks_per_seq,
			.positions = dm + cb->meta.positions, .row_seq = dm + cb->meta.row_seq,
			.seq_start = dm + cb->meta.seq_start, .n_rows = t, .n_seqs = n_seqs,
			.max_rows_per_seq = max_rows, .max_ctx = max_ctx,
			.block_size = cb->block_size, .n_heads = c->n_heads,
			.n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim,
			.scale = 1.0f / sqrtf((float)c->head_dim), .workspace = cb->attn_ws,
			.workspace_bytes = cb->attn_ws_bytes,
			.split_counters = cb->fuse ? cb->attn_cnt : NULL,
		};
		const struct cu_layer *N = l + 1 < c->n_layers ? &cb->layers[l + 1] : NULL;
		const struct proj_in attn_in = { .x = cb->attn };
		struct proj_in ffn_in, down_in;
		if ((rc = project(cb, &L->qkv, &in, t, cb->qkv, 0)) ||
		    (rc = k_qkv_rope_store(cb->stream, &qa)) ||
		    (rc = decode ? k_attn_decode(cb->stream, &aa) : k_attn_prefill(cb->stream, &aa)) ||
		    (rc = proj_add_norm(cb, &L->o, &attn_in, t, L->ffn_norm, &L->gu, &ffn_in)) ||
		    (rc = proj_swiglu(cb, &L->gu, &ffn_in, t, &L->down, &down_in)) ||
		    (rc = proj_add_norm(cb, &L->down, &down_in, t, N ? N->attn_norm : NULL,
					N ? &N->qkv : NULL, &in)))
			break;
	}
	if (!rc && n_out > 0)
		rc = k_rmsnorm_rows(cb->stream, cb->x, dm + cb->meta.logit_rows, n_out, cb->out_norm,
				    c->hidden, c->rms_eps, cb->xn, cb->gdt);
	if (!rc && n_out > 0)
		rc = matmul(cb, &cb->lm_head, cb->xn, n_out, cb->logits, 0);
	return rc;
}

/* The LM head for gathered rows [first, first + n) when there are more
 * logits rows than one pass holds: re-norm those rows into xn and multiply. */
static int lm_head_rows(struct cuda_backend *cb, int first, int n)
{
	const struct model_config *c = &cb->cfg;
	int rc = k_rmsnorm_rows(cb->stream, cb->x, cb->d_meta + cb->meta.logit_rows + first, n,
				cb->out_norm, c->hidden, c->rms_eps, cb->xn, cb->gdt);
	return rc ? rc : matmul(cb, &cb->lm_head, cb->xn, n, cb->logits, 0);
}

static int copy_logits(struct cuda_backend *cb, float *logits, int first, int n)
{
	const size_t row = (size_t)cb->cfg.vocab * sizeof(float);
	int rc = k_cuda_memcpy_d2h_async(cb->stream, cb->h_logits, cb->logits, (size_t)n * row);
	if (!rc)
		rc = k_cuda_stream_sync(cb->stream);
	if (!rc)
		memcpy((char *)logits + (size_t)first * row, cb->h_logits, (size_t)n * row);
	return rc;
}

static int graph_index(int n)
{
	int i = 0;
	while ((1 << i) < n)
		i++;
	return i;
}

/* Stage the batch metadata (padded to t_pad rows / sequences for a graph) and
 * copy it to the device. Returns the host-known maxima. */
static int stage(struct cuda_backend *cb, const struct engine_batch *b, int t_pad, int *max_rows,
		 int *max_ctx)
{
	const struct cu_meta *m = &cb->meta;
	int32_t *h = cb->h_meta;
	const int MB = cb->o.max_blocks_per_seq, T = b->n_tokens;
	memcpy(h + m->tokens, b->tokens, (size_t)T * 4);
	memcpy(h + m->positions, b->positions, (size_t)T * 4);
	memcpy(h + m->slots, b->slot_mapping, (size_t)T * 4);
	memcpy(h + m->seq_start, b->seq_start, (size_t)(b->n_seqs + 1) * 4);
	*max_rows = 0;
	*max_ctx = 0;
	for (int s = 0; s < b->n_seqs; s++) {
		const int rows = b->seq_start[s + 1] - b->seq_start[s];
		*max_rows = rows > *max_rows ? rows : *max_rows;
		*max_ctx = b->context_len[s] > *max_ctx ? b->context_len[s] : *max_ctx;
		for (int r = b->seq_start[s]; r < b->seq_start[s + 1]; r++)
			h[m->row_seq + r] = s;
		const int n_tab = (b->context_len[s] + cb->block_size - 1) / cb->block_size;
		int32_t *dst = h + m->tables + (size_t)s * MB;
		memcpy(dst, b->block_tables + (size_t)s * b->max_blocks_per_seq, (size_t)n_tab * 4);
		memset(dst + n_tab, 0, (size_t)(MB - n_tab) * 4);
	}
	int n_seqs = b->n_seqs;
	for (int r = T; r < t_pad; r++) { /* graph padding: own sequence, block 0, no store */
		h[m->tokens + r] = 0;
		h[m->positions + r] = 0;
		h[m->slots + r] = -1;
		h[m->row_seq + r] = n_seqs;
		h[m->seq_start + n_seqs] = r;
		memset(h + m->tables + (size_t)n_seqs * MB, 0, (size_t)MB * 4);
		n_seqs++;
	}
	h[m->seq_start + n_seqs] = t_pad > T ? t_pad : T;
	if (t_pad > 0) { /* a graph computes every row's logits */
		for (int r = 0; r < t_pad; r++)
			h[m->logit_rows + r] = r;
	} else {
		memcpy(h + m->logit_rows, b->logits_rows, (size_t)b->n_logits * 4);
	}
	return k_cuda_memcpy_h2d_async(cb->stream, cb->d_meta, h,
				       (m->tables + (size_t)n_seqs * MB) * sizeof(int32_t));
}

/* Capture (once per padded size) and replay the decode step. *eager is set
 * when the graph could not be captured (a library refused it): graphs are
 * then off for good and the caller runs the step eagerly; nothing of the
 * step has been done then but KV writes the eager step repeats. */
static int forward_graph(struct cuda_backend *cb, const struct engine_batch *b, float *logits,
			 bool *eager)
{
	const int gi = graph_index(b->n_tokens), t_pad = 1 << gi;
	int max_rows, max_ctx;
	*eager = false;
	int rc = stage(cb, b, t_pad, &max_rows, &max_ctx);
	if (rc)
		return rc;
	if (!cb->graphs[gi]) {
		/* Warm-up: the same padded step once, eagerly (it writes the KV
		 * values the replay writes again), so every kernel module, cuBLAS
		 * heuristic and launcher check has run before the capture. The
		 * grid of the decode attention depends on max_ctx only through the
		 * capacity, so one capture serves every later context. */
		if ((rc = run_layers(cb, t_pad, t_pad, 1, cb->max_ctx, true, t_pad)) ||
		    (rc = k_cuda_stream_sync(cb->stream)))
			return rc;
		void *g = NULL;
		int rc_end = 0;
		for (int attempt = 0; attempt < 2; attempt++) {
			g = NULL;
			rc_end = 0;
			if (!(rc = k_cuda_graph_begin(cb->stream))) {
				rc = run_layers(cb, t_pad, t_pad, 1, cb->max_ctx, true, t_pad);
				rc_end = k_cuda_graph_end(cb->stream, &g);
			}
			if (!(rc || rc_end) || !k_cuda_pdl() || (rc && rc != ERR_DEVICE))
				break;
			/* a driver that cannot capture programmatic launches: capture
			 * again without them */
			k_cuda_graph_destroy(g);
			log_warn("cuda", "CUDA graph capture with programmatic dependent launch "
					 "failed (%s); PDL off", k_cuda_last_error());
			k_cuda_set_pdl(0);
		}
		if (rc || rc_end) {
			k_cuda_graph_destroy(g);
			if (rc && rc != ERR_DEVICE)
				return rc;
			log_warn("cuda", "CUDA graph capture failed (%s); running decode steps eagerly",
				 k_cuda_last_error());
			cb->graphs_ok = false;
			cuda_drop_graphs(cb);
			*eager = true;
			return 0;
		}
		cb->graphs[gi] = g;
	}
	if ((rc = k_cuda_graph_launch(cb->graphs[gi], cb->stream)))
		return rc;
	if (!logits)
		return 0; /* the caller samples on the device: rows 0..n-1 of cb->logits */
	/* rows needing logits, in order: decode batches ask for every row, but
	 * copy exactly the ones asked for */
	const size_t row = (size_t)cb->cfg.vocab * sizeof(float);
	if ((rc = k_cuda_memcpy_d2h_async(cb->stream, cb->h_logits, cb->logits,
					  (size_t)b->n_tokens * row)) ||
	    (rc = k_cuda_stream_sync(cb->stream)))
		return rc;
	for (int i = 0; i < b->n_logits; i++)
		memcpy((char *)logits + (size_t)i * row, (char *)cb->h_logits +
			       (size_t)b->logits_rows[i] * row, row);
	return 0;
}

static bool graph_eligible(const struct cuda_backend *cb, const struct engine_batch *b)
{
	if (cb->o.enforce_eager || !cb->graphs_ok || b->n_tokens != b->n_seqs ||
	    b->n_tokens > GRAPH_MAX || b->n_logits == 0)
		return false;
	const int t_pad = 1 << graph_index(b->n_tokens);
	return t_pad <= cb->max_t && t_pad <= LOGIT_ROWS;
}

/* A failed step may leave work queued that still reads the pinned staging
 * area: drain the stream before the next step rewrites it. */
static int step_failed(struct cuda_backend *cb, int rc)
{
	k_cuda_stream_sync(cb->stream);
	cuda_zero_counters(cb); /* a launch cut short may leave a fusion counter counting */
	return rc;
}

int cuda_forward(struct backend *be, const struct engine_batch *b, float *logits)
{
	struct cuda_backend *cb = (struct cuda_backend *)be;
	int rc;
	if (graph_eligible(cb, b)) {
		bool eager;
		rc = forward_graph(cb, b, logits, &eager);
		if (rc || !eager)
			return rc ? step_failed(cb, rc) : 0;
	}
	int max_rows, max_ctx;
	if ((rc = stage(cb, b, 0, &max_rows, &max_ctx)))
		return step_failed(cb, rc);
	const int first = b->n_logits < LOGIT_ROWS ? b->n_logits : LOGIT_ROWS;
	if ((rc = run_layers(cb, b->n_tokens, b->n_seqs, max_rows, max_ctx, max_rows == 1, first)))
		return step_failed(cb, rc);
	if (b->n_logits == 0)
		return k_cuda_stream_sync(cb->stream);
	if ((rc = copy_logits(cb, logits, 0, first)))
		return step_failed(cb, rc);
	for (int i = first; i < b->n_logits && !rc; i += LOGIT_ROWS) {
		const int n = b->n_logits - i < LOGIT_ROWS ? b->n_logits - i : LOGIT_ROWS;
		if (!(rc = lm_head_rows(cb, i, n)))
			rc = copy_logits(cb, logits, i, n);
	}
	return rc ? step_failed(cb, rc) : 0;
}

/* ---- sampling on the device ------------------------------------------------------ */

static int cu_buf_fit(struct cu_buf *b, size_t bytes)
{
	if (bytes <= b->cap)
		return 0;
	size_t cap = bytes + bytes / 2 + 4096;
	k_cuda_free(b->d);
	b->d = NULL;
	b->cap = 0;
	int rc = k_cuda_malloc(&b->d, cap);
	if (!rc)
		b->cap = cap;
	return rc;
}

static int cu_buf_put(struct cuda_backend *cb, struct cu_buf *b, const void *host, size_t bytes)
{
	int rc = cu_buf_fit(b, bytes ? bytes : 16);
	return rc ? rc : k_cuda_memcpy_h2d_async(cb->stream, b->d, host, bytes);
}

static bool identity_rows(const struct engine_batch *b)
{
	for (int i = 0; i < b->n_logits; i++)
		if (b->logits_rows[i] != i)
			return false;
	return true;
}

/* Entries of the CSR payloads the rows reach: the largest end, not the last
 * row's (a row's range may be empty anywhere; engine.c checked begin <= end). */
static void csr_counts(const struct k_sample_args *a, size_t *n_pen, size_t *n_bias,
		       size_t *n_ban)
{
	int32_t pen = 0, bias = 0, ban = 0;
	for (int i = 0; i < a->n_rows; i++) {
		const struct k_sample_row *r = &a->rows[i];
		pen = r->pen_end > r->pen_begin && r->pen_end > pen ? r->pen_end : pen;
		bias = r->bias_end > r->bias_begin && r->bias_end > bias ? r->bias_end : bias;
		ban = r->ban_end > r->ban_begin && r->ban_end > ban ? r->ban_end : ban;
	}
	*n_pen = a->pen ? (size_t)pen : 0;
	*n_bias = a->bias ? (size_t)bias : 0;
	*n_ban = a->ban ? (size_t)ban : 0;
}

/* The step with the logits left on the device (cb->logits, rows in
 * logits_rows order), then k_sample over them; only the sampled tokens and
 * the logprobs asked for come back. More logits rows than one LM-head pass
 * holds: logits come to the host and the reference samples there. */
int cuda_forward_sample(struct backend *be, const struct engine_batch *b,
			     struct k_sample_args *a)
{
	struct cuda_backend *cb = (struct cuda_backend *)be;
	const int n = b->n_logits, V = cb->cfg.vocab;
	int rc;
	if (n > LOGIT_ROWS) {
		float *l = malloc((size_t)n * (size_t)V * sizeof(float));
		if (!l)
			return ERR_NOMEM;
		struct k_sample_args h = *a;
		h.logits = l;
		rc = cuda_forward(be, b, l);
		if (!rc)
			rc = k_sample_ref(&h, NULL);
		free(l);
		return rc;
	}
	if (n == 0)
		return cuda_forward(be, b, NULL);
	bool eager = true;
	if (graph_eligible(cb, b) && identity_rows(b) &&
	    (rc = forward_graph(cb, b, NULL, &eager)))
		return step_failed(cb, rc);
	if (eager) {
		int max_rows, max_ctx;
		if ((rc = stage(cb, b, 0, &max_rows, &max_ctx)) ||
		    (rc = run_layers(cb, b->n_tokens, b->n_seqs, max_rows, max_ctx, max_rows == 1,
				     n)))
			return step_failed(cb, rc);
	}
	/* inputs */
	const size_t top = (size_t)n * K_SAMPLE_MAX_TOP;
	size_t n_pen, n_bias, n_ban;
	csr_counts(a, &n_pen, &n_bias, &n_ban);
	size_t ws = k_sample_workspace_bytes(n, V);
	if ((rc = cu_buf_put(cb, &cb->s_rows, a->rows, (size_t)n * sizeof *a->rows)) ||
	    (rc = cu_buf_put(cb, &cb->s_pen, a->pen, n_pen * sizeof *a->pen)) ||
	    (rc = cu_buf_put(cb, &cb->s_bias, a->bias, n_bias * sizeof *a->bias)) ||
	    (rc = cu_buf_put(cb, &cb->s_ban, a->ban, n_ban * sizeof *a->ban)) ||
	    (rc = cu_buf_fit(&cb->s_ws, ws)) ||
	    (rc = cu_buf_fit(&cb->s_out, (size_t)n * 12 + top * 8)))
		return step_failed(cb, rc);
	/* outputs: token, logprob, rank [n] each, then top ids and logprobs */
	char *o = cb->s_out.d;
	struct k_sample_args d = {
		.logits = cb->logits, .n_rows = n, .vocab = V, .rows = cb->s_rows.d,
		.pen = n_pen ? cb->s_pen.d : NULL, .bias = n_bias ? cb->s_bias.d : NULL,
		.ban = n_ban ? cb->s_ban.d : NULL, .workspace = cb->s_ws.d,
		.workspace_bytes = cb->s_ws.cap, .token = (int32_t *)o,
		.logprob = (float *)(o + (size_t)n * 4), .rank = (int32_t *)(o + (size_t)n * 8),
		.top_ids = (int32_t *)(o + (size_t)n * 12),
		.top_logprobs = (float *)(o + (size_t)n * 12 + top * 4),
	};
	if ((rc = k_sample(cb->stream, &d)) ||
	    (rc = k_cuda_memcpy_d2h_async(cb->stream, a->token, d.token, (size_t)n * 4)) ||
	    (rc = k_cuda_memcpy_d2h_async(cb->stream, a->logprob, d.logprob, (size_t)n * 4)) ||
	    (rc = k_cuda_memcpy_d2h_async(cb->stream, a->rank, d.rank, (size_t)n * 4)) ||
	    (rc = k_cuda_memcpy_d2h_async(cb->stream, a->top_ids, d.top_ids, top * 4)) ||
	    (rc = k_cuda_memcpy_d2h_async(cb->stream, a->top_logprobs, d.top_logprobs, top * 4)))
		return step_failed(cb, rc);
	return k_cuda_stream_sync(cb->stream);
}

#endif
