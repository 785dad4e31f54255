/* server/http.c — libmicrohttpd in external-epoll mode, driven by libuv.
 *
 * MHD's epoll fd is watched with uv_poll and its next timeout with uv_timer;
 * after any activity MHD_run() does the work and the timer is re-armed. A
 * request that must wait (for the engine) is MHD-suspended; answering it
 * resumes it, and MHD calls the access handler again, which queues the stored
 * response. Streams use a chunked callback response whose reader suspends the
 * connection when it has nothing to send and is resumed by the next write.
 * MHD does not watch a suspended connection's socket, so a client that goes
 * away while its request waits would go unnoticed until the answer: every
 * PEER_CHECK_MS the parked connections' sockets are peeked, and one at EOF
 * (or reset) is resumed only to be closed, which reports it to on_close as
 * not completed. Tested end to end in tests/e2e/. See http.h for the contract.
 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

#define PEER_CHECK_MS 200 /* how often parked connections' sockets are peeked */

struct http_req {
	struct http_server *srv;
	struct MHD_Connection *conn;
	struct http_req *prev, *next; /* the server's list of live requests */
	char *method;
	char *path;
	struct buf body;
	uint64_t id;
	double t0;
	void *ctx;
	bool too_large;
	bool dispatched;   /* on_request was called */
	bool in_handler;   /* inside on_request (answers are queued on return) */
	bool suspended;    /* MHD-suspended by us */
	bool answered;     /* a response or stream start was queued or is pending */
	bool peer_gone;    /* parked, and the client closed or reset its socket */
	struct MHD_Response *pending; /* built, waiting for the access handler to queue it */
	int pending_status;
	int status; /* the status sent (0 until answered) */
	/* stream state */
	bool is_stream;
	bool stream_ended;
	struct buf out;
};

/* A struct http_canned, copied. */
struct canned {
	const char *content_type;
	char *body;
	size_t len;
};

struct http_server {
	uv_loop_t *loop;
	struct MHD_Daemon *mhd;
	uv_poll_t poll;
	uv_timer_t timer;
	uv_timer_t peer_timer; /* the parked connections' liveness check */
	struct http_handler h;
	uint64_t max_body;
	struct canned too_large, internal_error;
	uint64_t next_id;
	int active;
	bool in_run; /* inside MHD_run: callbacks must not re-enter it */
	bool rerun;  /* something was resumed during MHD_run: run again */
	int n_closing; /* handles whose close callback has not run yet */
	int port;
	struct http_req *live; /* every request with an MHD context */
};

static void mhd_drive(struct http_server *s);
static void schedule_drive(struct http_server *s);

/* ---- request bookkeeping ---------------------------------------------------- */

static struct http_req *req_new(struct http_server *s, struct MHD_Connection *c, const char *url,
				const char *method)
{
	struct http_req *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->srv = s;
	r->conn = c;
	r->path = strdup(url);
	r->method = strdup(method);
	if (!r->path || !r->method) {
		free(r->path);
		free(r->method);
		free(r);
		return NULL;
	}
	buf_init(&r->body);
	buf_init(&r->out);
	r->id = ++s->next_id;
	r->t0 = clock_now_s();
	r->next = s->live;
	if (s->live)
		s->live->prev = r;
	s->live = r;
	return r;
}

static void req_free(struct http_req *r)
{
	struct http_server *s = r->srv;
	if (r->prev)
		r->prev->next = r->next;
	else
		s->live = r->next;
	if (r->next)
		r->next->prev = r->prev;
	if (r->pending)
		MHD_destroy_response(r->pending);
	buf_deinit(&r->body);
	buf_deinit(&r->out);
	free(r->path);
	free(r->method);
	free(r);
}

static void req_resume(struct http_req *r)
{
	if (r->suspended) {
		r->suspended = false;
		MHD_resume_connection(r->conn);
	}
}

static void on_peer_timer(uv_timer_t *t);

static void req_suspend(struct http_req *r)
{
	if (!r->suspended) {
		r->suspended = true;
		MHD_suspend_connection(r->conn);
		/* parked: its socket is watched until it is resumed (on_peer_timer) */
		uv_timer_t *pt = &r->srv->peer_timer;
		if (!uv_is_active((uv_handle_t *)pt))
			uv_timer_start(pt, on_peer_timer, PEER_CHECK_MS, PEER_CHECK_MS);
	}
}

/* ---- responses ------------------------------------------------------------- */

