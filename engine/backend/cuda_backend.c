/* engine/backend/cuda_backend.c — the CUDA backend: the Llama-family forward pass of
 * engine/backend/cpu_forward.c on the GPU, behind the same vtable (engine/backend/backend.h).
 *
 * Memory plan (all device memory is allocated at create and freed at free):
 *   weights, uploaded once: per layer the fused QKV matrix [q+2kv, hidden],
 *     O [hidden, q], the fused gate|up matrix [2 ffn, hidden] and down
 *     [hidden, ffn] in the 16-bit compute dtype (or 8-bit with scales per
 *     output row: GGUF Q8_0, INT8, FP8 files, or --quantization), norms and
 *     biases in F32, the embedding table in the compute dtype (it is also the
 *     tied LM head);
 *   activations for max_batch_tokens rows: the residual stream x (F32), the
 *     normed rows xn, attention output and SwiGLU output (16-bit, GEMM
 *     inputs), the QKV and gate|up GEMM outputs (F32), q (F32), a logits
 *     buffer for up to LOGIT_ROWS rows, the attention split workspace, and one
 *     staging area of batch metadata (pinned on the host, mirrored on the
 *     device at fixed offsets, so captured graphs can replay it);
 *   the paged KV pool, last: opts->n_kv_blocks blocks, or as many as fit in
 *     gpu_memory_utilization of the device's memory after everything else.
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
 * one stream; forward returns after the logits are on the host.
 *
 * Tests: tests/engine/test_cuda_engine.c (logits vs the CPU engine, greedy
 * batch invariance, graphs vs eager); kernels: tests/kernels/. Only this file
 * (outside kernels/cuda) talks to the GPU, through kernels/cuda's C headers.
 */
#include "engine/backend/backend.h"

#if AORTA_HAVE_CUDA

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "common/log.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/sample_ref.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_attn.h"
#include "kernels/cuda/kcuda_gemm.h"
#include "kernels/cuda/kcuda_gemv.h"
#include "kernels/cuda/kcuda_ops.h"
#include "kernels/cuda/kcuda_quant.h"
#include "kernels/sample.h"

#define LOGIT_ROWS 256	/* logits rows per LM-head pass */
#define GRAPH_MAX 256	/* largest decode batch captured in a graph */
#define N_GRAPH_SIZES 9 /* 1, 2, 4, ..., 256 */
/* Rows up to which a projection runs as k_gemv (one pass over W at memory
 * bandwidth) rather than a GEMM: 16-bit weights against cuBLAS; INT8/FP8
 * against W8A8 (k_gemm_w8a8); Q8_0 against dequantize + GEMM, which costs
 * more than its GEMV at any decode batch (no W8A8 for Q8_0 here). Chosen from
 * tests/bench/bench_cuda_gemv and bench_cuda_quant on an H200 (the note of
 * the session that measured them has the figures). */
#define GEMV16_MAX_T 2
#define W8_GEMV_MAX_T 4
#define Q8_GEMV_MAX_T 16
#define GEMV_COUNTERS 8 /* k_gemv_epi's, one per 8 rows: >= Q8_GEMV_MAX_T / 8 */

/* A projection on the device: W [n, k] row-major in dt; 8-bit types carry
 * one F32 scale per output row (per-tensor scales are expanded at upload). */
struct cu_w {
	enum dtype dt;
	int n, k;
	void *d;	/* Q8_0: the repacked codes [n, k] (k_q8_0_repack) */
	float *d_scale; /* I8 / F8: [n] */
	void *d_q8d;	/* Q8_0: F16 block scales [n, k / 32] */
};

struct cu_layer {
	float *attn_norm, *ffn_norm; /* F32 [hidden] */
	float *bqkv;		     /* F32 [q + 2 kv] or NULL */
	float *q_norm, *k_norm;	     /* F32 [head_dim] or NULL */
	struct cu_w qkv, o, gu, down;
	float k_scale, v_scale; /* FP8 KV cache: the checkpoint's, else KV_FP8_SCALE */
	float *k_head_scale, *v_head_scale; /* F32 [n_kv_heads] when it has them per head */
};

/* Offsets (in int32 elements) of the batch metadata in the staging area. */
struct cu_meta {
	size_t tokens, positions, slots, row_seq, logit_rows, seq_start, tables, total;
};

struct cuda_backend {
	struct backend base;
	const struct model *m;
	struct model_config cfg;
	struct engine_opts o;
	enum dtype gdt; /* 16-bit compute dtype */
	struct k_cuda_props props;
	void *stream;
	struct k_blas *blas;
	struct kpool *load_pool; /* host threads for weight conversion; load only */

	void **allocs; /* every device allocation but the KV pool */
	int n_allocs, cap_allocs;
	size_t weight_bytes;

	struct cu_layer *layers;
	void *embd; /* [vocab, hidden] gdt */
	struct cu_w lm_head;
	float *out_norm, *inv_freq;

	void *kv; /* per layer K then V, kv_layer_bytes each */
	size_t kv_layer_bytes;
	int n_blocks, block_size;
	enum dtype kv_dt;

