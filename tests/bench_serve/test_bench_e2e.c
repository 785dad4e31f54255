/* tests/bench_serve/test_bench_e2e.c — the benchmark client end to end over
 * loopback against tests/bench_serve/fake_openai.mjs (started once on a free
 * port; behaviour chosen per request through the model name). Checks that
 * counts add up exactly, that timings match the fake's configured delays, that
 * arrivals and concurrency limits are honoured, that every failure mode is
 * counted as an error by kind (never as a fast success), and the commands'
 * exit codes, JSON, CSV and SVG. Exits 77 (skipped) without Node.js; fails
 * when node is there but the fake server does not start.
 * argv[1]: the node binary (from meson's find_program). */
#include <check.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/bench/bench_serve.h"

static struct {
	pid_t pid;
	int port;
	char url[64];
} fake;

static int start_fake(const char *node)
{
	const char *root = getenv("AORTA_SOURCE_ROOT");
	char script[1024];
	snprintf(script, sizeof script, "%s/tests/bench_serve/fake_openai.mjs", root ? root : ".");
	if (!node || !*node || access(node, X_OK) || access(script, R_OK))
		return -1;
	int fds[2];
	if (pipe(fds))
		return -1;
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(fds[1], STDOUT_FILENO);
		close(fds[0]);
		close(fds[1]);
		execl(node, node, script, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	FILE *f = fdopen(fds[0], "r");
	char line[64] = "";
	bool ok = f && fgets(line, sizeof line, f) && sscanf(line, "PORT %d", &fake.port) == 1;
	if (f)
		fclose(f);
	if (!ok) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
		return -1;
	}
	fake.pid = pid;
	snprintf(fake.url, sizeof fake.url, "http://127.0.0.1:%d", fake.port);
	return 0;
}

static void config(struct bench_config *c, const char *model, int n, int in, int out)
{
	bench_config_defaults(c);
	c->base_url = fake.url;
	c->model = model;
	c->num_prompts = n;
	c->input_len = in;
	c->output_len = out;
	c->request_rate = 0;
	c->request_timeout_s = 20;
}

/* Run and summarize; the caller frees *res with free_run. */
static struct bench_result *run(const struct bench_config *c, struct bench_summary *s)
{
	struct bench_workload w;
	struct diag d = {0};
	ck_assert_int_eq(bench_workload_build(c, &w, &d), 0);
	struct bench_result *res = calloc((size_t)w.n, sizeof *res);
	double dur = -1;
	ck_assert_msg(bench_run(c, &w, res, &dur, &d) == 0, "bench_run: %s", d.msg);
	ck_assert(dur > 0);
	ck_assert_int_eq(bench_summarize(c, res, w.n, dur, s), 0);
	bench_workload_free(&w);
	return res;
}

static void free_run(struct bench_result *res, int n)
{
	bench_results_free(res, n);
	free(res);
}

static int err_count(const struct bench_summary *s, const char *key)
{
	for (int i = 0; i < s->n_err_kinds; i++)
		if (!strcmp(s->errs[i].key, key))
			return s->errs[i].count;
	return 0;
}

START_TEST(test_counts_add_up)
{
	for (int api = 0; api < 2; api++) {
		struct bench_config c;
		config(&c, api ? "fake-count-chat" : "fake-count", 20, 10, 7);
		c.api = api ? BENCH_API_CHAT : BENCH_API_COMPLETIONS;
		c.max_concurrency = 4;
		struct bench_summary s;
		struct bench_result *r = run(&c, &s);
		ck_assert_int_eq(s.n_ok, 20);
		ck_assert_int_eq(s.n_failed, 0);
		ck_assert_int_eq(s.total_output_tokens, 20 * 7);
		ck_assert_int_eq(s.total_prompt_tokens, 20 * 10); /* the fake counts words */
		for (int i = 0; i < 20; i++) {
			ck_assert_int_eq(r[i].status, 200);
			ck_assert(r[i].usage_from_server);
			ck_assert_int_eq(r[i].output_tokens, 7);
			ck_assert_int_eq(r[i].n_chunks, 7);
			ck_assert_int_eq(r[i].n_itl, 6);
			ck_assert(r[i].ttft_s > 0 && r[i].ttft_s <= r[i].e2e_s);
		}
		ck_assert_int_eq(s.itl_ms.n, 20 * 6);
		/* keep-alive: 4 connections carried all 20 requests */
		ck_assert_int_eq(s.n_reused, 16);
		ck_assert_int_eq(s.tpot_ms.n, 20);
		ck_assert_double_eq_tol(s.output_throughput * s.duration_s, 140.0, 1e-6);
		free_run(r, 20);
	}
}
END_TEST

