/* tests/bench_serve/test_bench_stats.c — the benchmark's numbers and prompts:
 * percentiles against values computed with numpy.percentile (default linear
 * interpolation), the run summary on hand-made records (counts, throughputs,
 * TPOT, goodput, errors by kind), and the workloads (lengths, determinism,
 * shared prefixes, ShareGPT-like distribution, JSONL). No network. */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/bench/bench_rng.h"
#include "server/bench/bench_serve.h"

START_TEST(test_percentile_numpy)
{
	/* numpy: x = [12.5, 3, 7.25, 100, .5, 42, 8, 15.5, 9.75, 61];
	 * np.percentile(x, [0, 25, 50, 90, 99, 100]); x.mean(); x.std() */
	const double x[] = {12.5, 3.0, 7.25, 100.0, 0.5, 42.0, 8.0, 15.5, 9.75, 61.0};
	struct bench_stat s;
	ck_assert_int_eq(bench_stat_compute(x, 10, &s), 0);
	ck_assert_int_eq(s.n, 10);
	ck_assert_double_eq_tol(s.p50, 11.125, 1e-12);
	ck_assert_double_eq_tol(s.p90, 64.9, 1e-12);
	ck_assert_double_eq_tol(s.p99, 96.49, 1e-12);
	ck_assert_double_eq_tol(s.mean, 25.95, 1e-12);
	ck_assert_double_eq_tol(s.std, 30.607760453845685, 1e-12);
	ck_assert_double_eq(s.min, 0.5);
	ck_assert_double_eq(s.max, 100.0);
	/* the input is not reordered */
	ck_assert_double_eq(x[0], 12.5);

	double sorted[10];
	memcpy(sorted, x, sizeof x);
	for (int i = 1; i < 10; i++) /* insertion sort: independent of the code under test */
		for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
			double t = sorted[j];
			sorted[j] = sorted[j - 1];
			sorted[j - 1] = t;
		}
	ck_assert_double_eq_tol(bench_percentile_sorted(sorted, 10, 0.25), 7.4375, 1e-12);
	ck_assert_double_eq(bench_percentile_sorted(sorted, 10, 0.0), 0.5);
	ck_assert_double_eq(bench_percentile_sorted(sorted, 10, 1.0), 100.0);

	/* two points: np.percentile([5, 1], [50, 90, 99]) = [3, 4.6, 4.96] */
	const double y[] = {5.0, 1.0};
	ck_assert_int_eq(bench_stat_compute(y, 2, &s), 0);
	ck_assert_double_eq_tol(s.p50, 3.0, 1e-12);
	ck_assert_double_eq_tol(s.p90, 4.6, 1e-12);
	ck_assert_double_eq_tol(s.p99, 4.96, 1e-12);

	const double one = 7.0;
	ck_assert_int_eq(bench_stat_compute(&one, 1, &s), 0);
	ck_assert_double_eq(s.p50, 7.0);
	ck_assert_double_eq(s.p99, 7.0);
	ck_assert_double_eq(s.std, 0.0);

	ck_assert_int_eq(bench_stat_compute(NULL, 0, &s), 0);
	ck_assert_int_eq(s.n, 0);
	ck_assert_double_eq(s.mean, 0.0);
}
END_TEST

static void ok_result(struct bench_result *r, double ttft, double e2e, int pt, int ot,
                      const double *itl, int n_itl)
{
	memset(r, 0, sizeof *r);
	r->err = BENCH_OK;
	r->status = 200;
	r->ttft_s = ttft;
	r->e2e_s = e2e;
	r->prompt_tokens = pt;
	r->output_tokens = ot;
	r->n_chunks = ot;
	r->usage_from_server = true;
	r->itl_s = malloc((size_t)(n_itl ? n_itl : 1) * sizeof(double));
	if (n_itl)
		memcpy(r->itl_s, itl, (size_t)n_itl * sizeof(double));
	r->n_itl = n_itl;
}

