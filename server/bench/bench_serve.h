/* server/bench/bench_serve.h — `aorta bench serve` and `aorta bench sweep`: a load
 * generator and latency/throughput meter for any OpenAI-compatible endpoint
 * (aorta or another server), following vLLM's `bench serve` methodology.
 *
 * Owns: the benchmark configuration, the workload (prompts), the run loop (a
 * private libuv loop on the calling thread; HTTP/1.1 connections, reused with
 * keep-alive unless --no-keep-alive; streaming SSE), per-request records and
 * their summary.
 * Single-threaded: every function runs on the caller's thread; bench_run()
 * blocks until all requests have finished or timed out.
 *
 * Metric definitions (all per successful request unless stated):
 *   TTFT  time from starting the request (before connecting, when it needs a
 *         new connection) to the first chunk
 *         carrying non-empty content (completions: choices[0].text; chat:
 *         choices[0].delta.content or .reasoning_content).
 *   ITL   gaps between consecutive content chunks (one sample per gap; a chunk
 *         carrying several tokens is one gap, as in vLLM).
 *   TPOT  (e2e - TTFT) / (output_tokens - 1); only requests with >= 2 output
 *         tokens contribute.
 *   E2E   time from starting the request to the end of the response (the
 *         chunk terminator after `data: [DONE]`).
 *   output_tokens: the server's usage.completion_tokens when it sends usage
 *         (we always ask: stream_options.include_usage); otherwise the count of
 *         non-empty content chunks. prompt_tokens likewise, else the workload's
 *         intended prompt length.
 *   Request throughput = successes / duration; output token throughput =
 *   sum(output_tokens) / duration; total token throughput adds prompt tokens;
 *   goodput = successes meeting every given SLO (TTFT <= --slo-ttft-ms,
 *   TPOT <= --slo-tpot-ms, E2E <= --slo-e2e-ms) / duration.
 *   duration = first request start to last request end.
 *   Percentiles: linear interpolation between closest ranks, numpy's default
 *   ("linear", Hyndman-Fan type 7): h = (n-1)q,
 *   v = x[floor h] + (h - floor h) * (x[ceil h] - x[floor h]).
 *
 * Arrivals at --request-rate R: constant gaps 1/R, or Poisson (exponential
 * gaps, mean 1/R); --burstiness B draws the gaps from Gamma(shape B, mean 1/R)
 * as vLLM does (B = 1 Poisson, B < 1 burstier, B > 1 more even). With
 * --max-concurrency too, an arrived request waits for a free slot.
 *
 * A request is a success only when the status is 200 and the stream ends with
 * `data: [DONE]` after at least one content chunk. Everything else is an error
 * counted by kind ("http_500", "http_429", "connect", "reset", "timeout",
 * "malformed", "too_large", "stream_error", "empty"), never a fast success.
 * With handle_sigint (the commands set it), Ctrl-C ends the run at once: the
 * requests in flight count as "cancelled", the rest as "not_sent", and the
 * summary covers what finished.
 *
 * Workloads (prompts built without a tokenizer from a list of common English
 * words that are one token each in the usual BPE vocabularies, so a prompt of
 * N words is close to N tokens; the actual count comes from usage):
 *   fixed     every prompt --input-len words, every request --output-len tokens.
 *   sharegpt  lengths drawn from log-normal distributions resembling ShareGPT
 *             conversations (not fitted to the data set): input median 220,
 *             sigma 0.9, clipped to [4, 2048]; output median 180, sigma 0.8,
 *             clipped to [4, 1024]. Each clip bound is lowered by
 *             --max-input-len / --max-output-len when given.
 *   jsonl     one JSON object per line: {"prompt": "...", "output_len": N}
 *             (output_len optional: --output-len); lines are used in order and
 *             wrap around when --num-prompts exceeds them.
 *   --tokenizer PATH (tokenizer.json, an HF model directory or a GGUF file)
 *   builds fixed/sharegpt prompts from random non-special tokens instead:
 *   decode, re-encode and adjust (up to 4 rounds, like vLLM's random dataset)
 *   so the text encodes to the target length; prompt_len is then the exact
 *   count with special tokens (BOS), as a server with that tokenizer reports
 *   for /v1/completions. JSONL prompts are counted with it too.
 *   --prefix-len P --num-prefix-groups G prepends to every prompt one of G
 *   fixed P-word (P-token with --tokenizer) prefixes (request i uses group
 *   i mod G), to measure prefix caching.
 * Ownership: configs borrow their strings; workloads and results own theirs.
 */
#ifndef AORTA_SERVER_BENCH_BENCH_SERVE_H
#define AORTA_SERVER_BENCH_BENCH_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/err.h"

enum bench_api { BENCH_API_COMPLETIONS, BENCH_API_CHAT };
enum bench_arrival { BENCH_ARRIVAL_POISSON, BENCH_ARRIVAL_CONSTANT };
enum bench_dataset { BENCH_DATA_FIXED, BENCH_DATA_SHAREGPT, BENCH_DATA_JSONL };

