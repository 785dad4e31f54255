/* api/errors.c — the one place where ERR_* codes and situations become HTTP
 * statuses: the ERR_* table, the canned errors the server and its transport
 * send (400, 401, 404, 405, 413, 415, 429, 500, 503), the policies for a
 * rejected submission and a failed generation, and the OpenAI error type of
 * each status. The body {"error":{"message","type","param","code"}} is
 * rendered by response.c (api_render_error).
 * Tests: tests/api/test_api_render.c.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "api/api_internal.h"
#include "common/err.h"

int api_status_for_err(int err)
{
	switch (err) {
	case 0:
		return 200;
	case ERR_INVAL:
	case ERR_FORMAT:
	case ERR_RANGE:
	case ERR_OVERFLOW:
	case ERR_UNSUPPORTED:
		return 400;
	case ERR_NOTFOUND:
		return 404;
	case ERR_TOO_LARGE:
		return 413;
	case ERR_FULL:
		return 429;
	case ERR_STATE:
	case ERR_CANCELLED:
	case ERR_NOMEM:
		return 503;
	default: /* IO, INTERNAL, DEVICE, unknown */
		return 500;
	}
}

static const char *type_for_status(int status)
{
	switch (status) {
	case 401:
		return "authentication_error";
	case 404:
		return "not_found_error";
	case 429:
		return "rate_limit_error";
	case 503:
		return "service_unavailable_error";
	default:
		return status >= 500 ? "server_error" : "invalid_request_error";
	}
}

static void vset(struct api_error *e, int status, const char *type, const char *param,
		 const char *code, const char *fmt, va_list ap)
{
	e->status = status;
	e->type = type ? type : type_for_status(status);
	e->code = code;
	e->retry_after_s = 0;
	snprintf(e->param, sizeof e->param, "%s", param ? param : "");
	vsnprintf(e->message, sizeof e->message, fmt, ap);
}

int api_error_set(struct api_error *e, int err, int status, const char *type, const char *param,
		  const char *code, const char *fmt, ...)
{
	if (e) {
		va_list ap;
		va_start(ap, fmt);
		vset(e, status, type, param, code, fmt, ap);
		va_end(ap);
	}
	return err;
}

int api_error_from_err(struct api_error *e, int err, const char *param, const char *fmt, ...)
{
	if (e) {
		va_list ap;
		va_start(ap, fmt);
		vset(e, api_status_for_err(err), NULL, param, NULL, fmt, ap);
		va_end(ap);
	}
	return err;
}

void api_error_unauthorized(struct api_error *e)
{
	api_error_set(e, ERR_INVAL, 401, "authentication_error", NULL, "invalid_api_key",
		      "Missing or invalid API key. Send 'Authorization: Bearer <key>'.");
}

void api_error_not_found(struct api_error *e, const char *path)
{
	api_error_set(e, ERR_NOTFOUND, 404, NULL, NULL, "not_found", "No route for '%.200s'.",
		      path ? path : "");
}

void api_error_model_not_found(struct api_error *e, const char *model)
{
	api_error_set(e, ERR_NOTFOUND, 404, NULL, "model", "model_not_found",
		      "The model '%.200s' does not exist.", model ? model : "");
}

void api_error_method_not_allowed(struct api_error *e, const char *method)
{
	api_error_set(e, ERR_INVAL, 405, "invalid_request_error", NULL, "method_not_allowed",
		      "Method '%.32s' is not allowed for this route.", method ? method : "");
}

void api_error_too_large(struct api_error *e, uint64_t max_bytes)
{
	api_error_set(e, ERR_TOO_LARGE, 413, "invalid_request_error", NULL, "request_too_large",
		      "The request body is larger than the limit of %" PRIu64 " bytes.",
		      max_bytes);
}

void api_error_queue_full(struct api_error *e, int retry_after_s)
{
	api_error_set(e, ERR_FULL, 429, "rate_limit_error", NULL, "rate_limit_exceeded",
		      "The server's request queue is full; retry later.");
	e->retry_after_s = retry_after_s;
}

void api_error_unavailable(struct api_error *e, const char *why, int retry_after_s)
{
	api_error_set(e, ERR_STATE, 503, "service_unavailable_error", NULL, "service_unavailable",
		      "The server is not accepting requests: %.200s.", why ? why : "unavailable");
	e->retry_after_s = retry_after_s;
}

void api_error_unsupported_media_type(struct api_error *e, const char *content_type)
{
	api_error_set(e, ERR_UNSUPPORTED, 415, NULL, NULL, NULL,
		      "Content-Type must be application/json (got '%.60s'); with "
		      "curl, add -H 'Content-Type: application/json'",
		      content_type ? content_type : "");
}

void api_error_internal(struct api_error *e)
{
	api_error_set(e, ERR_INTERNAL, 500, "server_error", NULL, NULL, "internal error");
}

void api_error_echo_logprobs(struct api_error *e)
{
	api_error_set(e, ERR_UNSUPPORTED, 400, NULL, "echo", NULL,
		      "echo together with logprobs (prompt logprobs) is not supported");
}

void api_error_stream_choices(struct api_error *e, int n_choices)
{
	api_error_set(e, ERR_RANGE, 400, NULL, "n", NULL,
		      "a stream carries at most %d choices (prompts x n = %d)", API_MAX_N_HARD,
		      n_choices);
}

static const char *msg_or_code(const char *msg, int err)
{
	return msg && msg[0] ? msg : err_str(err);
}

void api_error_rejected(struct api_error *e, int err, const char *msg)
{
	if (err == ERR_FULL) {
		api_error_queue_full(e, 1);
		return;
	}
	api_error_from_err(e, err, NULL, "%s", msg_or_code(msg, err));
	if (e->status >= 500 && err != ERR_STATE)
		e->status = 400, e->type = "invalid_request_error";
}

void api_error_generation_failed(struct api_error *e, int err, const char *msg)
{
	api_error_from_err(e, err, NULL, "generation failed: %s", msg_or_code(msg, err));
	if (e->status < 500) /* an engine failure is the server's fault */
		e->status = 500, e->type = "server_error";
}

const char *api_error_type(const struct api_error *e)
{
	return e->type ? e->type : type_for_status(e->status);
}
