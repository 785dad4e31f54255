/* tests/batching/test_engine_thread.c — the batcher (engine thread, inbox,
 * outbox, wake-ups, cancellation, queue limit, engine failure, validation)
 * against the paged fake engine (fake_engine.h): greedy outputs must equal
 * each request's output alone, events follow the protocol, and nothing is
 * left running or holding KV at the end. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batcher_util.h"
#include "batching/engine_thread.h"
#include "fake_engine.h"

#define VOCAB 64
#define EOS   0

/* The fake engine behind a gate (to hold a step) and a failure switch. */
struct fake_model {
	struct fake_engine fe;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool gate_closed;
	int in_forward;
	int fail_next;
	int32_t next[1024];
};

static int fm_forward(void *ctx, const struct engine_batch *b, float *logits)
{
	struct fake_model *fm = ctx;
	pthread_mutex_lock(&fm->mu);
	fm->in_forward++;
	pthread_cond_broadcast(&fm->cv);
	while (fm->gate_closed)
		pthread_cond_wait(&fm->cv, &fm->mu);
	bool fail = fm->fail_next > 0;
	if (fail)
		fm->fail_next--;
	pthread_mutex_unlock(&fm->mu);
	if (fail)
		return ERR_DEVICE;
	int rc = fake_engine_forward(&fm->fe, b, fm->next, logits);
	if (rc)
		fprintf(stderr, "fake engine: %s\n", fm->fe.err);
	return rc;
}

static int fm_copy(void *ctx, const int32_t *src, const int32_t *dst, int n)
{
	struct fake_model *fm = ctx;
	return fake_engine_copy_blocks(&fm->fe, src, dst, n);
}

static void fm_init(struct fake_model *fm, int n_blocks, int bs, struct bat_model *m)
{
	memset(fm, 0, sizeof(*fm));
	ck_assert_int_eq(fake_engine_init(&fm->fe, n_blocks, bs, VOCAB), 0);
	pthread_mutex_init(&fm->mu, NULL);
	pthread_cond_init(&fm->cv, NULL);
	memset(m, 0, sizeof(*m)); /* optional members (forward_sample) unset */
	m->ctx = fm;
	m->vocab = VOCAB;
	m->forward = fm_forward;
	m->copy_blocks = fm_copy;
}

static void fm_deinit(struct fake_model *fm)
{
	fake_engine_deinit(&fm->fe);
	pthread_mutex_destroy(&fm->mu);
	pthread_cond_destroy(&fm->cv);
}

static void fm_gate(struct fake_model *fm, bool closed)
{
	pthread_mutex_lock(&fm->mu);
	fm->gate_closed = closed;
	pthread_cond_broadcast(&fm->cv);
	pthread_mutex_unlock(&fm->mu);
}

/* Wait until the engine thread is inside a forward (behind the gate). */
static void fm_wait_in_forward(struct fake_model *fm, int n)
{
	pthread_mutex_lock(&fm->mu);
	while (fm->in_forward < n)
		pthread_cond_wait(&fm->cv, &fm->mu);
	pthread_mutex_unlock(&fm->mu);
}

static const int32_t eos_ids[1] = {EOS};

static struct bat_opts opts(int n_blocks, int bs, int max_seqs, int budget, int max_len,
                            struct waiter *w)
{
	struct bat_opts o = {.block_size = bs,
	                     .n_kv_blocks = n_blocks,
	                     .prefix_caching = true,
	                     .max_num_seqs = max_seqs,
	                     .max_num_batched_tokens = budget,
	                     .max_model_len = max_len,
	                     .max_queued_requests = 100000,
	                     .server_seed = 1,
	                     .eos_ids = eos_ids,
	                     .n_eos = 1,
	                     .tok = NULL,
	                     .wake = waiter_wake,
	                     .wake_arg = w};
	return o;
}

static struct bat_request greedy_req(uint64_t id, const int32_t *prompt, int n_prompt,
                                     int max_tokens, int n, void *user)
{
	struct bat_request r = {
	    .id = id, .prompt = prompt, .n_prompt = n_prompt, .n = n, .user = user};
	sampling_params_init(&r.params);
	r.params.temperature = 0;
	r.params.max_tokens = max_tokens;
	return r;
}

