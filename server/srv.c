/* server/srv.c — `aorta serve`: start-up, routing, auth, the small endpoints
 * (/health, /metrics, /v1/models, /tokenize, /detokenize), signals and
 * graceful drain. Generation endpoints live in server/gen.c. Tested end to
 * end over loopback in tests/e2e/.
 */
#include "srv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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
#define STUCK_AFTER_S 30.0 /* work pending and no engine step for this long */

/* ---- responses ------------------------------------------------------------ */

static void add_cors(struct srv *s, struct http_req *r, struct http_header *h, int *n)
{
	const char *allowed = s->cfg.allowed_origins;
	const char *origin = http_req_header(r, "Origin");
	if (!allowed || !origin)
		return;
	if (strcmp(allowed, "*") == 0) {
		h[(*n)++] = (struct http_header){ "Access-Control-Allow-Origin", "*" };
		return;
	}
	/* comma-separated exact origins */
	size_t olen = strlen(origin);
	for (const char *p = allowed; *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		while (len && *p == ' ') {
			p++;
			len--;
		}
		while (len && p[len - 1] == ' ')
			len--;
		if (len == olen && strncmp(p, origin, len) == 0) {
			h[(*n)++] = (struct http_header){ "Access-Control-Allow-Origin", origin };
			h[(*n)++] = (struct http_header){ "Vary", "Origin" };
			return;
		}
		if (!end)
			break;
		p = end + 1;
	}
}

void srv_respond_json(struct srv *s, struct http_req *r, int status, const struct buf *body)
{
	struct http_header h[4];
	int n = 0;
	add_cors(s, r, h, &n);
	http_respond(r, status, "application/json", body->data ? body->data : "", body->len, h, n);
}

void srv_respond_error(struct srv *s, struct http_req *r, const struct api_error *e)
{
	struct buf b;
	buf_init(&b);
	api_render_error(&b, e);
	struct http_header h[4];
	int n = 0;
	char retry[16];
	if (e->retry_after_s > 0) {
		snprintf(retry, sizeof retry, "%d", e->retry_after_s);
		h[n++] = (struct http_header){ "Retry-After", retry };
	}
	add_cors(s, r, h, &n);
	http_respond(r, e->status, "application/json", b.data ? b.data : "", b.len, h, n);
	buf_deinit(&b);
}

/* ---- small endpoints ---------------------------------------------------------- */

static bool engine_stuck(const struct srv *s)
{
	return s->broken || (s->last_progress > 0 && clock_now_s() - s->last_progress > STUCK_AFTER_S);
}

static void handle_health(struct srv *s, struct http_req *r)
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

static void handle_models(struct srv *s, struct http_req *r)
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

static void handle_metrics(struct srv *s, struct http_req *r)
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
	struct http_header h[4];
	int n = 0;
	add_cors(s, r, h, &n);
	http_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.data ? b.data : "", b.len,
		     h, n);
	buf_deinit(&lb);
	buf_deinit(&b);
}

