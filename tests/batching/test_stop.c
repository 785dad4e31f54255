/* tests/batching/test_stop.c — batching/stop.h: stop strings over streamed text.
 *
 * Hand-written cases (a stop spanning deltas, at the very first token,
 * overlapping stops, multi-byte characters) plus a randomized property test:
 * for random texts, stop sets and splits, the streamed output concatenated
 * equals the one-shot output and a brute-force reference, every released
 * chunk is whole UTF-8, and the held-back text is exactly the longest suffix
 * that could still become a match.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "engine/sample/rng.h"
#include "batching/stop.h"

/* Feed each delta; return everything released (caller frees) and the match. */
static char *run_feeds(const char *const *stops, int n_stops, const char *const *deltas,
		       int n_deltas, int *matched, bool flush)
{
	struct stop_matcher m;
	struct buf out;
	buf_init(&out);
	ck_assert_int_eq(stop_matcher_init(&m, stops, n_stops), 0);
	*matched = -1;
	for (int i = 0; i < n_deltas; i++) {
		int which;
		ck_assert_int_eq(stop_matcher_feed(&m, deltas[i], strlen(deltas[i]), true, &out,
						   &which),
				 0);
		if (which >= 0) {
			*matched = which;
			ck_assert_int_eq(stop_matcher_feed(&m, "x", 1, true, &out, NULL), ERR_STATE);
			break;
		}
	}
	if (*matched < 0 && flush)
		ck_assert_int_eq(stop_matcher_flush(&m, &out), 0);
	stop_matcher_deinit(&m);
	size_t len;
	return buf_take(&out, &len);
}

START_TEST(test_no_stops_pass_through)
{
	const char *d[] = { "hello", " ", "world" };
	int which;
	char *s = run_feeds(NULL, 0, d, 3, &which, false);
	ck_assert_str_eq(s, "hello world"); /* nothing held without stops */
	ck_assert_int_eq(which, -1);
	free(s);
}
END_TEST

START_TEST(test_stop_spans_tokens)
{
	const char *stops[] = { "###" };
	const char *d[] = { "abc#", "#", "#def" };
	int which;
	char *s = run_feeds(stops, 1, d, 3, &which, true);
	ck_assert_str_eq(s, "abc");
	ck_assert_int_eq(which, 0);
	free(s);
}
END_TEST

START_TEST(test_stop_at_first_token)
{
	const char *stops[] = { "foo", "Hi" };
	const char *d[] = { "Hi there" };
	int which;
	char *s = run_feeds(stops, 2, d, 1, &which, true);
	ck_assert_str_eq(s, "");
	ck_assert_int_eq(which, 1);
	free(s);
}
END_TEST

START_TEST(test_hold_and_release)
{
	const char *stops[] = { "END" };
	struct stop_matcher m;
	struct buf out;
	buf_init(&out);
	ck_assert_int_eq(stop_matcher_init(&m, stops, 1), 0);
	int which;
	ck_assert_int_eq(stop_matcher_feed(&m, "hello E", 7, true, &out, &which), 0);
	ck_assert_str_eq(out.data, "hello ");
	ck_assert_uint_eq(stop_matcher_held(&m), 1);
	ck_assert_int_eq(stop_matcher_feed(&m, "N", 1, true, &out, &which), 0);
	ck_assert_uint_eq(stop_matcher_held(&m), 2);
	ck_assert_int_eq(stop_matcher_feed(&m, "x", 1, true, &out, &which), 0);
	ck_assert_str_eq(out.data, "hello ENx"); /* released as soon as it cannot match */
	ck_assert_uint_eq(stop_matcher_held(&m), 0);
	ck_assert_int_eq(stop_matcher_feed(&m, "EN", 2, true, &out, &which), 0);
	ck_assert_int_eq(stop_matcher_flush(&m, &out), 0);
	ck_assert_str_eq(out.data, "hello ENxEN"); /* flush releases the held "EN" */
	ck_assert_int_eq(stop_matcher_flush(&m, &out), ERR_STATE);
	stop_matcher_deinit(&m);
	buf_deinit(&out);
}
END_TEST

