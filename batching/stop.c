/* batching/stop.c — the stop-string matcher described in stop.h.
 *
 * Invariant between feeds: `held` is the longest suffix of all text fed so far
 * that is a proper prefix of some stop string (or an incomplete UTF-8 tail),
 * and no stop string occurs complete inside it once armed. Hence a match in
 * held + delta must end inside the delta, and a match can never have started
 * in text already released. Test: tests/batching/test_stop.c.
 */
#include "batching/stop.h"

#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

int stop_matcher_init(struct stop_matcher *m, const char *const *stops, int n_stops)
{
	memset(m, 0, sizeof(*m));
	buf_init(&m->held);
	m->matched = -1;
	if (n_stops < 0 || (n_stops > 0 && !stops))
		return ERR_INVAL;
	if (n_stops == 0)
		return 0;
	m->stops = calloc((size_t)n_stops, sizeof(*m->stops));
	m->lens = calloc((size_t)n_stops, sizeof(*m->lens));
	if (!m->stops || !m->lens) {
		stop_matcher_deinit(m);
		return ERR_NOMEM;
	}
	m->n_stops = n_stops;
	for (int i = 0; i < n_stops; i++) {
		if (!stops[i] || !stops[i][0]) {
			stop_matcher_deinit(m);
			return ERR_INVAL;
		}
		m->lens[i] = strlen(stops[i]);
		m->stops[i] = strdup(stops[i]);
		if (!m->stops[i]) {
			stop_matcher_deinit(m);
			return ERR_NOMEM;
		}
		if (m->lens[i] > m->max_len)
			m->max_len = m->lens[i];
	}
	return 0;
}

void stop_matcher_deinit(struct stop_matcher *m)
{
	if (m->stops)
		for (int i = 0; i < m->n_stops; i++)
			free(m->stops[i]);
	free(m->stops);
	free(m->lens);
	buf_deinit(&m->held);
	m->stops = NULL;
	m->lens = NULL;
	m->n_stops = 0;
}

/* Longest k <= limit such that w[n-k..n) is a proper prefix of some stop. */
static size_t longest_partial(const struct stop_matcher *m, const char *w, size_t n)
{
	size_t limit = m->max_len ? m->max_len - 1 : 0;
	if (limit > n)
		limit = n;
	for (size_t k = limit; k > 0; k--)
		for (int i = 0; i < m->n_stops; i++)
			if (m->lens[i] > k && w[n - k] == m->stops[i][0] &&
			    memcmp(w + n - k, m->stops[i], k) == 0)
				return k;
	return 0;
}

int stop_matcher_feed(struct stop_matcher *m, const char *text, size_t len, bool can_stop,
		      struct buf *out, int *matched)
{
	if (matched)
		*matched = -1;
	if (m->done)
		return ERR_STATE;
	size_t h = m->held.len;
	int rc = buf_append(&m->held, text, len);
	if (rc)
		return rc;
	const char *w = m->held.data ? m->held.data : "";
	size_t n = m->held.len;

	if (can_stop) {
		int best = -1;
		size_t best_end = 0, best_pos = 0;
		for (int i = 0; i < m->n_stops; i++) {
			size_t L = m->lens[i];
			if (L > n)
				continue;
			/* only matches that end inside the new delta (end > h) */
			size_t from = h + 1 > L ? h + 1 - L : 0;
			const char *f = memmem(w + from, n - from, m->stops[i], L);
			if (!f)
				continue;
			size_t pos = (size_t)(f - w), end = pos + L;
			if (best < 0 || end < best_end || (end == best_end && pos < best_pos)) {
				best = i;
				best_end = end;
				best_pos = pos;
			}
		}
		if (best >= 0) {
			rc = buf_append(out, w, best_pos);
			if (rc)
				return rc;
			buf_clear(&m->held);
			m->done = true;
			m->matched = best;
			if (matched)
				*matched = best;
			return 0;
		}
	}

	size_t r = utf8_cut(w, n, n - longest_partial(m, w, n));
	if (r > 0) {
		rc = buf_append(out, w, r);
		if (rc)
			return rc;
		buf_consume(&m->held, r);
	}
	return 0;
}

int stop_matcher_flush(struct stop_matcher *m, struct buf *out)
{
	if (m->done)
		return ERR_STATE;
	int rc = m->held.len ? buf_append(out, m->held.data, m->held.len) : 0;
	if (rc)
		return rc;
	buf_clear(&m->held);
	m->done = true;
	return 0;
}
