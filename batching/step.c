/* batching/step.c — one engine step in nano-vllm's three calls: schedule
 * (the scheduler picks decodes and prefill chunks), run (block copies, then
 * the model's forward, or forward_sample when every logits row has one
 * ready choice and the model samples on its device), postprocess (each
 * logits row's token is sampled on the host or taken from the device,
 * appended to its sequence and handed to output.c; n > 1 requests fork here).
 *
 * Owns: struct bat__step_bufs (logits, sampler scratch, device rows).
 * Tests: tests/batching/test_engine_thread.c (fake model: host sampling,
 * n > 1 forks, engine failure), test_batcher_engine.c (real CPU engine, and
 * the device-sampling path through bat_model_sample_in_engine, no GPU needed).
 */
#include <stdlib.h>
#include <string.h>

#include "batching/batcher_internal.h"
#include "common/clock.h"
#include "common/log.h"

/* ---- buffers ------------------------------------------------------------------- */

static int ensure_logits(struct bat__step_bufs *sb, int n_logits, int vocab)
{
	size_t need = (size_t)n_logits * (size_t)vocab;
	if (need <= sb->logits_cap)
		return 0;
	float *l = realloc(sb->logits, need * sizeof(float));
	if (!l)
		return ERR_NOMEM;
	sb->logits = l;
	sb->logits_cap = need;
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

static int ensure_sample_rows(struct bat__step_bufs *sb, int n)
{
	if (n <= sb->s_cap)
		return 0;
	const size_t rows = (size_t)n, top = rows * K_SAMPLE_MAX_TOP;
	if (grow((void **)&sb->srows, rows * sizeof(*sb->srows)) ||
	    grow((void **)&sb->s_token, rows * sizeof(int32_t)) ||
	    grow((void **)&sb->s_rank, rows * sizeof(int32_t)) ||
	    grow((void **)&sb->s_top_ids, top * sizeof(int32_t)) ||
	    grow((void **)&sb->s_logprob, rows * sizeof(float)) ||
	    grow((void **)&sb->s_top_lp, top * sizeof(float)) ||
	    grow((void **)&sb->s_live, rows * sizeof(bool)))
		return ERR_NOMEM;
	sb->s_cap = n;
	return 0;
}

void bat__step_bufs_deinit(struct bat__step_bufs *sb)
{
	sampler_scratch_deinit(&sb->scratch); /* safe on a zeroed scratch */
	free(sb->logits);
	free(sb->row);
	sampler_device_lists_deinit(&sb->slists);
	free(sb->srows);
	free(sb->s_token);
	free(sb->s_rank);
	free(sb->s_top_ids);
	free(sb->s_logprob);
	free(sb->s_top_lp);
	free(sb->s_live);
}

/* ---- run ------------------------------------------------------------------------- */

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
	struct bat__step_bufs *sb = &b->sb;
	int rc = ensure_sample_rows(sb, st->n_logits);
	if (rc)
		return rc;
	sampler_device_lists_reset(&sb->slists);
	for (int i = 0; i < st->n_logits && !rc; i++) {
		struct bat_choice *c = st->seqs[st->logits_seq[i]]->owner;
		sb->s_live[i] = !c->req->failed && c->seq && !c->finished;
		if (sb->s_live[i]) {
			rc = sampler_device_row(&c->req->p, &c->ss, b->m.vocab, &sb->srows[i],
			                        &sb->slists);
			continue;
		}
		const int32_t np = sb->slists.n_pen, nb = sb->slists.n_bias, nn = sb->slists.n_ban;
		sb->srows[i] = (struct k_sample_row){.inv_temperature = 1.0f, .top_p = 1.0f,
		                                     .repetition_penalty = 1.0f, .n_logprobs = -1,
		                                     .greedy = 1, .pen_begin = np, .pen_end = np,
		                                     .bias_begin = nb, .bias_end = nb,
		                                     .ban_begin = nn, .ban_end = nn};
	}
	*a = (struct k_sample_args){.n_rows = st->n_logits,
	                            .vocab = b->m.vocab,
	                            .rows = sb->srows,
	                            .pen = sb->slists.n_pen ? sb->slists.pen : NULL,
	                            .bias = sb->slists.n_bias ? sb->slists.bias : NULL,
	                            .ban = sb->slists.n_ban ? sb->slists.ban : NULL,
	                            .token = sb->s_token,
	                            .logprob = sb->s_logprob,
	                            .rank = sb->s_rank,
	                            .top_ids = sb->s_top_ids,
	                            .top_logprobs = sb->s_top_lp};
	return rc;
}

/* Copy blocks and run the model over the scheduled batch; *dev says whether
 * it sampled on the device (tokens in sb.s_*) or left logits (sb.logits). */
static int step_run(struct batcher *b, const struct sched_step *st, bool *dev)
{
	*dev = device_sampling(b, st);
	struct k_sample_args sa;
	int rc =
	    *dev ? build_sample_rows(b, st, &sa) : ensure_logits(&b->sb, st->n_logits, b->m.vocab);
	if (rc == 0 && st->n_copies > 0)
		rc = b->m.copy_blocks(b->m.ctx, st->copy_src, st->copy_dst, st->n_copies);
	if (rc == 0) {
		struct engine_batch eb;
		sched_step_batch(st, &eb);
		rc = *dev ? b->m.forward_sample(b->m.ctx, &eb, &sa)
		          : b->m.forward(b->m.ctx, &eb, b->sb.logits);
	}
	return rc;
}