START_TEST(test_overlapping_stops)
{
	int which;
	/* "bc" completes before "abcd" could */
	const char *s1[] = { "abcd", "bc" };
	const char *d1[] = { "a", "b", "c", "d" };
	char *s = run_feeds(s1, 2, d1, 4, &which, true);
	ck_assert_str_eq(s, "a");
	ck_assert_int_eq(which, 1);
	free(s);
	/* self-overlapping stop: "aab" inside "aaab" */
	const char *s2[] = { "aab" };
	const char *d2[] = { "a", "a", "a", "b", "zz" };
	s = run_feeds(s2, 1, d2, 5, &which, true);
	ck_assert_str_eq(s, "a");
	ck_assert_int_eq(which, 0);
	free(s);
	/* same end: the one that starts earlier wins */
	const char *s3[] = { "b", "ab" };
	const char *d3[] = { "xab" };
	s = run_feeds(s3, 2, d3, 1, &which, true);
	ck_assert_str_eq(s, "x");
	ck_assert_int_eq(which, 1);
	free(s);
	/* two stops, the second occurs first in the text */
	const char *s4[] = { "</s>", "\n\n" };
	const char *d4[] = { "line1\n", "\nline2</", "s>" };
	s = run_feeds(s4, 2, d4, 3, &which, true);
	ck_assert_str_eq(s, "line1");
	ck_assert_int_eq(which, 1);
	free(s);
}
END_TEST

START_TEST(test_multibyte)
{
	int which;
	/* stop ending in a multi-byte character, deltas split inside it */
	const char *s1[] = { "\xC3\xA9!" }; /* "é!" */
	const char *d1[] = { "caf", "\xC3", "\xA9", "!", " more" };
	char *s = run_feeds(s1, 1, d1, 5, &which, true);
	ck_assert_str_eq(s, "caf");
	ck_assert_int_eq(which, 0);
	free(s);
	/* "日" must not match inside "旧" (same first two bytes) */
	const char *s2[] = { "\xE6\x97\xA5" };
	const char *d2[] = { "\xE6", "\x97", "\xA7", "\xE6\x97\xA5", "tail" };
	struct stop_matcher m;
	struct buf out;
	buf_init(&out);
	ck_assert_int_eq(stop_matcher_init(&m, s2, 1), 0);
	for (int i = 0; i < 4; i++) {
		size_t before = out.len;
		ck_assert_int_eq(stop_matcher_feed(&m, d2[i], strlen(d2[i]), true, &out, &which),
				 0);
		if (i < 2)
			ck_assert_uint_eq(out.len, before); /* partial char and partial stop held */
		if (i == 2)
			ck_assert_str_eq(out.data, "\xE6\x97\xA7"); /* whole "旧" released */
	}
	ck_assert_int_eq(which, 0);
	ck_assert_str_eq(out.data, "\xE6\x97\xA7");
	stop_matcher_deinit(&m);
	buf_deinit(&out);
	/* no stops: an incomplete trailing character is still held back */
	buf_init(&out);
	ck_assert_int_eq(stop_matcher_init(&m, NULL, 0), 0);
	ck_assert_int_eq(stop_matcher_feed(&m, "a\xE6\x97", 3, true, &out, NULL), 0);
	ck_assert_str_eq(out.data, "a");
	ck_assert_int_eq(stop_matcher_feed(&m, "\xA5", 1, true, &out, NULL), 0);
	ck_assert_str_eq(out.data, "a\xE6\x97\xA5");
	stop_matcher_deinit(&m);
	buf_deinit(&out);
	/* multi-byte stop among several, streamed per character */
	const char *s3[] = { "END", "\xE2\x82\xAC\xE2\x82\xAC" }; /* "€€" */
	const char *d3[] = { "1", "\xE2\x82\xAC", "2", "\xE2\x82\xAC", "\xE2\x82\xAC", "3" };
	s = run_feeds(s3, 2, d3, 6, &which, true);
	ck_assert_str_eq(s, "1\xE2\x82\xAC" "2");
	ck_assert_int_eq(which, 1);
	free(s);
}
END_TEST

