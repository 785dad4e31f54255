/* api/metrics_text.c — Prometheus text exposition (0.0.4): HELP/TYPE
 * headers, escaping of help text and label values, Go-style float values
 * (+Inf, -Inf, NaN), cumulative histogram buckets. The bucket bounds follow
 * vLLM's so dashboards built for it read the same. Tests:
 * tests/api/test_metrics_text.c.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/metrics_text.h"
#include "common/err.h"

#define TRY(expr)                   \
	do {                        \
		int rc_ = (expr);   \
		if (rc_)            \
			return rc_; \
	} while (0)

static const double ttft[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
			      0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
static const double itl[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
			     0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double request[] = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0, 15.0, 20.0,
				 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

const double *api_metrics_buckets_ttft(size_t *n)
{
	*n = sizeof ttft / sizeof ttft[0];
	return ttft;
}

const double *api_metrics_buckets_itl(size_t *n)
{
	*n = sizeof itl / sizeof itl[0];
	return itl;
}

const double *api_metrics_buckets_request(size_t *n)
{
	*n = sizeof request / sizeof request[0];
	return request;
}

static bool valid_name(const char *s)
{
	if (!s || !*s)
		return false;
	for (const char *p = s; *p; p++) {
		char c = *p;
		bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
		if (!alpha && !(p > s && c >= '0' && c <= '9'))
			return false;
	}
	return true;
}

/* Shortest decimal that reads back as v; Prometheus spellings otherwise. */
static int value(struct buf *o, double v)
{
	if (isnan(v))
		return buf_append_str(o, "NaN");
	if (isinf(v))
		return buf_append_str(o, v > 0 ? "+Inf" : "-Inf");
	char tmp[40];
	if (v == floor(v) && fabs(v) < 9007199254740992.0) /* counts: plain digits, not 3e+01 */
		return buf_printf(o, "%.0f", v);
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(tmp, sizeof tmp, "%.*g", prec, v);
		if (strtod(tmp, NULL) == v)
			break;
	}
	return buf_append_str(o, tmp);
}

/* HELP text escapes \ and newline; label values also escape ". */
static int escaped(struct buf *o, const char *s, bool quote)
{
	for (; *s; s++) {
		if (*s == '\\')
			TRY(buf_append_str(o, "\\\\"));
		else if (*s == '\n')
			TRY(buf_append_str(o, "\\n"));
		else if (quote && *s == '"')
			TRY(buf_append_str(o, "\\\""));
		else
			TRY(buf_append_char(o, *s));
	}
	return 0;
}

int api_metrics_labels(struct buf *out, const char *const *keys, const char *const *values,
		       size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!valid_name(keys[i]) || strchr(keys[i], ':'))
			return ERR_INVAL;
		TRY(buf_printf(out, "%s%s=\"", i ? "," : "", keys[i]));
		TRY(escaped(out, values[i] ? values[i] : "", true));
		TRY(buf_append_char(out, '"'));
	}
	return 0;
}

static int header(struct buf *o, const char *name, const char *help, const char *type)
{
	if (!valid_name(name))
		return ERR_INVAL;
	if (help) {
		TRY(buf_printf(o, "# HELP %s ", name));
		TRY(escaped(o, help, false));
		TRY(buf_append_char(o, '\n'));
	}
	return buf_printf(o, "# TYPE %s %s\n", name, type);
}

/* name{labels,extra} value\n — either label part may be empty. */
static int sample(struct buf *o, const char *name, const char *suffix, const char *labels,
		  const char *extra, double v)
{
	bool l = labels && *labels, e = extra && *extra;
	TRY(buf_printf(o, "%s%s", name, suffix));
	if (l || e)
		TRY(buf_printf(o, "{%s%s%s}", l ? labels : "", l && e ? "," : "", e ? extra : ""));
	TRY(buf_append_char(o, ' '));
	TRY(value(o, v));
	return buf_append_char(o, '\n');
}

int api_metrics_counter(struct buf *out, const char *name, const char *help, const char *labels,
			double v)
{
	TRY(header(out, name, help, "counter"));
	return sample(out, name, "", labels, NULL, v);
}

int api_metrics_counter_series(struct buf *out, const char *name, const char *help,
			       const char *const *labels, const double *values, size_t n)
{
	TRY(header(out, name, help, "counter"));
	for (size_t i = 0; i < n; i++)
		TRY(sample(out, name, "", labels[i], NULL, values[i]));
	return 0;
}

int api_metrics_gauge(struct buf *out, const char *name, const char *help, const char *labels,
		      double v)
{
	TRY(header(out, name, help, "gauge"));
	return sample(out, name, "", labels, NULL, v);
}

int api_metrics_histogram(struct buf *out, const char *name, const char *help, const char *labels,
			  const double *bounds, const uint64_t *bucket_counts, size_t n_bounds,
			  double sum)
{
	for (size_t i = 1; i < n_bounds; i++)
		if (!(bounds[i] > bounds[i - 1]))
			return ERR_INVAL;
	TRY(header(out, name, help, "histogram"));
	uint64_t cum = 0;
	struct buf le;
	buf_init(&le);
	int rc = 0;
	for (size_t i = 0; !rc && i <= n_bounds; i++) {
		cum += bucket_counts[i];
		buf_clear(&le);
		rc = buf_append_str(&le, "le=\"");
		rc = rc ? rc : value(&le, i < n_bounds ? bounds[i] : INFINITY);
		rc = rc ? rc : buf_append_char(&le, '"');
		rc = rc ? rc : sample(out, name, "_bucket", labels, le.data, (double)cum);
	}
	buf_deinit(&le);
	TRY(rc);
	TRY(sample(out, name, "_sum", labels, NULL, sum));
	return sample(out, name, "_count", labels, NULL, (double)cum);
}