static void handle_tokenize(struct srv *s, struct http_req *r)
{
	size_t len;
	const char *body = http_req_body(r, &len);
	struct api_tokenize_req q;
	struct api_error e;
	if (api_parse_tokenize(body, len, &s->limits, &q, &e)) {
		srv_respond_error(s, r, &e);
		return;
	}
	if (q.model && strcmp(q.model, s->model_name) != 0) {
		api_error_model_not_found(&e, q.model);
		srv_respond_error(s, r, &e);
		api_tokenize_req_free(&q);
		return;
	}
	struct buf text;
	buf_init(&text);
	const char *src = q.prompt;
	size_t src_len = q.prompt_len;
	unsigned flags = q.add_special_tokens ? TOK_ADD_SPECIAL : 0;
	flags |= TOK_PARSE_SPECIAL;
	if (q.is_chat) {
		bool has_bos = false;
		if (api_chat_render(&s->tmpl, q.msgs, q.n_msgs, q.add_generation_prompt, &text,
				    &has_bos, &e)) {
			srv_respond_error(s, r, &e);
			goto out;
		}
		if (has_bos)
			flags &= ~(unsigned)TOK_ADD_SPECIAL;
		src = text.data ? text.data : "";
		src_len = text.len;
	}
	int32_t *ids = NULL;
	size_t n = 0;
	int rc = tok_encode(s->tok, src, src_len, flags, &ids, &n);
	if (rc) {
		api_error_from_err(&e, rc, "prompt", "cannot tokenize the input: %s", err_str(rc));
		srv_respond_error(s, r, &e);
	} else {
		/* the vocabulary pieces ("Ġhello"), as vLLM's convert_ids_to_tokens */
		const char **strs = q.return_token_strs ? calloc(n + 1, sizeof *strs) : NULL;
		size_t *lens = q.return_token_strs ? calloc(n + 1, sizeof *lens) : NULL;
		if (q.return_token_strs && (!strs || !lens)) {
			api_error_from_err(&e, ERR_NOMEM, NULL, "out of memory");
			srv_respond_error(s, r, &e);
		} else {
			for (size_t i = 0; strs && i < n; i++)
				strs[i] = tok_token_text(s->tok, ids[i], &lens[i]);
			struct buf b;
			buf_init(&b);
			api_render_tokenize(&b, ids, n, s->max_model_len, strs, lens);
			srv_respond_json(s, r, 200, &b);
			buf_deinit(&b);
		}
		free(strs);
		free(lens);
	}
	free(ids);
out:
	buf_deinit(&text);
	api_tokenize_req_free(&q);
}

static void handle_detokenize(struct srv *s, struct http_req *r)
{
	size_t len;
	const char *body = http_req_body(r, &len);
	struct api_detokenize_req q;
	struct api_error e;
	if (api_parse_detokenize(body, len, &s->limits, &q, &e)) {
		srv_respond_error(s, r, &e);
		return;
	}
	if (q.model && strcmp(q.model, s->model_name) != 0) {
		api_error_model_not_found(&e, q.model);
		srv_respond_error(s, r, &e);
		api_detokenize_req_free(&q);
		return;
	}
	struct buf text;
	buf_init(&text);
	int rc = tok_decode(s->tok, q.tokens, q.n_tokens, 0, &text);
	if (rc) {
		api_error_from_err(&e, rc, "tokens", "cannot detokenize: %s (vocabulary size %d)",
				   err_str(rc), (int)tok_vocab_size(s->tok));
		srv_respond_error(s, r, &e);
	} else {
		struct buf b;
		buf_init(&b);
		api_render_detokenize(&b, text.data ? text.data : "", text.len);
		srv_respond_json(s, r, 200, &b);
		buf_deinit(&b);
	}
	buf_deinit(&text);
	api_detokenize_req_free(&q);
}

/* ---- routing ------------------------------------------------------------------- */

enum route_flags {
	R_PUBLIC = 1,	  /* no API key needed */
	R_NEEDS_MODEL = 2 /* 503 until the model is loaded, and while draining */
};

struct route {
	const char *path;
	const char *method;
	int flags;
	void (*fn)(struct srv *s, struct http_req *r);
};

static const struct route routes[] = {
	{ "/health", "GET", R_PUBLIC, handle_health },
	{ "/metrics", "GET", 0, handle_metrics },
	{ "/v1/models", "GET", R_NEEDS_MODEL, handle_models },
	{ "/v1/completions", "POST", R_NEEDS_MODEL, gen_handle_completion },
	{ "/v1/chat/completions", "POST", R_NEEDS_MODEL, gen_handle_chat },
	{ "/tokenize", "POST", R_NEEDS_MODEL, handle_tokenize },
	{ "/detokenize", "POST", R_NEEDS_MODEL, handle_detokenize },
};

#define N_ROUTES (sizeof routes / sizeof routes[0])

/* Constant-time comparison of the Bearer token with the key. */
static bool auth_ok(const struct srv *s, struct http_req *r)
{
	const char *key = s->cfg.api_key;
	if (!key || !*key)
		return true;
	const char *h = http_req_header(r, "Authorization");
	if (!h || strncasecmp(h, "Bearer ", 7) != 0)
		return false;
	const char *got = h + 7;
	size_t kl = strlen(key), gl = strlen(got);
	unsigned char diff = (unsigned char)(kl != gl);
	for (size_t i = 0; i < kl; i++)
		diff |= (unsigned char)key[i] ^ (unsigned char)(i < gl ? got[i] : 0);
	return diff == 0;
}