	int max_t, max_ctx;
	float *x, *qkv, *q, *gu, *logits;
	void *xn, *attn, *act;
	void *xq; /* 8-bit activations for W8A8 GEMMs ([max_t, max k] bytes) */
	void *wscratch; /* an 8-bit matrix dequantized to gdt for prefill GEMMs */
	size_t wscratch_bytes;
	float *xq_scale;
	void *attn_ws;
	size_t attn_ws_bytes;
	struct cu_meta meta;
	int32_t *h_meta, *d_meta; /* pinned host / device */
	float *h_logits;	  /* pinned [LOGIT_ROWS, vocab] */

	void *graphs[N_GRAPH_SIZES];
	bool graphs_ok; /* capture failed once: stay eager */

	/* Fusion (on unless AORTA_CUDA_FUSION=0, the A/B switch of the GPU
	 * benchmark): few-row projections end in the next RMSNorm or the SwiGLU
	 * (k_gemv_epi) and the decode attention merges its own splits; each is
	 * one launch fewer a layer, with the same bits. The counters those
	 * kernels count their CTAs in: zero between launches. */
	bool fuse;
	unsigned *gemv_cnt, *attn_cnt; /* attn_cnt: [attn_cnt_rows * n_heads] */
	int attn_cnt_rows;

	/* device sampling: inputs and outputs, grown on demand (never inside a
	 * capture: sampling runs after the graph) */
	struct cu_buf {
		void *d;
		size_t cap;
	} s_rows, s_pen, s_bias, s_ban, s_out, s_ws;
};

static int dalloc(struct cuda_backend *cb, size_t bytes, void **out)
{
	*out = NULL;
	if (cb->n_allocs == cb->cap_allocs) {
		int cap = cb->cap_allocs ? cb->cap_allocs * 2 : 256;
		void **n = realloc(cb->allocs, (size_t)cap * sizeof *n);
		if (!n)
			return ERR_NOMEM;
		cb->allocs = n;
		cb->cap_allocs = cap;
	}
	int rc = k_cuda_malloc(out, bytes ? bytes : 16);
	if (rc)
		return rc;
	cb->allocs[cb->n_allocs++] = *out;
	return 0;
}

static int upload(struct cuda_backend *cb, const void *host, size_t bytes, void **out)
{
	int rc = dalloc(cb, bytes, out);
	if (!rc)
		rc = k_cuda_memcpy_h2d(*out, host, bytes);
	if (!rc)
		cb->weight_bytes += bytes;
	return rc;
}

static int dev_error(struct diag *d, int rc, const char *what)
{
	if (rc == ERR_NOMEM || rc == ERR_DEVICE)
		return diag_set(d, rc, "%s: %s", what, k_cuda_last_error());
	return diag_set(d, rc, "%s: %s", what, err_str(rc));
}

/* ---- weights ------------------------------------------------------------------ */

static bool is_8bit(enum dtype t)
{
	return t == DT_Q8_0 || t == DT_I8 || t == DT_F8_E4M3;
}

static int view(const struct tensor *t, int64_t rows, int64_t cols, struct kmat *out,
		struct diag *d)
{
	return backend_matrix_view(t, rows, cols, out, d);
}

/* Rows [0, w->rows) of w as 16-bit gdt values into dst. */
static void to_16bit(const struct kmat *w, enum dtype gdt, uint16_t *dst, float *row)
{
	const size_t cols = (size_t)w->cols;
	for (int64_t r = 0; r < w->rows; r++) {
		uint16_t *o = dst + (size_t)r * cols;
		if (w->dtype == gdt) {
			memcpy(o, (const uint16_t *)w->data + (size_t)r * cols, cols * 2);
			continue;
		}
		kcpu_dequant_row(w, r, row);
		for (size_t i = 0; i < cols; i++)
			o[i] = gdt == DT_BF16 ? f32_to_bf16(row[i]) : f32_to_f16(row[i]);
	}
}

/* One part's conversion to the upload dtype, split by rows over the load
 * pool (a Llama-3-8B's 7.5e9 weights take ~1 min on one thread). */
struct convert_job {
	const struct kmat *src;
	enum dtype dt;	/* F16/BF16, I8 or F8_E4M3 */
	char *dst;	/* rows * dst_row bytes */
	float *scales;	/* I8/F8: one per row */
	size_t dst_row;
	int *rc;	/* one per worker */
};

static void convert_rows(void *ctx, int ith, int nth)
{
	struct convert_job *j = ctx;
	long r0, r1;
	kpool_split((long)j->src->rows, ith, nth, &r0, &r1);
	int *rc = &j->rc[ith];
	uint64_t src_row;
	if (r0 >= r1 || *rc)
		return;
	if (dtype_row_bytes(j->src->dtype, (uint64_t)j->src->cols, &src_row)) {
		*rc = ERR_INVAL;
		return;
	}
	struct kmat sub = *j->src;
	sub.rows = r1 - r0;
	sub.data = (const char *)j->src->data + (size_t)r0 * src_row;
	if (sub.scale && sub.n_scale > 1) {
		sub.scale += r0;
		sub.n_scale = sub.rows;
	}
	char *out = j->dst + (size_t)r0 * j->dst_row;
	if (j->dt == DT_F16 || j->dt == DT_BF16) {
		float *row = malloc((size_t)sub.cols * sizeof(float));
		if (!row) {
			*rc = ERR_NOMEM;
			return;
		}
		to_16bit(&sub, j->dt, (uint16_t *)out, row);
		free(row);
	} else if (j->dt == DT_I8) {
		*rc = kcpu_quantize_i8(&sub, (int8_t *)out, j->scales + r0);
	} else {
		*rc = kcpu_quantize_f8(&sub, (uint8_t *)out, j->scales + r0);
	}
}

