/* batching/scheduler.c — the iteration-level scheduler; the policy is written
 * out in scheduler.h. One step = pick (sequence, n_tokens) entries in three
 * passes (decodes, prefill chunks, admissions), preempting the newest running
 * sequence when blocks run short, then lay the entries out as the flat
 * engine batch. Tests: tests/batching/test_sched_sim.c (randomized, fake
 * engine), tests/batching/test_sched.c; benchmark tests/batching/bench_sched.c.
 */
#include "batching/scheduler.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "common/clock.h"

struct entry {
	struct seq *seq;
	int n_new;
	bool live; /* false once its sequence was preempted later in the step */
	bool has_cow;
	struct kv_copy cow;
};

struct sched {
	struct kv_pool *pool;
	struct sched_opts o;
	int block_size;
	int n_blocks; /* pool size, fixed: sched_validate reads no mutable state */
	int max_blocks_per_seq;
	/* Running, sorted by admit_seq (oldest first). */
	struct seq **running;
	int n_running;
	int n_fork_reserved; /* forks that running sequences will make: seats kept for them */
	/* Waiting: a ring buffer, front = next to admit. */
	struct seq **waiting;
	int w_head, n_waiting, w_cap;
	uint64_t next_admit;
	/* The step being built / last built. */
	struct entry *entries;
	int n_entries;
	int budget;
	bool in_step;
	struct sched_step step;
	uint64_t preemptions, steps, tokens_computed, prompt_tokens_computed;
};

/* ---- queues ----------------------------------------------------------------- */

/* Make room in the waiting ring for `extra` more sequences. */
static int waiting_reserve(struct sched *s, int extra)
{
	if (s->w_cap - s->n_waiting >= extra)
		return 0;
	int cap = s->w_cap ? s->w_cap : 64;
	while (cap - s->n_waiting < extra) {
		if (cap > INT32_MAX / 2)
			return ERR_OVERFLOW;
		cap *= 2;
	}
	struct seq **w = malloc((size_t)cap * sizeof(*w));
	if (!w)
		return ERR_NOMEM;
	for (int i = 0; i < s->n_waiting; i++)
		w[i] = s->waiting[(s->w_head + i) % s->w_cap];
	free(s->waiting);
	s->waiting = w;
	s->w_cap = cap;
	s->w_head = 0;
	return 0;
}

struct seq *sched_waiting(const struct sched *s, int i)
{
	assert(i >= 0 && i < s->n_waiting);
	return s->waiting[(s->w_head + i) % s->w_cap];
}

static void waiting_pop_front(struct sched *s)
{
	s->w_head = (s->w_head + 1) % s->w_cap;
	s->n_waiting--;
}

/* The ring has room for every preempted sequence: sched_schedule reserves
 * n_running free entries before it starts. */
static void waiting_push_front(struct sched *s, struct seq *q)
{
	assert(s->n_waiting < s->w_cap);
	s->w_head = (s->w_head + s->w_cap - 1) % s->w_cap;
	s->waiting[s->w_head] = q;
	s->n_waiting++;
}

static void waiting_remove(struct sched *s, struct seq *q)
{
	int i = 0;
	while (i < s->n_waiting && sched_waiting(s, i) != q)
		i++;
	assert(i < s->n_waiting);
	for (; i + 1 < s->n_waiting; i++)
		s->waiting[(s->w_head + i) % s->w_cap] = s->waiting[(s->w_head + i + 1) % s->w_cap];
	s->n_waiting--;
}

static void running_remove(struct sched *s, struct seq *q)
{
	int i = s->n_running - 1;
	while (i >= 0 && s->running[i] != q)
		i--;
	assert(i >= 0);
	memmove(&s->running[i], &s->running[i + 1],
	        (size_t)(s->n_running - i - 1) * sizeof(*s->running));
	s->n_running--;
}

/* ---- create / destroy ---------------------------------------------------------- */

