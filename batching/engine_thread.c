/* batching/engine_thread.c — the batcher (engine_thread.h): a pthread that
 * loops take-inbox -> cancel -> schedule -> model step -> sample ->
 * detokenize -> stop strings -> emit, with one mutex guarding the inbox,
 * the cancel list, the outbox and a stats snapshot. Events of one step are
 * built without the lock and published together, then the loop is woken.
 *
 * Tests: tests/batching/test_engine_thread.c (fake model: threads,
 * cancellation, n > 1, queue limits; real CPU engine on a generated tiny
 * model: batched greedy output equals each request run alone).
 */
#include "batching/engine_thread.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batching/kv_blocks.h"
#include "batching/scheduler.h"
#include "batching/sequence.h"
#include "common/buf.h"
#include "common/checked.h"
#include "common/clock.h"
#include "common/log.h"
#include "batching/generation.h"
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
	int max_tokens;           /* effective: params.max_tokens, or what max_model_len leaves */
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

struct batcher {
	struct bat_opts o;
	int32_t eos[SAMPLER_MAX_EOS];
	struct bat_model m;
	struct kv_pool *pool;
	struct sched *sched;
	/* Engine thread only. */
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
	struct buf piece, text;
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

/* ---- small helpers ---------------------------------------------------------- */

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

static void evq_free(struct evq *q)
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

static int model_engine_forward(void *ctx, const struct engine_batch *b, float *logits)
{
	return engine_forward(ctx, b, logits);
}

static int model_engine_forward_sample(void *ctx, const struct engine_batch *b,
                                       struct k_sample_args *a)
{
	return engine_forward_sample(ctx, b, a);
}

static int model_engine_copy(void *ctx, const int32_t *src, const int32_t *dst, int n)
{
	return engine_copy_blocks(ctx, src, dst, n);
}

void bat_model_engine(struct bat_model *m, struct engine *e, int vocab)
{
	m->ctx = e;
	m->vocab = vocab;
	m->forward = model_engine_forward;
	m->forward_sample = engine_samples_on_device(e) ? model_engine_forward_sample : NULL;
	m->copy_blocks = model_engine_copy;
}

void bat_model_sample_in_engine(struct bat_model *m)
{
	m->forward_sample = model_engine_forward_sample;
}

/* ---- requests ---------------------------------------------------------------- */

static void req_free(struct bat_req *r)
{
	if (!r)
		return;
	if (r->choices)
		for (int i = 0; i < r->n; i++) {
			struct bat_choice *c = &r->choices[i];
			if (!c->ready)
				continue;
			sampler_state_deinit(&c->ss);
			generation_deinit(&c->gen);
			tok_stream_deinit(&c->ts);
		}
	if (r->stops)
		for (int i = 0; i < r->p.n_stop; i++)
			free(r->stops[i]);
	free(r->stops);
	free(r->bias);
	free(r->stop_ids);
	free(r->choices);
	free(r->prompt);
	free(r);
}

static void *dup_array(const void *src, size_t n, size_t size, int *rc)
{
	if (n == 0 || !src)
		return NULL;
	size_t bytes;
	if (ck_mul(n, size, &bytes)) {
		*rc = ERR_OVERFLOW;
		return NULL;
	}
	void *p = malloc(bytes);
	if (!p)
		*rc = ERR_NOMEM;
	else
		memcpy(p, src, bytes);
	return p;
}

/* Deep-copy a validated request. */
static int req_copy(const struct bat_request *in, int max_tokens, struct bat_req **out)
{
	int rc = 0;
	struct bat_req *r = calloc(1, sizeof(*r));
	if (!r)
		return ERR_NOMEM;
	r->id = in->id;
	r->user = in->user;
	r->n = in->n;
	r->n_prompt = in->n_prompt;
	r->max_tokens = max_tokens;
	r->p = in->params;
	r->prompt = dup_array(in->prompt, (size_t)in->n_prompt, sizeof(int32_t), &rc);
	r->bias = dup_array(in->params.logit_bias, (size_t)in->params.n_logit_bias,
	                    sizeof(*r->bias), &rc);
	r->stop_ids = dup_array(in->params.stop_token_ids, (size_t)in->params.n_stop_token_ids,
	                        sizeof(int32_t), &rc);
	r->choices = calloc((size_t)in->n, sizeof(*r->choices));
	if (!r->choices)
		rc = ERR_NOMEM;
	if (in->params.n_stop > 0) {
		r->stops = calloc((size_t)in->params.n_stop, sizeof(char *));
		if (!r->stops)
			rc = ERR_NOMEM;
		for (int i = 0; r->stops && i < in->params.n_stop; i++)
			if (!(r->stops[i] = strdup(in->params.stop[i])))
				rc = ERR_NOMEM;
	}
	r->p.logit_bias = r->bias;
	r->p.stop_token_ids = r->stop_ids;
	r->p.stop = (const char *const *)r->stops;
	r->t_arrival = clock_now_ns();
	if (rc) {
		req_free(r);
		return rc;
	}
	*out = r;
	return 0;
}

/* ---- events -------------------------------------------------------------------- */

static void emit(struct batcher *b, struct bat_event *e)
{
	if (evq_push(&b->pending, e) != 0)
		bat_event_clear(e); /* out of memory: the event is lost, not leaked */
}

static void emit_finish(struct batcher *b, struct bat_req *r, int index, enum finish_reason why,
                        int completion_tokens)
{
	struct bat_event e = {.kind = BAT_EV_FINISH,
	                      .request_id = r->id,
	                      .user = r->user,
	                      .index = index,
	                      .finish = why,
	                      .completion_tokens = completion_tokens};
	emit(b, &e);
}

/* The request's terminal event; frees it (the caller unlinks it first). */
static void emit_end(struct batcher *b, struct bat_req *r)
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
	emit(b, &e);
	req_free(r);
}

