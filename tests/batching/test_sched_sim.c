/* tests/batching/test_sched_sim.c — randomized simulation of the scheduler
 * and KV block manager, fixed seeds, against the fake engine (fake_engine.h)
 * and again against the real CPU engine on a generated tiny model.
 *
 * Thousands of requests with random prompt lengths, shared system prompts,
 * max_tokens, n, arrival steps and cancellations, under a KV pool small
 * enough to force preemption. Checked every step: the pool's own invariants,
 * refcount == number of tables holding the block, waiting sequences hold
 * nothing, the token and sequence budgets. At the end: every request
 * finished, was cancelled or was refused exactly when it could never fit;
 * every output equals the request's output run alone (the fake engine's
 * reference function, or the real CPU engine on a generated tiny model
 * running the choice by itself); no block is held.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batching/kv_blocks.h"
#include "batching/scheduler.h"
#include "batching/sequence.h"
#include "engine/engine.h"
#include "engine/model/model_gen.h"
#include "fake_engine.h"

/* Check's ck_assert costs a syscall per call (it records the last passed
 * point), so hot loops test with `if` and fail with ck_abort_msg. */
#define REQUIRE(cond, ...)                                                                         \
	do {                                                                                       \
		if (!(cond))                                                                       \
			ck_abort_msg(__VA_ARGS__);                                                 \
	} while (0)

#define MAXN 3

struct req;

/* The model the simulation drives: the fake engine, or the real CPU engine
 * on a generated tiny model. `alone` gives a request's reference output. */
struct sim_engine {
	int vocab;
	int32_t eos;
	void *ctx;
	/* Greedy next token of each logits row. */
	int (*forward)(void *ctx, const struct engine_batch *b, int32_t *next);
	int (*copy)(void *ctx, const int32_t *src, const int32_t *dst, int n);
	/* Choice k of r run alone: out[0, *n). */
	void (*alone)(void *ctx, const struct req *r, int k, int32_t *out, int *n);
};

static uint64_t rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ULL;
	uint64_t z = *s;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static int rng_int(uint64_t *s, int lo, int hi) /* [lo, hi] */
{
	return lo + (int)(rng_next(s) % (uint64_t)(hi - lo + 1));
}

/* The fake sampler: greedy, offset by the choice index so n > 1 choices
 * diverge (and copy-on-write matters). */
static int32_t pick(int32_t greedy, int index, int vocab)
{
	return (greedy + index * 7) % vocab;
}

struct req {
	int32_t *prompt;
	int n_prompt, max_tokens, n;
	int arrival, cancel_at; /* steps; cancel_at -1 = never */
	bool refused, done, cancelled;
	struct seq *seqs[MAXN];
	int n_live;
	int32_t *out[MAXN];
	int n_out[MAXN];
	bool finished[MAXN];
	enum finish_reason why[MAXN];
};

struct sim {
	struct kv_pool *pool;
	struct sched *sched;
	const struct sim_engine *eng;
	struct sched_opts so;
	int n_blocks, bs;
	struct req *reqs;
	int n_reqs;
	int *held; /* scratch: expected refcounts */
	uint64_t max_rows, preempt_steps;
};

static void sim_init(struct sim *m, int n_blocks, int bs, bool cache, const struct sched_opts *so,
                     const struct sim_engine *eng)
{
	memset(m, 0, sizeof(*m));
	m->eng = eng;
	m->n_blocks = n_blocks;
	m->bs = bs;
	m->so = *so;
	struct kv_opts ko = {.n_blocks = n_blocks, .block_size = bs, .prefix_caching = cache};
	struct diag d = {0};
	ck_assert_int_eq(kv_pool_create(&ko, &m->pool, &d), 0);
	ck_assert_msg(sched_create(m->pool, so, &m->sched, &d) == 0, "%s", d.msg);
	m->held = calloc((size_t)n_blocks, sizeof(int));
}

static void sim_deinit(struct sim *m)
{
	for (int i = 0; i < m->n_reqs; i++) {
		free(m->reqs[i].prompt);
		for (int k = 0; k < MAXN; k++)
			free(m->reqs[i].out[k]);
	}
	free(m->reqs);
	sched_destroy(m->sched);
	kv_pool_destroy(m->pool);
	free(m->held);
}

