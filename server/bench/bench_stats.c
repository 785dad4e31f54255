/* server/bench/bench_stats.c — the benchmark's numbers: percentiles (linear
 * interpolation, numpy's default), per-metric statistics, the run summary
 * (throughputs, goodput, errors by kind), the human table and the JSON file.
 * Metric definitions are in bench_serve.h. Tested in
 * tests/bench_serve/test_bench_stats.c against values computed with numpy. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "bench_serve.h"
#include "common/checked.h"

double bench_percentile_sorted(const double *sorted, size_t n, double q)
{
	if (n == 0)
		return 0;
	if (q <= 0)
		return sorted[0];
	if (q >= 1)
		return sorted[n - 1];
	double h = (double)(n - 1) * q;
	size_t lo = (size_t)floor(h);
	size_t hi = lo + 1 < n ? lo + 1 : lo;
	return sorted[lo] + (h - (double)lo) * (sorted[hi] - sorted[lo]);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int bench_stat_compute(const double *v, size_t n, struct bench_stat *out)
{
	memset(out, 0, sizeof *out);
	if (n == 0)
		return 0;
	if (n > INT32_MAX)
		return ERR_RANGE;
	size_t bytes;
	if (ck_mul(n, sizeof(double), &bytes))
		return ERR_OVERFLOW;
	double *s = malloc(bytes);
	if (!s)
		return ERR_NOMEM;
	memcpy(s, v, bytes);
	qsort(s, n, sizeof(double), cmp_double);
	double sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += s[i];
	double mean = sum / (double)n;
	double var = 0;
	for (size_t i = 0; i < n; i++)
		var += (s[i] - mean) * (s[i] - mean);
	out->n = (int)n;
	out->mean = mean;
	out->std = sqrt(var / (double)n); /* population std, as numpy.std */
	out->min = s[0];
	out->max = s[n - 1];
	out->p50 = bench_percentile_sorted(s, n, 0.50);
	out->p90 = bench_percentile_sorted(s, n, 0.90);
	out->p99 = bench_percentile_sorted(s, n, 0.99);
	free(s);
	return 0;
}

static const char *const err_names[BENCH_E__COUNT] = {
    [BENCH_OK] = "ok",
    [BENCH_E_HTTP] = "http",
    [BENCH_E_CONNECT] = "connect",
    [BENCH_E_RESET] = "reset",
    [BENCH_E_TIMEOUT] = "timeout",
    [BENCH_E_MALFORMED] = "malformed",
    [BENCH_E_TOO_LARGE] = "too_large",
    [BENCH_E_STREAM] = "stream_error",
    [BENCH_E_EMPTY] = "empty",
    [BENCH_E_CANCELLED] = "cancelled",
    [BENCH_E_NOT_SENT] = "not_sent",
};

const char *bench_err_key(const struct bench_result *r, char *buf, size_t cap)
{
	if (r->err == BENCH_E_HTTP)
		snprintf(buf, cap, "http_%d", r->status);
	else if ((unsigned)r->err < BENCH_E__COUNT)
		snprintf(buf, cap, "%s", err_names[r->err]);
	else
		snprintf(buf, cap, "unknown");
	return buf;
}

static void add_err(struct bench_summary *s, const char *key)
{
	/* Past BENCH_MAX_ERR_KINDS - 1 distinct kinds, the rest fold into "other". */
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < s->n_err_kinds; i++) {
			if (!strcmp(s->errs[i].key, key)) {
				s->errs[i].count++;
				return;
			}
		}
		if (s->n_err_kinds < (pass == 0 ? BENCH_MAX_ERR_KINDS - 1 : BENCH_MAX_ERR_KINDS)) {
			int i = s->n_err_kinds++;
			snprintf(s->errs[i].key, sizeof s->errs[i].key, "%s", key);
			s->errs[i].count = 1;
			return;
		}
		key = "other";
	}
}

