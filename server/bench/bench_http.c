/* server/bench/bench_http.c — the benchmark's HTTP/1.1 client: an incremental
 * response parser (status line, headers, Content-Length, chunked transfer
 * coding, close-delimited bodies), an SSE parser, and one-shot libuv
 * connections with a timeout and a response size cap. See bench_http.h.
 * Parsers are tested byte-split in tests/bench_serve/test_bench_parse.c;
 * connections in tests/bench_serve/test_bench_e2e.c. */
#include "bench_http.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench_serve.h"
#include "common/checked.h"
#include "common/err.h"

enum {
	RS_STATUS,
	RS_HEADERS,
	RS_BODY_LEN,
	RS_BODY_EOF,
	RS_CHUNK_SIZE,
	RS_CHUNK_DATA,
	RS_CHUNK_CRLF,
	RS_TRAILERS,
	RS_DONE,
};

void bench_resp_init(struct bench_resp_parser *p, bench_body_fn on_body, void *ud)
{
	memset(p, 0, sizeof *p);
	p->state = RS_STATUS;
	p->on_body = on_body;
	p->ud = ud;
}

bool bench_resp_headers_done(const struct bench_resp_parser *p)
{
	return p->state > RS_HEADERS;
}

static int parse_status_line(struct bench_resp_parser *p, const char *s)
{
	/* "HTTP/1.1 200 OK" — the reason phrase may be empty or absent. */
	if (strncmp(s, "HTTP/1.", 7) != 0 || !isdigit((unsigned char)s[7]) || s[8] != ' ')
		return ERR_FORMAT;
	const char *c = s + 9;
	if (!isdigit((unsigned char)c[0]) || !isdigit((unsigned char)c[1]) ||
	    !isdigit((unsigned char)c[2]) || (c[3] != ' ' && c[3] != '\0'))
		return ERR_FORMAT;
	int st = (c[0] - '0') * 100 + (c[1] - '0') * 10 + (c[2] - '0');
	if (st < 100 || st > 599)
		return ERR_FORMAT;
	p->status = st;
	p->http10 = s[7] == '0';
	return 0;
}

static int parse_u64_dec(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	if (!isdigit((unsigned char)*s))
		return ERR_FORMAT;
	for (; isdigit((unsigned char)*s); s++) {
		if (ck_mul_u64(v, 10, &v) || ck_add_u64(v, (uint64_t)(*s - '0'), &v))
			return ERR_FORMAT;
	}
	while (*s == ' ' || *s == '\t')
		s++;
	if (*s)
		return ERR_FORMAT;
	*out = v;
	return 0;
}

static int parse_header(struct bench_resp_parser *p, char *s)
{
	char *colon = strchr(s, ':');
	if (!colon || colon == s)
		return ERR_FORMAT;
	*colon = '\0';
	char *v = colon + 1;
	while (*v == ' ' || *v == '\t')
		v++;
	if (!strcasecmp(s, "content-length")) {
		uint64_t n;
		if (parse_u64_dec(v, &n))
			return ERR_FORMAT;
		if (p->has_len && n != p->remaining)
			return ERR_FORMAT; /* conflicting lengths: refuse to guess */
		p->has_len = true;
		p->remaining = n;
	} else if (!strcasecmp(s, "transfer-encoding")) {
		/* Only chunked (last) is meaningful to us; anything else we cannot decode. */
		size_t vl = strlen(v);
		while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
			v[--vl] = '\0';
		if (vl >= 7 && !strcasecmp(v + vl - 7, "chunked"))
			p->chunked = true;
		else if (strcasecmp(v, "identity"))
			return ERR_FORMAT;
	} else if (!strcasecmp(s, "connection")) {
		if (strcasestr(v, "close"))
			p->conn_close = true;
	} else if (!strcasecmp(s, "content-type")) {
		p->is_sse = strncasecmp(v, "text/event-stream", 17) == 0;
	}
	return 0;
}

static void start_body(struct bench_resp_parser *p)
{
	/* 1xx, 204 and 304 carry no body (RFC 9112 6.3). */
	if (p->status == 204 || p->status == 304)
		p->state = RS_DONE;
	else if (p->chunked)
		p->state = RS_CHUNK_SIZE; /* chunked wins over Content-Length */
	else if (p->has_len)
		p->state = p->remaining ? RS_BODY_LEN : RS_DONE;
	else
		p->state = RS_BODY_EOF;
}