static int convert(struct cuda_backend *cb, const struct kmat *src, enum dtype dt, char *dst,
		   size_t dst_row, float *scales)
{
	const int nth = cb->load_pool ? kpool_size(cb->load_pool) : 1;
	struct convert_job j = { .src = src, .dt = dt, .dst = dst, .scales = scales,
				 .dst_row = dst_row, .rc = calloc((size_t)nth, sizeof(int)) };
	if (!j.rc)
		return ERR_NOMEM;
	kpool_run(cb->load_pool, convert_rows, &j);
	int rc = 0;
	for (int i = 0; i < nth && !rc; i++)
		rc = j.rc[i];
	free(j.rc);
	return rc;
}

/* The storage dtype a group of matrices gets on the device: the requested
 * quantization for 16/32-bit sources, the files' 8-bit type when all parts
 * share it, else the compute dtype. INT8/FP8 rows need k a multiple of 16
 * (k_gemv_w8); other widths are dequantized to the compute dtype. */
static enum dtype target_dtype(const struct kmat *parts, int n, enum dtype quant, enum dtype gdt)
{
	if (quant == DT__COUNT) /* forced to 16 bits (the embedding table) */
		return gdt;
	bool all_wide = true, same = true;
	for (int i = 0; i < n; i++) {
		all_wide &= !is_8bit(parts[i].dtype);
		same &= parts[i].dtype == parts[0].dtype;
	}
	enum dtype dt = all_wide ? (quant == DT_I8 || quant == DT_F8_E4M3 ? quant : gdt)
				 : same ? parts[0].dtype : gdt;
	if ((dt == DT_I8 || dt == DT_F8_E4M3) && parts[0].cols % 16 != 0)
		dt = gdt;
	return dt;
}

/* Upload the row-wise concatenation of parts as one projection; quant is
 * DT_F32 (none), DT_I8, DT_F8_E4M3, or DT__COUNT to force the compute dtype. */
static int upload_cat(struct cuda_backend *cb, const struct kmat *parts, int n_parts,
		      enum dtype quant, struct cu_w *out, struct diag *d, const char *what)
{
	const int64_t k = parts[0].cols;
	int64_t rows = 0;
	for (int i = 0; i < n_parts; i++)
		rows += parts[i].rows;
	const enum dtype dt = target_dtype(parts, n_parts, quant, cb->gdt);
	uint64_t row_bytes, total;
	if (dtype_row_bytes(dt, (uint64_t)k, &row_bytes) ||
	    ck_mul_u64(row_bytes, (uint64_t)rows, &total) || total > SIZE_MAX / 2)
		return diag_set(d, ERR_OVERFLOW, "%s: too large", what);
	char *host = malloc(total ? total : 1);
	float *scales = malloc((size_t)rows * sizeof(float));
	int rc = host && scales ? 0 : ERR_NOMEM;
	size_t off = 0;
	int64_t r0 = 0;
	for (int i = 0; i < n_parts && !rc; i++) {
		const struct kmat *p = &parts[i];
		const size_t bytes = (size_t)row_bytes * (size_t)p->rows;
		if (p->dtype == dt && is_8bit(dt)) { /* 8-bit as in the file */
			memcpy(host + off, p->data, bytes);
			for (int64_t r = 0; r < p->rows && dt != DT_Q8_0; r++)
				scales[r0 + r] = p->n_scale == 1 ? p->scale[0] : p->scale[r];
		} else if (dt == DT_F16 || dt == DT_BF16 || dt == DT_I8 || dt == DT_F8_E4M3) {
			rc = convert(cb, p, dt, host + off, (size_t)row_bytes, scales + r0);
		} else {
			rc = ERR_INTERNAL;
		}
		off += bytes;
		r0 += p->rows;
	}
	*out = (struct cu_w){ .dt = dt, .n = (int)rows, .k = (int)k };
	if (!rc && dt == DT_Q8_0) { /* split into aligned codes + F16 scales on the device */
		void *tmp = NULL;
		const size_t codes = (size_t)rows * (size_t)k;
		/* the copy on the repack's stream: a plain cudaMemcpy from pageable
		 * memory may return before its DMA lands, and cb->stream does not
		 * wait for the legacy stream (it is non-blocking) */
		if (!(rc = k_cuda_malloc(&tmp, total)) &&
		    !(rc = k_cuda_memcpy_h2d_async(cb->stream, tmp, host, total)) &&
		    !(rc = dalloc(cb, codes, &out->d)) && !(rc = dalloc(cb, codes / 16, &out->d_q8d)) &&
		    !(rc = k_q8_0_repack(cb->stream, tmp, (int)rows, (int)k, out->d, out->d_q8d)))
			rc = k_cuda_stream_sync(cb->stream);
		k_cuda_free(tmp);
		cb->weight_bytes += codes + codes / 16;
	} else if (!rc) {
		rc = upload(cb, host, total, &out->d);
	}
	if (!rc && is_8bit(dt) && (size_t)rows * (size_t)k * 2 > cb->wscratch_bytes)
		cb->wscratch_bytes = (size_t)rows * (size_t)k * 2;
	if (!rc && (dt == DT_I8 || dt == DT_F8_E4M3))
		rc = upload(cb, scales, (size_t)rows * sizeof(float), (void **)&out->d_scale);
	free(host);
	free(scales);
	if (rc)
		return dev_error(d, rc, what);
	return 0;
}

