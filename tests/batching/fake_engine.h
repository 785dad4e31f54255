/* tests/batching/fake_engine.h — a deterministic stand-in for engine/ that
 * checks the batch it is given and really uses its paged KV.
 *
 * The "KV" of a slot is the (token, position) written there. The next token
 * of a sequence is a hash of the tokens read back from its KV through its
 * block table (positions 0 .. context_len-1), so a wrong block table, slot,
 * missing copy-on-write or wrong prefix-cache hit changes the output, while a
 * correct scheduler gives exactly fake_next_token(all tokens so far).
 */
#ifndef AORTA_TESTS_BATCHING_FAKE_ENGINE_H
#define AORTA_TESTS_BATCHING_FAKE_ENGINE_H

#include <stdint.h>

#include "engine/engine.h"

struct fake_engine {
	int n_blocks, block_size, vocab;
	int32_t *kv_tok, *kv_pos; /* [n_blocks * block_size]; pos -1 = never written */
	char err[256];            /* why the last call failed */
	uint64_t rows;            /* rows run */
};

int fake_engine_init(struct fake_engine *fe, int n_blocks, int block_size, int vocab);
void fake_engine_deinit(struct fake_engine *fe);
/* Check the batch, write its KV, and put the greedy next token of each
 * logits row in next[n_logits]. When logits is non-NULL also write
 * [n_logits, vocab] logits whose argmax is that token. Returns ERR_INVAL with
 * fe->err set when the batch breaks a rule or reads KV never written. */
int fake_engine_forward(struct fake_engine *fe, const struct engine_batch *b, int32_t *next,
                        float *logits);
int fake_engine_copy_blocks(struct fake_engine *fe, const int32_t *src, const int32_t *dst, int n);
/* The reference: next token after tokens[0, n) for a model with this vocab,
 * whole or streaming (h = FAKE_HASH_INIT; h = fake_hash_step(h, t) per token). */
int32_t fake_next_token(const int32_t *tokens, int n, int vocab);
#define FAKE_HASH_INIT 1469598103934665603ULL
uint64_t fake_hash_step(uint64_t h, int32_t tok);
int32_t fake_hash_token(uint64_t h, int vocab);

#endif
