/* server/respond.c — how `aorta serve` answers: JSON bodies, OpenAI error
 * bodies (with Retry-After when the error says so) and plain text, each with
 * the CORS headers --allowed-origins asks for, and the CORS preflight.
 * Owns no state: the status and body come from the caller (api/ decides
 * statuses). Loop thread only. Tested end to end in tests/e2e/.
 */
#include <stdio.h>
#include <string.h>

#include "srv.h"

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

void srv_respond(struct srv *s, struct http_req *r, int status, const char *content_type,
		 const char *body, size_t len)
{
	struct http_header h[4];
	int n = 0;
	add_cors(s, r, h, &n);
	http_respond(r, status, content_type, body, len, h, n);
}

void srv_respond_json(struct srv *s, struct http_req *r, int status, const struct buf *body)
{
	srv_respond(s, r, status, "application/json", body->data ? body->data : "", body->len);
}

void srv_respond_error_with(struct srv *s, struct http_req *r, const struct api_error *e,
			    const struct http_header *extra, int n_extra)
{
	struct buf b;
	buf_init(&b);
	api_render_error(&b, e);
	struct http_header h[8];
	int n = 0;
	for (int i = 0; i < n_extra && i < 4; i++)
		h[n++] = extra[i];
	char retry[16];
	if (e->retry_after_s > 0) {
		snprintf(retry, sizeof retry, "%d", e->retry_after_s);
		h[n++] = (struct http_header){ "Retry-After", retry };
	}
	add_cors(s, r, h, &n); /* a browser must be able to read an error too */
	http_respond(r, e->status, "application/json", b.data ? b.data : "", b.len, h, n);
	buf_deinit(&b);
}

void srv_respond_error(struct srv *s, struct http_req *r, const struct api_error *e)
{
	srv_respond_error_with(s, r, e, NULL, 0);
}

void srv_respond_preflight(struct srv *s, struct http_req *r)
{
	struct http_header h[6];
	int n = 0;
	add_cors(s, r, h, &n);
	h[n++] = (struct http_header){ "Access-Control-Allow-Methods", "GET, POST, OPTIONS" };
	h[n++] = (struct http_header){ "Access-Control-Allow-Headers",
				       "Authorization, Content-Type" };
	h[n++] = (struct http_header){ "Access-Control-Max-Age", "600" };
	http_respond(r, 204, NULL, "", 0, h, n);
}
