/* engine/model/model.h — a loaded model: its config, its weights, where its
 * tokenizer lives.
 *
 * A model is loaded once at start-up (any thread; the loader is not
 * reentrant on the same struct) and is read-only afterwards, so any thread may
 * read it. Weights are memory-mapped from the file where the file's layout
 * allows; `struct tensor.data` is then borrowed from the mapping and valid until
 * model_destroy(). Model differences are config fields, not code paths.
 *
 * Loaders: engine/model/gguf.c (GGUF v2/v3) and engine/model/safetensors.c (HF directory:
 * config.json + *.safetensors [+ index] + tokenizer.json). Model files come from
 * strangers: every size/offset is checked before use (see common/checked.h).
 */
#ifndef AORTA_ENGINE_MODEL_MODEL_H
#define AORTA_ENGINE_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "kernels/dtype.h"

enum model_arch { ARCH_LLAMA = 0, ARCH_MISTRAL, ARCH_QWEN2, ARCH_QWEN3, ARCH__COUNT };

/* How RoPE pairs the dimensions of a head.
 * NEOX: pairs (i, i + d/2) — Hugging Face `rotate_half`; GGUF qwen2/qwen3.
 * NORM: pairs (2i, 2i+1)   — GGUF llama/mistral, whose Q/K rows llama.cpp's
 *       converter permuted; the two give the same model function. */
enum rope_style { ROPE_STYLE_NEOX = 0, ROPE_STYLE_NORM = 1 };

enum rope_scaling_type { ROPE_SCALING_NONE = 0, ROPE_SCALING_LINEAR, ROPE_SCALING_LLAMA3 };

#define MODEL_MAX_EOS 8

struct model_config {
	enum model_arch arch;
	int n_layers;
	int hidden;     /* d_model */
	int n_heads;    /* query heads */
	int n_kv_heads; /* K/V heads (GQA when < n_heads) */
	int head_dim;   /* usually hidden / n_heads, but not always (qwen3) */
	int ffn;        /* intermediate size of the SwiGLU MLP */
	int vocab;
	float rope_theta;
	enum rope_style rope_style;
	struct {
		enum rope_scaling_type type;
		float factor;
		float low_freq_factor;  /* llama3 */
		float high_freq_factor; /* llama3 */
		int original_max_pos;	/* llama3 */
	} rope_scaling;
	float rms_eps;
	bool tied_embeddings; /* lm_head shares tok_embd */
	bool qkv_bias;	      /* Qwen2: biases on Q/K/V projections */
	bool qk_norm;	      /* Qwen3: RMSNorm on each head of Q and K before RoPE */
	int max_ctx;	      /* max_position_embeddings / context_length */
	int bos_id;	      /* -1 when none */
	int eos_id;	      /* primary EOS, -1 when none */
	int n_eos_ids;	      /* all ids that end generation (eos_id first) */
	int eos_ids[MODEL_MAX_EOS];
	bool add_bos;	      /* prepend BOS when encoding a prompt */
	char *chat_template;  /* owned by the model; NULL when the files have none */
	char name[128];	      /* general.name / directory name */
};

/* A weight tensor. Shapes are outermost-first (PyTorch order): a Linear weight
 * is (out_features, in_features), stored row-major, one row per output. GGUF's
 * ne[] is innermost-first; the loader reverses it. */
struct tensor {
	const char *name;     /* name in the file; owned by the model */
	enum dtype dtype;
	int n_dims;
	int64_t shape[4];
	const void *data;     /* borrowed from the mapping or owned by the model */
	uint64_t n_bytes;
	const float *scale;   /* DT_I8 / DT_F8_E4M3: n_scale scales, else NULL */
	int64_t n_scale;      /* 1 (per tensor) or shape[0] (per output row) */
};

static inline bool tensor_present(const struct tensor *t)
{
	return t->data != NULL;
}

struct layer_weights {
	struct tensor attn_norm;  /* (hidden) */
	struct tensor wq;	  /* (n_heads*head_dim, hidden) */
	struct tensor wk;	  /* (n_kv_heads*head_dim, hidden) */
	struct tensor wv;	  /* (n_kv_heads*head_dim, hidden) */
	struct tensor bq, bk, bv; /* (rows of wq/wk/wv) when qkv_bias */
	struct tensor q_norm;	  /* (head_dim) when qk_norm */
	struct tensor k_norm;	  /* (head_dim) when qk_norm */
	struct tensor wo;	  /* (hidden, n_heads*head_dim) */
	struct tensor ffn_norm;	  /* (hidden) */
	struct tensor w_gate;	  /* (ffn, hidden) */
	struct tensor w_up;	  /* (ffn, hidden) */
	struct tensor w_down;	  /* (hidden, ffn) */
	/* The FP8 KV cache's scales from the checkpoint (HF self_attn.k_scale /
	 * v_scale, or kv_scale for both): the cache stores value / scale. 0: the
	 * checkpoint has none. Per KV head when the checkpoint has one per head:
	 * k_head_scale / v_head_scale [n_kv_heads] (else NULL), k_scale / v_scale
	 * then their largest. */
	float k_scale, v_scale;
	const float *k_head_scale, *v_head_scale;
};

struct model_weights {
	struct tensor tok_embd;	      /* (vocab, hidden) */
	struct layer_weights *layers; /* [n_layers] */
	struct tensor out_norm;	      /* (hidden) */
	struct tensor lm_head;	      /* (vocab, hidden); a copy of tok_embd's view when tied */
	/* (head_dim/2) F32, optional: llama.cpp stores llama3 rope scaling as
	 * per-frequency divisors (freq_i /= rope_freqs[i]) instead of keys. */
	struct tensor rope_freqs;
};

enum model_format { MODEL_FORMAT_GGUF = 0, MODEL_FORMAT_HF = 1 };

struct gguf_file; /* engine/model/gguf.h */

struct model {
	struct model_config cfg;
	struct model_weights w;
	enum model_format format;
	char *path; /* what was passed to model_load() */
	/* Tokenizer source: an HF directory's files (NULL when absent), or the GGUF
	 * file's tokenizer.ggml.* keys through `gguf`. */
	char *tokenizer_json_path;
	char *tokenizer_config_path;
	struct gguf_file *gguf; /* GGUF only; owned by the model */
	/* Every tensor in the file(s), for `aorta inspect`. */
	int n_tensors;
	struct tensor *tensors;
	void *priv; /* the loader's mappings and allocations */
};

/* Load a GGUF file or a Hugging Face model directory. On failure returns a
 * negative ERR_* and, when d is non-NULL, one line naming what was wrong
 * (e.g. "blk.0.attn_q.weight: type Q4_K is not supported"). */
int model_load(const char *path, struct model **out, struct diag *d);
void model_destroy(struct model *m);

const char *model_arch_name(enum model_arch a);
/* Total bytes of all weights (what one forward pass reads at least once). */
uint64_t model_weight_bytes(const struct model *m);

#endif
