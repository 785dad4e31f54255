/* tests/batching/test_batcher_engine.c — the batcher on the real CPU engine
 * with a tiny generated model (engine/model/model_gen.h) and its tokenizer.
 *
 * 30 requests sharing a system prompt, some with stop strings, run together
 * under a KV pool small enough to preempt; then each runs alone (one
 * sequence at a time, no prefix cache). Greedy tokens, text and finish
 * reasons must be identical, and streamed text must equal tok_decode of the
 * tokens when nothing was cut by a stop string.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batcher_util.h"
#include "batching/engine_thread.h"
#include "engine/engine.h"
#include "engine/model/model_gen.h"
#include "engine/tok/tokenizer.h"

#define N       30
#define BS      16
#define MAX_LEN 192

struct fixture {
	char dir[64], path[96];
	struct model *m;
	struct tokenizer *tok;
	struct engine *e;
};

static void fixture_init(struct fixture *f)
{
	memset(f, 0, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/aorta-bat-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/tiny.gguf", f->dir);
	struct model_gen_opts g;
	model_gen_default_opts(&g);
	g.cfg.n_layers = 2;
	g.cfg.hidden = 64;
	g.cfg.n_heads = 4;
	g.cfg.n_kv_heads = 2;
	g.cfg.head_dim = 16;
	g.cfg.ffn = 128;
	g.cfg.max_ctx = 512;
	g.dtype = DT_F32;
	g.seed = 11;
	struct diag d = {0};
	ck_assert_msg(model_gen_write_gguf(&g, f->path, &d) == 0, "%s", d.msg);
	ck_assert_msg(model_load(f->path, &f->m, &d) == 0, "%s", d.msg);
	ck_assert_msg(tok_load_for_model(f->m, &f->tok, &d) == 0, "%s", d.msg);
	struct engine_opts eo = {.n_threads = 2,
	                         .block_size = BS,
	                         .n_kv_blocks = 12,
	                         .kv_dtype = DT_F32,
	                         .quantization = DT_F32,
	                         .max_batch_tokens = 64,
	                         .max_seqs = 6,
	                         .max_blocks_per_seq = MAX_LEN / BS};
	ck_assert_msg(engine_create(f->m, &eo, &f->e, &d) == 0, "%s", d.msg);
}

static void fixture_deinit(struct fixture *f)
{
	engine_destroy(f->e);
	tok_destroy(f->tok);
	model_destroy(f->m);
	unlink(f->path);
	rmdir(f->dir);
}

static struct batcher *make_batcher_x(struct fixture *f, struct waiter *w, int max_seqs,
                                      bool cache, bool sample_in_engine)
{
	struct bat_model bm;
	bat_model_engine(&bm, f->e, f->m->cfg.vocab);
	if (sample_in_engine)
		bat_model_sample_in_engine(&bm);
	struct bat_opts o = {.block_size = BS,
	                     .n_kv_blocks = 12,
	                     .prefix_caching = cache,
	                     .max_num_seqs = max_seqs,
	                     .max_num_batched_tokens = 64,
	                     .max_model_len = MAX_LEN,
	                     .max_queued_requests = 1000,
	                     .server_seed = 5,
	                     .eos_ids = f->m->cfg.eos_ids,
	                     .n_eos = f->m->cfg.n_eos_ids,
	                     .tok = f->tok,
	                     .wake = waiter_wake,
	                     .wake_arg = w};
	struct batcher *b;
	struct diag d = {0};
	ck_assert_msg(bat_create(&o, &bm, &b, &d) == 0, "%s", d.msg);
	return b;
}

static struct batcher *make_batcher(struct fixture *f, struct waiter *w, int max_seqs, bool cache)
{
	return make_batcher_x(f, w, max_seqs, cache, false);
}

struct reqs {
	int32_t *prompt[N];
	size_t n_prompt[N];
	int max_tokens[N];
	const char *stop[N][1];
	int n_stop[N];
};

static void make_requests(struct fixture *f, struct reqs *q)
{
	const char *sys = "You are a careful assistant. Answer briefly and do not repeat the "
	                  "question. ";
	char text[256];
	for (int i = 0; i < N; i++) {
		snprintf(text, sizeof(text), "%sQuestion %d: what is %d times %d?",
		         i % 3 ? sys : "", i, i * 7, i + 3);
		ck_assert_int_eq(tok_encode(f->tok, text, strlen(text), TOK_ADD_SPECIAL,
		                            &q->prompt[i], &q->n_prompt[i]),
		                 0);
		ck_assert_int_lt((int)q->n_prompt[i], MAX_LEN - 40);
		q->max_tokens[i] = 4 + (i * 7) % 30;
		q->n_stop[i] = i % 4 == 1;
		q->stop[i][0] = "\\h"; /* common in this model's (random) output */
	}
}

