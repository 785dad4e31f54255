/* server/info.c — the small read-only endpoints of `aorta serve`: GET /health
 * (200 when ready; 503 while loading, draining, broken, or when the watchdog
 * in server/srv.c sees no engine progress), GET /v1/models and GET /metrics
 * (Prometheus text, rendered by api/metrics_text.h). Owns no state: it reads
 * struct srv and the batcher's stats. Loop thread only. Tested end to end in
 * tests/e2e/.
 */
#include <string.h>

#include "api/metrics_text.h"
#include "batching/engine_thread.h"
#include "common/clock.h"
#include "srv.h"

#define STUCK_AFTER_S 30.0 /* work pending and no engine step for this long */

/* The watchdog (server/srv.c) records when the engine last made progress;
 * this judges it. */
static bool engine_stuck(const struct srv *s)
{
	return s->broken || (s->last_progress > 0 && clock_now_s() - s->last_progress > STUCK_AFTER_S);
}

void info_handle_health(struct srv *s, struct http_req *r)
{
	struct api_error e;
	if (s->ready && !s->draining && !engine_stuck(s)) {
		static const struct buf ok = { .data = "{}", .len = 2 };
		srv_respond_json(s, r, 200, &ok);
		return;
	}
	const char *why = s->draining	 ? "the server is shutting down"
			  : s->loading	 ? "the model is loading"
			  : s->broken	 ? "the engine failed"
			  : !s->ready	 ? s->load_error
					 : "the engine thread is not making progress";
	api_error_unavailable(&e, why, s->loading ? 5 : 0);
	srv_respond_error(s, r, &e);
}

void info_handle_models(struct srv *s, struct http_req *r)
{
	struct api_model_info info = { .id = s->model_name, .created = s->created,
				       .max_model_len = s->max_model_len };
	struct buf b;
	buf_init(&b);
	api_render_models(&b, &info, 1);
	srv_respond_json(s, r, 200, &b);
	buf_deinit(&b);
}

static void metrics_hist(struct buf *b, const char *name, const char *help, const char *labels,
			 struct histogram *h)
{
	uint64_t counts[128], count;
	double sum;
	if (h->n_bounds + 1 > sizeof counts / sizeof counts[0])
		return;
	histogram_snapshot(h, counts, &count, &sum);
	api_metrics_histogram(b, name, help, labels, h->bounds, counts, h->n_bounds, sum);
}

void info_handle_metrics(struct srv *s, struct http_req *r)
{
	struct bat_stats st;
	memset(&st, 0, sizeof st);
	if (s->bat)
		bat_stats(s->bat, &st);
	struct buf lb, b;
	buf_init(&lb);
	buf_init(&b);
	const char *keys[] = { "model_name" };
	const char *vals[] = { s->model_name };
	api_metrics_labels(&lb, keys, vals, 1);
	const char *l = lb.data;
	api_metrics_gauge(&b, API_M_REQUESTS_RUNNING, "Requests in the running batch.", l,
			  st.n_running);
	api_metrics_gauge(&b, API_M_REQUESTS_WAITING, "Requests waiting to be scheduled.", l,
			  st.n_waiting);
	api_metrics_gauge(&b, API_M_KV_CACHE_USAGE, "Fraction of KV-cache blocks in use (0-1).", l,
			  st.kv_usage);
	api_metrics_counter(&b, API_M_PROMPT_TOKENS, "Prompt tokens of finished requests.", l,
			    (double)s->m.prompt_tokens);
	api_metrics_counter(&b, API_M_GENERATION_TOKENS, "Generated tokens.", l,
			    (double)s->m.generation_tokens);
	api_metrics_counter(&b, API_M_PREEMPTIONS, "Sequences preempted for KV memory.", l,
			    (double)st.preemptions);
	api_metrics_counter(&b, API_M_PREFIX_QUERIES, "Prompt tokens looked up in the prefix cache.",
			    l, (double)st.prefix_queries);
	api_metrics_counter(&b, API_M_PREFIX_HITS, "Prompt tokens found in the prefix cache.", l,
			    (double)st.prefix_hits);
	/* TTFT, end-to-end and queue time count each prompt of a request, as
	 * vLLM counts each engine request */
	metrics_hist(&b, API_M_TTFT, "Time to first token, per prompt.", l, &s->m.ttft);
	metrics_hist(&b, API_M_ITL, "Time between consecutive tokens of a choice.", l, &s->m.itl);
	metrics_hist(&b, API_M_E2E, "Request latency per prompt, arrival to its last token.", l,
		     &s->m.e2e);
	metrics_hist(&b, API_M_QUEUE_TIME, "Time from submission to first scheduling, per prompt.",
		     l, &s->m.queue);
	/* vLLM's request_success_total{finished_reason}: each choice, as vLLM V1
	 * counts each sequence of an n > 1 request */
	static const enum finish_reason reasons[] = { FINISH_STOP, FINISH_LENGTH, FINISH_ABORT,
						      FINISH_ERROR };
	struct buf rl[4];
	const char *rls[4];
	double rv[4];
	for (int i = 0; i < 4; i++) {
		const char *rk[] = { "model_name", "finished_reason" };
		const char *rvs[] = { s->model_name, finish_reason_str(reasons[i]) };
		buf_init(&rl[i]);
		api_metrics_labels(&rl[i], rk, rvs, 2);
		rls[i] = rl[i].data;
		rv[i] = (double)s->m.finished[reasons[i]];
	}
	api_metrics_counter_series(&b, API_M_REQUEST_SUCCESS, "Finished choices by finish reason.",
				   rls, rv, 4);
	for (int i = 0; i < 4; i++)
		buf_deinit(&rl[i]);
	srv_respond(s, r, 200, "text/plain; version=0.0.4; charset=utf-8", b.data ? b.data : "",
		    b.len);
	buf_deinit(&lb);
	buf_deinit(&b);
}
