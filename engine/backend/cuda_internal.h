/* engine/backend/cuda_internal.h — internal to the CUDA backend: its state and
 * the calls its files make of each other. cuda_backend.c: lifecycle, the
 * vtable, activations, the KV pool; cuda_weights.c: weight upload and
 * conversion; cuda_forward.c: the step, CUDA graphs, device sampling. Not a
 * public header: use engine.h / backend.h. Only in builds with CUDA
 * (AORTA_HAVE_CUDA). Tests: tests/engine/test_cuda_engine.c.
 */
#ifndef AORTA_ENGINE_BACKEND_CUDA_INTERNAL_H
#define AORTA_ENGINE_BACKEND_CUDA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backend/backend.h"
#include "kernels/cpu/pool.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_gemm.h"

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

/* cuda_backend.c */

/* A device allocation freed with the backend (cb->allocs). */
int cuda_dalloc(struct cuda_backend *cb, size_t bytes, void **out);
/* rc into d with what, and the CUDA error text for device failures. */
int cuda_dev_error(struct diag *d, int rc, const char *what);
int cuda_zero_counters(struct cuda_backend *cb);

/* cuda_weights.c */

/* Every weight of cb->m on the device (cb->layers allocated, zeroed), with
 * quant as engine_opts.quantization; sets cb->wscratch_bytes for
 * alloc_activations. */
int cuda_load_weights(struct cuda_backend *cb, enum dtype quant, struct diag *d);

/* cuda_forward.c */

int cuda_forward(struct backend *be, const struct engine_batch *b, float *logits);
int cuda_forward_sample(struct backend *be, const struct engine_batch *b,
			struct k_sample_args *a);
void cuda_drop_graphs(struct cuda_backend *cb);

#endif
