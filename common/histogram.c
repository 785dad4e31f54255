/* common/histogram.c — lock-free fixed-bucket histogram (see histogram.h).
 * The sum is a double kept as its bit pattern in an atomic uint64 and
 * updated with a compare-and-swap loop. Tests: tests/api/test_metrics_text.c.
 */
#include "histogram.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

int histogram_init(struct histogram *h, const double *bounds, size_t n_bounds)
{
	for (size_t i = 0; i < n_bounds; i++)
		if (!isfinite(bounds[i]) || (i && !(bounds[i] > bounds[i - 1])))
			return ERR_INVAL;
	h->counts = calloc(n_bounds + 1, sizeof *h->counts);
	if (!h->counts)
		return ERR_NOMEM;
	for (size_t i = 0; i <= n_bounds; i++)
		atomic_init(&h->counts[i], 0);
	double zero = 0.0;
	uint64_t bits;
	memcpy(&bits, &zero, sizeof bits);
	atomic_init(&h->sum_bits, bits);
	h->bounds = bounds;
	h->n_bounds = n_bounds;
	return 0;
}

void histogram_deinit(struct histogram *h)
{
	free(h->counts);
	h->counts = NULL;
	h->n_bounds = 0;
}

void histogram_observe(struct histogram *h, double v)
{
	if (isnan(v))
		return;
	/* binary search: first bound >= v */
	size_t lo = 0, hi = h->n_bounds;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (h->bounds[mid] >= v)
			hi = mid;
		else
			lo = mid + 1;
	}
	atomic_fetch_add_explicit(&h->counts[lo], 1, memory_order_relaxed);
	uint64_t old = atomic_load_explicit(&h->sum_bits, memory_order_relaxed), upd;
	do {
		double s;
		memcpy(&s, &old, sizeof s);
		s += v;
		memcpy(&upd, &s, sizeof upd);
	} while (!atomic_compare_exchange_weak_explicit(&h->sum_bits, &old, upd,
							memory_order_relaxed, memory_order_relaxed));
}

void histogram_snapshot(struct histogram *h, uint64_t *counts, uint64_t *count, double *sum)
{
	uint64_t total = 0;
	for (size_t i = 0; i <= h->n_bounds; i++) {
		counts[i] = atomic_load_explicit(&h->counts[i], memory_order_relaxed);
		total += counts[i];
	}
	uint64_t bits = atomic_load_explicit(&h->sum_bits, memory_order_relaxed);
	memcpy(sum, &bits, sizeof *sum);
	*count = total;
}
