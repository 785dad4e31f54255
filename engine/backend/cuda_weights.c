/* engine/backend/cuda_weights.c — the CUDA backend's weights: every tensor of
 * the model checked (backend_matrix_view), converted on the host where the
 * device wants another dtype (16-bit compute dtype, or INT8 / FP8 per row
 * under --quantization; split by rows over the load pool), concatenated
 * (QKV, gate|up) and uploaded once at create. Owns nothing after create: the
 * device copies are cb->allocs (cuda_backend.c frees them). Tests:
 * tests/engine/test_cuda_engine.c (logits vs the CPU engine: F16 / BF16,
 * Q8_0 / INT8 / FP8 weights and --quantization int8|fp8);
 * the quantizers: tests/kernels/.
 */
#include "engine/backend/backend.h"

#if AORTA_HAVE_CUDA

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "engine/backend/cuda_internal.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_quant.h"

static int upload(struct cuda_backend *cb, const void *host, size_t bytes, void **out)
{
	int rc = cuda_dalloc(cb, bytes, out);
	if (!rc)
		rc = k_cuda_memcpy_h2d(*out, host, bytes);
	if (!rc)
		cb->weight_bytes += bytes;
	return rc;
}

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
		    !(rc = cuda_dalloc(cb, codes, &out->d)) &&
		    !(rc = cuda_dalloc(cb, codes / 16, &out->d_q8d)) &&
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
		return cuda_dev_error(d, rc, what);
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
	return rc ? cuda_dev_error(d, rc, name) : 0;
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
		cuda_dev_error(d, rc, "bias");
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
			return cuda_dev_error(d, rc, what);
		if (c->qkv_bias && (rc = upload_bias(cb, w, q_dim, kv_dim, &o->bqkv, d)))
			return rc;
		if (c->qk_norm &&
		    ((rc = upload_vec(cb, &w->q_norm, c->head_dim, true, &o->q_norm, d)) ||
		     (rc = upload_vec(cb, &w->k_norm, c->head_dim, true, &o->k_norm, d))))
			return rc;
	}
	return 0;
}

/* Everything the model brings, in the order the device gets it: the RoPE
 * frequencies, the embedding table (and LM head), the final norm, the layers. */
int cuda_load_weights(struct cuda_backend *cb, enum dtype quant, struct diag *d)
{
	const struct model *m = cb->m;
	const struct model_config *c = &cb->cfg;
	const int hd = c->head_dim;
	float *inv = malloc((size_t)(hd / 2) * sizeof(float));
	if (!inv)
		return diag_set(d, ERR_NOMEM, "out of memory");
	backend_rope_inv_freq(c, &m->w.rope_freqs, inv);
	int rc = upload(cb, inv, (size_t)(hd / 2) * sizeof(float), (void **)&cb->inv_freq);
	free(inv);
	if (rc)
		return cuda_dev_error(d, rc, "RoPE frequencies");
	/* the embedding table in the compute dtype; a tied LM head is the same
	 * matrix. The LM head keeps 16 bits under --quantization (as the CPU). */
	struct kmat embd, head;
	if ((rc = view(&m->w.tok_embd, c->vocab, c->hidden, &embd, d)))
		return rc;
	struct cu_w embd_w;
	if ((rc = upload_cat(cb, &embd, 1, DT__COUNT, &embd_w, d, "token embeddings")))
		return rc;
	cb->embd = embd_w.d;
	if (c->tied_embeddings || !tensor_present(&m->w.lm_head)) {
		cb->lm_head = embd_w;
	} else if ((rc = view(&m->w.lm_head, c->vocab, c->hidden, &head, d)) ||
		   (rc = upload_cat(cb, &head, 1, DT_F32, &cb->lm_head, d, "LM head"))) {
		return rc;
	}
	if ((rc = upload_vec(cb, &m->w.out_norm, c->hidden, true, &cb->out_norm, d)))
		return rc;
	return load_layers(cb, quant, d);
}

#endif
