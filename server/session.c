/* server/session.c — the life of a generation request after it is parsed
 * (server/completions.c starts it): turn the batcher's events into either
 * one JSON body or an SSE stream (api_stream enforces the stream protocol),
 * with logprobs, metrics and the access log. Owns every struct srv_session
 * (s->sessions) and the uv_async handle the engine thread wakes the loop
 * with: events are drained here. A client that goes away cancels its batcher
 * requests; the session is freed when nothing refers to it any more: the
 * HTTP request, the tokenizer work and every batcher request that has not
 * sent its terminal event yet. Loop thread only, except on_wake (the
 * engine thread). Tested in tests/e2e/.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batching/engine_thread.h"
#include "common/clock.h"
#include "common/log.h"
#include "batching/finish.h"
#include "engine/tok/tokenizer.h"
#include "session.h"

struct lp_entry {
	int32_t token;
	float logprob;
	int n_top;
	struct sample_logprob top[SAMPLER_MAX_LOGPROBS];
};

/* ---- lifetime ------------------------------------------------------------------ */

static void session_free(struct srv_session *x)
{
	struct srv *s = x->s;
	if (x->prev)
		x->prev->next = x->next;
	else if (s->sessions == x)
		s->sessions = x->next;
	if (x->next)
		x->next->prev = x->prev;
	for (int i = 0; x->prompts && i < x->n_prompts; i++) {
		free(x->prompts[i].ids);
		free(x->prompts[i].echo);
	}
	free(x->prompts);
	for (int i = 0; x->choices && i < x->n_choices; i++) {
		buf_deinit(&x->choices[i].text);
		free(x->choices[i].lps);
	}
	free(x->choices);
	free(x->bias);
	free(x->stops);
	buf_deinit(&x->chat_text);
	buf_deinit(&x->out);
	if (x->parsed && x->chat)
		api_chat_req_free(&x->chreq);
	else if (x->parsed)
		api_completion_req_free(&x->creq);
	free(x);
}

void session_maybe_free(struct srv_session *x)
{
	if (!x->r && !x->work_pending && x->n_live == 0)
		session_free(x);
}

int session_count(const struct srv *s)
{
	int n = 0;
	for (const struct srv_session *x = s->sessions; x; x = x->next)
		n++;
	return n;
}

void session_cancel_live(struct srv_session *x)
{
	for (int i = 0; x->prompts && i < x->n_prompts; i++)
		if (x->prompts[i].live)
			bat_cancel(x->s->bat, x->prompts[i].bat_id);
}

/* ---- answering ------------------------------------------------------------------ */

void session_early_error(struct srv_session *x, const struct api_error *e)
{
	x->answered = true;
	x->s->m.requests_error++;
	if (x->r)
		srv_respond_error(x->s, x->r, e);
}

static void stream_flush(struct srv_session *x)
{
	if (x->r && x->out.len)
		http_stream_write(x->r, x->out.data, x->out.len);
	buf_clear(&x->out);
}

/* Fail the request: an error body, or an error event if the stream started. */
static void session_fail(struct srv_session *x, const struct api_error *e)
{
	struct srv *s = x->s;
	s->m.requests_error++;
	if (!x->r)
		return;
	if (x->stream_started) {
		buf_clear(&x->out);
		api_stream_error(&x->st, &x->out, e);
		stream_flush(x);
		http_stream_end(x->r);
	} else {
		srv_respond_error(s, x->r, e);
	}
}

/* text_offset counts characters of the token texts from text_off on; returns
 * the offset after the last. */
static int32_t fill_logprobs(struct srv_session *x, const struct sess_choice *c,
			     int32_t text_off, struct api_token_logprob *tl,
			     struct api_top_logprob *tops, struct buf *texts, size_t *offs)
{
	/* decode each token alone; texts holds them back to back. Chat keeps
	 * the bytes of a partial character (its "bytes" field must rebuild the
	 * text); completions show it as U+FFFD, as vLLM does */
	const struct tokenizer *tok = x->s->tok;
	const unsigned dflags = x->chat ? TOK_KEEP_BYTES : 0;
	size_t n_text = 0;
	for (size_t i = 0; i < c->n_lps; i++) {
		const struct lp_entry *e = &c->lps[i];
		offs[n_text++] = texts->len;
		tok_decode(tok, &e->token, 1, dflags, texts);
		for (int k = 0; k < e->n_top; k++) {
			offs[n_text++] = texts->len;
			tok_decode(tok, &e->top[k].token, 1, dflags, texts);
		}
	}
	offs[n_text] = texts->len;
	size_t t = 0, top_i = 0;
	for (size_t i = 0; i < c->n_lps; i++) {
		const struct lp_entry *e = &c->lps[i];
		tl[i].token = texts->data + offs[t];
		tl[i].token_len = offs[t + 1] - offs[t];
		tl[i].logprob = e->logprob;
		tl[i].text_offset = text_off;
		text_off += (int32_t)api_json_string_chars(tl[i].token, tl[i].token_len);
		t++;
		tl[i].top = &tops[top_i];
		tl[i].n_top = e->n_top;
		for (int k = 0; k < e->n_top; k++, t++, top_i++) {
			tops[top_i].token = texts->data + offs[t];
			tops[top_i].token_len = offs[t + 1] - offs[t];
			tops[top_i].logprob = e->top[k].logprob;
		}
	}
	return text_off;
}

