/* server/bench/bench_serve.c — the `aorta bench serve` and `aorta bench sweep`
 * commands: flags to a bench_config, build the workload, run, print the table,
 * write --json; a sweep repeats the run over several request rates or
 * concurrencies and writes a CSV and an SVG plot. Exercised by
 * tests/bench_serve/test_bench_e2e.c (exit codes, JSON, CSV, SVG). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench_serve.h"
#include "server/cli.h"

/* Flags that take names, resolved after cli_parse. */
struct bench_flags {
	struct bench_config c;
	const char *endpoint, *arrival, *dataset, *json_path;
	int64_t seed;
	double timeout_s;
	uint64_t max_response;
};

#define N_COMMON_OPTS 29

static int common_opts(struct bench_flags *f, struct cli_opt *o)
{
	struct bench_config *c = &f->c;
	const struct cli_opt v[N_COMMON_OPTS] = {
	    {"base-url", CLI_STR, &c->base_url, "URL",
	     "server root, e.g. http://127.0.0.1:8080 (/v1/... is appended)"},
	    {"model", CLI_STR, &c->model, "NAME", "model name to send"},
	    {"endpoint", CLI_STR, &f->endpoint, "completions|chat",
	     "/v1/completions (default) or /v1/chat/completions"},
	    {"api-key", CLI_STR, &c->api_key, "KEY", "send 'Authorization: Bearer KEY'"},
	    {"num-prompts", CLI_INT, &c->num_prompts, "N", "requests to send (default 100)"},
	    {"max-concurrency", CLI_INT, &c->max_concurrency, "N",
	     "most requests in flight (default: unlimited)"},
	    {"request-rate", CLI_DOUBLE, &c->request_rate, "R",
	     "requests per second; 0 = all at once (default)"},
	    {"arrival", CLI_STR, &f->arrival, "poisson|constant",
	     "arrival process at --request-rate (default poisson)"},
	    {"burstiness", CLI_DOUBLE, &c->burstiness, "B",
	     "poisson arrivals: gamma gaps of shape B (default 1 = Poisson)"},
	    {"seed", CLI_I64, &f->seed, "N", "seed for prompts and arrivals (default 0)"},
	    {"dataset", CLI_STR, &f->dataset, "fixed|sharegpt|jsonl",
	     "prompt lengths: fixed, ShareGPT-like, or a file (default fixed)"},
	    {"dataset-path", CLI_STR, &c->dataset_path, "FILE",
	     "JSONL of {\"prompt\":..., \"output_len\":N}"},
	    {"tokenizer", CLI_STR, &c->tokenizer_path, "PATH",
	     "tokenizer.json, HF model dir or GGUF: prompts of exact token lengths"},
	    {"input-len", CLI_INT, &c->input_len, "N", "prompt words (~tokens) (default 128)"},
	    {"output-len", CLI_INT, &c->output_len, "N", "max_tokens per request (default 128)"},
	    {"max-input-len", CLI_INT, &c->max_input_len, "N", "sharegpt: clip prompt lengths"},
	    {"max-output-len", CLI_INT, &c->max_output_len, "N", "sharegpt: clip output lengths"},
	    {"prefix-len", CLI_INT, &c->prefix_len, "N",
	     "shared prefix words per prompt (default 0)"},
	    {"num-prefix-groups", CLI_INT, &c->num_prefix_groups, "N",
	     "distinct shared prefixes (default 1 when --prefix-len is set)"},
	    {"ignore-eos", CLI_BOOL, &c->ignore_eos, NULL,
	     "ask the server to generate exactly max_tokens (vLLM extension)"},
	    {"temperature", CLI_DOUBLE, &c->temperature, "T", "sampling temperature (default 0)"},
	    {"slo-ttft-ms", CLI_DOUBLE, &c->slo_ttft_ms, "MS", "goodput: TTFT objective"},
	    {"slo-tpot-ms", CLI_DOUBLE, &c->slo_tpot_ms, "MS", "goodput: TPOT objective"},
	    {"slo-e2e-ms", CLI_DOUBLE, &c->slo_e2e_ms, "MS",
	     "goodput: end-to-end latency objective"},
	    {"request-timeout", CLI_DOUBLE, &f->timeout_s, "SECONDS",
	     "per-request limit; 0 = none (default 300)"},
	    {"max-response-bytes", CLI_BYTES, &f->max_response, "BYTES",
	     "larger responses count as errors (default 64M)"},
	    {"keep-alive", CLI_BOOL, &c->keep_alive, NULL,
	     "reuse connections between requests (default on)"},
	    {"progress", CLI_BOOL, &c->progress, NULL, "live progress line on a TTY (default on)"},
	    {"save-detailed", CLI_BOOL, &c->save_detailed, NULL,
	     "JSON: also each request's inter-token gaps (itl_ms)"},
	};
	memcpy(o, v, sizeof v);
	return N_COMMON_OPTS;
}

