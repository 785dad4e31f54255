/* server/bench/bench_run.c — the benchmark's run loop: a private libuv loop that
 * releases requests on a schedule (all at once, constant or Poisson arrivals),
 * caps how many are in flight (--max-concurrency), sends each as a streaming
 * OpenAI request (on an idle kept-alive connection or a new one), and records per-request timings
 * from the SSE stream (definitions in bench_serve.h). Tested end to end against
 * tests/bench_serve/fake_openai.mjs in tests/bench_serve/test_bench_e2e.c. */
#include <math.h>
#include <netdb.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <uv.h>

#include "bench_http.h"
#include "bench_rng.h"
#include "bench_serve.h"
#include "common/buf.h"
#include "common/clock.h"

#define ERRBODY_MAX   2048
#define SSE_EVENT_MAX (4u << 20)

struct run;

struct req_state {
	struct run *run;
	int idx;
	uint64_t t0_ns, last_ns;
	struct bench_sse sse;
	bool saw_done;
	int usage_prompt, usage_completion; /* -1 until usage arrives */
	int itl_cap;
	struct buf errbody;
};

struct run {
	uv_loop_t loop;
	uv_timer_t arrival_timer, progress_timer;
	uv_signal_t sigint;
	bool has_sigint, interrupted;
	struct bench_pool pool;
	bool progress_on;
	const struct bench_config *c;
	const struct bench_workload *w;
	struct bench_result *results;
	struct req_state *reqs;
	struct sockaddr_storage addr;
	char host[300];
	char path[512];
	struct bench_rng rng;
	int n_arrived, n_started, n_done, n_failed, in_flight;
	bool dispatching; /* a failed start inside dispatch() must not recurse */
	double next_arrival_s;
	uint64_t t_begin_ns, t_last_end_ns;
	char first_err[300];
};

void bench_config_defaults(struct bench_config *c)
{
	memset(c, 0, sizeof *c);
	c->api = BENCH_API_COMPLETIONS;
	c->num_prompts = 100;
	c->request_rate = INFINITY;
	c->arrival = BENCH_ARRIVAL_POISSON;
	c->dataset = BENCH_DATA_FIXED;
	c->input_len = 128;
	c->output_len = 128;
	c->request_timeout_s = 300;
	c->max_response_bytes = 64u << 20;
	c->keep_alive = true;
	c->burstiness = 1.0;
}

void bench_results_free(struct bench_result *results, int n)
{
	for (int i = 0; results && i < n; i++) {
		free(results[i].itl_s);
		results[i].itl_s = NULL;
		results[i].n_itl = 0;
	}
}

static double since_begin_s(const struct run *r, uint64_t t_ns)
{
	return (double)(t_ns - r->t_begin_ns) * 1e-9;
}

/* ---- URL ---- */