static int parse_chunk_size(struct bench_resp_parser *p, const char *s)
{
	uint64_t v = 0;
	int nd = 0;
	for (; isxdigit((unsigned char)*s); s++, nd++) {
		int d =
		    isdigit((unsigned char)*s) ? *s - '0' : (tolower((unsigned char)*s) - 'a' + 10);
		if (nd >= 15)
			return ERR_FORMAT; /* > 2^60: no real chunk is this big */
		v = v * 16 + (uint64_t)d;
	}
	while (*s == ' ' || *s == '\t')
		s++;
	if (nd == 0 || (*s && *s != ';'))
		return ERR_FORMAT;
	p->remaining = v;
	p->state = v ? RS_CHUNK_DATA : RS_TRAILERS;
	return 0;
}

/* One complete line (without CR/LF) in the current state. */
static int on_line(struct bench_resp_parser *p, char *s)
{
	switch (p->state) {
	case RS_STATUS:
		return parse_status_line(p, s) ? ERR_FORMAT : (p->state = RS_HEADERS, 0);
	case RS_HEADERS:
		if (*s)
			return parse_header(p, s);
		if (p->status < 200) { /* interim response: the real one follows */
			bench_resp_init(p, p->on_body, p->ud);
			return 0;
		}
		start_body(p);
		return 0;
	case RS_CHUNK_SIZE:
		return parse_chunk_size(p, s);
	case RS_CHUNK_CRLF:
		if (*s)
			return ERR_FORMAT;
		p->state = RS_CHUNK_SIZE;
		return 0;
	case RS_TRAILERS:
		if (!*s)
			p->state = RS_DONE;
		return 0;
	default:
		return ERR_INTERNAL;
	}
}

static bool is_line_state(int st)
{
	return st == RS_STATUS || st == RS_HEADERS || st == RS_CHUNK_SIZE || st == RS_CHUNK_CRLF ||
	       st == RS_TRAILERS;
}

int bench_resp_feed(struct bench_resp_parser *p, const char *data, size_t n, bool *done)
{
	size_t i = 0;
	while (i < n && p->state != RS_DONE) {
		if (is_line_state(p->state)) {
			const char *nl = memchr(data + i, '\n', n - i);
			size_t take = nl ? (size_t)(nl - (data + i)) : n - i;
			if (p->line_len + take >= sizeof p->line)
				return ERR_TOO_LARGE;
			if (p->state <= RS_HEADERS) {
				p->header_bytes += take + 1;
				if (p->header_bytes > BENCH_HTTP_HEADERS_MAX)
					return ERR_TOO_LARGE;
			}
			memcpy(p->line + p->line_len, data + i, take);
			p->line_len += take;
			i += take;
			if (!nl)
				break;
			i++; /* the '\n' */
			if (p->line_len && p->line[p->line_len - 1] == '\r')
				p->line_len--;
			p->line[p->line_len] = '\0';
			p->line_len = 0;
			int rc = on_line(p, p->line);
			if (rc)
				return rc;
			continue;
		}
		size_t take = n - i;
		if (p->state != RS_BODY_EOF && take > p->remaining)
			take = (size_t)p->remaining;
		if (take && p->on_body) {
			int rc = p->on_body(p->ud, data + i, take);
			if (rc)
				return rc;
		}
		i += take;
		if (p->state == RS_BODY_EOF)
			continue;
		p->remaining -= take;
		if (p->remaining == 0)
			p->state = p->state == RS_BODY_LEN ? RS_DONE : RS_CHUNK_CRLF;
	}
	*done = p->state == RS_DONE;
	p->extra = n - i;
	return 0;
}

int bench_resp_eof(struct bench_resp_parser *p, bool *done)
{
	if (p->state == RS_BODY_EOF || p->state == RS_DONE) {
		p->state = RS_DONE;
		*done = true;
		return 0;
	}
	*done = false;
	return ERR_IO;
}

/* ---- SSE ---- */

void bench_sse_init(struct bench_sse *s, size_t cap, bench_event_fn on_event, void *ud)
{
	memset(s, 0, sizeof *s);
	buf_init(&s->line);
	buf_init(&s->data);
	s->cap = cap;
	s->on_event = on_event;
	s->ud = ud;
}

void bench_sse_deinit(struct bench_sse *s)
{
	buf_deinit(&s->line);
	buf_deinit(&s->data);
}

