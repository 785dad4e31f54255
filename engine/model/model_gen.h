/* engine/model/model_gen.h — the test-model generator: deterministic (seeded)
 * random-weight models of any supported shape, written as a GGUF file or as a
 * Hugging Face directory (config.json, model.safetensors [sharded + index],
 * tokenizer.json, tokenizer_config.json, generation_config.json).
 *
 * The same options and seed give the SAME model function in both formats:
 * weights are drawn per tensor from (seed, HF tensor name) in HF layout, then
 * Q/K rows are permuted for GGUF llama/mistral the way llama.cpp's converter
 * does (rope style NORM), and 16-bit values are rounded once so the F32
 * vectors of a GGUF file equal the 16-bit ones of the HF directory.
 * Scales are chosen so logits are peaked but not degenerate (greedy decoding
 * is meaningful): embeddings and the LM head have std 4/sqrt(hidden), inner
 * matrices ~1/sqrt(fan_in), norms 1 +- 0.1.
 *
 * Vocabulary: unless tokenizer_dir is given (HF only), a built-in byte-level
 * GPT-2-style BPE: the 256 byte pieces in byte order, a few merges, then the
 * control tokens <|begin_of_text|> (BOS), <|end_of_text|> (EOS),
 * <|im_start|>, <|im_end|> (also an end-of-turn id) and a ChatML template;
 * padded with <|reserved_N|> control tokens up to cfg.vocab when that is
 * larger. Pure functions of their arguments; any thread; the options are
 * borrowed for the call.
 */
#ifndef AORTA_ENGINE_MODEL_MODEL_GEN_H
#define AORTA_ENGINE_MODEL_MODEL_GEN_H

#include <stdint.h>

#include "common/err.h"
#include "engine/model/model.h"

struct model_gen_opts {
	/* Shape. Used: arch, n_layers, hidden, n_heads, n_kv_heads, head_dim,
	 * ffn, vocab (0 = the vocabulary's own size), rope_theta, rope_scaling,
	 * rms_eps, tied_embeddings, qkv_bias, qk_norm, max_ctx, name.
	 * BOS/EOS/add_bos/chat_template come from the vocabulary. */
	struct model_config cfg;
	/* GGUF: DT_F32, DT_F16, DT_BF16, DT_Q8_0 (Q8_0 for matrices; vectors stay
	 * F32). HF: DT_F32, DT_F16, DT_BF16, DT_F8_E4M3 (FP8 matrices with
	 * per-row F32 weight_scale; embeddings and vectors BF16). */
	enum dtype dtype;
	uint64_t seed;
	uint32_t gguf_version;	   /* 2 or 3 (0 = 3) */
	int n_shards;		   /* HF: > 1 writes shards + model.safetensors.index.json */
	const char *tokenizer_dir; /* HF: copy tokenizer.json + tokenizer_config.json from here */
	/* HF: the FP8 KV cache's scales as llm-compressor writes them, per layer
	 * l: self_attn.k_scale = kv_scale * (l + 1) and self_attn.v_scale =
	 * 2 * kv_scale * (l + 1), F32 scalars, or (kv_scale_per_head) vectors of
	 * n_kv_heads values whose largest is that. 0 = none. Any value is
	 * written (tests write bad ones). */
	float kv_scale;
	bool kv_scale_per_head;
	bool kv_scale_legacy; /* instead one self_attn.kv_scale (kv_scale * (l + 1)) for K and V */
};

/* Built-in vocabulary ids (fixed by the generator's vocabulary). */
enum { MODEL_GEN_BOS = 264, MODEL_GEN_EOS = 265, MODEL_GEN_IM_START = 266, MODEL_GEN_IM_END = 267,
       MODEL_GEN_N_VOCAB = 268 };

/* The demo shape `make run` serves: llama, hidden 256, 4 layers, 8 heads,
 * 4 KV heads, ffn 768, the byte vocabulary, F16, seed 42. */
void model_gen_default_opts(struct model_gen_opts *o);

int model_gen_write_gguf(const struct model_gen_opts *o, const char *path, struct diag *d);
/* Creates dir if needed; existing files with the same names are replaced. */
int model_gen_write_hf_dir(const struct model_gen_opts *o, const char *dir, struct diag *d);

#endif