/* Render logprobs for choice c (all of them, or only entries [from, n_lps)),
 * text_offset counted from text_off. */
struct lp_render {
	struct api_logprobs lp;
	struct api_token_logprob *tl;
	struct api_top_logprob *tops;
	struct buf texts;
	size_t *offs;
	int32_t end_off; /* the text_offset after the last entry */
};

static int lp_render_init(struct srv_session *x, const struct sess_choice *c, size_t from,
			  int32_t text_off, struct lp_render *o)
{
	memset(o, 0, sizeof *o);
	buf_init(&o->texts);
	struct sess_choice view = *c;
	view.lps = c->lps + from;
	view.n_lps = c->n_lps - from;
	size_t n_top = 0;
	for (size_t i = 0; i < view.n_lps; i++)
		n_top += (size_t)view.lps[i].n_top;
	o->tl = calloc(view.n_lps + 1, sizeof *o->tl);
	o->tops = calloc(n_top + 1, sizeof *o->tops);
	o->offs = calloc(view.n_lps + n_top + 1, sizeof *o->offs);
	if (!o->tl || !o->tops || !o->offs)
		return -1;
	o->end_off = fill_logprobs(x, &view, text_off, o->tl, o->tops, &o->texts, o->offs);
	o->lp.tokens = o->tl;
	o->lp.n_tokens = view.n_lps;
	return 0;
}

static void lp_render_deinit(struct lp_render *o)
{
	free(o->tl);
	free(o->tops);
	free(o->offs);
	buf_deinit(&o->texts);
}

static void session_complete(struct srv_session *x)
{
	struct srv *s = x->s;
	if (x->answered)
		return;
	if (x->failed) {
		session_fail(x, &x->fail);
		return;
	}
	s->m.requests_ok++;
	s->m.prompt_tokens += (uint64_t)x->prompt_tokens;
	s->m.generation_tokens += (uint64_t)x->completion_tokens;
	if (!x->r)
		return;
	struct api_usage u = { x->prompt_tokens, x->completion_tokens };
	if (x->stream_started) {
		buf_clear(&x->out);
		api_stream_end(&x->st, &x->out, &u);
		stream_flush(x);
		http_stream_end(x->r);
		return;
	}
	struct api_choice *ch = calloc((size_t)x->n_choices, sizeof *ch);
	struct lp_render *lr = calloc((size_t)x->n_choices, sizeof *lr);
	if (!ch || !lr) {
		free(ch);
		free(lr);
		struct api_error e;
		api_error_from_err(&e, ERR_NOMEM, NULL, "out of memory rendering the response");
		srv_respond_error(s, x->r, &e);
		return;
	}
	for (int i = 0; i < x->n_choices; i++) {
		struct sess_choice *c = &x->choices[i];
		ch[i].index = i;
		ch[i].text = c->text.data ? c->text.data : "";
		ch[i].text_len = c->text.len;
		ch[i].finish_reason = c->finish;
		if (x->logprobs >= 0 && lp_render_init(x, c, 0, 0, &lr[i]) == 0)
			ch[i].logprobs = &lr[i].lp;
	}
	struct api_meta meta = { x->id, s->model_name, x->created };
	struct buf body;
	buf_init(&body);
	if (x->chat)
		api_render_chat_completion(&body, &meta, ch, x->n_choices, &u);
	else
		api_render_completion(&body, &meta, ch, x->n_choices, &u);
	srv_respond_json(s, x->r, 200, &body);
	buf_deinit(&body);
	for (int i = 0; i < x->n_choices; i++)
		lp_render_deinit(&lr[i]);
	free(lr);
	free(ch);
}

/* ---- events from the batcher ------------------------------------------------------ */

static int sub_index(const struct srv_session *x, uint64_t bat_id)
{
	for (int i = 0; i < x->n_prompts; i++)
		if (x->prompts[i].bat_id == bat_id)
			return i;
	return -1;
}