static int sse_line(struct bench_sse *s, const char *l, size_t n)
{
	if (n == 0) { /* blank line: dispatch */
		if (!s->has_data)
			return 0;
		s->has_data = false;
		size_t len = s->data.len;
		if (len && s->data.data[len - 1] == '\n')
			len--; /* the last data line's newline is not part of the data */
		char empty = '\0';
		char *ev = s->data.data ? s->data.data : &empty;
		ev[len] = '\0';
		int rc = s->on_event(s->ud, ev, len);
		buf_clear(&s->data);
		return rc;
	}
	if (l[0] == ':')
		return 0; /* comment (keep-alive) */
	const char *colon = memchr(l, ':', n);
	size_t flen = colon ? (size_t)(colon - l) : n;
	if (flen != 4 || memcmp(l, "data", 4) != 0)
		return 0; /* event:, id:, retry: and unknown fields do not matter here */
	const char *v = colon ? colon + 1 : l + n;
	if (v < l + n && *v == ' ')
		v++;
	size_t vlen = (size_t)(l + n - v);
	if (s->data.len + vlen + 1 > s->cap)
		return ERR_TOO_LARGE;
	int rc = buf_append(&s->data, v, vlen);
	if (!rc)
		rc = buf_append_char(&s->data, '\n');
	s->has_data = true;
	return rc;
}

int bench_sse_feed(struct bench_sse *s, const char *p, size_t n)
{
	size_t i = 0;
	while (i < n) {
		const char *nl = memchr(p + i, '\n', n - i);
		size_t take = nl ? (size_t)(nl - (p + i)) : n - i;
		if (s->line.len + take > s->cap)
			return ERR_TOO_LARGE;
		int rc;
		if (!nl) {
			return buf_append(&s->line, p + i, take);
		}
		const char *l;
		size_t ll;
		if (s->line.len) {
			if ((rc = buf_append(&s->line, p + i, take)))
				return rc;
			l = s->line.data;
			ll = s->line.len;
		} else {
			l = p + i;
			ll = take;
		}
		if (ll && l[ll - 1] == '\r')
			ll--;
		rc = sse_line(s, l, ll);
		buf_clear(&s->line);
		if (rc)
			return rc;
		i += take + 1;
	}
	return 0;
}

/* ---- connections ---- */

enum { CS_CONNECTING, CS_BUSY, CS_IDLE, CS_CLOSED };

struct bench_conn {
	uv_tcp_t tcp;
	uv_timer_t timer;
	uv_connect_t connect;
	uv_write_t write;
	struct bench_pool *pool;
	struct bench_conn *prev, *next; /* in the pool's idle or busy list */
	struct bench_conn **list;       /* which one (NULL: neither) */
	int state;
	int n_open;   /* handles not yet closed */
	bool reading; /* uv_read_start done (stays on while idle, to see a close) */
	bool writing; /* a uv_write is in flight: the uv_write_t is not free */
	bool reused;  /* the current request is not this connection's first */
	bool retried; /* the current request already moved once */
	/* the current request */
	char *req;
	size_t req_len;
	uint64_t timeout_ms;
	size_t max_bytes, n_read;
	struct bench_resp_parser parser;
	struct bench_conn_cbs cbs;
	void *ud;
	char rbuf[16384];
};

/* Move c to the list at head (NULL: out of both lists). */
static void conn_list_set(struct bench_conn *c, struct bench_conn **head)
{
	struct bench_pool *p = c->pool;
	if (c->list) {
		if (c->prev)
			c->prev->next = c->next;
		else
			*c->list = c->next;
		if (c->next)
			c->next->prev = c->prev;
		p->n_idle -= c->list == &p->idle;
	}
	c->prev = c->next = NULL;
	c->list = head;
	if (head) {
		c->next = *head;
		if (*head)
			(*head)->prev = c;
		*head = c;
		p->n_idle += head == &p->idle;
	}
}

static void idle_push(struct bench_pool *p, struct bench_conn *c)
{
	c->state = CS_IDLE;
	conn_list_set(c, &p->idle);
}

static void idle_remove(struct bench_pool *p, struct bench_conn *c)
{
	(void)p;
	conn_list_set(c, NULL);
}

static void conn_on_close(uv_handle_t *h)
{
	struct bench_conn *c = h->data;
	if (--c->n_open == 0) {
		free(c->req);
		free(c);
	}
}

/* Close without a callback to the request's owner. c stays valid until the
 * loop runs the close callbacks. */
static void conn_close(struct bench_conn *c)
{
	if (c->state == CS_CLOSED)
		return;
	conn_list_set(c, NULL);
	c->state = CS_CLOSED;
	uv_close((uv_handle_t *)&c->tcp, conn_on_close);
	uv_close((uv_handle_t *)&c->timer, conn_on_close);
}