/* Record a finished sequence's output and destroy it. */
static void retire(struct req *r, struct seq *q)
{
	int k = q->index;
	REQUIRE(!r->finished[k], "choice finished twice");
	r->n_out[k] = seq_n_generated(q);
	r->out[k] = malloc((size_t)(r->n_out[k] + 1) * sizeof(int32_t));
	memcpy(r->out[k], q->tokens + q->n_prompt, (size_t)r->n_out[k] * sizeof(int32_t));
	r->finished[k] = true;
	r->why[k] = q->finish;
	REQUIRE(q->t_finish >= q->t_arrival && q->t_arrival > 0, "timestamps");
	for (int i = 0; i < MAXN; i++)
		if (r->seqs[i] == q)
			r->seqs[i] = NULL;
	r->n_live--;
	if (r->n_live == 0)
		r->done = true;
	seq_destroy(q);
}

static void submit(struct sim *m, struct req *r, uint64_t id)
{
	struct diag d = {0};
	int rc = sched_validate(m->sched, r->n_prompt, r->max_tokens, r->n, &d);
	bool fits = r->n_prompt + r->max_tokens <= m->so.max_model_len &&
	            (r->n_prompt + r->max_tokens + m->bs - 1) / m->bs <= m->n_blocks;
	if (!fits) {
		ck_assert_int_eq(rc, ERR_TOO_LARGE);
		ck_assert(strlen(d.msg) > 0);
		r->refused = r->done = true;
		return;
	}
	ck_assert_msg(rc == 0, "%s", d.msg);
	struct seq *q;
	ck_assert_int_eq(seq_create(m->pool, id, r->prompt, r->n_prompt, r->max_tokens, &q), 0);
	q->n_fork_pending = r->n - 1;
	q->owner = r;
	r->seqs[0] = q;
	r->n_live = 1;
	ck_assert_int_eq(sched_add(m->sched, q), 0);
}

static void cancel(struct sim *m, struct req *r)
{
	r->cancelled = true;
	for (int k = 0; k < MAXN; k++) {
		struct seq *q = r->seqs[k];
		if (!q)
			continue;
		sched_finish(m->sched, q, FINISH_ABORT);
		ck_assert_int_eq(q->kv.n_ids, 0);
		retire(r, q);
	}
	r->done = true; /* unforked children never exist */
}

static void check_invariants(struct sim *m, const struct sched_step *st)
{
	struct diag d = {0};
	REQUIRE(kv_pool_check(m->pool, &d) == 0, "%s", d.msg);
	REQUIRE(st->n_tokens <= m->so.max_num_batched_tokens, "budget: %d rows", st->n_tokens);
	REQUIRE(st->n_seqs <= m->so.max_num_seqs, "%d seqs in a step", st->n_seqs);
	int nr = sched_n_running(m->sched);
	REQUIRE(nr <= m->so.max_num_seqs, "%d running", nr);
	memset(m->held, 0, (size_t)m->n_blocks * sizeof(int));
	uint64_t prev_admit = 0;
	for (int i = 0; i < nr; i++) {
		struct seq *q = sched_running(m->sched, i);
		REQUIRE(q->status == SEQ_RUNNING, "running seq with status %d", q->status);
		REQUIRE(q->admit_seq > prev_admit, "running not in admission order");
		prev_admit = q->admit_seq;
		REQUIRE(q->kv.n_ids * m->bs >= q->n_computed, "computed tokens without blocks");
		for (int j = 0; j < q->kv.n_ids; j++)
			m->held[q->kv.ids[j]]++;
	}
	for (int b = 0; b < m->n_blocks; b++)
		REQUIRE(kv_ref(m->pool, b) == m->held[b], "block %d: ref %d, %d holders", b,
		        kv_ref(m->pool, b), m->held[b]);
	for (int i = 0; i < sched_n_waiting(m->sched); i++) {
		struct seq *q = sched_waiting(m->sched, i);
		REQUIRE(q->status == SEQ_WAITING && q->kv.n_ids == 0,
		        "waiting seq: status %d, %d blocks", q->status, q->kv.n_ids);
	}
	/* Every scheduled sequence is running and gets tokens it lacks. */
	for (int i = 0; i < st->n_seqs; i++) {
		struct seq *q = st->seqs[i];
		REQUIRE(q->status == SEQ_RUNNING && st->n_new[i] >= 1 &&
		            q->n_computed + st->n_new[i] <= q->n_tokens,
		        "scheduled seq: status %d, computed %d + new %d, tokens %d", q->status,
		        q->n_computed, st->n_new[i], q->n_tokens);
	}
}

