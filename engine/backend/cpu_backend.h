/* engine/backend/cpu_backend.h — internal to the CPU backend (cpu_backend.c builds
 * it, cpu_forward.c runs it). Not a public header: use engine.h / backend.h.
 *
 * Weights are kmat views of the model's tensors (borrowed), or of converted
 * copies owned here when engine_opts.quantization asked for int8/fp8. Small
 * vectors (norm weights, biases) are converted to F32 copies owned here.
 */
#ifndef AORTA_ENGINE_BACKEND_CPU_BACKEND_H
#define AORTA_ENGINE_BACKEND_CPU_BACKEND_H

#include "engine/backend/backend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/pool.h"

struct cpu_layer {
	float *attn_norm;	/* (hidden) */
	struct kmat wq, wk, wv; /* (q_dim|kv_dim, hidden) */
	float *bq, *bk, *bv;	/* (q_dim|kv_dim) or NULL */
	float *q_norm, *k_norm; /* (head_dim) or NULL */
	struct kmat wo;		/* (hidden, q_dim) */
	float *ffn_norm;	/* (hidden) */
	struct kmat w_gate, w_up; /* (ffn, hidden) */
	struct kmat w_down;	  /* (hidden, ffn) */
};

struct cpu_backend {
	struct backend base;
	const struct model *m;
	struct model_config cfg;
	enum kops_isa isa;
	struct kpool *pool;
	int n_threads;

	struct kmat tok_embd; /* (vocab, hidden) */
	struct kmat lm_head;  /* (vocab, hidden); tok_embd when tied */
	float *out_norm;      /* (hidden) */
	struct cpu_layer *layers;
	float *inv_freq;      /* (head_dim / 2), scaling applied */
	void **owned;	      /* converted weight copies and F32 vectors */
	int n_owned, cap_owned;

	/* KV pool: per layer, K then V, each n_blocks * block_size slots of
	 * n_kv_heads * head_dim values in kv_dtype. */
	void *kv;	       /* mmap'd, kv_bytes long */
	size_t kv_bytes;
	size_t kv_layer_bytes; /* one of K or V, one layer */
	int n_blocks, block_size;
	enum dtype kv_dtype;

	/* activations for up to max_tokens rows */
	int max_tokens;
	int max_ctx; /* attention scratch length per thread */
	float *x, *xn, *q, *k, *v, *attn, *tmp, *gate, *up;
	float *scratch; /* n_threads * scratch_per_thread */
	size_t scratch_per_thread; /* kops_attn_scratch_floats(group, max_ctx, hd), >= hd */
};

int cpu_forward(struct backend *b, const struct engine_batch *batch, float *logits);

#endif
