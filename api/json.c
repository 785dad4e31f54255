/* api/json.c — the JSON layer under the request parsers and renderers: a
 * pre-scan of raw bodies (UTF-8, NUL escapes, nesting depth) before cJSON
 * sees them, member lookup with duplicate detection, typed conversions that
 * name the field on error, and JSON string / number writers that always emit
 * valid JSON. Tests: tests/api/test_api_parse.c, tests/api/test_api_render.c.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "common/checked.h"
#include "common/err.h"
#include "common/utf8.h"

static int vbad(struct api__jp *p, int code, const char *param, const char *fmt, va_list ap)
{
	struct api_error *e = p->err;
	if (!e)
		return code;
	e->status = 400;
	e->type = "invalid_request_error";
	e->code = NULL;
	e->retry_after_s = 0;
	snprintf(e->param, sizeof e->param, "%s", param ? param : "");
	vsnprintf(e->message, sizeof e->message, fmt, ap);
	return code;
}

int api__bad(struct api__jp *p, const char *param, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = vbad(p, ERR_INVAL, param, fmt, ap);
	va_end(ap);
	return rc;
}

int api__bad_code(struct api__jp *p, int err, const char *param, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int rc = vbad(p, err, param, fmt, ap);
	va_end(ap);
	return rc;
}

/* An integer literal at s[0..n) (no fraction or exponent) in int64 range. */
static bool int_literal(const char *s, size_t n, int64_t *out)
{
	size_t k = s[0] == '-' ? 1 : 0, d = k;
	while (d < n && s[d] >= '0' && s[d] <= '9')
		d++;
	if (d == k || d - k > 19 || (d < n && (s[d] == '.' || s[d] == 'e' || s[d] == 'E')))
		return false;
	char tmp[24];
	memcpy(tmp, s, d);
	tmp[d] = '\0';
	errno = 0;
	long long v = strtoll(tmp, NULL, 10);
	if (errno)
		return false;
	*out = (int64_t)v;
	return true;
}

int api__prescan(struct api__jp *jp, const char *body, size_t len, int max_depth)
{
	struct api__jp p = {.err = jp->err};
	const unsigned char *u = (const unsigned char *)body;
	bool in_str = false;
	int depth = 0;
	size_t i = 0, str_at = 0;
	bool seed_key = false, seed_value = false; /* a top-level "seed" key; its value next */
	jp->has_seed_text = false;
	while (i < len) {
		unsigned char c = u[i];
		if (c == 0)
			return api__bad_code(&p, ERR_FORMAT, NULL,
					     "invalid JSON: NUL byte at offset %zu", i);
		if (c >= 0x80) {
			size_t k = utf8_len(body + i, len - i);
			if (!k)
				return api__bad_code(&p, ERR_FORMAT, NULL,
						     "request body is not valid UTF-8 (offset %zu)",
						     i);
			i += k;
			continue;
		}
		if (in_str) {
			if (c < 0x20) /* RFC 8259: escaped, never raw, in a string */
				return api__bad_code(&p, ERR_FORMAT, NULL,
						     "invalid JSON: unescaped control character "
						     "0x%02x in a string (offset %zu)",
						     c, i);
			if (c == '"') {
				in_str = false;
				seed_key = depth == 1 && i - str_at == 5 &&
					   !memcmp(body + str_at + 1, "seed", 4);
			} else if (c == '\\' && i + 1 < len) {
				/* cJSON would cut the string at an escaped NUL; refuse it
				 * rather than act on a silently shortened value. */
				if (u[i + 1] == 'u' && i + 5 < len && !memcmp(body + i + 2, "0000", 4))
					return api__bad_code(&p, ERR_FORMAT, NULL,
							     "strings must not contain \\u0000");
				i += 2;
				continue;
			}
		} else if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
			/* whitespace keeps the key / value state */
		} else if (c == ':' && depth == 1 && seed_key) {
			seed_key = false;
			seed_value = true;
		} else if (seed_value) {
			seed_value = false;
			if ((c == '-' || (c >= '0' && c <= '9')) &&
			    int_literal(body + i, len - i, &jp->seed_text))
				jp->has_seed_text = true;
			continue; /* look at c again as a token */
		} else if (c == '"') {
			in_str = true;
			str_at = i;
			seed_key = false;
		} else if (c == '{' || c == '[') {
			if (++depth > max_depth)
				return api__bad_code(&p, ERR_FORMAT, NULL,
						     "JSON nested deeper than %d levels",
						     max_depth);
		} else if (c == '}' || c == ']') {
			depth--;
		}
		i++;
	}
	return 0;
}

