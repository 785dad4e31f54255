/* batching/request.c — the lifecycle of an accepted request and its n
 * choices: deep copy at submit, admission (first sequence into the
 * scheduler, sampler / generation / detokenizer state per choice), forking
 * the other choices once the prompt is computed, failure, cancellation, and
 * the end of each choice and of the request (its sequences leave the
 * scheduler; output.c emits FINISH and the terminal event).
 *
 * Owns: struct bat_req and struct bat_choice (batcher_internal.h), the
 * active list. Tests: tests/batching/test_engine_thread.c (n > 1, cancel,
 * engine failure, destroy while busy).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batching/batcher_internal.h"
#include "common/checked.h"
#include "common/clock.h"

/* ---- copy and free ------------------------------------------------------------- */

void bat__req_free(struct bat_req *r)
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
int bat__req_copy(const struct bat_request *in, struct bat_req **out)
{
	int rc = 0;
	struct bat_req *r = calloc(1, sizeof(*r));
	if (!r)
		return ERR_NOMEM;
	r->id = in->id;
	r->user = in->user;
	r->n = in->n;
	r->n_prompt = in->n_prompt;
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
		bat__req_free(r);
		return rc;
	}
	*out = r;
	return 0;
}

/* ---- choices ------------------------------------------------------------------- */

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

int bat__fork_choices(struct batcher *b, struct bat_choice *c0)
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

void bat__choice_end(struct batcher *b, struct bat_choice *c, enum finish_reason why)
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
	bat__emit_finish(b, r, c->index, why, gen);
}

/* ---- requests ------------------------------------------------------------------ */

static void active_unlink(struct batcher *b, struct bat_req *r)
{
	struct bat_req **pp = &b->active;
	while (*pp && *pp != r)
		pp = &(*pp)->next;
	if (*pp)
		*pp = r->next;
}

void bat__req_done(struct batcher *b, struct bat_req *r)
{
	active_unlink(b, r);
	bat__emit_end(b, r);
}

/* End every choice still open with `why`, then the request. */
static void req_end_all(struct batcher *b, struct bat_req *r, enum finish_reason why)
{
	for (int i = 0; i < r->n; i++)
		bat__choice_end(b, &r->choices[i], why);
	bat__req_done(b, r);
}

void bat__req_fail(struct bat_req *r, int err, const char *msg)
{
	if (r->failed)
		return;
	r->failed = true;
	r->fail_err = err;
	snprintf(r->fail_msg, sizeof(r->fail_msg), "%s", msg);
}

void bat__sweep_failed(struct batcher *b)
{
	struct bat_req *r = b->active, *next;
	for (; r; r = next) {
		next = r->next;
		if (r->failed)
			req_end_all(b, r, FINISH_ERROR);
	}
}

/* ---- admission and cancellation ------------------------------------------------ */

void bat__admit_new(struct batcher *b, struct bat_req *list)
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
		                    r->p.max_tokens, &q);
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
			bat__req_fail(r, rc, "out of memory admitting the request");
			req_end_all(b, r, FINISH_ERROR);
		}
	}
}

void bat__apply_cancels(struct batcher *b, const uint64_t *ids, int n)
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