int bench_summarize(const struct bench_config *c, const struct bench_result *r, int n,
                    double duration_s, struct bench_summary *s)
{
	memset(s, 0, sizeof *s);
	s->n_requests = n;
	s->duration_s = duration_s;
	s->has_slo = c->slo_ttft_ms > 0 || c->slo_tpot_ms > 0 || c->slo_e2e_ms > 0;
	size_t n_itl = 0;
	for (int i = 0; i < n; i++) {
		if (r[i].err == BENCH_OK && ck_add(n_itl, (size_t)r[i].n_itl, &n_itl))
			return ERR_OVERFLOW;
	}
	size_t n_alloc = (size_t)n * 3 + n_itl + 1, bytes;
	if (ck_mul(n_alloc, sizeof(double), &bytes))
		return ERR_OVERFLOW;
	double *v = malloc(bytes);
	if (!v)
		return ERR_NOMEM;
	double *ttft = v, *tpot = v + n, *e2e = v + 2 * (size_t)n, *itl = v + 3 * (size_t)n;
	size_t n_tpot = 0, k = 0;
	for (int i = 0; i < n; i++) {
		const struct bench_result *q = &r[i];
		s->n_reused += q->reused_connection;
		if (q->err != BENCH_OK) {
			char key[24];
			add_err(s, bench_err_key(q, key, sizeof key));
			s->n_failed++;
			continue;
		}
		ttft[s->n_ok] = q->ttft_s * 1e3;
		e2e[s->n_ok] = q->e2e_s * 1e3;
		double tpot_ms = 0;
		if (q->output_tokens > 1) {
			tpot_ms = (q->e2e_s - q->ttft_s) * 1e3 / (q->output_tokens - 1);
			tpot[n_tpot++] = tpot_ms;
		}
		for (int j = 0; j < q->n_itl; j++)
			itl[k++] = q->itl_s[j] * 1e3;
		s->n_ok++;
		s->total_prompt_tokens += q->prompt_tokens;
		s->total_output_tokens += q->output_tokens;
		if (s->has_slo && (c->slo_ttft_ms <= 0 || q->ttft_s * 1e3 <= c->slo_ttft_ms) &&
		    (c->slo_tpot_ms <= 0 || tpot_ms <= c->slo_tpot_ms) &&
		    (c->slo_e2e_ms <= 0 || q->e2e_s * 1e3 <= c->slo_e2e_ms))
			s->n_good++;
	}
	int rc = bench_stat_compute(ttft, (size_t)s->n_ok, &s->ttft_ms);
	if (!rc)
		rc = bench_stat_compute(tpot, n_tpot, &s->tpot_ms);
	if (!rc)
		rc = bench_stat_compute(e2e, (size_t)s->n_ok, &s->e2e_ms);
	if (!rc)
		rc = bench_stat_compute(itl, k, &s->itl_ms);
	free(v);
	if (rc)
		return rc;
	if (duration_s > 0) {
		s->request_throughput = s->n_ok / duration_s;
		s->output_throughput = (double)s->total_output_tokens / duration_s;
		s->total_token_throughput =
		    (double)(s->total_output_tokens + s->total_prompt_tokens) / duration_s;
		if (s->has_slo)
			s->goodput = s->n_good / duration_s;
	}
	return 0;
}

static void print_stat(FILE *out, const char *name, const struct bench_stat *st)
{
	fprintf(out, "%-10s %10.2f %10.2f %10.2f %10.2f %10.2f %8d\n", name, st->mean, st->p50,
	        st->p90, st->p99, st->max, st->n);
}

void bench_print_summary(FILE *out, const struct bench_config *c, const struct bench_summary *s)
{
	fprintf(out, "============ Serving Benchmark Result ============\n");
	fprintf(out, "%-40s %12d\n", "Successful requests:", s->n_ok);
	fprintf(out, "%-40s %12d\n", "Failed requests:", s->n_failed);
	for (int i = 0; i < s->n_err_kinds; i++)
		fprintf(out, "  %-38s %12d\n", s->errs[i].key, s->errs[i].count);
	if (c->max_concurrency > 0)
		fprintf(out, "%-40s %12d\n", "Maximum request concurrency:", c->max_concurrency);
	if (c->request_rate > 0 && isfinite(c->request_rate))
		fprintf(out, "%-40s %12.2f (%s)\n", "Request rate (req/s):", c->request_rate,
		        c->arrival == BENCH_ARRIVAL_POISSON ? "poisson" : "constant");
	fprintf(out, "%-40s %12.2f\n", "Benchmark duration (s):", s->duration_s);
	fprintf(out, "%-40s %12lld\n", "Total input tokens:", (long long)s->total_prompt_tokens);
	fprintf(out, "%-40s %12lld\n",
	        "Total generated tokens:", (long long)s->total_output_tokens);
	fprintf(out, "%-40s %12.2f\n", "Request throughput (req/s):", s->request_throughput);
	if (s->has_slo)
		fprintf(out, "%-40s %12.2f (%d good)\n", "Request goodput (req/s):", s->goodput,
		        s->n_good);
	fprintf(out, "%-40s %12.2f\n", "Output token throughput (tok/s):", s->output_throughput);
	fprintf(out, "%-40s %12.2f\n",
	        "Total token throughput (tok/s):", s->total_token_throughput);
	fprintf(out, "\n%-10s %10s %10s %10s %10s %10s %8s\n", "(ms)", "mean", "p50", "p90", "p99",
	        "max", "n");
	print_stat(out, "TTFT", &s->ttft_ms);
	print_stat(out, "TPOT", &s->tpot_ms);
	print_stat(out, "ITL", &s->itl_ms);
	print_stat(out, "E2E", &s->e2e_ms);
	fprintf(out, "==================================================\n");
}

