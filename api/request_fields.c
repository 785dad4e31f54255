/* api/request_fields.c — the fields request bodies share, for request.c's
 * endpoint parsers: typed getters (member + conversion + range, each
 * rejection a 400 naming the field), token-id arrays, the sampling fields
 * (stop, logit_bias, temperature ... min_tokens), model/stream/user, and the
 * fields vLLM reads that aorta refuses rather than ignores.
 * Tests: tests/api/test_api_parse.c.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/api_internal.h"
#include "common/checked.h"
#include "common/err.h"

int api__oom(struct api__jp *p)
{
	return api_error_from_err(p->err, ERR_NOMEM, NULL, "out of memory parsing the request");
}

void *api__alloc_array(struct api__jp *p, size_t n, size_t size)
{
	/* arena_calloc checks n * size for overflow and returns NULL. */
	return arena_calloc(p->a, n ? n : 1, size);
}

/* ---- small typed getters: member + conversion + range ------------------- */

int api__get_double_in(struct api__jp *p, const cJSON *obj, const char *key, double lo,
		       bool lo_open, double hi, bool *has, float *out)
{
	const cJSON *it;
	double v;
	int rc = api__member(p, obj, key, key, &it);
	if (rc || !it)
		return rc;
	if ((rc = api__to_double(p, it, key, &v)))
		return rc;
	if (v < lo || (lo_open && v == lo) || v > hi)
		return api__bad_code(p, ERR_RANGE, key, "'%s' must be in %c%g, %g], got %g", key,
				     lo_open ? '(' : '[', lo, hi, v);
	*out = (float)v;
	if (has)
		*has = true;
	return 0;
}

int api__get_int_in(struct api__jp *p, const cJSON *obj, const char *key, int64_t lo,
		    int64_t hi, bool *has, int64_t *out)
{
	const cJSON *it;
	int rc = api__member(p, obj, key, key, &it);
	if (rc || !it)
		return rc;
	if ((rc = api__to_int(p, it, key, lo, hi, out)))
		return rc;
	if (has)
		*has = true;
	return 0;
}

int api__get_bool(struct api__jp *p, const cJSON *obj, const char *key, const char *param,
		  bool *has, bool *out)
{
	const cJSON *it;
	int rc = api__member(p, obj, key, param, &it);
	if (rc || !it)
		return rc;
	if ((rc = api__to_bool(p, it, param, out)))
		return rc;
	if (has)
		*has = true;
	return 0;
}

int api__get_string(struct api__jp *p, const cJSON *obj, const char *key, char **out,
		    size_t *len)
{
	const cJSON *it;
	int rc = api__member(p, obj, key, key, &it);
	if (rc || !it)
		return rc;
	return api__to_string(p, it, key, out, len);
}

static int32_t max_token_id(const struct api_limits *lim)
{
	return lim->n_vocab > 0 ? lim->n_vocab - 1 : INT32_MAX;
}

static int to_token_id(struct api__jp *p, const cJSON *it, const char *param, int32_t *out)
{
	int64_t v;
	int rc = api__to_int(p, it, param, 0, max_token_id(p->lim), &v);
	if (rc)
		return rc;
	*out = (int32_t)v;
	return 0;
}

/* An array of token ids; n_max bounds its length. */
int api__to_token_array(struct api__jp *p, const cJSON *arr, const char *param, size_t n_max,
			bool allow_empty, int32_t **out, size_t *n_out)
{
	if (!cJSON_IsArray(arr))
		return api__bad(p, param, "'%s' must be an array of token ids", param);
	size_t n = 0;
	for (const cJSON *c = arr->child; c; c = c->next)
		if (++n > n_max)
			return api__bad_code(p, ERR_TOO_LARGE, param,
					     "'%s' has more than %zu tokens", param, n_max);
	if (!n && !allow_empty)
		return api__bad(p, param, "'%s' must not be empty", param);
	int32_t *t = api__alloc_array(p, n, sizeof *t);
	if (!t)
		return api__oom(p);
	size_t i = 0;
	double hi = (double)max_token_id(p->lim);
	for (const cJSON *c = arr->child; c; c = c->next, i++) {
		/* Fast path for the common case; the field name is only
		 * formatted when there is an error to report. */
		double v = c->valuedouble;
		if (cJSON_IsNumber(c) && v >= 0 && v <= hi && v == (double)(int32_t)v) {
			t[i] = (int32_t)v;
			continue;
		}
		char sub[96];
		snprintf(sub, sizeof sub, "%s[%zu]", param, i);
		int rc = to_token_id(p, c, sub, &t[i]);
		if (rc)
			return rc;
	}
	*out = t;
	*n_out = n;
	return 0;
}

/* ---- sampling fields ----------------------------------------------------- */