static void active_unlink(struct batcher *b, struct bat_req *r)
{
	struct bat_req **pp = &b->active;
	while (*pp && *pp != r)
		pp = &(*pp)->next;
	if (*pp)
		*pp = r->next;
}

/* Take choice c's sequence out of the scheduler (it must not be in an
 * uncommitted step) and emit its FINISH. */
static void choice_end(struct batcher *b, struct bat_choice *c, enum finish_reason why)
{
	struct bat_req *r = c->req;
	if (c->finished)
		return;
	int gen = 0;
	if (c->seq) {
		struct seq *q = c->seq;
		gen = seq_n_generated(q);
		if (q->t_first_scheduled &&
		    (!r->t_first_scheduled || q->t_first_scheduled < r->t_first_scheduled))
			r->t_first_scheduled = q->t_first_scheduled;
		if (c->index == 0 && q->t_first_scheduled)
			r->cached_tokens = q->n_cached_tokens;
		sched_finish(b->sched, q, why);
		seq_destroy(q);
		c->seq = NULL;
	}
	if (c->ready)
		generation_abort(&c->gen, why == FINISH_ERROR ? FINISH_ERROR : FINISH_ABORT);
	c->finished = true;
	r->n_finished++;
	r->completion_tokens += gen;
	emit_finish(b, r, c->index, why, gen);
}

/* End every choice still open with `why`, then the request. */
static void req_end_all(struct batcher *b, struct bat_req *r, enum finish_reason why)
{
	for (int i = 0; i < r->n; i++)
		choice_end(b, &r->choices[i], why);
	active_unlink(b, r);
	emit_end(b, r);
}

static void req_fail(struct bat_req *r, int err, const char *msg)
{
	if (r->failed)
		return;
	r->failed = true;
	r->fail_err = err;
	snprintf(r->fail_msg, sizeof(r->fail_msg), "%s", msg);
}