START_TEST(test_can_stop_false)
{
	const char *stops[] = { "ab" };
	struct stop_matcher m;
	struct buf out;
	buf_init(&out);
	ck_assert_int_eq(stop_matcher_init(&m, stops, 1), 0);
	int which;
	/* disarmed: a completed stop is plain text, a partial one is still held */
	ck_assert_int_eq(stop_matcher_feed(&m, "xaba", 4, false, &out, &which), 0);
	ck_assert_int_eq(which, -1);
	ck_assert_str_eq(out.data, "xab");
	/* armed: the held "a" completes a match spanning the arming point */
	ck_assert_int_eq(stop_matcher_feed(&m, "b", 1, true, &out, &which), 0);
	ck_assert_int_eq(which, 0);
	ck_assert_str_eq(out.data, "xab");
	stop_matcher_deinit(&m);
	buf_deinit(&out);
	/* a stop completed while disarmed stays text even when it is also the
	 * held prefix of a longer stop */
	const char *two[] = { "ab", "abc" };
	buf_init(&out);
	ck_assert_int_eq(stop_matcher_init(&m, two, 2), 0);
	ck_assert_int_eq(stop_matcher_feed(&m, "ab", 2, false, &out, &which), 0);
	ck_assert_uint_eq(stop_matcher_held(&m), 2);
	ck_assert_int_eq(stop_matcher_feed(&m, "x", 1, true, &out, &which), 0);
	ck_assert_int_eq(which, -1);
	ck_assert_str_eq(out.data, "abx");
	stop_matcher_deinit(&m);
	buf_deinit(&out);
	const char *bad[] = { "" };
	ck_assert_int_eq(stop_matcher_init(&m, bad, 1), ERR_INVAL);
	stop_matcher_deinit(&m);
}
END_TEST

/* ---- randomized property test -------------------------------------------- */

static const char *const k_alpha[] = { "a", "b", "c", " ", "\xC3\xA9", "\xE6\x97\xA5",
				      "\xF0\x9F\x98\x80" };
enum { N_ALPHA = 7 };

static void rand_text(struct rng *g, struct buf *b, int n_chars)
{
	for (int i = 0; i < n_chars; i++)
		buf_append_str(b, k_alpha[rng_next(g) % N_ALPHA]);
}

static bool utf8_whole(const char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		unsigned char c = (unsigned char)s[i];
		size_t L = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
		if ((c & 0xC0) == 0x80 || i + L > n)
			return false;
		i += L;
	}
	return true;
}

/* Brute force: cut at the match with the smallest end, then smallest start. */
static size_t ref_cut(const char *t, size_t n, char **stops, int n_stops, int *which)
{
	*which = -1;
	for (size_t end = 1; end <= n; end++) {
		size_t best_pos = SIZE_MAX;
		for (int i = 0; i < n_stops; i++) {
			size_t L = strlen(stops[i]);
			if (L <= end && memcmp(t + end - L, stops[i], L) == 0 && end - L < best_pos) {
				best_pos = end - L;
				*which = i;
			}
		}
		if (*which >= 0)
			return best_pos;
	}
	return n;
}

/* Longest suffix of t[0..n) that is a proper prefix of a stop. */
static size_t ref_held(const char *t, size_t n, char **stops, int n_stops)
{
	size_t best = 0;
	for (int i = 0; i < n_stops; i++) {
		size_t L = strlen(stops[i]);
		for (size_t k = 1; k < L && k <= n; k++)
			if (memcmp(t + n - k, stops[i], k) == 0 && k > best)
				best = k;
	}
	return best;
}

