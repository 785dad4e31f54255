/* common/histogram.h — a fixed-bucket histogram that many threads can feed.
 *
 * For the server's latency metrics (time to first token, inter-token
 * latency, ...): the engine and loop threads call histogram_observe()
 * concurrently without locks (C11 atomics); the /metrics handler reads a
 * snapshot and renders it with api/metrics_text.h. A snapshot is not one
 * atomic cut across buckets, but its count is the sum of its buckets, so
 * what it renders is always self-consistent.
 *
 * Caller-allocated struct; bounds are borrowed (must outlive it), finite and
 * ascending. init/deinit on one thread; observe/snapshot on any thread.
 * Tests: tests/api/test_metrics_text.c.
 */
#ifndef AORTA_COMMON_HISTOGRAM_H
#define AORTA_COMMON_HISTOGRAM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct histogram {
	const double *bounds; /* n_bounds upper bounds (le), borrowed */
	size_t n_bounds;
	_Atomic uint64_t *counts; /* n_bounds + 1 per-bucket counts; last = above all */
	_Atomic uint64_t sum_bits; /* the sum of observed values, as double bits */
};

/* ERR_INVAL for unsorted or non-finite bounds, ERR_NOMEM. */
int histogram_init(struct histogram *h, const double *bounds, size_t n_bounds);
void histogram_deinit(struct histogram *h);
/* v goes to the first bucket whose bound is >= v (Prometheus "le"). NaN is
 * ignored. */
void histogram_observe(struct histogram *h, double v);
/* counts: n_bounds + 1 entries (per bucket, not cumulative). */
void histogram_snapshot(struct histogram *h, uint64_t *counts, uint64_t *count, double *sum);

#endif
