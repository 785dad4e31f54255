/* server/completions.c — POST /v1/completions and /v1/chat/completions up
 * to submission: parse (api/) on the loop thread, render the chat template,
 * build and validate the sampling params once, tokenize on a libuv worker,
 * then submit one batcher request per prompt (each with n choices); from
 * there server/session.c answers. Loop thread only, except tokenize_work (a
 * libuv worker), which touches only the session's prompts and read-only
 * objects. Tested in tests/e2e/.
 */
#include <stdlib.h>
#include <string.h>

#include "batching/engine_thread.h"
#include "engine/tok/tokenizer.h"
#include "session.h"

/* ---- submission -------------------------------------------------------------------- */

static void tokenize_work(uv_work_t *w)
{
	struct srv_session *x = w->data;
	const struct tokenizer *tok = x->s->tok;
	x->work_rc = 0;
	for (int i = 0; i < x->n_prompts; i++) {
		struct sess_prompt *p = &x->prompts[i];
		if (x->chat) {
			x->work_rc = tok_encode(tok, x->chat_text.data ? x->chat_text.data : "",
						x->chat_text.len, x->enc_flags, &p->ids, &p->n_ids);
		} else {
			const struct api_prompt *ap = &x->creq.prompts[i];
			if (ap->is_tokens) {
				p->ids = malloc((ap->n_tokens ? ap->n_tokens : 1) * sizeof *p->ids);
				if (!p->ids) {
					x->work_rc = ERR_NOMEM;
				} else {
					memcpy(p->ids, ap->tokens, ap->n_tokens * sizeof *p->ids);
					p->n_ids = ap->n_tokens;
				}
				if (!x->work_rc && x->echo) {
					struct buf t;
					buf_init(&t);
					x->work_rc = tok_decode(tok, p->ids, p->n_ids, 0, &t);
					p->echo = buf_take(&t, &p->echo_len);
				}
			} else {
				x->work_rc = tok_encode(tok, ap->text, ap->text_len, x->enc_flags,
							&p->ids, &p->n_ids);
				if (!x->work_rc && x->echo) {
					p->echo = malloc(ap->text_len + 1);
					if (p->echo) {
						memcpy(p->echo, ap->text, ap->text_len + 1);
						p->echo_len = ap->text_len;
					}
				}
			}
		}
		if (x->work_rc) {
			x->work_bad_prompt = i;
			return;
		}
	}
}

/* The request's sampling params, built once: max_tokens -1, as each prompt's
 * submission sets its own. x->bias and x->stops (allocated by the caller)
 * hold the arrays that differ in shape from the API's. */
static void build_params(struct srv_session *x, const struct api_sampling *a)
{
	for (int i = 0; i < a->n_logit_bias; i++)
		x->bias[i] = (struct sampler_logit_bias){ a->bias_token[i], a->bias_value[i] };
	for (int i = 0; i < a->n_stop; i++)
		x->stops[i] = a->stop[i];
	struct sampling_params *p = &x->params;
	sampling_params_init(p);
	if (a->has_temperature)
		p->temperature = a->temperature;
	if (a->has_top_p)
		p->top_p = a->top_p;
	if (a->has_top_k)
		p->top_k = a->top_k == 0 ? -1 : a->top_k;
	if (a->has_min_p)
		p->min_p = a->min_p;
	if (a->has_repetition_penalty)
		p->repetition_penalty = a->repetition_penalty;
	p->presence_penalty = a->presence_penalty;
	p->frequency_penalty = a->frequency_penalty;
	p->logit_bias = x->bias;
	p->n_logit_bias = a->n_logit_bias;
	p->min_tokens = a->min_tokens;
	p->max_tokens = -1;
	p->ignore_eos = a->ignore_eos;
	p->stop_token_ids = a->stop_token_ids;
	p->n_stop_token_ids = a->n_stop_token_ids;
	p->stop = x->stops;
	p->n_stop = a->n_stop;
	p->has_seed = a->has_seed;
	p->seed = (uint64_t)a->seed;
	p->logprobs = x->logprobs;
}

static int submit_all(struct srv_session *x, struct api_error *e)
{
	struct srv *s = x->s;
	for (int i = 0; i < x->n_prompts; i++) {
		struct sess_prompt *p = &x->prompts[i];
		int32_t mt;
		if (api_resolve_max_tokens(x->has_max_tokens, x->max_tokens, p->n_ids,
					   s->max_model_len, &s->limits, x->chat, &mt, e))
			return -1;
		struct bat_request br = {
			.id = s->next_bat_id++,
			.prompt = p->ids,
			.n_prompt = (int)p->n_ids,
			.params = x->params, /* validated once; the batcher checks again */
			.n = x->n,
			.user = x,
		};
		br.params.max_tokens = mt;
		struct diag d = { 0 };
		int rc = bat_submit(s->bat, &br, &d);
		if (rc) {
			api_error_rejected(e, rc, d.msg);
			return -1;
		}
		p->bat_id = br.id;
		p->live = true;
		x->n_live++;
	}
	return 0;
}