/* Feed the sampled tokens back: forks, appends, finishes. */
static void postprocess(struct sim *m, const struct sched_step *st, const int32_t *next)
{
	for (int i = 0; i < st->n_logits; i++) {
		struct seq *q = st->seqs[st->logits_seq[i]];
		struct req *r = q->owner;
		struct seq *group[MAXN];
		int ng = 0;
		group[ng++] = q;
		if (q->n_fork_pending > 0) {
			struct seq *kids[MAXN];
			int nk = q->n_fork_pending;
			REQUIRE(sched_fork(m->sched, q, kids) == 0, "fork failed");
			for (int k = 0; k < nk; k++) {
				kids[k]->index = k + 1;
				kids[k]->owner = r;
				r->seqs[k + 1] = kids[k];
				r->n_live++;
				group[ng++] = kids[k];
			}
		}
		for (int g = 0; g < ng; g++) {
			struct seq *c = group[g];
			int32_t tok = pick(next[i], c->index, m->eng->vocab);
			sched_append_token(m->sched, c, tok);
			enum finish_reason why = FINISH_NONE;
			if (tok == m->eng->eos)
				why = FINISH_STOP;
			else if (seq_n_generated(c) >= c->max_tokens)
				why = FINISH_LENGTH;
			if (why != FINISH_NONE) {
				sched_finish(m->sched, c, why);
				retire(r, c);
			}
		}
	}
}

/* One step: returns false when nothing was scheduled. */
static bool sim_step(struct sim *m)
{
	const struct sched_step *st;
	REQUIRE(sched_schedule(m->sched, &st) == 0, "sched_schedule failed");
	check_invariants(m, st);
	if (st->n_preempted)
		m->preempt_steps++;
	if (st->n_seqs == 0)
		return false;
	if ((uint64_t)st->n_tokens > m->max_rows)
		m->max_rows = (uint64_t)st->n_tokens;
	REQUIRE(m->eng->copy(m->eng->ctx, st->copy_src, st->copy_dst, st->n_copies) == 0,
	        "block copy failed");
	struct engine_batch b;
	sched_step_batch(st, &b);
	int32_t next[256];
	REQUIRE(st->n_logits <= 256, "too many logits rows");
	REQUIRE(m->eng->forward(m->eng->ctx, &b, next) == 0, "forward failed");
	sched_commit(m->sched);
	postprocess(m, st, next);
	return true;
}

/* Every output equals what the request gives alone. */
static void check_outputs(const struct sim *m, const struct req *r)
{
	int32_t *want = malloc((size_t)(r->max_tokens + 1) * sizeof(int32_t));
	for (int k = 0; k < MAXN; k++) {
		if (!r->finished[k])
			continue;
		int n_want = 0;
		m->eng->alone(m->eng->ctx, r, k, want, &n_want);
		/* A cancelled choice stopped early: its output is a prefix. */
		REQUIRE(r->cancelled ? r->n_out[k] <= n_want : r->n_out[k] == n_want,
		        "choice %d: %d tokens, alone %d", k, r->n_out[k], n_want);
		for (int j = 0; j < r->n_out[k]; j++)
			REQUIRE(r->out[k][j] == want[j], "choice %d token %d: got %d, alone %d", k,
			        j, r->out[k][j], want[j]);
		if (r->why[k] == FINISH_LENGTH)
			ck_assert_int_eq(r->n_out[k], r->max_tokens);
		if (r->why[k] == FINISH_STOP)
			ck_assert_int_eq(r->out[k][r->n_out[k] - 1], m->eng->eos);
		if (!r->cancelled)
			ck_assert(r->why[k] == FINISH_LENGTH || r->why[k] == FINISH_STOP);
	}
	if (!r->cancelled && !r->refused)
		for (int k = 0; k < r->n; k++)
			ck_assert_msg(r->finished[k], "choice %d of a request never finished", k);
	free(want);
}

struct sim_cfg {
	int n_reqs, n_blocks, bs, max_seqs, budget, max_len;
	bool cache;
};

