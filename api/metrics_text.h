/* api/metrics_text.h — the Prometheus text exposition format (version 0.0.4)
 * for GET /metrics: # HELP / # TYPE lines, counters, gauges and histograms
 * (_bucket{le="..."} cumulative, _sum, _count).
 *
 * Pure functions appending to a caller-owned struct buf; the numbers come
 * from the caller (the histogram data itself can live in common/histogram.h).
 * labels: a pre-rendered label list without braces, such as
 * `model_name="tiny"` (build it with api_metrics_labels), or NULL.
 * Metric names must match [a-zA-Z_:][a-zA-Z0-9_:]* (ERR_INVAL otherwise).
 * Threads: reentrant. Tests: tests/api/test_metrics_text.c.
 */
#ifndef AORTA_API_METRICS_TEXT_H
#define AORTA_API_METRICS_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

/* The server's metric names (vLLM's, with the aorta: prefix). */
#define API_M_REQUESTS_RUNNING "aorta:num_requests_running"
#define API_M_REQUESTS_WAITING "aorta:num_requests_waiting"
#define API_M_KV_CACHE_USAGE "aorta:kv_cache_usage_perc"
#define API_M_PROMPT_TOKENS "aorta:prompt_tokens_total"
#define API_M_GENERATION_TOKENS "aorta:generation_tokens_total"
#define API_M_PREEMPTIONS "aorta:num_preemptions_total"
#define API_M_PREFIX_QUERIES "aorta:prefix_cache_queries_total"
#define API_M_PREFIX_HITS "aorta:prefix_cache_hits_total"
#define API_M_TTFT "aorta:time_to_first_token_seconds"
#define API_M_ITL "aorta:inter_token_latency_seconds"
#define API_M_E2E "aorta:e2e_request_latency_seconds"
#define API_M_QUEUE_TIME "aorta:request_queue_time_seconds"
#define API_M_REQUEST_SUCCESS "aorta:request_success_total"

/* Upper bounds (seconds) suited to each latency histogram; read-only. */
const double *api_metrics_buckets_ttft(size_t *n);    /* 1 ms .. 80 s */
const double *api_metrics_buckets_itl(size_t *n);     /* 10 ms .. 80 s */
const double *api_metrics_buckets_request(size_t *n); /* 0.3 s .. 7680 s (e2e, queue) */

/* key="value" pairs joined by commas, values escaped (\\, \", \n). */
int api_metrics_labels(struct buf *out, const char *const *keys, const char *const *values,
		       size_t n);

int api_metrics_counter(struct buf *out, const char *name, const char *help, const char *labels,
			double value);
int api_metrics_gauge(struct buf *out, const char *name, const char *help, const char *labels,
		      double value);
/* One counter with n samples, one per label set (labels[i], value[i]): a
 * single # HELP / # TYPE, as the format requires. */
int api_metrics_counter_series(struct buf *out, const char *name, const char *help,
			       const char *const *labels, const double *values, size_t n);
/* bucket_counts: n_bounds + 1 per-bucket (not cumulative) counts, the last
 * one for values above every bound; bounds ascending. _count is their sum. */
int api_metrics_histogram(struct buf *out, const char *name, const char *help, const char *labels,
			  const double *bounds, const uint64_t *bucket_counts, size_t n_bounds,
			  double sum);

#endif