static void tokenize_done(uv_work_t *w, int status)
{
	struct srv_session *x = w->data;
	struct srv *s = x->s;
	x->work_pending = false;
	if (!x->r || !s->bat) {
		if (x->r) {
			struct api_error e;
			api_error_unavailable(&e, "the server is shutting down", 0);
			session_early_error(x, &e);
		}
		session_maybe_free(x);
		return;
	}
	struct api_error e;
	if (status || x->work_rc) {
		int rc = status ? ERR_CANCELLED : x->work_rc;
		api_error_from_err(&e, rc, x->chat ? "messages" : "prompt",
				   "cannot tokenize prompt %d: %s", x->work_bad_prompt, err_str(rc));
		session_early_error(x, &e);
		return;
	}
	if (submit_all(x, &e)) {
		session_cancel_live(x);
		session_early_error(x, &e);
		return; /* freed when the cancelled requests report back and the request closes */
	}
	if (x->echo)
		for (int i = 0; i < x->n_choices; i++) {
			const struct sess_prompt *p = &x->prompts[i / x->n];
			if (p->echo)
				buf_append(&x->choices[i].text, p->echo, p->echo_len);
		}
	if (x->stream)
		session_start_stream(x);
}

/* Everything after parsing, shared by both endpoints. */
static void begin(struct srv_session *x, const char *model, const struct api_sampling *a)
{
	struct srv *s = x->s;
	struct api_error e;
	if (model && strcmp(model, s->model_name) != 0) {
		api_error_model_not_found(&e, model);
		session_early_error(x, &e);
		return;
	}
	if (x->stream && (int64_t)x->n_prompts * x->n > API_MAX_N_HARD) {
		api_error_stream_choices(&e, x->n_prompts * x->n);
		session_early_error(x, &e);
		return;
	}
	x->prompts = calloc((size_t)x->n_prompts, sizeof *x->prompts);
	x->n_choices = x->n_prompts * x->n;
	x->choices = calloc((size_t)x->n_choices, sizeof *x->choices);
	x->bias = calloc((size_t)a->n_logit_bias + 1, sizeof *x->bias);
	x->stops = calloc((size_t)a->n_stop + 1, sizeof *x->stops);
	if (!x->prompts || !x->choices || !x->bias || !x->stops) {
		api_error_from_err(&e, ERR_NOMEM, NULL, "out of memory");
		session_early_error(x, &e);
		return;
	}
	for (int i = 0; i < x->n_choices; i++)
		buf_init(&x->choices[i].text);
	build_params(x, a);
	/* check the sampling fields now, so a bad one is a 400 before any work */
	struct diag d = { 0 };
	int rc = sampling_params_validate(&x->params, s->limits.n_vocab, &d);
	if (rc) {
		api_error_rejected(&e, rc, d.msg);
		session_early_error(x, &e);
		return;
	}
	x->work.data = x;
	x->work_pending = true;
	http_defer(x->r);
	uv_queue_work(s->loop, &x->work, tokenize_work, tokenize_done);
}

void completions_handle(struct srv *s, struct http_req *r)
{
	struct srv_session *x = session_new(s, r, false);
	if (!x)
		return;
	struct api_error e;
	size_t len;
	const char *body = http_req_body(r, &len);
	if (api_parse_completion(body, len, &s->limits, &x->creq, &e)) {
		session_early_error(x, &e);
		return;
	}
	x->parsed = true;
	if (x->creq.echo && x->creq.logprobs >= 0) {
		api_error_echo_logprobs(&e);
		session_early_error(x, &e);
		return;
	}
	x->has_max_tokens = x->creq.has_max_tokens;
	x->max_tokens = x->creq.max_tokens;
	x->n = x->creq.n;
	x->logprobs = x->creq.logprobs;
	x->stream = x->creq.stream;
	x->include_usage = x->creq.include_usage;
	x->echo = x->creq.echo;
	x->n_prompts = x->creq.n_prompts;
	/* completions: HF tokenizers add BOS and read special-token text (vLLM's default) */
	x->enc_flags = (x->creq.add_special_tokens ? TOK_ADD_SPECIAL : 0) | TOK_PARSE_SPECIAL;
	begin(x, x->creq.model, &x->creq.s);
}

void completions_handle_chat(struct srv *s, struct http_req *r)
{
	struct srv_session *x = session_new(s, r, true);
	if (!x)
		return;
	struct api_error e;
	size_t len;
	const char *body = http_req_body(r, &len);
	if (api_parse_chat(body, len, &s->limits, &x->chreq, &e)) {
		session_early_error(x, &e);
		return;
	}
	x->parsed = true;
	bool has_bos = false;
	if (api_chat_render(&s->tmpl, x->chreq.msgs, x->chreq.n_msgs,
			    x->chreq.add_generation_prompt, &x->chat_text, &has_bos, &e)) {
		session_early_error(x, &e);
		return;
	}
	x->has_max_tokens = x->chreq.has_max_tokens;
	x->max_tokens = x->chreq.max_tokens;
	x->n = x->chreq.n;
	x->logprobs = x->chreq.logprobs ? x->chreq.top_logprobs : -1;
	x->stream = x->chreq.stream;
	x->include_usage = x->chreq.include_usage;
	x->n_prompts = 1;
	/* the template text carries the special tokens (and BOS, when it emits it) */
	x->enc_flags = TOK_PARSE_SPECIAL |
		       (has_bos || !x->chreq.add_special_tokens ? 0 : TOK_ADD_SPECIAL);
	begin(x, x->chreq.model, &x->chreq.s);
}