static int parse_base_url(struct run *r, const char *url, struct diag *d)
{
	if (!url || strncmp(url, "http://", 7) != 0)
		return diag_set(d, ERR_INVAL, "--base-url must start with http:// (got '%s')",
		                url ? url : "");
	const char *h = url + 7, *slash = strchr(h, '/');
	size_t hl = slash ? (size_t)(slash - h) : strlen(h);
	if (hl == 0 || hl >= sizeof r->host)
		return diag_set(d, ERR_INVAL, "--base-url: bad host in '%s'", url);
	memcpy(r->host, h, hl);
	r->host[hl] = '\0';
	char host[300], port[16] = "80";
	if (r->host[0] == '[') { /* [v6]:port */
		const char *rb = strchr(r->host, ']');
		if (!rb)
			return diag_set(d, ERR_INVAL, "--base-url: bad IPv6 host in '%s'", url);
		snprintf(host, sizeof host, "%.*s", (int)(rb - r->host - 1), r->host + 1);
		if (rb[1] == ':')
			snprintf(port, sizeof port, "%s", rb + 2);
	} else {
		const char *colon = strrchr(r->host, ':');
		snprintf(host, sizeof host, "%.*s",
		         (int)(colon ? (size_t)(colon - r->host) : strlen(r->host)), r->host);
		if (colon)
			snprintf(port, sizeof port, "%s", colon + 1);
	}
	const char *prefix = slash ? slash : "";
	size_t pl = strlen(prefix);
	while (pl && prefix[pl - 1] == '/')
		pl--;
	const char *ep = r->c->api == BENCH_API_CHAT ? "/v1/chat/completions" : "/v1/completions";
	if (pl + strlen(ep) >= sizeof r->path)
		return diag_set(d, ERR_INVAL, "--base-url: path too long");
	snprintf(r->path, sizeof r->path, "%.*s%s", (int)pl, prefix, ep);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
	int gai = getaddrinfo(host, port, &hints, &ai);
	if (gai)
		return diag_set(d, ERR_INVAL, "--base-url: cannot resolve %s:%s: %s", host, port,
		                gai_strerror(gai));
	/* Prefer IPv4: "localhost" often resolves to ::1 first while servers
	 * (aorta's default included) listen on 127.0.0.1. */
	const struct addrinfo *pick = ai;
	for (const struct addrinfo *a = ai; a; a = a->ai_next) {
		if (a->ai_family == AF_INET) {
			pick = a;
			break;
		}
	}
	memcpy(&r->addr, pick->ai_addr, pick->ai_addrlen);
	freeaddrinfo(ai);
	return 0;
}

/* ---- request body ---- */

static int build_request(const struct run *r, const struct bench_prompt *p, struct buf *out)
{
	const struct bench_config *c = r->c;
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return ERR_NOMEM;
	cJSON_AddStringToObject(o, "model", c->model ? c->model : "");
	if (c->api == BENCH_API_CHAT) {
		cJSON *msgs = cJSON_AddArrayToObject(o, "messages");
		cJSON *m = cJSON_CreateObject();
		cJSON_AddStringToObject(m, "role", "user");
		cJSON_AddStringToObject(m, "content", p->text);
		cJSON_AddItemToArray(msgs, m);
		cJSON_AddNumberToObject(o, "max_completion_tokens", p->output_len);
	} else {
		cJSON_AddStringToObject(o, "prompt", p->text);
		cJSON_AddNumberToObject(o, "max_tokens", p->output_len);
	}
	cJSON_AddNumberToObject(o, "temperature", c->temperature);
	cJSON_AddBoolToObject(o, "stream", true);
	cJSON *so = cJSON_AddObjectToObject(o, "stream_options");
	cJSON_AddBoolToObject(so, "include_usage", true);
	if (c->ignore_eos)
		cJSON_AddBoolToObject(o, "ignore_eos", true); /* vLLM/aorta extension */
	char *body = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (!body)
		return ERR_NOMEM;
	size_t blen = strlen(body);
	int rc = buf_printf(out,
	                    "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: aorta-bench\r\n"
	                    "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
	                    "Content-Length: %zu\r\nConnection: %s\r\n",
	                    r->path, r->host, blen, c->keep_alive ? "keep-alive" : "close");
	if (!rc && c->api_key)
		rc = buf_printf(out, "Authorization: Bearer %s\r\n", c->api_key);
	if (!rc)
		rc = buf_append_str(out, "\r\n");
	if (!rc)
		rc = buf_append(out, body, blen);
	cJSON_free(body);
	return rc;
}

/* ---- one request's stream ---- */

static int push_itl(struct req_state *q, struct bench_result *res, double gap_s)
{
	if (res->n_itl == q->itl_cap) {
		int nc = q->itl_cap ? q->itl_cap * 2 : 64;
		double *nv = realloc(res->itl_s, (size_t)nc * sizeof *nv);
		if (!nv)
			return ERR_NOMEM;
		res->itl_s = nv;
		q->itl_cap = nc;
	}
	res->itl_s[res->n_itl++] = gap_s;
	return 0;
}

