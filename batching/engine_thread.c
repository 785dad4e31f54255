/* batching/engine_thread.c — the batcher (engine_thread.h): a pthread that
 * loops take-inbox -> cancel -> step (step.c: schedule -> run -> postprocess)
 * -> publish, with one mutex guarding the inbox, the cancel list, the outbox
 * and a stats snapshot. Events of one step are built without the lock and
 * published together (output.c), then the loop is woken.
 *
 * Owns: the thread, the inbox and cancel list, the stats snapshot, the
 * public calls of engine_thread.h but bat_poll_events / bat_event_clear
 * (output.c); request lifecycles are request.c's.
 * Tests: tests/batching/test_engine_thread.c (fake model: threads,
 * cancellation, n > 1, queue limits; real CPU engine on a generated tiny
 * model: batched greedy output equals each request run alone).
 */
#include "batching/engine_thread.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "batching/batcher_internal.h"

/* ---- the model step over engine/engine.h ------------------------------------- */

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

void bat__share_stats(struct batcher *b)
{
	pthread_mutex_lock(&b->mu);
	snapshot(b);
	pthread_mutex_unlock(&b->mu);
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

		bat__admit_new(b, in);
		bat__apply_cancels(b, ids, n_ids);
		if (!idle(b))
			bat__step(b);

		pthread_mutex_lock(&b->mu);
		bool woke = bat__publish(b);
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
	sampler_device_lists_init(&b->sb.slists);
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
	if (!rc && sampler_scratch_init(&b->sb.scratch, m->vocab) != 0)
		rc = diag_set(d, ERR_NOMEM, "batcher: out of memory for the sampler");
	if (!rc && !(b->sb.row = malloc((size_t)m->vocab * sizeof(float))))
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
		bat__req_free(r);
	}
	for (struct bat_req *r = b->inbox_head, *n; r; r = n) {
		n = r->next;
		bat__req_free(r);
	}
	sched_destroy(b->sched);
	kv_pool_destroy(b->pool);
	bat__step_bufs_deinit(&b->sb);
	bat__evq_free(&b->pending);
	bat__evq_free(&b->out);
	free(b->cancels);
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
	/* The caller decided max_tokens (api_resolve_max_tokens): checked
	 * here as a wall, never derived again. */
	if (in->params.max_tokens < 0)
		return diag_set(d, ERR_INVAL,
		                "max_tokens must be resolved before submitting (got %d)",
		                in->params.max_tokens);
	int rc = sampling_params_validate(&in->params, b->m.vocab, d);
	if (rc)
		return rc;
	rc = sched_validate(b->sched, in->n_prompt, in->params.max_tokens, in->n, d);
	if (rc)
		return rc;
	struct bat_req *r;
	rc = bat__req_copy(in, &r);
	if (rc)
		return diag_set(d, rc, "out of memory copying the request");
	pthread_mutex_lock(&b->mu);
	if (b->stop) {
		pthread_mutex_unlock(&b->mu);
		bat__req_free(r);
		return diag_set(d, ERR_STATE, "the server is shutting down");
	}
	if (b->n_inbox + b->snap.n_waiting >= b->o.max_queued_requests) {
		int queued = b->n_inbox + b->snap.n_waiting;
		pthread_mutex_unlock(&b->mu);
		bat__req_free(r);
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

void bat_stats(struct batcher *b, struct bat_stats *st)
{
	pthread_mutex_lock(&b->mu);
	*st = b->snap;
	st->n_waiting += b->n_inbox;
	pthread_mutex_unlock(&b->mu);
}