int sched_create(struct kv_pool *pool, const struct sched_opts *o, struct sched **out,
                 struct diag *d)
{
	if (o->max_num_seqs < 1 || o->max_num_batched_tokens < 1 || o->max_model_len < 1)
		return diag_set(d, ERR_RANGE,
		                "scheduler: max_num_seqs %d, max_num_batched_tokens %d, "
		                "max_model_len %d must be >= 1",
		                o->max_num_seqs, o->max_num_batched_tokens, o->max_model_len);
	struct sched *s = calloc(1, sizeof(*s));
	if (!s)
		return diag_set(d, ERR_NOMEM, "scheduler: out of memory");
	s->pool = pool;
	s->o = *o;
	s->block_size = kv_block_size(pool);
	struct kv_stats ks;
	kv_get_stats(pool, &ks);
	s->n_blocks = ks.n_blocks;
	s->max_blocks_per_seq = (o->max_model_len + s->block_size - 1) / s->block_size;
	int ns = o->max_num_seqs, nt = o->max_num_batched_tokens;
	size_t bt;
	if (ck_mul((size_t)ns, (size_t)s->max_blocks_per_seq, &bt)) {
		free(s);
		return diag_set(d, ERR_OVERFLOW, "scheduler: block table size overflows");
	}
	struct sched_step *st = &s->step;
	s->running = calloc((size_t)ns, sizeof(*s->running));
	s->entries = calloc((size_t)ns, sizeof(*s->entries));
	st->seqs = calloc((size_t)ns, sizeof(*st->seqs));
	st->n_new = calloc((size_t)ns, sizeof(int32_t));
	st->logits_seq = calloc((size_t)ns, sizeof(int32_t));
	st->tokens = calloc((size_t)nt, sizeof(int32_t));
	st->positions = calloc((size_t)nt, sizeof(int32_t));
	st->slot_mapping = calloc((size_t)nt, sizeof(int32_t));
	st->seq_start = calloc((size_t)ns + 1, sizeof(int32_t));
	st->context_len = calloc((size_t)ns, sizeof(int32_t));
	st->block_tables = calloc(bt, sizeof(int32_t));
	st->logits_rows = calloc((size_t)ns, sizeof(int32_t));
	st->copy_src = calloc((size_t)ns, sizeof(int32_t));
	st->copy_dst = calloc((size_t)ns, sizeof(int32_t));
	st->max_blocks_per_seq = s->max_blocks_per_seq;
	if (!s->running || !s->entries || !st->seqs || !st->n_new || !st->logits_seq ||
	    !st->tokens || !st->positions || !st->slot_mapping || !st->seq_start ||
	    !st->context_len || !st->block_tables || !st->logits_rows || !st->copy_src ||
	    !st->copy_dst || waiting_reserve(s, 64)) {
		sched_destroy(s);
		return diag_set(d, ERR_NOMEM, "scheduler: out of memory");
	}
	*out = s;
	return 0;
}

void sched_destroy(struct sched *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->n_running; i++) {
		kv_release(s->pool, &s->running[i]->kv);
		seq_destroy(s->running[i]);
	}
	for (int i = 0; i < s->n_waiting; i++)
		seq_destroy(sched_waiting(s, i));
	struct sched_step *st = &s->step;
	free(st->seqs);
	free(st->n_new);
	free(st->logits_seq);
	free(st->tokens);
	free(st->positions);
	free(st->slot_mapping);
	free(st->seq_start);
	free(st->context_len);
	free(st->block_tables);
	free(st->logits_rows);
	free(st->copy_src);
	free(st->copy_dst);
	free(s->running);
	free(s->entries);
	free(s->waiting);
	free(s);
}

int sched_validate(const struct sched *s, int n_prompt, int max_tokens, int n, struct diag *d)
{
	if (n_prompt < 1)
		return diag_set(d, ERR_INVAL, "the prompt is empty");
	if (max_tokens < 1)
		return diag_set(d, ERR_RANGE, "max_tokens must be at least 1, got %d", max_tokens);
	int64_t total = (int64_t)n_prompt + max_tokens;
	if (total > s->o.max_model_len)
		return diag_set(d, ERR_TOO_LARGE,
		                "this model's maximum context length is %d tokens; the request has "
		                "%d prompt tokens + %d max_tokens = %lld",
		                s->o.max_model_len, n_prompt, max_tokens, (long long)total);
	int64_t blocks = (total + s->block_size - 1) / s->block_size;
	if (blocks > s->n_blocks)
		return diag_set(d, ERR_TOO_LARGE,
		                "the request needs %lld KV blocks of %d tokens; the pool has %d",
		                (long long)blocks, s->block_size, s->n_blocks);
	if (n < 1 || n > s->o.max_num_seqs)
		return diag_set(d, ERR_RANGE, "n must be between 1 and %d (max-num-seqs), got %d",
		                s->o.max_num_seqs, n);
	return 0;
}

