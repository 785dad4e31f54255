/* api/api.h — the OpenAI-compatible wire format: JSON request bodies -> C
 * structs (with validation), C results -> JSON response bodies, SSE chunks,
 * and OpenAI error bodies. Pure functions: no I/O, no clocks, no globals; the
 * server passes in ids, timestamps and limits.
 *
 * Threads: every function is reentrant; any thread may call any function on
 * its own objects. A parsed request and a struct api_stream belong to one
 * thread at a time.
 *
 * Ownership: a parsed request owns every string and array in it (one arena);
 * api_*_req_free() releases them all. Render functions borrow their inputs
 * and append to a caller-owned struct buf.
 *
 * Errors: parse functions return 0 or a negative ERR_* and fill struct
 * api_error with the HTTP status, OpenAI error type, the offending field
 * (param) and a message. Client mistakes are always 4xx. ERR_* -> HTTP status
 * happens in exactly one place, api_status_for_err().
 *
 * JSON rules (documented choices):
 *  - unknown fields are accepted and ignored; `null` means "not set";
 *  - a duplicate key in any object the parser reads is rejected (400);
 *  - the body must be valid UTF-8 with no "\u0000" escape; nesting depth and
 *    array sizes are bounded by struct api_limits;
 *  - logprobs (completions) and top_logprobs (chat) are capped at 20 (vLLM's
 *    cap; OpenAI allows only 5 for completions).
 *
 * Typical use (POST /v1/chat/completions): api_parse_chat -> on error
 * api_render_error with err.status; api_chat_render (api/chat_template.h)
 * -> tokenize, adding BOS only if !starts_with_bos -> api_resolve_max_tokens
 * -> submit; then api_stream_init/_delta/_finish/_end (stream) or
 * api_render_chat_completion. Metrics text: api/metrics_text.h.
 * Tests: tests/api/test_api_parse.c, tests/api/test_api_render.c.
 */
#ifndef AORTA_API_API_H
#define AORTA_API_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/arena.h"
#include "common/buf.h"

/* ---- limits ------------------------------------------------------------ */

#define API_MAX_LOGPROBS 20 /* completions logprobs and chat top_logprobs */
#define API_MAX_N_HARD 128  /* compile-time ceiling for limits.max_n */

struct api_limits {
	int max_n;		    /* n <= max_n (<= API_MAX_N_HARD); default 16 */
	int max_stop;		    /* stop strings per request; default 16 */
	size_t max_stop_len;	    /* bytes per stop string; default 1024 */
	int max_stop_token_ids;	    /* default 64 */
	int32_t max_tokens;	    /* cap on max_tokens; default 131072 */
	int max_prompts;	    /* prompts in one completions request; default 64 */
	size_t max_prompt_tokens;   /* ids in one token prompt; default 1 << 20 */
	int max_messages;	    /* chat messages; default 4096 */
	int max_content_parts;	    /* parts in one message's content array; default 256 */
	int max_logit_bias;	    /* entries in logit_bias; default 1024 */
	int max_depth;		    /* JSON nesting depth; default 64 */
	int32_t n_vocab;	    /* token ids must be < n_vocab; 0 = not checked */
};

void api_limits_default(struct api_limits *lim);

/* ---- errors ------------------------------------------------------------ */

struct api_error {
	int status;	  /* HTTP status: 400, 401, 404, 405, 413, 429, 500, 503 */
	const char *type; /* static: "invalid_request_error", "authentication_error", ... */
	const char *code; /* static or NULL (rendered as null) */
	char param[96];	  /* offending field ("messages[2].content"); "" = none (null) */
	char message[512];
	int retry_after_s; /* for 429/503: the server's Retry-After header; 0 = none */
};

/* The only ERR_* -> HTTP status table. 0 -> 200; client-side codes (INVAL,
 * FORMAT, RANGE, OVERFLOW, UNSUPPORTED) -> 400, NOTFOUND -> 404, TOO_LARGE ->
 * 413, FULL -> 429, STATE/CANCELLED/NOMEM -> 503, anything else -> 500. */
int api_status_for_err(int err);

/* Fill e (may be NULL) and return `err` so a failing path can `return
 * api_error_set(...)`. param may be NULL. type NULL picks the type for status. */