START_TEST(test_summary)
{
	struct bench_config c;
	bench_config_defaults(&c);
	c.slo_ttft_ms = 150;
	c.slo_tpot_ms = 30;
	struct bench_result r[6];
	const double itl_a[] = {0.010, 0.020, 0.030};
	const double itl_b[] = {0.040};
	/* TPOT = (e2e - ttft) / (out - 1) */
	ok_result(&r[0], 0.100, 0.160, 10, 4, itl_a, 3); /* tpot 20 ms: good */
	ok_result(&r[1], 0.200, 0.240, 12, 2, itl_b, 1); /* ttft 200 > 150: not good */
	ok_result(&r[2], 0.050, 0.050, 8, 1, NULL, 0);   /* one token: no TPOT, good */
	ok_result(&r[3], 0.120, 0.520, 10, 5, itl_a, 3); /* tpot 100 > 30: not good */
	memset(&r[4], 0, sizeof r[4]);
	r[4].err = BENCH_E_HTTP;
	r[4].status = 500;
	r[4].e2e_s = 0.001; /* a fast failure must not count as a fast response */
	memset(&r[5], 0, sizeof r[5]);
	r[5].err = BENCH_E_RESET;

	struct bench_summary s;
	ck_assert_int_eq(bench_summarize(&c, r, 6, 2.0, &s), 0);
	ck_assert_int_eq(s.n_requests, 6);
	ck_assert_int_eq(s.n_ok, 4);
	ck_assert_int_eq(s.n_failed, 2);
	ck_assert_int_eq(s.total_prompt_tokens, 40);
	ck_assert_int_eq(s.total_output_tokens, 12);
	ck_assert_double_eq_tol(s.request_throughput, 2.0, 1e-12);
	ck_assert_double_eq_tol(s.output_throughput, 6.0, 1e-12);
	ck_assert_double_eq_tol(s.total_token_throughput, 26.0, 1e-12);
	ck_assert(s.has_slo);
	ck_assert_int_eq(s.n_good, 2);
	ck_assert_double_eq_tol(s.goodput, 1.0, 1e-12);
	ck_assert_int_eq(s.ttft_ms.n, 4);
	ck_assert_double_eq_tol(s.ttft_ms.mean, (100 + 200 + 50 + 120) / 4.0, 1e-9);
	ck_assert_double_eq_tol(s.e2e_ms.min, 50.0, 1e-9); /* the 1 ms failure is not in it */
	ck_assert_int_eq(s.tpot_ms.n, 3);
	ck_assert_double_eq_tol(s.tpot_ms.mean, (20 + 40 + 100) / 3.0, 1e-9);
	ck_assert_int_eq(s.itl_ms.n, 7);
	ck_assert_double_eq_tol(s.itl_ms.max, 40.0, 1e-9);
	ck_assert_int_eq(s.n_err_kinds, 2);
	ck_assert_str_eq(s.errs[0].key, "http_500");
	ck_assert_int_eq(s.errs[0].count, 1);
	ck_assert_str_eq(s.errs[1].key, "reset");

	/* an E2E objective alone: e2e <= 200 ms holds for r[0] (160) and r[2] (50) */
	c.slo_ttft_ms = c.slo_tpot_ms = 0;
	c.slo_e2e_ms = 200;
	ck_assert_int_eq(bench_summarize(&c, r, 6, 2.0, &s), 0);
	ck_assert(s.has_slo);
	ck_assert_int_eq(s.n_good, 2);
	c.slo_e2e_ms = 250; /* now r[1] (240) too */
	ck_assert_int_eq(bench_summarize(&c, r, 6, 2.0, &s), 0);
	ck_assert_int_eq(s.n_good, 3);

	/* no SLO: no goodput */
	c.slo_e2e_ms = 0;
	ck_assert_int_eq(bench_summarize(&c, r, 6, 2.0, &s), 0);
	ck_assert(!s.has_slo);
	ck_assert_double_eq(s.goodput, 0.0);

	/* the table and the JSON file render */
	char path[] = "/tmp/bench_summary_XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	close(fd);
	struct diag d;
	ck_assert_int_eq(bench_write_json(path, &c, &s, r, 6, &d), 0);
	FILE *f = fopen(path, "r");
	char text[8192];
	size_t n = fread(text, 1, sizeof text - 1, f);
	text[n] = '\0';
	fclose(f);
	unlink(path);
	ck_assert_ptr_nonnull(strstr(text, "\"completed\":\t4"));
	ck_assert_ptr_nonnull(strstr(text, "\"http_500\":\t1"));
	ck_assert_ptr_nonnull(strstr(text, "\"median_ttft_ms\":\t110")); /* vLLM's flat keys */
	ck_assert_ptr_nonnull(strstr(text, "\"p99_e2el_ms\":"));
	FILE *mem = fmemopen(text, sizeof text, "w");
	bench_print_summary(mem, &c, &s);
	fclose(mem);
	ck_assert_ptr_nonnull(strstr(text, "Successful requests:"));
	bench_results_free(r, 6);
}
END_TEST

