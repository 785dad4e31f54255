/* tests/batching/test_sched.c — the scheduling policy case by case (decodes
 * first, chunked prefill, FCFS admission, preemption of the newest, n > 1
 * fork with copy-on-write, cancellation, validation messages) and the prefix
 * cache computing a shared system prompt once. Fake engine: fake_engine.h. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "batching/kv_blocks.h"
#include "batching/scheduler.h"
#include "batching/sequence.h"
#include "fake_engine.h"

#define VOCAB 1000

struct env {
	struct kv_pool *pool;
	struct sched *s;
	struct fake_engine fe;
	int32_t next[512];
};

static void env_init(struct env *e, int n_blocks, int bs, bool cache, int max_seqs, int budget,
                     int max_len)
{
	memset(e, 0, sizeof(*e));
	struct kv_opts ko = {.n_blocks = n_blocks, .block_size = bs, .prefix_caching = cache};
	ck_assert_int_eq(kv_pool_create(&ko, &e->pool, NULL), 0);
	struct sched_opts so = {
	    .max_num_seqs = max_seqs, .max_num_batched_tokens = budget, .max_model_len = max_len};
	ck_assert_int_eq(sched_create(e->pool, &so, &e->s, NULL), 0);
	ck_assert_int_eq(fake_engine_init(&e->fe, n_blocks, bs, VOCAB), 0);
}

static void env_deinit(struct env *e)
{
	sched_destroy(e->s);
	kv_pool_destroy(e->pool);
	fake_engine_deinit(&e->fe);
}

static struct seq *add(struct env *e, uint64_t id, const int32_t *prompt, int n, int max_tokens)
{
	struct seq *q;
	ck_assert_int_eq(seq_create(e->pool, id, prompt, n, max_tokens, &q), 0);
	ck_assert_int_eq(sched_add(e->s, q), 0);
	return q;
}

/* Schedule and run one step on the fake engine; commit; return the step.
 * Sampled tokens are left in e->next (not appended). */
static const struct sched_step *run(struct env *e)
{
	const struct sched_step *st;
	ck_assert_int_eq(sched_schedule(e->s, &st), 0);
	if (st->n_seqs == 0)
		return st;
	ck_assert_msg(fake_engine_copy_blocks(&e->fe, st->copy_src, st->copy_dst, st->n_copies) ==
	                  0,
	              "%s", e->fe.err);
	struct engine_batch b;
	sched_step_batch(st, &b);
	ck_assert_msg(fake_engine_forward(&e->fe, &b, e->next, NULL) == 0, "%s", e->fe.err);
	sched_commit(e->s);
	return st;
}

/* Append each logits row's token; finish sequences at max_tokens; returns
 * the number finished (and destroyed). */
static int feed(struct env *e, const struct sched_step *st)
{
	int n_done = 0;
	for (int i = 0; i < st->n_logits; i++) {
		struct seq *q = st->seqs[st->logits_seq[i]];
		sched_append_token(e->s, q, e->next[i]);
		if (seq_n_generated(q) >= q->max_tokens) {
			sched_finish(e->s, q, FINISH_LENGTH);
			seq_destroy(q);
			n_done++;
		}
	}
	return n_done;
}

static int n_new_of(const struct sched_step *st, const struct seq *q)
{
	for (int i = 0; i < st->n_seqs; i++)
		if (st->seqs[i] == q)
			return st->n_new[i];
	return 0;
}

static void fill_tokens(int32_t *t, int n, int salt)
{
	for (int i = 0; i < n; i++)
		t[i] = 1 + (i * 31 + salt * 17) % (VOCAB - 1);
}