int api__parse_root(struct api__jp *jp, const char *body, size_t len, cJSON **root)
{
	const struct api_limits *lim = jp->lim;
	struct api_error *err = jp->err;
	struct api__jp p = {.lim = lim, .err = err};
	*root = NULL;
	if (!body && len)
		return api__bad_code(&p, ERR_INVAL, NULL, "no request body");
	int rc = api__prescan(jp, body, len, lim->max_depth);
	if (rc)
		return rc;
	/* cJSON wants a NUL-terminated buffer it may read one byte past. */
	size_t n;
	if (ck_add(len, 1, &n))
		return api__bad_code(&p, ERR_TOO_LARGE, NULL, "request body too large");
	char *copy = malloc(n);
	if (!copy)
		return api_error_from_err(err, ERR_NOMEM, NULL, "out of memory parsing the body");
	if (len)
		memcpy(copy, body, len);
	copy[len] = '\0';
	const char *end = NULL;
	cJSON *j = cJSON_ParseWithOpts(copy, &end, 1);
	size_t at = end ? (size_t)(end - copy) : 0;
	free(copy);
	if (!j) {
		if (len == 0)
			return api__bad_code(&p, ERR_FORMAT, NULL,
					     "invalid JSON: the request body is empty");
		return api__bad_code(&p, ERR_FORMAT, NULL, "invalid JSON near byte %zu", at);
	}
	if (!cJSON_IsObject(j)) {
		cJSON_Delete(j);
		return api__bad_code(&p, ERR_FORMAT, NULL,
				     "the request body must be a JSON object");
	}
	*root = j;
	return 0;
}

int api__member(struct api__jp *p, const cJSON *obj, const char *key, const char *param,
		const cJSON **item)
{
	const cJSON *found = NULL;
	*item = NULL;
	for (const cJSON *c = obj->child; c; c = c->next) {
		if (!c->string || strcmp(c->string, key))
			continue;
		if (found)
			return api__bad(p, param, "duplicate field '%s'", param);
		found = c;
	}
	if (found && !cJSON_IsNull(found))
		*item = found;
	return 0;
}

int api__to_bool(struct api__jp *p, const cJSON *it, const char *param, bool *out)
{
	if (!cJSON_IsBool(it))
		return api__bad(p, param, "'%s' must be a boolean", param);
	*out = cJSON_IsTrue(it);
	return 0;
}

int api__to_double(struct api__jp *p, const cJSON *it, const char *param, double *out)
{
	if (!cJSON_IsNumber(it))
		return api__bad(p, param, "'%s' must be a number", param);
	if (!isfinite(it->valuedouble))
		return api__bad_code(p, ERR_RANGE, param, "'%s' must be a finite number", param);
	*out = it->valuedouble;
	return 0;
}