static int add_headers(struct MHD_Response *resp, const char *content_type,
		       const struct http_header *headers, int n_headers)
{
	if (content_type && MHD_add_response_header(resp, "Content-Type", content_type) != MHD_YES)
		return -1;
	for (int i = 0; i < n_headers; i++)
		if (MHD_add_response_header(resp, headers[i].name, headers[i].value) != MHD_YES)
			return -1;
	return 0;
}

/* Store a built response; it is queued on return from on_request, or after
 * the resume that this triggers. */
static int set_pending(struct http_req *r, struct MHD_Response *resp, int status)
{
	r->pending = resp;
	r->pending_status = status;
	r->status = status;
	r->answered = true;
	if (!r->in_handler) {
		req_resume(r);
		schedule_drive(r->srv);
	}
	return 0;
}

int http_respond(struct http_req *r, int status, const char *content_type, const char *body,
		 size_t len, const struct http_header *headers, int n_headers)
{
	if (r->answered)
		return -1;
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return -1;
	if (add_headers(resp, content_type, headers, n_headers)) {
		MHD_destroy_response(resp);
		return -1;
	}
	return set_pending(r, resp, status);
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max)
{
	(void)pos;
	struct http_req *r = cls;
	if (r->out.len) {
		size_t n = r->out.len < max ? r->out.len : max;
		memcpy(out, r->out.data, n);
		buf_consume(&r->out, n);
		return (ssize_t)n;
	}
	if (r->stream_ended)
		return MHD_CONTENT_READER_END_OF_STREAM;
	if (r->peer_gone)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	/* nothing to send yet: park until the next write or the end */
	req_suspend(r);
	return 0;
}

int http_stream_start(struct http_req *r, int status, const char *content_type,
		      const struct http_header *headers, int n_headers)
{
	if (r->answered)
		return -1;
	struct MHD_Response *resp =
		MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, r, NULL);
	if (!resp)
		return -1;
	if (add_headers(resp, content_type, headers, n_headers) ||
	    MHD_add_response_header(resp, "Cache-Control", "no-cache") != MHD_YES) {
		MHD_destroy_response(resp);
		return -1;
	}
	r->is_stream = true;
	return set_pending(r, resp, status);
}

int http_stream_write(struct http_req *r, const char *data, size_t len)
{
	if (!r->is_stream || r->stream_ended)
		return -1;
	if (buf_append(&r->out, data, len))
		return -1;
	if (!r->in_handler && !r->pending) {
		req_resume(r);
		schedule_drive(r->srv);
	}
	return 0;
}

int http_stream_end(struct http_req *r)
{
	if (!r->is_stream)
		return -1;
	r->stream_ended = true;
	if (!r->in_handler && !r->pending) {
		req_resume(r);
		schedule_drive(r->srv);
	}
	return 0;
}

size_t http_stream_pending(const struct http_req *r)
{
	return r->out.len;
}

void http_defer(struct http_req *r)
{
	if (!r->answered)
		req_suspend(r);
}

/* ---- MHD callbacks ---------------------------------------------------------- */

static enum MHD_Result queue_pending(struct http_req *r)
{
	struct MHD_Response *resp = r->pending;
	r->pending = NULL;
	enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)r->pending_status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
				 const char *method, const char *version, const char *upload,
				 size_t *upload_size, void **con_cls)
{
	(void)version;
	struct http_server *s = cls;
	struct http_req *r = *con_cls;
	if (!r) {
		r = req_new(s, c, url, method);
		if (!r)
			return MHD_NO;
		*con_cls = r;
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
							     MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl && strtoull(cl, NULL, 10) > s->max_body)
			r->too_large = true;
		return MHD_YES;
	}
	if (*upload_size) {
		if (!r->too_large) {
			if (r->body.len + *upload_size > s->max_body) {
				r->too_large = true;
				buf_deinit(&r->body);
			} else if (buf_append(&r->body, upload, *upload_size)) {
				return MHD_NO;
			}
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (r->pending)
		return queue_pending(r);
	if (r->peer_gone)
		return MHD_NO; /* close it: on_completed reports it as not completed */
	if (r->dispatched) {
		/* resumed with nothing to queue (a stream is already running) */
		return MHD_YES;
	}
	r->dispatched = true;
	if (r->too_large) {
		http_respond(r, 413, s->too_large.content_type, s->too_large.body, s->too_large.len,
			     NULL, 0);
		return queue_pending(r);
	}
	if (!r->body.data)
		buf_append(&r->body, "", 0);
	s->active++;
	r->in_handler = true;
	s->h.on_request(s->h.ud, r);
	r->in_handler = false;
	if (r->pending) {
		req_resume(r); /* a handler that deferred and then answered at once */
		return queue_pending(r);
	}
	if (!r->answered && !r->suspended) {
		log_error("http", "handler neither answered nor deferred %s %s", r->method, r->path);
		http_respond(r, 500, s->internal_error.content_type, s->internal_error.body,
			     s->internal_error.len, NULL, 0);
		return queue_pending(r);
	}
	return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)c;
	struct http_server *s = cls;
	struct http_req *r = *con_cls;
	if (!r)
		return;
	*con_cls = NULL;
	if (r->dispatched && !r->too_large) {
		s->active--;
		s->h.on_close(s->h.ud, r, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
	}
	req_free(r);
}

static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char msg[512];
	vsnprintf(msg, sizeof msg, fmt, ap);
	size_t n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = '\0';
	log_debug("mhd", "%s", msg);
}