/* Path without the query string, compared exactly. */
static bool path_is(const char *path, const char *want)
{
	size_t n = strlen(want);
	return strncmp(path, want, n) == 0 && (path[n] == '\0' || path[n] == '?');
}

static void on_request(void *ud, struct http_req *r)
{
	struct srv *s = ud;
	const char *path = http_req_path(r);
	const char *method = http_req_method(r);
	struct api_error e;

	if (strcmp(method, "OPTIONS") == 0 && s->cfg.allowed_origins) {
		struct http_header h[6];
		int n = 0;
		add_cors(s, r, h, &n);
		h[n++] = (struct http_header){ "Access-Control-Allow-Methods", "GET, POST, OPTIONS" };
		h[n++] = (struct http_header){ "Access-Control-Allow-Headers",
					       "Authorization, Content-Type" };
		h[n++] = (struct http_header){ "Access-Control-Max-Age", "600" };
		http_respond(r, 204, NULL, "", 0, h, n);
		return;
	}
	const struct route *rt = NULL;
	const char *allow = NULL;
	for (size_t i = 0; i < N_ROUTES; i++) {
		if (!path_is(path, routes[i].path))
			continue;
		allow = routes[i].method;
		if (strcmp(method, routes[i].method) == 0 ||
		    (strcmp(method, "HEAD") == 0 && strcmp(routes[i].method, "GET") == 0)) {
			rt = &routes[i];
			break;
		}
	}
	if (!rt && allow) {
		api_error_method_not_allowed(&e, method);
		struct buf b;
		buf_init(&b);
		api_render_error(&b, &e);
		struct http_header h[4] = { { "Allow", allow } };
		int n = 1;
		add_cors(s, r, h, &n); /* a browser must be able to read this error too */
		http_respond(r, 405, "application/json", b.data, b.len, h, n);
		buf_deinit(&b);
		return;
	}
	if (!rt) {
		api_error_not_found(&e, path);
		srv_respond_error(s, r, &e);
		return;
	}
	if (!(rt->flags & R_PUBLIC) && !auth_ok(s, r)) {
		api_error_unauthorized(&e);
		srv_respond_error(s, r, &e);
		return;
	}
	if (strcmp(rt->method, "POST") == 0) {
		/* JSON bodies only; an absent Content-Type is read as JSON */
		const char *ct = http_req_header(r, "Content-Type");
		if (ct && strncasecmp(ct, "application/json", 16) != 0) {
			api_error_set(&e, ERR_UNSUPPORTED, 415, NULL, NULL, NULL,
				      "Content-Type must be application/json (got '%.60s'); with "
				      "curl, add -H 'Content-Type: application/json'",
				      ct);
			srv_respond_error(s, r, &e);
			return;
		}
	}
	if (rt->flags & R_NEEDS_MODEL) {
		if (s->draining) {
			api_error_unavailable(&e, "the server is shutting down", 0);
			srv_respond_error(s, r, &e);
			return;
		}
		if (!s->ready) {
			api_error_unavailable(&e, s->loading ? "the model is loading" : s->load_error,
					      s->loading ? 5 : 0);
			srv_respond_error(s, r, &e);
			return;
		}
	}
	rt->fn(s, r);
}

static void log_access(struct srv *s, struct http_req *r, bool completed)
{
	(void)s;
	double ms = (clock_now_s() - http_req_start_time(r)) * 1000.0;
	log_info("access", "req=%llu %s %s status=%d time_ms=%.1f%s",
		 (unsigned long long)http_req_id(r), http_req_method(r), http_req_path(r),
		 http_req_status(r), ms, completed ? "" : " client_gone=1");
}

static void on_close(void *ud, struct http_req *r, bool completed)
{
	struct srv *s = ud;
	if (http_req_ctx(r))
		gen_on_close(s, r, completed); /* logs its own access line */
	else
		log_access(s, r, completed);
}

/* ---- loading --------------------------------------------------------------------- */

/* --kv-cache-dtype: auto is F32 on the CPU and the compute dtype on CUDA. */
static enum dtype kv_dtype_for(const char *name, bool cuda, enum dtype compute)
{
	if (!strcmp(name, "f16"))
		return DT_F16;
	if (!strcmp(name, "bf16"))
		return DT_BF16;
	if (!strcmp(name, "f32"))
		return DT_F32;
	return cuda ? compute : DT_F32; /* auto (fp8 is refused or warned about before) */
}