static void on_token(struct srv_session *x, struct sess_choice *c, int k, int choice,
		     const struct bat_event *ev)
{
	struct srv *s = x->s;
	double now = clock_now_s();
	if (!x->first_token_seen) { /* the access log's TTFT: the request's first token */
		x->first_token_seen = true;
		x->ttft = now - x->t0;
	}
	/* the histograms count each prompt, as vLLM counts each engine request
	 * (the queue time is per prompt too) */
	struct sess_prompt *sp = &x->prompts[k];
	if (!sp->first_token_seen) {
		sp->first_token_seen = true;
		histogram_observe(&s->m.ttft, now - x->t0);
	}
	if (c->t_last_token > 0)
		histogram_observe(&s->m.itl, now - c->t_last_token);
	c->t_last_token = now;
	size_t lp_from = c->n_lps;
	if (ev->has_logprobs && x->logprobs >= 0) {
		if (c->n_lps == c->cap_lps) {
			size_t cap = c->cap_lps ? c->cap_lps * 2 : 16;
			struct lp_entry *p = realloc(c->lps, cap * sizeof *p);
			if (!p)
				return;
			c->lps = p;
			c->cap_lps = cap;
		}
		struct lp_entry *e = &c->lps[c->n_lps++];
		e->token = ev->token;
		e->logprob = ev->lp.logprob;
		e->n_top = ev->lp.n_top < x->logprobs ? ev->lp.n_top : x->logprobs;
		memcpy(e->top, ev->lp.top, (size_t)e->n_top * sizeof e->top[0]);
	}
	if (!x->stream_started) {
		buf_append(&c->text, ev->text ? ev->text : "", ev->text_len);
		return;
	}
	if (ev->text_len == 0 && c->n_lps == lp_from)
		return; /* nothing to show yet */
	struct lp_render lr;
	bool has_lp = c->n_lps > lp_from && lp_render_init(x, c, lp_from, c->lp_chars, &lr) == 0;
	if (has_lp)
		c->lp_chars = lr.end_off; /* offsets run on over the whole stream */
	buf_clear(&x->out);
	api_stream_delta(&x->st, &x->out, choice, ev->text ? ev->text : "", ev->text_len,
			 has_lp ? &lr.lp : NULL);
	if (c->n_lps > lp_from)
		lp_render_deinit(&lr);
	stream_flush(x);
}

static void on_event(struct srv *s, struct bat_event *ev)
{
	struct srv_session *x = ev->user;
	int k = sub_index(x, ev->request_id);
	if (k < 0)
		return;
	int choice = k * x->n + ev->index;
	struct sess_choice *c = choice >= 0 && choice < x->n_choices ? &x->choices[choice] : NULL;
	switch (ev->kind) {
	case BAT_EV_TOKEN:
		if (c && x->r && !x->failed)
			on_token(x, c, k, choice, ev);
		break;
	case BAT_EV_FINISH:
		if (!c)
			break;
		if (ev->finish > FINISH_NONE && ev->finish < FINISH__COUNT)
			s->m.finished[ev->finish]++;
		c->finish = finish_reason_str(ev->finish);
		if (x->stream_started && x->r && !x->failed) {
			buf_clear(&x->out);
			api_stream_finish(&x->st, &x->out, choice, "", 0, NULL,
					  c->finish ? c->finish : "stop");
			stream_flush(x);
		}
		break;
	case BAT_EV_DONE:
	case BAT_EV_ERROR:
		if (ev->kind == BAT_EV_DONE) {
			x->prompt_tokens += ev->prompt_tokens;
			x->completion_tokens += ev->completion_tokens;
			histogram_observe(&s->m.e2e, clock_now_s() - x->t0);
			if (ev->t_first_scheduled_ns >= ev->t_arrival_ns && ev->t_arrival_ns)
				histogram_observe(&s->m.queue,
						 (double)(ev->t_first_scheduled_ns - ev->t_arrival_ns) *
							 1e-9);
		} else if (!x->failed) {
			x->failed = true;
			api_error_generation_failed(&x->fail, ev->err, ev->msg);
			session_cancel_live(x);
		}
		if (x->prompts[k].live) {
			x->prompts[k].live = false;
			x->n_live--;
		}
		if (x->n_live == 0)
			session_complete(x);
		session_maybe_free(x);
		break;
	}
}

/* The batcher woke the loop: drain every event. */
static void drain_events(struct srv *s)
{
	struct bat_event evs[64];
	int n;
	if (!s->bat)
		return;
	while ((n = bat_poll_events(s->bat, evs, 64)) > 0) {
		for (int i = 0; i < n; i++) {
			on_event(s, &evs[i]);
			bat_event_clear(&evs[i]);
		}
	}
}

/* ---- the engine thread's wake ------------------------------------------------------- */

static void on_async(uv_async_t *a)
{
	drain_events(a->data);
}

/* bat_opts.wake: called on the engine thread. uv_async_send coalesces, so
 * drain_events empties the whole outbox each time. */
