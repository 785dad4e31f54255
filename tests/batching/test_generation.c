/* tests/batching/test_generation.c — batching/generation.h and batching/finish.h:
 * finish reasons (EOS, stop ids, stop strings, max_tokens, context limit,
 * abort), min_tokens, and streamed text equal to the non-streamed text.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "batching/finish.h"
#include "batching/generation.h"

struct tok {
	int32_t id;
	const char *text;
};

static const int32_t k_eos[2] = { 2, 3 };

/* Run tokens through a generation; returns the text (caller frees) and the
 * number of tokens consumed before it finished. */
static char *run(const struct sampling_params *p, int n_prompt, int max_model_len,
		 const struct tok *toks, int n, struct generation *g, int *consumed)
{
	struct buf out;
	buf_init(&out);
	ck_assert_int_eq(generation_init(g, p, n_prompt, max_model_len, k_eos, 2), 0);
	int i = 0;
	for (; i < n && g->finish == FINISH_NONE; i++)
		ck_assert_int_eq(generation_step(g, toks[i].id, toks[i].text,
						 strlen(toks[i].text), &out),
				 0);
	*consumed = i;
	size_t len;
	return buf_take(&out, &len);
}

START_TEST(test_finish_names)
{
	ck_assert_str_eq(finish_reason_str(FINISH_STOP), "stop");
	ck_assert_str_eq(finish_reason_str(FINISH_LENGTH), "length");
	ck_assert_str_eq(finish_reason_str(FINISH_ABORT), "abort");
	ck_assert_str_eq(finish_reason_str(FINISH_ERROR), "error");
	ck_assert_ptr_null(finish_reason_str(FINISH_NONE));
}
END_TEST

START_TEST(test_eos_and_stop_ids)
{
	const char *stops[] = { "END" };
	struct sampling_params p;
	sampling_params_init(&p);
	p.stop = stops;
	p.n_stop = 1;
	struct tok t[] = { { 10, "hi" }, { 11, " E" }, { 3, "</s>" }, { 12, "never" } };
	struct generation g;
	int used;
	char *s = run(&p, 5, 0, t, 4, &g, &used);
	ck_assert_str_eq(s, "hi E"); /* held "E" released, EOS text not shown */
	ck_assert_int_eq(g.finish, FINISH_STOP);
	ck_assert_int_eq(g.stop_token, 3);
	ck_assert_int_eq(used, 3);
	struct buf out;
	buf_init(&out);
	ck_assert_int_eq(generation_step(&g, 1, "x", 1, &out), ERR_STATE);
	buf_deinit(&out);
	generation_deinit(&g);
	free(s);

	/* ignore_eos: EOS is an ordinary token */
	p.ignore_eos = true;
	s = run(&p, 5, 0, t, 4, &g, &used);
	ck_assert_str_eq(s, "hi E</s>never");
	ck_assert_int_eq(g.finish, FINISH_NONE);
	generation_deinit(&g);
	free(s);

	/* a stop token id ends it even with ignore_eos */
	int32_t ids[1] = { 12 };
	p.stop_token_ids = ids;
	p.n_stop_token_ids = 1;
	s = run(&p, 5, 0, t, 4, &g, &used);
	ck_assert_str_eq(s, "hi E</s>");
	ck_assert_int_eq(g.finish, FINISH_STOP);
	ck_assert_int_eq(g.stop_token, 12);
	generation_deinit(&g);
	free(s);
}
END_TEST

START_TEST(test_stop_string_and_length)
{
	const char *stops[] = { "\n\n", "END" };
	struct sampling_params p;
	sampling_params_init(&p);
	p.stop = stops;
	p.n_stop = 2;
	struct tok t[] = { { 10, "a" }, { 11, "E" }, { 12, "N" }, { 13, "Dzz" }, { 14, "b" } };
	struct generation g;
	int used;
	char *s = run(&p, 1, 0, t, 5, &g, &used);
	ck_assert_str_eq(s, "a");
	ck_assert_int_eq(g.finish, FINISH_STOP);
	ck_assert_int_eq(g.stop_string, 1);
	ck_assert_int_eq(used, 4);
	generation_deinit(&g);
	free(s);

	/* max_tokens 3: "aEN" with "EN" held is released at the end */
	p.max_tokens = 3;
	s = run(&p, 1, 0, t, 5, &g, &used);
	ck_assert_str_eq(s, "aEN");
	ck_assert_int_eq(g.finish, FINISH_LENGTH);
	ck_assert_int_eq(used, 3);
	generation_deinit(&g);
	free(s);

	/* context limit: prompt 10 + 2 generated = 12 */
	p.max_tokens = -1;
	s = run(&p, 10, 12, t, 5, &g, &used);
	ck_assert_str_eq(s, "aE");
	ck_assert_int_eq(g.finish, FINISH_LENGTH);
	ck_assert_int_eq(used, 2);
	generation_deinit(&g);
	free(s);

	/* a stop string on the last allowed token: "stop" wins over "length" */
	p.max_tokens = 4;
	s = run(&p, 1, 0, t, 5, &g, &used);
	ck_assert_str_eq(s, "a");
	ck_assert_int_eq(g.finish, FINISH_STOP);
	generation_deinit(&g);
	free(s);
}
END_TEST