static const char *chunk_content(const cJSON *choice, bool chat)
{
	const cJSON *s;
	if (chat) {
		const cJSON *delta = cJSON_GetObjectItemCaseSensitive(choice, "delta");
		s = cJSON_GetObjectItemCaseSensitive(delta, "content");
		if (!cJSON_IsString(s) || !*s->valuestring)
			s = cJSON_GetObjectItemCaseSensitive(delta, "reasoning_content");
	} else {
		s = cJSON_GetObjectItemCaseSensitive(choice, "text");
	}
	return cJSON_IsString(s) ? s->valuestring : NULL;
}

static int get_count(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e9)
		return -1;
	return (int)v->valuedouble;
}

static int on_event(void *ud, const char *data, size_t n)
{
	struct req_state *q = ud;
	struct bench_result *res = &q->run->results[q->idx];
	uint64_t now = clock_now_ns();
	if (q->saw_done)
		return 0; /* anything after [DONE] is not part of the response */
	if (n == 6 && !memcmp(data, "[DONE]", 6)) {
		q->saw_done = true;
		return 0;
	}
	cJSON *o = cJSON_ParseWithLength(data, n);
	if (!cJSON_IsObject(o)) {
		cJSON_Delete(o);
		return BENCH_E_MALFORMED;
	}
	int rc = 0;
	if (cJSON_GetObjectItemCaseSensitive(o, "error")) {
		rc = BENCH_E_STREAM;
		goto out;
	}
	const cJSON *usage = cJSON_GetObjectItemCaseSensitive(o, "usage");
	if (cJSON_IsObject(usage)) {
		int pt = get_count(usage, "prompt_tokens"),
		    ct = get_count(usage, "completion_tokens");
		if (ct >= 0)
			q->usage_completion = ct;
		if (pt >= 0)
			q->usage_prompt = pt;
	}
	const cJSON *choices = cJSON_GetObjectItemCaseSensitive(o, "choices");
	const char *text =
	    chunk_content(cJSON_GetArrayItem(choices, 0), q->run->c->api == BENCH_API_CHAT);
	if (text && *text) {
		if (res->n_chunks == 0)
			res->ttft_s = (double)(now - q->t0_ns) * 1e-9;
		else if (push_itl(q, res, (double)(now - q->last_ns) * 1e-9))
			rc = BENCH_E_TOO_LARGE;
		q->last_ns = now;
		res->n_chunks++;
	}
out:
	cJSON_Delete(o);
	return rc;
}

static int on_body(void *ud, int status, const char *p, size_t n)
{
	struct req_state *q = ud;
	if (status != 200) { /* keep the start of an error body for the report */
		size_t room = ERRBODY_MAX - q->errbody.len;
		return buf_append(&q->errbody, p, n < room ? n : room) ? BENCH_E_TOO_LARGE : 0;
	}
	int rc = bench_sse_feed(&q->sse, p, n);
	if (rc == ERR_TOO_LARGE || rc == ERR_NOMEM)
		return BENCH_E_TOO_LARGE;
	if (rc < 0)
		return BENCH_E_MALFORMED;
	return rc;
}

static void dispatch(struct run *r);

static void note_failure(struct run *r, const struct bench_result *res, const struct buf *body)
{
	r->n_failed++;
	if (r->first_err[0])
		return;
	char key[24];
	snprintf(r->first_err, sizeof r->first_err, "request failed: %s%s%.200s",
	         bench_err_key(res, key, sizeof key), body->len ? ": " : "",
	         body->len ? body->data : "");
	for (char *s = r->first_err; *s; s++)
		if (*s == '\n' || *s == '\r')
			*s = ' ';
}

static void close_timers(struct run *r)
{
	if (!uv_is_closing((uv_handle_t *)&r->arrival_timer))
		uv_close((uv_handle_t *)&r->arrival_timer, NULL);
	if (!uv_is_closing((uv_handle_t *)&r->progress_timer))
		uv_close((uv_handle_t *)&r->progress_timer, NULL);
	if (r->has_sigint && !uv_is_closing((uv_handle_t *)&r->sigint))
		uv_close((uv_handle_t *)&r->sigint, NULL);
}