/* The greedy output of a prompt alone: the fake engine's reference. */
static void check_greedy(const struct res *r, const int32_t *prompt, int n_prompt, int max_tokens,
                         bool may_be_cut)
{
	int32_t all[RES_MAXT + 256];
	for (int k = 0; k < r->n; k++) {
		memcpy(all, prompt, (size_t)n_prompt * sizeof(int32_t));
		for (int j = 0; j < r->n_toks[k]; j++) {
			int32_t want = fake_next_token(all, n_prompt + j, VOCAB);
			if (r->toks[k][j] != want)
				ck_abort_msg("choice %d token %d: got %d, alone %d", k, j,
				             r->toks[k][j], want);
			all[n_prompt + j] = want;
		}
		ck_assert_int_eq(r->fin_completion[k], r->n_toks[k]);
		if (may_be_cut && r->fin[k] == FINISH_ABORT)
			continue;
		int n = r->n_toks[k];
		if (r->fin[k] == FINISH_STOP) {
			ck_assert_int_eq(r->toks[k][n - 1], EOS);
		} else {
			ck_assert_int_eq(r->fin[k], FINISH_LENGTH);
			ck_assert_int_eq(n, max_tokens);
			for (int j = 0; j < n; j++)
				ck_assert_int_ne(r->toks[k][j], EOS);
		}
	}
}

struct cancel_on_first {
	struct batcher *b;
	bool *want; /* by request index: cancel at its first token */
	struct res *res;
};

static void cancel_first_token(struct bat_event *ev, void *arg)
{
	struct cancel_on_first *c = arg;
	int i = (int)(ev->request_id - 1);
	if (c->want[i] && c->res[i].n_toks[0] + c->res[i].n_toks[1] == 0) {
		bat_cancel(c->b, ev->request_id);
		c->want[i] = false;
	}
}

START_TEST(test_many_requests_match_alone)
{
	enum { N = 400 };
	struct waiter w;
	waiter_init(&w);
	struct fake_model fm;
	struct bat_model m;
	fm_init(&fm, 40, 8, &m);
	struct bat_opts o = opts(40, 8, 8, 48, 160, &w);
	struct batcher *b;
	struct diag d = {0};
	ck_assert_msg(bat_create(&o, &m, &b, &d) == 0, "%s", d.msg);
	static struct res res[N];
	static int32_t prompts[N][100];
	int n_prompt[N], max_tokens[N];
	bool cancelled[N] = {0}, cancel_later[N] = {0};
	uint64_t rng = 12345;
	int32_t sys[2][64];
	for (int s = 0; s < 2; s++)
		for (int j = 0; j < 64; j++)
			sys[s][j] = 1 + (int32_t)((rng = rng * 6364136223846793005ULL + 1) >> 33) %
			                    (VOCAB - 1);
	for (int i = 0; i < N; i++) {
		rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
		int shared = (int)(rng >> 60) % 3; /* 0, 1: a system prompt; 2: none */
		int sl = shared < 2 ? 20 + (int)((rng >> 40) % 44) : 0;
		n_prompt[i] = sl + 1 + (int)((rng >> 20) % 36);
		for (int j = 0; j < n_prompt[i]; j++) {
			rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
			prompts[i][j] =
			    j < sl ? sys[shared][j] : 1 + (int32_t)((rng >> 33) % (VOCAB - 1));
		}
		max_tokens[i] = 1 + (int)((rng >> 10) % 30);
		int n = (rng >> 50) % 10 == 0 ? 2 + (int)((rng >> 8) % 2) : 1;
		res_init(&res[i], n);
		struct bat_request r =
		    greedy_req((uint64_t)i + 1, prompts[i], n_prompt[i], max_tokens[i], n, &res[i]);
		ck_assert_msg(bat_submit(b, &r, &d) == 0, "%s", d.msg);
		if (i % 10 == 3) {
			bat_cancel(b, (uint64_t)i + 1); /* right away */
			cancelled[i] = true;
		} else if (i % 10 == 7) {
			cancel_later[i] = cancelled[i] = true;
		}
	}
	bat_cancel(b, 999999); /* unknown: ignored */
	int ended = 0;
	struct cancel_on_first cf = {.b = b, .want = cancel_later, .res = res};
	drain_until(b, &w, &ended, N, 60, cancel_first_token, &cf);
	int n_abort = 0;
	for (int i = 0; i < N; i++) {
		ck_assert(res[i].done);
		check_greedy(&res[i], prompts[i], n_prompt[i], max_tokens[i], cancelled[i]);
		if (!cancelled[i])
			for (int k = 0; k < res[i].n; k++)
				ck_assert_int_ne(res[i].fin[k], FINISH_ABORT);
		n_abort += res[i].fin[0] == FINISH_ABORT;
		int total = 0;
		for (int k = 0; k < res[i].n; k++)
			total += res[i].n_toks[k];
		ck_assert_int_eq(res[i].end.completion_tokens, total);
		ck_assert_int_eq(res[i].end.prompt_tokens, n_prompt[i]);
		ck_assert_uint_ge(res[i].end.t_finish_ns, res[i].end.t_arrival_ns);
		if (total > 0) {
			ck_assert_uint_ge(res[i].end.t_first_token_ns,
			                  res[i].end.t_first_scheduled_ns);
			ck_assert_uint_ge(res[i].end.t_first_scheduled_ns, res[i].end.t_arrival_ns);
		}
		res_deinit(&res[i]);
	}
	ck_assert_int_gt(n_abort, 0);
	struct bat_stats st;
	bat_stats(b, &st);
	ck_assert_int_eq(st.n_running, 0);
	ck_assert_int_eq(st.n_waiting, 0);
	ck_assert_double_eq(st.kv_usage, 0.0);
	ck_assert_uint_gt(st.prefix_hits, 0);
	ck_assert_uint_eq(st.requests_done, N);
	fprintf(stderr, "batcher: %llu steps, %llu preemptions, %llu cancelled, hits %llu/%llu\n",
	        (unsigned long long)st.steps, (unsigned long long)st.preemptions,
	        (unsigned long long)st.requests_cancelled, (unsigned long long)st.prefix_hits,
	        (unsigned long long)st.prefix_queries);
	bat_destroy(b);
	fm_deinit(&fm);
	waiter_deinit(&w);
}
END_TEST

