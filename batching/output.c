/* batching/output.c — the batcher's events and outbox: a sampled token
 * becomes text (streaming detokenizer, stop strings via generation.h) and a
 * TOKEN event; FINISH and the terminal DONE / ERROR events; the step's
 * pending queue (engine thread only) and the outbox it is published to
 * under mu, which bat_poll_events drains from any thread.
 *
 * Owns: struct evq, the pending and out queues, the piece/text scratch.
 * Tests: tests/batching/test_engine_thread.c (event order, cancellation),
 * test_batcher_engine.c (stop strings and text on a real tokenizer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batching/batcher_internal.h"
#include "common/clock.h"

/* ---- event queues ------------------------------------------------------------ */

static int evq_push(struct evq *q, const struct bat_event *e)
{
	if (q->n == q->cap) {
		int cap = q->cap ? q->cap * 2 : 256;
		struct bat_event *v = malloc((size_t)cap * sizeof(*v));
		if (!v)
			return ERR_NOMEM;
		for (int i = 0; i < q->n; i++)
			v[i] = q->ev[(q->head + i) % q->cap];
		free(q->ev);
		q->ev = v;
		q->cap = cap;
		q->head = 0;
	}
	q->ev[(q->head + q->n) % q->cap] = *e;
	q->n++;
	return 0;
}

static void evq_pop(struct evq *q, struct bat_event *e)
{
	*e = q->ev[q->head];
	q->head = (q->head + 1) % q->cap;
	q->n--;
}

void bat__evq_free(struct evq *q)
{
	struct bat_event e;
	while (q->n > 0) {
		evq_pop(q, &e);
		bat_event_clear(&e);
	}
	free(q->ev);
	memset(q, 0, sizeof(*q));
}

void bat_event_clear(struct bat_event *ev)
{
	free(ev->text);
	ev->text = NULL;
	ev->text_len = 0;
}

/* ---- events -------------------------------------------------------------------- */

void bat__emit(struct batcher *b, struct bat_event *e)
{
	if (evq_push(&b->pending, e) != 0)
		bat_event_clear(e); /* out of memory: the event is lost, not leaked */
}

void bat__emit_finish(struct batcher *b, struct bat_req *r, int index, enum finish_reason why,
                      int completion_tokens)
{
	struct bat_event e = {.kind = BAT_EV_FINISH,
	                      .request_id = r->id,
	                      .user = r->user,
	                      .index = index,
	                      .finish = why,
	                      .completion_tokens = completion_tokens};
	bat__emit(b, &e);
}

void bat__emit_end(struct batcher *b, struct bat_req *r)
{
	struct bat_event e = {.request_id = r->id, .user = r->user};
	if (r->failed) {
		e.kind = BAT_EV_ERROR;
		e.err = r->fail_err;
		snprintf(e.msg, sizeof(e.msg), "%s", r->fail_msg);
		b->n_failed++;
	} else {
		e.kind = BAT_EV_DONE;
		e.prompt_tokens = r->n_prompt;
		e.completion_tokens = r->completion_tokens;
		e.cached_tokens = r->cached_tokens;
		e.t_arrival_ns = r->t_arrival;
		e.t_first_scheduled_ns = r->t_first_scheduled;
		e.t_first_token_ns = r->t_first_token;
		e.t_finish_ns = clock_now_ns();
		b->n_done++;
	}
	bat__emit(b, &e);
	bat__req_free(r);
}

void bat__emit_token(struct batcher *b, struct bat_choice *c, const struct sample_result *sr)
{
	struct bat_req *r = c->req;
	const struct sample_result res = *sr;
	int rc;
	buf_clear(&b->piece);
	buf_clear(&b->text);
	if (b->o.tok && tok_stream_push(&c->ts, res.token, &b->piece) != 0) {
		bat__req_fail(r, ERR_INTERNAL, "detokenizing failed");
		return;
	}
	rc = generation_step(&c->gen, res.token, b->piece.data ? b->piece.data : "", b->piece.len,
	                     &b->text);
	if (rc) {
		bat__req_fail(r, rc, "stop-string matching failed");
		return;
	}
	if (c->gen.finish == FINISH_LENGTH && b->o.tok) {
		/* Nothing follows: release a trailing partial character too. */
		buf_clear(&b->piece);
		if (tok_stream_finish(&c->ts, &b->piece) == 0)
			buf_append(&b->text, b->piece.data ? b->piece.data : "", b->piece.len);
	}
	struct bat_event e = {.kind = BAT_EV_TOKEN,
	                      .request_id = r->id,
	                      .user = r->user,
	                      .index = c->index,
	                      .token = res.token};
	if (b->text.len > 0) {
		e.text = malloc(b->text.len + 1);
		if (e.text) {
			memcpy(e.text, b->text.data, b->text.len + 1);
			e.text_len = b->text.len;
		}
	}
	if (r->p.logprobs >= 0) {
		e.has_logprobs = true;
		e.lp = res;
	}
	bat__emit(b, &e);
	if (c->gen.finish != FINISH_NONE) {
		/* choice_end aborts the generation only if still running: done here. */
		bat__choice_end(b, c, c->gen.finish);
	}
}

/* ---- the outbox ---------------------------------------------------------------- */

bool bat__publish(struct batcher *b)
{
	bool any = b->pending.n > 0;
	struct bat_event e;
	while (b->pending.n > 0) {
		evq_pop(&b->pending, &e);
		if (evq_push(&b->out, &e) != 0)
			bat_event_clear(&e);
	}
	return any;
}

int bat_poll_events(struct batcher *b, struct bat_event *events, int max)
{
	int n = 0;
	pthread_mutex_lock(&b->mu);
	while (n < max && b->out.n > 0)
		evq_pop(&b->out, &events[n++]);
	pthread_mutex_unlock(&b->mu);
	return n;
}