/* The current request is over: settle the connection (idle or closed), then
 * tell the owner, who may at once send a new request on this connection. */
static void conn_end_request(struct bench_conn *c, int kind, bool can_reuse)
{
	if (c->state != CS_BUSY && c->state != CS_CONNECTING)
		return;
	uv_timer_stop(&c->timer);
	struct bench_conn_cbs cbs = c->cbs;
	void *ud = c->ud;
	int status = c->parser.status;
	bool reused = c->reused;
	const struct bench_resp_parser *p = &c->parser;
	if (can_reuse && c->pool->keep_alive && !c->writing && !p->http10 && !p->conn_close &&
	    p->extra == 0)
		idle_push(c->pool, c);
	else
		conn_close(c);
	cbs.on_done(ud, kind, status, reused);
}

static int conn_body(void *ud, const char *p, size_t n)
{
	struct bench_conn *c = ud;
	return c->cbs.on_body(c->ud, c->parser.status, p, n);
}

static void conn_on_timeout(uv_timer_t *t)
{
	conn_end_request(t->data, BENCH_E_TIMEOUT, false);
}

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
	(void)suggested;
	struct bench_conn *c = h->data;
	*b = uv_buf_init(c->rbuf, sizeof c->rbuf);
}

/* Map a parser/callback return to a BENCH_E_* kind. */
static int kind_of(int rc)
{
	if (rc > 0 && rc < BENCH_E__COUNT)
		return rc; /* already a kind, from on_body */
	if (rc == ERR_TOO_LARGE)
		return BENCH_E_TOO_LARGE;
	return BENCH_E_MALFORMED;
}

static int conn_open(struct bench_pool *p, struct bench_conn **out);
static int conn_setup(struct bench_conn *c, const char *req, size_t len, uint64_t timeout_ms,
                      size_t max_bytes, const struct bench_conn_cbs *cbs, void *ud);
static int conn_connect(struct bench_conn *c);

/* A reused connection died before any response byte: the server closed it as
 * we wrote. Move the request to a new connection, once. */
static bool conn_retry(struct bench_conn *c)
{
	if (!c->reused || c->n_read || c->retried)
		return false;
	struct bench_conn *n;
	if (conn_open(c->pool, &n))
		return false;
	if (conn_setup(n, c->req, c->req_len, c->timeout_ms, c->max_bytes, &c->cbs, c->ud) ||
	    conn_connect(n)) {
		conn_close(n);
		return false;
	}
	n->retried = true;
	conn_list_set(n, &c->pool->busy);
	uv_timer_stop(&c->timer);
	conn_close(c);
	return true;
}

static void conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
	struct bench_conn *c = s->data;
	if (c->state == CS_IDLE) {
		if (nread != 0)
			conn_close(c); /* closed by the server, or bytes nobody asked for */
		return;
	}
	if (c->state != CS_BUSY)
		return;
	if (nread < 0) {
		bool done = false;
		if (nread == UV_EOF && bench_resp_eof(&c->parser, &done) == 0 && done)
			conn_end_request(c, BENCH_OK, false);
		else if (!conn_retry(c))
			conn_end_request(c, BENCH_E_RESET, false);
		return;
	}
	if (nread == 0)
		return;
	c->n_read += (size_t)nread;
	if (c->n_read > c->max_bytes) {
		conn_end_request(c, BENCH_E_TOO_LARGE, false);
		return;
	}
	bool done = false;
	int rc = bench_resp_feed(&c->parser, b->base, (size_t)nread, &done);
	if (rc)
		conn_end_request(c, kind_of(rc), false);
	else if (done)
		conn_end_request(c, BENCH_OK, true);
}

static void conn_on_write(uv_write_t *w, int status)
{
	struct bench_conn *c = w->data;
	c->writing = false;
	if (c->state != CS_BUSY || status >= 0)
		return;
	if (!conn_retry(c))
		conn_end_request(c, BENCH_E_RESET, false);
}

/* Write the current request; start reading if not yet. */
static int conn_send(struct bench_conn *c)
{
	c->state = CS_BUSY;
	c->write.data = c;
	uv_buf_t b = uv_buf_init(c->req, (unsigned int)c->req_len);
	int rc = uv_write(&c->write, (uv_stream_t *)&c->tcp, &b, 1, conn_on_write);
	if (rc)
		return rc;
	c->writing = true;
	if (!c->reading) {
		rc = uv_read_start((uv_stream_t *)&c->tcp, conn_alloc, conn_on_read);
		c->reading = rc == 0;
	}
	return rc;
}

