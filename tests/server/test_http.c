/* tests/server/test_http.c — server/http.c over loopback with a scripted
 * handler: immediate answers, answers deferred to a timer, chunked streams
 * written from a timer, 413 for large bodies, the caller's 500 for a handler
 * that does not answer, and on_close for a client that hangs up mid-stream.
 * The client is a raw socket in a second thread. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <uv.h>

#include "server/http.h"

struct harness {
	uv_loop_t loop;
	uv_async_t stop;
	struct http_server *srv;
	int port;
	_Atomic int n_closed; /* written on the loop thread, read by the test */
	_Atomic int n_closed_incomplete;
	/* deferred work */
	uv_timer_t timer;
	struct http_req *parked;
	int stream_step;
};

static void on_timer(uv_timer_t *t)
{
	struct harness *h = t->data;
	struct http_req *r = h->parked;
	if (!r)
		return;
	const char *path = http_req_path(r);
	if (!strcmp(path, "/deferred")) {
		http_respond(r, 200, "text/plain", "later", 5, NULL, 0);
		h->parked = NULL;
		return;
	}
	/* /stream and /stream-forever: one chunk per tick */
	char chunk[64];
	int n = snprintf(chunk, sizeof chunk, "data: %d\n\n", h->stream_step++);
	http_stream_write(r, chunk, (size_t)n);
	if (!strcmp(path, "/stream") && h->stream_step == 5) {
		http_stream_end(r);
		h->parked = NULL;
		return;
	}
	uv_timer_start(&h->timer, on_timer, 5, 0);
}

static void on_request(void *ud, struct http_req *r)
{
	struct harness *h = ud;
	const char *path = http_req_path(r);
	if (!strcmp(path, "/echo")) {
		size_t len;
		const char *body = http_req_body(r, &len);
		struct http_header hd[] = { { "X-Test", "yes" } };
		http_respond(r, 201, "text/plain", body, len, hd, 1);
	} else if (!strcmp(path, "/deferred")) {
		http_defer(r);
		h->parked = r;
		uv_timer_start(&h->timer, on_timer, 20, 0);
	} else if (!strcmp(path, "/stream") || !strcmp(path, "/stream-forever")) {
		h->stream_step = 0;
		http_stream_start(r, 200, "text/event-stream", NULL, 0);
		h->parked = r;
		uv_timer_start(&h->timer, on_timer, 5, 0);
	} else if (!strcmp(path, "/silent")) {
		/* neither answers nor defers: the transport sends the caller's 500 */
	} else {
		http_respond(r, 404, "text/plain", "nope", 4, NULL, 0);
	}
}

static void on_close(void *ud, struct http_req *r, bool completed)
{
	struct harness *h = ud;
	h->n_closed++;
	if (!completed)
		h->n_closed_incomplete++;
	if (h->parked == r) {
		h->parked = NULL;
		uv_timer_stop(&h->timer);
	}
}

static void on_stop(uv_async_t *a)
{
	struct harness *h = a->data;
	http_server_destroy(h->srv);
	uv_close((uv_handle_t *)&h->timer, NULL);
	uv_close((uv_handle_t *)&h->stop, NULL);
}

static void *loop_main(void *p)
{
	struct harness *h = p;
	uv_run(&h->loop, UV_RUN_DEFAULT);
	return NULL;
}

static int connect_port(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
	return fd;
}

/* Send a request and read the whole response (the server closes: Connection: close). */
static char *roundtrip(int port, const char *req, size_t req_len)
{
	int fd = connect_port(port);
	size_t off = 0;
	while (off < req_len) {
		ssize_t w = write(fd, req + off, req_len - off);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	size_t cap = 1 << 16, len = 0;
	char *out = malloc(cap);
	for (;;) {
		ssize_t n = read(fd, out + len, cap - len - 1);
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len + 1 >= cap)
			out = realloc(out, cap *= 2);
	}
	out[len] = 0;
	close(fd);
	return out;
}

static struct harness H;
static pthread_t loop_thread;

static void setup(void)
{
	memset(&H, 0, sizeof H);
	uv_loop_init(&H.loop);
	uv_async_init(&H.loop, &H.stop, on_stop);
	H.stop.data = &H;
	uv_timer_init(&H.loop, &H.timer);
	H.timer.data = &H;
	static const char too_large[] = "{\"error\":\"too large\"}";
	static const char internal[] = "handler bug";
	struct http_opts o = { .host = "127.0.0.1", .port = 0, .max_body_bytes = 1024,
			       .max_connections = 16, .connection_timeout_s = 5,
			       .too_large = { "application/json", too_large, sizeof too_large - 1 },
			       .internal_error = { "text/x-test", internal, sizeof internal - 1 } };
	struct http_handler hd = { .ud = &H, .on_request = on_request, .on_close = on_close };
	char err[256];
	ck_assert_int_eq(http_server_create(&H.loop, &o, &hd, &H.srv, err, sizeof err), 0);
	H.port = http_server_port(H.srv);
	ck_assert_int_gt(H.port, 0);
	pthread_create(&loop_thread, NULL, loop_main, &H);
}

static void teardown(void)
{
	uv_async_send(&H.stop);
	pthread_join(loop_thread, NULL);
	ck_assert_int_eq(uv_loop_close(&H.loop), 0);
}