START_TEST(test_min_tokens)
{
	const char *stops[] = { "ab" };
	struct sampling_params p;
	sampling_params_init(&p);
	p.stop = stops;
	p.n_stop = 1;
	p.min_tokens = 3;
	/* EOS and a stop string before min_tokens are ordinary text */
	struct tok t[] = { { 10, "ab" }, { 2, "<e>" }, { 11, "a" }, { 12, "b" }, { 13, "c" } };
	struct generation g;
	int used;
	char *s = run(&p, 1, 0, t, 5, &g, &used);
	ck_assert_str_eq(s, "ab<e>");
	ck_assert_int_eq(g.finish, FINISH_STOP);
	ck_assert_int_eq(g.stop_string, 0);
	ck_assert_int_eq(used, 4);
	generation_deinit(&g);
	free(s);
}
END_TEST

START_TEST(test_abort)
{
	const char *stops[] = { "END" };
	struct sampling_params p;
	sampling_params_init(&p);
	p.stop = stops;
	p.n_stop = 1;
	struct generation g;
	struct buf out;
	buf_init(&out);
	ck_assert_int_eq(generation_init(&g, &p, 1, 0, k_eos, 2), 0);
	ck_assert_int_eq(generation_step(&g, 5, "xE", 2, &out), 0);
	ck_assert_str_eq(out.data, "x");
	ck_assert_int_eq(generation_abort(&g, FINISH_LENGTH), ERR_INVAL);
	ck_assert_int_eq(generation_abort(&g, FINISH_ABORT), 0);
	ck_assert_int_eq(g.finish, FINISH_ABORT);
	ck_assert_int_eq(generation_abort(&g, FINISH_ERROR), 0); /* already finished */
	ck_assert_int_eq(g.finish, FINISH_ABORT);
	ck_assert_int_eq(generation_step(&g, 5, "y", 1, &out), ERR_STATE);
	ck_assert_str_eq(out.data, "x");
	generation_deinit(&g);
	buf_deinit(&out);
	ck_assert_int_eq(generation_init(&g, &p, 1, 0, k_eos, SAMPLER_MAX_EOS + 1), ERR_RANGE);
	generation_deinit(&g);
}
END_TEST

/* The text the stream delivers, concatenated, equals the text a
 * non-streaming response returns (the full text cut by one matcher pass). */
START_TEST(test_streaming_equals_nonstreaming)
{
	const char *stops[] = { "\xE2\x82\xAC!", "stop here" };
	struct sampling_params p;
	sampling_params_init(&p);
	p.stop = stops;
	p.n_stop = 2;
	struct tok t[] = { { 1, "Price: 5" }, { 4, "\xE2\x82\xAC" }, { 5, " or st" },
			   { 6, "op" }, { 7, " h" }, { 8, "ere" }, { 9, " tail" } };
	struct generation g;
	int used;
	char *streamed = run(&p, 1, 0, t, 7, &g, &used);
	generation_deinit(&g);

	struct buf all, one;
	buf_init(&all);
	buf_init(&one);
	for (int i = 0; i < 7; i++)
		buf_append_str(&all, t[i].text);
	struct stop_matcher m;
	ck_assert_int_eq(stop_matcher_init(&m, stops, 2), 0);
	int which;
	ck_assert_int_eq(stop_matcher_feed(&m, all.data, all.len, true, &one, &which), 0);
	ck_assert_int_eq(which, 1);
	ck_assert_str_eq(one.data, "Price: 5\xE2\x82\xAC or ");
	ck_assert_str_eq(streamed, one.data);
	stop_matcher_deinit(&m);
	buf_deinit(&all);
	buf_deinit(&one);
	free(streamed);
}
END_TEST

static Suite *generation_suite(void)
{
	Suite *s = suite_create("generation");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_finish_names);
	tcase_add_test(tc, test_eos_and_stop_ids);
	tcase_add_test(tc, test_stop_string_and_length);
	tcase_add_test(tc, test_min_tokens);
	tcase_add_test(tc, test_abort);
	tcase_add_test(tc, test_streaming_equals_nonstreaming);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(generation_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
