/* engine/model/gguf_write.c — the GGUF writer (v2/v3) and Q8_0 quantization.
 *
 * Keys are kept as serialized values in insertion order; tensors are borrowed
 * until the write, which streams header, key-values, tensor infos and the
 * aligned data section either to a file or to a memory buffer. Used by the
 * tests, the test-model generator (engine/model/model_gen.c) and quantization.
 * Tests: tests/models/test_gguf.c (writer -> reader round trips).
 */
#include "engine/model/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/checked.h"

struct wkv {
	char *key;
	enum gguf_type type;
	struct buf val; /* the value's bytes after the type field */
};

struct wtensor {
	char *name;
	uint32_t ggml_type;
	int n_dims;
	uint64_t ne[GGUF_MAX_DIMS];
	const void *data;
	uint64_t n_bytes;
	uint64_t offset; /* relative to the data section; set at write time */
};

struct gguf_writer {
	uint32_t version;
	size_t alignment;
	struct wkv *kv;
	size_t n_kv, cap_kv;
	struct wtensor *t;
	size_t n_t, cap_t;
};

int gguf_writer_create(uint32_t version, struct gguf_writer **out)
{
	if (version != 2 && version != 3)
		return ERR_INVAL;
	struct gguf_writer *w = calloc(1, sizeof *w);
	if (!w)
		return ERR_NOMEM;
	w->version = version;
	w->alignment = GGUF_DEFAULT_ALIGNMENT;
	*out = w;
	return 0;
}

void gguf_writer_destroy(struct gguf_writer *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < w->n_kv; i++) {
		free(w->kv[i].key);
		buf_deinit(&w->kv[i].val);
	}
	for (size_t i = 0; i < w->n_t; i++)
		free(w->t[i].name);
	free(w->kv);
	free(w->t);
	free(w);
}

/* The slot for key (existing: cleared for a new value; else appended). */
static int kv_slot(struct gguf_writer *w, const char *key, enum gguf_type type, struct wkv **out)
{
	if (!key || !*key)
		return ERR_INVAL;
	for (size_t i = 0; i < w->n_kv; i++) {
		if (!strcmp(w->kv[i].key, key)) {
			buf_clear(&w->kv[i].val);
			w->kv[i].type = type;
			*out = &w->kv[i];
			return 0;
		}
	}
	if (w->n_kv == w->cap_kv) {
		size_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
		struct wkv *nk = realloc(w->kv, cap * sizeof *nk);
		if (!nk)
			return ERR_NOMEM;
		w->kv = nk;
		w->cap_kv = cap;
	}
	struct wkv *kv = &w->kv[w->n_kv];
	kv->key = strdup(key);
	if (!kv->key)
		return ERR_NOMEM;
	kv->type = type;
	buf_init(&kv->val);
	w->n_kv++;
	*out = kv;
	return 0;
}

static int set_scalar(struct gguf_writer *w, const char *key, enum gguf_type t, const void *v,
		      size_t n)
{
	struct wkv *kv;
	int rc = kv_slot(w, key, t, &kv);
	return rc ? rc : buf_append(&kv->val, v, n);
}

int gguf_writer_set_u8(struct gguf_writer *w, const char *k, uint8_t v) { return set_scalar(w, k, GGUF_TYPE_UINT8, &v, 1); }
int gguf_writer_set_i8(struct gguf_writer *w, const char *k, int8_t v) { return set_scalar(w, k, GGUF_TYPE_INT8, &v, 1); }
int gguf_writer_set_u16(struct gguf_writer *w, const char *k, uint16_t v) { return set_scalar(w, k, GGUF_TYPE_UINT16, &v, 2); }
int gguf_writer_set_i16(struct gguf_writer *w, const char *k, int16_t v) { return set_scalar(w, k, GGUF_TYPE_INT16, &v, 2); }
int gguf_writer_set_i32(struct gguf_writer *w, const char *k, int32_t v) { return set_scalar(w, k, GGUF_TYPE_INT32, &v, 4); }
int gguf_writer_set_u64(struct gguf_writer *w, const char *k, uint64_t v) { return set_scalar(w, k, GGUF_TYPE_UINT64, &v, 8); }
int gguf_writer_set_i64(struct gguf_writer *w, const char *k, int64_t v) { return set_scalar(w, k, GGUF_TYPE_INT64, &v, 8); }
int gguf_writer_set_f32(struct gguf_writer *w, const char *k, float v) { return set_scalar(w, k, GGUF_TYPE_FLOAT32, &v, 4); }
int gguf_writer_set_f64(struct gguf_writer *w, const char *k, double v) { return set_scalar(w, k, GGUF_TYPE_FLOAT64, &v, 8); }