/* A vector as an F32 device copy; *out NULL when absent and optional. */
static int upload_vec(struct cuda_backend *cb, const struct tensor *t, int64_t n, bool required,
		      float **out, struct diag *d)
{
	const char *name = t->name ? t->name : "(unnamed)";
	*out = NULL;
	if (!tensor_present(t))
		return required ? diag_set(d, ERR_FORMAT, "%s: vector missing", name) : 0;
	if (t->n_dims != 1 || t->shape[0] != n)
		return diag_set(d, ERR_FORMAT, "%s: shape is not (%lld)", name, (long long)n);
	uint64_t bytes;
	if (!(t->dtype == DT_F32 || t->dtype == DT_F16 || t->dtype == DT_BF16) ||
	    dtype_row_bytes(t->dtype, (uint64_t)n, &bytes) || t->n_bytes < bytes)
		return diag_set(d, ERR_FORMAT, "%s: vector dtype or size", name);
	float *v = malloc((size_t)n * sizeof(float));
	if (!v)
		return diag_set(d, ERR_NOMEM, "out of memory");
	struct kmat k = { .dtype = t->dtype, .rows = 1, .cols = n, .data = t->data };
	kcpu_dequant_row(&k, 0, v);
	int rc = upload(cb, v, (size_t)n * sizeof(float), (void **)out);
	free(v);
	return rc ? dev_error(d, rc, name) : 0;
}

/* Three optional bias vectors as one concatenated device vector. */
static int upload_bias(struct cuda_backend *cb, const struct layer_weights *w, int64_t q_dim,
		       int64_t kv_dim, float **out, struct diag *d)
{
	const struct tensor *t[3] = { &w->bq, &w->bk, &w->bv };
	const int64_t n[3] = { q_dim, kv_dim, kv_dim };
	float *h = malloc((size_t)(q_dim + 2 * kv_dim) * sizeof(float));
	if (!h)
		return diag_set(d, ERR_NOMEM, "out of memory");
	int64_t off = 0;
	int rc = 0;
	for (int i = 0; i < 3 && !rc; i++) {
		uint64_t bytes;
		if (!tensor_present(t[i]) || t[i]->n_dims != 1 || t[i]->shape[0] != n[i] ||
		    !(t[i]->dtype == DT_F32 || t[i]->dtype == DT_F16 || t[i]->dtype == DT_BF16) ||
		    dtype_row_bytes(t[i]->dtype, (uint64_t)n[i], &bytes) || t[i]->n_bytes < bytes) {
			rc = diag_set(d, ERR_FORMAT, "%s: QKV bias missing or malformed",
				      t[i]->name ? t[i]->name : "bias");
			break;
		}
		struct kmat k = { .dtype = t[i]->dtype, .rows = 1, .cols = n[i], .data = t[i]->data };
		kcpu_dequant_row(&k, 0, h + off);
		off += n[i];
	}
	if (!rc && (rc = upload(cb, h, (size_t)off * sizeof(float), (void **)out)))
		dev_error(d, rc, "bias");
	free(h);
	return rc;
}

/* FP8 E4M3 KV stores value / scale: the checkpoint's per-layer k_scale /
 * v_scale (engine/model/model.h), else 1.0 (vLLM's scale when a checkpoint has
 * none). */
#define KV_FP8_SCALE 1.0f

static int load_layers(struct cuda_backend *cb, enum dtype quant, struct diag *d)
{
	const struct model_config *c = &cb->cfg;
	const int64_t q_dim = (int64_t)c->n_heads * c->head_dim;
	const int64_t kv_dim = (int64_t)c->n_kv_heads * c->head_dim;
	for (int l = 0; l < c->n_layers; l++) {
		const struct layer_weights *w = &cb->m->w.layers[l];
		struct cu_layer *o = &cb->layers[l];
		struct kmat qkv[3], wo, gu[2], down;
		char what[64];
		snprintf(what, sizeof what, "layer %d weights", l);
		int rc;
		if ((rc = view(&w->wq, q_dim, c->hidden, &qkv[0], d)) ||
		    (rc = view(&w->wk, kv_dim, c->hidden, &qkv[1], d)) ||
		    (rc = view(&w->wv, kv_dim, c->hidden, &qkv[2], d)) ||
		    (rc = view(&w->wo, c->hidden, q_dim, &wo, d)) ||
		    (rc = view(&w->w_gate, c->ffn, c->hidden, &gu[0], d)) ||
		    (rc = view(&w->w_up, c->ffn, c->hidden, &gu[1], d)) ||
		    (rc = view(&w->w_down, c->hidden, c->ffn, &down, d)) ||
		    (rc = upload_cat(cb, qkv, 3, quant, &o->qkv, d, what)) ||
		    (rc = upload_cat(cb, &wo, 1, quant, &o->o, d, what)) ||
		    (rc = upload_cat(cb, gu, 2, quant, &o->gu, d, what)) ||
		    (rc = upload_cat(cb, &down, 1, quant, &o->down, d, what)) ||
		    (rc = upload_vec(cb, &w->attn_norm, c->hidden, true, &o->attn_norm, d)) ||
		    (rc = upload_vec(cb, &w->ffn_norm, c->hidden, true, &o->ffn_norm, d)))
			return rc;
		o->k_scale = w->k_scale > 0.0f ? w->k_scale : KV_FP8_SCALE;
		o->v_scale = w->v_scale > 0.0f ? w->v_scale : KV_FP8_SCALE;
		const size_t hs = (size_t)c->n_kv_heads * sizeof(float);
		if ((w->k_head_scale &&
		     (rc = upload(cb, w->k_head_scale, hs, (void **)&o->k_head_scale))) ||
		    (w->v_head_scale &&
		     (rc = upload(cb, w->v_head_scale, hs, (void **)&o->v_head_scale))))
			return dev_error(d, rc, what);
		if (c->qkv_bias && (rc = upload_bias(cb, w, q_dim, kv_dim, &o->bqkv, d)))
			return rc;
		if (c->qk_norm &&
		    ((rc = upload_vec(cb, &w->q_norm, c->head_dim, true, &o->q_norm, d)) ||
		     (rc = upload_vec(cb, &w->k_norm, c->head_dim, true, &o->k_norm, d))))
			return rc;
	}
	return 0;
}