START_TEST(test_error_kinds_fold)
{
	struct bench_config c;
	bench_config_defaults(&c);
	struct bench_result r[40];
	memset(r, 0, sizeof r);
	for (int i = 0; i < 40; i++) {
		r[i].err = BENCH_E_HTTP;
		r[i].status = 400 + i; /* 40 distinct kinds */
	}
	struct bench_summary s;
	ck_assert_int_eq(bench_summarize(&c, r, 40, 1.0, &s), 0);
	ck_assert_int_eq(s.n_err_kinds, BENCH_MAX_ERR_KINDS);
	int total = 0;
	for (int i = 0; i < s.n_err_kinds; i++)
		total += s.errs[i].count;
	ck_assert_int_eq(total, 40);
	ck_assert_str_eq(s.errs[BENCH_MAX_ERR_KINDS - 1].key, "other");
	ck_assert_int_eq(s.errs[BENCH_MAX_ERR_KINDS - 1].count, 40 - (BENCH_MAX_ERR_KINDS - 1));
}
END_TEST

static int n_words(const char *s)
{
	int n = 0;
	for (const char *p = s; *p; p++)
		if (*p != ' ' && (p == s || p[-1] == ' '))
			n++;
	return n;
}

START_TEST(test_workload_fixed_and_prefix)
{
	struct bench_config c;
	bench_config_defaults(&c);
	c.num_prompts = 6;
	c.input_len = 9;
	c.output_len = 5;
	c.seed = 42;
	struct bench_workload a, b;
	struct diag d;
	ck_assert_int_eq(bench_workload_build(&c, &a, &d), 0);
	ck_assert_int_eq(a.n, 6);
	for (int i = 0; i < a.n; i++) {
		ck_assert_int_eq(n_words(a.items[i].text), 9);
		ck_assert_int_eq(a.items[i].prompt_len, 9);
		ck_assert_int_eq(a.items[i].output_len, 5);
	}
	ck_assert_str_ne(a.items[0].text, a.items[1].text);
	ck_assert_int_eq(bench_workload_build(&c, &b, &d), 0);
	for (int i = 0; i < a.n; i++) /* same seed, same prompts */
		ck_assert_str_eq(a.items[i].text, b.items[i].text);
	bench_workload_free(&b);
	c.seed = 43;
	ck_assert_int_eq(bench_workload_build(&c, &b, &d), 0);
	ck_assert_str_ne(a.items[0].text, b.items[0].text);
	bench_workload_free(&b);
	bench_workload_free(&a);

	c.prefix_len = 20;
	c.num_prefix_groups = 2;
	ck_assert_int_eq(bench_workload_build(&c, &a, &d), 0);
	for (int i = 0; i < a.n; i++) {
		ck_assert_int_eq(n_words(a.items[i].text), 29);
		ck_assert_int_eq(a.items[i].prompt_len, 29);
	}
	/* request i uses group i mod 2: 0, 2, 4 share a prefix, which 1 does not */
	size_t plen = 0;
	for (int w = 0; w < 20; w++)
		plen = (size_t)(strchr(a.items[0].text + plen, ' ') - a.items[0].text) + 1;
	ck_assert(!strncmp(a.items[0].text, a.items[2].text, plen));
	ck_assert(!strncmp(a.items[0].text, a.items[4].text, plen));
	ck_assert(strncmp(a.items[0].text, a.items[1].text, plen));
	ck_assert(!strncmp(a.items[1].text, a.items[3].text, plen));
	ck_assert_str_ne(a.items[0].text, a.items[2].text); /* suffixes differ */
	bench_workload_free(&a);

	c.num_prompts = 0;
	ck_assert_int_eq(bench_workload_build(&c, &a, &d), ERR_RANGE);
}
END_TEST

static int cmp_int(const void *x, const void *y)
{
	return *(const int *)x - *(const int *)y;
}