/* --dtype for CUDA: half/float16 F16, bfloat16 BF16, auto as vLLM (BF16
 * models stay BF16, everything else runs in F16). */
static enum dtype compute_dtype_for(const char *name, const struct model *m)
{
	if (!strcmp(name, "bfloat16"))
		return DT_BF16;
	if (!strcmp(name, "half") || !strcmp(name, "float16"))
		return DT_F16;
	return m->cfg.n_layers > 0 && m->w.layers[0].wq.dtype == DT_BF16 ? DT_BF16 : DT_F16;
}

static void load_work(uv_work_t *w)
{
	struct srv *s = w->data;
	struct diag d = { 0 };
	int rc;
	double t0 = clock_now_s();
	if ((rc = model_load(s->cfg.model, &s->model, &d))) {
		snprintf(s->load_error, sizeof s->load_error, "cannot load model %s: %s",
			 s->cfg.model, d.msg[0] ? d.msg : err_str(rc));
		return;
	}
	if ((rc = tok_load_for_model(s->model, &s->tok, &d))) {
		snprintf(s->load_error, sizeof s->load_error, "cannot load the tokenizer: %s",
			 d.msg[0] ? d.msg : err_str(rc));
		return;
	}
	const struct model_config *c = &s->model->cfg;
	s->max_model_len = s->cfg.max_model_len > 0 ? s->cfg.max_model_len : c->max_ctx;
	if (s->max_model_len <= 0)
		s->max_model_len = 2048;
	if (c->max_ctx > 0 && s->max_model_len > c->max_ctx)
		log_warn("serve", "--max-model-len %d is over the model's context %d", s->max_model_len,
			 c->max_ctx);
	const bool cuda = !strcmp(s->cfg.device, "cuda") ||
			  (!strcmp(s->cfg.device, "auto") && engine_cuda_available());
	const enum dtype gdt = compute_dtype_for(s->cfg.dtype, s->model);
	enum dtype kvt = kv_dtype_for(s->cfg.kv_cache_dtype, cuda, gdt);
	if (!strcmp(s->cfg.kv_cache_dtype, "fp8")) {
		if (cuda)
			kvt = DT_F8_E4M3; /* E4M3, scale 1 (vLLM's default without calibration) */
		else
			log_warn("serve", "--kv-cache-dtype fp8 is a CUDA option; the CPU KV cache "
					  "uses f32");
	}
	int n_blocks = s->cfg.num_kv_blocks;
	if (n_blocks <= 0 && !cuda) {
		size_t per = engine_kv_block_bytes(c, s->cfg.block_size, kvt);
		uint64_t nb = per ? s->cfg.kv_cache_memory / per : 0;
		n_blocks = nb > 1000000 ? 1000000 : (int)nb;
	}
	int blocks_per_seq = (s->max_model_len + s->cfg.block_size - 1) / s->cfg.block_size;
	if (!cuda && n_blocks < blocks_per_seq) {
		snprintf(s->load_error, sizeof s->load_error,
			 "the KV cache (%d blocks of %d tokens) cannot hold one sequence of "
			 "--max-model-len %d; raise --kv-cache-memory or lower --max-model-len",
			 n_blocks, s->cfg.block_size, s->max_model_len);
		return;
	}
	struct engine_opts eo = {
		.n_threads = s->cfg.threads,
		.block_size = s->cfg.block_size,
		.n_kv_blocks = n_blocks, /* 0 on CUDA: what --gpu-memory-utilization leaves */
		.kv_dtype = kvt,
		.quantization = !strcmp(s->cfg.quantization, "int8")  ? DT_I8
				: !strcmp(s->cfg.quantization, "fp8") ? DT_F8_E4M3
								      : DT_F32,
		.max_batch_tokens = s->cfg.max_num_batched_tokens,
		.max_seqs = s->cfg.max_num_seqs,
		.max_blocks_per_seq = blocks_per_seq,
		.device = cuda ? ENGINE_DEVICE_CUDA : ENGINE_DEVICE_CPU,
		.gpu_dtype = gdt,
		.gpu_memory_utilization = s->cfg.gpu_memory_utilization,
		.enforce_eager = s->cfg.enforce_eager,
	};
	if ((rc = engine_create(s->model, &eo, &s->engine, &d))) {
		snprintf(s->load_error, sizeof s->load_error, "cannot start the engine: %s",
			 d.msg[0] ? d.msg : err_str(rc));
		return;
	}
	n_blocks = engine_n_kv_blocks(s->engine);
	s->n_kv_blocks = n_blocks;
	log_info("serve", "model %s loaded in %.1f s on the %s engine: %s, %d layers, hidden %d, "
			  "vocab %d; KV cache %d blocks x %d tokens (%s); max model len %d",
		 s->cfg.model, clock_now_s() - t0, engine_backend_name(s->engine),
		 model_arch_name(c->arch), c->n_layers, c->hidden, c->vocab, n_blocks,
		 s->cfg.block_size, dtype_name(kvt), s->max_model_len);
}

