/* batching/engine_thread.h — the batcher: the engine thread, its request
 * inbox and its event outbox.
 *
 * Owns: one engine thread that loops schedule -> engine step -> sample ->
 * detokenize + stop strings -> emit, the scheduler and KV block manager it
 * drives, and every accepted request until its last event. The model step
 * is a small vtable (struct bat_model) so tests can plug a fake engine;
 * bat_model_engine() wraps engine/engine.h.
 *
 * Threads: bat_submit, bat_cancel, bat_poll_events, bat_stats may be called
 * from any thread (the server calls them from the libuv loop thread); they
 * take one mutex briefly and never wait for the engine. Everything else
 * happens on the engine thread. After events are added the engine thread
 * calls opts.wake(opts.wake_arg) (the server passes uv_async_send, which
 * coalesces: drain with bat_poll_events until it returns 0).
 *
 * Events for one request, in order: TOKEN events (per choice index; one per
 * generated token, EOS and stop tokens included, whose text is empty), one
 * FINISH per choice, then exactly one terminal event, DONE (usage and
 * timestamps) or ERROR (message). After the terminal event the request id is
 * forgotten. (Only if the engine thread runs out of memory can an event be
 * dropped.) Cancelling (bat_cancel, e.g. the client went away) ends every
 * choice with finish "abort" and frees its KV blocks at the next step.
 *
 * Ownership: bat_submit copies the request (prompt, params and the strings
 * and arrays they point to); `user` is borrowed and returned in each event,
 * never dereferenced. Event text is owned by the event: bat_event_clear().
 * The model, engine and tokenizer in bat_opts are borrowed and must outlive
 * the batcher.
 */
#ifndef AORTA_BATCHING_ENGINE_THREAD_H
#define AORTA_BATCHING_ENGINE_THREAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "engine/engine.h"
#include "batching/finish.h"
#include "engine/sample/sampler.h"

struct tokenizer;

/* The model step the engine thread drives (engine/engine.h or a fake). */
struct bat_model {
	void *ctx;
	int vocab;
	/* logits: [b->n_logits, vocab] */
	int (*forward)(void *ctx, const struct engine_batch *b, float *logits);
	/* Optional: a step plus sampling in the engine (engine_forward_sample;
	 * host arrays in a). Used for steps where every logits row has one
	 * choice; others go through forward + the host sampler. */
	int (*forward_sample)(void *ctx, const struct engine_batch *b, struct k_sample_args *a);
	int (*copy_blocks)(void *ctx, const int32_t *src, const int32_t *dst, int n);
};

/* Wrap an engine (borrowed) built with the same block_size / n_kv_blocks.
 * forward_sample is set when the engine samples on its device. */
void bat_model_engine(struct bat_model *m, struct engine *e, int vocab);
/* Use engine_forward_sample even where the engine samples on the host (its
 * reference of the device chain): tests of the device path without a GPU. */
void bat_model_sample_in_engine(struct bat_model *m);

struct bat_opts {
	int block_size;             /* --block-size (16) */
	int n_kv_blocks;            /* pool size, from --num-kv-blocks or the memory budget */
	bool prefix_caching;        /* --enable-prefix-caching */
	int max_num_seqs;           /* --max-num-seqs */
	int max_num_batched_tokens; /* --max-num-batched-tokens */
	int max_model_len;          /* --max-model-len */
	int max_queued_requests;    /* --max-queued-requests: waiting + not yet seen */
	uint64_t server_seed;       /* --seed: for requests without their own */
	const int32_t *eos_ids;     /* the model's end-of-sequence ids (copied) */
	int n_eos;
	const struct tokenizer *tok; /* for text deltas; NULL = events carry no text */
	void (*wake)(void *arg);     /* called on the engine thread after events are added */
	void *wake_arg;
};

struct bat_request {
	uint64_t id;           /* unique among live requests; bat_cancel uses it */
	const int32_t *prompt; /* [n_prompt] token ids */
	int n_prompt;
	/* Validated again here. max_tokens is the caller's resolved value
	 * (>= 1, e.g. api_resolve_max_tokens); -1 is refused (ERR_INVAL). */
	struct sampling_params params;
	int n;      /* choices (>= 1) */
	void *user; /* returned in every event */
};

enum bat_event_kind { BAT_EV_TOKEN = 0, BAT_EV_FINISH, BAT_EV_DONE, BAT_EV_ERROR };

struct bat_event {
	enum bat_event_kind kind;
	uint64_t request_id;
	void *user;
	int index; /* choice (TOKEN, FINISH) */
	/* TOKEN: the text the user may see now (may be empty: held back for a
	 * possible stop string or an incomplete character). Owned. */
	int32_t token;
	char *text;
	size_t text_len;
	bool has_logprobs;
	struct sample_result lp;
	/* FINISH */
	enum finish_reason finish;
	int completion_tokens; /* FINISH: this choice's; DONE: all choices' */
	/* DONE */
	int prompt_tokens;
	int cached_tokens; /* prompt tokens served by the prefix cache */
	uint64_t t_arrival_ns, t_first_scheduled_ns, t_first_token_ns, t_finish_ns;
	/* ERROR */
	int err;
	char msg[256];
};

void bat_event_clear(struct bat_event *ev);

struct bat_stats {
	int n_running;
	int n_waiting; /* in the scheduler's queue plus submitted but not yet seen */
	int n_kv_blocks;
	double kv_usage;
	uint64_t prefix_queries, prefix_hits; /* tokens */
	uint64_t preemptions;
	uint64_t steps;
	uint64_t tokens_computed, prompt_tokens_computed;
	uint64_t requests_done, requests_cancelled, requests_failed;
};

struct batcher;

/* Build the scheduler and pool and start the engine thread. */
int bat_create(const struct bat_opts *o, const struct bat_model *m, struct batcher **out,
               struct diag *d);
/* Stop the thread (requests still running are dropped without events) and
 * free everything, including undrained events. */
void bat_destroy(struct batcher *b);

/* ERR_FULL when max_queued_requests are waiting; ERR_TOO_LARGE / ERR_RANGE
 * with the numbers in d when the request can never fit (prompt + max_tokens
 * over max_model_len, n over max_num_seqs, ...); ERR_RANGE / ERR_INVAL for
 * bad sampling params or token ids; ERR_INVAL for a negative (unresolved)
 * max_tokens; ERR_STATE after shutdown began. */
int bat_submit(struct batcher *b, const struct bat_request *r, struct diag *d);
/* Cancel a request (no-op if unknown or already done). */
void bat_cancel(struct batcher *b, uint64_t request_id);
/* Move up to max events out; returns how many. */
int bat_poll_events(struct batcher *b, struct bat_event *events, int max);
void bat_stats(struct batcher *b, struct bat_stats *st);

#endif
