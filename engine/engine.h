/* engine/engine.h — the engine seam: one forward step over a flat batch.
 *
 * The engine knows nothing about requests. Each step it receives a flat batch
 * that mixes prefill chunks and single decode tokens of many sequences, reads
 * and writes the paged KV pool it owns, and returns logits for the rows that
 * need them. It is driven by one thread at a time (the engine thread); the
 * CPU backend fans each step out over its own worker pool.
 *
 * KV pool: n_kv_blocks blocks of block_size token slots, per layer, for K and
 * V. A token's KV slot is block_id * block_size + offset. Which blocks belong
 * to which sequence is decided by batching/ (the only owner of block
 * allocation); the engine just reads the block tables it is given. How values
 * are laid out inside a block is the backend's business.
 *
 * A backend is a small vtable (engine/backend/backend.h): alloc_kv, forward, forward_sample,
 * copy_blocks, free; CPU (engine/backend/cpu_backend.c on kernels/cpu) always, CUDA
 * where built. The batch, the options and engine_kv_block_bytes live in
 * engine/batch.h, which the backends include without this header.
 * Tests: tests/engine/test_engine*.c, tests/reference/.
 */
#ifndef AORTA_ENGINE_ENGINE_H
#define AORTA_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "engine/batch.h" /* struct engine_opts, struct engine_batch, engine_kv_block_bytes */
#include "engine/model/model.h"

struct engine;

/* Build an engine for m (borrowed: it must outlive the engine), allocating the
 * KV pool and activation buffers. Weights may be converted here
 * (opts->quantization). */
int engine_create(const struct model *m, const struct engine_opts *opts, struct engine **out,
		  struct diag *d);
/* n_kv_blocks may be 0 only with the CUDA backend: the pool then takes what
 * gpu_memory_utilization leaves; engine_n_kv_blocks tells the result. */
int engine_n_kv_blocks(const struct engine *e);
/* "cpu" or "cuda": the backend engine_create picked. */
const char *engine_backend_name(const struct engine *e);
/* True when this build has the CUDA backend and a GPU is visible. */
bool engine_cuda_available(void);
void engine_destroy(struct engine *e);

/* Run one step. logits: [n_logits, vocab] floats, written in logits_rows order.
 * Returns ERR_INVAL for a batch that breaks the rules above (bad ids, slots,
 * positions, sizes; n_tokens over max_batch_tokens, n_seqs over max_seqs,
 * context_len over max_blocks_per_seq * block_size), never touching memory out
 * of range; the KV pool is untouched then. */
int engine_forward(struct engine *e, const struct engine_batch *b, float *logits);

struct k_sample_args; /* kernels/sample.h (a plain C header) */

/* True when the backend samples on its device: engine_forward_sample then
 * moves only tokens and logprobs, not logits, to the host (CUDA). */
bool engine_samples_on_device(const struct engine *e);

/* One step like engine_forward, then the sampling chain of
 * kernels/sample.h on each of the b->n_logits rows, row i with
 * a->rows[i]. a's arrays are HOST pointers (rows, pen, bias, ban in; token,
 * logprob, rank, top_ids, top_logprobs out, n_logits rows each); a->n_rows
 * must be b->n_logits and a->vocab the model's; a->logits and a->workspace
 * are the engine's business and ignored. The CUDA backend samples on the
 * device (k_sample); the CPU runs the reference (k_sample_ref) on its logits,
 * so both give the same tokens. Build rows with sampler_device_row and read
 * results with sampler_device_finish (engine/sample/sampler.h). */
int engine_forward_sample(struct engine *e, const struct engine_batch *b,
			  struct k_sample_args *a);

/* Greedy sampling: tokens_out[i] = argmax of row i of logits [n_rows, vocab]. */
int engine_sample_greedy(struct engine *e, const float *logits, int n_rows, int32_t *tokens_out);

/* The model's vocabulary size (the width of a logits row). */
int engine_vocab(const struct engine *e);

/* Copy whole KV blocks src[i] -> dst[i], in order, in every layer (the
 * copy-on-write of a shared last block). ERR_INVAL for an id out of range. */
int engine_copy_blocks(struct engine *e, const int32_t *src, const int32_t *dst, int n);

#endif