START_TEST(test_keep_alive_edges)
{
	struct bench_config c;
	struct bench_summary s;
	struct bench_result *r;
	/* off: a new connection per request */
	config(&c, "fake-ka-off", 8, 4, 3);
	c.max_concurrency = 2;
	c.keep_alive = false;
	r = run(&c, &s);
	ck_assert_int_eq(s.n_ok, 8);
	ck_assert_int_eq(s.n_reused, 0);
	free_run(r, 8);

	/* the server says "Connection: close": never reused */
	config(&c, "fake-ka-cc?connclose=1", 8, 4, 3);
	c.max_concurrency = 2;
	r = run(&c, &s);
	ck_assert_int_eq(s.n_ok, 8);
	ck_assert_int_eq(s.n_reused, 0);
	free_run(r, 8);

	/* the server closes idle connections before the next request: dropped */
	config(&c, "fake-ka-idle?idleclose=10", 4, 4, 3);
	c.request_rate = 10;
	c.arrival = BENCH_ARRIVAL_CONSTANT;
	r = run(&c, &s);
	ck_assert_int_eq(s.n_ok, 4);
	ck_assert_int_eq(s.n_reused, 0);
	free_run(r, 4);

	/* the server closes as the next request goes out: retried, not an error */
	config(&c, "fake-ka-race?endafter=1", 12, 4, 3);
	c.max_concurrency = 1;
	r = run(&c, &s);
	ck_assert_msg(s.n_ok == 12, "%d ok, first error %s", s.n_ok,
	              s.n_err_kinds ? s.errs[0].key : "-");
	free_run(r, 12);
}
END_TEST

START_TEST(test_counts_without_usage)
{
	struct bench_config c;
	config(&c, "fake-nousage?usage=0", 6, 12, 5);
	char url[64]; /* by name: resolves to IPv4 though ::1 may come first */
	snprintf(url, sizeof url, "http://localhost:%d/", fake.port);
	c.base_url = url;
	struct bench_summary s;
	struct bench_result *r = run(&c, &s);
	ck_assert_int_eq(s.n_ok, 6);
	for (int i = 0; i < 6; i++) {
		ck_assert(!r[i].usage_from_server);
		ck_assert_int_eq(r[i].output_tokens, 5);  /* counted chunks */
		ck_assert_int_eq(r[i].prompt_tokens, 12); /* the intended length */
	}
	free_run(r, 6);
}
END_TEST

START_TEST(test_timings_match_delays)
{
	struct bench_config c;
	config(&c, "fake-timing?ttft=100&itl=20", 4, 8, 6);
	c.max_concurrency = 2;
	struct bench_summary s;
	struct bench_result *r = run(&c, &s);
	ck_assert_int_eq(s.n_ok, 4);
	/* lower bounds are hard (timers never fire early by more than ~1 ms);
	 * upper bounds leave room for a loaded machine and sanitizers */
	ck_assert_msg(s.ttft_ms.min >= 99 && s.ttft_ms.max < 400, "ttft %.1f..%.1f", s.ttft_ms.min,
	              s.ttft_ms.max);
	ck_assert_msg(s.itl_ms.p50 >= 18 && s.itl_ms.p50 < 80, "itl p50 %.1f", s.itl_ms.p50);
	ck_assert_msg(s.tpot_ms.mean >= 18 && s.tpot_ms.mean < 80, "tpot %.1f", s.tpot_ms.mean);
	ck_assert_msg(s.e2e_ms.min >= 99 + 5 * 19, "e2e %.1f", s.e2e_ms.min);
	free_run(r, 4);
}
END_TEST

static int max_overlap(const struct bench_result *r, int n)
{
	int best = 0;
	for (int i = 0; i < n; i++) {
		int k = 0;
		for (int j = 0; j < n; j++)
			k += r[j].start_s <= r[i].start_s &&
			     r[i].start_s < r[j].start_s + r[j].e2e_s;
		best = k > best ? k : best;
	}
	return best;
}