static void run_sim(uint64_t seed, const struct sim_cfg *c, const struct sim_engine *eng)
{
	const int vocab = eng->vocab;
	struct sched_opts so = {.max_num_seqs = c->max_seqs,
	                        .max_num_batched_tokens = c->budget,
	                        .max_model_len = c->max_len};
	struct sim m;
	sim_init(&m, c->n_blocks, c->bs, c->cache, &so, eng);
	uint64_t rng = seed * 7919 + 1;
	/* Four system prompts, one empty. */
	int sys_len[4] = {0, rng_int(&rng, 8, 40), rng_int(&rng, 40, 90), rng_int(&rng, 90, 150)};
	int32_t sys[4][150];
	for (int s = 0; s < 4; s++)
		for (int i = 0; i < 150; i++)
			sys[s][i] = rng_int(&rng, 1, vocab - 1);
	m.n_reqs = c->n_reqs;
	m.reqs = calloc((size_t)c->n_reqs, sizeof(*m.reqs));
	int t = 0;
	for (int i = 0; i < c->n_reqs; i++) {
		struct req *r = &m.reqs[i];
		int s = rng_int(&rng, 0, 3);
		int suffix = rng_int(&rng, 1, 100);
		r->n_prompt = sys_len[s] + suffix;
		r->prompt = malloc((size_t)r->n_prompt * sizeof(int32_t));
		memcpy(r->prompt, sys[s], (size_t)sys_len[s] * sizeof(int32_t));
		for (int j = sys_len[s]; j < r->n_prompt; j++)
			r->prompt[j] = rng_int(&rng, 1, vocab - 1);
		r->max_tokens = rng_int(&rng, 1, 40);
		if (rng_int(&rng, 0, 49) == 0)
			r->max_tokens = c->max_len; /* can never fit: refused */
		r->n = rng_int(&rng, 0, c->max_seqs < 8 ? 2 : 9) == 0 ? rng_int(&rng, 2, MAXN) : 1;
		t += rng_int(&rng, 0, 3);
		r->arrival = t;
		r->cancel_at = rng_int(&rng, 0, 9) == 0 ? t + rng_int(&rng, 0, 80) : -1;
	}
	int next_req = 0, step = 0;
	uint64_t id = 1;
	for (;; step++) {
		REQUIRE(step < 400000, "no progress: starvation or livelock");
		while (next_req < m.n_reqs && m.reqs[next_req].arrival <= step) {
			submit(&m, &m.reqs[next_req], id);
			id += MAXN;
			next_req++;
		}
		for (int i = 0; i < next_req; i++)
			if (m.reqs[i].cancel_at == step && !m.reqs[i].done)
				cancel(&m, &m.reqs[i]);
		bool ran = sim_step(&m);
		if (!ran && next_req == m.n_reqs && sched_n_waiting(m.sched) == 0)
			break;
		/* Something waiting but nothing scheduled would be a deadlock. */
		REQUIRE(ran || sched_n_waiting(m.sched) == 0, "deadlock: waiting but nothing runs");
	}
	int n_refused = 0, n_cancelled = 0;
	for (int i = 0; i < m.n_reqs; i++) {
		ck_assert(m.reqs[i].done);
		n_refused += m.reqs[i].refused;
		n_cancelled += m.reqs[i].cancelled;
		check_outputs(&m, &m.reqs[i]);
	}
	struct sched_stats ss;
	sched_get_stats(m.sched, &ss);
	struct kv_stats ks;
	kv_get_stats(m.pool, &ks);
	ck_assert_int_eq(ss.n_running, 0);
	ck_assert_int_eq(ss.n_waiting, 0);
	ck_assert_int_eq(ks.n_free, c->n_blocks); /* nothing leaked */
	ck_assert_int_le((int)m.max_rows, c->budget);
	ck_assert_uint_gt(ss.preemptions, 0); /* the pool was small enough */
	ck_assert_int_gt(n_refused, 0);
	ck_assert_int_gt(n_cancelled, 0);
	if (c->cache)
		ck_assert_uint_gt(ss.prefix_hits, 0);
	else
		ck_assert_uint_eq(ss.prefix_hits, 0);
	ck_assert_uint_gt(ks.cow_copies, 0);
	fprintf(stderr,
	        "sim seed %llu cache %d: %d requests (%d refused, %d cancelled), %d steps, "
	        "%llu preemptions, prefix hits %llu/%llu tokens, %llu COW copies, %llu rows\n",
	        (unsigned long long)seed, c->cache, m.n_reqs, n_refused, n_cancelled, step,
	        (unsigned long long)ss.preemptions, (unsigned long long)ss.prefix_hits,
	        (unsigned long long)ss.prefix_queries, (unsigned long long)ks.cow_copies,
	        (unsigned long long)ss.tokens_computed);
	sim_deinit(&m);
}

/* ---- the fake engine ---------------------------------------------------------- */

#define FAKE_VOCAB 50
#define FAKE_EOS   0

static int fake_fwd(void *ctx, const struct engine_batch *b, int32_t *next)
{
	struct fake_engine *fe = ctx;
	int rc = fake_engine_forward(fe, b, next, NULL);
	if (rc)
		fprintf(stderr, "fake engine: %s\n", fe->err);
	return rc;
}

