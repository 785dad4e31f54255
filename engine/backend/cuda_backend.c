/* engine/backend/cuda_backend.c — the CUDA backend: the Llama-family forward pass of
 * engine/backend/cpu_forward.c on the GPU, behind the same vtable (engine/backend/backend.h).
 * This file owns its lifecycle (create, free, the vtable), the activations
 * and the paged KV pool; cuda_weights.c uploads the weights, cuda_forward.c
 * runs the step (cuda_internal.h joins them).
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
 * Tests: tests/engine/test_cuda_engine.c (logits vs the CPU engine, greedy
 * batch invariance, graphs vs eager); kernels: tests/kernels/. Only the
 * cuda_* files here (outside kernels/cuda) talk to the GPU, through
 * kernels/cuda's C headers.
 */
#include "engine/backend/backend.h"

#if AORTA_HAVE_CUDA

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "common/log.h"
#include "engine/backend/cuda_internal.h"
#include "kernels/cpu/pool.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_attn.h"
#include "kernels/cuda/kcuda_gemm.h"
#include "kernels/sample.h"

int cuda_dalloc(struct cuda_backend *cb, size_t bytes, void **out)
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

int cuda_dev_error(struct diag *d, int rc, const char *what)
{
	if (rc == ERR_NOMEM || rc == ERR_DEVICE)
		return diag_set(d, rc, "%s: %s", what, k_cuda_last_error());
	return diag_set(d, rc, "%s: %s", what, err_str(rc));
}

/* ---- activations and the staging area ----------------------------------------- */

/* The fusion counters to zero, and wait for it (at create, after a failed step). */
int cuda_zero_counters(struct cuda_backend *cb)
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
	if ((rc = cuda_dalloc(cb, T * H * 4, (void **)&cb->x)) ||
	    (rc = cuda_dalloc(cb, T * (QD + 2 * KVD) * 4, (void **)&cb->qkv)) ||
	    (rc = cuda_dalloc(cb, T * QD * 4, (void **)&cb->q)) ||
	    (rc = cuda_dalloc(cb, T * 2 * F * 4, (void **)&cb->gu)) ||
	    (rc = cuda_dalloc(cb, (size_t)LOGIT_ROWS * V * 4, (void **)&cb->logits)) ||
	    (rc = cuda_dalloc(cb, T * H * 2, &cb->xn)) ||
	    (rc = cuda_dalloc(cb, T * QD * 2, &cb->attn)) ||
	    (rc = cuda_dalloc(cb, T * F * 2, &cb->act)) ||
	    (rc = cuda_dalloc(cb, T * kmax, &cb->xq)) ||
	    (rc = cuda_dalloc(cb, T * 4, (void **)&cb->xq_scale)) ||
	    (rc = cuda_dalloc(cb, cb->attn_ws_bytes, &cb->attn_ws)) ||
	    (rc = cuda_dalloc(cb, GEMV_COUNTERS * 4, (void **)&cb->gemv_cnt)) ||
	    (rc = cuda_dalloc(cb, dec_rows * (size_t)c->n_heads * 4, (void **)&cb->attn_cnt)) ||
	    (cb->wscratch_bytes && (rc = cuda_dalloc(cb, cb->wscratch_bytes, &cb->wscratch))) ||
	    (rc = cuda_dalloc(cb, m->total * 4, (void **)&cb->d_meta)))
		return cuda_dev_error(d, rc, "activation buffers");
	if ((rc = k_cuda_host_alloc((void **)&cb->h_meta, m->total * 4)) ||
	    (rc = k_cuda_host_alloc((void **)&cb->h_logits, (size_t)LOGIT_ROWS * V * 4)))
		return cuda_dev_error(d, rc, "pinned host buffers");
	memset(cb->h_meta, 0, m->total * 4);
	if ((rc = cuda_zero_counters(cb)))
		return cuda_dev_error(d, rc, "fusion counters");
	return 0;
}

/* ---- KV pool -------------------------------------------------------------------- */

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
	cuda_drop_graphs(cb); /* they captured the old pool's address */
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

static void cu_free(struct backend *b)
{
	struct cuda_backend *cb = (struct cuda_backend *)b;
	if (!cb)
		return;
	kpool_destroy(cb->load_pool);
	if (cb->stream)
		k_cuda_stream_sync(cb->stream);
	cuda_drop_graphs(cb);
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
	.forward = cuda_forward,
	.forward_sample = cuda_forward_sample,
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
		return cuda_dev_error(d, rc, "cudaMemGetInfo");
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
		cuda_dev_error(d, rc, "CUDA device 0");
		goto fail;
	}
	/* programmatic dependent launch on Hopper and later (AORTA_CUDA_PDL=0:
	 * off, the benchmark's A/B); process-wide, like the device */
	k_cuda_set_pdl(cb->props.cc_major >= 9 && !pdl_off);
	if (kpool_create(opts->n_threads, &cb->load_pool)) /* else one thread converts */
		cb->load_pool = NULL;
	cb->layers = calloc((size_t)c->n_layers, sizeof *cb->layers);
	if (!cb->layers) {
		rc = diag_set(d, ERR_NOMEM, "out of memory");
		goto fail;
	}
	if ((rc = cuda_load_weights(cb, opts->quantization, d)) ||
	    (rc = alloc_activations(cb, d)))
		goto fail;
	kpool_destroy(cb->load_pool);
	cb->load_pool = NULL;
	/* the sampling workspace for the most rows k_sample sees at once, before
	 * the KV pool takes what is left (up to ~0.3 GB for big vocabularies) */
	const int s_rows = opts->max_batch_tokens < LOGIT_ROWS ? opts->max_batch_tokens : LOGIT_ROWS;
	const size_t s_ws = k_sample_workspace_bytes(s_rows, c->vocab);
	if ((rc = k_cuda_malloc(&cb->s_ws.d, s_ws ? s_ws : 16))) {
		cuda_dev_error(d, rc, "sampling workspace");
		goto fail;
	}
	cb->s_ws.cap = s_ws;
	int n_blocks = 0;
	if ((rc = size_kv(cb, opts, &n_blocks, d)))
		goto fail;
	if ((rc = cu_alloc_kv(&cb->base, n_blocks, opts->block_size, opts->kv_dtype))) {
		cuda_dev_error(d, rc, "KV pool");
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
