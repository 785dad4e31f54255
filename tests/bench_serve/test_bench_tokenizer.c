/* tests/bench_serve/test_bench_tokenizer.c — workloads built with --tokenizer
 * from the shared tokenizer fixtures (byte-level BPE: llama3, qwen3;
 * SentencePiece-style: mistral): prompts encode to the requested length,
 * prompt_len is the count with special tokens, same seed gives the same text,
 * shared prefixes are shared. Exits 77 when $AORTA_FIXTURES is absent. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/tok/tokenizer.h"
#include "server/bench/bench_serve.h"

static char fixtures[1024];

static const char *const names[] = {"llama3", "qwen3", "mistral"};

static struct tokenizer *load(const char *name, char *dir, size_t cap)
{
	snprintf(dir, cap, "%s/tokenizers/%s", fixtures, name);
	char json[1200], cfg[1200];
	snprintf(json, sizeof json, "%s/tokenizer.json", dir);
	snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
	struct tokenizer *t = NULL;
	struct diag d = {0};
	ck_assert_msg(tok_load_json(json, cfg, &t, &d) == 0, "%s: %s", name, d.msg);
	return t;
}

static size_t count(const struct tokenizer *t, const char *text, unsigned flags)
{
	int32_t *ids;
	size_t n;
	ck_assert_int_eq(tok_encode(t, text, strlen(text), flags, &ids, &n), 0);
	free(ids);
	return n;
}

START_TEST(test_exact_lengths)
{
	char dir[1100];
	struct tokenizer *t = load(names[_i], dir, sizeof dir);
	struct bench_config c;
	bench_config_defaults(&c);
	c.tokenizer_path = dir;
	c.num_prompts = 8;
	c.input_len = 50;
	c.seed = 11;
	struct bench_workload w, w2;
	struct diag d = {0};
	ck_assert_msg(bench_workload_build(&c, &w, &d) == 0, "%s", d.msg);
	int exact = 0;
	for (int i = 0; i < w.n; i++) {
		size_t n = count(t, w.items[i].text, 0);
		exact += n == 50;
		for (const char *ch = w.items[i].text; *ch; ch++) /* no control bytes */
			ck_assert_int_ge((unsigned char)*ch, 0x20);
		ck_assert_msg(n >= 48 && n <= 52, "%s prompt %d: %zu tokens", names[_i], i, n);
		ck_assert_int_eq(w.items[i].prompt_len,
		                 (int)count(t, w.items[i].text, TOK_ADD_SPECIAL));
	}
	ck_assert_msg(exact >= 6, "%s: only %d of 8 prompts exact", names[_i], exact);
	ck_assert_int_eq(bench_workload_build(&c, &w2, &d), 0);
	for (int i = 0; i < w.n; i++)
		ck_assert_str_eq(w.items[i].text, w2.items[i].text);
	bench_workload_free(&w2);
	bench_workload_free(&w);

	/* shared prefixes: group members start with the same text */
	c.prefix_len = 40;
	c.num_prefix_groups = 3;
	c.input_len = 10;
	ck_assert_int_eq(bench_workload_build(&c, &w, &d), 0);
	size_t common = 0;
	while (w.items[0].text[common] && w.items[0].text[common] == w.items[3].text[common])
		common++;
	ck_assert_uint_ge(common, 20); /* the shared part is long (bytes) */
	ck_assert(strncmp(w.items[0].text, w.items[1].text, common));
	for (int i = 0; i < w.n; i++) {
		size_t n = count(t, w.items[i].text, 0);
		ck_assert_msg(n >= 47 && n <= 53, "%s prefixed prompt %d: %zu", names[_i], i, n);
	}
	bench_workload_free(&w);
	tok_destroy(t);
}
END_TEST

START_TEST(test_bad_tokenizer_path)
{
	struct bench_config c;
	bench_config_defaults(&c);
	c.tokenizer_path = "/nonexistent/tokenizer.json";
	struct bench_workload w;
	struct diag d = {0};
	ck_assert_int_ne(bench_workload_build(&c, &w, &d), 0);
	ck_assert_ptr_null(w.items);
}
END_TEST

int main(void)
{
	const char *f = getenv("AORTA_FIXTURES");
	snprintf(fixtures, sizeof fixtures, "%s", f ? f : "");
	char probe[1100];
	snprintf(probe, sizeof probe, "%s/tokenizers/llama3/tokenizer.json", fixtures);
	if (!f || access(probe, R_OK)) {
		fprintf(stderr, "SKIP: tokenizer fixtures not found under $AORTA_FIXTURES ('%s')\n",
		        fixtures);
		return 77;
	}
	Suite *s = suite_create("bench_tokenizer");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_exact_lengths, 0, 3);
	tcase_add_test(tc, test_bad_tokenizer_path);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf ? 1 : 0;
}