static void on_wake(void *arg)
{
	uv_async_send(arg);
}

void session_wake_init(struct srv *s)
{
	uv_async_init(s->loop, &s->wake, on_async);
	s->wake.data = s;
}

void session_wake_opts(struct srv *s, struct bat_opts *bo)
{
	bo->wake = on_wake;
	bo->wake_arg = &s->wake;
}

void session_wake_unref(struct srv *s)
{
	/* the batcher thread may still wake the loop (uv_async_send on a closed
	 * handle aborts): the handle stays open, out of the loop's count, until
	 * the engine thread is joined (session_wake_close) */
	uv_unref((uv_handle_t *)&s->wake);
}

void session_wake_close(struct srv *s)
{
	uv_close((uv_handle_t *)&s->wake, NULL);
}

/* ---- starting ----------------------------------------------------------------------- */

void session_start_stream(struct srv_session *x)
{
	struct srv *s = x->s;
	struct api_meta meta = { x->id, s->model_name, x->created };
	api_stream_init(&x->st, x->chat ? API_STREAM_CHAT : API_STREAM_COMPLETION, &meta,
			x->n_choices, x->include_usage);
	/* api_stream borrows meta's strings: point them at the session's copies */
	x->st.meta.id = x->id;
	x->st.meta.model = s->model_name;
	http_stream_start(x->r, 200, "text/event-stream", NULL, 0);
	x->stream_started = true;
	if (x->chat) {
		/* each choice opens with a role-only delta ("content": ""), as
		 * OpenAI and vLLM send it, before any text */
		buf_clear(&x->out);
		for (int i = 0; i < x->n_choices; i++)
			api_stream_delta(&x->st, &x->out, i, "", 0, NULL);
		stream_flush(x);
	}
	if (x->echo) {
		buf_clear(&x->out);
		for (int i = 0; i < x->n_choices; i++) {
			const struct sess_prompt *p = &x->prompts[i / x->n];
			if (p->echo_len)
				api_stream_delta(&x->st, &x->out, i, p->echo, p->echo_len, NULL);
		}
		stream_flush(x);
	}
}

struct srv_session *session_new(struct srv *s, struct http_req *r, bool chat)
{
	struct srv_session *x = calloc(1, sizeof *x);
	if (!x) {
		struct api_error e;
		api_error_from_err(&e, ERR_NOMEM, NULL, "out of memory");
		srv_respond_error(s, r, &e);
		return NULL;
	}
	x->s = s;
	x->r = r;
	x->chat = chat;
	x->t0 = http_req_start_time(r);
	buf_init(&x->chat_text);
	buf_init(&x->out);
	x->created = clock_unix_s();
	api_format_id(x->id, sizeof x->id, chat ? "chatcmpl-" : "cmpl-", s->id_instance,
		      http_req_id(r));
	x->next = s->sessions;
	if (s->sessions)
		s->sessions->prev = x;
	s->sessions = x;
	http_req_set_ctx(r, x);
	return x;
}

/* ---- closing ------------------------------------------------------------------------ */

void session_on_close(struct srv *s, struct http_req *r, bool completed)
{
	struct srv_session *x = http_req_ctx(r);
	double ms = (clock_now_s() - x->t0) * 1000.0;
	log_info("access",
		 "req=%llu id=%s %s %s status=%d prompt_tokens=%lld completion_tokens=%lld "
		 "ttft_ms=%.1f time_ms=%.1f%s",
		 (unsigned long long)http_req_id(r), x->id, http_req_method(r), http_req_path(r),
		 http_req_status(r), (long long)x->prompt_tokens, (long long)x->completion_tokens,
		 x->ttft * 1000.0, ms, completed ? "" : " client_gone=1");
	x->r = NULL;
	if (x->n_live)
		session_cancel_live(x); /* the client went away: free its KV blocks at the next step */
	(void)s;
	session_maybe_free(x);
}

void session_abort_all(struct srv *s)
{
	struct api_error e;
	api_error_unavailable(&e, "the server is shutting down", 0);
	struct srv_session *x = s->sessions;
	while (x) {
		struct srv_session *next = x->next;
		session_cancel_live(x);
		x->n_live = 0; /* the batcher is going away: no terminal events will come */
		for (int i = 0; x->prompts && i < x->n_prompts; i++)
			x->prompts[i].live = false;
		if (x->r && !x->work_pending) {
			if (x->stream_started) {
				buf_clear(&x->out);
				api_stream_error(&x->st, &x->out, &e);
				stream_flush(x);
				http_stream_end(x->r);
			} else if (!http_req_status(x->r)) {
				srv_respond_error(s, x->r, &e);
			}
		}
		session_maybe_free(x);
		x = next;
	}
}