START_TEST(test_queue_full_and_cancel_waiting)
{
	struct waiter w;
	waiter_init(&w);
	struct fake_model fm;
	struct bat_model m;
	fm_init(&fm, 64, 8, &m);
	struct bat_opts o = opts(64, 8, 1, 64, 128, &w);
	o.max_queued_requests = 2;
	struct batcher *b;
	ck_assert_int_eq(bat_create(&o, &m, &b, NULL), 0);
	int32_t p[4] = {1, 2, 3, 4};
	struct res res[5];
	fm_gate(&fm, true);
	res_init(&res[0], 1);
	struct bat_request r = greedy_req(1, p, 4, 5, 1, &res[0]);
	ck_assert_int_eq(bat_submit(b, &r, NULL), 0);
	fm_wait_in_forward(&fm, 1); /* request 1 is running, held in its first step */
	for (int i = 1; i < 3; i++) {
		res_init(&res[i], 1);
		r = greedy_req((uint64_t)i + 1, p, 4, 5, 1, &res[i]);
		ck_assert_int_eq(bat_submit(b, &r, NULL), 0);
	}
	res_init(&res[3], 1);
	r = greedy_req(4, p, 4, 5, 1, &res[3]);
	struct diag d = {0};
	ck_assert_int_eq(bat_submit(b, &r, &d), ERR_FULL);
	ck_assert_ptr_nonnull(strstr(d.msg, "max-queued-requests"));
	struct bat_stats st;
	bat_stats(b, &st);
	ck_assert_int_eq(st.n_waiting, 2);
	/* Cancel a waiting one and the running one; let the engine go. */
	bat_cancel(b, 2);
	bat_cancel(b, 1);
	fm_gate(&fm, false);
	int ended = 0;
	drain_until(b, &w, &ended, 3, 30, NULL, NULL);
	ck_assert(res[0].done && res[1].done && res[2].done);
	ck_assert_int_eq(res[1].fin[0], FINISH_ABORT);
	ck_assert_int_eq(res[1].n_toks[0], 0);
	ck_assert_int_eq(res[2].fin[0] == FINISH_LENGTH || res[2].fin[0] == FINISH_STOP, 1);
	check_greedy(&res[2], p, 4, 5, false);
	/* Room again. */
	res_init(&res[4], 1);
	r = greedy_req(5, p, 4, 5, 1, &res[4]);
	ck_assert_int_eq(bat_submit(b, &r, NULL), 0);
	drain_until(b, &w, &ended, 4, 30, NULL, NULL);
	check_greedy(&res[4], p, 4, 5, false);
	bat_stats(b, &st);
	ck_assert_double_eq(st.kv_usage, 0.0);
	for (int i = 0; i < 5; i++)
		res_deinit(&res[i]);
	bat_destroy(b);
	fm_deinit(&fm);
	waiter_deinit(&w);
}
END_TEST