/* Fail every request whose sequence is in the (failed) step. */
static void fail_step(const struct sched_step *st, int rc)
{
	for (int i = 0; i < st->n_seqs; i++) {
		struct bat_choice *c = st->seqs[i]->owner;
		bat__req_fail(c->req, rc, "the engine failed this step");
	}
}

/* ---- postprocess ------------------------------------------------------------------ */

/* A sampled token joins its sequence, then becomes the choice's event. */
static void take_token(struct batcher *b, struct bat_choice *c, const struct sample_result *res)
{
	sched_append_token(b->sched, c->seq, res->token);
	if (!c->req->t_first_token)
		c->req->t_first_token = clock_now_ns();
	bat__emit_token(b, c, res);
}

/* Sample one sequence's token from its logits row on the host, then emit it. */
static void process_token(struct batcher *b, struct bat_choice *c, const float *row)
{
	struct bat_req *r = c->req;
	memcpy(b->sb.row, row, (size_t)b->m.vocab * sizeof(float));
	struct sample_result res;
	int rc = sampler_sample(&r->p, &c->ss, &b->sb.scratch, b->sb.row, b->m.vocab, &res);
	if (rc) {
		bat__req_fail(r, rc, "sampling failed: no token can be sampled from these logits");
		return;
	}
	take_token(b, c, &res);
}

/* The device's token for logits row i: record it in the sequence's sampler
 * state and emit it. */
static void take_device_token(struct batcher *b, struct bat_choice *c, int i)
{
	struct bat_req *r = c->req;
	const struct bat__step_bufs *sb = &b->sb;
	struct sample_result res;
	int rc = sampler_device_finish(&r->p, &c->ss, sb->s_token[i], sb->s_logprob[i],
	                               sb->s_rank[i], sb->s_top_ids + (size_t)i * K_SAMPLE_MAX_TOP,
	                               sb->s_top_lp + (size_t)i * K_SAMPLE_MAX_TOP, &res);
	if (rc) {
		bat__req_fail(r, rc, "sampling failed: no token can be sampled from these logits");
		return;
	}
	take_token(b, c, &res);
}

/* Logits row i of sequence q on the host: fork q's pending choices first
 * (they all sample from this row), then one token per choice. */
static void host_row(struct batcher *b, struct seq *q, int i)
{
	struct bat_choice *c0 = q->owner;
	const float *row = b->sb.logits + (size_t)i * (size_t)b->m.vocab;
	int n_group = 1;
	if (q->n_fork_pending > 0) {
		n_group += q->n_fork_pending;
		if (bat__fork_choices(b, c0) != 0) {
			bat__req_fail(c0->req, ERR_NOMEM, "out of memory forking choices");
			return;
		}
	}
	/* c0 first: its sequence (q) is the one this row belongs to. */
	struct bat_req *r = c0->req;
	for (int g = 0; g < n_group && !r->failed; g++) {
		struct bat_choice *c = g == 0 ? c0 : &r->choices[c0->index + g];
		if (c->seq && !c->finished)
			process_token(b, c, row);
	}
	if (!r->failed && r->n_finished == r->n)
		bat__req_done(b, r);
}

static void step_postprocess(struct batcher *b, const struct sched_step *st, bool dev)
{
	for (int i = 0; i < st->n_logits; i++) {
		struct seq *q = st->seqs[st->logits_seq[i]];
		struct bat_choice *c0 = q->owner;
		if (c0->req->failed)
			continue;
		if (!dev) {
			host_row(b, q, i);
			continue;
		}
		/* one choice per row (device_sampling) */
		if (b->sb.s_live[i])
			take_device_token(b, c0, i);
		if (!c0->req->failed && c0->req->n_finished == c0->req->n)
			bat__req_done(b, c0->req);
	}
}

/* ---- the step ------------------------------------------------------------------ */

void bat__step(struct batcher *b)
{
	const struct sched_step *st;
	int rc = sched_schedule(b->sched, &st);
	/* exact waiting/running counts for submitters during the (long) step */
	bat__share_stats(b);
	if (rc == 0 && st->n_seqs == 0) {
		/* Waiting but nothing runnable: cannot happen with a validated
		 * queue; fail the head rather than spin. */
		if (sched_n_waiting(b->sched) > 0) {
			struct bat_choice *c = sched_waiting(b->sched, 0)->owner;
			bat__req_fail(c->req, ERR_INTERNAL,
			              "the scheduler could not make progress");
			bat__sweep_failed(b);
		}
		return;
	}
	bool dev = false;
	if (rc == 0)
		rc = step_run(b, st, &dev);
	if (rc) {
		log_error("batch", "engine step failed (%s): failing %d sequences' requests",
		          err_str(rc), st->n_seqs);
		sched_cancel_step(b->sched);
		fail_step(st, rc);
		bat__sweep_failed(b);
		return;
	}
	sched_commit(b->sched);
	step_postprocess(b, st, dev);
	bat__sweep_failed(b);
}