static void conn_on_connect(uv_connect_t *req, int status)
{
	struct bench_conn *c = req->data;
	if (c->state != CS_CONNECTING)
		return; /* closed meanwhile (timeout): status is UV_ECANCELED */
	if (status < 0) {
		conn_end_request(c, BENCH_E_CONNECT, false);
		return;
	}
	uv_tcp_nodelay(&c->tcp, 1);
	if (conn_send(c))
		conn_end_request(c, BENCH_E_RESET, false);
}

static int conn_open(struct bench_pool *p, struct bench_conn **out)
{
	struct bench_conn *c = calloc(1, sizeof *c);
	if (!c)
		return ERR_NOMEM;
	if (uv_tcp_init(p->loop, &c->tcp)) {
		free(c);
		return ERR_IO;
	}
	uv_timer_init(p->loop, &c->timer); /* cannot fail on a live loop */
	c->tcp.data = c->timer.data = c->connect.data = c;
	c->n_open = 2;
	c->pool = p;
	c->state = CS_CONNECTING;
	*out = c;
	return 0;
}

static int conn_setup(struct bench_conn *c, const char *req, size_t len, uint64_t timeout_ms,
                      size_t max_bytes, const struct bench_conn_cbs *cbs, void *ud)
{
	char *copy = malloc(len ? len : 1);
	if (!copy)
		return ERR_NOMEM;
	memcpy(copy, req, len);
	free(c->req); /* the previous request's write has completed (see conn_end_request) */
	c->req = copy;
	c->req_len = len;
	c->timeout_ms = timeout_ms;
	c->max_bytes = max_bytes;
	c->n_read = 0;
	c->cbs = *cbs;
	c->ud = ud;
	c->retried = false;
	bench_resp_init(&c->parser, conn_body, c);
	if (timeout_ms)
		uv_timer_start(&c->timer, conn_on_timeout, timeout_ms, 0);
	return 0;
}

static int conn_connect(struct bench_conn *c)
{
	c->state = CS_CONNECTING;
	c->reused = false;
	if (uv_tcp_connect(&c->connect, &c->tcp, (const struct sockaddr *)&c->pool->addr,
	                   conn_on_connect))
		return ERR_IO;
	c->pool->n_connects++;
	return 0;
}

void bench_pool_init(struct bench_pool *p, uv_loop_t *loop, const struct sockaddr *addr,
                     bool keep_alive)
{
	memset(p, 0, sizeof *p);
	p->loop = loop;
	memcpy(&p->addr, addr,
	       addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
	                                   : sizeof(struct sockaddr_in));
	p->keep_alive = keep_alive;
}

int bench_pool_request(struct bench_pool *p, const char *req, size_t len, uint64_t timeout_ms,
                       size_t max_bytes, const struct bench_conn_cbs *cbs, void *ud)
{
	while (p->idle) {
		struct bench_conn *c = p->idle;
		idle_remove(p, c);
		c->state = CS_BUSY;
		int rc = conn_setup(c, req, len, timeout_ms, max_bytes, cbs, ud);
		if (rc == ERR_NOMEM) {
			idle_push(p, c);
			return rc;
		}
		c->reused = true;
		if (conn_send(c) == 0) {
			conn_list_set(c, &p->busy);
			return 0;
		}
		uv_timer_stop(&c->timer);
		conn_close(c); /* broken while idle: try the next one */
	}
	struct bench_conn *c;
	int rc = conn_open(p, &c);
	if (rc)
		return rc;
	rc = conn_setup(c, req, len, timeout_ms, max_bytes, cbs, ud);
	if (!rc)
		rc = conn_connect(c);
	if (rc) {
		/* no callback will come: close quietly */
		conn_close(c);
		return rc == ERR_NOMEM ? rc : ERR_IO;
	}
	conn_list_set(c, &p->busy);
	return 0;
}

void bench_pool_close_idle(struct bench_pool *p)
{
	while (p->idle)
		conn_close(p->idle);
}

void bench_pool_cancel(struct bench_pool *p, int kind)
{
	/* conn_end_request takes each off the busy list (it closes or idles it). */
	while (p->busy) {
		struct bench_conn *c = p->busy;
		conn_end_request(c, kind, false);
		if (p->busy == c)
			conn_close(c); /* not carrying a request after all */
	}
}
