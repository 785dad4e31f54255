/* engine/model/model_gen_internal.h — what the two halves of the test-model
 * generator share (model_gen.c: options, vocabulary, config, weights, GGUF;
 * model_gen_hf.c: the HF directory). Not a public API: only those two
 * files include it.
 */
#ifndef AORTA_ENGINE_MODEL_MODEL_GEN_INTERNAL_H
#define AORTA_ENGINE_MODEL_MODEL_GEN_INTERNAL_H

#include <stdint.h>

#include "engine/model/model_gen.h"
#include "engine/model/model_internal.h"

/* the built-in byte-level vocabulary: 256 bytes, the merges, the specials */
#define GEN__N_MERGES 8
#define GEN__N_SPECIALS 4
extern const char *const gen__merges[GEN__N_MERGES][2];
extern const char *const gen__specials[GEN__N_SPECIALS];
extern const char gen__chat_template[];

struct gen__vocab {
	int n;
	char **tok;
	int32_t *type;
};

void gen__vocab_free(struct gen__vocab *v);
int gen__vocab_build(struct gen__vocab *v, int n_total);
int gen__resolve_config(const struct model_gen_opts *o, int tok_vocab, struct model_config *c,
			struct diag *d);
/* One tensor's values from its own stream (seed, HF name), in HF layout,
 * rounded once to round's storage type; malloc'd, *n_out values. */
float *gen__values(const struct model_config *c, const struct model_tensor_name *e,
		   const char *hf_name, uint64_t seed, enum dtype round, uint64_t *n_out);

/* Owned buffers kept alive until the writer has written them. */
struct gen__keep {
	void **p;
	int n, cap;
};

int gen__keep_add(struct gen__keep *k, void *p);
void gen__keep_free(struct gen__keep *k);
/* Convert floats to a storage dtype in a new buffer. */
void *gen__encode(const float *v, uint64_t n, enum dtype t, uint64_t *bytes);

#endif
