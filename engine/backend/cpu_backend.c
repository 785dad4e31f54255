/* engine/backend/cpu_backend.c — the CPU backend's life cycle: checks the model's
 * tensors against its config, builds kmat views (or int8/fp8 copies), F32
 * copies of the small vectors, the RoPE frequencies, the KV pool and the
 * activation buffers. The forward pass itself is engine/backend/cpu_forward.c.
 * Tested through the engine: tests/engine/test_engine.c and the numpy
 * reference in tests/reference/.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/checked.h"
#include "engine/backend/cpu_backend.h"
#include "kernels/cpu/quant.h"

static int own(struct cpu_backend *cb, void *p)
{
	if (!p)
		return ERR_NOMEM;
	if (cb->n_owned == cb->cap_owned) {
		int cap = cb->cap_owned ? cb->cap_owned * 2 : 64;
		void **n = realloc(cb->owned, (size_t)cap * sizeof *n);
		if (!n) {
			free(p);
			return ERR_NOMEM;
		}
		cb->owned = n;
		cb->cap_owned = cap;
	}
	cb->owned[cb->n_owned++] = p;
	return 0;
}

/* Convert a 16/32-bit weight to int8 / fp8 with one scale per output row
 * (kernels/cpu/quant.h); the copy and its scales are owned by the backend. */
static int quantize_weight(struct cpu_backend *cb, struct kmat *w, enum dtype to, const char *name,
			   struct diag *d)
{
	if (to == DT_F32 || !(w->dtype == DT_F16 || w->dtype == DT_BF16 || w->dtype == DT_F32))
		return 0; /* nothing asked, or already 8-bit in the file: keep it */
	size_t n_vals;
	if (ck_mul((size_t)w->rows, (size_t)w->cols, &n_vals))
		return diag_set(d, ERR_OVERFLOW, "%s: too large to quantize", name);
	void *q = malloc(n_vals ? n_vals : 1);
	int rc = own(cb, q);
	float *s = rc ? NULL : malloc((size_t)w->rows * sizeof(float));
	if (!rc)
		rc = own(cb, s);
	if (rc)
		return diag_set(d, rc, "%s: out of memory quantizing", name);
	rc = to == DT_I8 ? kcpu_quantize_i8(w, q, s) : kcpu_quantize_f8(w, q, s);
	if (rc)
		return diag_set(d, rc, "%s: quantizing to %s failed", name, dtype_name(to));
	w->dtype = to;
	w->data = q;
	w->scale = s;
	w->n_scale = w->rows;
	return 0;
}

/* Weight-sized memory (freed with free): 2 MiB aligned and, on Linux,
 * asking for transparent huge pages, so first touch takes one fault per
 * 2 MiB instead of per 4 KiB (on this project's VMs a 4 KiB fault costs
 * ~8 us: 2 s for a 1 GB model) and decode's streaming reads fewer TLB
 * entries. */
static void *alloc_huge(size_t bytes)
{
	const size_t huge = (size_t)2 << 20;
	const size_t n = bytes > SIZE_MAX - huge ? 0 : (bytes + huge - 1) / huge * huge;
	void *p = n ? aligned_alloc(huge, n) : NULL;
#if defined(MADV_HUGEPAGE)
	if (p)
		(void)madvise(p, n, MADV_HUGEPAGE); /* a hint: failure changes nothing */
#endif
	return p;
}

/* Where this CPU gains from it (kcpu_pack_wanted: AVX-512, and the dtypes
 * with a repacked kernel), a matrix gets the repacked copy the matmul reads
 * instead (kcpu_pack: the weights' size, built once here over the pool);
 * w->data stays valid for everything else (embedding gathers of a tied
 * head, other backends). The copy is owned by the backend. The original's
 * pages are then handed back to the kernel where it can take them
 * (MADV_PAGEOUT: a mapped file's clean pages are dropped and read again if
 * touched; anonymous memory without swap stays as it is), so a mapped model
 * does not sit in memory twice. */
static int pack_weight(struct cpu_backend *cb, struct kmat *w, const char *name, struct diag *d)
{
	if (w->packed || !kcpu_pack_wanted(w))
		return 0;
	size_t bytes;
	int rc = kcpu_pack_bytes(w, &bytes);
	if (rc)
		return diag_set(d, rc, "%s: cannot repack (%s)", name, err_str(rc));
	void *p = alloc_huge(bytes);
	if ((rc = own(cb, p)))
		return diag_set(d, rc, "%s: out of memory repacking", name);
	if ((rc = kcpu_pack(cb->pool, w, p)))
		return diag_set(d, rc, "%s: repacking failed (%s)", name, err_str(rc));
	w->packed = p;
#if defined(MADV_PAGEOUT)
	uint64_t row_bytes;
	if (!dtype_row_bytes(w->dtype, (uint64_t)w->cols, &row_bytes)) {
		const uintptr_t page = 4096, a = (uintptr_t)w->data;
		const uintptr_t lo = (a + page - 1) / page * page;
		const uintptr_t hi = (a + (uintptr_t)(row_bytes * (uint64_t)w->rows)) / page * page;
		if (hi > lo)
			(void)madvise((void *)lo, hi - lo, MADV_PAGEOUT); /* a hint */
	}
#endif
	return 0;
}

