/* batching/batcher_internal.h — private to the batcher's four files: the
 * request, choice and batcher structs and the bat__ calls between
 * engine_thread.c (thread, inbox, public API), request.c (request and choice
 * lifecycle), step.c (one step: schedule -> run -> postprocess) and output.c
 * (events, outbox). Nothing outside batching/ includes it.
 *
 * Threads: every bat__ call runs on the engine thread, except where its
 * comment says "under mu". Tests: tests/batching/test_engine_thread.c and
 * test_batcher_engine.c, through engine_thread.h.
 */
#ifndef AORTA_BATCHING_BATCHER_INTERNAL_H
#define AORTA_BATCHING_BATCHER_INTERNAL_H

#include <pthread.h>

#include "batching/engine_thread.h"
#include "batching/generation.h"
#include "batching/kv_blocks.h"
#include "batching/scheduler.h"
#include "batching/sequence.h"
#include "common/buf.h"
#include "engine/tok/tokenizer.h"

struct bat_req;

struct bat_choice {
	struct bat_req *req;
	int index;
	struct seq *seq; /* NULL before it exists (forks) and after it finished */
	bool ready;      /* sampler, generation and stream initialized */
	bool finished;
	struct sampler_state ss;
	struct generation gen;
	struct tok_stream ts;
};

struct bat_req {
	uint64_t id;
	void *user;
	int n;
	int32_t *prompt;
	int n_prompt;
	struct sampling_params p; /* pointers below are owned copies */
	char **stops;
	struct sampler_logit_bias *bias;
	int32_t *stop_ids;
	struct bat_choice *choices; /* [n] */
	int n_finished;
	int completion_tokens;
	bool failed;
	int fail_err;
	char fail_msg[200];
	uint64_t t_arrival, t_first_scheduled, t_first_token;
	int cached_tokens;
	struct bat_req *next; /* inbox, then the active list */
};

struct evq {
	struct bat_event *ev;
	int head, n, cap;
};

/* step.c's buffers, grown as steps need them (engine thread only). */
struct bat__step_bufs {
	struct sampler_scratch scratch;
	float *logits;
	size_t logits_cap; /* floats */
	float *row;        /* [vocab]: sampling modifies its input, forks share a row */
	/* sampling on the engine's device (m.forward_sample): per logits row */
	struct k_sample_row *srows;
	struct sampler_device_lists slists;
	int32_t *s_token, *s_rank, *s_top_ids;
	float *s_logprob, *s_top_lp;
	bool *s_live; /* the row's sequence draws and takes a token */
	int s_cap;
};

struct batcher {
	struct bat_opts o;
	int32_t eos[SAMPLER_MAX_EOS];
	struct bat_model m;
	struct kv_pool *pool;
	struct sched *sched;
	/* Engine thread only. */
	struct bat__step_bufs sb;
	struct buf piece, text; /* output.c's detokenizing scratch */
	struct bat_req *active;
	struct evq pending; /* this step's events, published under the lock */
	uint64_t next_seq_id;
	uint64_t n_done, n_cancelled, n_failed;
	/* Shared, under mu. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t thread;
	bool started, stop;
	struct bat_req *inbox_head, *inbox_tail;
	int n_inbox;
	uint64_t *cancels;
	int n_cancels, cap_cancels;
	struct evq out;
	struct bat_stats snap;
};

/* ---- engine_thread.c ---- */

/* Refresh the stats snapshot submitters read (takes mu). */
void bat__share_stats(struct batcher *b);

/* ---- request.c ---- */

/* Deep-copy a validated request (any thread; touches no batcher state). */
int bat__req_copy(const struct bat_request *in, struct bat_req **out);
void bat__req_free(struct bat_req *r);
/* Put the inbox's requests on the active list, each with its first sequence
 * in the scheduler; a request that cannot be admitted ends with an ERROR. */
void bat__admit_new(struct batcher *b, struct bat_req *list);
/* End the active requests with these ids (FINISH_ABORT); unknown ids are skipped. */
void bat__apply_cancels(struct batcher *b, const uint64_t *ids, int n);
/* Mark the request failed (the first failure's err and msg are kept). */
void bat__req_fail(struct bat_req *r, int err, const char *msg);
/* End every request marked failed (FINISH_ERROR, then its ERROR event). */
void bat__sweep_failed(struct batcher *b);
/* Take choice c's sequence out of the scheduler (it must not be in an
 * uncommitted step) and emit its FINISH. */
void bat__choice_end(struct batcher *b, struct bat_choice *c, enum finish_reason why);
/* Every choice has finished: unlink the request, emit its terminal event
 * and free it. */
void bat__req_done(struct batcher *b, struct bat_req *r);
/* Fork the request's first sequence into its other choices. */
int bat__fork_choices(struct batcher *b, struct bat_choice *c0);

/* ---- step.c ---- */

/* One step: schedule -> run the model -> postprocess each logits row. */
void bat__step(struct batcher *b);
void bat__step_bufs_deinit(struct bat__step_bufs *sb); /* safe on a zeroed one */

/* ---- output.c ---- */

/* Add an event to this step's pending queue (takes e's text). */
void bat__emit(struct batcher *b, struct bat_event *e);
void bat__emit_finish(struct batcher *b, struct bat_req *r, int index, enum finish_reason why,
                      int completion_tokens);
/* The request's terminal event; frees it (the caller unlinks it first). */
void bat__emit_end(struct batcher *b, struct bat_req *r);
/* Detokenize, match stop strings and emit one sampled token already
 * appended to the choice's sequence. Ends the choice when generation says
 * so; marks the request failed on errors. */
void bat__emit_token(struct batcher *b, struct bat_choice *c, const struct sample_result *res);
/* Under mu: move this step's events to the outbox; true when there were any. */
bool bat__publish(struct batcher *b);
void bat__evq_free(struct evq *q);

#endif
