/* server/srv.h — `aorta serve`: the server's state, srv_run, and the
 * declarations its files share (server-private: only files in server/ include it).
 *
 * Owns the libuv loop, the HTTP transport (server/http.h), the loaded model,
 * tokenizer, engine and batcher, the chat template, the metrics, and every
 * request in flight (struct srv_session, server/session.h). Start-up order:
 * listen first (so /health can answer 503 while loading), load the model on a
 * libuv worker, then mark ready. SIGINT/SIGTERM: stop accepting, let in-flight
 * requests finish for up to --shutdown-timeout seconds, then stop the loop.
 *
 * Files, each calling only those below it: srv.c (lifecycle, signals, drain,
 * watchdog) -> routes.c (route table, auth, access log) and load.c (model ->
 * tokenizer -> engine -> template -> batcher) -> the endpoint files (info.c,
 * tokenize.c, completions.c -> session.c) -> respond.c. Statuses and error
 * bodies come from api/ alone.
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
struct bat_opts;
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
	uv_async_t wake;	  /* the batcher's events are ready (server/session.c's) */
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

	struct srv_session *sessions; /* every generation request in flight (session.c) */
	struct srv_metrics m;
};

/* Run the server until it has shut down; returns the process exit status. */
int srv_run(const struct srv_config *cfg);

/* ---- server-private, loop thread unless said ---- */

/* server/respond.c: every answer carries the CORS headers --allowed-origins
 * asks for. */
void srv_respond(struct srv *s, struct http_req *r, int status, const char *content_type,
		 const char *body, size_t len);
/* Answer with a JSON body. */
void srv_respond_json(struct srv *s, struct http_req *r, int status, const struct buf *body);
/* Answer with an OpenAI error body (and Retry-After when e says so). */
void srv_respond_error(struct srv *s, struct http_req *r, const struct api_error *e);
/* The same, with up to 4 extra headers first (405's Allow). */
void srv_respond_error_with(struct srv *s, struct http_req *r, const struct api_error *e,
			    const struct http_header *extra, int n_extra);
/* 204 to a CORS preflight (OPTIONS). */
void srv_respond_preflight(struct srv *s, struct http_req *r);

/* The endpoints (server/routes.c's table; the route has checked the method,
 * the API key, the Content-Type and, where it needs one, that a model is
 * being served). */
void info_handle_health(struct srv *s, struct http_req *r);  /* GET /health */
void info_handle_models(struct srv *s, struct http_req *r);  /* GET /v1/models */
void info_handle_metrics(struct srv *s, struct http_req *r); /* GET /metrics */
void tokenize_handle(struct srv *s, struct http_req *r);	    /* POST /tokenize */
void tokenize_handle_detokenize(struct srv *s, struct http_req *r); /* POST /detokenize */
void completions_handle(struct srv *s, struct http_req *r);	 /* POST /v1/completions */
void completions_handle_chat(struct srv *s, struct http_req *r); /* POST /v1/chat/completions */

/* server/session.c: the generation requests in flight and the wake handle.
 * The wake's order is fixed: init before loading; unref (never close) when
 * shutting down, since the engine thread may still send on it; close only
 * after bat_destroy has joined that thread. */
void session_wake_init(struct srv *s);
/* Point the batcher's wake (engine thread) at the handle. */
void session_wake_opts(struct srv *s, struct bat_opts *bo);
void session_wake_unref(struct srv *s);
void session_wake_close(struct srv *s);
/* The HTTP request of a session (http_req_ctx set) ended: log it, cancel
 * what is still running. */
void session_on_close(struct srv *s, struct http_req *r, bool completed);
/* Shutdown: cancel everything, answer 503 where nothing was sent, free every
 * session that nothing else refers to. */
void session_abort_all(struct srv *s);
int session_count(const struct srv *s);

/* server/routes.c: the handler srv_run gives the transport. */
void routes_handler(struct srv *s, struct http_handler *h);

/* server/load.c. Start-up: read and check --chat-template (0, or -1 after
 * saying why on stderr). */
int load_template_file(struct srv *s);
/* libuv worker: model, tokenizer and engine into s; s->load_error says why
 * not. */
void load_engine(struct srv *s);
/* Loop thread, after load_engine succeeded: the chat template and the
 * batcher; 0 or the ERR_* it logged. */
int load_finish(struct srv *s);

#endif