START_TEST(test_random_streaming_equals_oneshot)
{
	struct rng g;
	rng_seed(&g, 77);
	for (int iter = 0; iter < 400; iter++) {
		struct buf text;
		buf_init(&text);
		rand_text(&g, &text, 1 + (int)(rng_next(&g) % 40));
		int n_stops = (int)(rng_next(&g) % 4);
		char *stops[3];
		for (int i = 0; i < n_stops; i++) {
			struct buf sb;
			buf_init(&sb);
			/* short stops over a small alphabet, so matches and partials are common */
			rand_text(&g, &sb, 1 + (int)(rng_next(&g) % 3));
			size_t l;
			stops[i] = buf_take(&sb, &l);
		}
		int want_which;
		size_t want_len = ref_cut(text.data, text.len, stops, n_stops, &want_which);

		/* one shot */
		struct stop_matcher m;
		struct buf one, str;
		buf_init(&one);
		buf_init(&str);
		ck_assert_int_eq(stop_matcher_init(&m, (const char *const *)stops, n_stops), 0);
		int which;
		ck_assert_int_eq(stop_matcher_feed(&m, text.data, text.len, true, &one, &which), 0);
		if (which < 0)
			ck_assert_int_eq(stop_matcher_flush(&m, &one), 0);
		ck_assert_int_eq(which, want_which);
		ck_assert_uint_eq(one.len, want_len);
		ck_assert(one.len == 0 || memcmp(one.data, text.data, want_len) == 0);
		stop_matcher_deinit(&m);

		/* streamed, split at random byte offsets (half the time only at
		 * character boundaries, as the detokenizer guarantees) */
		bool by_char = iter % 2 == 0;
		ck_assert_int_eq(stop_matcher_init(&m, (const char *const *)stops, n_stops), 0);
		size_t pos = 0;
		which = -1;
		while (pos < text.len && which < 0) {
			size_t step = 1 + rng_next(&g) % 6;
			if (step > text.len - pos)
				step = text.len - pos;
			if (by_char)
				while (pos + step < text.len &&
				       ((unsigned char)text.data[pos + step] & 0xC0) == 0x80)
					step++;
			size_t before = str.len;
			ck_assert_int_eq(stop_matcher_feed(&m, text.data + pos, step, true, &str,
							   &which),
					 0);
			pos += step;
			ck_assert(utf8_whole(str.data ? str.data + before : "", str.len - before));
			if (which < 0 && by_char) {
				/* held exactly the longest possible partial match */
				ck_assert_uint_eq(stop_matcher_held(&m),
						  ref_held(text.data, pos, stops, n_stops));
				ck_assert_uint_eq(str.len + stop_matcher_held(&m), pos);
			}
		}
		if (which < 0)
			ck_assert_int_eq(stop_matcher_flush(&m, &str), 0);
		ck_assert_int_eq(which, want_which);
		ck_assert_uint_eq(str.len, one.len);
		ck_assert(str.len == 0 || memcmp(str.data, one.data, one.len) == 0);
		stop_matcher_deinit(&m);
		buf_deinit(&one);
		buf_deinit(&str);
		buf_deinit(&text);
		for (int i = 0; i < n_stops; i++)
			free(stops[i]);
	}
}
END_TEST

static Suite *stop_suite(void)
{
	Suite *s = suite_create("stop");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_no_stops_pass_through);
	tcase_add_test(tc, test_stop_spans_tokens);
	tcase_add_test(tc, test_stop_at_first_token);
	tcase_add_test(tc, test_hold_and_release);
	tcase_add_test(tc, test_overlapping_stops);
	tcase_add_test(tc, test_multibyte);
	tcase_add_test(tc, test_can_stop_false);
	tcase_add_test(tc, test_random_streaming_equals_oneshot);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(stop_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