int gguf_writer_set_u32(struct gguf_writer *w, const char *k, uint32_t v)
{
	if (k && !strcmp(k, "general.alignment")) {
		if (v == 0 || (v & (v - 1)))
			return ERR_INVAL;
		w->alignment = v;
	}
	return set_scalar(w, k, GGUF_TYPE_UINT32, &v, 4);
}

int gguf_writer_set_bool(struct gguf_writer *w, const char *k, bool v)
{
	uint8_t b = v ? 1 : 0;
	return set_scalar(w, k, GGUF_TYPE_BOOL, &b, 1);
}

static int append_str(struct buf *b, const char *s, size_t len)
{
	uint64_t l = len;
	int rc = buf_append(b, &l, 8);
	return rc ? rc : buf_append(b, s, len);
}

int gguf_writer_set_strn(struct gguf_writer *w, const char *key, const char *s, size_t len)
{
	struct wkv *kv;
	int rc = kv_slot(w, key, GGUF_TYPE_STRING, &kv);
	return rc ? rc : append_str(&kv->val, s, len);
}

int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *s)
{
	return gguf_writer_set_strn(w, key, s, strlen(s));
}

static size_t elem_size(enum gguf_type t)
{
	switch (t) {
	case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
	case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
	case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
	case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
	default: return 0;
	}
}

int gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type et,
			const void *data, uint64_t n)
{
	size_t es = elem_size(et), bytes;
	if (!es || ck_mul((size_t)n, es, &bytes))
		return ERR_INVAL;
	struct wkv *kv;
	int rc = kv_slot(w, key, GGUF_TYPE_ARRAY, &kv);
	uint32_t t = et;
	if (!rc)
		rc = buf_append(&kv->val, &t, 4);
	if (!rc)
		rc = buf_append(&kv->val, &n, 8);
	if (!rc && bytes)
		rc = buf_append(&kv->val, data, bytes);
	return rc;
}

int gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *strs,
			    const size_t *lens, uint64_t n)
{
	struct wkv *kv;
	int rc = kv_slot(w, key, GGUF_TYPE_ARRAY, &kv);
	uint32_t t = GGUF_TYPE_STRING;
	if (!rc)
		rc = buf_append(&kv->val, &t, 4);
	if (!rc)
		rc = buf_append(&kv->val, &n, 8);
	for (uint64_t i = 0; i < n && !rc; i++)
		rc = append_str(&kv->val, strs[i], lens ? lens[i] : strlen(strs[i]));
	return rc;
}

static int dtype_to_ggml(enum dtype t, uint32_t *out)
{
	switch (t) {
	case DT_F32: *out = GGML_TYPE_F32; return 0;
	case DT_F16: *out = GGML_TYPE_F16; return 0;
	case DT_BF16: *out = GGML_TYPE_BF16; return 0;
	case DT_Q8_0: *out = GGML_TYPE_Q8_0; return 0;
	default: return ERR_UNSUPPORTED;
	}
}

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum dtype dtype, int n_dims,
			   const int64_t *shape, const void *data, uint64_t n_bytes)
{
	uint32_t gt;
	if (!name || !*name || n_dims < 1 || n_dims > GGUF_MAX_DIMS || dtype_to_ggml(dtype, &gt))
		return ERR_INVAL;
	uint64_t n_rows = 1, row_bytes;
	for (int i = 0; i < n_dims; i++)
		if (shape[i] <= 0)
			return ERR_INVAL;
	for (int i = 0; i < n_dims - 1; i++)
		if (ck_mul_u64(n_rows, (uint64_t)shape[i], &n_rows))
			return ERR_OVERFLOW;
	if (dtype_row_bytes(dtype, (uint64_t)shape[n_dims - 1], &row_bytes) ||
	    ck_mul_u64(row_bytes, n_rows, &row_bytes) || row_bytes != n_bytes)
		return ERR_INVAL;
	for (size_t i = 0; i < w->n_t; i++)
		if (!strcmp(w->t[i].name, name))
			return ERR_INVAL;
	if (w->n_t == w->cap_t) {
		size_t cap = w->cap_t ? w->cap_t * 2 : 64;
		struct wtensor *nt = realloc(w->t, cap * sizeof *nt);
		if (!nt)
			return ERR_NOMEM;
		w->t = nt;
		w->cap_t = cap;
	}
	struct wtensor *t = &w->t[w->n_t];
	t->name = strdup(name);
	if (!t->name)
		return ERR_NOMEM;
	t->ggml_type = gt;
	t->n_dims = n_dims;
	for (int i = 0; i < n_dims; i++)
		t->ne[i] = (uint64_t)shape[n_dims - 1 - i];
	t->data = data;
	t->n_bytes = n_bytes;
	w->n_t++;
	return 0;
}