int api__to_int(struct api__jp *p, const cJSON *it, const char *param, int64_t lo, int64_t hi,
		int64_t *out)
{
	if (!cJSON_IsNumber(it))
		return api__bad(p, param, "'%s' must be an integer", param);
	double v = it->valuedouble;
	if (!isfinite(v) || v != floor(v))
		return api__bad(p, param, "'%s' must be an integer", param);
	/* Compare as doubles first: converting an out-of-range double to
	 * int64_t is undefined. 2^63 is exact in a double. */
	if (v < (double)lo || v > (double)hi || v >= 9223372036854775808.0)
		return api__bad_code(p, ERR_RANGE, param, "'%s' must be between %lld and %lld, got %.17g",
				     param, (long long)lo, (long long)hi, v);
	int64_t iv = (int64_t)v;
	if (iv < lo || iv > hi)
		return api__bad_code(p, ERR_RANGE, param, "'%s' must be between %lld and %lld, got %.17g",
				     param, (long long)lo, (long long)hi, v);
	*out = iv;
	return 0;
}

int api__to_string(struct api__jp *p, const cJSON *it, const char *param, char **out,
		   size_t *len)
{
	if (!cJSON_IsString(it) || !it->valuestring)
		return api__bad(p, param, "'%s' must be a string", param);
	size_t n = strlen(it->valuestring);
	char *s = arena_strndup(p->a, it->valuestring, n);
	if (!s)
		return api_error_from_err(p->err, ERR_NOMEM, NULL, "out of memory");
	*out = s;
	if (len)
		*len = n;
	return 0;
}

/* ---- writers ------------------------------------------------------------ */

size_t api_json_string_chars(const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t n = 0;
	for (size_t i = 0; i < len; n++) {
		size_t k = u[i] < 0x80 ? 1 : utf8_len(s + i, len - i);
		i += k ? k : 1;
	}
	return n;
}

int api_json_string(struct buf *out, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *u = (const unsigned char *)s;
	/* Worst case 6 bytes per input byte, plus quotes. */
	size_t need;
	if (ck_mul(len, 6, &need) || ck_add(need, 2, &need))
		return ERR_OVERFLOW;
	int rc = buf_reserve(out, need);
	if (rc)
		return rc;
	char *w = out->data + out->len;
	*w++ = '"';
	size_t i = 0;
	while (i < len) {
		unsigned char c = u[i];
		if (c >= 0x80) {
			size_t k = utf8_len(s + i, len - i);
			if (k) {
				memcpy(w, u + i, k);
				w += k;
				i += k;
			} else {
				/* U+FFFD for each invalid byte. */
				memcpy(w, "\xEF\xBF\xBD", 3);
				w += 3;
				i++;
			}
			continue;
		}
		i++;
		switch (c) {
		case '"':
			*w++ = '\\';
			*w++ = '"';
			break;
		case '\\':
			*w++ = '\\';
			*w++ = '\\';
			break;
		case '\n':
			*w++ = '\\';
			*w++ = 'n';
			break;
		case '\r':
			*w++ = '\\';
			*w++ = 'r';
			break;
		case '\t':
			*w++ = '\\';
			*w++ = 't';
			break;
		case '\b':
			*w++ = '\\';
			*w++ = 'b';
			break;
		case '\f':
			*w++ = '\\';
			*w++ = 'f';
			break;
		default:
			if (c < 0x20) {
				memcpy(w, "\\u00", 4);
				w[4] = hex[c >> 4];
				w[5] = hex[c & 15];
				w += 6;
			} else {
				*w++ = (char)c;
			}
		}
	}
	*w++ = '"';
	out->len = (size_t)(w - out->data);
	out->data[out->len] = '\0';
	return 0;
}

int api__json_double(struct buf *out, double v)
{
	if (!isfinite(v))
		return buf_append_str(out, "null");
	char tmp[40];
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(tmp, sizeof tmp, "%.*g", prec, v);
		if (strtod(tmp, NULL) == v)
			break;
	}
	return buf_append_str(out, tmp);
}

int api__json_float(struct buf *out, float v)
{
	if (!isfinite(v))
		return buf_append_str(out, "null");
	char tmp[40];
	for (int prec = 1; prec <= 9; prec++) {
		snprintf(tmp, sizeof tmp, "%.*g", prec, (double)v);
		if (strtof(tmp, NULL) == v)
			break;
	}
	return buf_append_str(out, tmp);
}
