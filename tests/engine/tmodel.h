/* tests/engine/tmodel.h — random in-memory models for the engine tests, the
 * numpy reference dump and the benchmark's synthetic mode.
 *
 * tmodel_create fills a struct model from a config and a seed: weights drawn
 * uniformly with a 1/sqrt(fan_in) scale (so activations stay O(1) like a
 * trained model's), norm weights near 1, small biases. The same (cfg, seed)
 * always gives the same F32 master values, whatever the storage dtype, so an
 * F32 model and its Q8_0 / INT8 / FP8 / F16 twins compute nearly the same
 * function. With layout NORM the Q/K rows are permuted per head the way
 * llama.cpp's GGUF converter does, so it is the same function again.
 * Single-threaded; the model owns everything and tmodel_destroy frees it.
 */
#ifndef AORTA_TESTS_ENGINE_TMODEL_H
#define AORTA_TESTS_ENGINE_TMODEL_H

#include <stdint.h>
#include <stdio.h>

#include "engine/model/model.h"

struct engine;

struct tmodel_opts {
	enum dtype wdtype;	 /* F32, F16, BF16, Q8_0, I8 or F8_E4M3 for the matrices */
	uint64_t seed;
	enum rope_style layout;	 /* NEOX: HF rows; NORM: GGUF-permuted Q/K rows */
	float embd_scale;	 /* uniform range of embeddings; 0 = 1.0 */
	float head_gain;	 /* multiplies the untied LM head (sharper logits); 0 = 1.0 */
	enum dtype head_dtype;	 /* untied LM head's dtype; DT_F32 (0) = same as wdtype */
	float kv_scale;		 /* > 0: FP8 KV cache scales of layer l, k = kv_scale * (1 +
				  * l / 4), v = 1.5 k (engine/model/model.h k_scale, v_scale) */
	bool kv_scale_per_head;	 /* and per KV head h: (h + 1) / n_kv_heads of those */
};

int tmodel_create(const struct model_config *cfg, const struct tmodel_opts *o, struct model **out);
void tmodel_destroy(struct model *m);

/* One sequence's tokens tok[a, a+n) at positions a.., through block table
 * table (n_table blocks of block_size), every row's logits into logits
 * (n * vocab): a prefill chunk, or a decode step when n = 1. The engine's
 * return code. */
int tmodel_forward_span(struct engine *e, const int32_t *tok, int a, int n, const int32_t *table,
			int n_table, int block_size, float *logits);

/* A small llama-like config (hidden 64, 2 layers, GQA 4/2, vocab 256). */
void tmodel_config_small(struct model_config *cfg);

#endif