static int fake_copy(void *ctx, const int32_t *src, const int32_t *dst, int n)
{
	struct fake_engine *fe = ctx;
	return fake_engine_copy_blocks(fe, src, dst, n);
}

/* The fake engine's reference function, decoded greedily with the offset. */
static void fake_alone(void *ctx, const struct req *r, int k, int32_t *out, int *n)
{
	(void)ctx;
	uint64_t h = FAKE_HASH_INIT;
	for (int i = 0; i < r->n_prompt; i++)
		h = fake_hash_step(h, r->prompt[i]);
	*n = 0;
	for (int j = 0; j < r->max_tokens; j++) {
		int32_t t = pick(fake_hash_token(h, FAKE_VOCAB), k, FAKE_VOCAB);
		out[(*n)++] = t;
		if (t == FAKE_EOS)
			break;
		h = fake_hash_step(h, t);
	}
}

static void run_fake(uint64_t seed, const struct sim_cfg *c)
{
	struct fake_engine fe;
	ck_assert_int_eq(fake_engine_init(&fe, c->n_blocks, c->bs, FAKE_VOCAB), 0);
	struct sim_engine eng = {.vocab = FAKE_VOCAB,
	                         .eos = FAKE_EOS,
	                         .ctx = &fe,
	                         .forward = fake_fwd,
	                         .copy = fake_copy,
	                         .alone = fake_alone};
	run_sim(seed, c, &eng);
	fake_engine_deinit(&fe);
}

/* ---- the real CPU engine on a generated tiny model ------------------------------ */

struct real {
	char dir[64], path[96];
	struct model *m;
	struct engine *e;
	float *logits;
	int vocab, bs, max_len;
};

static int real_fwd(void *ctx, const struct engine_batch *b, int32_t *next)
{
	struct real *x = ctx;
	int rc = engine_forward(x->e, b, x->logits);
	if (rc)
		return rc;
	for (int i = 0; i < b->n_logits; i++) {
		const float *l = x->logits + (size_t)i * x->vocab;
		int best = 0;
		for (int v = 1; v < x->vocab; v++)
			if (l[v] > l[best])
				best = v;
		next[i] = best;
	}
	return 0;
}

static int real_copy(void *ctx, const int32_t *src, const int32_t *dst, int n)
{
	struct real *x = ctx;
	return n > 0 ? engine_copy_blocks(x->e, src, dst, n) : 0;
}

/* Run choice k of r by itself: one sequence, a pool of its own, no cache. */
static void real_alone(void *ctx, const struct req *r, int k, int32_t *out, int *n)
{
	struct real *x = ctx;
	struct kv_opts ko = {
	    .n_blocks = x->max_len / x->bs, .block_size = x->bs, .prefix_caching = false};
	struct sched_opts so = {
	    .max_num_seqs = 1, .max_num_batched_tokens = x->max_len, .max_model_len = x->max_len};
	struct kv_pool *pool;
	struct sched *s;
	ck_assert_int_eq(kv_pool_create(&ko, &pool, NULL), 0);
	ck_assert_int_eq(sched_create(pool, &so, &s, NULL), 0);
	struct seq *q;
	ck_assert_int_eq(seq_create(pool, 1, r->prompt, r->n_prompt, r->max_tokens, &q), 0);
	q->index = k;
	ck_assert_int_eq(sched_add(s, q), 0);
	*n = 0;
	for (;;) {
		const struct sched_step *st;
		ck_assert_int_eq(sched_schedule(s, &st), 0);
		ck_assert_int_eq(st->n_seqs, 1);
		struct engine_batch b;
		sched_step_batch(st, &b);
		int32_t next;
		ck_assert_int_eq(real_fwd(x, &b, &next), 0);
		sched_commit(s);
		if (st->n_logits == 0)
			continue;
		int32_t t = pick(next, k, x->vocab);
		out[(*n)++] = t;
		sched_append_token(s, q, t);
		if (t == MODEL_GEN_EOS || *n == r->max_tokens)
			break;
	}
	sched_finish(s, q, FINISH_LENGTH);
	seq_destroy(q);
	sched_destroy(s);
	kv_pool_destroy(pool);
}