static void flags_defaults(struct bench_flags *f)
{
	memset(f, 0, sizeof *f);
	bench_config_defaults(&f->c);
	f->c.request_rate = 0;
	f->c.progress = true;
	f->c.handle_sigint = true;
	f->timeout_s = f->c.request_timeout_s;
	f->max_response = f->c.max_response_bytes;
}

/* Resolve names and defaults; prints the problem and returns 2 on bad usage. */
static int flags_finish(struct bench_flags *f, const char *cmd)
{
	struct bench_config *c = &f->c;
	if (!c->base_url || !c->model) {
		fprintf(stderr, "aorta bench %s: --base-url and --model are required\n", cmd);
		return 2;
	}
	if (!f->endpoint || !strcmp(f->endpoint, "completions"))
		c->api = BENCH_API_COMPLETIONS;
	else if (!strcmp(f->endpoint, "chat"))
		c->api = BENCH_API_CHAT;
	else
		goto bad;
	if (!f->arrival || !strcmp(f->arrival, "poisson"))
		c->arrival = BENCH_ARRIVAL_POISSON;
	else if (!strcmp(f->arrival, "constant"))
		c->arrival = BENCH_ARRIVAL_CONSTANT;
	else
		goto bad;
	if (!f->dataset || !strcmp(f->dataset, "fixed"))
		c->dataset = BENCH_DATA_FIXED;
	else if (!strcmp(f->dataset, "sharegpt"))
		c->dataset = BENCH_DATA_SHAREGPT;
	else if (!strcmp(f->dataset, "jsonl"))
		c->dataset = BENCH_DATA_JSONL;
	else
		goto bad;
	if (c->prefix_len > 0 && c->num_prefix_groups == 0)
		c->num_prefix_groups = 1;
	if (c->request_rate < 0 || c->max_concurrency < 0 || f->timeout_s < 0 ||
	    !(c->burstiness > 0) || f->max_response < 1024 ||
	    f->max_response > ((uint64_t)1 << 34)) {
		fprintf(stderr,
		        "aorta bench %s: --request-rate, --max-concurrency and "
		        "--request-timeout must be >= 0, --burstiness > 0, "
		        "--max-response-bytes in [1K, 16G]\n",
		        cmd);
		return 2;
	}
	c->seed = (uint64_t)f->seed;
	c->request_timeout_s = f->timeout_s;
	c->max_response_bytes = (size_t)f->max_response;
	return 0;
bad:
	fprintf(stderr, "aorta bench %s: bad --endpoint, --arrival or --dataset value\n", cmd);
	return 2;
}

/* Each in-flight request holds a socket. Raise the soft descriptor limit to
 * the hard one when the run may need more, and say so when even that is too
 * few (the excess would show up as "connect" errors). */
static void fit_fd_limit(const struct bench_config *c)
{
	rlim_t need = (rlim_t)(c->max_concurrency > 0 && c->max_concurrency < c->num_prompts
	                           ? c->max_concurrency
	                           : c->num_prompts) +
	              64;
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= need)
		return;
	rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
	if (want > rl.rlim_cur) {
		rl.rlim_cur = want;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur < need)
		fprintf(stderr,
		        "aorta bench: up to %llu requests may be in flight but only %llu file "
		        "descriptors are available; set --max-concurrency\n",
		        (unsigned long long)(need - 64), (unsigned long long)rl.rlim_cur);
}

/* One run: workload, requests, summary. results are freed here. */
static int run_once(const struct bench_config *c, const struct bench_workload *w,
                    struct bench_summary *s, const char *json_path)
{
	struct diag d = {0};
	struct bench_result *res = calloc((size_t)w->n, sizeof *res);
	if (!res) {
		fprintf(stderr, "aorta bench: out of memory\n");
		return 1;
	}
	double dur = 0;
	fit_fd_limit(c);
	int rc = bench_run(c, w, res, &dur, &d);
	if (!rc)
		rc = bench_summarize(c, res, w->n, dur, s);
	if (!rc && json_path)
		rc = bench_write_json(json_path, c, s, res, w->n, &d);
	bench_results_free(res, w->n);
	free(res);
	if (rc) {
		fprintf(stderr, "aorta bench: %s\n", d.msg[0] ? d.msg : err_str(rc));
		return 1;
	}
	return 0;
}