static void close_all(struct srv *s);

static void on_wake(void *arg)
{
	uv_async_send(arg);
}

static int read_file(const char *path, char **out)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	struct buf b;
	buf_init(&b);
	char tmp[4096];
	size_t n;
	while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) {
		if (buf_append(&b, tmp, n) || b.len > (16u << 20)) {
			fclose(f);
			buf_deinit(&b);
			return -1;
		}
	}
	fclose(f);
	*out = buf_take(&b, NULL);
	return *out ? 0 : -1;
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
	const struct model_config *c = &s->model->cfg;
	const char *tmpl_text = s->template_text ? s->template_text : c->chat_template;
	size_t bl = 0, el = 0;
	const char *bos = tok_bos(s->tok) >= 0 ? tok_token_text(s->tok, tok_bos(s->tok), &bl) : NULL;
	const char *eos = tok_eos(s->tok) >= 0 ? tok_token_text(s->tok, tok_eos(s->tok), &el) : NULL;
	char bos_s[64] = "", eos_s[64] = "";
	if (bos && bl < sizeof bos_s)
		memcpy(bos_s, bos, bl);
	if (eos && el < sizeof eos_s)
		memcpy(eos_s, eos, el);
	if (api_chat_template_init(&s->tmpl, tmpl_text, model_arch_name(c->arch),
				   bos_s[0] ? bos_s : NULL, eos_s[0] ? eos_s : NULL)) {
		api_chat_template_init(&s->tmpl, tmpl_text, model_arch_name(c->arch), NULL, NULL);
	}
	if (s->tmpl.is_fallback)
		log_warn("serve", "chat template not recognised; using ChatML");
	else
		log_info("serve", "chat template: %s", api_chat_family_name(s->tmpl.family));
	s->limits.n_vocab = c->vocab;

	struct bat_model bm;
	bat_model_engine(&bm, s->engine, engine_vocab(s->engine));
	int32_t eos_ids[MODEL_MAX_EOS];
	int n_eos = 0;
	for (int i = 0; i < c->n_eos_ids && i < MODEL_MAX_EOS; i++)
		eos_ids[n_eos++] = c->eos_ids[i];
	if (n_eos == 0 && tok_eos(s->tok) >= 0)
		eos_ids[n_eos++] = tok_eos(s->tok);
	struct bat_opts bo = {
		.block_size = s->cfg.block_size,
		.n_kv_blocks = s->n_kv_blocks,
		.prefix_caching = s->cfg.enable_prefix_caching,
		.max_num_seqs = s->cfg.max_num_seqs,
		.max_num_batched_tokens = s->cfg.max_num_batched_tokens,
		.max_model_len = s->max_model_len,
		.max_queued_requests = s->cfg.max_queued_requests,
		.server_seed = (uint64_t)s->cfg.seed,
		.eos_ids = eos_ids,
		.n_eos = n_eos,
		.tok = s->tok,
		.wake = on_wake,
		.wake_arg = &s->wake,
	};
	struct diag d = { 0 };
	int rc = bat_create(&bo, &bm, &s->bat, &d);
	if (rc) {
		log_error("serve", "cannot start the batcher: %s", d.msg[0] ? d.msg : err_str(rc));
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
	gen_abort_all(s);
	if (s->http) {
		http_server_destroy(s->http);
		s->http = NULL;
	}
	/* the batcher thread may still wake the loop (uv_async_send on a closed
	 * handle aborts): the handle stays open, out of the loop's count, until
	 * srv_run has stopped that thread */
	uv_unref((uv_handle_t *)&s->wake);
	uv_close((uv_handle_t *)&s->sigint, NULL);
	uv_close((uv_handle_t *)&s->sigterm, NULL);
	uv_close((uv_handle_t *)&s->drain_timer, NULL);
	uv_close((uv_handle_t *)&s->watchdog, NULL);
}