START_TEST(test_validate)
{
	struct env e;
	env_init(&e, 10, 16, true, 4, 64, 4096);
	struct diag d = {0};
	ck_assert_int_eq(sched_validate(e.s, 100, 50, 1, &d), 0);
	ck_assert_int_eq(sched_validate(e.s, 4000, 200, 1, &d), ERR_TOO_LARGE);
	ck_assert_ptr_nonnull(strstr(d.msg, "4096"));
	ck_assert_ptr_nonnull(strstr(d.msg, "4000"));
	ck_assert_ptr_nonnull(strstr(d.msg, "200"));
	ck_assert_ptr_nonnull(strstr(d.msg, "4200"));
	/* Fits max_model_len but not the pool (10 blocks of 16). */
	ck_assert_int_eq(sched_validate(e.s, 150, 11, 1, &d), ERR_TOO_LARGE);
	ck_assert_ptr_nonnull(strstr(d.msg, "11 KV blocks"));
	ck_assert_int_eq(sched_validate(e.s, 10, 10, 5, &d), ERR_RANGE);
	ck_assert_int_eq(sched_validate(e.s, 0, 10, 1, &d), ERR_INVAL);
	ck_assert_int_eq(sched_validate(e.s, 10, 0, 1, &d), ERR_RANGE);
	env_deinit(&e);
}
END_TEST

START_TEST(test_chunked_prefill_decodes_first)
{
	struct env e;
	env_init(&e, 64, 4, true, 8, 8, 128);
	int32_t pa[10], pb[12];
	fill_tokens(pa, 10, 1);
	fill_tokens(pb, 12, 2);
	struct seq *a = add(&e, 1, pa, 10, 5);
	const struct sched_step *st = run(&e);
	ck_assert_int_eq(st->n_seqs, 1);
	ck_assert_int_eq(st->n_tokens, 8); /* a chunk: the budget */
	ck_assert_int_eq(st->n_logits, 0); /* prompt not done: nothing to sample */
	ck_assert_int_eq(a->n_computed, 8);
	struct seq *b = add(&e, 2, pb, 12, 5);
	st = run(&e);
	/* a finishes its prompt (2), b is admitted with the rest of the budget. */
	ck_assert_int_eq(n_new_of(st, a), 2);
	ck_assert_int_eq(n_new_of(st, b), 6);
	ck_assert_int_eq(st->n_logits, 1);
	ck_assert_ptr_eq(st->seqs[st->logits_seq[0]], a);
	ck_assert_int_eq(e.next[0], fake_next_token(pa, 10, VOCAB));
	feed(&e, st);
	st = run(&e);
	/* a's decode comes first, then b's chunk. */
	ck_assert_ptr_eq(st->seqs[0], a);
	ck_assert_int_eq(st->n_new[0], 1);
	ck_assert_int_eq(n_new_of(st, b), 6);
	ck_assert_int_eq(st->n_tokens, 7);
	feed(&e, st);
	ck_assert_int_eq(b->n_computed, 12);
	env_deinit(&e);
}
END_TEST

START_TEST(test_fcfs_no_overtaking)
{
	/* A big request at the head of the queue that does not fit yet blocks
	 * smaller ones behind it: no starvation of the big one. */
	struct env e;
	env_init(&e, 8, 4, false, 8, 64, 32);
	int32_t p[32];
	fill_tokens(p, 32, 3);
	struct seq *a = add(&e, 1, p, 16, 4); /* 4 blocks (+1 for decode) */
	const struct sched_step *st = run(&e);
	ck_assert_int_eq(st->n_seqs, 1);
	feed(&e, st);
	struct seq *big = add(&e, 2, p, 20, 4); /* needs 5 blocks; 4 free minus... */
	struct seq *small = add(&e, 3, p, 2, 4);
	st = run(&e);
	/* a decodes (takes a 5th block); big needs 5 blocks but only 3 are free:
	 * it waits, and small (which would fit) does not overtake it. */
	ck_assert_int_eq(st->n_seqs, 1);
	ck_assert_ptr_eq(st->seqs[0], a);
	ck_assert_int_eq(big->status, SEQ_WAITING);
	ck_assert_int_eq(small->status, SEQ_WAITING);
	ck_assert_ptr_eq(sched_waiting(e.s, 0), big);
	feed(&e, st);
	int done = 0;
	for (int k = 0; k < 10 && !done; k++)
		done = feed(&e, run(&e)); /* a finishes and is destroyed by feed */
	ck_assert_int_eq(done, 1);
	ck_assert_int_eq(big->status, SEQ_WAITING);
	st = run(&e);
	ck_assert_ptr_eq(st->seqs[0], big);
	env_deinit(&e);
}
END_TEST

