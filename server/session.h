/* server/session.h — one generation request in flight (POST /v1/completions
 * and /v1/chat/completions), shared by the two files that run it:
 * server/completions.c (parse -> sampling params -> tokenize on a libuv worker
 * -> submit) and server/session.c (lifetime, the batcher's events, answers and
 * streams). Nothing else includes this; the rest of server/ sees only the
 * session_* hooks in server/srv.h. Loop thread only, except the tokenizer work
 * (see completions.c). Tested end to end in tests/e2e/.
 */
#ifndef AORTA_SERVER_SESSION_H
#define AORTA_SERVER_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "api/api.h"
#include "engine/sample/sampler.h"
#include "srv.h"

struct lp_entry; /* one token's logprobs (session.c) */

struct sess_choice {
	struct buf text;
	const char *finish;
	double t_last_token;
	struct lp_entry *lps;
	size_t n_lps, cap_lps;
	int32_t lp_chars; /* streams: the text_offset of the next logprobs entry */
};

struct sess_prompt {
	int32_t *ids; /* tokenized prompt (malloc) */
	size_t n_ids;
	char *echo;   /* prompt text for echo (malloc), or NULL */
	size_t echo_len;
	uint64_t bat_id;
	bool live; /* submitted and no terminal event yet */
	bool first_token_seen;
};

struct srv_session {
	struct srv *s;
	struct http_req *r; /* NULL once the HTTP request is over */
	struct srv_session *prev, *next;
	bool chat;
	bool stream_started;
	bool failed;   /* an ERROR event arrived; answer once every sub is over */
	bool answered; /* an error was sent before generation: nothing more to send */
	struct api_error fail;
	struct api_completion_req creq; /* when parsed && !chat */
	struct api_chat_req chreq;	/* when parsed && chat */
	bool parsed;
	/* built and validated once per request (max_tokens -1); each prompt's
	 * submission copies it with its own max_tokens. Points into bias,
	 * stops and the parsed request. */
	struct sampling_params params;
	bool has_max_tokens;
	int32_t max_tokens;
	int n;	      /* choices per prompt */
	int logprobs; /* -1 none, else top N alternatives */
	bool stream, include_usage, echo;
	int n_prompts;
	struct sess_prompt *prompts;
	int n_choices;
	struct sess_choice *choices;
	struct sampler_logit_bias *bias;
	const char **stops;
	/* chat: the rendered prompt text; encode flags */
	struct buf chat_text;
	unsigned enc_flags;
	/* tokenizer work */
	uv_work_t work;
	bool work_pending;
	int work_rc;
	int work_bad_prompt;
	int n_live; /* batcher requests without their terminal event */
	struct api_stream st;
	char id[48];
	int64_t created; /* unix seconds at arrival: the responses' "created" */
	int64_t prompt_tokens, completion_tokens;
	bool first_token_seen;
	double t0;
	double ttft; /* seconds from arrival to the first token event; 0 = none yet */
	struct buf out; /* scratch for rendering */
};

/* A new session for r, linked into s->sessions and set as r's context, or
 * NULL after answering 503 (out of memory). */
struct srv_session *session_new(struct srv *s, struct http_req *r, bool chat);
/* Free x once nothing refers to it: the HTTP request, the tokenizer work and
 * every batcher request that has not sent its terminal event. */
void session_maybe_free(struct srv_session *x);
/* Cancel every submitted batcher request without its terminal event. */
void session_cancel_live(struct srv_session *x);
/* An error before any generation output: answer it and remember that we did. */
void session_early_error(struct srv_session *x, const struct api_error *e);
/* Start the SSE stream: the role deltas (chat) and the echoed prompts. */
void session_start_stream(struct srv_session *x);

#endif
