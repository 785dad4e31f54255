/* batching/stop.h — stop strings over streamed text.
 *
 * Owns: a copy of a request's stop strings and the text it is holding back.
 * Feed it the incremental detokenizer's text deltas; it appends to `out` the
 * text that is safe to show now and holds back exactly the longest suffix that
 * is a proper prefix of some stop string (plus, defensively, an incomplete
 * trailing UTF-8 sequence), releasing it as soon as it can no longer become a
 * match. On a match the text before the stop string is released, the stop
 * string and everything after it are dropped (OpenAI behaviour), and the
 * matcher is done.
 *
 * Which match wins: the one that completes first in the text (smallest end
 * offset); on a tie the one starting earlier (the longer), then the lower
 * index. This depends only on the text, not on how it was split into deltas,
 * so streaming output concatenated equals the non-streaming output.
 *
 * Works on bytes. Stop strings must be valid UTF-8 (sampling_params_validate
 * checks), so in valid UTF-8 text a match and the held suffix always start on
 * a character boundary and released text never splits a character.
 * Cost per feed: O(n_stops * (len + L^2)), L = longest stop string; the
 * sampling params bound both (SAMPLER_MAX_STOP, SAMPLER_MAX_STOP_BYTES).
 *
 * One owner thread (the engine thread). Tested in tests/batching/test_stop.c.
 */
#ifndef AORTA_BATCHING_STOP_H
#define AORTA_BATCHING_STOP_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"
#include "common/err.h"

struct stop_matcher {
	char **stops;	 /* [n_stops] owned copies */
	size_t *lens;	 /* [n_stops] */
	int n_stops;
	size_t max_len;	 /* longest stop string */
	struct buf held; /* text withheld: it could still become a match */
	bool done;	 /* matched or flushed; further feeds are ERR_STATE */
	int matched;	 /* index of the stop string that matched, -1 if none */
};

/* Copies the strings (borrowed for the call). n_stops 0 is fine (pass-through).
 * ERR_INVAL for an empty or NULL string. */
int stop_matcher_init(struct stop_matcher *m, const char *const *stops, int n_stops);
void stop_matcher_deinit(struct stop_matcher *m);

/* Feed one delta. Appends the releasable text to out. *matched (may be NULL)
 * gets the index of the stop string that matched in this feed, or -1.
 * can_stop = false (min_tokens not reached yet) means a stop string completing
 * in this delta is ordinary text; text that could still complete one later is
 * held as usual. ERR_STATE after a match or a flush. */
int stop_matcher_feed(struct stop_matcher *m, const char *text, size_t len, bool can_stop,
		      struct buf *out, int *matched);

/* Generation ended without a match: release whatever is held. */
int stop_matcher_flush(struct stop_matcher *m, struct buf *out);

/* Bytes currently held back. */
static inline size_t stop_matcher_held(const struct stop_matcher *m)
{
	return m->held.len;
}

#endif
