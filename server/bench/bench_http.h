/* server/bench/bench_http.h — the benchmark's HTTP/1.1 client pieces (private to
 * the bench_* files): an incremental response parser, an SSE event parser and
 * a pool of connections on a libuv loop.
 *
 * Only http://. With keep-alive, a connection whose response ended cleanly
 * (length-delimited, HTTP/1.1, no "Connection: close", nothing after it) goes
 * back to the pool's idle list and carries the next request, as HTTP clients
 * such as aiohttp do; an idle connection the server closes is dropped, and a
 * request whose reused connection dies before any response byte is retried
 * once on a new connection (the server closed it as we wrote). Every buffer is
 * bounded: a line over BENCH_HTTP_LINE_MAX, headers over
 * BENCH_HTTP_HEADERS_MAX or a response over the caller's max_bytes is an error.
 * All calls on the loop's thread. Parsers and the pool are caller-allocated;
 * connections are allocated and freed by the pool.
 * Tests: tests/bench_serve/test_bench_parse.c (parsers),
 *        tests/bench_serve/test_bench_e2e.c (connections, against a fake server).
 */
#ifndef AORTA_SERVER_BENCH_BENCH_HTTP_H
#define AORTA_SERVER_BENCH_BENCH_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "common/buf.h"

#define BENCH_HTTP_LINE_MAX    8192
#define BENCH_HTTP_HEADERS_MAX (64 * 1024)

/* ---- response parser ---- */

/* Called with body bytes (after de-chunking). Return 0 to go on, or a nonzero
 * value that the feed call then returns unchanged. */
typedef int (*bench_body_fn)(void *ud, const char *p, size_t n);

struct bench_resp_parser {
	int state;
	int status;
	bool chunked, has_len, is_sse;
	bool http10, conn_close; /* the connection cannot carry another request */
	size_t extra;            /* bytes after the message in the last feed */
	uint64_t remaining;      /* body or current chunk bytes left */
	size_t header_bytes;
	size_t line_len;
	char line[BENCH_HTTP_LINE_MAX];
	bench_body_fn on_body;
	void *ud;
};

void bench_resp_init(struct bench_resp_parser *p, bench_body_fn on_body, void *ud);
/* Feed n bytes. Returns 0 (sets *done once the message is complete; bytes after
 * it are ignored), ERR_FORMAT on malformed HTTP, ERR_TOO_LARGE when a line or
 * the headers exceed the limits, or what on_body returned. */
int bench_resp_feed(struct bench_resp_parser *p, const char *data, size_t n, bool *done);
/* The peer closed. 0 and *done if the body was delimited by the close,
 * ERR_IO if the message was cut short. */
int bench_resp_eof(struct bench_resp_parser *p, bool *done);
bool bench_resp_headers_done(const struct bench_resp_parser *p);

/* ---- server-sent events ---- */

/* Called with one event's data (the "data:" lines joined by '\n', NUL-terminated). */
typedef int (*bench_event_fn)(void *ud, const char *data, size_t n);

struct bench_sse {
	struct buf line;
	struct buf data;
	bool has_data;
	size_t cap; /* most bytes in one line or one event */
	bench_event_fn on_event;
	void *ud;
};

void bench_sse_init(struct bench_sse *s, size_t cap, bench_event_fn on_event, void *ud);
void bench_sse_deinit(struct bench_sse *s);
/* Lines end in "\n" or "\r\n". Returns 0, ERR_TOO_LARGE, ERR_NOMEM, or what
 * on_event returned. */
int bench_sse_feed(struct bench_sse *s, const char *p, size_t n);

/* ---- connections ---- */

struct bench_conn_cbs {
	/* Body bytes; status is known by then. Nonzero return (a BENCH_E_* kind)
	 * ends the request with that kind. */
	int (*on_body)(void *ud, int status, const char *p, size_t n);
	/* Exactly once per successful bench_pool_request: kind is BENCH_OK or a
	 * BENCH_E_*; status 0 if none was read; reused: the request went over a
	 * connection that had carried an earlier one. */
	void (*on_done)(void *ud, int kind, int status, bool reused);
};

struct bench_conn;

struct bench_pool {
	uv_loop_t *loop;
	struct sockaddr_storage addr;
	bool keep_alive;
	struct bench_conn *idle; /* doubly linked list of idle connections */
	struct bench_conn *busy; /* connections carrying a request */
	int n_idle;
	int n_connects; /* connections opened so far */
};

void bench_pool_init(struct bench_pool *p, uv_loop_t *loop, const struct sockaddr *addr,
                     bool keep_alive);
/* Send req[0..len) (copied) on an idle connection or a new one and read one
 * response. On failure (ERR_NOMEM, ERR_IO) no callback will be called. */
int bench_pool_request(struct bench_pool *p, const char *req, size_t len, uint64_t timeout_ms,
                       size_t max_bytes, const struct bench_conn_cbs *cbs, void *ud);
/* Close the idle connections (busy ones close when they finish). */
void bench_pool_close_idle(struct bench_pool *p);
/* End every request in flight now with `kind` (each on_done is called). The
 * owner must not start new requests from those callbacks. */
void bench_pool_cancel(struct bench_pool *p, int kind);

#endif