static int parse_stop(struct api__jp *p, const cJSON *root, struct api_sampling *s)
{
	const cJSON *it;
	int rc = api__member(p, root, "stop", "stop", &it);
	if (rc || !it)
		return rc;
	int n = 0;
	if (cJSON_IsString(it)) {
		n = 1;
	} else if (cJSON_IsArray(it)) {
		for (const cJSON *c = it->child; c; c = c->next)
			if (++n > p->lim->max_stop)
				return api__bad_code(p, ERR_RANGE, "stop",
						     "'stop' has more than %d strings",
						     p->lim->max_stop);
	} else {
		return api__bad(p, "stop", "'stop' must be a string or an array of strings");
	}
	s->stop = api__alloc_array(p, (size_t)n, sizeof *s->stop);
	s->stop_len = api__alloc_array(p, (size_t)n, sizeof *s->stop_len);
	if (!s->stop || !s->stop_len)
		return api__oom(p);
	const cJSON *c = cJSON_IsString(it) ? it : it->child;
	char param[32];
	for (int i = 0; i < n; i++, c = c->next) {
		if (cJSON_IsString(it))
			snprintf(param, sizeof param, "stop");
		else
			snprintf(param, sizeof param, "stop[%d]", i);
		if ((rc = api__to_string(p, c, param, &s->stop[i], &s->stop_len[i])))
			return rc;
		if (s->stop_len[i] == 0)
			return api__bad(p, param, "'%s' must not be an empty string", param);
		if (s->stop_len[i] > p->lim->max_stop_len)
			return api__bad_code(p, ERR_RANGE, param,
					     "'%s' is longer than %zu bytes", param,
					     p->lim->max_stop_len);
	}
	s->n_stop = n;
	return 0;
}

/* logit_bias: {"<token id>": bias in [-100, 100], ...} */
static int parse_logit_bias(struct api__jp *p, const cJSON *root, struct api_sampling *s)
{
	const cJSON *it;
	int rc = api__member(p, root, "logit_bias", "logit_bias", &it);
	if (rc || !it)
		return rc;
	if (!cJSON_IsObject(it))
		return api__bad(p, "logit_bias",
				"'logit_bias' must be an object mapping token ids to numbers");
	int n = 0;
	for (const cJSON *c = it->child; c; c = c->next)
		if (++n > p->lim->max_logit_bias)
			return api__bad_code(p, ERR_RANGE, "logit_bias",
					     "'logit_bias' has more than %d entries",
					     p->lim->max_logit_bias);
	s->bias_token = api__alloc_array(p, (size_t)n, sizeof *s->bias_token);
	s->bias_value = api__alloc_array(p, (size_t)n, sizeof *s->bias_value);
	if (!s->bias_token || !s->bias_value)
		return api__oom(p);
	int i = 0;
	for (const cJSON *c = it->child; c; c = c->next, i++) {
		const char *k = c->string ? c->string : "";
		char param[96];
		snprintf(param, sizeof param, "logit_bias.%.60s", k);
		/* Decimal digits only, so "1e3", "-1" and " 7" are refused. */
		size_t kl = strlen(k);
		int64_t id = 0;
		bool ok = kl > 0 && kl <= 10;
		for (size_t j = 0; ok && j < kl; j++) {
			if (k[j] < '0' || k[j] > '9')
				ok = false;
			else
				id = id * 10 + (k[j] - '0');
		}
		if (!ok || id > max_token_id(p->lim))
			return api__bad(p, param,
					"logit_bias keys must be token ids (decimal strings in [0, %d]), got '%.60s'",
					max_token_id(p->lim), k);
		for (int j = 0; j < i; j++)
			if (s->bias_token[j] == (int32_t)id)
				return api__bad(p, param, "logit_bias has token %lld twice",
						(long long)id);
		double v;
		if ((rc = api__to_double(p, c, param, &v)))
			return rc;
		if (v < -100 || v > 100)
			return api__bad_code(p, ERR_RANGE, param,
					     "logit_bias values must be in [-100, 100], got %g", v);
		s->bias_token[i] = (int32_t)id;
		s->bias_value[i] = (float)v;
	}
	s->n_logit_bias = n;
	return 0;
}