/* ---- libuv glue --------------------------------------------------------------- */

static void on_timer(uv_timer_t *t)
{
	mhd_drive(t->data);
}

/* Run MHD on the next loop iteration rather than now: answering from inside a
 * handler's own call chain must not re-enter MHD, whose completion callbacks
 * may free what the caller is still using. */
static void schedule_drive(struct http_server *s)
{
	if (s->in_run) {
		s->rerun = true;
		return;
	}
	if (s->mhd)
		uv_timer_start(&s->timer, on_timer, 0, 0);
}

/* The client of a parked connection is gone when its socket reads EOF or an
 * error other than "nothing yet": a peek, so bytes it sent (a pipelined
 * request) stay for MHD. */
static bool socket_closed(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci || ci->connect_fd < 0)
		return false;
	char b;
	ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n == 0)
		return true;
	return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

static void on_peer_timer(uv_timer_t *t)
{
	struct http_server *s = t->data;
	bool any = false;
	int parked = 0;
	for (struct http_req *r = s->live; r; r = r->next) {
		if (!r->suspended || !r->dispatched || r->pending || r->peer_gone)
			continue;
		if (socket_closed(r->conn)) {
			r->peer_gone = true;
			req_resume(r);
			any = true;
		} else {
			parked++;
		}
	}
	if (!parked) /* an idle server is not woken: the next park restarts it */
		uv_timer_stop(t);
	if (any)
		schedule_drive(s);
}

static void on_poll(uv_poll_t *p, int status, int events)
{
	(void)status;
	(void)events;
	mhd_drive(p->data);
}

static void mhd_drive(struct http_server *s)
{
	if (!s->mhd)
		return;
	if (s->in_run) {
		s->rerun = true;
		return;
	}
	s->in_run = true;
	int rounds = 0;
	do {
		s->rerun = false;
		MHD_run(s->mhd);
	} while (s->rerun && ++rounds < 8); /* the timer below catches anything left */
	s->in_run = false;
	MHD_UNSIGNED_LONG_LONG to = 0;
	uint64_t wait = 1000;
	if (s->rerun)
		wait = 0;
	else if (MHD_get_timeout(s->mhd, &to) == MHD_YES)
		wait = to < 1000 ? (uint64_t)to : 1000;
	uv_timer_start(&s->timer, on_timer, wait, 0);
}

/* --host to the address to bind: a numeric IPv4 / IPv6 address as it is
 * (getaddrinfo parses those without a lookup), a name ("localhost") as the
 * first address it resolves to, as uvicorn binds one; flags gains
 * MHD_USE_IPv6 for an IPv6 address. */
