/* tests/api/test_metrics_text.c — api/metrics_text (Prometheus text format)
 * and common/histogram (concurrent observe, snapshot). */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/metrics_text.h"
#include "common/err.h"
#include "common/histogram.h"

START_TEST(test_counter_gauge)
{
	struct buf b, l;
	buf_init(&b);
	buf_init(&l);
	const char *k[] = {"model_name"};
	const char *v[] = {"ti\"ny\\x\n"};
	ck_assert_int_eq(api_metrics_labels(&l, k, v, 1), 0);
	ck_assert_str_eq(l.data, "model_name=\"ti\\\"ny\\\\x\\n\"");
	ck_assert_int_eq(api_metrics_counter(&b, API_M_PROMPT_TOKENS,
					     "Number of prefill tokens processed.\nback\\slash",
					     l.data, 12345),
			 0);
	ck_assert_int_eq(api_metrics_gauge(&b, API_M_KV_CACHE_USAGE, "KV-cache usage. 1 means 100 percent usage.",
					   NULL, 0.25),
			 0);
	ck_assert_int_eq(api_metrics_gauge(&b, API_M_REQUESTS_RUNNING, NULL, NULL, 3), 0);
	ck_assert_str_eq(b.data,
			 "# HELP aorta:prompt_tokens_total Number of prefill tokens processed.\\nback\\\\slash\n"
			 "# TYPE aorta:prompt_tokens_total counter\n"
			 "aorta:prompt_tokens_total{model_name=\"ti\\\"ny\\\\x\\n\"} 12345\n"
			 "# HELP aorta:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
			 "# TYPE aorta:kv_cache_usage_perc gauge\n"
			 "aorta:kv_cache_usage_perc 0.25\n"
			 "# TYPE aorta:num_requests_running gauge\n"
			 "aorta:num_requests_running 3\n");
	buf_clear(&b);
	ck_assert_int_eq(api_metrics_gauge(&b, "g", NULL, NULL, INFINITY), 0);
	ck_assert_int_eq(api_metrics_gauge(&b, "h", NULL, NULL, NAN), 0);
	ck_assert_int_eq(api_metrics_gauge(&b, "i", NULL, NULL, 0.1), 0);
	ck_assert_str_eq(b.data, "# TYPE g gauge\ng +Inf\n# TYPE h gauge\nh NaN\n# TYPE i gauge\ni 0.1\n");
	ck_assert_int_eq(api_metrics_counter(&b, "9bad", NULL, NULL, 1), ERR_INVAL);
	ck_assert_int_eq(api_metrics_counter(&b, "bad-name", NULL, NULL, 1), ERR_INVAL);
	const char *bk[] = {"le:x"};
	ck_assert_int_eq(api_metrics_labels(&l, bk, v, 1), ERR_INVAL);
	buf_deinit(&b);
	buf_deinit(&l);
}
END_TEST

START_TEST(test_counter_series)
{
	struct buf b;
	buf_init(&b);
	const char *labels[] = { "finished_reason=\"stop\"", "finished_reason=\"length\"" };
	const double v[] = { 3, 0 };
	ck_assert_int_eq(api_metrics_counter_series(&b, API_M_REQUEST_SUCCESS, "Finished.", labels,
						    v, 2),
			 0);
	ck_assert_str_eq(b.data, "# HELP aorta:request_success_total Finished.\n"
				 "# TYPE aorta:request_success_total counter\n"
				 "aorta:request_success_total{finished_reason=\"stop\"} 3\n"
				 "aorta:request_success_total{finished_reason=\"length\"} 0\n");
	buf_deinit(&b);
}
END_TEST