START_TEST(test_echo_and_404)
{
	const char req[] = "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
			   "Content-Length: 5\r\n\r\nhello";
	char *resp = roundtrip(H.port, req, sizeof req - 1);
	ck_assert_msg(strncmp(resp, "HTTP/1.1 201", 12) == 0, "%s", resp);
	ck_assert_ptr_nonnull(strstr(resp, "X-Test: yes"));
	ck_assert_ptr_nonnull(strstr(resp, "\r\n\r\nhello"));
	free(resp);
	const char req2[] = "GET /missing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	resp = roundtrip(H.port, req2, sizeof req2 - 1);
	ck_assert_msg(strncmp(resp, "HTTP/1.1 404", 12) == 0, "%s", resp);
	free(resp);
}
END_TEST

START_TEST(test_deferred)
{
	const char req[] = "GET /deferred HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	char *resp = roundtrip(H.port, req, sizeof req - 1);
	ck_assert_msg(strncmp(resp, "HTTP/1.1 200", 12) == 0, "%s", resp);
	ck_assert_ptr_nonnull(strstr(resp, "\r\n\r\nlater"));
	free(resp);
}
END_TEST

START_TEST(test_stream)
{
	const char req[] = "GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	char *resp = roundtrip(H.port, req, sizeof req - 1);
	ck_assert_msg(strncmp(resp, "HTTP/1.1 200", 12) == 0, "%s", resp);
	ck_assert_ptr_nonnull(strstr(resp, "Transfer-Encoding: chunked"));
	ck_assert_ptr_nonnull(strstr(resp, "text/event-stream"));
	const char *p = resp;
	for (int i = 0; i < 5; i++) {
		char want[32];
		snprintf(want, sizeof want, "data: %d\n\n", i);
		p = strstr(p, want);
		ck_assert_msg(p != NULL, "chunk %d missing in %s", i, resp);
	}
	ck_assert_ptr_nonnull(strstr(resp, "\r\n0\r\n\r\n")); /* the last chunk */
	free(resp);
}
END_TEST

START_TEST(test_too_large)
{
	char req[4096];
	char body[2000];
	memset(body, 'x', sizeof body);
	int n = snprintf(req, sizeof req,
			 "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
			 "Content-Length: %zu\r\n\r\n%.*s",
			 sizeof body, (int)sizeof body, body);
	char *resp = roundtrip(H.port, req, (size_t)n);
	ck_assert_msg(strncmp(resp, "HTTP/1.1 413", 12) == 0, "%s", resp);
	ck_assert_ptr_nonnull(strstr(resp, "too large"));
	free(resp);
}
END_TEST

START_TEST(test_handler_silent)
{
	const char req[] = "GET /silent HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	char *resp = roundtrip(H.port, req, sizeof req - 1);
	ck_assert_msg(strncmp(resp, "HTTP/1.1 500", 12) == 0, "%s", resp);
	ck_assert_ptr_nonnull(strstr(resp, "Content-Type: text/x-test"));
	ck_assert_ptr_nonnull(strstr(resp, "\r\n\r\nhandler bug"));
	free(resp);
}
END_TEST

START_TEST(test_client_hangs_up_mid_stream)
{
	int fd = connect_port(H.port);
	const char req[] = "GET /stream-forever HTTP/1.1\r\nHost: x\r\n\r\n";
	ck_assert_int_eq(write(fd, req, sizeof req - 1), (ssize_t)(sizeof req - 1));
	char tmp[256];
	ck_assert_int_gt(read(fd, tmp, sizeof tmp), 0); /* the stream has started */
	close(fd);
	/* the server notices at its next write and closes the request as incomplete */
	for (int i = 0; i < 200 && H.n_closed_incomplete == 0; i++)
		usleep(10000);
	ck_assert_int_eq(H.n_closed_incomplete, 1);
}
END_TEST

/* --host takes a name too ("localhost"), as uvicorn does: bound to what it
 * resolves to. */
START_TEST(test_host_name)
{
	uv_loop_t loop;
	uv_loop_init(&loop);
	static const char body[] = "{}";
	struct http_opts o = { .host = "localhost", .port = 0, .max_body_bytes = 1024,
			       .max_connections = 4, .connection_timeout_s = 5,
			       .too_large = { "application/json", body, 2 } };
	struct http_handler hd = { .ud = NULL, .on_request = on_request, .on_close = on_close };
	struct http_server *srv = NULL;
	char err[256];
	ck_assert_msg(http_server_create(&loop, &o, &hd, &srv, err, sizeof err) == 0, "%s", err);
	ck_assert_int_gt(http_server_port(srv), 0);
	http_server_destroy(srv);
	uv_run(&loop, UV_RUN_DEFAULT);
	ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("http");
	TCase *tc = tcase_create("loopback");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_echo_and_404);
	tcase_add_test(tc, test_deferred);
	tcase_add_test(tc, test_stream);
	tcase_add_test(tc, test_too_large);
	tcase_add_test(tc, test_handler_silent);
	tcase_add_test(tc, test_client_hangs_up_mid_stream);
	suite_add_tcase(s, tc);
	TCase *tn = tcase_create("names");
	tcase_add_test(tn, test_host_name);
	suite_add_tcase(s, tn);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
