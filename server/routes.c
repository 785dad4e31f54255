/* server/routes.c — the front door of `aorta serve`: the route table, CORS
 * preflight, 404/405, the API key (--api-key), the JSON Content-Type check,
 * the 503 while the model loads or the server drains, then the endpoint's
 * handler; and, when a request is over, the access log (the completion
 * sessions log their own, with token counts). Owns only the read-only route
 * table. Loop thread only. Tested end to end in tests/e2e/.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"
#include "common/log.h"
#include "srv.h"

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
	{ "/health", "GET", R_PUBLIC, info_handle_health },
	{ "/metrics", "GET", 0, info_handle_metrics },
	{ "/v1/models", "GET", R_NEEDS_MODEL, info_handle_models },
	{ "/v1/completions", "POST", R_NEEDS_MODEL, completions_handle },
	{ "/v1/chat/completions", "POST", R_NEEDS_MODEL, completions_handle_chat },
	{ "/tokenize", "POST", R_NEEDS_MODEL, tokenize_handle },
	{ "/detokenize", "POST", R_NEEDS_MODEL, tokenize_handle_detokenize },
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
		srv_respond_preflight(s, r);
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
		const struct http_header h[] = { { "Allow", allow } };
		srv_respond_error_with(s, r, &e, h, 1);
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
			api_error_unsupported_media_type(&e, ct);
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
		session_on_close(s, r, completed); /* logs its own access line */
	else
		log_access(s, r, completed);
}

void routes_handler(struct srv *s, struct http_handler *h)
{
	*h = (struct http_handler){ .ud = s, .on_request = on_request, .on_close = on_close };
}