static void on_done(void *ud, int kind, int status, bool reused)
{
	struct req_state *q = ud;
	struct run *r = q->run;
	struct bench_result *res = &r->results[q->idx];
	uint64_t now = clock_now_ns();
	res->status = status;
	res->reused_connection = reused;
	res->e2e_s = (double)(now - q->t0_ns) * 1e-9;
	if (status != 0 && status != 200 && kind != BENCH_E_TIMEOUT)
		kind = BENCH_E_HTTP; /* counted by status, however the body ended */
	else if (kind == BENCH_OK && !q->saw_done)
		kind = BENCH_E_MALFORMED; /* a 200 that is not a complete SSE stream */
	else if (kind == BENCH_OK && res->n_chunks == 0)
		kind = BENCH_E_EMPTY;
	res->err = kind;
	res->usage_from_server = q->usage_completion >= 0;
	res->output_tokens = res->usage_from_server ? q->usage_completion : res->n_chunks;
	res->prompt_tokens =
	    q->usage_prompt >= 0 ? q->usage_prompt : r->w->items[q->idx].prompt_len;
	if (kind != BENCH_OK)
		note_failure(r, res, &q->errbody);
	bench_sse_deinit(&q->sse);
	buf_deinit(&q->errbody);
	r->in_flight--;
	r->n_done++;
	r->t_last_end_ns = now;
	if (r->n_done == r->w->n) {
		close_timers(r);
		bench_pool_close_idle(&r->pool);
	} else
		dispatch(r);
}

static void start_request(struct run *r, int i)
{
	struct req_state *q = &r->reqs[i];
	struct bench_result *res = &r->results[i];
	q->run = r;
	q->idx = i;
	q->usage_prompt = q->usage_completion = -1;
	buf_init(&q->errbody);
	size_t sse_cap =
	    r->c->max_response_bytes < SSE_EVENT_MAX ? r->c->max_response_bytes : SSE_EVENT_MAX;
	bench_sse_init(&q->sse, sse_cap, on_event, q);
	res->ttft_s = -1;
	r->in_flight++;
	struct buf req;
	buf_init(&req);
	q->t0_ns = clock_now_ns();
	res->start_s = since_begin_s(r, q->t0_ns);
	int rc = build_request(r, &r->w->items[i], &req);
	static const struct bench_conn_cbs cbs = {on_body, on_done};
	double tmo = r->c->request_timeout_s > 0 ? r->c->request_timeout_s * 1e3 : 0;
	if (!rc)
		rc = bench_pool_request(&r->pool, req.data, req.len,
		                        tmo > 1e12 ? (uint64_t)1e12 : (uint64_t)tmo,
		                        r->c->max_response_bytes, &cbs, q);
	buf_deinit(&req);
	if (rc) /* no callback will come: record it here */
		on_done(q, BENCH_E_CONNECT, 0, false);
}

static void dispatch(struct run *r)
{
	int cap = r->c->max_concurrency;
	if (r->dispatching || r->interrupted)
		return;
	r->dispatching = true;
	while (r->n_started < r->n_arrived && (cap <= 0 || r->in_flight < cap))
		start_request(r, r->n_started++);
	r->dispatching = false;
}

static double next_gap_s(struct run *r)
{
	double rate = r->c->request_rate;
	if (!(rate > 0) || !isfinite(rate))
		return 0;
	if (r->c->arrival == BENCH_ARRIVAL_CONSTANT)
		return 1.0 / rate;
	double b = r->c->burstiness;
	if (b > 0 && b != 1.0)
		return bench_rng_gamma(&r->rng, b, 1.0 / rate);
	return bench_rng_exp(&r->rng, rate);
}

static void on_arrival(uv_timer_t *t)
{
	struct run *r = t->data;
	double now = since_begin_s(r, clock_now_ns());
	while (r->n_arrived < r->w->n && r->next_arrival_s <= now) {
		r->n_arrived++;
		r->next_arrival_s += next_gap_s(r);
	}
	if (r->n_arrived < r->w->n) {
		double ms = ceil((r->next_arrival_s - now) * 1e3);
		uv_timer_start(&r->arrival_timer, on_arrival, ms > 0 ? (uint64_t)ms : 0, 0);
	}
	dispatch(r); /* may finish the run (a failed start) and close the timers */
}

