/* server/srv.c — `aorta serve`'s lifecycle: create the server state, listen
 * (server/routes.c answers), load the model on a libuv worker
 * (server/load.c) and mark ready; the watchdog that /health reads; SIGINT and
 * SIGTERM, the graceful drain and the shutdown order (the engine thread is
 * joined before the wake handle closes). Tested end to end in tests/e2e/.
 */
#include "srv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "api/metrics_text.h"
#include "batching/engine_thread.h"
#include "common/clock.h"
#include "common/log.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/sample/sampler.h"
#include "engine/tok/tokenizer.h"

#define WATCHDOG_MS 1000

static void close_all(struct srv *s);

/* ---- loading ------------------------------------------------------------------------ */

static void on_load_work(uv_work_t *w)
{
	load_engine(w->data);
}

static void load_done(uv_work_t *w, int status)
{
	struct srv *s = w->data;
	s->loading = false;
	if (s->draining && !s->load_error[0]) {
		log_info("serve", "shut down while loading");
		close_all(s);
		return;
	}
	if (status || s->load_error[0]) {
		if (!s->load_error[0])
			snprintf(s->load_error, sizeof s->load_error, "model load failed");
		log_error("serve", "%s", s->load_error);
		s->exit_code = 1;
		uv_stop(s->loop); /* a server that cannot serve its model exits non-zero */
		return;
	}
	if (load_finish(s)) {
		s->exit_code = 1;
		uv_stop(s->loop);
		return;
	}
	s->ready = true;
	s->last_progress = 0;
	log_info("serve", "ready: serving %s on %s:%d", s->model_name, s->cfg.host,
		 http_server_port(s->http));
}

/* ---- watchdog, signals and drain ---------------------------------------------------- */

static void on_watchdog(uv_timer_t *t)
{
	struct srv *s = t->data;
	if (!s->bat)
		return;
	struct bat_stats st;
	bat_stats(s->bat, &st);
	bool busy = st.n_running + st.n_waiting > 0;
	if (!busy || st.steps != s->last_steps) {
		s->last_steps = st.steps;
		s->last_progress = busy ? clock_now_s() : 0;
	} else if (s->last_progress == 0) {
		s->last_progress = clock_now_s();
	}
}

static void close_all(struct srv *s)
{
	session_abort_all(s);
	if (s->http) {
		http_server_destroy(s->http);
		s->http = NULL;
	}
	/* the batcher thread may still wake the loop (uv_async_send on a closed
	 * handle aborts): the handle stays open, out of the loop's count, until
	 * srv_run has stopped that thread */
	session_wake_unref(s);
	uv_close((uv_handle_t *)&s->sigint, NULL);
	uv_close((uv_handle_t *)&s->sigterm, NULL);
	uv_close((uv_handle_t *)&s->drain_timer, NULL);
	uv_close((uv_handle_t *)&s->watchdog, NULL);
}

static void on_drain_tick(uv_timer_t *t)
{
	struct srv *s = t->data;
	bool idle = session_count(s) == 0 && http_server_active(s->http) == 0;
	if (!idle && clock_now_s() < s->drain_deadline)
		return;
	if (!idle)
		log_warn("serve", "shutdown timeout: cancelling %d requests", session_count(s));
	uv_timer_stop(t);
	if (s->loading)
		return; /* load_done stops the loop */
	close_all(s);
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct srv *s = h->data;
	if (s->draining) {
		log_warn("serve", "second signal: exiting now");
		s->drain_deadline = 0;
		on_drain_tick(&s->drain_timer);
		return;
	}
	log_info("serve", "%s: draining (up to %d s for %d in-flight requests)",
		 signum == SIGINT ? "SIGINT" : "SIGTERM", s->cfg.shutdown_timeout, session_count(s));
	s->draining = true;
	/* keep accepting: new requests get a clear 503 rather than a refused
	 * connection, while /health tells the load balancer to stop sending */
	s->drain_deadline = clock_now_s() + s->cfg.shutdown_timeout;
	uv_timer_start(&s->drain_timer, on_drain_tick, 0, 50);
}

/* ---- run --------------------------------------------------------------------------- */

static void srv_free(struct srv *s)
{
	bat_destroy(s->bat);
	engine_destroy(s->engine);
	tok_destroy(s->tok);
	model_destroy(s->model);
	histogram_deinit(&s->m.ttft);
	histogram_deinit(&s->m.itl);
	histogram_deinit(&s->m.e2e);
	histogram_deinit(&s->m.queue);
	free(s->template_text);
	free(s);
}

/* 64 random bits for this process's response ids (getrandom; the clock and
 * pid mixed if the kernel refuses, so two instances still differ). */
static uint64_t id_instance(void)
{
	uint64_t v = 0;
	if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v && v)
		return v;
	v = (uint64_t)(clock_now_s() * 1e9) ^ ((uint64_t)getpid() << 32);
	v ^= v >> 33;
	v *= 0xff51afd7ed558ccdull;
	v ^= v >> 33;
	return v;
}