int bench_serve_main(int argc, char **argv)
{
	struct bench_flags f;
	flags_defaults(&f);
	struct cli_opt opts[N_COMMON_OPTS + 1];
	int n_opts = common_opts(&f, opts);
	opts[n_opts++] =
	    (struct cli_opt){"json", CLI_STR, &f.json_path, "FILE", "also write results as JSON"};
	const struct cli_cmd cmd = {
	    .name = "bench serve",
	    .summary = "Measure an OpenAI-compatible server under load: TTFT, TPOT, ITL, "
	               "latency percentiles, throughput, goodput.",
	    .usage = "aorta bench serve --base-url URL --model NAME [options]",
	    .opts = opts,
	    .n_opts = n_opts,
	};
	const char *pos[1];
	int n_pos;
	int rc = cli_parse(&cmd, argc, argv, pos, &n_pos, stdout, stderr);
	if (rc == CLI_HELP)
		return 0;
	if (rc || flags_finish(&f, "serve"))
		return 2;
	struct bench_workload w;
	struct diag d = {0};
	if (bench_workload_build(&f.c, &w, &d)) {
		fprintf(stderr, "aorta bench serve: %s\n", d.msg);
		return d.code == ERR_NOMEM || d.code == ERR_IO ? 1 : 2;
	}
	struct bench_summary s;
	rc = run_once(&f.c, &w, &s, f.json_path);
	bench_workload_free(&w);
	if (rc)
		return rc;
	bench_print_summary(stdout, &f.c, &s);
	/* Exit 1 when nothing succeeded: a dead server must not look like a result. */
	return s.n_ok > 0 ? 0 : 1;
}

/* "1,2,4,inf" -> values; "inf" (rates) is stored as 0 = all at once. */
static int parse_list(const char *s, double *v, int cap, int *n)
{
	*n = 0;
	while (s && *s) {
		if (*n == cap)
			return -1;
		char *end;
		double x;
		if (!strncmp(s, "inf", 3)) {
			x = 0;
			end = (char *)s + 3;
		} else {
			x = strtod(s, &end);
			if (end == s || !(x > 0) || !isfinite(x))
				return -1;
		}
		v[(*n)++] = x;
		if (*end == ',')
			end++;
		else if (*end)
			return -1;
		s = end;
	}
	return *n ? 0 : -1;
}

#define SWEEP_MAX 32

