/* server/http.h — HTTP transport: libmicrohttpd driven from a libuv loop.
 *
 * MHD runs in external-epoll mode with no threads of its own: its epoll fd is
 * watched with uv_poll and its timeout with uv_timer, so all socket I/O
 * happens on the loop thread. Every function here must be called on the loop
 * thread.
 *
 * A request reaches the handler once, when its body is complete (bodies over
 * max_body_bytes get 413 without reaching it). The handler answers in one of
 * three ways, now or later (after http_defer):
 *   http_respond()                      — one complete response;
 *   http_stream_start/write/end()       — a chunked stream (SSE);
 * and learns through on_close() when the request is over (done, or the client
 * went away), after which the struct http_req must not be used. A request that
 * is deferred is parked (MHD-suspended) and costs nothing while it waits.
 */
#ifndef AORTA_SERVER_HTTP_H
#define AORTA_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "common/buf.h"

struct http_server;
struct http_req;

struct http_header {
	const char *name;
	const char *value;
};

struct http_handler {
	void *ud;
	/* The request is complete; answer it or http_defer() it. */
	void (*on_request)(void *ud, struct http_req *r);
	/* The request is over. completed: the response was sent in full. */
	void (*on_close)(void *ud, struct http_req *r, bool completed);
};

/* An answer the transport sends on its own. The caller renders it (api/ owns
 * the wire format); the body is copied, the content type must be static. */
struct http_canned {
	const char *content_type;
	const char *body;
	size_t len;
};

struct http_opts {
	const char *host;
	int port;		 /* 0 = any free port (see http_server_port) */
	uint64_t max_body_bytes; /* larger bodies get 413 */
	int max_connections;
	int max_connections_per_ip; /* 0 = no limit */
	int connection_timeout_s;
	struct http_canned too_large;	   /* 413: a body over max_body_bytes */
	struct http_canned internal_error; /* 500: a handler that neither answered nor deferred */
};

int http_server_create(uv_loop_t *loop, const struct http_opts *o, const struct http_handler *h,
		       struct http_server **out, char *err, size_t err_len);
/* The port actually bound. */
int http_server_port(const struct http_server *s);
/* Number of requests that have reached the handler and are not closed yet. */
int http_server_active(const struct http_server *s);
/* Stop MHD and close the loop handles; the close completes on the loop. */
void http_server_destroy(struct http_server *s);

/* Request accessors (valid until on_close). */
const char *http_req_method(const struct http_req *r);
const char *http_req_path(const struct http_req *r);
const char *http_req_header(const struct http_req *r, const char *name); /* NULL if absent */
const char *http_req_body(const struct http_req *r, size_t *len);
uint64_t http_req_id(const struct http_req *r); /* unique per server, > 0 */
double http_req_start_time(const struct http_req *r); /* clock_now_s() at arrival */
int http_req_status(const struct http_req *r); /* status answered with; 0 = not yet */
void http_req_set_ctx(struct http_req *r, void *ctx);
void *http_req_ctx(const struct http_req *r);

/* Park the request: the handler will answer later. */
void http_defer(struct http_req *r);
/* Answer with a complete body (copied). headers: n_headers extra headers. */
int http_respond(struct http_req *r, int status, const char *content_type, const char *body,
		 size_t len, const struct http_header *headers, int n_headers);
/* Begin a chunked stream with this status and content type. */
int http_stream_start(struct http_req *r, int status, const char *content_type,
		      const struct http_header *headers, int n_headers);
/* Queue bytes on a started stream (copied). */
int http_stream_write(struct http_req *r, const char *data, size_t len);
/* No more data: finish the stream once the queued bytes are sent. */
int http_stream_end(struct http_req *r);
/* Bytes queued on a stream and not yet handed to the socket. */
size_t http_stream_pending(const struct http_req *r);

#endif