int sched_add(struct sched *s, struct seq *q)
{
	int rc = waiting_reserve(s, 1);
	if (rc)
		return rc;
	q->status = SEQ_WAITING;
	q->step_slot = -1;
	if (!q->t_arrival)
		q->t_arrival = clock_now_ns();
	s->waiting[(s->w_head + s->n_waiting) % s->w_cap] = q;
	s->n_waiting++;
	return 0;
}

/* ---- building a step ----------------------------------------------------------- */

static void add_entry(struct sched *s, struct seq *q, int n_new, const struct kv_copy *cow,
                      int n_cow)
{
	struct entry *e = &s->entries[s->n_entries];
	assert(s->n_entries < s->o.max_num_seqs);
	e->seq = q;
	e->n_new = n_new;
	e->live = true;
	e->has_cow = n_cow > 0;
	if (n_cow)
		e->cow = *cow;
	q->step_slot = s->n_entries++;
	s->budget -= n_new;
}

/* Preempt the newest running sequence (the last of `running`). */
static void preempt_newest(struct sched *s)
{
	struct seq *v = s->running[--s->n_running];
	if (v->step_slot >= 0) {
		struct entry *e = &s->entries[v->step_slot];
		e->live = false;
		s->budget += e->n_new;
		v->step_slot = -1;
	}
	kv_release(s->pool, &v->kv);
	s->n_fork_reserved -= v->n_fork_pending;
	v->n_computed = 0;
	v->status = SEQ_WAITING;
	v->n_preemptions++;
	s->preemptions++;
	s->step.n_preempted++;
	waiting_push_front(s, v);
}

/* Make room for q to write n_new tokens, preempting newer sequences. Returns
 * false when q itself had to be preempted. */
static bool reserve(struct sched *s, struct seq *q, int n_new, struct kv_copy *cow, int *n_cow)
{
	while (!kv_can_append(s->pool, &q->kv, q->n_computed, n_new)) {
		bool self = s->running[s->n_running - 1] == q;
		preempt_newest(s);
		if (self)
			return false;
	}
	int rc = kv_append(s->pool, &q->kv, q->n_computed, n_new, cow, n_cow);
	assert(rc == 0);
	(void)rc;
	return true;
}

/* Passes 1 and 2 over the running sequences, oldest first. */
static void schedule_running(struct sched *s, bool decodes)
{
	for (int i = 0; i < s->n_running && s->budget > 0; i++) {
		struct seq *q = s->running[i];
		int left = q->n_tokens - q->n_computed;
		if (q->step_slot >= 0 || (decodes ? left != 1 : left <= 1))
			continue;
		int n_new = left < s->budget ? left : s->budget;
		struct kv_copy cow;
		int n_cow;
		if (!reserve(s, q, n_new, &cow, &n_cow))
			break; /* q was the newest; nothing after it */
		add_entry(s, q, n_new, &cow, n_cow);
	}
}

/* Is block `blk` of w's prompt being computed by a running sequence now? */
static bool prefix_in_flight(const struct sched *s, const struct seq *w, int blk)
{
	uint64_t h = w->kv.hashes[blk];
	for (int i = 0; i < s->n_running; i++) {
		const struct seq *r = s->running[i];
		if (r->kv.n_hashes > blk && r->n_computed < (blk + 1) * s->block_size &&
		    r->kv.hashes[blk] == h)
			return true;
	}
	return false;
}