START_TEST(test_workload_sharegpt)
{
	struct bench_config c;
	bench_config_defaults(&c);
	c.dataset = BENCH_DATA_SHAREGPT;
	c.num_prompts = 2001;
	c.seed = 7;
	struct bench_workload w;
	struct diag d;
	ck_assert_int_eq(bench_workload_build(&c, &w, &d), 0);
	int *in = malloc(sizeof(int) * 2001), *out = malloc(sizeof(int) * 2001);
	for (int i = 0; i < w.n; i++) {
		in[i] = w.items[i].prompt_len;
		out[i] = w.items[i].output_len;
		ck_assert_int_ge(in[i], 4);
		ck_assert_int_le(in[i], 2048);
		ck_assert_int_ge(out[i], 4);
		ck_assert_int_le(out[i], 1024);
		if (i < 50)
			ck_assert_int_eq(n_words(w.items[i].text), in[i]);
	}
	qsort(in, 2001, sizeof(int), cmp_int);
	qsort(out, 2001, sizeof(int), cmp_int);
	/* documented medians 220 and 180; 2001 samples put them within ~6% */
	ck_assert_int_ge(in[1000], 200);
	ck_assert_int_le(in[1000], 240);
	ck_assert_int_ge(out[1000], 162);
	ck_assert_int_le(out[1000], 198);
	free(in);
	free(out);
	bench_workload_free(&w);

	c.max_output_len = 16;
	c.num_prompts = 200;
	ck_assert_int_eq(bench_workload_build(&c, &w, &d), 0);
	for (int i = 0; i < w.n; i++)
		ck_assert_int_le(w.items[i].output_len, 16);
	bench_workload_free(&w);
}
END_TEST

START_TEST(test_workload_jsonl)
{
	char path[] = "/tmp/bench_jsonl_XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	const char *text = "{\"prompt\": \"hello there world\", \"output_len\": 3}\n"
	                   "\n"
	                   "{\"prompt\": \"one\"}\r\n"
	                   "{\"prompt\": \"a b\", \"output_len\": 9}";
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	struct bench_config c;
	bench_config_defaults(&c);
	c.dataset = BENCH_DATA_JSONL;
	c.dataset_path = path;
	c.num_prompts = 5;
	c.output_len = 11;
	struct bench_workload w;
	struct diag d;
	ck_assert_int_eq(bench_workload_build(&c, &w, &d), 0);
	ck_assert_int_eq(w.n, 5);
	ck_assert_str_eq(w.items[0].text, "hello there world");
	ck_assert_int_eq(w.items[0].prompt_len, 3);
	ck_assert_int_eq(w.items[0].output_len, 3);
	ck_assert_str_eq(w.items[1].text, "one");
	ck_assert_int_eq(w.items[1].output_len, 11);
	ck_assert_int_eq(w.items[2].output_len, 9);
	ck_assert_str_eq(w.items[3].text, "hello there world"); /* wraps around */
	bench_workload_free(&w);

	fd = open(path, O_WRONLY | O_TRUNC);
	ck_assert_int_ge(fd, 0);
	const char *bad = "{\"prompt\": \"ok\"}\n{\"text\": \"no prompt\"}\n";
	ck_assert_int_eq(write(fd, bad, strlen(bad)), (ssize_t)strlen(bad));
	close(fd);
	ck_assert_int_eq(bench_workload_build(&c, &w, &d), ERR_FORMAT);
	ck_assert_ptr_nonnull(strstr(d.msg, ":2:"));
	unlink(path);
	c.dataset_path = "/nonexistent/bench.jsonl";
	ck_assert_int_eq(bench_workload_build(&c, &w, &d), ERR_IO);
}
END_TEST

/* Sample moments of the arrival-gap samplers against their definitions:
 * Gamma(k, mean m): mean m, variance m^2 / k; exponential: k = 1. */
START_TEST(test_gamma_moments)
{
	const double shapes[] = {0.25, 1.0, 4.0};
	for (int s = 0; s < 3; s++) {
		struct bench_rng rng = {99};
		double k = shapes[s], m = 0.5, sum = 0, sq = 0;
		const int n = 100000;
		for (int i = 0; i < n; i++) {
			double x = bench_rng_gamma(&rng, k, m);
			ck_assert(x >= 0 && isfinite(x));
			sum += x;
			sq += x * x;
		}
		double mean = sum / n, var = sq / n - mean * mean;
		ck_assert_msg(fabs(mean - m) < 0.02 * m, "k=%g mean %g", k, mean);
		ck_assert_msg(fabs(var - m * m / k) < 0.06 * m * m / k, "k=%g var %g", k, var);
	}
	struct bench_rng rng = {5};
	double sum = 0;
	for (int i = 0; i < 100000; i++)
		sum += bench_rng_exp(&rng, 4.0);
	ck_assert_double_eq_tol(sum / 100000, 0.25, 0.005);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("bench_stats");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_percentile_numpy);
	tcase_add_test(tc, test_summary);
	tcase_add_test(tc, test_error_kinds_fold);
	tcase_add_test(tc, test_workload_fixed_and_prefix);
	tcase_add_test(tc, test_workload_sharegpt);
	tcase_add_test(tc, test_workload_jsonl);
	tcase_add_test(tc, test_gamma_moments);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf ? 1 : 0;
}