START_TEST(test_concurrency_limit)
{
	struct bench_config c;
	config(&c, "fake-conc?ttft=40", 8, 4, 2);
	c.max_concurrency = 2;
	struct bench_summary s;
	struct bench_result *r = run(&c, &s);
	ck_assert_int_eq(s.n_ok, 8);
	ck_assert_int_eq(max_overlap(r, 8), 2);
	ck_assert(s.duration_s >= 4 * 0.039);
	free_run(r, 8);

	c.max_concurrency = 0; /* unlimited, all at t=0 */
	r = run(&c, &s);
	ck_assert_int_eq(s.n_ok, 8);
	ck_assert_int_eq(max_overlap(r, 8), 8);
	free_run(r, 8);
}
END_TEST

START_TEST(test_arrivals)
{
	struct bench_config c;
	config(&c, "fake-rate", 10, 4, 2);
	c.request_rate = 20;
	c.arrival = BENCH_ARRIVAL_CONSTANT;
	struct bench_summary s;
	struct bench_result *r = run(&c, &s);
	ck_assert_int_eq(s.n_ok, 10);
	for (int i = 0; i < 10; i++) {
		ck_assert_msg(r[i].start_s >= i * 0.05 - 0.002, "request %d early: %.4f", i,
		              r[i].start_s);
		ck_assert_msg(r[i].start_s < i * 0.05 + 0.1, "request %d late: %.4f", i,
		              r[i].start_s);
	}
	ck_assert(s.duration_s >= 0.45);
	free_run(r, 10);

	c.arrival = BENCH_ARRIVAL_POISSON;
	c.num_prompts = 20;
	c.request_rate = 50;
	c.seed = 3;
	r = run(&c, &s);
	ck_assert_int_eq(s.n_ok, 20);
	for (int i = 1; i < 20; i++)
		ck_assert(r[i].start_s >= r[i - 1].start_s);
	double mean_gap = r[19].start_s / 19;
	ck_assert_msg(mean_gap > 0.005 && mean_gap < 0.06, "mean gap %.4f", mean_gap);
	free_run(r, 20);

	c.burstiness = 0.5; /* gamma gaps, same mean */
	r = run(&c, &s);
	ck_assert_int_eq(s.n_ok, 20);
	for (int i = 1; i < 20; i++)
		ck_assert(r[i].start_s >= r[i - 1].start_s);
	free_run(r, 20);
}
END_TEST

/* Every request fails with the given mode: all must be errors of that kind. */
static void expect_all_fail(const char *model, const char *key, double timeout_s, size_t max_bytes)
{
	struct bench_config c;
	config(&c, model, 4, 4, 4);
	if (timeout_s > 0)
		c.request_timeout_s = timeout_s;
	if (max_bytes)
		c.max_response_bytes = max_bytes;
	struct bench_summary s;
	struct bench_result *r = run(&c, &s);
	ck_assert_msg(s.n_ok == 0 && s.n_failed == 4, "%s: %d ok, %d failed", model, s.n_ok,
	              s.n_failed);
	ck_assert_msg(err_count(&s, key) == 4, "%s: expected 4 x %s, got kind %s x %d", model, key,
	              s.n_err_kinds ? s.errs[0].key : "-", s.n_err_kinds ? s.errs[0].count : 0);
	ck_assert_int_eq(s.ttft_ms.n, 0); /* no latency samples from failures */
	ck_assert_int_eq(s.e2e_ms.n, 0);
	ck_assert_int_eq(s.total_output_tokens, 0);
	ck_assert_double_eq(s.request_throughput, 0.0);
	free_run(r, 4);
}

START_TEST(test_failures_by_kind)
{
	expect_all_fail("fake-f500?fail=500", "http_500", 0, 0);
	expect_all_fail("fake-f429?fail=429", "http_429", 0, 0);
	expect_all_fail("fake-reset?fail=reset", "reset", 0, 0);
	expect_all_fail("fake-close?fail=close", "reset", 0, 0);
	expect_all_fail("fake-malformed?fail=malformed", "malformed", 0, 0);
	expect_all_fail("fake-nodone?fail=nodone", "malformed", 0, 0);
	expect_all_fail("fake-serr?fail=stream_error", "stream_error", 0, 0);
	expect_all_fail("fake-huge?fail=huge", "too_large", 0, 256 * 1024);
	expect_all_fail("fake-hang?fail=hang", "timeout", 0.3, 0);
	expect_all_fail("fake-garbage?fail=garbage", "malformed", 0, 0);
	expect_all_fail("fake-badchunk?fail=badchunk", "malformed", 0, 0);
}
END_TEST