/* ---- output ---------------------------------------------------------------- */

struct sink {
	FILE *fp;
	struct buf *b;
	uint64_t pos;
	int err;
};

static void put(struct sink *s, const void *p, size_t n)
{
	if (s->err || n == 0)
		return;
	if (s->fp) {
		if (fwrite(p, 1, n, s->fp) != n)
			s->err = ERR_IO;
	} else if (buf_append(s->b, p, n)) {
		s->err = ERR_NOMEM;
	}
	s->pos += n;
}

static void pad_to(struct sink *s, size_t align)
{
	static const uint8_t zeros[64];
	while (!s->err && s->pos % align) {
		size_t n = align - s->pos % align;
		put(s, zeros, n < sizeof zeros ? n : sizeof zeros);
	}
}

static int emit(struct gguf_writer *w, struct sink *s)
{
	uint32_t magic = 0x46554747u;
	uint64_t n_t = w->n_t, n_kv = w->n_kv;
	put(s, &magic, 4);
	put(s, &w->version, 4);
	put(s, &n_t, 8);
	put(s, &n_kv, 8);
	for (size_t i = 0; i < w->n_kv; i++) {
		uint32_t t = w->kv[i].type;
		uint64_t kl = strlen(w->kv[i].key);
		put(s, &kl, 8);
		put(s, w->kv[i].key, (size_t)kl);
		put(s, &t, 4);
		put(s, w->kv[i].val.data, w->kv[i].val.len);
	}
	uint64_t off = 0;
	for (size_t i = 0; i < w->n_t; i++) {
		struct wtensor *t = &w->t[i];
		size_t aligned;
		if (ck_align_up((size_t)off, w->alignment, &aligned))
			return ERR_OVERFLOW;
		t->offset = aligned;
		off = aligned + t->n_bytes;
		uint64_t nl = strlen(t->name);
		uint32_t nd = (uint32_t)t->n_dims;
		put(s, &nl, 8);
		put(s, t->name, (size_t)nl);
		put(s, &nd, 4);
		put(s, t->ne, 8 * (size_t)nd);
		put(s, &t->ggml_type, 4);
		put(s, &t->offset, 8);
	}
	pad_to(s, w->alignment);
	uint64_t data_start = s->pos;
	for (size_t i = 0; i < w->n_t && !s->err; i++) {
		static const uint8_t zeros[64];
		while (!s->err && s->pos - data_start < w->t[i].offset) {
			uint64_t gap = w->t[i].offset - (s->pos - data_start);
			put(s, zeros, gap < sizeof zeros ? (size_t)gap : sizeof zeros);
		}
		put(s, w->t[i].data, (size_t)w->t[i].n_bytes);
	}
	return s->err;
}

int gguf_writer_write_mem(struct gguf_writer *w, void **out, size_t *len)
{
	struct buf b;
	buf_init(&b);
	struct sink s = { NULL, &b, 0, 0 };
	int rc = emit(w, &s);
	if (rc) {
		buf_deinit(&b);
		return rc;
	}
	*out = buf_take(&b, len);
	return *out ? 0 : ERR_NOMEM;
}

int gguf_writer_write(struct gguf_writer *w, const char *path, struct diag *d)
{
	FILE *fp = fopen(path, "wb");
	if (!fp)
		return diag_set(d, ERR_IO, "%s: cannot create", path);
	struct sink s = { fp, NULL, 0, 0 };
	int rc = emit(w, &s);
	if (fclose(fp) && !rc)
		rc = ERR_IO;
	if (rc) {
		remove(path);
		return diag_set(d, rc, "%s: write failed (%s)", path, err_str(rc));
	}
	return 0;
}

void gguf_quantize_q8_0(const float *x, uint64_t n, struct q8_0_block *out)
{
	for (uint64_t b = 0; b < n / Q8_0_BLOCK; b++) {
		const float *xb = x + b * Q8_0_BLOCK;
		float amax = 0.0f;
		for (int j = 0; j < Q8_0_BLOCK; j++)
			amax = fmaxf(amax, fabsf(xb[j]));
		float dsc = amax / 127.0f;
		float id = dsc != 0.0f ? 1.0f / dsc : 0.0f;
		out[b].d = f32_to_f16(dsc);
		for (int j = 0; j < Q8_0_BLOCK; j++)
			out[b].qs[j] = (int8_t)roundf(xb[j] * id);
	}
}
