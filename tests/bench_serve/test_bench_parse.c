/* tests/bench_serve/test_bench_parse.c — the benchmark client's HTTP response
 * parser and SSE parser, fed whole, split at every byte position and one byte
 * at a time: chunked, Content-Length and close-delimited bodies, interim 1xx
 * responses, truncation, malformed input and the size limits. No network. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/err.h"
#include "server/bench/bench_http.h"

static int collect_body(void *ud, const char *p, size_t n)
{
	return buf_append(ud, p, n);
}

/* Feed text in pieces split at `split` (0: whole) or byte by byte (split < 0).
 * Returns the first nonzero feed result; *done as the parser says. */
static int feed(struct bench_resp_parser *p, const char *text, size_t len, long split, bool *done)
{
	*done = false;
	if (split < 0) {
		for (size_t i = 0; i < len; i++) {
			int rc = bench_resp_feed(p, text + i, 1, done);
			if (rc || *done)
				return rc;
		}
		return 0;
	}
	size_t a = split ? (size_t)split : len;
	int rc = bench_resp_feed(p, text, a, done);
	if (rc || *done || a == len)
		return rc;
	return bench_resp_feed(p, text + a, len - a, done);
}

static const char chunked_resp[] = "HTTP/1.1 200 OK\r\n"
                                   "Content-Type: text/event-stream\r\n"
                                   "Transfer-Encoding: chunked\r\n"
                                   "\r\n"
                                   "5\r\nhello\r\n"
                                   "1A;ext=1\r\n, this is 26 bytes long ok\r\n"
                                   "0\r\n"
                                   "X-Trailer: t\r\n"
                                   "\r\n"
                                   "GARBAGE AFTER THE MESSAGE";

START_TEST(test_chunked_every_split)
{
	size_t len = strlen(chunked_resp);
	for (long split = -1; split < (long)len; split++) {
		struct buf body;
		buf_init(&body);
		struct bench_resp_parser p;
		bench_resp_init(&p, collect_body, &body);
		bool done;
		ck_assert_int_eq(feed(&p, chunked_resp, len, split, &done), 0);
		ck_assert_msg(done, "split %ld", split);
		ck_assert_int_eq(p.status, 200);
		ck_assert(p.is_sse);
		ck_assert(p.chunked);
		ck_assert_str_eq(body.data, "hello, this is 26 bytes long ok");
		buf_deinit(&body);
	}
}
END_TEST

START_TEST(test_content_length_and_eof)
{
	const char *r = "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 11\r\n"
	                "Content-Type: application/json\r\n\r\n{\"error\":1}";
	size_t len = strlen(r);
	for (long split = -1; split < (long)len; split++) {
		struct buf body;
		buf_init(&body);
		struct bench_resp_parser p;
		bench_resp_init(&p, collect_body, &body);
		bool done;
		ck_assert_int_eq(feed(&p, r, len, split, &done), 0);
		ck_assert(done);
		ck_assert_int_eq(p.status, 500);
		ck_assert(!p.is_sse);
		ck_assert_str_eq(body.data, "{\"error\":1}");
		buf_deinit(&body);
	}

	/* no length, not chunked: the body ends when the peer closes */
	const char *c = "HTTP/1.0 200 OK\r\n\r\nuntil close";
	struct buf body;
	buf_init(&body);
	struct bench_resp_parser p;
	bench_resp_init(&p, collect_body, &body);
	bool done;
	ck_assert_int_eq(bench_resp_feed(&p, c, strlen(c), &done), 0);
	ck_assert(!done);
	ck_assert_int_eq(bench_resp_eof(&p, &done), 0);
	ck_assert(done);
	ck_assert_str_eq(body.data, "until close");
	buf_deinit(&body);

	/* a close inside a chunk or inside the headers is a truncated message */
	bench_resp_init(&p, NULL, NULL);
	ck_assert_int_eq(feed(&p, chunked_resp, 90, 0, &done), 0);
	ck_assert(!done);
	ck_assert_int_eq(bench_resp_eof(&p, &done), ERR_IO);
	bench_resp_init(&p, NULL, NULL);
	ck_assert_int_eq(feed(&p, "HTTP/1.1 200 OK\r\nContent-Le", 27, 0, &done), 0);
	ck_assert_int_eq(bench_resp_eof(&p, &done), ERR_IO);
	ck_assert(!bench_resp_headers_done(&p));

	/* 204: no body even without a length */
	bench_resp_init(&p, NULL, NULL);
	ck_assert_int_eq(feed(&p, "HTTP/1.1 204 No Content\r\n\r\n", 27, 0, &done), 0);
	ck_assert(done);
}
END_TEST