static int resolve_host(const char *host, int port, struct sockaddr_storage *ss, unsigned *flags)
{
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	if (getaddrinfo(host, NULL, &hints, &res) || !res)
		return -1;
	int rc = -1;
	for (struct addrinfo *a = res; a && rc; a = a->ai_next) {
		if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
			continue;
		memset(ss, 0, sizeof *ss);
		memcpy(ss, a->ai_addr, a->ai_addrlen);
		if (a->ai_family == AF_INET) {
			((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
		} else {
			((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
			*flags |= MHD_USE_IPv6;
		}
		rc = 0;
	}
	freeaddrinfo(res);
	return rc;
}

static int canned_copy(struct canned *dst, const struct http_canned *src)
{
	dst->body = malloc(src->len + 1);
	if (!dst->body)
		return -1;
	if (src->len)
		memcpy(dst->body, src->body, src->len);
	dst->body[src->len] = '\0';
	dst->content_type = src->content_type;
	dst->len = src->len;
	return 0;
}

static void server_free(struct http_server *s)
{
	free(s->too_large.body);
	free(s->internal_error.body);
	free(s);
}

int http_server_create(uv_loop_t *loop, const struct http_opts *o, const struct http_handler *h,
		       struct http_server **out, char *err, size_t err_len)
{
	struct http_server *s = calloc(1, sizeof *s);
	if (!s) {
		snprintf(err, err_len, "out of memory");
		return -1;
	}
	s->loop = loop;
	s->h = *h;
	s->max_body = o->max_body_bytes;
	if (canned_copy(&s->too_large, &o->too_large) ||
	    canned_copy(&s->internal_error, &o->internal_error)) {
		server_free(s);
		snprintf(err, err_len, "out of memory");
		return -1;
	}

	struct sockaddr_storage ss;
	unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
	if (resolve_host(o->host, o->port, &ss, &flags)) {
		snprintf(err, err_len,
			 "--host '%s' is neither an IPv4 or IPv6 address nor a name that resolves "
			 "to one", o->host);
		server_free(s);
		return -1;
	}
	s->mhd = MHD_start_daemon(
		flags, (uint16_t)o->port, NULL, NULL, on_access, s, MHD_OPTION_SOCK_ADDR,
		(struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)o->max_connections_per_ip,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->connection_timeout_s,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024, MHD_OPTION_LISTENING_ADDRESS_REUSE,
		(unsigned)1, MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL, MHD_OPTION_END);
	if (!s->mhd) {
		snprintf(err, err_len, "cannot listen on %s:%d (address in use or not permitted?)",
			 o->host, o->port);
		server_free(s);
		return -1;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
	s->port = info ? info->port : o->port;
	info = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_EPOLL_FD);
	if (!info || info->epoll_fd < 0) {
		snprintf(err, err_len, "libmicrohttpd has no epoll fd");
		MHD_stop_daemon(s->mhd);
		server_free(s);
		return -1;
	}
	uv_poll_init(loop, &s->poll, info->epoll_fd);
	s->poll.data = s;
	uv_poll_start(&s->poll, UV_READABLE, on_poll);
	uv_timer_init(loop, &s->timer);
	s->timer.data = s;
	uv_timer_init(loop, &s->peer_timer);
	s->peer_timer.data = s;
	mhd_drive(s);
	*out = s;
	return 0;
}

int http_server_port(const struct http_server *s)
{
	return s->port;
}

int http_server_active(const struct http_server *s)
{
	return s->active;
}

static void free_on_close(uv_handle_t *h)
{
	struct http_server *s = h->data;
	/* three handles close (poll, two timers), in an order libuv chooses: free after all */
	if (--s->n_closing == 0) {
		server_free(s);
	}
}

void http_server_destroy(struct http_server *s)
{
	if (!s)
		return;
	/* MHD must not be stopped with suspended connections */
	for (struct http_req *r = s->live; r; r = r->next)
		req_resume(r);
	if (s->mhd) {
		MHD_stop_daemon(s->mhd);
		s->mhd = NULL;
	}
	uv_poll_stop(&s->poll);
	uv_timer_stop(&s->timer);
	uv_timer_stop(&s->peer_timer);
	s->n_closing = 3;
	uv_close((uv_handle_t *)&s->poll, free_on_close);
	uv_close((uv_handle_t *)&s->timer, free_on_close);
	uv_close((uv_handle_t *)&s->peer_timer, free_on_close);
}

/* ---- accessors ---------------------------------------------------------------- */

const char *http_req_method(const struct http_req *r)
{
	return r->method;
}

const char *http_req_path(const struct http_req *r)
{
	return r->path;
}

const char *http_req_header(const struct http_req *r, const char *name)
{
	return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *http_req_body(const struct http_req *r, size_t *len)
{
	*len = r->body.len;
	return r->body.data ? r->body.data : "";
}

uint64_t http_req_id(const struct http_req *r)
{
	return r->id;
}

double http_req_start_time(const struct http_req *r)
{
	return r->t0;
}

int http_req_status(const struct http_req *r)
{
	return r->status;
}

void http_req_set_ctx(struct http_req *r, void *ctx)
{
	r->ctx = ctx;
}

void *http_req_ctx(const struct http_req *r)
{
	return r->ctx;
}