START_TEST(test_engine_failure)
{
	struct waiter w;
	waiter_init(&w);
	struct fake_model fm;
	struct bat_model m;
	fm_init(&fm, 64, 8, &m);
	struct bat_opts o = opts(64, 8, 4, 64, 128, &w);
	struct batcher *b;
	ck_assert_int_eq(bat_create(&o, &m, &b, NULL), 0);
	int32_t p[5] = {5, 6, 7, 8, 9};
	struct res res[2];
	fm.fail_next = 1;
	res_init(&res[0], 2);
	struct bat_request r = greedy_req(1, p, 5, 4, 2, &res[0]);
	ck_assert_int_eq(bat_submit(b, &r, NULL), 0);
	int ended = 0;
	drain_until(b, &w, &ended, 1, 30, NULL, NULL);
	ck_assert(res[0].error);
	ck_assert_int_eq(res[0].err, ERR_DEVICE);
	ck_assert_int_eq(res[0].fin[0], FINISH_ERROR);
	ck_assert_int_eq(res[0].fin[1], FINISH_ERROR);
	res_init(&res[1], 1);
	r = greedy_req(2, p, 5, 4, 1, &res[1]);
	ck_assert_int_eq(bat_submit(b, &r, NULL), 0);
	drain_until(b, &w, &ended, 2, 30, NULL, NULL);
	ck_assert(res[1].done);
	check_greedy(&res[1], p, 5, 4, false);
	struct bat_stats st;
	bat_stats(b, &st);
	ck_assert_uint_eq(st.requests_failed, 1);
	ck_assert_double_eq(st.kv_usage, 0.0);
	res_deinit(&res[0]);
	res_deinit(&res[1]);
	bat_destroy(b);
	fm_deinit(&fm);
	waiter_deinit(&w);
}
END_TEST

START_TEST(test_validation)
{
	struct waiter w;
	waiter_init(&w);
	struct fake_model fm;
	struct bat_model m;
	fm_init(&fm, 64, 8, &m);
	struct bat_opts o = opts(64, 8, 4, 64, 128, &w);
	struct batcher *b;
	ck_assert_int_eq(bat_create(&o, &m, &b, NULL), 0);
	int32_t p[130];
	for (int i = 0; i < 130; i++)
		p[i] = 1 + i % 60;
	struct diag d = {0};
	struct bat_request r = greedy_req(1, p, 100, 29, 1, NULL);
	ck_assert_int_eq(bat_submit(b, &r, &d), ERR_TOO_LARGE);
	ck_assert_ptr_nonnull(strstr(d.msg, "128"));
	ck_assert_ptr_nonnull(strstr(d.msg, "129"));
	r = greedy_req(1, p, 128, 1, 1, NULL); /* a full prompt: no room left */
	ck_assert_int_eq(bat_submit(b, &r, &d), ERR_TOO_LARGE);
	r = greedy_req(1, p, 10, -1, 1, NULL); /* max_tokens is the caller's to resolve */
	ck_assert_int_eq(bat_submit(b, &r, &d), ERR_INVAL);
	ck_assert_ptr_nonnull(strstr(d.msg, "max_tokens"));
	r = greedy_req(1, p, 10, 5, 5, NULL);
	ck_assert_int_eq(bat_submit(b, &r, &d), ERR_RANGE);
	p[3] = VOCAB;
	r = greedy_req(1, p, 10, 5, 1, NULL);
	ck_assert_int_eq(bat_submit(b, &r, &d), ERR_RANGE);
	ck_assert_ptr_nonnull(strstr(d.msg, "vocabulary"));
	p[3] = 1;
	r = greedy_req(1, p, 10, 5, 1, NULL);
	r.params.temperature = 7;
	ck_assert_int_eq(bat_submit(b, &r, &d), ERR_RANGE);
	r = greedy_req(1, p, 0, 5, 1, NULL);
	ck_assert_int_eq(bat_submit(b, &r, &d), ERR_INVAL);
	struct bat_stats st;
	bat_stats(b, &st);
	ck_assert_int_eq(st.n_waiting, 0);
	bat_destroy(b);
	fm_deinit(&fm);
	waiter_deinit(&w);
}
END_TEST