START_TEST(test_interim_response)
{
	const char *r = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 429 Too Many Requests\r\n"
	                "Content-Length: 2\r\n\r\nno";
	struct buf body;
	buf_init(&body);
	struct bench_resp_parser p;
	bench_resp_init(&p, collect_body, &body);
	bool done;
	ck_assert_int_eq(feed(&p, r, strlen(r), -1, &done), 0);
	ck_assert(done);
	ck_assert_int_eq(p.status, 429);
	ck_assert_str_eq(body.data, "no");
	buf_deinit(&body);
}
END_TEST

static int parse_all(const char *text, size_t len)
{
	struct bench_resp_parser p;
	bench_resp_init(&p, NULL, NULL);
	bool done;
	return bench_resp_feed(&p, text, len, &done);
}

START_TEST(test_malformed)
{
	const char *bad[] = {
	    "HTTQ/1.1 200 OK\r\n\r\n",
	    "HTTP/1.1 20 OK\r\n\r\n",
	    "HTTP/1.1 999 Nope\r\n\r\n",
	    "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
	    "HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n",
	    "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
	    "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
	    "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
	    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",
	    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
	    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY\r\n",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		ck_assert_msg(parse_all(bad[i], strlen(bad[i])) == ERR_FORMAT, "case %zu", i);

	/* a header line over the line limit, and headers over the total limit */
	size_t n = BENCH_HTTP_LINE_MAX + 64;
	char *big = malloc(n + 1);
	memcpy(big, "HTTP/1.1 200 OK\r\nX: ", 20);
	memset(big + 20, 'a', n - 20);
	big[n] = '\0';
	ck_assert_int_eq(parse_all(big, n), ERR_TOO_LARGE);
	free(big);
	struct bench_resp_parser p;
	bench_resp_init(&p, NULL, NULL);
	bool done;
	ck_assert_int_eq(bench_resp_feed(&p, "HTTP/1.1 200 OK\r\n", 17, &done), 0);
	int rc = 0;
	for (int i = 0; i < 100000 && !rc; i++)
		rc = bench_resp_feed(&p, "X-Filler: 0123456789\r\n", 22, &done);
	ck_assert_int_eq(rc, ERR_TOO_LARGE);
}
END_TEST

static int stop_body(void *ud, const char *p, size_t n)
{
	(void)ud;
	(void)p;
	(void)n;
	return 7; /* a BENCH_E_* kind from the caller's callback */
}

START_TEST(test_body_callback_stops)
{
	struct bench_resp_parser p;
	bench_resp_init(&p, stop_body, NULL);
	bool done;
	ck_assert_int_eq(bench_resp_feed(&p, chunked_resp, strlen(chunked_resp), &done), 7);
}
END_TEST

/* ---- SSE ---- */

struct events {
	int n;
	char ev[16][256];
	int stop_at; /* return 5 on this event (1-based); 0: never */
};

static int collect_event(void *ud, const char *data, size_t n)
{
	struct events *e = ud;
	ck_assert_uint_eq(strlen(data), n); /* NUL-terminated at n */
	if (e->n < 16)
		snprintf(e->ev[e->n], sizeof e->ev[0], "%s", data);
	e->n++;
	return e->n == e->stop_at ? 5 : 0;
}

static const char sse_text[] = ": comment, ignored\n"
                               "\n"
                               "data: {\"a\":1}\n\n"
                               "event: message\r\n"
                               "id: 7\r\n"
                               "data:no-space\r\n"
                               "\r\n"
                               "data: line one\n"
                               "data: line two\n"
                               "retry: 10\n"
                               "\n"
                               "data\n\n"
                               "data: [DONE]\n\n"
                               "data: unterminated";

START_TEST(test_sse_every_split)
{
	size_t len = strlen(sse_text);
	for (size_t split = 0; split <= len; split++) {
		struct events e = {0};
		struct bench_sse s;
		bench_sse_init(&s, 4096, collect_event, &e);
		ck_assert_int_eq(bench_sse_feed(&s, sse_text, split), 0);
		ck_assert_int_eq(bench_sse_feed(&s, sse_text + split, len - split), 0);
		ck_assert_int_eq(e.n, 5);
		ck_assert_str_eq(e.ev[0], "{\"a\":1}");
		ck_assert_str_eq(e.ev[1], "no-space");
		ck_assert_str_eq(e.ev[2], "line one\nline two");
		ck_assert_str_eq(e.ev[3], "");
		ck_assert_str_eq(e.ev[4], "[DONE]");
		bench_sse_deinit(&s);
	}
	/* byte by byte */
	struct events e = {0};
	struct bench_sse s;
	bench_sse_init(&s, 4096, collect_event, &e);
	for (size_t i = 0; i < len; i++)
		ck_assert_int_eq(bench_sse_feed(&s, sse_text + i, 1), 0);
	ck_assert_int_eq(e.n, 5);
	ck_assert_str_eq(e.ev[2], "line one\nline two");
	bench_sse_deinit(&s);
}
END_TEST

START_TEST(test_sse_limits_and_stop)
{
	struct events e = {0};
	struct bench_sse s;
	bench_sse_init(&s, 64, collect_event, &e);
	char line[200];
	memset(line, 'x', sizeof line);
	/* one line over the cap, even without its newline yet */
	ck_assert_int_eq(bench_sse_feed(&s, line, sizeof line), ERR_TOO_LARGE);
	bench_sse_deinit(&s);

	/* one event over the cap across several short lines */
	bench_sse_init(&s, 64, collect_event, &e);
	int rc = 0;
	for (int i = 0; i < 10 && !rc; i++)
		rc = bench_sse_feed(&s, "data: 0123456789\n", 17);
	ck_assert_int_eq(rc, ERR_TOO_LARGE);
	ck_assert_int_eq(e.n, 0);
	bench_sse_deinit(&s);

	/* the event callback's return value stops the feed */
	struct events e2 = {.stop_at = 2};
	bench_sse_init(&s, 4096, collect_event, &e2);
	ck_assert_int_eq(bench_sse_feed(&s, sse_text, strlen(sse_text)), 5);
	ck_assert_int_eq(e2.n, 2);
	bench_sse_deinit(&s);
}
END_TEST

/* ---- random mutations: never a crash, only the documented results ---- */

static uint64_t lcg(uint64_t *s)
{
	*s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
	return *s >> 33;
}

static int count_body(void *ud, const char *p, size_t n)
{
	(void)p;
	*(size_t *)ud += n;
	return 0;
}

static int check_event(void *ud, const char *data, size_t n)
{
	ck_assert_uint_le(n, 256);
	ck_assert_int_eq(data[n], '\0'); /* NUL-terminated; the data may hold NULs too */
	(*(int *)ud)++;
	return 0;
}

START_TEST(test_random_mutations)
{
	const char *seeds[] = {
	    chunked_resp,
	    "HTTP/1.1 200 OK\r\nContent-Length: 20\r\nContent-Type: text/event-stream\r\n\r\n"
	    "data: {\"a\": 1}\n\ndata:",
	    sse_text,
	};
	uint64_t st = 12345;
	char m[1024];
	for (int iter = 0; iter < 20000; iter++) {
		const char *src = seeds[iter % 3];
		size_t n = strlen(src);
		memcpy(m, src, n);
		int edits = 1 + (int)(lcg(&st) % 4);
		for (int e = 0; e < edits && n > 0; e++) {
			size_t at = lcg(&st) % n;
			switch (lcg(&st) % 4) {
			case 0: /* flip a byte */
				m[at] = (char)lcg(&st);
				break;
			case 1: /* truncate */
				n = at;
				break;
			case 2: /* insert a structural character */
				if (n < sizeof m - 1) {
					memmove(m + at + 1, m + at, n - at);
					m[at] = "\r\n:0f;"[lcg(&st) % 6];
					n++;
				}
				break;
			default: /* delete */
				memmove(m + at, m + at + 1, n - at - 1);
				n--;
				break;
			}
		}
		/* HTTP parser, random split points */
		size_t body = 0;
		struct bench_resp_parser p;
		bench_resp_init(&p, count_body, &body);
		bool done = false;
		int rc = 0;
		for (size_t i = 0; i < n && !rc && !done;) {
			size_t k = 1 + lcg(&st) % 64;
			if (k > n - i)
				k = n - i;
			rc = bench_resp_feed(&p, m + i, k, &done);
			i += k;
		}
		ck_assert_msg(rc == 0 || rc == ERR_FORMAT || rc == ERR_TOO_LARGE, "rc %d", rc);
		ck_assert_uint_le(body, n);
		if (!rc && !done) {
			rc = bench_resp_eof(&p, &done);
			ck_assert(rc == 0 || rc == ERR_IO);
		}
		/* SSE parser on the same bytes */
		int n_ev = 0;
		struct bench_sse s;
		bench_sse_init(&s, 256, check_event, &n_ev);
		rc = 0;
		for (size_t i = 0; i < n && !rc;) {
			size_t k = 1 + lcg(&st) % 64;
			if (k > n - i)
				k = n - i;
			rc = bench_sse_feed(&s, m + i, k);
			i += k;
		}
		ck_assert(rc == 0 || rc == ERR_TOO_LARGE);
		bench_sse_deinit(&s);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("bench_parse");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_chunked_every_split);
	tcase_add_test(tc, test_content_length_and_eof);
	tcase_add_test(tc, test_interim_response);
	tcase_add_test(tc, test_malformed);
	tcase_add_test(tc, test_body_callback_stops);
	tcase_add_test(tc, test_sse_every_split);
	tcase_add_test(tc, test_sse_limits_and_stop);
	tcase_add_test(tc, test_random_mutations);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf ? 1 : 0;
}