/* A (rows, cols) weight matrix as a kmat (backend_matrix_view checks it),
 * converted when quant asks, repacked for the matmul when that pays. */
static int weight_view(struct cpu_backend *cb, const struct tensor *t, int64_t rows, int64_t cols,
		       enum dtype quant, struct kmat *out, struct diag *d)
{
	const char *name = t->name ? t->name : "(unnamed)";
	int rc = backend_matrix_view(t, rows, cols, out, d);
	if (!rc)
		rc = quantize_weight(cb, out, quant, name, d);
	return rc ? rc : pack_weight(cb, out, name, d);
}

/* A (n) vector as an F32 copy owned by the backend; *out NULL when absent and
 * optional. */
static int vector_f32(struct cpu_backend *cb, const struct tensor *t, int64_t n, bool required,
		      float **out, struct diag *d)
{
	const char *name = t->name ? t->name : "(unnamed)";
	*out = NULL;
	if (!tensor_present(t))
		return required ? diag_set(d, ERR_FORMAT, "%s: vector missing", name) : 0;
	if (t->n_dims != 1 || t->shape[0] != n)
		return diag_set(d, ERR_FORMAT, "%s: shape is not (%lld)", name, (long long)n);
	if (!(t->dtype == DT_F32 || t->dtype == DT_F16 || t->dtype == DT_BF16))
		return diag_set(d, ERR_UNSUPPORTED, "%s: vector dtype %s", name, dtype_name(t->dtype));
	uint64_t bytes;
	if (dtype_row_bytes(t->dtype, (uint64_t)n, &bytes) || t->n_bytes < bytes)
		return diag_set(d, ERR_FORMAT, "%s: too few bytes", name);
	float *v = malloc((size_t)n * sizeof(float));
	int rc = own(cb, v);
	if (rc)
		return diag_set(d, rc, "%s: out of memory", name);
	struct kmat k = { .dtype = t->dtype, .rows = 1, .cols = n, .data = t->data };
	kcpu_dequant_row(&k, 0, v);
	*out = v;
	return 0;
}

static int load_layers(struct cpu_backend *cb, enum dtype quant, struct diag *d)
{
	const struct model_config *c = &cb->cfg;
	const int64_t q_dim = (int64_t)c->n_heads * c->head_dim;
	const int64_t kv_dim = (int64_t)c->n_kv_heads * c->head_dim;
	for (int l = 0; l < c->n_layers; l++) {
		const struct layer_weights *w = &cb->m->w.layers[l];
		struct cpu_layer *o = &cb->layers[l];
		int rc;
		if ((rc = vector_f32(cb, &w->attn_norm, c->hidden, true, &o->attn_norm, d)) ||
		    (rc = weight_view(cb, &w->wq, q_dim, c->hidden, quant, &o->wq, d)) ||
		    (rc = weight_view(cb, &w->wk, kv_dim, c->hidden, quant, &o->wk, d)) ||
		    (rc = weight_view(cb, &w->wv, kv_dim, c->hidden, quant, &o->wv, d)) ||
		    (rc = vector_f32(cb, &w->bq, q_dim, c->qkv_bias, &o->bq, d)) ||
		    (rc = vector_f32(cb, &w->bk, kv_dim, c->qkv_bias, &o->bk, d)) ||
		    (rc = vector_f32(cb, &w->bv, kv_dim, c->qkv_bias, &o->bv, d)) ||
		    (rc = vector_f32(cb, &w->q_norm, c->head_dim, c->qk_norm, &o->q_norm, d)) ||
		    (rc = vector_f32(cb, &w->k_norm, c->head_dim, c->qk_norm, &o->k_norm, d)) ||
		    (rc = weight_view(cb, &w->wo, c->hidden, q_dim, quant, &o->wo, d)) ||
		    (rc = vector_f32(cb, &w->ffn_norm, c->hidden, true, &o->ffn_norm, d)) ||
		    (rc = weight_view(cb, &w->w_gate, c->ffn, c->hidden, quant, &o->w_gate, d)) ||
		    (rc = weight_view(cb, &w->w_up, c->ffn, c->hidden, quant, &o->w_up, d)) ||
		    (rc = weight_view(cb, &w->w_down, c->hidden, c->ffn, quant, &o->w_down, d)))
			return rc;
		/* only the config decides whether a bias / q-k norm applies */
		if (!c->qkv_bias)
			o->bq = o->bk = o->bv = NULL;
		if (!c->qk_norm)
			o->q_norm = o->k_norm = NULL;
	}
	return 0;
}

