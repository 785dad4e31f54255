/* tests/batching/test_batcher_engine.c — the batcher on the real CPU engine
 * with a tiny generated model (engine/model_gen.h) and its tokenizer.
 *
 * 30 requests sharing a system prompt, some with stop strings, run together
 * under a KV pool small enough to preempt; then each runs alone (one
 * sequence at a time, no prefix cache). Greedy tokens, text and finish
 * reasons must be identical, and streamed text must equal tok_decode of the
 * tokens when nothing was cut by a stop string.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batcher_util.h"
#include "batching/engine_thread.h"
#include "engine/engine.h"
#include "engine/model_gen.h"
#include "engine/tokenizer.h"

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

static struct batcher *make_batcher(struct fixture *f, struct waiter *w, int max_seqs, bool cache)
{
	struct bat_model bm;
	bat_model_engine(&bm, f->e, f->m->cfg.vocab);
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

static Suite *suite(void)
{
	Suite *s = suite_create("batcher_engine");
	TCase *tc = tcase_create("cpu");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_batched_equals_alone);
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