/* ---- activations and the staging area ----------------------------------------- */

/* The fusion counters to zero, and wait for it (at create, after a failed step). */
static int zero_counters(struct cuda_backend *cb)
{
	const size_t attn = (size_t)cb->attn_cnt_rows * (size_t)cb->cfg.n_heads * 4;
	int rc = k_cuda_memset_async(cb->stream, cb->gemv_cnt, 0, GEMV_COUNTERS * 4);
	if (!rc)
		rc = k_cuda_memset_async(cb->stream, cb->attn_cnt, 0, attn);
	return rc ? rc : k_cuda_stream_sync(cb->stream);
}

static int alloc_activations(struct cuda_backend *cb, struct diag *d)
{
	const struct model_config *c = &cb->cfg;
	const size_t T = (size_t)cb->o.max_batch_tokens, H = (size_t)c->hidden,
		     QD = (size_t)c->n_heads * c->head_dim,
		     KVD = (size_t)c->n_kv_heads * c->head_dim, F = (size_t)c->ffn,
		     V = (size_t)c->vocab, S = (size_t)cb->o.max_seqs,
		     MB = (size_t)cb->o.max_blocks_per_seq;
	cb->max_t = (int)T;
	cb->max_ctx = (int)(MB * (size_t)cb->o.block_size);
	size_t kmax = H > QD ? H : QD;
	kmax = kmax > F ? kmax : F;
	struct cu_meta *m = &cb->meta;
	m->tokens = 0;
	m->positions = T;
	m->slots = 2 * T;
	m->row_seq = 3 * T;
	m->logit_rows = 4 * T;
	m->seq_start = 5 * T;
	/* eager steps have at most S sequences; a graph pads a decode batch (one
	 * row per sequence) to t_pad <= min(T, GRAPH_MAX) rows and sequences.
	 * Not T: with max_batch_tokens 8192 and a 128K context the tables of T
	 * sequences would take 256 MiB, pinned and on the device. */
	const size_t g_cap = T < GRAPH_MAX ? T : GRAPH_MAX;
	size_t s_cap = S > g_cap ? S : g_cap;
	m->tables = m->seq_start + s_cap + 1;
	m->total = m->tables + s_cap * MB;
	/* decode attention (the only user of the workspace) runs on steps of one
	 * row per sequence: at most s_cap rows, not T (4.4 GB for 8192 tokens,
	 * 32 heads of 128 and a 128K context, against 136 MB for 256) */
	const size_t dec_rows = s_cap < T ? s_cap : T;
	cb->attn_cnt_rows = (int)dec_rows;
	cb->attn_ws_bytes =
		k_attn_workspace_bytes((int)dec_rows, c->n_heads, c->head_dim, cb->max_ctx);
	int rc;
	if ((rc = dalloc(cb, T * H * 4, (void **)&cb->x)) ||
	    (rc = dalloc(cb, T * (QD + 2 * KVD) * 4, (void **)&cb->qkv)) ||
	    (rc = dalloc(cb, T * QD * 4, (void **)&cb->q)) ||
	    (rc = dalloc(cb, T * 2 * F * 4, (void **)&cb->gu)) ||
	    (rc = dalloc(cb, (size_t)LOGIT_ROWS * V * 4, (void **)&cb->logits)) ||
	    (rc = dalloc(cb, T * H * 2, &cb->xn)) || (rc = dalloc(cb, T * QD * 2, &cb->attn)) ||
	    (rc = dalloc(cb, T * F * 2, &cb->act)) || (rc = dalloc(cb, T * kmax, &cb->xq)) ||
	    (rc = dalloc(cb, T * 4, (void **)&cb->xq_scale)) ||
	    (rc = dalloc(cb, cb->attn_ws_bytes, &cb->attn_ws)) ||
	    (rc = dalloc(cb, GEMV_COUNTERS * 4, (void **)&cb->gemv_cnt)) ||
	    (rc = dalloc(cb, dec_rows * (size_t)c->n_heads * 4, (void **)&cb->attn_cnt)) ||
	    (cb->wscratch_bytes && (rc = dalloc(cb, cb->wscratch_bytes, &cb->wscratch))) ||
	    (rc = dalloc(cb, m->total * 4, (void **)&cb->d_meta)))
		return dev_error(d, rc, "activation buffers");
	if ((rc = k_cuda_host_alloc((void **)&cb->h_meta, m->total * 4)) ||
	    (rc = k_cuda_host_alloc((void **)&cb->h_logits, (size_t)LOGIT_ROWS * V * 4)))
		return dev_error(d, rc, "pinned host buffers");
	memset(cb->h_meta, 0, m->total * 4);
	if ((rc = zero_counters(cb)))
		return dev_error(d, rc, "fusion counters");
	return 0;
}

