/* engine/model/model_internal.h — helpers shared by the model-file loaders
 * (gguf.c, safetensors.c, model*.c). Not a public API: nothing outside the
 * model-files work includes it. Stateless; any thread.
 */
#ifndef AORTA_ENGINE_MODEL_MODEL_INTERNAL_H
#define AORTA_ENGINE_MODEL_MODEL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "engine/model/model.h"

struct gguf_file;
struct cJSON;

/* ---- tensor-name tables (model_names.c) ---- */

/* Symbolic dimensions of an expected shape, resolved against a config. */
enum mdim { MD_NONE = 0, MD_HIDDEN, MD_Q, MD_KV, MD_FFN, MD_VOCAB, MD_HEAD };
/* When a tensor is present. */
enum mcond { MC_ALWAYS = 0, MC_QKV_BIAS, MC_QK_NORM, MC_UNTIED };

struct model_tensor_name {
	size_t off;	    /* offsetof in struct layer_weights / struct model_weights */
	const char *gguf;   /* printf pattern with %d for the layer */
	const char *hf;
	enum mcond cond;
	int n_dims;
	enum mdim dims[2];  /* outermost-first */
	bool is_qk;	    /* Q or K rows: GGUF llama permutes them (rope NORM) */
	bool is_matrix;	    /* a Linear weight (quantizable) */
};

extern const struct model_tensor_name model_layer_names[];
extern const int model_n_layer_names;
extern const struct model_tensor_name model_global_names[];
extern const int model_n_global_names;

bool model_tensor_wanted(const struct model_config *c, enum mcond cond);
int64_t model_dim(const struct model_config *c, enum mdim d);
/* Format the name for layer il (ignored by global names). */
void model_tensor_name(const struct model_tensor_name *n, enum model_format fmt, int il,
		       char *out, size_t cap);

/* ---- config (model_config.c) ---- */

/* Fill c from a GGUF file's keys (and, for presence-derived fields, its
 * tensor table). chat_template is malloc'd (the caller owns it). */
int model_config_from_gguf(const struct gguf_file *g, struct model_config *c, struct diag *d);
/* Fill c from an HF directory: config.json, generation_config.json,
 * tokenizer_config.json (+ tokenizer.json for special-token ids). */
int model_config_from_hf(const char *dir, struct model_config *c, struct diag *d);
/* Check the dimensions are sane (positive, divisible, bounded). */
int model_config_validate(const struct model_config *c, struct diag *d);
/* The id of an added token by content in a parsed tokenizer.json; -1 if none. */
int model_hf_token_id(const struct cJSON *tokenizer_json, const char *content);

#endif