static struct bat_request request(struct reqs *q, int i, struct res *r)
{
	struct bat_request br = {.id = (uint64_t)i + 1,
	                         .prompt = q->prompt[i],
	                         .n_prompt = (int)q->n_prompt[i],
	                         .n = 1,
	                         .user = r};
	sampling_params_init(&br.params);
	br.params.temperature = 0;
	br.params.max_tokens = q->max_tokens[i];
	br.params.stop = q->stop[i];
	br.params.n_stop = q->n_stop[i];
	return br;
}

START_TEST(test_batched_equals_alone)
{
	struct fixture f;
	fixture_init(&f);
	struct reqs q;
	make_requests(&f, &q);
	struct waiter w;
	waiter_init(&w);
	static struct res together[N], alone[N];
	struct diag d = {0};

	struct batcher *b = make_batcher(&f, &w, 6, true);
	for (int i = 0; i < N; i++) {
		res_init(&together[i], 1);
		struct bat_request br = request(&q, i, &together[i]);
		ck_assert_msg(bat_submit(b, &br, &d) == 0, "%s", d.msg);
	}
	int ended = 0;
	drain_until(b, &w, &ended, N, 120, NULL, NULL);
	struct bat_stats st;
	bat_stats(b, &st);
	fprintf(stderr, "real engine: %llu steps, %llu preemptions, prefix hits %llu/%llu\n",
	        (unsigned long long)st.steps, (unsigned long long)st.preemptions,
	        (unsigned long long)st.prefix_hits, (unsigned long long)st.prefix_queries);
	ck_assert_uint_gt(st.preemptions, 0);
	ck_assert_uint_gt(st.prefix_hits, 0);
	ck_assert_double_eq(st.kv_usage, 0.0);
	bat_destroy(b);

	b = make_batcher(&f, &w, 1, false);
	ended = 0;
	for (int i = 0; i < N; i++) {
		res_init(&alone[i], 1);
		struct bat_request br = request(&q, i, &alone[i]);
		ck_assert_msg(bat_submit(b, &br, &d) == 0, "%s", d.msg);
		drain_until(b, &w, &ended, i + 1, 60, NULL, NULL);
	}
	bat_destroy(b);

	int n_stopped = 0;
	for (int i = 0; i < N; i++) {
		struct res *t = &together[i], *a = &alone[i];
		ck_assert(t->done && a->done);
		ck_assert_int_eq(t->n_toks[0], a->n_toks[0]);
		for (int j = 0; j < t->n_toks[0]; j++)
			ck_assert_msg(t->toks[0][j] == a->toks[0][j],
			              "request %d token %d: %d vs %d", i, j, t->toks[0][j],
			              a->toks[0][j]);
		ck_assert_int_eq(t->fin[0], a->fin[0]);
		ck_assert_uint_eq(t->text[0].len, a->text[0].len);
		if (t->text[0].len)
			ck_assert_mem_eq(t->text[0].data, a->text[0].data, t->text[0].len);
		if (q.n_stop[i]) {
			/* Text stops before the stop string, which is never shown. */
			ck_assert(!t->text[0].data || !strstr(t->text[0].data, "\\h"));
			n_stopped += t->fin[0] == FINISH_STOP;
		}
		if (!q.n_stop[i] && t->fin[0] == FINISH_LENGTH) {
			struct buf ref;
			buf_init(&ref);
			ck_assert_int_eq(tok_decode(f.tok, t->toks[0], (size_t)t->n_toks[0],
			                            TOK_SKIP_SPECIAL, &ref),
			                 0);
			ck_assert_uint_eq(ref.len, t->text[0].len);
			if (ref.len)
				ck_assert_mem_eq(ref.data, t->text[0].data, ref.len);
			buf_deinit(&ref);
		}
		res_deinit(t);
		res_deinit(a);
		free(q.prompt[i]);
	}
	fprintf(stderr, "real engine: %d requests ended on the stop string\n", n_stopped);
	ck_assert_int_gt(n_stopped, 0);
	waiter_deinit(&w);
	fixture_deinit(&f);
}
END_TEST

/* ---- sampling in the engine (the device path) == sampling on the host ---- */

#define NS 12

struct lp_log {
	struct res *base; /* res[NS]: event user -> request index */
	float lp[NS][RES_MAXT];
	int rank[NS][RES_MAXT];
	int32_t top[NS][RES_MAXT][5];
	int n[NS];
};

