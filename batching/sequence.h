/* batching/sequence.h — one sequence's state: its tokens (prompt, then
 * generated), how many have KV computed, its KV block table, its status and
 * timestamps. A request with n > 1 is one sequence until its prompt is
 * computed, then it is forked into n sequences sharing the prompt's blocks.
 *
 * Owned by the scheduler once added (sched_add) until it is finished and
 * handed back (sched_reap); only the engine thread touches it. `owner` is the
 * caller's pointer (the engine thread's request), never dereferenced here.
 */
#ifndef AORTA_BATCHING_SEQUENCE_H
#define AORTA_BATCHING_SEQUENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "batching/finish.h"
#include "batching/kv_blocks.h"

enum seq_status { SEQ_WAITING = 0, SEQ_RUNNING, SEQ_FINISHED };

struct seq {
	uint64_t id;
	enum seq_status status;
	enum finish_reason finish; /* FINISH_NONE until sched_finish */
	int32_t *tokens; /* [cap]: prompt, then generated tokens */
	int n_tokens;
	int n_prompt;
	int cap; /* n_prompt + max_tokens */
	int max_tokens;
	int n_computed; /* leading tokens whose KV is in the blocks */
	struct kv_table kv;
	int n_fork_pending; /* children still to fork off once the prompt is computed (n - 1) */
	int index;          /* choice index within its request (0 .. n-1) */
	void *owner;        /* caller's request; borrowed */
	uint64_t admit_seq; /* admission order: the largest running one is preempted first */
	int n_preemptions;
	int n_cached_tokens; /* prompt tokens the prefix cache supplied at first admission */
	/* Timestamps, clock_now_ns(); 0 = not yet. */
	uint64_t t_arrival, t_first_scheduled, t_first_token, t_finish;
	/* Scheduler bookkeeping. */
	int step_slot; /* index in the current step, -1 when not scheduled */
};

/* Make a sequence for prompt[0, n_prompt) that may generate max_tokens more;
 * cap_blocks = ceil((n_prompt + max_tokens) / block_size) at least. */
int seq_create(const struct kv_pool *p, uint64_t id, const int32_t *prompt, int n_prompt,
               int max_tokens, struct seq **out);
/* A copy of parent's tokens and counters (not its blocks: see kv_fork). */
int seq_clone(const struct kv_pool *p, const struct seq *parent, uint64_t id, struct seq **out);
/* The sequence must hold no blocks. */
void seq_destroy(struct seq *s);

static inline int seq_n_generated(const struct seq *s)
{
	return s->n_tokens - s->n_prompt;
}

#endif