static cJSON *stat_json(const struct bench_stat *st)
{
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	cJSON_AddNumberToObject(o, "n", st->n);
	cJSON_AddNumberToObject(o, "mean", st->mean);
	cJSON_AddNumberToObject(o, "std", st->std);
	cJSON_AddNumberToObject(o, "min", st->min);
	cJSON_AddNumberToObject(o, "p50", st->p50);
	cJSON_AddNumberToObject(o, "p90", st->p90);
	cJSON_AddNumberToObject(o, "p99", st->p99);
	cJSON_AddNumberToObject(o, "max", st->max);
	return o;
}

/* The flat keys vLLM's `bench serve --save-result` writes ("mean_ttft_ms",
 * "median_ttft_ms", "p99_ttft_ms", ...; end-to-end is "e2el"), so scripts
 * written for its files read ours. */
static void add_flat(cJSON *root, const char *m, const struct bench_stat *st)
{
	char k[48];
	snprintf(k, sizeof k, "mean_%s_ms", m);
	cJSON_AddNumberToObject(root, k, st->mean);
	snprintf(k, sizeof k, "median_%s_ms", m);
	cJSON_AddNumberToObject(root, k, st->p50);
	snprintf(k, sizeof k, "std_%s_ms", m);
	cJSON_AddNumberToObject(root, k, st->std);
	snprintf(k, sizeof k, "p90_%s_ms", m);
	cJSON_AddNumberToObject(root, k, st->p90);
	snprintf(k, sizeof k, "p99_%s_ms", m);
	cJSON_AddNumberToObject(root, k, st->p99);
}

static cJSON *config_json(const struct bench_config *c)
{
	static const char *const ds[] = {"fixed", "sharegpt", "jsonl"};
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	cJSON_AddStringToObject(o, "base_url", c->base_url ? c->base_url : "");
	cJSON_AddStringToObject(o, "model", c->model ? c->model : "");
	cJSON_AddStringToObject(
	    o, "endpoint", c->api == BENCH_API_CHAT ? "/v1/chat/completions" : "/v1/completions");
	cJSON_AddNumberToObject(o, "num_prompts", c->num_prompts);
	cJSON_AddNumberToObject(o, "max_concurrency", c->max_concurrency);
	if (c->request_rate > 0 && isfinite(c->request_rate))
		cJSON_AddNumberToObject(o, "request_rate", c->request_rate);
	else
		cJSON_AddStringToObject(o, "request_rate", "inf");
	cJSON_AddStringToObject(o, "arrival",
	                        c->arrival == BENCH_ARRIVAL_POISSON ? "poisson" : "constant");
	cJSON_AddNumberToObject(o, "seed", (double)c->seed);
	cJSON_AddNumberToObject(o, "burstiness", c->burstiness);
	cJSON_AddStringToObject(o, "dataset", ds[c->dataset]);
	cJSON_AddBoolToObject(o, "keep_alive", c->keep_alive);
	cJSON_AddNumberToObject(o, "input_len", c->input_len);
	cJSON_AddNumberToObject(o, "output_len", c->output_len);
	cJSON_AddNumberToObject(o, "prefix_len", c->prefix_len);
	cJSON_AddNumberToObject(o, "num_prefix_groups", c->num_prefix_groups);
	if (c->slo_ttft_ms > 0)
		cJSON_AddNumberToObject(o, "slo_ttft_ms", c->slo_ttft_ms);
	if (c->slo_tpot_ms > 0)
		cJSON_AddNumberToObject(o, "slo_tpot_ms", c->slo_tpot_ms);
	if (c->slo_e2e_ms > 0)
		cJSON_AddNumberToObject(o, "slo_e2e_ms", c->slo_e2e_ms);
	cJSON_AddNumberToObject(o, "request_timeout_s", c->request_timeout_s);
	cJSON_AddBoolToObject(o, "ignore_eos", c->ignore_eos);
	cJSON_AddNumberToObject(o, "temperature", c->temperature);
	return o;
}