/* ---- KV pool -------------------------------------------------------------------- */

static void drop_graphs(struct cuda_backend *cb)
{
	for (int i = 0; i < N_GRAPH_SIZES; i++) {
		k_cuda_graph_destroy(cb->graphs[i]);
		cb->graphs[i] = NULL;
	}
}

static bool kv_dtype_ok(enum dtype t)
{
	return t == DT_F16 || t == DT_BF16 || t == DT_F32 || t == DT_F8_E4M3;
}

static int cu_alloc_kv(struct backend *b, int n_blocks, int block_size, enum dtype kv_dtype)
{
	struct cuda_backend *cb = (struct cuda_backend *)b;
	if (n_blocks <= 0 || block_size <= 0 || !kv_dtype_ok(kv_dtype))
		return ERR_INVAL;
	size_t esize = kv_dtype == DT_F32 ? 4 : kv_dtype == DT_F8_E4M3 ? 1 : 2, layer_bytes, total;
	if (ck_mul((size_t)cb->cfg.n_kv_heads * (size_t)cb->cfg.head_dim, esize, &layer_bytes) ||
	    ck_mul(layer_bytes, (size_t)n_blocks, &layer_bytes) ||
	    ck_mul(layer_bytes, (size_t)block_size, &layer_bytes) ||
	    ck_mul(layer_bytes, 2 * (size_t)cb->cfg.n_layers, &total))
		return ERR_OVERFLOW;
	k_cuda_sync();
	drop_graphs(cb); /* they captured the old pool's address */
	k_cuda_free(cb->kv);
	cb->kv = NULL;
	int rc = k_cuda_malloc(&cb->kv, total);
	if (!rc)
		rc = k_cuda_memset_async(cb->stream, cb->kv, 0, total);
	if (!rc)
		rc = k_cuda_stream_sync(cb->stream);
	if (rc) {
		k_cuda_free(cb->kv);
		cb->kv = NULL;
		return rc;
	}
	cb->kv_layer_bytes = layer_bytes;
	cb->n_blocks = n_blocks;
	cb->block_size = block_size;
	cb->kv_dt = kv_dtype;
	return 0;
}

static int cu_copy_blocks(struct backend *b, const int32_t *src, const int32_t *dst, int n)
{
	struct cuda_backend *cb = (struct cuda_backend *)b;
	const size_t block_bytes = cb->kv_layer_bytes / (size_t)cb->n_blocks;
	char *base = cb->kv;
	int rc = 0;
	for (int l = 0; l < 2 * cb->cfg.n_layers && !rc; l++) {
		char *pool = base + (size_t)l * cb->kv_layer_bytes;
		for (int i = 0; i < n && !rc; i++)
			if (src[i] != dst[i])
				rc = k_cuda_memcpy_d2d_async(cb->stream,
							     pool + (size_t)dst[i] * block_bytes,
							     pool + (size_t)src[i] * block_bytes,
							     block_bytes);
	}
	int rs = k_cuda_stream_sync(cb->stream);
	return rc ? rc : rs;
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
			drop_graphs(cb);
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
	zero_counters(cb); /* a launch cut short may leave a fusion counter counting */
	return rc;
}

static int cu_forward(struct backend *be, const struct engine_batch *b, float *logits)
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
static int cu_forward_sample(struct backend *be, const struct engine_batch *b,
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
		rc = cu_forward(be, b, l);
		if (!rc)
			rc = k_sample_ref(&h, NULL);
		free(l);
		return rc;
	}
	if (n == 0)
		return cu_forward(be, b, NULL);
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

static void cu_free(struct backend *b)
{
	struct cuda_backend *cb = (struct cuda_backend *)b;
	if (!cb)
		return;
	kpool_destroy(cb->load_pool);
	if (cb->stream)
		k_cuda_stream_sync(cb->stream);
	drop_graphs(cb);
	k_blas_destroy(cb->blas);
	for (int i = 0; i < cb->n_allocs; i++)
		k_cuda_free(cb->allocs[i]);
	free(cb->allocs);
	k_cuda_free(cb->kv);
	struct cu_buf *bufs[] = { &cb->s_rows, &cb->s_pen, &cb->s_bias, &cb->s_ban, &cb->s_out,
				  &cb->s_ws };
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		k_cuda_free(bufs[i]->d);
	k_cuda_host_free(cb->h_meta);
	k_cuda_host_free(cb->h_logits);
	k_cuda_stream_destroy(cb->stream);
	free(cb->layers);
	free(cb);
}

static const struct backend_ops cuda_ops = {
	.name = "cuda",
	.alloc_kv = cu_alloc_kv,
	.forward = cu_forward,
	.forward_sample = cu_forward_sample,
	.copy_blocks = cu_copy_blocks,
	.free = cu_free,
};

bool backend_cuda_available(void)
{
	int n = 0;
	k_cuda_device_count(&n);
	return n > 0;
}