START_TEST(test_preempt_newest)
{
	struct env e;
	env_init(&e, 7, 4, true, 4, 64, 24);
	int32_t pa[8], pb[8], pc[7];
	fill_tokens(pa, 8, 1);
	fill_tokens(pb, 8, 2);
	fill_tokens(pc, 7, 3);
	struct seq *a = add(&e, 1, pa, 8, 4);
	struct seq *b = add(&e, 2, pb, 8, 4);
	struct seq *c = add(&e, 3, pc, 7, 4);
	const struct sched_step *st = run(&e);
	ck_assert_int_eq(st->n_seqs, 3);
	ck_assert_int_eq(sched_n_running(e.s), 3);
	feed(&e, st);
	/* 6 of 7 blocks held. a takes the last free one for position 8; b then
	 * needs one too: c, the newest, goes. */
	st = run(&e);
	ck_assert_int_eq(st->n_preempted, 1);
	ck_assert_int_eq(c->status, SEQ_WAITING);
	ck_assert_int_eq(c->kv.n_ids, 0);
	ck_assert_int_eq(c->n_computed, 0);
	ck_assert_int_eq(c->n_preemptions, 1);
	ck_assert_int_eq(c->n_tokens, 8); /* its generated token is kept */
	ck_assert_ptr_eq(sched_waiting(e.s, 0), c);
	ck_assert_int_eq(st->n_seqs, 2);
	ck_assert_ptr_eq(st->seqs[0], a);
	ck_assert_ptr_eq(st->seqs[1], b);
	struct sched_stats ss;
	sched_get_stats(e.s, &ss);
	ck_assert_uint_eq(ss.preemptions, 1);
	uint64_t hits_before = ss.prefix_hits;
	feed(&e, st);
	/* 7 blocks: a and b hold 3 each, c's cached first block is the 7th. c
	 * returns once a and b finish, its first block from the cache. */
	for (int k = 0; k < 20 && c->n_computed < 8; k++) {
		st = run(&e);
		if (c->n_computed >= 8)
			break;
		feed(&e, st);
	}
	sched_get_stats(e.s, &ss);
	ck_assert_uint_eq(ss.prefix_hits - hits_before, 4);
	ck_assert_int_eq(c->n_computed, 8); /* 4 cached + 4 recomputed (prompt + its token) */
	/* Its next token is what it would have produced alone. */
	int32_t want[9];
	memcpy(want, c->tokens, 8 * sizeof(int32_t));
	for (int i = 0; i < st->n_logits; i++)
		if (st->seqs[st->logits_seq[i]] == c)
			ck_assert_int_eq(e.next[i], fake_next_token(want, 8, VOCAB));
	env_deinit(&e);
}
END_TEST

START_TEST(test_fork_cow)
{
	struct env e;
	env_init(&e, 16, 4, true, 4, 64, 32);
	int32_t p[6];
	fill_tokens(p, 6, 5);
	struct seq *a = add(&e, 10, p, 6, 3);
	a->n_fork_pending = 2;
	const struct sched_step *st = run(&e);
	ck_assert_int_eq(st->n_logits, 1);
	struct seq *kids[2];
	ck_assert_int_eq(sched_fork(e.s, a, kids), 0);
	ck_assert_int_eq(a->n_fork_pending, 0);
	ck_assert_int_eq(sched_n_running(e.s), 3);
	for (int i = 0; i < a->kv.n_ids; i++)
		ck_assert_int_eq(kv_ref(e.pool, a->kv.ids[i]), 3);
	/* Three different first tokens (as a sampler would give). */
	sched_append_token(e.s, a, 7);
	sched_append_token(e.s, kids[0], 8);
	sched_append_token(e.s, kids[1], 9);
	st = run(&e);
	ck_assert_int_eq(st->n_seqs, 3);
	/* Block 1 (tokens 4..7) is shared and partial: two copies, the last
	 * writer owns the original. Block 0 stays shared. */
	ck_assert_int_eq(st->n_copies, 2);
	ck_assert_int_eq(kv_ref(e.pool, a->kv.ids[0]), 3);
	ck_assert_int_ne(a->kv.ids[1], kids[0]->kv.ids[1]);
	ck_assert_int_ne(kids[0]->kv.ids[1], kids[1]->kv.ids[1]);
	int32_t full[7];
	memcpy(full, p, sizeof(p));
	int32_t firsts[3] = {7, 8, 9};
	for (int i = 0; i < 3; i++) {
		full[6] = firsts[i];
		ck_assert_int_eq(e.next[i], fake_next_token(full, 7, VOCAB));
	}
	sched_finish(e.s, kids[0], FINISH_ABORT);
	sched_finish(e.s, kids[1], FINISH_ABORT);
	sched_finish(e.s, a, FINISH_ABORT);
	seq_destroy(kids[0]);
	seq_destroy(kids[1]);
	seq_destroy(a);
	struct kv_stats ks;
	kv_get_stats(e.pool, &ks);
	ck_assert_int_eq(ks.n_free, 16);
	env_deinit(&e);
}
END_TEST