START_TEST(test_histogram_text)
{
	struct buf b;
	buf_init(&b);
	const double bounds[] = {0.1, 0.5, 2.5};
	const uint64_t counts[] = {1, 0, 2, 4};
	ck_assert_int_eq(api_metrics_histogram(&b, API_M_TTFT, "Time to first token.",
					       "model_name=\"m\"", bounds, counts, 3, 20.75),
			 0);
	ck_assert_str_eq(b.data,
			 "# HELP aorta:time_to_first_token_seconds Time to first token.\n"
			 "# TYPE aorta:time_to_first_token_seconds histogram\n"
			 "aorta:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.1\"} 1\n"
			 "aorta:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.5\"} 1\n"
			 "aorta:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"2.5\"} 3\n"
			 "aorta:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 7\n"
			 "aorta:time_to_first_token_seconds_sum{model_name=\"m\"} 20.75\n"
			 "aorta:time_to_first_token_seconds_count{model_name=\"m\"} 7\n");
	buf_clear(&b);
	ck_assert_int_eq(api_metrics_histogram(&b, "x", NULL, NULL, bounds, counts, 0, 0), 0);
	ck_assert_str_eq(b.data, "# TYPE x histogram\nx_bucket{le=\"+Inf\"} 1\nx_sum 0\nx_count 1\n");
	const double unsorted[] = {1, 1};
	ck_assert_int_eq(api_metrics_histogram(&b, "x", NULL, NULL, unsorted, counts, 2, 0), ERR_INVAL);
	size_t n;
	const double *t = api_metrics_buckets_ttft(&n);
	ck_assert_uint_gt(n, 10);
	for (size_t i = 1; i < n; i++)
		ck_assert(t[i] > t[i - 1]);
	t = api_metrics_buckets_itl(&n);
	ck_assert_uint_gt(n, 10);
	t = api_metrics_buckets_request(&n);
	ck_assert_double_eq(t[n - 1], 7680.0);
	buf_deinit(&b);
}
END_TEST

static const double HB[] = {0.01, 0.1, 1.0};

struct worker {
	struct histogram *h;
	int n;
};

static void *observe_many(void *arg)
{
	struct worker *w = arg;
	for (int i = 0; i < w->n; i++)
		histogram_observe(w->h, (i % 4) == 3 ? 5.0 : 0.05); /* bucket 1 or overflow */
	return NULL;
}

START_TEST(test_histogram_concurrent)
{
	struct histogram h;
	ck_assert_int_eq(histogram_init(&h, HB, 3), 0);
	histogram_observe(&h, 0.01); /* le is inclusive */
	histogram_observe(&h, 1.0);
	histogram_observe(&h, NAN);  /* ignored */
	histogram_observe(&h, -1.0); /* first bucket */
	enum { T = 4, N = 20000 };
	pthread_t th[T];
	struct worker w = {&h, N};
	for (int i = 0; i < T; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, observe_many, &w), 0);
	for (int i = 0; i < T; i++)
		pthread_join(th[i], NULL);
	uint64_t c[4], count;
	double sum;
	histogram_snapshot(&h, c, &count, &sum);
	ck_assert_uint_eq(c[0], 2);
	ck_assert_uint_eq(c[1], (uint64_t)T * N * 3 / 4);
	ck_assert_uint_eq(c[2], 1);
	ck_assert_uint_eq(c[3], (uint64_t)T * N / 4);
	ck_assert_uint_eq(count, 3 + (uint64_t)T * N);
	double want = 0.01 + 1.0 - 1.0 + T * (N * 3 / 4) * 0.05 + T * (N / 4) * 5.0;
	ck_assert_double_eq_tol(sum, want, 1e-6 * want);
	histogram_deinit(&h);
	const double bad[] = {1, 0.5};
	ck_assert_int_eq(histogram_init(&h, bad, 2), ERR_INVAL);
	const double inf[] = {1, INFINITY};
	ck_assert_int_eq(histogram_init(&h, inf, 2), ERR_INVAL);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("metrics_text");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_counter_gauge);
	tcase_add_test(tc, test_histogram_text);
	tcase_add_test(tc, test_counter_series);
	tcase_add_test(tc, test_histogram_concurrent);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