/* The KV pool: as asked, or what gpu_memory_utilization leaves after the
 * weights, activations and everything else already on the device. */
static int size_kv(struct cuda_backend *cb, const struct engine_opts *o, int *n_blocks,
		   struct diag *d)
{
	size_t block_bytes = engine_kv_block_bytes(&cb->cfg, o->block_size, o->kv_dtype);
	if (!block_bytes)
		return diag_set(d, ERR_INVAL, "KV block size overflows");
	if (o->n_kv_blocks > 0) {
		*n_blocks = o->n_kv_blocks;
		return 0;
	}
	size_t free_b = 0, total_b = 0;
	int rc = k_cuda_mem_info(&free_b, &total_b);
	if (rc)
		return dev_error(d, rc, "cudaMemGetInfo");
	const double util = o->gpu_memory_utilization > 0 ? o->gpu_memory_utilization : 0.9;
	const double used = (double)(total_b - free_b), budget = util * (double)total_b - used;
	/* leave room for graphs, cuBLAS and the CUDA context's own growth */
	const double spare = 256.0 * 1024 * 1024;
	double n = (budget - spare) / (double)block_bytes;
	if (n < (double)o->max_blocks_per_seq)
		return diag_set(d, ERR_NOMEM,
				"--gpu-memory-utilization %.2f of %.1f GiB leaves room for %.0f KV "
				"blocks after %.1f GiB of weights and activations; one sequence of "
				"the max model length needs %d",
				util, (double)total_b / (1 << 30), n > 0 ? n : 0,
				used / (1 << 30), o->max_blocks_per_seq);
	/* slots are int32 (block * block_size + offset): the engine checks the
	 * same bound for a pool it is given */
	const double cap = fmin(4e6, (double)(INT32_MAX / o->block_size));
	*n_blocks = n > cap ? (int)cap : (int)n;
	return 0;
}

/* Where the FP8 KV cache's scales come from (vLLM warns the same way when a
 * checkpoint has none: K and V past +-448 then saturate). */
static void log_kv_scales(const struct cuda_backend *cb)
{
	int n_ckpt = 0;
	bool per_head = false;
	for (int l = 0; l < cb->cfg.n_layers; l++) {
		const struct layer_weights *w = &cb->m->w.layers[l];
		n_ckpt += w->k_scale > 0.0f || w->v_scale > 0.0f;
		per_head = per_head || w->k_head_scale || w->v_head_scale;
	}
	if (n_ckpt == 0) {
		log_warn("cuda", "FP8 KV cache with scale 1.0: the checkpoint has no "
				 "self_attn.k_scale / v_scale (K and V past +-448 saturate)");
		return;
	}
	log_info("cuda", "FP8 KV cache: K/V scales of %d of %d layers from the checkpoint (layer 0: "
			 "k %g, v %g; missing ones 1.0)%s",
		 n_ckpt, cb->cfg.n_layers, (double)cb->layers[0].k_scale,
		 (double)cb->layers[0].v_scale,
		 per_head ? "; per KV head where the checkpoint has them (layer 0 shows their "
			    "largest)" : "");
}