int api_error_set(struct api_error *e, int err, int status, const char *type, const char *param,
		  const char *code, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* From an ERR_* code: status from api_status_for_err, type from the status. */
int api_error_from_err(struct api_error *e, int err, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* The canned errors the server sends. */
void api_error_unauthorized(struct api_error *e);		 /* 401 */
void api_error_not_found(struct api_error *e, const char *path); /* 404 */
void api_error_model_not_found(struct api_error *e, const char *model); /* 404 */
void api_error_method_not_allowed(struct api_error *e, const char *method); /* 405 */
void api_error_too_large(struct api_error *e, uint64_t max_bytes);	 /* 413 */
void api_error_queue_full(struct api_error *e, int retry_after_s);	 /* 429 */
void api_error_unavailable(struct api_error *e, const char *why, int retry_after_s); /* 503 */
void api_error_unsupported_media_type(struct api_error *e, const char *content_type); /* 415 */
void api_error_internal(struct api_error *e); /* 500: a handler that did not answer */
/* Completions: echo with logprobs (prompt logprobs) is not supported (400, "echo"). */
void api_error_echo_logprobs(struct api_error *e);
/* A stream carries at most API_MAX_N_HARD choices (400, "n"). */
void api_error_stream_choices(struct api_error *e, int n_choices);

/* Situations whose status is a policy, not the plain ERR_* table. msg NULL
 * or "" says err_str(err). */
/* The batcher refused a request (bat_submit, or the sampling check before
 * it): ERR_FULL is the queue (429, Retry-After 1 s, msg unused), ERR_STATE a
 * batcher that is stopping (503); anything else is the request's fault: its
 * 4xx, or 400 where the table says 5xx. */
void api_error_rejected(struct api_error *e, int err, const char *msg);
/* Generation failed after submission ("generation failed: msg"): always the
 * server's fault, its 5xx, or 500 where the table says 4xx. */
void api_error_generation_failed(struct api_error *e, int err, const char *msg);

/* {"error":{"message":...,"type":...,"param":...,"code":...}} */
int api_render_error(struct buf *out, const struct api_error *e);

/* ---- requests ---------------------------------------------------------- */

/* Sampling fields shared by both endpoints. has_* = the client set it (the
 * default depends on the model's generation config). */
struct api_sampling {
	bool has_temperature, has_top_p, has_top_k, has_min_p, has_repetition_penalty, has_seed;
	float temperature;	  /* [0, 2] */
	float top_p;		  /* (0, 1] */
	int32_t top_k;		  /* -1 or 0 = off, else >= 1 (vLLM) */
	float min_p;		  /* [0, 1] (vLLM) */
	float repetition_penalty; /* > 0 (vLLM) */
	int64_t seed;
	float presence_penalty;	 /* [-2, 2], default 0 */
	float frequency_penalty; /* [-2, 2], default 0 */
	bool ignore_eos;	 /* vLLM */
	int32_t min_tokens;	 /* vLLM; >= 0 and <= max_tokens when both set */
	char **stop;		 /* n_stop non-empty UTF-8 strings */
	size_t *stop_len;
	int n_stop;
	int32_t *stop_token_ids; /* vLLM */
	int n_stop_token_ids;
	int32_t *bias_token; /* logit_bias: n_logit_bias (token, bias in [-100, 100]) */
	float *bias_value;
	int n_logit_bias;
};

/* One completions prompt: text or token ids. */
struct api_prompt {
	bool is_tokens;
	char *text; /* NUL-terminated UTF-8 (is_tokens false) */
	size_t text_len;
	int32_t *tokens; /* is_tokens true */
	size_t n_tokens;
};

struct api_completion_req {
	struct arena arena; /* owns everything below */
	char *model;	    /* NULL when absent */
	struct api_prompt *prompts;
	int n_prompts;	     /* >= 1 */
	bool has_max_tokens; /* false: the server fills in context - prompt */
	int32_t max_tokens;  /* >= 1, <= limits.max_tokens (OpenAI's default is 16) */
	int n;		     /* choices per prompt, default 1 */
	bool stream, include_usage, echo;
	bool add_special_tokens; /* default true (BOS where the tokenizer adds it) */
	int logprobs; /* -1 = none, else 0..20 top alternatives */
	char *user;
	struct api_sampling s;
};

enum api_role { API_ROLE_SYSTEM, API_ROLE_USER, API_ROLE_ASSISTANT };
const char *api_role_str(enum api_role r);

struct api_chat_msg {
	enum api_role role; /* "developer" is read as system */
	bool content_is_array;
	char **parts; /* n_parts text parts (a string content is one part) */
	size_t *part_len;
	int n_parts; /* 0 when an assistant message has null content */
	char *name;  /* NULL when absent */
};

struct api_chat_req {
	struct arena arena;
	char *model;
	struct api_chat_msg *msgs;
	int n_msgs; /* >= 1 */
	bool has_max_tokens;
	int32_t max_tokens; /* max_completion_tokens wins over max_tokens */
	int n;
	bool stream, include_usage;
	bool logprobs;	  /* return logprobs of the chosen tokens */
	int top_logprobs; /* 0..20, only with logprobs */
	/* default true: BOS added where the chat template does not emit it */
	bool add_special_tokens;
	bool add_generation_prompt; /* default true (vLLM's field) */
	char *user;
	struct api_sampling s;
};

/* POST /tokenize: {"prompt": "..."} or {"messages": [...]} (vLLM). */
struct api_tokenize_req {
	struct arena arena;
	char *model;
	bool is_chat;
	char *prompt; /* !is_chat */
	size_t prompt_len;
	struct api_chat_msg *msgs; /* is_chat */
	int n_msgs;
	/* default true; for messages, as in chat: BOS only where the template
	 * does not emit it */
	bool add_special_tokens;
	bool add_generation_prompt; /* default true */
	bool return_token_strs;     /* default false */
};

/* POST /detokenize: {"tokens": [...]} */
struct api_detokenize_req {
	struct arena arena;
	char *model;
	int32_t *tokens;
	size_t n_tokens;
};

/* body need not be NUL-terminated. On error *out is left freed (no need to
 * call _free) and err says why. lim NULL = defaults. */
int api_parse_completion(const char *body, size_t len, const struct api_limits *lim,
			 struct api_completion_req *out, struct api_error *err);
void api_completion_req_free(struct api_completion_req *r);
int api_parse_chat(const char *body, size_t len, const struct api_limits *lim,
		   struct api_chat_req *out, struct api_error *err);
void api_chat_req_free(struct api_chat_req *r);
int api_parse_tokenize(const char *body, size_t len, const struct api_limits *lim,
		       struct api_tokenize_req *out, struct api_error *err);
void api_tokenize_req_free(struct api_tokenize_req *r);
int api_parse_detokenize(const char *body, size_t len, const struct api_limits *lim,
			 struct api_detokenize_req *out, struct api_error *err);
void api_detokenize_req_free(struct api_detokenize_req *r);

/* Prompt + max_tokens against the context, after tokenizing. has_max_tokens
 * false: *out = max_model_len - n_prompt (capped at lim->max_tokens). Errors
 * are 400 with the numbers in the message (param "max_tokens", or
 * "messages"/"prompt" when the prompt alone fills the context or is empty). */
int api_resolve_max_tokens(bool has_max_tokens, int32_t max_tokens, size_t n_prompt,
			   int32_t max_model_len, const struct api_limits *lim, bool is_chat,
			   int32_t *out, struct api_error *err);

/* ---- responses --------------------------------------------------------- */

/* What every response object repeats. id from api_format_id. */
struct api_meta {
	const char *id;
	const char *model;
	int64_t created; /* unix seconds */
};

/* prefix ("cmpl-", "chatcmpl-") + 16 hex digits of instance + 16 of
 * request_id: 32 hex digits, as long as vLLM's random UUIDs; instance is
 * random per server process, so ids do not repeat across restarts or
 * replicas. out needs 48 bytes. */
void api_format_id(char *out, size_t cap, const char *prefix, uint64_t instance,
		   uint64_t request_id);

struct api_usage {
	int64_t prompt_tokens;
	int64_t completion_tokens;
};

/* One alternative token and its logprob. Token text is raw bytes (may be a
 * partial UTF-8 sequence: JSON strings get U+FFFD, chat "bytes" stay exact). */
struct api_top_logprob {
	const char *token;
	size_t token_len;
	float logprob; /* -inf is written as -9999.0 (OpenAI's convention) */
};

struct api_token_logprob {
	const char *token;
	size_t token_len;
	float logprob;
	const struct api_top_logprob *top;
	int n_top;
	int32_t text_offset; /* completions only: character offset in the choice text */
};

struct api_logprobs {
	const struct api_token_logprob *tokens;
	size_t n_tokens;
};

struct api_choice {
	int index;
	const char *text; /* generated (plus echoed prompt for echo) text; raw bytes */
	size_t text_len;
	const char *finish_reason;	   /* "stop", "length", ...; NULL = null */
	const struct api_logprobs *logprobs; /* NULL = "logprobs": null */
};

/* Non-streaming bodies. */
int api_render_completion(struct buf *out, const struct api_meta *m, const struct api_choice *c,
			  int n_choices, const struct api_usage *u);
int api_render_chat_completion(struct buf *out, const struct api_meta *m,
			       const struct api_choice *c, int n_choices,
			       const struct api_usage *u);

/* Logprobs objects alone (also used inside the renderers above). */
int api_render_completion_logprobs(struct buf *out, const struct api_logprobs *lp);
int api_render_chat_logprobs(struct buf *out, const struct api_logprobs *lp);

/* GET /v1/models: one entry per model name. */
struct api_model_info {
	const char *id;
	int64_t created;
	const char *owned_by; /* NULL = "aorta" */
	int32_t max_model_len;
};
int api_render_models(struct buf *out, const struct api_model_info *models, int n_models);

/* /tokenize and /detokenize bodies (vLLM shapes). strs / str_lens: each
 * token's vocabulary piece for "token_strs" (return_token_strs), or NULL
 * for null. */
int api_render_tokenize(struct buf *out, const int32_t *tokens, size_t n_tokens,
			int32_t max_model_len, const char *const *strs, const size_t *str_lens);
int api_render_detokenize(struct buf *out, const char *text, size_t len);

/* Append s as a JSON string literal (quotes included). Invalid UTF-8 is
 * replaced by U+FFFD so the output is always valid JSON. */
int api_json_string(struct buf *out, const char *s, size_t len);
/* The characters (code points) api_json_string renders s as: one per valid
 * UTF-8 sequence, one U+FFFD per invalid byte. For text_offset. */
size_t api_json_string_chars(const char *s, size_t len);

/* ---- streaming (SSE) --------------------------------------------------- */

enum api_stream_kind { API_STREAM_COMPLETION, API_STREAM_CHAT };

/* Enforces the stream protocol so the server cannot break it: each chat
 * choice's first chunk carries the role, finish_reason is sent exactly once
 * per choice, the usage chunk (include_usage) comes after every choice has
 * finished, then "data: [DONE]". Each call appends complete
 * "data: {...}\n\n" events to out. Caller-allocated; no heap. */
struct api_stream {
	enum api_stream_kind kind;
	struct api_meta meta; /* borrowed: strings must outlive the stream */
	int n_choices;
	bool include_usage;
	bool done; /* [DONE] was written */
	bool role_sent[API_MAX_N_HARD];
	bool finished[API_MAX_N_HARD];
};

int api_stream_init(struct api_stream *s, enum api_stream_kind kind, const struct api_meta *m,
		    int n_choices, bool include_usage);
/* Text (may be empty) for one choice; lp NULL = no logprobs. */
int api_stream_delta(struct api_stream *s, struct buf *out, int index, const char *text,
		     size_t len, const struct api_logprobs *lp);
/* The finishing chunk for one choice (text may be empty). ERR_STATE if that
 * choice already finished. */
int api_stream_finish(struct api_stream *s, struct buf *out, int index, const char *text,
		      size_t len, const struct api_logprobs *lp, const char *finish_reason);
/* The usage chunk (when include_usage; u may then not be NULL) and [DONE].
 * ERR_STATE if a choice has not finished. */
int api_stream_end(struct api_stream *s, struct buf *out, const struct api_usage *u);
/* After the stream started: an error event ({"error":{...}}) then [DONE]. */
int api_stream_error(struct api_stream *s, struct buf *out, const struct api_error *e);

#endif