/* The KV pool: zeroed pages on first touch (a pool sized for the whole
 * context costs only what sequences use), asking for transparent huge
 * pages: decode reads every sequence's blocks, scattered over the pool,
 * each step, and 4 KiB pages would make most of those reads TLB misses. */
static void *kv_map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
#if defined(MADV_HUGEPAGE)
	(void)madvise(p, bytes, MADV_HUGEPAGE); /* a hint: failure changes nothing */
#endif
	return p;
}

static void kv_unmap(void *p, size_t bytes)
{
	if (p)
		munmap(p, bytes);
}

static void cpu_free(struct backend *b)
{
	struct cpu_backend *cb = (struct cpu_backend *)b;
	if (!cb)
		return;
	kpool_destroy(cb->pool);
	for (int i = 0; i < cb->n_owned; i++)
		free(cb->owned[i]);
	free(cb->owned);
	free(cb->layers);
	free(cb->inv_freq);
	kv_unmap(cb->kv, cb->kv_bytes);
	free(cb->x);
	free(cb->xn);
	free(cb->q);
	free(cb->k);
	free(cb->v);
	free(cb->attn);
	free(cb->tmp);
	free(cb->gate);
	free(cb->up);
	free(cb->scratch);
	free(cb);
}

static int cpu_alloc_kv(struct backend *b, int n_blocks, int block_size, enum dtype kv_dtype)
{
	struct cpu_backend *cb = (struct cpu_backend *)b;
	if (n_blocks <= 0 || block_size <= 0 || !(kv_dtype == DT_F32 || kv_dtype == DT_F16))
		return ERR_INVAL;
	size_t esize = kv_dtype == DT_F16 ? 2 : 4, slot_vals, layer_bytes, total;
	if (ck_mul((size_t)cb->cfg.n_kv_heads, (size_t)cb->cfg.head_dim, &slot_vals) ||
	    ck_mul(slot_vals, esize, &layer_bytes) ||
	    ck_mul(layer_bytes, (size_t)n_blocks, &layer_bytes) ||
	    ck_mul(layer_bytes, (size_t)block_size, &layer_bytes) ||
	    ck_mul(layer_bytes, 2 * (size_t)cb->cfg.n_layers, &total))
		return ERR_OVERFLOW;
	void *kv = kv_map(total);
	if (!kv)
		return ERR_NOMEM;
	kv_unmap(cb->kv, cb->kv_bytes);
	cb->kv = kv;
	cb->kv_bytes = total;
	cb->kv_layer_bytes = layer_bytes;
	cb->n_blocks = n_blocks;
	cb->block_size = block_size;
	cb->kv_dtype = kv_dtype;
	return 0;
}

static int cpu_copy_blocks(struct backend *b, const int32_t *src, const int32_t *dst, int n)
{
	struct cpu_backend *cb = (struct cpu_backend *)b;
	const size_t block_bytes = cb->kv_layer_bytes / (size_t)cb->n_blocks;
	char *base = cb->kv;
	for (int l = 0; l < 2 * cb->cfg.n_layers; l++) { /* K and V of every layer */
		char *pool = base + (size_t)l * cb->kv_layer_bytes;
		for (int i = 0; i < n; i++)
			if (src[i] != dst[i])
				memcpy(pool + (size_t)dst[i] * block_bytes,
				       pool + (size_t)src[i] * block_bytes, block_bytes);
	}
	return 0;
}

static const struct backend_ops cpu_ops = {
	.name = "cpu",
	.alloc_kv = cpu_alloc_kv,
	.forward = cpu_forward,
	.copy_blocks = cpu_copy_blocks,
	.free = cpu_free,
};

static float *alloc_rows(int rows, int64_t cols, int *rc)
{
	size_t n;
	if (*rc)
		return NULL;
	if (ck_mul((size_t)rows, (size_t)cols, &n) || ck_mul(n, sizeof(float), &n)) {
		*rc = ERR_OVERFLOW;
		return NULL;
	}
	float *p = malloc(n ? n : 1);
	if (!p)
		*rc = ERR_NOMEM;
	return p;
}

