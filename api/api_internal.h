/* api/api_internal.h — helpers shared by the api/ source files; not part of
 * the public interface (the server includes api/api.h only). Names carry the
 * double-underscore prefix of internal symbols.
 */
#ifndef AORTA_API_API_INTERNAL_H
#define AORTA_API_API_INTERNAL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/api.h"

/* One parse: where allocations go and where the error is reported. */
struct api__jp {
	const struct api_limits *lim;
	struct arena *a;
	struct api_error *err;
	/* the top-level "seed" as written, when it is an integer literal in
	 * int64 range: cJSON keeps numbers as doubles, exact only to 2^53 */
	bool has_seed_text;
	int64_t seed_text;
};

/* 400 invalid_request_error naming param; returns ERR_INVAL. */
int api__bad(struct api__jp *p, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Same, with an explicit ERR_* (ERR_RANGE for out-of-range values). */
int api__bad_code(struct api__jp *p, int err, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Check body bytes (UTF-8, no NUL / "\u0000", depth), parse, require an
 * object. *root is freed by the caller with cJSON_Delete. */
int api__parse_root(struct api__jp *p, const char *body, size_t len, cJSON **root);
/* The UTF-8 / depth scan alone, which also reads the exact "seed" into p. */
int api__prescan(struct api__jp *p, const char *body, size_t len, int max_depth);

/* Member `key` of obj. Missing or JSON null -> *item = NULL, returns 0.
 * A key that occurs twice -> 400 "duplicate field". param names the member
 * in error messages ("stream_options.include_usage"). */
int api__member(struct api__jp *p, const cJSON *obj, const char *key, const char *param,
		const cJSON **item);

/* Typed conversions of a present item; wrong type -> 400 naming param and
 * the expected type. */
int api__to_bool(struct api__jp *p, const cJSON *it, const char *param, bool *out);
int api__to_double(struct api__jp *p, const cJSON *it, const char *param, double *out);
/* An integer in [lo, hi] (a JSON number with no fraction). */
int api__to_int(struct api__jp *p, const cJSON *it, const char *param, int64_t lo, int64_t hi,
		int64_t *out);
/* A string, copied into the arena. */
int api__to_string(struct api__jp *p, const cJSON *it, const char *param, char **out,
		   size_t *len);

/* Shortest text that reads back as the same double / float; non-finite
 * values are written as `null` (JSON has no inf/nan). */
int api__json_double(struct buf *out, double v);
int api__json_float(struct buf *out, float v);

/* request_fields.c: the fields request bodies share (see there). Each
 * returns 0 or the ERR_* of a 400 it wrote into p->err, naming the field;
 * *has (where given) says whether the key was present. */
int api__oom(struct api__jp *p);
void *api__alloc_array(struct api__jp *p, size_t n, size_t size);
int api__get_double_in(struct api__jp *p, const cJSON *obj, const char *key, double lo,
		       bool lo_open, double hi, bool *has, float *out);
int api__get_int_in(struct api__jp *p, const cJSON *obj, const char *key, int64_t lo,
		    int64_t hi, bool *has, int64_t *out);
int api__get_bool(struct api__jp *p, const cJSON *obj, const char *key, const char *param,
		  bool *has, bool *out);
int api__get_string(struct api__jp *p, const cJSON *obj, const char *key, char **out,
		    size_t *len);
int api__to_token_array(struct api__jp *p, const cJSON *arr, const char *param, size_t n_max,
			bool allow_empty, int32_t **out, size_t *n_out);
int api__parse_sampling(struct api__jp *p, const cJSON *root, struct api_sampling *s);
int api__parse_common(struct api__jp *p, const cJSON *root, char **model, bool *stream,
		      bool *include_usage, int *n, char **user);
int api__refuse_unimplemented(struct api__jp *p, const cJSON *root, int n);
int api__check_min_tokens(struct api__jp *p, const struct api_sampling *s, bool has_max,
			  int32_t max_tokens);

/* errors.c: the error's OpenAI type (its own, or the one for its status) */
const char *api_error_type(const struct api_error *e);

#endif
