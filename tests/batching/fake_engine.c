/* tests/batching/fake_engine.c — see fake_engine.h. */
#include "fake_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t fake_hash_step(uint64_t h, int32_t tok)
{
	h ^= (uint64_t)(uint32_t)tok + 0x9e3779b97f4a7c15ULL;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 29;
	return h;
}

int32_t fake_hash_token(uint64_t h, int vocab)
{
	return (int32_t)((h >> 17) % (uint64_t)vocab);
}

int32_t fake_next_token(const int32_t *tokens, int n, int vocab)
{
	uint64_t h = FAKE_HASH_INIT;
	for (int i = 0; i < n; i++)
		h = fake_hash_step(h, tokens[i]);
	return fake_hash_token(h, vocab);
}

int fake_engine_init(struct fake_engine *fe, int n_blocks, int block_size, int vocab)
{
	memset(fe, 0, sizeof(*fe));
	size_t n = (size_t)n_blocks * (size_t)block_size;
	fe->kv_tok = malloc(n * sizeof(int32_t));
	fe->kv_pos = malloc(n * sizeof(int32_t));
	if (!fe->kv_tok || !fe->kv_pos)
		return ERR_NOMEM;
	for (size_t i = 0; i < n; i++)
		fe->kv_pos[i] = -1;
	fe->n_blocks = n_blocks;
	fe->block_size = block_size;
	fe->vocab = vocab;
	return 0;
}

void fake_engine_deinit(struct fake_engine *fe)
{
	free(fe->kv_tok);
	free(fe->kv_pos);
	memset(fe, 0, sizeof(*fe));
}

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		snprintf(fe->err, sizeof(fe->err), __VA_ARGS__);                                   \
		return ERR_INVAL;                                                                  \
	} while (0)

static int slot_of(const struct fake_engine *fe, const struct engine_batch *b, int s, int pos,
                   int32_t *slot)
{
	int blk = pos / fe->block_size;
	if (blk >= b->max_blocks_per_seq)
		return -1;
	int32_t id = b->block_tables[(size_t)s * b->max_blocks_per_seq + blk];
	if (id < 0 || id >= fe->n_blocks)
		return -1;
	*slot = id * fe->block_size + pos % fe->block_size;
	return 0;
}

int fake_engine_forward(struct fake_engine *fe, const struct engine_batch *b, int32_t *next,
                        float *logits)
{
	if (b->n_seqs < 1 || b->n_tokens < 1 || b->seq_start[0] != 0 ||
	    b->seq_start[b->n_seqs] != b->n_tokens)
		FAIL("bad batch shape: %d seqs, %d tokens", b->n_seqs, b->n_tokens);
	/* Write the new tokens' KV first, as a real forward does. */
	for (int s = 0; s < b->n_seqs; s++) {
		int r0 = b->seq_start[s], r1 = b->seq_start[s + 1];
		if (r1 <= r0)
			FAIL("seq %d has no rows", s);
		if (b->positions[r1 - 1] != b->context_len[s] - 1)
			FAIL("seq %d: last position %d, context_len %d", s, b->positions[r1 - 1],
			     b->context_len[s]);
		for (int r = r0; r < r1; r++) {
			int32_t slot;
			if (r > r0 && b->positions[r] != b->positions[r - 1] + 1)
				FAIL("seq %d: positions not consecutive at row %d", s, r);
			if (slot_of(fe, b, s, b->positions[r], &slot) || slot != b->slot_mapping[r])
				FAIL("seq %d row %d: slot %d does not match the block table", s, r,
				     b->slot_mapping[r]);
			fe->kv_tok[slot] = b->tokens[r];
			fe->kv_pos[slot] = b->positions[r];
		}
	}
	int s = 0;
	for (int i = 0; i < b->n_logits; i++) {
		int row = b->logits_rows[i];
		if (row < 0 || row >= b->n_tokens || (i > 0 && row <= b->logits_rows[i - 1]))
			FAIL("logits row %d out of order", row);
		while (b->seq_start[s + 1] <= row)
			s++;
		int ctx = b->positions[row] + 1;
		uint64_t h = FAKE_HASH_INIT;
		for (int p = 0; p < ctx; p++) {
			int32_t slot;
			if (slot_of(fe, b, s, p, &slot) || fe->kv_pos[slot] != p)
				FAIL("seq %d: KV for position %d missing or stale", s, p);
			h = fake_hash_step(h, fe->kv_tok[slot]);
		}
		next[i] = fake_hash_token(h, fe->vocab);
		if (logits) {
			float *l = logits + (size_t)i * fe->vocab;
			for (int v = 0; v < fe->vocab; v++)
				l[v] = (float)((v * 7919 + i) % 97) / 100.0f; /* < 1 */
			l[next[i]] = 5.0f;
		}
	}
	fe->rows += (uint64_t)b->n_tokens;
	return 0;
}

int fake_engine_copy_blocks(struct fake_engine *fe, const int32_t *src, const int32_t *dst, int n)
{
	size_t bs = (size_t)fe->block_size;
	for (int i = 0; i < n; i++) {
		if (src[i] < 0 || src[i] >= fe->n_blocks || dst[i] < 0 || dst[i] >= fe->n_blocks)
			FAIL("copy %d -> %d out of range", src[i], dst[i]);
		memcpy(fe->kv_tok + dst[i] * bs, fe->kv_tok + src[i] * bs, bs * sizeof(int32_t));
		memcpy(fe->kv_pos + dst[i] * bs, fe->kv_pos + src[i] * bs, bs * sizeof(int32_t));
	}
	return 0;
}