static void on_drain_tick(uv_timer_t *t)
{
	struct srv *s = t->data;
	bool idle = gen_n_sessions(s) == 0 && http_server_active(s->http) == 0;
	if (!idle && clock_now_s() < s->drain_deadline)
		return;
	if (!idle)
		log_warn("serve", "shutdown timeout: cancelling %d requests", gen_n_sessions(s));
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
		 signum == SIGINT ? "SIGINT" : "SIGTERM", s->cfg.shutdown_timeout, gen_n_sessions(s));
	s->draining = true;
	/* keep accepting: new requests get a clear 503 rather than a refused
	 * connection, while /health tells the load balancer to stop sending */
	s->drain_deadline = clock_now_s() + s->cfg.shutdown_timeout;
	uv_timer_start(&s->drain_timer, on_drain_tick, 0, 50);
}

static void on_async(uv_async_t *a)
{
	gen_drain_events(a->data);
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
	if (cfg->chat_template && read_file(cfg->chat_template, &s->template_text)) {
		fprintf(stderr, "aorta serve: cannot read --chat-template %s\n", cfg->chat_template);
		srv_free(s);
		return NULL;
	}
	if (cfg->chat_template) {
		/* asked for by name: serve it or say why not, never a silent
		 * stand-in (the family comes from the text alone) */
		struct api_chat_template t;
		const bool empty = !s->template_text[strspn(s->template_text, " \t\r\n")];
		if (empty || api_chat_template_init(&t, s->template_text, NULL, NULL, NULL) ||
		    t.is_fallback) {
			fprintf(stderr,
				"aorta serve: --chat-template %s: %s; aorta renders the llama3, "
				"llama2, mistral, gemma, gemma2, qwen3 and chatml families (it "
				"has no Jinja interpreter)\n",
				cfg->chat_template,
				empty ? "empty (or not a regular file)"
				      : "not a template of a family aorta renders");
			srv_free(s);
			return NULL;
		}
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
	struct buf too_large;
	buf_init(&too_large);
	struct api_error e;
	api_error_too_large(&e, cfg->max_request_bytes);
	api_render_error(&too_large, &e);
	struct http_opts ho = {
		.host = cfg->host,
		.port = cfg->port,
		.max_body_bytes = cfg->max_request_bytes,
		.max_connections = cfg->max_connections,
		.max_connections_per_ip = cfg->max_connections_per_ip,
		.connection_timeout_s = cfg->connection_timeout,
		.body_too_large_json = too_large.data,
		.body_too_large_len = too_large.len,
	};
	struct http_handler hh = { .ud = s, .on_request = on_request, .on_close = on_close };
	char err[256];
	int rc = http_server_create(&loop, &ho, &hh, &s->http, err, sizeof err);
	buf_deinit(&too_large);
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

	uv_async_init(&loop, &s->wake, on_async);
	s->wake.data = s;
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
	uv_queue_work(&loop, &s->load_work, load_work, load_done);

	uv_run(&loop, UV_RUN_DEFAULT);
	if (s->exit_code) {
		/* stopped early (load failure): close what is still open */
		if (s->http)
			close_all(s);
		uv_run(&loop, UV_RUN_DEFAULT);
	}
	bat_destroy(s->bat); /* joins the engine thread: nothing wakes the loop after it */
	s->bat = NULL;
	uv_close((uv_handle_t *)&s->wake, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	rc = uv_loop_close(&loop);
	if (rc)
		log_warn("serve", "event loop closed with handles open: %s", uv_strerror(rc));
	int code = s->exit_code;
	srv_free(s);
	log_info("serve", "stopped (exit %d)", code);
	return code;
}