/* Pass 3: admit waiting sequences first-come-first-served. */
static void admit_waiting(struct sched *s)
{
	struct kv_stats ks;
	while (s->n_waiting > 0 && s->budget > 0) {
		struct seq *w = sched_waiting(s, 0);
		if (s->n_running + s->n_fork_reserved + 1 + w->n_fork_pending > s->o.max_num_seqs)
			break;
		int held;
		int hit = kv_match_prefix(s->pool, &w->kv, w->tokens, w->n_tokens, &held);
		int max_hit = (w->n_tokens - 1) / s->block_size;
		if (kv_prefix_caching(s->pool) && hit < max_hit && hit < w->kv.n_hashes &&
		    prefix_in_flight(s, w, hit))
			break; /* wait for the shared blocks rather than compute them twice */
		int cached = hit * s->block_size;
		int left = w->n_tokens - cached;
		int n_new = left < s->budget ? left : s->budget;
		int need =
		    (hit - held) + (cached + n_new + s->block_size - 1) / s->block_size - hit;
		kv_get_stats(s->pool, &ks);
		if (need > ks.n_free)
			break;
		waiting_pop_front(s);
		w->n_computed = kv_acquire_prefix(s->pool, &w->kv, w->tokens, w->n_tokens);
		assert(w->n_computed == cached);
		struct kv_copy cow;
		int n_cow;
		int rc = kv_append(s->pool, &w->kv, w->n_computed, n_new, &cow, &n_cow);
		assert(rc == 0 && n_cow == 0);
		(void)rc;
		w->status = SEQ_RUNNING;
		w->admit_seq = ++s->next_admit;
		s->n_fork_reserved += w->n_fork_pending;
		if (!w->t_first_scheduled) {
			w->t_first_scheduled = clock_now_ns();
			w->n_cached_tokens = cached;
		}
		s->running[s->n_running++] = w;
		add_entry(s, w, n_new, NULL, 0);
	}
}

/* Lay the live entries out as the engine batch. The block-table stride is
 * the widest table in this step, not max_model_len's, so a step costs
 * O(blocks in use) even when max_model_len is large. */
static void build_batch(struct sched *s)
{
	struct sched_step *st = &s->step;
	int bs = s->block_size, mb = 1;
	for (int k = 0; k < s->n_entries; k++)
		if (s->entries[k].live && s->entries[k].seq->kv.n_ids > mb)
			mb = s->entries[k].seq->kv.n_ids;
	st->max_blocks_per_seq = mb;
	int row = 0, ns = 0;
	st->n_logits = 0;
	st->n_copies = 0;
	for (int k = 0; k < s->n_entries; k++) {
		struct entry *e = &s->entries[k];
		if (!e->live)
			continue;
		struct seq *q = e->seq;
		q->step_slot = ns;
		st->seqs[ns] = q;
		st->n_new[ns] = e->n_new;
		st->seq_start[ns] = row;
		for (int j = 0; j < e->n_new; j++) {
			int pos = q->n_computed + j;
			st->tokens[row] = q->tokens[pos];
			st->positions[row] = pos;
			st->slot_mapping[row] = q->kv.ids[pos / bs] * bs + pos % bs;
			row++;
		}
		st->context_len[ns] = q->n_computed + e->n_new;
		int32_t *bt = st->block_tables + (size_t)ns * mb;
		memcpy(bt, q->kv.ids, (size_t)q->kv.n_ids * sizeof(int32_t));
		memset(bt + q->kv.n_ids, 0, (size_t)(mb - q->kv.n_ids) * sizeof(int32_t));
		if (q->n_computed + e->n_new == q->n_tokens) {
			st->logits_rows[st->n_logits] = row - 1;
			st->logits_seq[st->n_logits++] = ns;
		}
		if (e->has_cow) {
			st->copy_src[st->n_copies] = e->cow.src;
			st->copy_dst[st->n_copies++] = e->cow.dst;
		}
		ns++;
	}
	st->seq_start[ns] = row;
	st->n_seqs = ns;
	st->n_tokens = row;
}

int sched_schedule(struct sched *s, const struct sched_step **out)
{
	assert(!s->in_step && "sched_commit the previous step first");
	/* Preempted sequences go back to the waiting ring: make room up front. */
	int rc = waiting_reserve(s, s->n_running);
	if (rc)
		return rc;
	s->n_entries = 0;
	s->budget = s->o.max_num_batched_tokens;
	s->step.n_preempted = 0;
	schedule_running(s, true);
	schedule_running(s, false);
	if (s->step.n_preempted == 0)
		admit_waiting(s);
	build_batch(s);
	s->in_step = s->step.n_seqs > 0;
	*out = &s->step;
	return 0;
}