int bench_sweep_main(int argc, char **argv)
{
	struct bench_flags f;
	flags_defaults(&f);
	const char *rates = NULL, *concs = NULL, *csv_path = "bench_sweep.csv",
	           *svg_path = "bench_sweep.svg";
	struct cli_opt opts[N_COMMON_OPTS + 5];
	int n_opts = common_opts(&f, opts);
	opts[n_opts++] = (struct cli_opt){"json-prefix", CLI_STR, &f.json_path, "PREFIX",
	                                  "also write PREFIX<label>.json per point"};
	opts[n_opts++] = (struct cli_opt){"request-rates", CLI_STR, &rates, "R1,R2,..",
	                                  "rates to sweep (inf = all at once)"};
	opts[n_opts++] = (struct cli_opt){"concurrencies", CLI_STR, &concs, "C1,C2,..",
	                                  "max concurrencies to sweep"};
	opts[n_opts++] = (struct cli_opt){"csv", CLI_STR, &csv_path, "FILE",
	                                  "CSV output (default bench_sweep.csv)"};
	opts[n_opts++] =
	    (struct cli_opt){"svg", CLI_STR, &svg_path, "FILE",
	                     "plot of latency vs throughput (default bench_sweep.svg)"};
	const struct cli_cmd cmd = {
	    .name = "bench sweep",
	    .summary = "Run `bench serve` over several request rates or concurrencies; write a "
	               "CSV and an SVG plot of latency vs throughput.",
	    .usage = "aorta bench sweep --base-url URL --model NAME "
	             "(--request-rates LIST | --concurrencies LIST) [options]",
	    .opts = opts,
	    .n_opts = n_opts,
	};
	const char *pos[1];
	int n_pos;
	int rc = cli_parse(&cmd, argc, argv, pos, &n_pos, stdout, stderr);
	if (rc == CLI_HELP)
		return 0;
	if (rc || flags_finish(&f, "sweep"))
		return 2;
	double vals[SWEEP_MAX];
	int n_vals = 0;
	bool by_rate = rates != NULL;
	if ((rates != NULL) == (concs != NULL) ||
	    parse_list(by_rate ? rates : concs, vals, SWEEP_MAX, &n_vals)) {
		fprintf(stderr,
		        "aorta bench sweep: give exactly one of --request-rates or "
		        "--concurrencies, a comma-separated list of up to %d positive "
		        "values\n",
		        SWEEP_MAX);
		return 2;
	}
	struct bench_workload w;
	struct diag d = {0};
	if (bench_workload_build(&f.c, &w, &d)) {
		fprintf(stderr, "aorta bench sweep: %s\n", d.msg);
		return 2;
	}
	FILE *csv = fopen(csv_path, "w");
	if (!csv) {
		fprintf(stderr, "aorta bench sweep: cannot write %s\n", csv_path);
		bench_workload_free(&w);
		return 1;
	}
	fprintf(csv, "label,request_rate,max_concurrency,completed,failed,duration_s,"
	             "request_throughput,output_throughput,total_token_throughput,goodput,"
	             "ttft_mean_ms,ttft_p50_ms,ttft_p99_ms,tpot_mean_ms,tpot_p50_ms,tpot_p99_ms,"
	             "itl_p50_ms,itl_p99_ms,e2e_mean_ms,e2e_p50_ms,e2e_p99_ms\n");
	struct bench_sweep_point pts[SWEEP_MAX];
	int n_pts = 0, n_bad = 0;
	for (int i = 0; i < n_vals; i++) {
		struct bench_config c = f.c;
		struct bench_sweep_point *p = &pts[n_pts];
		if (by_rate) {
			c.request_rate = vals[i];
			if (vals[i] > 0)
				snprintf(p->label, sizeof p->label, "rate=%g", vals[i]);
			else
				snprintf(p->label, sizeof p->label, "rate=inf");
		} else {
			c.max_concurrency = (int)vals[i];
			snprintf(p->label, sizeof p->label, "conc=%d", c.max_concurrency);
		}
		char json[1024];
		if (f.json_path)
			snprintf(json, sizeof json, "%s%s.json", f.json_path, p->label);
		fprintf(stderr, "aorta bench sweep: %s\n", p->label);
		struct bench_summary s;
		if (run_once(&c, &w, &s, f.json_path ? json : NULL)) {
			n_bad++;
			continue;
		}
		bench_print_summary(stdout, &c, &s);
		fprintf(csv,
		        "%s,%g,%d,%d,%d,%.3f,%.4f,%.3f,%.3f,%.4f,%.3f,%.3f,%.3f,%.3f,%.3f,"
		        "%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n",
		        p->label, c.request_rate, c.max_concurrency, s.n_ok, s.n_failed,
		        s.duration_s, s.request_throughput, s.output_throughput,
		        s.total_token_throughput, s.goodput, s.ttft_ms.mean, s.ttft_ms.p50,
		        s.ttft_ms.p99, s.tpot_ms.mean, s.tpot_ms.p50, s.tpot_ms.p99, s.itl_ms.p50,
		        s.itl_ms.p99, s.e2e_ms.mean, s.e2e_ms.p50, s.e2e_ms.p99);
		if (s.n_ok == 0) {
			n_bad++;
			continue;
		}
		p->x = s.output_throughput;
		p->y_p50 = s.e2e_ms.p50;
		p->y_p99 = s.e2e_ms.p99;
		n_pts++;
	}
	bench_workload_free(&w);
	if (fclose(csv)) {
		fprintf(stderr, "aorta bench sweep: write to %s failed\n", csv_path);
		return 1;
	}
	char title[256];
	snprintf(title, sizeof title, "%s: end-to-end latency vs output throughput", f.c.model);
	if (bench_svg_write(svg_path, title, pts, n_pts, &d)) {
		fprintf(stderr, "aorta bench sweep: %s\n", d.msg);
		return 1;
	}
	fprintf(stderr, "aorta bench sweep: wrote %s and %s (%d of %d points)\n", csv_path,
	        svg_path, n_pts, n_vals);
	return n_bad == n_vals ? 1 : 0;
}