static void log_lp(struct bat_event *ev, void *arg)
{
	struct lp_log *l = arg;
	int i = (int)((struct res *)ev->user - l->base);
	if (i < 0 || i >= NS || !ev->has_logprobs || ev->index != 0 || l->n[i] >= RES_MAXT)
		return;
	l->lp[i][l->n[i]] = ev->lp.logprob;
	l->rank[i][l->n[i]] = ev->lp.rank;
	for (int k = 0; k < 5; k++)
		l->top[i][l->n[i]][k] = k < ev->lp.n_top ? ev->lp.top[k].token : -1;
	l->n[i]++;
}

static void run_sampled(struct fixture *f, struct reqs *q, bool in_engine, struct res *out,
                        struct lp_log *lp)
{
	static const struct sampler_logit_bias bias[2] = {{.token = 65, .bias = 3.0f},
	                                                  {.token = 66, .bias = -100.0f}};
	struct waiter w;
	waiter_init(&w);
	struct batcher *b = make_batcher_x(f, &w, 6, true, in_engine);
	struct diag d = {0};
	memset(lp, 0, sizeof(*lp));
	lp->base = out;
	for (int i = 0; i < NS; i++) {
		res_init(&out[i], i == 5 ? 2 : 1);
		struct bat_request br = request(q, i, &out[i]);
		br.n = i == 5 ? 2 : 1; /* a fork: that step samples on the host */
		br.params.temperature = 0.5f + 0.1f * (float)i;
		br.params.top_k = i % 3 == 0 ? 0 : 5 + i;
		br.params.top_p = i % 2 ? 0.9f : 1.0f;
		br.params.min_p = i % 4 == 3 ? 0.05f : 0.0f;
		br.params.repetition_penalty = i % 5 == 1 ? 1.2f : 1.0f;
		br.params.frequency_penalty = i % 3 == 1 ? 0.4f : 0.0f;
		br.params.presence_penalty = i % 3 == 2 ? -0.3f : 0.0f;
		br.params.min_tokens = i % 4 == 0 ? 3 : 0;
		br.params.logprobs = i % 6;
		br.params.has_seed = true;
		br.params.seed = 1000 + (uint64_t)i;
		if (i % 4 == 2) {
			br.params.logit_bias = bias;
			br.params.n_logit_bias = 2;
		}
		if (i == 7)
			br.params.temperature = 0; /* greedy among sampled ones */
		ck_assert_msg(bat_submit(b, &br, &d) == 0, "%s", d.msg);
	}
	int ended = 0;
	drain_until(b, &w, &ended, NS, 120, log_lp, lp);
	bat_destroy(b);
	waiter_deinit(&w);
}

START_TEST(test_sampling_in_engine_equals_host)
{
	struct fixture f;
	fixture_init(&f);
	struct reqs q;
	make_requests(&f, &q);
	static struct res host[NS], dev[NS];
	static struct lp_log lh, ld;
	run_sampled(&f, &q, false, host, &lh);
	run_sampled(&f, &q, true, dev, &ld);
	int n_tokens = 0;
	for (int i = 0; i < NS; i++) {
		ck_assert(host[i].done && dev[i].done);
		for (int c = 0; c < host[i].n; c++) {
			ck_assert_int_eq(host[i].n_toks[c], dev[i].n_toks[c]);
			for (int j = 0; j < host[i].n_toks[c]; j++)
				ck_assert_msg(host[i].toks[c][j] == dev[i].toks[c][j],
				              "request %d choice %d token %d: host %d engine %d", i, c, j,
				              host[i].toks[c][j], dev[i].toks[c][j]);
			n_tokens += host[i].n_toks[c];
			ck_assert_int_eq(host[i].fin[c], dev[i].fin[c]);
		}
		ck_assert_int_eq(lh.n[i], ld.n[i]);
		for (int j = 0; j < lh.n[i]; j++) {
			ck_assert_msg(fabsf(lh.lp[i][j] - ld.lp[i][j]) <= 1e-5f,
			              "request %d token %d: logprob %g vs %g", i, j, lh.lp[i][j],
			              ld.lp[i][j]);
			ck_assert_int_eq(lh.rank[i][j], ld.rank[i][j]);
			for (int k = 0; k < 5; k++)
				ck_assert_int_eq(lh.top[i][j][k], ld.top[i][j][k]);
		}
		res_deinit(&host[i]);
		res_deinit(&dev[i]);
	}
	fprintf(stderr, "sampling in the engine: %d tokens identical to the host sampler\n",
	        n_tokens);
	ck_assert_int_gt(n_tokens, 100);
	for (int i = 0; i < N; i++)
		free(q.prompt[i]);
	fixture_deinit(&f);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("batcher_engine");
	TCase *tc = tcase_create("cpu");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_batched_equals_alone);
	tcase_add_test(tc, test_sampling_in_engine_equals_host);
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
