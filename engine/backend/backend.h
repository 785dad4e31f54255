/* engine/backend/backend.h — the backend vtable behind struct engine (engine.h).
 * Sees the batch and the options through engine/batch.h, never engine.h.
 *
 * A backend owns the weights in its preferred form (converted at create when
 * engine_opts.quantization asks), the paged KV pool and its activation
 * buffers. engine.c validates every batch before calling forward, so a
 * backend may trust the indices it is given. Called from the engine thread
 * only; a backend fans work out to its own threads (CPU: kernels/cpu/pool.h)
 * or device streams. The model passed at create is borrowed and must outlive
 * the backend.
 *
 * Implementations: engine/backend/cpu_backend.c + cpu_forward.c (always; the
 * reference every other backend is tested against) and engine/backend/
 * cuda_backend.c + cuda_weights.c + cuda_forward.c (builds with CUDA;
 * kernels/cuda). Shared by both: engine/backend/backend_util.c.
 */
#ifndef AORTA_ENGINE_BACKEND_BACKEND_H
#define AORTA_ENGINE_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "engine/batch.h" /* not engine.h: the seam includes the backends, not back */
#include "engine/model/model.h"
#include "kernels/cpu/matmul.h"

struct backend;
struct k_sample_args; /* kernels/sample.h */

struct backend_ops {
	const char *name;
	/* (Re)allocate the KV pool: n_blocks blocks of block_size slots, every
	 * layer, K and V, in kv_dtype; contents zeroed. */
	int (*alloc_kv)(struct backend *b, int n_blocks, int block_size, enum dtype kv_dtype);
	/* One validated step; logits [n_logits, vocab] in logits_rows order. */
	int (*forward)(struct backend *b, const struct engine_batch *batch, float *logits);
	/* Optional (NULL: the engine runs forward, then k_sample_ref on the host):
	 * a step, then the sampling chain on the device for every logits row;
	 * a's arrays are host pointers (see engine_forward_sample). */
	int (*forward_sample)(struct backend *b, const struct engine_batch *batch,
			      struct k_sample_args *a);
	/* Copy whole blocks src[i] -> dst[i] in every layer (ids already checked). */
	int (*copy_blocks)(struct backend *b, const int32_t *src, const int32_t *dst, int n);
	void (*free)(struct backend *b);
};

struct backend {
	const struct backend_ops *ops;
};

/* The CPU backend. Converts weights per opts->quantization, allocates the
 * activations for opts->max_batch_tokens rows and the KV pool. */
int backend_cpu_create(const struct model *m, const struct engine_opts *opts,
		       struct backend **out, struct diag *d);

/* The CUDA backend (only in builds with CUDA; elsewhere create returns
 * ERR_UNSUPPORTED and available is false). Uploads the weights, sizes the
 * activations, then the KV pool: opts->n_kv_blocks, or when that is 0 what
 * gpu_memory_utilization leaves (*n_kv_blocks_out says how many). */
int backend_cuda_create(const struct model *m, const struct engine_opts *opts,
			struct backend **out, int *n_kv_blocks_out, struct diag *d);
bool backend_cuda_available(void);

/* ---- shared by the backends (engine/backend/backend_util.c) ---- */

/* The config's sizes are positive and consistent (GQA divides, even head_dim,
 * RoPE parameters valid, nothing implausibly large). */
int backend_check_config(const struct model_config *c, struct diag *d);
/* RoPE inverse frequencies [head_dim / 2] with the config's scaling (or a
 * GGUF rope_freqs tensor), computed in double. */
void backend_rope_inv_freq(const struct model_config *c, const struct tensor *freq_factors,
			   float *out);
/* A (rows, cols) weight matrix of the model as a kmat view, after checking it
 * is one: present, that shape, a weight dtype (F32/F16/BF16/Q8_0/I8/F8_E4M3),
 * enough bytes, and 1 or rows scales for I8/F8. */
int backend_matrix_view(const struct tensor *t, int64_t rows, int64_t cols, struct kmat *out,
			struct diag *d);

#endif