START_TEST(test_cancel)
{
	struct env e;
	env_init(&e, 16, 4, true, 1, 64, 32);
	int32_t p[9];
	fill_tokens(p, 9, 9);
	struct seq *a = add(&e, 1, p, 9, 4);
	struct seq *b = add(&e, 2, p, 5, 4);
	const struct sched_step *st = run(&e);
	ck_assert_int_eq(st->n_seqs, 1); /* max_num_seqs 1 */
	feed(&e, st);
	ck_assert_int_eq(b->status, SEQ_WAITING);
	sched_finish(e.s, b, FINISH_ABORT);
	ck_assert_int_eq(sched_n_waiting(e.s), 0);
	ck_assert_int_eq(b->finish, FINISH_ABORT);
	seq_destroy(b);
	sched_finish(e.s, a, FINISH_ABORT);
	seq_destroy(a);
	struct kv_stats ks;
	kv_get_stats(e.pool, &ks);
	ck_assert_int_eq(ks.n_free, 16);
	st = run(&e);
	ck_assert_int_eq(st->n_seqs, 0);
	env_deinit(&e);
}
END_TEST

/* 20 requests sharing a 256-token system prompt, each with its own 20-token
 * question, all arriving at once. */
static uint64_t shared_prompt_tokens_computed(bool cache, uint64_t *hits)
{
	enum { N = 20, SYS = 256, Q = 20 };
	struct env e;
	env_init(&e, 400, 16, cache, 32, 512, 1024);
	int32_t p[SYS + Q];
	fill_tokens(p, SYS, 42);
	for (int i = 0; i < N; i++) {
		fill_tokens(p + SYS, Q, 1000 + i);
		add(&e, (uint64_t)i, p, SYS + Q, 4);
	}
	int done = 0;
	for (int step = 0; done < N; step++) {
		ck_assert_int_lt(step, 1000);
		done += feed(&e, run(&e));
	}
	struct sched_stats ss;
	sched_get_stats(e.s, &ss);
	ck_assert_uint_eq(ss.preemptions, 0);
	*hits = ss.prefix_hits;
	env_deinit(&e);
	return ss.prompt_tokens_computed;
}

START_TEST(test_shared_prefix_computed_once)
{
	uint64_t hits;
	uint64_t with = shared_prompt_tokens_computed(true, &hits);
	ck_assert_uint_eq(with, 256 + 20 * 20);
	ck_assert_uint_eq(hits, 19 * 256);
	uint64_t without = shared_prompt_tokens_computed(false, &hits);
	ck_assert_uint_eq(without, 20 * (256 + 20));
	ck_assert_uint_eq(hits, 0);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("sched");
	TCase *tc = tcase_create("policy");
	tcase_add_test(tc, test_validate);
	tcase_add_test(tc, test_chunked_prefill_decodes_first);
	tcase_add_test(tc, test_fcfs_no_overtaking);
	tcase_add_test(tc, test_preempt_newest);
	tcase_add_test(tc, test_fork_cow);
	tcase_add_test(tc, test_cancel);
	tcase_add_test(tc, test_shared_prefix_computed_once);
	suite_add_tcase(s, tc);
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