void sched_commit(struct sched *s)
{
	if (!s->in_step)
		return;
	struct sched_step *st = &s->step;
	for (int i = 0; i < st->n_seqs; i++) {
		struct seq *q = st->seqs[i];
		int n = st->n_new[i];
		if (q->n_computed < q->n_prompt) {
			int end = q->n_computed + n < q->n_prompt ? q->n_computed + n : q->n_prompt;
			s->prompt_tokens_computed += (uint64_t)(end - q->n_computed);
		}
		q->n_computed += n;
		q->step_slot = -1;
		kv_commit(s->pool, &q->kv, q->tokens, q->n_computed);
	}
	s->tokens_computed += (uint64_t)st->n_tokens;
	s->steps++;
	s->in_step = false;
}

void sched_cancel_step(struct sched *s)
{
	if (!s->in_step)
		return;
	for (int i = 0; i < s->step.n_seqs; i++)
		s->step.seqs[i]->step_slot = -1;
	s->in_step = false;
}

int sched_fork(struct sched *s, struct seq *parent, struct seq **children)
{
	assert(!s->in_step && parent->status == SEQ_RUNNING);
	int n = parent->n_fork_pending;
	assert(s->n_running + n <= s->o.max_num_seqs && s->n_fork_reserved >= n);
	for (int i = 0; i < n; i++) {
		struct seq *c;
		int rc = seq_clone(s->pool, parent, parent->id + (uint64_t)i + 1, &c);
		if (!rc) {
			rc = kv_fork(s->pool, &parent->kv, &c->kv);
			if (rc)
				seq_destroy(c);
		}
		if (rc) {
			for (int j = 0; j < i; j++)
				sched_finish(s, children[j], FINISH_ERROR);
			for (int j = 0; j < i; j++)
				seq_destroy(children[j]);
			return rc;
		}
		c->n_computed = parent->n_computed;
		c->status = SEQ_RUNNING;
		c->admit_seq = ++s->next_admit;
		s->running[s->n_running++] = c;
		children[i] = c;
	}
	parent->n_fork_pending = 0;
	s->n_fork_reserved -= n;
	return 0;
}

void sched_append_token(struct sched *s, struct seq *q, int32_t token)
{
	assert(q->n_tokens < q->cap && q->n_computed == q->n_tokens);
	q->tokens[q->n_tokens++] = token;
	kv_table_hash(s->pool, &q->kv, q->tokens, q->n_tokens);
	if (!q->t_first_token)
		q->t_first_token = clock_now_ns();
}

void sched_finish(struct sched *s, struct seq *q, enum finish_reason reason)
{
	assert(!s->in_step);
	if (q->status == SEQ_RUNNING) {
		running_remove(s, q);
		kv_release(s->pool, &q->kv);
		s->n_fork_reserved -= q->n_fork_pending;
	} else if (q->status == SEQ_WAITING) {
		waiting_remove(s, q);
	}
	q->status = SEQ_FINISHED;
	q->finish = reason;
	q->t_finish = clock_now_ns();
}

void sched_get_stats(const struct sched *s, struct sched_stats *st)
{
	struct kv_stats ks;
	kv_get_stats(s->pool, &ks);
	st->n_running = s->n_running;
	st->n_waiting = s->n_waiting;
	st->kv_usage = kv_usage(s->pool);
	st->prefix_queries = ks.queries;
	st->prefix_hits = ks.hits;
	st->preemptions = s->preemptions;
	st->steps = s->steps;
	st->tokens_computed = s->tokens_computed;
	st->prompt_tokens_computed = s->prompt_tokens_computed;
}

int sched_n_running(const struct sched *s)
{
	return s->n_running;
}

struct seq *sched_running(const struct sched *s, int i)
{
	assert(i >= 0 && i < s->n_running);
	return s->running[i];
}

int sched_n_waiting(const struct sched *s)
{
	return s->n_waiting;
}

void sched_step_batch(const struct sched_step *st, struct engine_batch *b)
{
	b->n_tokens = st->n_tokens;
	b->tokens = st->tokens;
	b->positions = st->positions;
	b->slot_mapping = st->slot_mapping;
	b->n_seqs = st->n_seqs;
	b->seq_start = st->seq_start;
	b->context_len = st->context_len;
	b->block_tables = st->block_tables;
	b->max_blocks_per_seq = st->max_blocks_per_seq;
	b->n_logits = st->n_logits;
	b->logits_rows = st->logits_rows;
}