static void run_real(uint64_t seed, const struct sim_cfg *c)
{
	struct real x = {.bs = c->bs, .max_len = c->max_len};
	snprintf(x.dir, sizeof(x.dir), "/tmp/aorta-sim-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(x.dir));
	snprintf(x.path, sizeof(x.path), "%s/tiny.gguf", x.dir);
	struct model_gen_opts g;
	model_gen_default_opts(&g);
	g.cfg.n_layers = 2;
	g.cfg.hidden = 32;
	g.cfg.n_heads = 2;
	g.cfg.n_kv_heads = 1;
	g.cfg.head_dim = 16;
	g.cfg.ffn = 64;
	g.cfg.max_ctx = 512;
	g.dtype = DT_F32;
	g.seed = 3;
	struct diag d = {0};
	ck_assert_msg(model_gen_write_gguf(&g, x.path, &d) == 0, "%s", d.msg);
	ck_assert_msg(model_load(x.path, &x.m, &d) == 0, "%s", d.msg);
	x.vocab = x.m->cfg.vocab;
	int alone_blocks = c->max_len / c->bs;
	struct engine_opts eo = {
	    .n_threads = 1,
	    .block_size = c->bs,
	    .n_kv_blocks = c->n_blocks > alone_blocks ? c->n_blocks : alone_blocks,
	    .kv_dtype = DT_F32,
	    .quantization = DT_F32,
	    .max_batch_tokens = c->budget > c->max_len ? c->budget : c->max_len,
	    .max_seqs = c->max_seqs,
	    .max_blocks_per_seq = alone_blocks};
	ck_assert_msg(engine_create(x.m, &eo, &x.e, &d) == 0, "%s", d.msg);
	x.logits = malloc((size_t)c->max_seqs * x.vocab * sizeof(float));
	struct sim_engine eng = {.vocab = x.vocab,
	                         .eos = MODEL_GEN_EOS,
	                         .ctx = &x,
	                         .forward = real_fwd,
	                         .copy = real_copy,
	                         .alone = real_alone};
	run_sim(seed, c, &eng);
	free(x.logits);
	engine_destroy(x.e);
	model_destroy(x.m);
	unlink(x.path);
	rmdir(x.dir);
}

START_TEST(test_sim_cached)
{
	struct sim_cfg c = {.n_reqs = 2000,
	                    .n_blocks = 48,
	                    .bs = 8,
	                    .max_seqs = 16,
	                    .budget = 64,
	                    .max_len = 256,
	                    .cache = true};
	run_fake((uint64_t)_i, &c);
}
END_TEST

START_TEST(test_sim_uncached)
{
	struct sim_cfg c = {.n_reqs = 1000,
	                    .n_blocks = 40,
	                    .bs = 4,
	                    .max_seqs = 8,
	                    .budget = 48,
	                    .max_len = 160,
	                    .cache = false};
	run_fake(100 + (uint64_t)_i, &c);
}
END_TEST

START_TEST(test_sim_block16)
{
	struct sim_cfg c = {.n_reqs = 1000,
	                    .n_blocks = 40,
	                    .bs = 16,
	                    .max_seqs = 24,
	                    .budget = 128,
	                    .max_len = 320,
	                    .cache = true};
	run_fake(200 + (uint64_t)_i, &c);
}
END_TEST

START_TEST(test_sim_few_seats)
{
	/* Few seats and many n > 1 requests: seats for forks must be kept. */
	struct sim_cfg c = {.n_reqs = 600,
	                    .n_blocks = 64,
	                    .bs = 8,
	                    .max_seqs = 4,
	                    .budget = 96,
	                    .max_len = 256,
	                    .cache = true};
	run_fake(300 + (uint64_t)_i, &c);
}
END_TEST

START_TEST(test_sim_real_engine)
{
	/* The same simulation on the real CPU engine: outputs must equal each
	 * choice run alone through the engine. */
	struct sim_cfg c = {.n_reqs = 1000,
	                    .n_blocks = 40,
	                    .bs = 8,
	                    .max_seqs = 8,
	                    .budget = 48,
	                    .max_len = 192,
	                    .cache = true};
	run_real(400 + (uint64_t)_i, &c);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("sched_sim");
	TCase *tc = tcase_create("sim");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_sim_cached, 0, 3);
	tcase_add_loop_test(tc, test_sim_uncached, 0, 2);
	tcase_add_loop_test(tc, test_sim_block16, 0, 2);
	tcase_add_loop_test(tc, test_sim_few_seats, 0, 2);
	suite_add_tcase(s, tc);
	TCase *tr = tcase_create("real");
	tcase_set_timeout(tr, 120);
	tcase_add_loop_test(tr, test_sim_real_engine, 0, 1);
	suite_add_tcase(s, tr);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
