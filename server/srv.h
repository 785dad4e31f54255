/* server/srv.h — `aorta serve`: the server's state and its loop-thread
 * handlers.
 *
 * Owns the libuv loop, the HTTP transport (server/http.h), the loaded model,
 * tokenizer, engine and batcher, the chat template, the metrics, and every
 * request in flight (struct srv_session, server/gen.c). Start-up order:
 * listen first (so /health can answer 503 while loading), load the model on a
 * libuv worker, then mark ready. SIGINT/SIGTERM: stop accepting, let in-flight
 * requests finish for up to --shutdown-timeout seconds, then stop the loop.
 *
 * Threads: everything here runs on the loop thread, except the model load
 * and prompt tokenization, which run on libuv workers and touch only their
 * own work structs and read-only objects (model, tokenizer, template).
 */
#ifndef AORTA_SERVER_SRV_H
#define AORTA_SERVER_SRV_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "api/api.h"
#include "api/chat_template.h"
#include "common/buf.h"
#include "common/histogram.h"
#include "batching/finish.h"
#include "config.h"
#include "http.h"

struct model;
struct tokenizer;
struct engine;
struct batcher;
struct srv_session;

struct srv_metrics {
	uint64_t prompt_tokens, generation_tokens;
	uint64_t requests_ok, requests_error;
	uint64_t finished[FINISH__COUNT]; /* choices by finish reason */
	struct histogram ttft, itl, e2e, queue;
};

struct srv {
	struct srv_config cfg;
	uv_loop_t *loop;
	struct http_server *http;
	uv_async_t wake;	  /* the batcher's events are ready */
	uv_signal_t sigint, sigterm;
	uv_timer_t drain_timer;	  /* while draining: exit when idle or at the deadline */
	uv_timer_t watchdog;	  /* engine liveness for /health */
	uv_work_t load_work;
	bool loading, ready, draining, broken;
	double drain_deadline;
	char load_error[1024];
	int exit_code;

	struct model *model;
	struct tokenizer *tok;
	struct engine *engine;
	struct batcher *bat;
	struct api_chat_template tmpl;
	char *template_text; /* from --chat-template, owned */
	struct api_limits limits;
	char model_name[256];
	int max_model_len;
	int n_kv_blocks; /* the pool the engine was built with */
	int64_t created;      /* unix seconds at start: /v1/models */
	uint64_t id_instance; /* random: the first half of every response id */
	uint64_t next_bat_id;

	/* watchdog: the engine thread is stuck when work is pending and no step
	 * completed for a while */
	uint64_t last_steps;
	double last_progress;

	struct srv_session *sessions; /* every generation request in flight */
	struct srv_metrics m;
};

/* Run the server until it has shut down; returns the process exit status. */
int srv_run(const struct srv_config *cfg);

/* ---- shared between srv.c and gen.c (loop thread) ---- */

/* Answer with an OpenAI error body (and Retry-After when e says so). */
void srv_respond_error(struct srv *s, struct http_req *r, const struct api_error *e);
/* Answer with a JSON body. */
void srv_respond_json(struct srv *s, struct http_req *r, int status, const struct buf *body);

/* server/gen.c: POST /v1/completions and /v1/chat/completions. */
void gen_handle_completion(struct srv *s, struct http_req *r);
void gen_handle_chat(struct srv *s, struct http_req *r);
/* The batcher woke the loop: drain every event. */
void gen_drain_events(struct srv *s);
/* The HTTP request ended (sent, or the client went away). */
void gen_on_close(struct srv *s, struct http_req *r, bool completed);
/* Shutdown: cancel everything and free every session. */
void gen_abort_all(struct srv *s);
int gen_n_sessions(const struct srv *s);

#endif