START_TEST(test_mixed_failures_and_404)
{
	struct bench_config c;
	config(&c, "fake-mixed?fail=500&every=2", 10, 4, 3);
	c.max_concurrency = 1;
	struct bench_summary s;
	struct bench_result *r = run(&c, &s);
	ck_assert_int_eq(s.n_ok, 5);
	ck_assert_int_eq(err_count(&s, "http_500"), 5);
	ck_assert_int_eq(s.total_output_tokens, 15);
	free_run(r, 10);

	char url[96];
	snprintf(url, sizeof url, "%s/nope/", fake.url); /* -> /nope/v1/completions */
	config(&c, "fake-404", 3, 4, 3);
	c.base_url = url;
	r = run(&c, &s);
	ck_assert_int_eq(err_count(&s, "http_404"), 3);
	free_run(r, 3);
}
END_TEST

static void *sigint_later(void *arg)
{
	(void)arg;
	usleep(300 * 1000);
	kill(getpid(), SIGINT);
	return NULL;
}

START_TEST(test_interrupt)
{
	struct bench_config c;
	config(&c, "fake-int?ttft=5000", 10, 4, 3);
	c.max_concurrency = 3;
	c.handle_sigint = true;
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, sigint_later, NULL), 0);
	struct bench_summary s;
	struct bench_result *r = run(&c, &s);
	pthread_join(th, NULL);
	ck_assert_int_eq(s.n_ok, 0);
	ck_assert_int_eq(err_count(&s, "cancelled"), 3);
	ck_assert_int_eq(err_count(&s, "not_sent"), 7);
	ck_assert_msg(s.duration_s < 3.0, "took %.2f s", s.duration_s); /* not the 5 s TTFT */
	free_run(r, 10);
}
END_TEST

START_TEST(test_connect_refused)
{
	/* a port nobody listens on: bind one, read its number, close it */
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	char url[64];
	snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(a.sin_port));
	struct bench_config c;
	config(&c, "x", 3, 4, 3);
	c.base_url = url;
	struct bench_summary s;
	struct bench_result *r = run(&c, &s);
	ck_assert_int_eq(s.n_ok, 0);
	ck_assert_int_eq(err_count(&s, "connect"), 3);
	free_run(r, 3);

	struct bench_workload w;
	struct diag d;
	ck_assert_int_eq(bench_workload_build(&c, &w, &d), 0);
	struct bench_result res[3];
	double dur;
	c.base_url = "https://127.0.0.1:1"; /* no TLS: a configuration error, not a run */
	ck_assert_int_eq(bench_run(&c, &w, res, &dur, &d), ERR_INVAL);
	bench_workload_free(&w);
}
END_TEST

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	char *b = calloc(1, 1 << 20);
	size_t n = fread(b, 1, (1 << 20) - 1, f);
	b[n] = '\0';
	fclose(f);
	return b;
}