static struct srv *srv_new(const struct srv_config *cfg)
{
	struct srv *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->cfg = *cfg;
	s->created = clock_unix_s();
	s->id_instance = id_instance();
	s->next_bat_id = 1;
	api_limits_default(&s->limits);
	/* the engine's own limits, so that a request past them gets the API's
	 * 400 naming the field rather than the engine's later one */
	if (s->limits.max_stop > SAMPLER_MAX_STOP)
		s->limits.max_stop = SAMPLER_MAX_STOP;
	if (s->limits.max_stop_len > SAMPLER_MAX_STOP_BYTES)
		s->limits.max_stop_len = SAMPLER_MAX_STOP_BYTES;
	/* vLLM's default: the --model argument as given */
	const char *name = cfg->served_model_name ? cfg->served_model_name : cfg->model;
	snprintf(s->model_name, sizeof s->model_name, "%s", name);
	size_t nb;
	const double *b = api_metrics_buckets_ttft(&nb);
	int rc = histogram_init(&s->m.ttft, b, nb);
	b = api_metrics_buckets_itl(&nb);
	rc |= histogram_init(&s->m.itl, b, nb);
	b = api_metrics_buckets_request(&nb);
	rc |= histogram_init(&s->m.e2e, b, nb);
	rc |= histogram_init(&s->m.queue, b, nb);
	if (rc) {
		fprintf(stderr, "aorta serve: out of memory\n");
		srv_free(s);
		return NULL;
	}
	if (load_template_file(s)) {
		srv_free(s);
		return NULL;
	}
	return s;
}

int srv_run(const struct srv_config *cfg)
{
	struct srv *s = srv_new(cfg);
	if (!s)
		return 1;
	uv_loop_t loop;
	uv_loop_init(&loop);
	s->loop = &loop;
	/* the transport's own answers (413, and 500 for a handler that did not
	 * answer): api/ renders them, http.c only sends them */
	struct buf too_large, internal;
	buf_init(&too_large);
	buf_init(&internal);
	struct api_error e;
	api_error_too_large(&e, cfg->max_request_bytes);
	api_render_error(&too_large, &e);
	api_error_internal(&e);
	api_render_error(&internal, &e);
	struct http_opts ho = {
		.host = cfg->host,
		.port = cfg->port,
		.max_body_bytes = cfg->max_request_bytes,
		.max_connections = cfg->max_connections,
		.max_connections_per_ip = cfg->max_connections_per_ip,
		.connection_timeout_s = cfg->connection_timeout,
		.too_large = { "application/json", too_large.data, too_large.len },
		.internal_error = { "application/json", internal.data, internal.len },
	};
	struct http_handler hh;
	routes_handler(s, &hh);
	char err[256];
	int rc = http_server_create(&loop, &ho, &hh, &s->http, err, sizeof err);
	buf_deinit(&too_large);
	buf_deinit(&internal);
	if (rc) {
		fprintf(stderr, "aorta serve: %s\n", err);
		uv_loop_close(&loop);
		srv_free(s);
		return 1;
	}
	log_info("serve", "listening on %s:%d; loading %s", cfg->host, http_server_port(s->http),
		 cfg->model);
	/* tests and scripts read the bound port from this line when --port 0 */
	if (cfg->port == 0) {
		fprintf(stdout, "aorta: listening on port %d\n", http_server_port(s->http));
		fflush(stdout);
	}

	session_wake_init(s);
	uv_signal_init(&loop, &s->sigint);
	uv_signal_init(&loop, &s->sigterm);
	s->sigint.data = s->sigterm.data = s;
	uv_signal_start(&s->sigint, on_signal, SIGINT);
	uv_signal_start(&s->sigterm, on_signal, SIGTERM);
	uv_timer_init(&loop, &s->drain_timer);
	s->drain_timer.data = s;
	uv_timer_init(&loop, &s->watchdog);
	s->watchdog.data = s;
	uv_timer_start(&s->watchdog, on_watchdog, WATCHDOG_MS, WATCHDOG_MS);

	s->loading = true;
	s->load_work.data = s;
	uv_queue_work(&loop, &s->load_work, on_load_work, load_done);

	uv_run(&loop, UV_RUN_DEFAULT);
	if (s->exit_code) {
		/* stopped early (load failure): close what is still open */
		if (s->http)
			close_all(s);
		uv_run(&loop, UV_RUN_DEFAULT);
	}
	bat_destroy(s->bat); /* joins the engine thread: nothing wakes the loop after it */
	s->bat = NULL;
	session_wake_close(s);
	uv_run(&loop, UV_RUN_DEFAULT);
	rc = uv_loop_close(&loop);
	if (rc)
		log_warn("serve", "event loop closed with handles open: %s", uv_strerror(rc));
	int code = s->exit_code;
	srv_free(s);
	log_info("serve", "stopped (exit %d)", code);
	return code;
}