/* Ctrl-C: what was not sent stays unsent, what is in flight is cancelled, and
 * the run ends with the results so far. */
static void on_sigint(uv_signal_t *h, int signum)
{
	(void)signum;
	struct run *r = h->data;
	if (r->interrupted)
		return;
	r->interrupted = true;
	int unsent = r->w->n - r->n_started;
	fprintf(stderr, "%saorta bench: interrupted: cancelling %d in flight, %d not sent\n",
	        r->progress_on ? "\r\033[K" : "", r->in_flight, unsent);
	uv_timer_stop(&r->arrival_timer);
	for (int i = r->n_started; i < r->w->n; i++) {
		r->results[i].err = BENCH_E_NOT_SENT;
		r->results[i].ttft_s = -1;
	}
	r->n_started = r->n_arrived = r->w->n;
	r->n_done += unsent;
	r->n_failed += unsent;
	if (r->in_flight)
		bench_pool_cancel(&r->pool, BENCH_E_CANCELLED); /* the last on_done ends the run */
	else {
		r->t_last_end_ns = clock_now_ns();
		close_timers(r);
		bench_pool_close_idle(&r->pool);
	}
}

static void on_progress(uv_timer_t *t)
{
	struct run *r = t->data;
	fprintf(stderr, "\r\033[K  %d/%d done, %d failed, %d in flight, %.1f s", r->n_done, r->w->n,
	        r->n_failed, r->in_flight, since_begin_s(r, clock_now_ns()));
	fflush(stderr);
}

int bench_run(const struct bench_config *c, const struct bench_workload *w,
              struct bench_result *results, double *duration_s, struct diag *d)
{
	struct run *r = calloc(1, sizeof *r);
	if (!r)
		return diag_set(d, ERR_NOMEM, "out of memory");
	r->c = c;
	r->w = w;
	r->results = results;
	r->rng.s = c->seed ^ 0xa77a1ULL; /* arrivals: a stream apart from the prompts' */
	memset(results, 0, (size_t)w->n * sizeof *results);
	int rc = parse_base_url(r, c->base_url, d);
	if (!rc && w->n < 1)
		rc = diag_set(d, ERR_INVAL, "empty workload");
	if (!rc && !(r->reqs = calloc((size_t)w->n, sizeof *r->reqs)))
		rc = diag_set(d, ERR_NOMEM, "out of memory");
	if (!rc && uv_loop_init(&r->loop))
		rc = diag_set(d, ERR_IO, "uv_loop_init failed");
	if (rc) {
		free(r->reqs);
		free(r);
		return rc;
	}
	bench_pool_init(&r->pool, &r->loop, (const struct sockaddr *)&r->addr, c->keep_alive);
	uv_timer_init(&r->loop, &r->arrival_timer);
	uv_timer_init(&r->loop, &r->progress_timer);
	r->arrival_timer.data = r->progress_timer.data = r;
	if (c->handle_sigint && uv_signal_init(&r->loop, &r->sigint) == 0) {
		r->sigint.data = r;
		r->has_sigint = uv_signal_start(&r->sigint, on_sigint, SIGINT) == 0;
		if (!r->has_sigint)
			uv_close((uv_handle_t *)&r->sigint, NULL);
	}
	r->progress_on = c->progress && isatty(STDERR_FILENO);
	r->t_begin_ns = clock_now_ns();
	if (r->progress_on)
		uv_timer_start(&r->progress_timer, on_progress, 250, 250);
	on_arrival(&r->arrival_timer);
	uv_run(&r->loop, UV_RUN_DEFAULT);
	if (r->progress_on)
		fprintf(stderr, "\r\033[K");
	if (r->first_err[0])
		fprintf(stderr, "aorta bench: first failure: %s\n", r->first_err);
	int close_rc = uv_loop_close(&r->loop);
	*duration_s = since_begin_s(r, r->t_last_end_ns);
	free(r->reqs);
	free(r);
	return close_rc ? diag_set(d, ERR_INTERNAL, "handles left open after the run") : 0;
}