START_TEST(test_commands)
{
	char dir[] = "/tmp/bench_cmd_XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char json[128], csv[128], svg[128];
	snprintf(json, sizeof json, "%s/out.json", dir);
	snprintf(csv, sizeof csv, "%s/sweep.csv", dir);
	snprintf(svg, sizeof svg, "%s/sweep.svg", dir);

	char *serve_argv[] = {"--base-url",
	                      fake.url,
	                      "--model",
	                      "fake-cli",
	                      "--num-prompts",
	                      "6",
	                      "--input-len",
	                      "5",
	                      "--output-len",
	                      "4",
	                      "--max-concurrency",
	                      "3",
	                      "--slo-ttft-ms",
	                      "10000",
	                      "--json",
	                      json,
	                      NULL};
	ck_assert_int_eq(bench_serve_main(16, serve_argv), 0);
	char *text = slurp(json);
	ck_assert_ptr_nonnull(text);
	cJSON *o = cJSON_Parse(text);
	ck_assert_ptr_nonnull(o);
	ck_assert_int_eq(cJSON_GetObjectItem(o, "completed")->valueint, 6);
	ck_assert_int_eq(cJSON_GetObjectItem(o, "total_output_tokens")->valueint, 24);
	ck_assert_int_eq(cJSON_GetObjectItem(o, "good_requests")->valueint, 6);
	cJSON *reqs = cJSON_GetObjectItem(o, "requests");
	ck_assert_int_eq(cJSON_GetArraySize(reqs), 6);
	ck_assert_ptr_null(cJSON_GetObjectItem(cJSON_GetArrayItem(reqs, 0), "itl_ms"));
	cJSON_Delete(o);
	free(text);

	/* a failing server: exit 1 and the errors in the JSON */
	char *fail_argv[] = {
	    "--base-url", fake.url, "--model", "fake-cli-500?fail=500", "--num-prompts", "3",
	    "--json",     json,     NULL};
	ck_assert_int_eq(bench_serve_main(8, fail_argv), 1);
	text = slurp(json);
	o = cJSON_Parse(text);
	ck_assert_int_eq(cJSON_GetObjectItem(o, "completed")->valueint, 0);
	ck_assert_int_eq(
	    cJSON_GetObjectItem(cJSON_GetObjectItem(o, "errors"), "http_500")->valueint, 3);
	cJSON_Delete(o);
	free(text);

	char *bad_argv[] = {"--model", "x", NULL};
	ck_assert_int_eq(bench_serve_main(2, bad_argv), 2);
	char *bad2[] = {"--base-url", fake.url, "--model", "x", "--dataset", "nope", NULL};
	ck_assert_int_eq(bench_serve_main(6, bad2), 2);

	char *detail_argv[] = {"--base-url",      fake.url, "--model",      "fake-cli-detail",
	                       "--num-prompts",   "2",      "--output-len", "5",
	                       "--save-detailed", "--json", json,           NULL};
	ck_assert_int_eq(bench_serve_main(11, detail_argv), 0);
	text = slurp(json);
	o = cJSON_Parse(text);
	reqs = cJSON_GetObjectItem(o, "requests");
	for (int i = 0; i < 2; i++) /* 5 tokens, 4 gaps */
		ck_assert_int_eq(
		    cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetArrayItem(reqs, i), "itl_ms")),
		    4);
	cJSON_Delete(o);
	free(text);

	char *sweep_argv[] = {"--base-url",
	                      fake.url,
	                      "--model",
	                      "fake-sweep?itl=2",
	                      "--num-prompts",
	                      "6",
	                      "--input-len",
	                      "5",
	                      "--output-len",
	                      "4",
	                      "--concurrencies",
	                      "1,3",
	                      "--csv",
	                      csv,
	                      "--svg",
	                      svg,
	                      NULL};
	ck_assert_int_eq(bench_sweep_main(16, sweep_argv), 0);
	text = slurp(csv);
	ck_assert_ptr_nonnull(text);
	int lines = 0;
	for (char *p = text; *p; p++)
		lines += *p == '\n';
	ck_assert_int_eq(lines, 3);
	ck_assert_ptr_nonnull(strstr(text, "\nconc=1,"));
	ck_assert_ptr_nonnull(strstr(text, "\nconc=3,"));
	free(text);
	text = slurp(svg);
	ck_assert_ptr_nonnull(text);
	ck_assert(!strncmp(text, "<?xml", 5));
	ck_assert_ptr_nonnull(strstr(text, "<polyline"));
	ck_assert_ptr_nonnull(strstr(text, "conc=3"));
	ck_assert_ptr_nonnull(strstr(text, "</svg>"));
	free(text);

	char *sweep_bad[] = {"--base-url",      fake.url, "--model", "x",
	                     "--request-rates", "1,-2",   NULL};
	ck_assert_int_eq(bench_sweep_main(6, sweep_bad), 2);
	unlink(json);
	unlink(csv);
	unlink(svg);
	rmdir(dir);
}
END_TEST

int main(int argc, char **argv)
{
	const char *node = argc > 1 ? argv[1] : NULL;
	if (!node || !*node || access(node, X_OK)) {
		printf("SKIP: node not installed (the fake OpenAI server is a Node.js script)\n");
		return 77;
	}
	if (start_fake(node)) { /* node is there: a fake that does not start is a bug */
		fprintf(stderr, "FAIL: cannot start the fake server (node '%s', AORTA_SOURCE_ROOT %s)\n",
		        node, getenv("AORTA_SOURCE_ROOT") ? getenv("AORTA_SOURCE_ROOT") : "unset");
		return 1;
	}
	Suite *s = suite_create("bench_e2e");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_counts_add_up);
	tcase_add_test(tc, test_counts_without_usage);
	tcase_add_test(tc, test_keep_alive_edges);
	tcase_add_test(tc, test_timings_match_delays);
	tcase_add_test(tc, test_concurrency_limit);
	tcase_add_test(tc, test_arrivals);
	tcase_add_test(tc, test_failures_by_kind);
	tcase_add_test(tc, test_mixed_failures_and_404);
	tcase_add_test(tc, test_connect_refused);
	tcase_add_test(tc, test_interrupt);
	tcase_add_test(tc, test_commands);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	kill(fake.pid, SIGTERM);
	waitpid(fake.pid, NULL, 0);
	return nf ? 1 : 0;
}