static int alloc_activations(struct cpu_backend *cb, const struct engine_opts *o, struct diag *d)
{
	const struct model_config *c = &cb->cfg;
	const int T = o->max_batch_tokens;
	const int64_t q_dim = (int64_t)c->n_heads * c->head_dim;
	const int64_t kv_dim = (int64_t)c->n_kv_heads * c->head_dim;
	size_t max_ctx;
	if (ck_mul((size_t)o->max_blocks_per_seq, (size_t)o->block_size, &max_ctx) ||
	    max_ctx > (size_t)1 << 30)
		return diag_set(d, ERR_OVERFLOW, "max_blocks_per_seq * block_size is too large");
	cb->max_tokens = T;
	cb->max_ctx = (int)max_ctx;
	int rc = 0;
	cb->x = alloc_rows(T, c->hidden, &rc);
	cb->xn = alloc_rows(T, c->hidden, &rc);
	cb->tmp = alloc_rows(T, c->hidden, &rc);
	cb->q = alloc_rows(T, q_dim, &rc);
	cb->attn = alloc_rows(T, q_dim, &rc);
	cb->k = alloc_rows(T, kv_dim, &rc);
	cb->v = alloc_rows(T, kv_dim, &rc);
	cb->gate = alloc_rows(T, c->ffn, &rc);
	cb->up = alloc_rows(T, c->ffn, &rc);
	/* an attention tile (ops.h), or RoPE's cos/sin: both never at once */
	const size_t attn_floats =
	    kops_attn_scratch_floats(c->n_heads / c->n_kv_heads, (int)max_ctx, c->head_dim);
	cb->scratch_per_thread =
	    attn_floats > (size_t)c->head_dim ? attn_floats : (size_t)c->head_dim;
	cb->scratch = alloc_rows(cb->n_threads, (int64_t)cb->scratch_per_thread, &rc);
	if (rc)
		return diag_set(d, rc, "activation buffers for %d tokens: %s", T, err_str(rc));
	return 0;
}

int backend_cpu_create(const struct model *m, const struct engine_opts *opts,
		       struct backend **out, struct diag *d)
{
	*out = NULL;
	if (!m || !opts)
		return diag_set(d, ERR_INVAL, "no model or options");
	int rc = backend_check_config(&m->cfg, d);
	if (rc)
		return rc;
	if (!m->w.layers)
		return diag_set(d, ERR_FORMAT, "model has no layers");
	if (opts->quantization != DT_F32 && opts->quantization != DT_I8 &&
	    opts->quantization != DT_F8_E4M3)
		return diag_set(d, ERR_INVAL, "quantization must be none, int8 or fp8");
	struct cpu_backend *cb = calloc(1, sizeof *cb);
	if (!cb)
		return diag_set(d, ERR_NOMEM, "out of memory");
	cb->base.ops = &cpu_ops;
	cb->m = m;
	cb->cfg = m->cfg;
	cb->isa = kops_isa_detect();
	if ((rc = kpool_create(opts->n_threads, &cb->pool))) {
		diag_set(d, rc, "worker pool of %d threads: %s", opts->n_threads, err_str(rc));
		goto fail;
	}
	cb->n_threads = kpool_size(cb->pool);
	const struct model_config *c = &cb->cfg;
	cb->layers = calloc((size_t)c->n_layers, sizeof *cb->layers);
	cb->inv_freq = malloc((size_t)(c->head_dim / 2) * sizeof(float));
	if (!cb->layers || !cb->inv_freq) {
		rc = diag_set(d, ERR_NOMEM, "out of memory");
		goto fail;
	}
	backend_rope_inv_freq(c, &m->w.rope_freqs, cb->inv_freq);
	/* Embeddings stay in the file's dtype: only gathered rows are dequantized,
	 * and a tied LM head must read the very same table. */
	if ((rc = backend_matrix_view(&m->w.tok_embd, c->vocab, c->hidden, &cb->tok_embd, d)))
		goto fail;
	if (c->tied_embeddings || !tensor_present(&m->w.lm_head)) {
		cb->lm_head = cb->tok_embd; /* the same blocks; only the head is repacked */
		if ((rc = pack_weight(cb, &cb->lm_head, "token embeddings as LM head", d)))
			goto fail;
	} else if ((rc = weight_view(cb, &m->w.lm_head, c->vocab, c->hidden, DT_F32, &cb->lm_head,
				     d))) {
		/* The LM head keeps its dtype under --quantization, as vLLM does:
		 * it is one matrix, and the logits are most sensitive to it. */
		goto fail;
	}
	if ((rc = vector_f32(cb, &m->w.out_norm, c->hidden, true, &cb->out_norm, d)) ||
	    (rc = load_layers(cb, opts->quantization, d)) ||
	    (rc = alloc_activations(cb, opts, d)))
		goto fail;
	if ((rc = cpu_alloc_kv(&cb->base, opts->n_kv_blocks, opts->block_size, opts->kv_dtype))) {
		diag_set(d, rc, "KV pool of %d blocks x %d (%s): %s", opts->n_kv_blocks,
			 opts->block_size, dtype_name(opts->kv_dtype), err_str(rc));
		goto fail;
	}
	*out = &cb->base;
	return 0;
fail:
	cpu_free(&cb->base);
	return rc;
}
