/* engine/batch.h — what the engine seam and its backends share: the flat
 * batch of one step, the engine's options, and the size of one KV block. Plain
 * types (and one pure function, in engine/backend/backend_util.c), so that
 * engine/backend/backend.h sees them without engine.h: the seam includes the
 * backends, never the other way round. Included by engine.h, the public
 * header; use that. Tests: tests/engine/test_engine.c (batch rules,
 * engine_kv_block_bytes).
 */
#ifndef AORTA_ENGINE_BATCH_H
#define AORTA_ENGINE_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

struct model_config; /* engine/model/model.h */

/* Where the engine runs. CPU is the default (0) so a zeroed engine_opts is
 * the reference backend; AUTO picks CUDA when this build has it and a GPU is
 * visible (engine_cuda_available), else the CPU. */
enum engine_device { ENGINE_DEVICE_CPU = 0, ENGINE_DEVICE_CUDA, ENGINE_DEVICE_AUTO };

/* Options for engine_create. The activations are sized for
 * max_batch_tokens rows; attention scratch for max_blocks_per_seq *
 * block_size positions per worker. */
struct engine_opts {
	int n_threads;		  /* CPU worker threads; 0 = one per core */
	int block_size;		  /* tokens per KV block (default 16) */
	int n_kv_blocks;	  /* blocks in the pool */
	enum dtype kv_dtype;	  /* DT_F32 or DT_F16 on CPU */
	enum dtype quantization;  /* DT_F32 = keep the file's dtypes; DT_I8 or DT_F8_E4M3:
				   * F32/F16/BF16 projection weights become per-row int8 /
				   * fp8 at create (embeddings and LM head keep theirs) */
	int max_batch_tokens;	  /* most rows in one step (sizes the activations) */
	int max_seqs;		  /* most sequences in one step */
	int max_blocks_per_seq;	  /* block table width; ceil(max_model_len / block_size) */
	/* CUDA only (ignored on the CPU): */
	enum engine_device device;
	enum dtype gpu_dtype;	  /* weights/activations: DT_F16 or DT_BF16; DT_F32 (0) = auto:
				   * BF16 for BF16 files, F16 otherwise (vLLM's --dtype auto) */
	double gpu_memory_utilization; /* n_kv_blocks == 0: fill this fraction of device
					* memory (weights + activations + KV); 0 = 0.9 */
	bool enforce_eager;	  /* no CUDA graphs for decode steps */
};

/* One step. Rows are grouped by sequence: sequence s owns rows
 * [seq_start[s], seq_start[s+1]) (at least one row each), and those rows are
 * the sequence's last n new tokens in order: positions[seq_start[s] + i] ==
 * context_len[s] - n + i. A row attends to every position <= its own (causal
 * inside a prefill chunk, full over earlier tokens already in the KV pool).
 * Position t of sequence s lives in slot
 *   block_tables[s * max_blocks_per_seq + t / block_size] * block_size + t % block_size
 * and slot_mapping[row] must be exactly that slot for the row's position.
 * All arrays are borrowed for the call. */
struct engine_batch {
	int n_tokens;		     /* rows in this step */
	const int32_t *tokens;	     /* [n_tokens] token ids */
	const int32_t *positions;    /* [n_tokens] position of each token in its sequence */
	const int32_t *slot_mapping; /* [n_tokens] KV slot where each new token's K/V goes */
	int n_seqs;
	const int32_t *seq_start;    /* [n_seqs + 1] row offsets */
	const int32_t *context_len;  /* [n_seqs] tokens in KV after this step (cached + new) */
	const int32_t *block_tables; /* [n_seqs * max_blocks_per_seq] block ids, row per sequence */
	int max_blocks_per_seq;	     /* row stride of block_tables; <= engine_opts' */
	int n_logits;		     /* rows that need logits */
	const int32_t *logits_rows;  /* [n_logits] row indices, ascending */
};

/* Bytes one KV block takes across all layers (K and V), for sizing the pool
 * from a memory budget; 0 for an invalid shape or dtype, or on overflow. */
size_t engine_kv_block_bytes(const struct model_config *cfg, int block_size, enum dtype kv_dtype);

#endif
