/* batching/sequence.c — create, clone and destroy sequences (see sequence.h).
 * Tested through tests/batching/test_sched_sim.c. */
#include "batching/sequence.h"

#include <stdlib.h>
#include <string.h>

#include "common/checked.h"

static int seq_alloc(int cap, int block_size, uint64_t id, struct seq **out)
{
	struct seq *s = calloc(1, sizeof(*s));
	if (!s)
		return ERR_NOMEM;
	s->tokens = malloc((size_t)cap * sizeof(int32_t));
	int cap_blocks = (int)(((int64_t)cap + block_size - 1) / block_size);
	if (!s->tokens || kv_table_init(&s->kv, cap_blocks) != 0) {
		free(s->tokens);
		free(s);
		return ERR_NOMEM;
	}
	s->id = id;
	s->cap = cap;
	s->step_slot = -1;
	*out = s;
	return 0;
}

int seq_create(const struct kv_pool *p, uint64_t id, const int32_t *prompt, int n_prompt,
               int max_tokens, struct seq **out)
{
	size_t cap;
	if (n_prompt < 1 || max_tokens < 0 || ck_add((size_t)n_prompt, (size_t)max_tokens, &cap) ||
	    cap > INT32_MAX / 2)
		return ERR_RANGE;
	struct seq *s;
	int rc = seq_alloc((int)cap, kv_block_size(p), id, &s);
	if (rc)
		return rc;
	memcpy(s->tokens, prompt, (size_t)n_prompt * sizeof(int32_t));
	s->n_tokens = s->n_prompt = n_prompt;
	s->max_tokens = max_tokens;
	kv_table_hash(p, &s->kv, s->tokens, s->n_tokens);
	*out = s;
	return 0;
}

int seq_clone(const struct kv_pool *p, const struct seq *parent, uint64_t id, struct seq **out)
{
	struct seq *s;
	int rc = seq_alloc(parent->cap, kv_block_size(p), id, &s);
	if (rc)
		return rc;
	memcpy(s->tokens, parent->tokens, (size_t)parent->n_tokens * sizeof(int32_t));
	s->n_tokens = parent->n_tokens;
	s->n_prompt = parent->n_prompt;
	s->max_tokens = parent->max_tokens;
	s->t_arrival = parent->t_arrival;
	s->t_first_scheduled = parent->t_first_scheduled;
	*out = s;
	return 0;
}

void seq_destroy(struct seq *s)
{
	if (!s)
		return;
	kv_table_deinit(&s->kv);
	free(s->tokens);
	free(s);
}