static int choice_ready(struct batcher *b, struct bat_choice *c)
{
	struct bat_req *r = c->req;
	int rc = sampler_state_init(&c->ss, &r->p, b->o.server_seed, r->id, r->prompt, r->n_prompt,
	                            b->eos, b->o.n_eos);
	if (rc)
		return rc;
	if (c->index > 0) /* choices of one request draw from different streams */
		rng_seed(&c->ss.rng,
		         rng_request_seed(r->p.has_seed, r->p.seed, b->o.server_seed, r->id) +
		             0x9e3779b97f4a7c15ULL * (uint64_t)c->index);
	rc = generation_init(&c->gen, &r->p, r->n_prompt, b->o.max_model_len, b->eos, b->o.n_eos);
	if (rc) {
		sampler_state_deinit(&c->ss);
		return rc;
	}
	tok_stream_init(&c->ts, b->o.tok, TOK_SKIP_SPECIAL);
	c->ready = true;
	return 0;
}

/* ---- the step ------------------------------------------------------------------ */

/* Detokenize, match stop strings and emit one sampled token of a sequence.
 * Ends the choice when generation says so; marks the request failed on errors. */
static void emit_token(struct batcher *b, struct bat_choice *c, const struct sample_result *sr)
{
	struct bat_req *r = c->req;
	struct seq *q = c->seq;
	const struct sample_result res = *sr;
	int rc;
	sched_append_token(b->sched, q, res.token);
	if (!r->t_first_token)
		r->t_first_token = clock_now_ns();
	buf_clear(&b->piece);
	buf_clear(&b->text);
	if (b->o.tok && tok_stream_push(&c->ts, res.token, &b->piece) != 0) {
		req_fail(r, ERR_INTERNAL, "detokenizing failed");
		return;
	}
	rc = generation_step(&c->gen, res.token, b->piece.data ? b->piece.data : "", b->piece.len,
	                     &b->text);
	if (rc) {
		req_fail(r, rc, "stop-string matching failed");
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
	emit(b, &e);
	if (c->gen.finish != FINISH_NONE) {
		/* choice_end aborts the generation only if still running: done here. */
		choice_end(b, c, c->gen.finish);
	}
}

/* Sample one sequence's token from its logits row on the host, then emit it. */
static void process_token(struct batcher *b, struct bat_choice *c, const float *row)
{
	struct bat_req *r = c->req;
	memcpy(b->row, row, (size_t)b->m.vocab * sizeof(float));
	struct sample_result res;
	int rc = sampler_sample(&r->p, &c->ss, &b->scratch, b->row, b->m.vocab, &res);
	if (rc) {
		req_fail(r, rc, "sampling failed: no token can be sampled from these logits");
		return;
	}
	emit_token(b, c, &res);
}

/* Fork the request's first sequence into its other choices. */
static int fork_choices(struct batcher *b, struct bat_choice *c0)
{
	struct bat_req *r = c0->req;
	int nk = c0->seq->n_fork_pending;
	struct seq **k = malloc((size_t)nk * sizeof(*k));
	if (!k)
		return ERR_NOMEM;
	int rc = sched_fork(b->sched, c0->seq, k);
	/* Every child gets its choice first, so that on a failure below the
	 * request's clean-up finds (and finishes) all of them. */
	for (int i = 0; rc == 0 && i < nk; i++) {
		struct bat_choice *c = &r->choices[i + 1];
		c->seq = k[i];
		c->seq->id = b->next_seq_id++;
		c->seq->index = i + 1;
		c->seq->owner = c;
	}
	for (int i = 0; rc == 0 && i < nk; i++)
		if (choice_ready(b, &r->choices[i + 1]) != 0)
			rc = ERR_NOMEM;
	free(k);
	return rc;
}

/* Fail every request whose sequence is in the (failed) step. */
static void fail_step(const struct sched_step *st, int rc)
{
	for (int i = 0; i < st->n_seqs; i++) {
		struct bat_choice *c = st->seqs[i]->owner;
		req_fail(c->req, rc, "the engine failed this step");
	}
}

static void sweep_failed(struct batcher *b)
{
	struct bat_req *r = b->active, *next;
	for (; r; r = next) {
		next = r->next;
		if (r->failed)
			req_end_all(b, r, FINISH_ERROR);
	}
}

static int ensure_logits(struct batcher *b, int n_logits)
{
	size_t need = (size_t)n_logits * (size_t)b->m.vocab;
	if (need <= b->logits_cap)
		return 0;
	float *l = realloc(b->logits, need * sizeof(float));
	if (!l)
		return ERR_NOMEM;
	b->logits = l;
	b->logits_cap = need;
	return 0;
}

/* *p grown to bytes (kept on failure). */
static int grow(void **p, size_t bytes)
{
	void *n = realloc(*p, bytes);
	if (!n)
		return ERR_NOMEM;
	*p = n;
	return 0;
}

static int ensure_sample_rows(struct batcher *b, int n)
{
	if (n <= b->s_cap)
		return 0;
	const size_t rows = (size_t)n, top = rows * K_SAMPLE_MAX_TOP;
	if (grow((void **)&b->srows, rows * sizeof(*b->srows)) ||
	    grow((void **)&b->s_token, rows * sizeof(int32_t)) ||
	    grow((void **)&b->s_rank, rows * sizeof(int32_t)) ||
	    grow((void **)&b->s_top_ids, top * sizeof(int32_t)) ||
	    grow((void **)&b->s_logprob, rows * sizeof(float)) ||
	    grow((void **)&b->s_top_lp, top * sizeof(float)) ||
	    grow((void **)&b->s_live, rows * sizeof(bool)))
		return ERR_NOMEM;
	b->s_cap = n;
	return 0;
}

/* Sampling on the device is used for a step when the model offers it and
 * every logits row belongs to exactly one ready choice (a row whose choices
 * are about to be forked is sampled once per choice: host path). */
static bool device_sampling(const struct batcher *b, const struct sched_step *st)
{
	if (!b->m.forward_sample || st->n_logits == 0)
		return false;
	for (int i = 0; i < st->n_logits; i++) {
		const struct seq *q = st->seqs[st->logits_seq[i]];
		const struct bat_choice *c = q->owner;
		if (q->n_fork_pending > 0 || (!c->req->failed && !c->ready))
			return false;
	}
	return true;
}

/* One k_sample_row per logits row, drawing each live sequence's u exactly
 * where sampler_sample would; rows of failed or finished choices are greedy
 * placeholders whose result is ignored. */
static int build_sample_rows(struct batcher *b, const struct sched_step *st,
                             struct k_sample_args *a)
{
	int rc = ensure_sample_rows(b, st->n_logits);
	if (rc)
		return rc;
	sampler_device_lists_reset(&b->slists);
	for (int i = 0; i < st->n_logits && !rc; i++) {
		struct bat_choice *c = st->seqs[st->logits_seq[i]]->owner;
		b->s_live[i] = !c->req->failed && c->seq && !c->finished;
		if (b->s_live[i]) {
			rc = sampler_device_row(&c->req->p, &c->ss, b->m.vocab, &b->srows[i], &b->slists);
			continue;
		}
		const int32_t np = b->slists.n_pen, nb = b->slists.n_bias, nn = b->slists.n_ban;
		b->srows[i] = (struct k_sample_row){.inv_temperature = 1.0f, .top_p = 1.0f,
		                                    .repetition_penalty = 1.0f, .n_logprobs = -1,
		                                    .greedy = 1, .pen_begin = np, .pen_end = np,
		                                    .bias_begin = nb, .bias_end = nb,
		                                    .ban_begin = nn, .ban_end = nn};
	}
	*a = (struct k_sample_args){.n_rows = st->n_logits,
	                            .vocab = b->m.vocab,
	                            .rows = b->srows,
	                            .pen = b->slists.n_pen ? b->slists.pen : NULL,
	                            .bias = b->slists.n_bias ? b->slists.bias : NULL,
	                            .ban = b->slists.n_ban ? b->slists.ban : NULL,
	                            .token = b->s_token,
	                            .logprob = b->s_logprob,
	                            .rank = b->s_rank,
	                            .top_ids = b->s_top_ids,
	                            .top_logprobs = b->s_top_lp};
	return rc;
}

/* The device's token for logits row i: record it in the sequence's sampler
 * state and emit it. */
static void take_device_token(struct batcher *b, struct bat_choice *c, int i)
{
	struct bat_req *r = c->req;
	struct sample_result res;
	int rc = sampler_device_finish(&r->p, &c->ss, b->s_token[i], b->s_logprob[i], b->s_rank[i],
	                               b->s_top_ids + (size_t)i * K_SAMPLE_MAX_TOP,
	                               b->s_top_lp + (size_t)i * K_SAMPLE_MAX_TOP, &res);
	if (rc) {
		req_fail(r, rc, "sampling failed: no token can be sampled from these logits");
		return;
	}
	emit_token(b, c, &res);
}

static void snapshot(struct batcher *b);

static void run_step(struct batcher *b)
{
	const struct sched_step *st;
	int rc = sched_schedule(b->sched, &st);
	/* exact waiting/running counts for submitters during the (long) step */
	pthread_mutex_lock(&b->mu);
	snapshot(b);
	pthread_mutex_unlock(&b->mu);
	if (rc == 0 && st->n_seqs == 0) {
		/* Waiting but nothing runnable: cannot happen with a validated
		 * queue; fail the head rather than spin. */
		if (sched_n_waiting(b->sched) > 0) {
			struct bat_choice *c = sched_waiting(b->sched, 0)->owner;
			req_fail(c->req, ERR_INTERNAL, "the scheduler could not make progress");
			sweep_failed(b);
		}
		return;
	}
	const bool dev = rc == 0 && device_sampling(b, st);
	struct k_sample_args sa;
	if (rc == 0)
		rc = dev ? build_sample_rows(b, st, &sa) : ensure_logits(b, st->n_logits);
	if (rc == 0 && st->n_copies > 0)
		rc = b->m.copy_blocks(b->m.ctx, st->copy_src, st->copy_dst, st->n_copies);
	if (rc == 0) {
		struct engine_batch eb;
		sched_step_batch(st, &eb);
		rc = dev ? b->m.forward_sample(b->m.ctx, &eb, &sa)
		         : b->m.forward(b->m.ctx, &eb, b->logits);
	}
	if (rc) {
		log_error("batch", "engine step failed (%s): failing %d sequences' requests",
		          err_str(rc), st->n_seqs);
		sched_cancel_step(b->sched);
		fail_step(st, rc);
		sweep_failed(b);
		return;
	}
	sched_commit(b->sched);
	for (int i = 0; i < st->n_logits; i++) {
		struct seq *q = st->seqs[st->logits_seq[i]];
		struct bat_choice *c0 = q->owner;
		if (c0->req->failed)
			continue;
		if (dev) { /* one choice per row (device_sampling) */
			if (b->s_live[i])
				take_device_token(b, c0, i);
			if (!c0->req->failed && c0->req->n_finished == c0->req->n) {
				active_unlink(b, c0->req);
				emit_end(b, c0->req);
			}
			continue;
		}
		const float *row = b->logits + (size_t)i * (size_t)b->m.vocab;
		int n_group = 1;
		if (q->n_fork_pending > 0) {
			n_group += q->n_fork_pending;
			if (fork_choices(b, c0) != 0) {
				req_fail(c0->req, ERR_NOMEM, "out of memory forking choices");
				continue;
			}
		}
		/* c0 first: its sequence (q) is the one this row belongs to. */
		struct bat_req *r = c0->req;
		for (int g = 0; g < n_group && !r->failed; g++) {
			struct bat_choice *c = g == 0 ? c0 : &r->choices[c0->index + g];
			if (c->seq && !c->finished)
				process_token(b, c, row);
		}
		if (!r->failed && r->n_finished == r->n) {
			active_unlink(b, r);
			emit_end(b, r);
		}
	}
	sweep_failed(b);
}

/* ---- inbox and cancellation ---------------------------------------------------- */

static void admit_new(struct batcher *b, struct bat_req *list)
{
	while (list) {
		struct bat_req *r = list;
		list = r->next;
		r->next = b->active;
		b->active = r;
		for (int i = 0; i < r->n; i++) {
			r->choices[i].req = r;
			r->choices[i].index = i;
		}
		struct bat_choice *c = &r->choices[0];
		struct seq *q = NULL;
		int rc = seq_create(b->pool, b->next_seq_id++, r->prompt, r->n_prompt,
		                    r->max_tokens, &q);
		if (rc == 0) {
			b->next_seq_id += (uint64_t)r->n; /* room for the forks' ids */
			q->n_fork_pending = r->n - 1;
			q->owner = c;
			q->t_arrival = r->t_arrival;
			rc = choice_ready(b, c);
			if (rc == 0)
				rc = sched_add(b->sched, q);
			if (rc)
				seq_destroy(q);
			else
				c->seq = q;
		}
		if (rc) {
			req_fail(r, rc, "out of memory admitting the request");
			req_end_all(b, r, FINISH_ERROR);
		}
	}
}

static void apply_cancels(struct batcher *b, const uint64_t *ids, int n)
{
	for (int i = 0; i < n; i++) {
		struct bat_req *r = b->active;
		while (r && r->id != ids[i])
			r = r->next;
		if (!r)
			continue;
		b->n_cancelled++;
		req_end_all(b, r, FINISH_ABORT);
	}
}

/* ---- the thread ------------------------------------------------------------------ */

static bool idle(const struct batcher *b)
{
	return sched_n_running(b->sched) == 0 && sched_n_waiting(b->sched) == 0;
}

/* Under mu: the stats snapshot other threads read. */
static void snapshot(struct batcher *b)
{
	struct sched_stats ss;
	sched_get_stats(b->sched, &ss);
	struct bat_stats *s = &b->snap;
	s->n_running = ss.n_running;
	s->n_waiting = ss.n_waiting;
	s->n_kv_blocks = b->o.n_kv_blocks;
	s->kv_usage = ss.kv_usage;
	s->prefix_queries = ss.prefix_queries;
	s->prefix_hits = ss.prefix_hits;
	s->preemptions = ss.preemptions;
	s->steps = ss.steps;
	s->tokens_computed = ss.tokens_computed;
	s->prompt_tokens_computed = ss.prompt_tokens_computed;
	s->requests_done = b->n_done;
	s->requests_cancelled = b->n_cancelled;
	s->requests_failed = b->n_failed;
}

static void *thread_main(void *arg)
{
	struct batcher *b = arg;
	uint64_t *spare = NULL; /* the cancel buffer not in use by submitters */
	int spare_cap = 0;
	for (;;) {
		pthread_mutex_lock(&b->mu);
		while (!b->stop && !b->inbox_head && b->n_cancels == 0 && idle(b))
			pthread_cond_wait(&b->cv, &b->mu);
		if (b->stop) {
			pthread_mutex_unlock(&b->mu);
			break;
		}
		struct bat_req *in = b->inbox_head;
		b->inbox_head = b->inbox_tail = NULL;
		/* they are about to join the scheduler's queue: keep counting them
		 * against max_queued_requests until the next snapshot */
		b->snap.n_waiting += b->n_inbox;
		b->n_inbox = 0;
		/* Swap cancel buffers so the lock is not held while cancelling. */
		uint64_t *ids = b->cancels;
		int n_ids = b->n_cancels, ids_cap = b->cap_cancels;
		b->cancels = spare;
		b->cap_cancels = spare_cap;
		b->n_cancels = 0;
		spare = ids;
		spare_cap = ids_cap;
		pthread_mutex_unlock(&b->mu);

		admit_new(b, in);
		apply_cancels(b, ids, n_ids);
		if (!idle(b))
			run_step(b);

		pthread_mutex_lock(&b->mu);
		bool woke = b->pending.n > 0;
		struct bat_event e;
		while (b->pending.n > 0) {
			evq_pop(&b->pending, &e);
			if (evq_push(&b->out, &e) != 0)
				bat_event_clear(&e);
		}
		snapshot(b);
		pthread_mutex_unlock(&b->mu);
		if (woke && b->o.wake)
			b->o.wake(b->o.wake_arg);
	}
	free(spare);
	return NULL;
}

/* ---- public API -------------------------------------------------------------------- */

int bat_create(const struct bat_opts *o, const struct bat_model *m, struct batcher **out,
               struct diag *d)
{
	if (!m || !m->forward || !m->copy_blocks || m->vocab < 1)
		return diag_set(d, ERR_INVAL, "batcher: incomplete model step");
	if (o->n_eos < 0 || o->n_eos > SAMPLER_MAX_EOS)
		return diag_set(d, ERR_RANGE, "batcher: %d EOS ids (at most %d)", o->n_eos,
		                SAMPLER_MAX_EOS);
	if (o->max_queued_requests < 1)
		return diag_set(d, ERR_RANGE, "batcher: max_queued_requests must be >= 1");
	struct batcher *b = calloc(1, sizeof(*b));
	if (!b)
		return diag_set(d, ERR_NOMEM, "batcher: out of memory");
	b->o = *o;
	b->m = *m;
	if (o->n_eos)
		memcpy(b->eos, o->eos_ids, (size_t)o->n_eos * sizeof(int32_t));
	b->o.eos_ids = b->eos;
	buf_init(&b->piece);
	buf_init(&b->text);
	sampler_device_lists_init(&b->slists);
	pthread_mutex_init(&b->mu, NULL);
	pthread_cond_init(&b->cv, NULL);
	struct kv_opts ko = {.n_blocks = o->n_kv_blocks,
	                     .block_size = o->block_size,
	                     .prefix_caching = o->prefix_caching};
	struct sched_opts so = {.max_num_seqs = o->max_num_seqs,
	                        .max_num_batched_tokens = o->max_num_batched_tokens,
	                        .max_model_len = o->max_model_len};
	int rc = kv_pool_create(&ko, &b->pool, d);
	if (!rc)
		rc = sched_create(b->pool, &so, &b->sched, d);
	if (!rc && sampler_scratch_init(&b->scratch, m->vocab) != 0)
		rc = diag_set(d, ERR_NOMEM, "batcher: out of memory for the sampler");
	if (!rc && !(b->row = malloc((size_t)m->vocab * sizeof(float))))
		rc = diag_set(d, ERR_NOMEM, "batcher: out of memory");
	if (!rc && pthread_create(&b->thread, NULL, thread_main, b) != 0)
		rc = diag_set(d, ERR_INTERNAL, "batcher: cannot start the engine thread");
	if (rc) {
		bat_destroy(b);
		return rc;
	}
	b->started = true;
	snapshot(b);
	*out = b;
	return 0;
}

void bat_destroy(struct batcher *b)
{
	if (!b)
		return;
	if (b->started) {
		pthread_mutex_lock(&b->mu);
		b->stop = true;
		pthread_cond_signal(&b->cv);
		pthread_mutex_unlock(&b->mu);
		pthread_join(b->thread, NULL);
	}
	/* Sequences belong to the scheduler: sched_destroy frees them. */
	for (struct bat_req *r = b->active, *n; r; r = n) {
		n = r->next;
		req_free(r);
	}
	for (struct bat_req *r = b->inbox_head, *n; r; r = n) {
		n = r->next;
		req_free(r);
	}
	sched_destroy(b->sched);
	kv_pool_destroy(b->pool);
	sampler_scratch_deinit(&b->scratch); /* safe on a zeroed scratch */
	evq_free(&b->pending);
	evq_free(&b->out);
	free(b->cancels);
	free(b->logits);
	free(b->row);
	sampler_device_lists_deinit(&b->slists);
	free(b->srows);
	free(b->s_token);
	free(b->s_rank);
	free(b->s_top_ids);
	free(b->s_logprob);
	free(b->s_top_lp);
	free(b->s_live);
	buf_deinit(&b->piece);
	buf_deinit(&b->text);
	pthread_mutex_destroy(&b->mu);
	pthread_cond_destroy(&b->cv);
	free(b);
}

int bat_submit(struct batcher *b, const struct bat_request *in, struct diag *d)
{
	if (!in->prompt || in->n_prompt < 1)
		return diag_set(d, ERR_INVAL, "the prompt is empty");
	for (int i = 0; i < in->n_prompt; i++)
		if (in->prompt[i] < 0 || in->prompt[i] >= b->m.vocab)
			return diag_set(d, ERR_RANGE,
			                "prompt token %d at position %d is outside the "
			                "vocabulary (0..%d)",
			                in->prompt[i], i, b->m.vocab - 1);
	int rc = sampling_params_validate(&in->params, b->m.vocab, d);
	if (rc)
		return rc;
	int max_tokens = in->params.max_tokens;
	if (max_tokens < 0) {
		max_tokens = b->o.max_model_len - in->n_prompt;
		if (max_tokens < 1)
			return diag_set(
			    d, ERR_TOO_LARGE,
			    "this model's maximum context length is %d tokens; the prompt "
			    "has %d, leaving no room to generate",
			    b->o.max_model_len, in->n_prompt);
	}
	rc = sched_validate(b->sched, in->n_prompt, max_tokens, in->n, d);
	if (rc)
		return rc;
	struct bat_req *r;
	rc = req_copy(in, max_tokens, &r);
	if (rc)
		return diag_set(d, rc, "out of memory copying the request");
	pthread_mutex_lock(&b->mu);
	if (b->stop) {
		pthread_mutex_unlock(&b->mu);
		req_free(r);
		return diag_set(d, ERR_STATE, "the server is shutting down");
	}
	if (b->n_inbox + b->snap.n_waiting >= b->o.max_queued_requests) {
		int queued = b->n_inbox + b->snap.n_waiting;
		pthread_mutex_unlock(&b->mu);
		req_free(r);
		return diag_set(d, ERR_FULL,
		                "%d requests are already waiting (max-queued-requests "
		                "%d); try again later",
		                queued, b->o.max_queued_requests);
	}
	if (b->inbox_tail)
		b->inbox_tail->next = r;
	else
		b->inbox_head = r;
	b->inbox_tail = r;
	b->n_inbox++;
	pthread_cond_signal(&b->cv);
	pthread_mutex_unlock(&b->mu);
	return 0;
}

void bat_cancel(struct batcher *b, uint64_t request_id)
{
	pthread_mutex_lock(&b->mu);
	if (b->n_cancels == b->cap_cancels) {
		int cap = b->cap_cancels ? b->cap_cancels * 2 : 16;
		uint64_t *v = realloc(b->cancels, (size_t)cap * sizeof(*v));
		if (!v) {
			pthread_mutex_unlock(&b->mu);
			return; /* out of memory: the request runs to its end instead */
		}
		b->cancels = v;
		b->cap_cancels = cap;
	}
	b->cancels[b->n_cancels++] = request_id;
	pthread_cond_signal(&b->cv);
	pthread_mutex_unlock(&b->mu);
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

void bat_stats(struct batcher *b, struct bat_stats *st)
{
	pthread_mutex_lock(&b->mu);
	*st = b->snap;
	st->n_waiting += b->n_inbox;
	pthread_mutex_unlock(&b->mu);
}