static cJSON *requests_json(const struct bench_result *r, int n, bool detailed)
{
	cJSON *a = cJSON_CreateArray();
	for (int i = 0; a && i < n; i++) {
		cJSON *o = cJSON_CreateObject();
		if (!o || !cJSON_AddItemToArray(a, o)) {
			cJSON_Delete(o);
			break;
		}
		char key[24];
		cJSON_AddStringToObject(o, "result", bench_err_key(&r[i], key, sizeof key));
		cJSON_AddNumberToObject(o, "status", r[i].status);
		cJSON_AddNumberToObject(o, "start_ms", r[i].start_s * 1e3);
		if (r[i].ttft_s >= 0)
			cJSON_AddNumberToObject(o, "ttft_ms", r[i].ttft_s * 1e3);
		cJSON_AddNumberToObject(o, "e2e_ms", r[i].e2e_s * 1e3);
		cJSON_AddNumberToObject(o, "prompt_tokens", r[i].prompt_tokens);
		cJSON_AddNumberToObject(o, "output_tokens", r[i].output_tokens);
		cJSON_AddBoolToObject(o, "usage_from_server", r[i].usage_from_server);
		cJSON_AddBoolToObject(o, "reused_connection", r[i].reused_connection);
		cJSON_AddNumberToObject(o, "chunks", r[i].n_chunks);
		if (!detailed)
			continue;
		cJSON *itl = cJSON_AddArrayToObject(o, "itl_ms");
		for (int j = 0; itl && j < r[i].n_itl; j++)
			cJSON_AddItemToArray(itl, cJSON_CreateNumber(r[i].itl_s[j] * 1e3));
	}
	return a;
}

int bench_write_json(const char *path, const struct bench_config *c, const struct bench_summary *s,
                     const struct bench_result *r, int n, struct diag *d)
{
	cJSON *root = cJSON_CreateObject();
	if (!root)
		return diag_set(d, ERR_NOMEM, "out of memory");
	cJSON_AddItemToObject(root, "config", config_json(c));
	cJSON_AddNumberToObject(root, "duration_s", s->duration_s);
	cJSON_AddNumberToObject(root, "completed", s->n_ok);
	cJSON_AddNumberToObject(root, "failed", s->n_failed);
	cJSON *errs = cJSON_AddObjectToObject(root, "errors");
	for (int i = 0; errs && i < s->n_err_kinds; i++)
		cJSON_AddNumberToObject(errs, s->errs[i].key, s->errs[i].count);
	cJSON_AddNumberToObject(root, "total_input_tokens", (double)s->total_prompt_tokens);
	cJSON_AddNumberToObject(root, "total_output_tokens", (double)s->total_output_tokens);
	cJSON_AddNumberToObject(root, "request_throughput", s->request_throughput);
	cJSON_AddNumberToObject(root, "output_throughput", s->output_throughput);
	cJSON_AddNumberToObject(root, "total_token_throughput", s->total_token_throughput);
	cJSON_AddNumberToObject(root, "reused_connections", s->n_reused);
	if (s->has_slo) {
		cJSON_AddNumberToObject(root, "goodput", s->goodput);
		cJSON_AddNumberToObject(root, "good_requests", s->n_good);
	}
	cJSON_AddItemToObject(root, "ttft_ms", stat_json(&s->ttft_ms));
	cJSON_AddItemToObject(root, "tpot_ms", stat_json(&s->tpot_ms));
	cJSON_AddItemToObject(root, "itl_ms", stat_json(&s->itl_ms));
	cJSON_AddItemToObject(root, "e2e_ms", stat_json(&s->e2e_ms));
	add_flat(root, "ttft", &s->ttft_ms);
	add_flat(root, "tpot", &s->tpot_ms);
	add_flat(root, "itl", &s->itl_ms);
	add_flat(root, "e2el", &s->e2e_ms);
	cJSON_AddItemToObject(root, "requests", requests_json(r, n, c->save_detailed));
	char *text = cJSON_Print(root);
	cJSON_Delete(root);
	if (!text)
		return diag_set(d, ERR_NOMEM, "out of memory rendering JSON");
	FILE *f = fopen(path, "w");
	if (!f) {
		cJSON_free(text);
		return diag_set(d, ERR_IO, "%s: cannot open for writing", path);
	}
	size_t len = strlen(text);
	bool ok = fwrite(text, 1, len, f) == len && fputc('\n', f) != EOF;
	ok = (fclose(f) == 0) && ok;
	cJSON_free(text);
	return ok ? 0 : diag_set(d, ERR_IO, "%s: write failed", path);
}