struct bench_config {
	const char *base_url; /* http://host:port[/prefix]; "/v1/..." is appended */
	const char *model;
	const char *api_key; /* NULL: no Authorization header */
	enum bench_api api;
	int num_prompts;
	int max_concurrency; /* 0: unlimited */
	double request_rate; /* requests/s; <= 0 or inf: all at t=0 */
	enum bench_arrival arrival;
	double burstiness; /* poisson: gamma gaps of this shape (1 = Poisson) */
	uint64_t seed;
	enum bench_dataset dataset;
	int input_len, output_len;         /* fixed (and jsonl default output) */
	int max_input_len, max_output_len; /* sharegpt clip (0: defaults) */
	const char *dataset_path;          /* jsonl */
	const char *tokenizer_path;        /* NULL: word prompts, lengths approximate */
	int prefix_len, num_prefix_groups;
	bool ignore_eos;
	double temperature;
	double slo_ttft_ms, slo_tpot_ms, slo_e2e_ms; /* <= 0: not set */
	double request_timeout_s;
	size_t max_response_bytes; /* per response; over it the request is an error */
	bool keep_alive;           /* reuse connections (HTTP/1.1 keep-alive); default on */
	bool progress;             /* live progress line on stderr */
	bool save_detailed;        /* JSON: each request's ITL samples too */
	bool handle_sigint;        /* SIGINT ends the run early, with a summary */
};

void bench_config_defaults(struct bench_config *c);

/* ---- workload ---- */

struct bench_prompt {
	char *text;     /* owned */
	int prompt_len; /* intended length in words (~tokens) */
	int output_len; /* max_tokens to ask for */
};

struct bench_workload {
	struct bench_prompt *items; /* owned, n entries */
	int n;
};

int bench_workload_build(const struct bench_config *c, struct bench_workload *w, struct diag *d);
void bench_workload_free(struct bench_workload *w);

/* ---- per-request records ---- */

enum bench_err {
	BENCH_OK = 0,
	BENCH_E_HTTP,      /* non-200 status (see status) */
	BENCH_E_CONNECT,   /* could not connect */
	BENCH_E_RESET,     /* connection closed/reset before the response ended */
	BENCH_E_TIMEOUT,   /* --request-timeout elapsed */
	BENCH_E_MALFORMED, /* bad HTTP, SSE or JSON; or no [DONE] */
	BENCH_E_TOO_LARGE, /* response over max_response_bytes */
	BENCH_E_STREAM,    /* the stream carried an "error" object */
	BENCH_E_EMPTY,     /* 200 and [DONE] but no content */
	BENCH_E_CANCELLED, /* in flight when the run was interrupted (SIGINT) */
	BENCH_E_NOT_SENT,  /* not yet sent when the run was interrupted */
	BENCH_E__COUNT
};

struct bench_result {
	enum bench_err err;
	int status;     /* HTTP status, 0 if none was read */
	double start_s; /* since the run began */
	double ttft_s;  /* < 0: no content seen */
	double e2e_s;
	int prompt_tokens;
	int output_tokens;
	int n_chunks; /* content chunks */
	bool usage_from_server;
	bool reused_connection; /* sent on a connection an earlier request used */
	double *itl_s;          /* owned, n_itl gaps */
	int n_itl;
};

/* Error kind for the summary's error table: "http_<status>" or a fixed name.
 * Writes into buf (at least 16 bytes) and returns it. */
const char *bench_err_key(const struct bench_result *r, char *buf, size_t cap);

/* Run the workload against c->base_url. results must hold w->n entries; each
 * is filled (free them with bench_results_free). *duration_s is the time from
 * the first start to the last completion. Fails only on bad configuration
 * (address, allocation); failed requests are recorded, not returned. */
int bench_run(const struct bench_config *c, const struct bench_workload *w,
              struct bench_result *results, double *duration_s, struct diag *d);
void bench_results_free(struct bench_result *results, int n);

/* ---- statistics ---- */

struct bench_stat {
	int n;
	double mean, std, min, max, p50, p90, p99; /* 0 when n == 0 */
};

/* q in [0,1] of sorted[0..n), linear interpolation (see above); n >= 1. */
double bench_percentile_sorted(const double *sorted, size_t n, double q);
/* Sort a copy of v[0..n) and fill out. n may be 0. */
int bench_stat_compute(const double *v, size_t n, struct bench_stat *out);

#define BENCH_MAX_ERR_KINDS 32
struct bench_summary {
	int n_requests, n_ok, n_failed;
	double duration_s;
	int64_t total_prompt_tokens, total_output_tokens; /* successes only */
	double request_throughput, output_throughput, total_token_throughput;
	bool has_slo;
	int n_good;
	int n_reused;   /* requests sent on reused connections */
	double goodput; /* requests/s meeting all SLOs; 0 if !has_slo */
	struct bench_stat ttft_ms, tpot_ms, itl_ms, e2e_ms;
	int n_err_kinds;
	struct {
		char key[24];
		int count;
	} errs[BENCH_MAX_ERR_KINDS];
};

int bench_summarize(const struct bench_config *c, const struct bench_result *r, int n,
                    double duration_s, struct bench_summary *s);
void bench_print_summary(FILE *out, const struct bench_config *c, const struct bench_summary *s);
/* Write config, summary and per-request records as JSON to path. */
int bench_write_json(const char *path, const struct bench_config *c, const struct bench_summary *s,
                     const struct bench_result *r, int n, struct diag *d);

/* ---- sweep output ---- */

struct bench_sweep_point {
	char label[32];      /* "rate=4" / "conc=8" */
	double x;            /* output tokens/s */
	double y_p50, y_p99; /* end-to-end latency, ms */
};
/* A line plot of latency (p50 and p99) against throughput, as SVG. */
int bench_svg_write(const char *path, const char *title, const struct bench_sweep_point *pts, int n,
                    struct diag *d);

/* ---- commands (exit status: 0 ok, 1 runtime failure, 2 usage) ---- */

int bench_serve_main(int argc, char **argv);
int bench_sweep_main(int argc, char **argv);
/* `aorta bench engine` (bench_engine.c): the engine alone, no HTTP. */
int bench_engine_main(int argc, char **argv);

#endif