START_TEST(test_sampled_n_and_destroy_busy)
{
	/* n = 3 with temperature: choices draw from different streams (they
	 * diverge); fork + copy-on-write keep the fake engine's KV checks happy.
	 * Then destroy the batcher with requests still running. */
	struct waiter w;
	waiter_init(&w);
	struct fake_model fm;
	struct bat_model m;
	fm_init(&fm, 64, 4, &m);
	struct bat_opts o = opts(64, 4, 8, 64, 128, &w);
	struct batcher *b;
	ck_assert_int_eq(bat_create(&o, &m, &b, NULL), 0);
	int32_t p[6] = {3, 1, 4, 1, 5, 9};
	struct res res[2];
	res_init(&res[0], 3);
	struct bat_request r = greedy_req(1, p, 6, 40, 3, &res[0]);
	r.params.temperature = 1.5f;
	r.params.ignore_eos = true;
	r.params.logprobs = 2;
	ck_assert_int_eq(bat_submit(b, &r, NULL), 0);
	int ended = 0;
	drain_until(b, &w, &ended, 1, 30, NULL, NULL);
	ck_assert(res[0].done);
	for (int k = 0; k < 3; k++)
		ck_assert_int_eq(res[0].n_toks[k], 40);
	ck_assert(memcmp(res[0].toks[0], res[0].toks[1], 40 * sizeof(int32_t)) != 0 ||
	          memcmp(res[0].toks[0], res[0].toks[2], 40 * sizeof(int32_t)) != 0);
	res_init(&res[1], 2);
	r = greedy_req(2, p, 6, 100, 2, &res[1]);
	r.params.ignore_eos = true;
	ck_assert_int_eq(bat_submit(b, &r, NULL), 0);
	bat_destroy(b); /* mid-flight: must not leak or crash (ASan) */
	res_deinit(&res[0]);
	res_deinit(&res[1]);
	fm_deinit(&fm);
	waiter_deinit(&w);
}
END_TEST

START_TEST(test_shared_prompt_computed_once)
{
	/* 20 requests with one 64-token system prompt (8 blocks) and their own
	 * 10-token questions, submitted while the engine runs: whatever the
	 * timing, the system prompt's KV is computed once. */
	enum { N = 20, SYS = 64, Q = 10 };
	struct waiter w;
	waiter_init(&w);
	struct fake_model fm;
	struct bat_model m;
	fm_init(&fm, 256, 8, &m);
	struct bat_opts o = opts(256, 8, 32, 256, 128, &w);
	struct batcher *b;
	ck_assert_int_eq(bat_create(&o, &m, &b, NULL), 0);
	static int32_t p[N][SYS + Q];
	static struct res res[N];
	for (int i = 0; i < N; i++) {
		for (int j = 0; j < SYS; j++)
			p[i][j] = 1 + (j * 13) % (VOCAB - 1);
		for (int j = SYS; j < SYS + Q; j++)
			p[i][j] = 1 + (i * 31 + j * 7) % (VOCAB - 1);
		res_init(&res[i], 1);
		struct bat_request r = greedy_req((uint64_t)i + 1, p[i], SYS + Q, 3, 1, &res[i]);
		ck_assert_int_eq(bat_submit(b, &r, NULL), 0);
	}
	int ended = 0;
	drain_until(b, &w, &ended, N, 30, NULL, NULL);
	struct bat_stats st;
	bat_stats(b, &st);
	ck_assert_uint_eq(st.preemptions, 0);
	ck_assert_uint_eq(st.prompt_tokens_computed, SYS + N * Q);
	ck_assert_uint_eq(st.prefix_hits, (N - 1) * SYS);
	int cached = 0;
	for (int i = 0; i < N; i++) {
		ck_assert(res[i].done);
		check_greedy(&res[i], p[i], SYS + Q, 3, false);
		cached += res[i].end.cached_tokens;
		res_deinit(&res[i]);
	}
	ck_assert_int_eq(cached, (N - 1) * SYS);
	bat_destroy(b);
	fm_deinit(&fm);
	waiter_deinit(&w);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("engine_thread");
	TCase *tc = tcase_create("fake");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_many_requests_match_alone);
	tcase_add_test(tc, test_queue_full_and_cancel_waiting);
	tcase_add_test(tc, test_engine_failure);
	tcase_add_test(tc, test_validation);
	tcase_add_test(tc, test_sampled_n_and_destroy_busy);
	tcase_add_test(tc, test_shared_prompt_computed_once);
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