int backend_cuda_create(const struct model *m, const struct engine_opts *opts,
			struct backend **out, int *n_kv_blocks_out, struct diag *d)
{
	*out = NULL;
	if (!m || !opts)
		return diag_set(d, ERR_INVAL, "no model or options");
	int rc = backend_check_config(&m->cfg, d);
	if (rc)
		return rc;
	if (!m->w.layers)
		return diag_set(d, ERR_FORMAT, "model has no layers");
	if (!kv_dtype_ok(opts->kv_dtype))
		return diag_set(d, ERR_UNSUPPORTED, "KV dtype %s: the CUDA backend has f16, bf16, "
				"f32 and fp8 (e4m3)", dtype_name(opts->kv_dtype));
	const int hd = m->cfg.head_dim;
	if (!(hd == 64 || hd == 128 || hd == 256))
		return diag_set(d, ERR_UNSUPPORTED, "head_dim %d: the CUDA attention kernels support "
				"64, 128 and 256", hd);
	if (!backend_cuda_available())
		return diag_set(d, ERR_UNSUPPORTED, "no CUDA device is visible");
	struct cuda_backend *cb = calloc(1, sizeof *cb);
	if (!cb)
		return diag_set(d, ERR_NOMEM, "out of memory");
	cb->base.ops = &cuda_ops;
	cb->m = m;
	cb->cfg = m->cfg;
	cb->o = *opts;
	cb->graphs_ok = true;
	const char *fz = getenv("AORTA_CUDA_FUSION");
	cb->fuse = !(fz && strcmp(fz, "0") == 0);
	const char *pdl = getenv("AORTA_CUDA_PDL");
	const bool pdl_off = pdl && strcmp(pdl, "0") == 0;
	const struct model_config *c = &cb->cfg;
	enum dtype file_dt = m->w.layers[0].wq.dtype;
	cb->gdt = opts->gpu_dtype == DT_F16 || opts->gpu_dtype == DT_BF16 ? opts->gpu_dtype
		  : file_dt == DT_BF16					   ? DT_BF16
									   : DT_F16;
	if ((rc = k_cuda_set_device(0)) || (rc = k_cuda_props(0, &cb->props)) ||
	    (rc = k_cuda_stream_create(&cb->stream)) || (rc = k_blas_create(cb->stream, &cb->blas))) {
		dev_error(d, rc, "CUDA device 0");
		goto fail;
	}
	/* programmatic dependent launch on Hopper and later (AORTA_CUDA_PDL=0:
	 * off, the benchmark's A/B); process-wide, like the device */
	k_cuda_set_pdl(cb->props.cc_major >= 9 && !pdl_off);
	if (kpool_create(opts->n_threads, &cb->load_pool)) /* else one thread converts */
		cb->load_pool = NULL;
	cb->layers = calloc((size_t)c->n_layers, sizeof *cb->layers);
	float *inv = malloc((size_t)(hd / 2) * sizeof(float));
	if (!cb->layers || !inv) {
		free(inv);
		rc = diag_set(d, ERR_NOMEM, "out of memory");
		goto fail;
	}
	backend_rope_inv_freq(c, &m->w.rope_freqs, inv);
	rc = upload(cb, inv, (size_t)(hd / 2) * sizeof(float), (void **)&cb->inv_freq);
	free(inv);
	if (rc) {
		dev_error(d, rc, "RoPE frequencies");
		goto fail;
	}
	/* the embedding table in the compute dtype; a tied LM head is the same
	 * matrix. The LM head keeps 16 bits under --quantization (as the CPU). */
	struct kmat embd, head;
	if ((rc = view(&m->w.tok_embd, c->vocab, c->hidden, &embd, d)))
		goto fail;
	struct cu_w embd_w;
	if ((rc = upload_cat(cb, &embd, 1, DT__COUNT, &embd_w, d, "token embeddings")))
		goto fail;
	cb->embd = embd_w.d;
	if (c->tied_embeddings || !tensor_present(&m->w.lm_head)) {
		cb->lm_head = embd_w;
	} else if ((rc = view(&m->w.lm_head, c->vocab, c->hidden, &head, d)) ||
		   (rc = upload_cat(cb, &head, 1, DT_F32, &cb->lm_head, d, "LM head"))) {
		goto fail;
	}
	if ((rc = upload_vec(cb, &m->w.out_norm, c->hidden, true, &cb->out_norm, d)) ||
	    (rc = load_layers(cb, opts->quantization, d)) || (rc = alloc_activations(cb, d)))
		goto fail;
	kpool_destroy(cb->load_pool);
	cb->load_pool = NULL;
	/* the sampling workspace for the most rows k_sample sees at once, before
	 * the KV pool takes what is left (up to ~0.3 GB for big vocabularies) */
	const int s_rows = opts->max_batch_tokens < LOGIT_ROWS ? opts->max_batch_tokens : LOGIT_ROWS;
	const size_t s_ws = k_sample_workspace_bytes(s_rows, c->vocab);
	if ((rc = k_cuda_malloc(&cb->s_ws.d, s_ws ? s_ws : 16))) {
		dev_error(d, rc, "sampling workspace");
		goto fail;
	}
	cb->s_ws.cap = s_ws;
	int n_blocks = 0;
	if ((rc = size_kv(cb, opts, &n_blocks, d)))
		goto fail;
	if ((rc = cu_alloc_kv(&cb->base, n_blocks, opts->block_size, opts->kv_dtype))) {
		dev_error(d, rc, "KV pool");
		goto fail;
	}
	log_info("cuda", "%s (sm_%d%d, %d SMs): %.2f GiB of weights (%s), KV pool %d blocks x %d "
			 "(%s, %.2f GiB)%s",
		 cb->props.name, cb->props.cc_major, cb->props.cc_minor, cb->props.n_sms,
		 (double)cb->weight_bytes / (1 << 30), dtype_name(cb->layers[0].gu.dt), n_blocks,
		 opts->block_size, dtype_name(opts->kv_dtype),
		 2.0 * c->n_layers * (double)cb->kv_layer_bytes / (1 << 30),
		 opts->enforce_eager ? "; CUDA graphs off" : "");
	if (opts->kv_dtype == DT_F8_E4M3)
		log_kv_scales(cb);
	if (!cb->fuse)
		log_info("cuda", "AORTA_CUDA_FUSION=0: norms, SwiGLU, the decode split merge and "
				 "the W8A8 activation quantization run as kernels of "
				 "their own");
	if (pdl_off)
		log_info("cuda", "AORTA_CUDA_PDL=0: no programmatic dependent launch");
	if (!cb->props.has_fp8 && cb->layers[0].qkv.dt == DT_F8_E4M3)
		log_info("cuda", "sm_%d%d has no FP8 tensor cores: FP8 weights use the weight-only "
				 "kernels (GEMV for decode, dequantize + 16-bit GEMM for prefill)",
			 cb->props.cc_major, cb->props.cc_minor);
	*n_kv_blocks_out = n_blocks;
	*out = &cb->base;
	return 0;
fail:
	cu_free(&cb->base);
	return rc;
}

#else /* !AORTA_HAVE_CUDA */

int backend_cuda_create(const struct model *m, const struct engine_opts *opts,
			struct backend **out, int *n_kv_blocks_out, struct diag *d)
{
	(void)m;
	(void)opts;
	*out = NULL;
	*n_kv_blocks_out = 0;
	return diag_set(d, ERR_UNSUPPORTED, "this build has no CUDA backend (built without nvcc)");
}

bool backend_cuda_available(void)
{
	return false;
}

#endif
