/* batching/scheduler.h — iteration-level scheduler (Orca / vLLM style).
 *
 * Owns the waiting and running queues and the sequences in them; borrows the
 * KV block pool (kv_blocks.h). Never calls the engine: each step it produces a
 * `struct sched_step` (which sequences, how many tokens each, and the flat
 * arrays of an engine_batch), the caller runs the engine and samples, then
 * reports back (sched_commit, sched_fork, sched_append_token, sched_finish).
 * Only the engine thread calls it.
 *
 * Policy, one step:
 *   Budget: at most max_num_batched_tokens rows and max_num_seqs sequences.
 *   1. Running sequences that need one token (decodes) are scheduled first,
 *      oldest admission first.
 *   2. Running sequences with more than one token left (prefill or recompute)
 *      continue with a chunk: min(tokens left, budget left), oldest first.
 *   3. Waiting sequences are admitted first-come-first-served while the
 *      budget, max_num_seqs (counting the n-1 forks a request will make) and
 *      free blocks allow. Admission stops at the first request that does not
 *      fit, so no later request overtakes it (no starvation). A new sequence
 *      takes its longest cached prefix from the prefix cache. If the next
 *      block of its prompt is being computed right now by a running sequence
 *      (same prefix hash), admission waits a step so the shared blocks are
 *      computed once and then hit. No admission in a step that preempted.
 *   When a running sequence cannot get the blocks for its tokens, the most
 *   recently admitted running sequence is preempted (possibly itself): its
 *   blocks are released (they stay in the prefix cache), it goes back to the
 *   front of the waiting queue, and on readmission its prompt and generated
 *   tokens are recomputed, mostly from the cache. The oldest running sequence
 *   is never preempted for a newer one, so it always progresses; requests
 *   that could not fit the pool alone are refused by sched_validate.
 *   n > 1: one sequence computes the prompt; when its last prompt token is
 *   computed the caller forks it (sched_fork) into n sequences sharing the
 *   prompt's blocks; the shared partial block is copied on write. Seats for
 *   the forks are kept from admission on, so max_num_seqs always holds.
 *   Blocks are allocated per step for the tokens scheduled (not for the
 *   whole prompt at admission), so a long prompt's chunks never sit on
 *   unwritten blocks; a full block is registered in the prefix cache once
 *   its KV is computed (sched_commit).
 *
 * Lifecycle of a step (engine thread):
 *   sched_schedule -> [engine_copy_blocks, engine_forward] -> sched_commit
 *   (or sched_cancel_step when the engine failed)
 *   -> per logits row: sched_fork (once, n > 1), sample, sched_append_token,
 *      sched_finish when done. sched_finish / sched_add also between steps.
 * Pointers in a step are valid until the next sched_schedule.
 */
#ifndef AORTA_BATCHING_SCHEDULER_H
#define AORTA_BATCHING_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "batching/kv_blocks.h"
#include "batching/sequence.h"
#include "common/err.h"
#include "engine/engine.h"

struct sched_opts {
	int max_num_seqs;           /* sequences running at once (>= 1) */
	int max_num_batched_tokens; /* rows per step (>= 1) */
	int max_model_len;          /* prompt + max_tokens limit */
};

struct sched_step {
	int n_seqs;
	struct seq **seqs;   /* [n_seqs] scheduled sequences, in batch order */
	int32_t *n_new;      /* [n_seqs] tokens computed for each this step */
	int32_t *logits_seq; /* [n_logits] index into seqs of each logits row */
	int n_preempted;     /* preemptions while building this step */
	/* The engine batch (see engine/engine.h), rows grouped by sequence. */
	int n_tokens;
	int32_t *tokens, *positions, *slot_mapping;
	int32_t *seq_start;     /* [n_seqs + 1] */
	int32_t *context_len;   /* [n_seqs] */
	int32_t *block_tables;  /* [n_seqs * max_blocks_per_seq] */
	int max_blocks_per_seq; /* this step's row stride: its widest table (<= the engine's) */
	int n_logits;
	int32_t *logits_rows; /* [n_logits] */
	/* Copy-on-write: copy block src[i] to dst[i] before the forward. */
	int n_copies;
	int32_t *copy_src, *copy_dst;
};

struct sched_stats {
	int n_running;
	int n_waiting;
	double kv_usage;         /* held blocks / all blocks */
	uint64_t prefix_queries; /* prompt tokens looked up */
	uint64_t prefix_hits;    /* of those, found in the cache */
	uint64_t preemptions;
	uint64_t steps;
	uint64_t tokens_computed;        /* rows run through the engine */
	uint64_t prompt_tokens_computed; /* of those, at prompt positions */
};

struct sched;

/* pool is borrowed and must outlive the scheduler. */
int sched_create(struct kv_pool *pool, const struct sched_opts *o, struct sched **out,
                 struct diag *d);
/* Releases the blocks of and destroys every sequence still queued. */
void sched_destroy(struct sched *s);

/* Whether a request could ever run: ERR_TOO_LARGE (prompt + max_tokens over
 * max_model_len, or more blocks than the pool has) or ERR_RANGE (n over
 * max_num_seqs), with the numbers in d. Reads only settings fixed at create,
 * so any thread may call it while the engine thread runs. */
int sched_validate(const struct sched *s, int n_prompt, int max_tokens, int n, struct diag *d);

/* Queue seq (made by seq_create; set n_fork_pending = n - 1 first) at the
 * back of the waiting queue; the scheduler owns it until sched_finish. */
int sched_add(struct sched *s, struct seq *seq);

/* Build the next step. *out is NULL-free; n_seqs == 0 when nothing can run. */
int sched_schedule(struct sched *s, const struct sched_step **out);
/* The engine ran the step: advance each sequence's computed tokens and
 * register its newly full blocks in the prefix cache. */
void sched_commit(struct sched *s);
/* The engine failed the step: nothing was computed. The step's sequences
 * keep the blocks they were given (and stay unregistered); the caller
 * normally finishes them with FINISH_ERROR. */
void sched_cancel_step(struct sched *s);
/* Fork parent (whose prompt is now computed, n_fork_pending > 0) into
 * n_fork_pending new running sequences sharing its blocks; children[] gets
 * them (caller sets index/owner). */
int sched_fork(struct sched *s, struct seq *parent, struct seq **children);
/* Append a sampled token (the sequence then needs one more step). */
void sched_append_token(struct sched *s, struct seq *seq, int32_t token);
/* Take seq out of the queues and release its blocks; it becomes the
 * caller's again (seq_destroy it). Not between sched_schedule and sched_commit. */
void sched_finish(struct sched *s, struct seq *seq, enum finish_reason reason);

void sched_get_stats(const struct sched *s, struct sched_stats *st);
/* Running sequences in admission order (for invariant checks and stats). */
int sched_n_running(const struct sched *s);
struct seq *sched_running(const struct sched *s, int i);
int sched_n_waiting(const struct sched *s);
struct seq *sched_waiting(const struct sched *s, int i);
/* Fill an engine_batch view of the step (arrays borrowed from the step). */
void sched_step_batch(const struct sched_step *st, struct engine_batch *b);

#endif