int api__parse_sampling(struct api__jp *p, const cJSON *root, struct api_sampling *s)
{
	int rc;
	int64_t v;
	bool has;
	if ((rc = api__get_double_in(p, root, "temperature", 0, false, 2, &s->has_temperature,
				&s->temperature)) ||
	    (rc = api__get_double_in(p, root, "top_p", 0, true, 1, &s->has_top_p, &s->top_p)) ||
	    (rc = api__get_double_in(p, root, "min_p", 0, false, 1, &s->has_min_p, &s->min_p)) ||
	    (rc = api__get_double_in(p, root, "repetition_penalty", 0, true, 1e6,
				&s->has_repetition_penalty, &s->repetition_penalty)) ||
	    (rc = api__get_double_in(p, root, "presence_penalty", -2, false, 2, NULL,
				&s->presence_penalty)) ||
	    (rc = api__get_double_in(p, root, "frequency_penalty", -2, false, 2, NULL,
				&s->frequency_penalty)))
		return rc;
	has = false;
	if ((rc = api__get_int_in(p, root, "top_k", -1, INT32_MAX, &has, &v)))
		return rc;
	if (has) {
		s->has_top_k = true;
		s->top_k = (int32_t)v;
	}
	if (p->has_seed_text) { /* exact past 2^53, where the double is not */
		s->has_seed = true;
		s->seed = p->seed_text;
	} else if ((rc = api__get_int_in(p, root, "seed", INT64_MIN, INT64_MAX, &s->has_seed,
				    &s->seed))) {
		return rc;
	}
	if ((rc = api__get_bool(p, root, "ignore_eos", "ignore_eos", NULL, &s->ignore_eos)))
		return rc;
	has = false;
	if ((rc = api__get_int_in(p, root, "min_tokens", 0, INT32_MAX, &has, &v)))
		return rc;
	s->min_tokens = has ? (int32_t)v : 0;
	if ((rc = parse_stop(p, root, s)) || (rc = parse_logit_bias(p, root, s)))
		return rc;
	const cJSON *it;
	if ((rc = api__member(p, root, "stop_token_ids", "stop_token_ids", &it)))
		return rc;
	if (it) {
		size_t n = 0;
		rc = api__to_token_array(p, it, "stop_token_ids", (size_t)p->lim->max_stop_token_ids,
				    true, &s->stop_token_ids, &n);
		if (rc)
			return rc;
		s->n_stop_token_ids = (int)n;
	}
	return 0;
}

/* stream, stream_options.include_usage, n, user, model: both endpoints. */
int api__parse_common(struct api__jp *p, const cJSON *root, char **model, bool *stream,
		      bool *include_usage, int *n, char **user)
{
	int rc;
	int64_t v;
	bool has = false;
	if ((rc = api__get_string(p, root, "model", model, NULL)) ||
	    (rc = api__get_string(p, root, "user", user, NULL)) ||
	    (rc = api__get_bool(p, root, "stream", "stream", NULL, stream)) ||
	    (rc = api__get_int_in(p, root, "n", 1,
			     p->lim->max_n < API_MAX_N_HARD ? p->lim->max_n : API_MAX_N_HARD, &has,
			     &v)))
		return rc;
	*n = has ? (int)v : 1;
	const cJSON *so;
	if ((rc = api__member(p, root, "stream_options", "stream_options", &so)))
		return rc;
	if (so) {
		if (!cJSON_IsObject(so))
			return api__bad(p, "stream_options", "'stream_options' must be an object");
		if (!*stream)
			return api__bad(p, "stream_options",
					"'stream_options' is only allowed when 'stream' is true");
		if ((rc = api__get_bool(p, so, "include_usage", "stream_options.include_usage", NULL,
				   include_usage)))
			return rc;
	}
	return 0;
}

/* Fields vLLM reads that we do not implement: refused (400) rather than
 * silently ignored, where their value asks for something. */
int api__refuse_unimplemented(struct api__jp *p, const cJSON *root, int n)
{
	static const char *const switches[] = {"use_beam_search", "include_stop_str_in_output"};
	static const char *const guided[] = {"guided_json", "guided_regex", "guided_choice",
					     "guided_grammar", "structured_outputs"};
	int rc;
	int64_t v;
	bool has = false, on = false;
	if ((rc = api__get_int_in(p, root, "best_of", 1, API_MAX_N_HARD, &has, &v)))
		return rc;
	if (has && v < n)
		return api__bad(p, "best_of", "'best_of' (%lld) must be at least 'n' (%d)",
				(long long)v, n);
	if (has && v > n)
		return api__bad_code(p, ERR_UNSUPPORTED, "best_of",
				     "'best_of' larger than 'n' is not supported");
	for (size_t i = 0; i < sizeof switches / sizeof *switches; i++) {
		on = false;
		if ((rc = api__get_bool(p, root, switches[i], switches[i], NULL, &on)))
			return rc;
		if (on)
			return api__bad_code(p, ERR_UNSUPPORTED, switches[i],
					     "'%s' is not supported", switches[i]);
	}
	for (size_t i = 0; i < sizeof guided / sizeof *guided; i++) {
		const cJSON *g;
		if ((rc = api__member(p, root, guided[i], guided[i], &g)))
			return rc;
		if (g && !cJSON_IsNull(g))
			return api__bad_code(p, ERR_UNSUPPORTED, guided[i],
					     "'%s' (structured output) is not supported", guided[i]);
	}
	return 0;
}

int api__check_min_tokens(struct api__jp *p, const struct api_sampling *s, bool has_max,
			  int32_t max_tokens)
{
	if (has_max && s->min_tokens > max_tokens)
		return api__bad_code(p, ERR_RANGE, "min_tokens",
				     "'min_tokens' (%d) must not exceed 'max_tokens' (%d)",
				     s->min_tokens, max_tokens);
	return 0;
}
