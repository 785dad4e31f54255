/* engine/model/gguf.c — the GGUF reader (v2/v3): map, validate, index.
 *
 * The file comes from a stranger, so parsing is a single forward pass with a
 * bounds-checked cursor: every count is compared with the bytes left before
 * anything is allocated for it, every size product goes through
 * common/checked.h, and tensor data ranges are checked against the file size,
 * the alignment and each other. Nothing is read after gguf_open() returns that
 * was not checked here. The writer is engine/model/gguf_write.c.
 * Tests: tests/models/test_gguf.c; fuzz target: tests/fuzz/fuzz_gguf.c.
 */
#include "engine/model/gguf.h"

#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "common/mapfile.h"
#include "common/utf8.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
/* Keys and tensor names longer than this are refused (llama.cpp caps names at
 * 64 bytes; keys are short). Bounds the copies we make. */
#define GGUF_MAX_NAME 65536

struct gguf_kv {
	char *key;
	enum gguf_type type;
	uint64_t off;	      /* offset of the value (after the type / array header) */
	enum gguf_type elem;  /* arrays: element type */
	uint64_t n;	      /* arrays: element count; strings: byte length */
	uint64_t *str_offs;   /* string arrays: offset of each element's length prefix */
};

struct name_idx {
	const char *name;
	int64_t idx;
};

struct gguf_file {
	const uint8_t *data;
	size_t size;
	bool mapped;
	uint32_t version;
	size_t alignment;
	int64_t n_kv;
	struct gguf_kv *kv;
	struct name_idx *kv_sorted;
	int64_t n_tensors;
	struct gguf_tensor_info *tensors;
	struct name_idx *t_sorted;
};

/* ---- small helpers --------------------------------------------------------- */

static const char *const type_names[GGUF_TYPE__COUNT] = {
	"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

const char *gguf_type_name(enum gguf_type t)
{
	return (unsigned)t < GGUF_TYPE__COUNT ? type_names[t] : "?";
}

const char *gguf_ggml_type_name(uint32_t t)
{
	static const char *const names[] = {
		"F32",	   "F16",    "Q4_0",   "Q4_1",	 "Q4_2",    "Q4_3",   "Q5_0",	"Q5_1",
		"Q8_0",	   "Q8_1",   "Q2_K",   "Q3_K",	 "Q4_K",    "Q5_K",   "Q6_K",	"Q8_K",
		"IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL",  "IQ3_S",  "IQ2_S",	"IQ4_XS",
		"I8",	   "I16",    "I32",    "I64",	 "F64",	    "IQ1_M",  "BF16",	"Q4_0_4_4",
		"Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0",
	};
	return t < sizeof names / sizeof names[0] ? names[t] : "?";
}

/* Bytes of one scalar of a fixed-size type; 0 for STRING/ARRAY/unknown. */
static size_t scalar_size(enum gguf_type t)
{
	switch (t) {
	case GGUF_TYPE_UINT8:
	case GGUF_TYPE_INT8:
	case GGUF_TYPE_BOOL:
		return 1;
	case GGUF_TYPE_UINT16:
	case GGUF_TYPE_INT16:
		return 2;
	case GGUF_TYPE_UINT32:
	case GGUF_TYPE_INT32:
	case GGUF_TYPE_FLOAT32:
		return 4;
	case GGUF_TYPE_UINT64:
	case GGUF_TYPE_INT64:
	case GGUF_TYPE_FLOAT64:
		return 8;
	default:
		return 0;
	}
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(((const struct name_idx *)a)->name, ((const struct name_idx *)b)->name);
}

static int64_t name_find(const struct name_idx *arr, int64_t n, const char *name)
{
	if (!name || n <= 0)
		return -1;
	struct name_idx key = { name, 0 };
	const struct name_idx *hit = bsearch(&key, arr, (size_t)n, sizeof *arr, name_cmp);
	return hit ? hit->idx : -1;
}

/* ---- bounds-checked cursor ------------------------------------------------- */

struct cur {
	const uint8_t *p;
	size_t size;
	size_t pos;
	struct diag *d;
};

static size_t cur_left(const struct cur *c)
{
	return c->size - c->pos;
}

static int cur_need(struct cur *c, uint64_t n, const char *what)
{
	if (n > cur_left(c))
		return diag_set(c->d, ERR_FORMAT, "gguf: truncated file (%s at byte %zu needs %llu bytes, %zu left)",
				what, c->pos, (unsigned long long)n, cur_left(c));
	return 0;
}

static int cur_u32(struct cur *c, uint32_t *v, const char *what)
{
	int rc = cur_need(c, 4, what);
	if (rc)
		return rc;
	memcpy(v, c->p + c->pos, 4);
	c->pos += 4;
	return 0;
}

static int cur_u64(struct cur *c, uint64_t *v, const char *what)
{
	int rc = cur_need(c, 8, what);
	if (rc)
		return rc;
	memcpy(v, c->p + c->pos, 8);
	c->pos += 8;
	return 0;
}

/* A length-prefixed string: checks the length against the bytes left and
 * returns its offset and length. */
static int cur_str(struct cur *c, uint64_t *off, uint64_t *len, const char *what)
{
	int rc = cur_u64(c, len, what);
	if (rc)
		return rc;
	if ((rc = cur_need(c, *len, what)))
		return rc;
	*off = c->pos;
	c->pos += (size_t)*len;
	return 0;
}

/* A NUL-terminated copy of a key or tensor name, validated. */
static int cur_name(struct cur *c, char **out, const char *what)
{
	uint64_t off, len;
	int rc = cur_str(c, &off, &len, what);
	if (rc)
		return rc;
	if (len == 0)
		return diag_set(c->d, ERR_FORMAT, "gguf: empty %s at byte %llu", what,
				(unsigned long long)off);
	if (len > GGUF_MAX_NAME)
		return diag_set(c->d, ERR_FORMAT, "gguf: %s of %llu bytes at byte %llu is too long",
				what, (unsigned long long)len, (unsigned long long)off);
	const char *s = (const char *)c->p + off;
	if (memchr(s, '\0', (size_t)len))
		return diag_set(c->d, ERR_FORMAT, "gguf: %s at byte %llu contains a NUL byte", what,
				(unsigned long long)off);
	if (!utf8_valid(s, (size_t)len))
		return diag_set(c->d, ERR_FORMAT, "gguf: %s at byte %llu is not valid UTF-8", what,
				(unsigned long long)off);
	char *copy = malloc((size_t)len + 1);
	if (!copy)
		return diag_set(c->d, ERR_NOMEM, "gguf: out of memory");
	memcpy(copy, s, (size_t)len);
	copy[len] = '\0';
	*out = copy;
	return 0;
}

/* ---- metadata -------------------------------------------------------------- */

static int parse_value(struct cur *c, struct gguf_kv *kv)
{
	uint32_t t;
	int rc = cur_u32(c, &t, "value type");
	if (rc)
		return rc;
	if (t >= GGUF_TYPE__COUNT)
		return diag_set(c->d, ERR_FORMAT, "gguf: key '%s' has unknown value type %u", kv->key, t);
	kv->type = (enum gguf_type)t;
	if (kv->type == GGUF_TYPE_STRING) {
		uint64_t len;
		if ((rc = cur_str(c, &kv->off, &len, kv->key)))
			return rc;
		kv->n = len;
		return 0;
	}
	if (kv->type != GGUF_TYPE_ARRAY) {
		size_t sz = scalar_size(kv->type);
		if ((rc = cur_need(c, sz, kv->key)))
			return rc;
		kv->off = c->pos;
		if (kv->type == GGUF_TYPE_BOOL && c->p[c->pos] > 1)
			return diag_set(c->d, ERR_FORMAT, "gguf: key '%s': bool value %u is not 0 or 1",
					kv->key, c->p[c->pos]);
		c->pos += sz;
		return 0;
	}
	uint32_t et;
	if ((rc = cur_u32(c, &et, "array type")) || (rc = cur_u64(c, &kv->n, "array length")))
		return rc;
	if (et >= GGUF_TYPE__COUNT)
		return diag_set(c->d, ERR_FORMAT, "gguf: key '%s': unknown array element type %u",
				kv->key, et);
	if (et == GGUF_TYPE_ARRAY)
		return diag_set(c->d, ERR_UNSUPPORTED, "gguf: key '%s': nested arrays are not supported",
				kv->key);
	kv->elem = (enum gguf_type)et;
	kv->off = c->pos;
	if (kv->elem != GGUF_TYPE_STRING) {
		uint64_t bytes;
		if (ck_mul_u64(kv->n, scalar_size(kv->elem), &bytes))
			return diag_set(c->d, ERR_FORMAT, "gguf: key '%s': array length %llu overflows",
					kv->key, (unsigned long long)kv->n);
		if ((rc = cur_need(c, bytes, kv->key)))
			return rc;
		if (kv->elem == GGUF_TYPE_BOOL) {
			for (uint64_t i = 0; i < kv->n; i++)
				if (c->p[c->pos + i] > 1)
					return diag_set(c->d, ERR_FORMAT, "gguf: key '%s': bool element is not 0 or 1",
							kv->key);
		}
		c->pos += (size_t)bytes;
		return 0;
	}
	/* Each string takes at least its 8-byte length: bound n before allocating. */
	if (kv->n > cur_left(c) / 8)
		return diag_set(c->d, ERR_FORMAT, "gguf: key '%s': %llu strings cannot fit in the %zu bytes left",
				kv->key, (unsigned long long)kv->n, cur_left(c));
	kv->str_offs = malloc((size_t)(kv->n ? kv->n : 1) * sizeof(uint64_t));
	if (!kv->str_offs)
		return diag_set(c->d, ERR_NOMEM, "gguf: out of memory");
	for (uint64_t i = 0; i < kv->n; i++) {
		uint64_t soff, slen;
		kv->str_offs[i] = c->pos;
		if ((rc = cur_str(c, &soff, &slen, kv->key)))
			return rc;
	}
	return 0;
}

static const struct gguf_kv *kv_get(const struct gguf_file *f, const char *key)
{
	int64_t i = name_find(f->kv_sorted, f->n_kv, key);
	return i < 0 ? NULL : &f->kv[i];
}

/* Read one scalar of type t at off as an int64 or uint64 (is_signed tells which). */
static int scalar_int(const struct gguf_file *f, enum gguf_type t, uint64_t off, int64_t *sv,
		      uint64_t *uv, bool *is_signed)
{
	const uint8_t *p = f->data + off;
	*is_signed = false;
	switch (t) {
	case GGUF_TYPE_UINT8: *uv = p[0]; return 0;
	case GGUF_TYPE_INT8: { int8_t v; memcpy(&v, p, 1); *sv = v; *is_signed = true; return 0; }
	case GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, p, 2); *uv = v; return 0; }
	case GGUF_TYPE_INT16: { int16_t v; memcpy(&v, p, 2); *sv = v; *is_signed = true; return 0; }
	case GGUF_TYPE_UINT32: { uint32_t v; memcpy(&v, p, 4); *uv = v; return 0; }
	case GGUF_TYPE_INT32: { int32_t v; memcpy(&v, p, 4); *sv = v; *is_signed = true; return 0; }
	case GGUF_TYPE_UINT64: memcpy(uv, p, 8); return 0;
	case GGUF_TYPE_INT64: memcpy(sv, p, 8); *is_signed = true; return 0;
	default: return ERR_FORMAT;
	}
}

static int get_int(const struct gguf_file *f, const char *key, int64_t lo, uint64_t hi,
		   int64_t *s_out, uint64_t *u_out)
{
	const struct gguf_kv *kv = kv_get(f, key);
	if (!kv)
		return ERR_NOTFOUND;
	int64_t sv = 0;
	uint64_t uv = 0;
	bool is_signed;
	if (scalar_int(f, kv->type, kv->off, &sv, &uv, &is_signed))
		return ERR_FORMAT;
	if (is_signed) {
		if (sv < lo || (sv > 0 && (uint64_t)sv > hi))
			return ERR_RANGE;
		*s_out = sv;
		*u_out = (uint64_t)sv;
	} else {
		if (uv > hi)
			return ERR_RANGE;
		*s_out = (int64_t)uv;
		*u_out = uv;
	}
	return 0;
}

int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out)
{
	int64_t s;
	uint64_t u;
	int rc = get_int(f, key, 0, UINT32_MAX, &s, &u);
	if (!rc)
		*out = (uint32_t)u;
	return rc;
}

int gguf_get_i32(const struct gguf_file *f, const char *key, int32_t *out)
{
	int64_t s;
	uint64_t u;
	int rc = get_int(f, key, INT32_MIN, INT32_MAX, &s, &u);
	if (!rc)
		*out = (int32_t)s;
	return rc;
}

int gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out)
{
	int64_t s;
	uint64_t u;
	int rc = get_int(f, key, 0, UINT64_MAX, &s, &u);
	if (!rc)
		*out = u;
	return rc;
}

int gguf_get_f32(const struct gguf_file *f, const char *key, float *out)
{
	const struct gguf_kv *kv = kv_get(f, key);
	if (!kv)
		return ERR_NOTFOUND;
	if (kv->type == GGUF_TYPE_FLOAT32) {
		memcpy(out, f->data + kv->off, 4);
		return 0;
	}
	if (kv->type == GGUF_TYPE_FLOAT64) {
		double v;
		memcpy(&v, f->data + kv->off, 8);
		*out = (float)v;
		return 0;
	}
	return ERR_FORMAT;
}

int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out)
{
	const struct gguf_kv *kv = kv_get(f, key);
	if (!kv)
		return ERR_NOTFOUND;
	if (kv->type != GGUF_TYPE_BOOL)
		return ERR_FORMAT;
	*out = f->data[kv->off] != 0;
	return 0;
}

int gguf_get_str(const struct gguf_file *f, const char *key, const char **s, size_t *len)
{
	const struct gguf_kv *kv = kv_get(f, key);
	if (!kv)
		return ERR_NOTFOUND;
	if (kv->type != GGUF_TYPE_STRING)
		return ERR_FORMAT;
	*s = (const char *)f->data + kv->off;
	*len = (size_t)kv->n;
	return 0;
}

int gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_type *elem_type,
		 uint64_t *n)
{
	const struct gguf_kv *kv = kv_get(f, key);
	if (!kv)
		return ERR_NOTFOUND;
	if (kv->type != GGUF_TYPE_ARRAY)
		return ERR_FORMAT;
	*elem_type = kv->elem;
	*n = kv->n;
	return 0;
}

int gguf_arr_str(const struct gguf_file *f, const char *key, uint64_t i, const char **s,
		 size_t *len)
{
	const struct gguf_kv *kv = kv_get(f, key);
	if (!kv)
		return ERR_NOTFOUND;
	if (kv->type != GGUF_TYPE_ARRAY || kv->elem != GGUF_TYPE_STRING)
		return ERR_FORMAT;
	if (i >= kv->n)
		return ERR_RANGE;
	uint64_t l;
	memcpy(&l, f->data + kv->str_offs[i], 8);
	*s = (const char *)f->data + kv->str_offs[i] + 8;
	*len = (size_t)l;
	return 0;
}

int gguf_arr_read_i32(const struct gguf_file *f, const char *key, int32_t *out, uint64_t n)
{
	const struct gguf_kv *kv = kv_get(f, key);
	if (!kv)
		return ERR_NOTFOUND;
	if (kv->type != GGUF_TYPE_ARRAY || kv->n != n)
		return ERR_FORMAT;
	size_t es = scalar_size(kv->elem);
	if (kv->elem == GGUF_TYPE_BOOL || kv->elem == GGUF_TYPE_FLOAT32 || kv->elem == GGUF_TYPE_FLOAT64 ||
	    es == 0)
		return ERR_FORMAT;
	for (uint64_t i = 0; i < n; i++) {
		int64_t sv = 0;
		uint64_t uv = 0;
		bool is_signed;
		scalar_int(f, kv->elem, kv->off + i * es, &sv, &uv, &is_signed);
		if (is_signed ? (sv < INT32_MIN || sv > INT32_MAX) : uv > INT32_MAX)
			return ERR_RANGE;
		out[i] = is_signed ? (int32_t)sv : (int32_t)uv;
	}
	return 0;
}

int gguf_arr_read_f32(const struct gguf_file *f, const char *key, float *out, uint64_t n)
{
	const struct gguf_kv *kv = kv_get(f, key);
	if (!kv)
		return ERR_NOTFOUND;
	if (kv->type != GGUF_TYPE_ARRAY || kv->n != n)
		return ERR_FORMAT;
	if (kv->elem == GGUF_TYPE_FLOAT32) {
		if (n)
			memcpy(out, f->data + kv->off, (size_t)n * 4);
		return 0;
	}
	if (kv->elem == GGUF_TYPE_FLOAT64) {
		for (uint64_t i = 0; i < n; i++) {
			double v;
			memcpy(&v, f->data + kv->off + i * 8, 8);
			out[i] = (float)v;
		}
		return 0;
	}
	return ERR_FORMAT;
}

/* ---- tensors --------------------------------------------------------------- */

static int ggml_to_dtype(uint32_t t, enum dtype *out)
{
	switch (t) {
	case GGML_TYPE_F32: *out = DT_F32; return 0;
	case GGML_TYPE_F16: *out = DT_F16; return 0;
	case GGML_TYPE_BF16: *out = DT_BF16; return 0;
	case GGML_TYPE_Q8_0: *out = DT_Q8_0; return 0;
	default: return ERR_UNSUPPORTED;
	}
}

static int parse_tensor_info(struct cur *c, struct gguf_tensor_info *ti)
{
	char *name = NULL;
	int rc = cur_name(c, &name, "tensor name");
	if (rc)
		return rc;
	ti->name = name;
	uint32_t nd;
	if ((rc = cur_u32(c, &nd, "tensor n_dims")))
		return rc;
	if (nd < 1 || nd > GGUF_MAX_DIMS)
		return diag_set(c->d, ERR_FORMAT, "%s: %u dimensions (1..%d allowed)", name, nd,
				GGUF_MAX_DIMS);
	ti->n_dims = (int)nd;
	uint64_t n_elems = 1;
	for (int i = 0; i < GGUF_MAX_DIMS; i++) {
		ti->ne[i] = 1;
		ti->shape[i] = 0;
	}
	for (uint32_t i = 0; i < nd; i++) {
		uint64_t ne;
		if ((rc = cur_u64(c, &ne, "tensor dimension")))
			return rc;
		if (ne == 0 || ne > INT64_MAX)
			return diag_set(c->d, ERR_FORMAT, "%s: dimension %u is %llu", name, i,
					(unsigned long long)ne);
		if (ck_mul_u64(n_elems, ne, &n_elems) || n_elems > INT64_MAX)
			return diag_set(c->d, ERR_OVERFLOW, "%s: the product of its dimensions overflows",
					name);
		ti->ne[i] = (int64_t)ne;
		ti->shape[nd - 1 - i] = (int64_t)ne;
	}
	ti->n_elems = n_elems;
	if ((rc = cur_u32(c, &ti->ggml_type, "tensor type")) ||
	    (rc = cur_u64(c, &ti->offset, "tensor offset")))
		return rc;
	if (ggml_to_dtype(ti->ggml_type, &ti->dtype))
		return diag_set(c->d, ERR_UNSUPPORTED, "%s: type %s is not supported", name,
				ti->ggml_type < 36 ? gguf_ggml_type_name(ti->ggml_type) : "(unknown)");
	uint64_t row_bytes;
	if (dtype_row_bytes(ti->dtype, (uint64_t)ti->ne[0], &row_bytes))
		return diag_set(c->d, ERR_FORMAT, "%s: row of %lld is not a whole number of %s blocks",
				name, (long long)ti->ne[0], dtype_name(ti->dtype));
	if (ck_mul_u64(row_bytes, n_elems / (uint64_t)ti->ne[0], &ti->n_bytes))
		return diag_set(c->d, ERR_OVERFLOW, "%s: byte size overflows", name);
	return 0;
}

struct range {
	uint64_t begin, end;
	int64_t idx;
};

static int range_cmp(const void *a, const void *b)
{
	const struct range *x = a, *y = b;
	return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

static size_t natural_align(enum dtype t)
{
	return t == DT_F32 ? 4 : 2;
}

/* Place each tensor in the data section and check it lies inside the file,
 * is aligned, and overlaps no other tensor. */
static int place_tensors(struct gguf_file *f, size_t data_start, struct diag *d)
{
	struct range *r = malloc((size_t)(f->n_tensors ? f->n_tensors : 1) * sizeof *r);
	if (!r)
		return diag_set(d, ERR_NOMEM, "gguf: out of memory");
	int rc = 0;
	for (int64_t i = 0; i < f->n_tensors && !rc; i++) {
		struct gguf_tensor_info *ti = &f->tensors[i];
		uint64_t rel = ti->offset, abs_off, end;
		if (rel % f->alignment)
			rc = diag_set(d, ERR_FORMAT, "%s: data offset %llu is not a multiple of the alignment %zu",
				      ti->name, (unsigned long long)rel, f->alignment);
		else if (ck_add_u64(data_start, rel, &abs_off) || ck_add_u64(abs_off, ti->n_bytes, &end) ||
			 end > f->size)
			rc = diag_set(d, ERR_FORMAT, "%s: data (offset %llu, %llu bytes) runs past the end of the file (%zu bytes)",
				      ti->name, (unsigned long long)rel, (unsigned long long)ti->n_bytes,
				      f->size);
		else if (((uintptr_t)(f->data + abs_off)) % natural_align(ti->dtype))
			rc = diag_set(d, ERR_FORMAT, "%s: data is misaligned for %s", ti->name,
				      dtype_name(ti->dtype));
		else {
			ti->offset = abs_off;
			ti->data = f->data + abs_off;
			r[i] = (struct range){ abs_off, end, i };
		}
	}
	if (!rc && f->n_tensors > 1) {
		qsort(r, (size_t)f->n_tensors, sizeof *r, range_cmp);
		for (int64_t i = 1; i < f->n_tensors && !rc; i++)
			if (r[i].begin < r[i - 1].end)
				rc = diag_set(d, ERR_FORMAT, "gguf: tensors %s and %s overlap",
					      f->tensors[r[i - 1].idx].name, f->tensors[r[i].idx].name);
	}
	free(r);
	return rc;
}

/* ---- open ------------------------------------------------------------------ */

static int build_index(struct name_idx **out, int64_t n, const char *(*get)(const struct gguf_file *, int64_t),
		       const struct gguf_file *f, const char *what, struct diag *d)
{
	struct name_idx *idx = malloc((size_t)(n ? n : 1) * sizeof *idx);
	if (!idx)
		return diag_set(d, ERR_NOMEM, "gguf: out of memory");
	for (int64_t i = 0; i < n; i++)
		idx[i] = (struct name_idx){ get(f, i), i };
	qsort(idx, (size_t)n, sizeof *idx, name_cmp);
	*out = idx;
	for (int64_t i = 1; i < n; i++)
		if (!strcmp(idx[i].name, idx[i - 1].name))
			return diag_set(d, ERR_FORMAT, "gguf: duplicate %s '%s'", what, idx[i].name);
	return 0;
}

static const char *tensor_name_at(const struct gguf_file *f, int64_t i)
{
	return f->tensors[i].name;
}

static int parse(struct gguf_file *f, struct diag *d)
{
	struct cur c = { f->data, f->size, 0, d };
	uint32_t magic, version;
	uint64_t n_tensors, n_kv;
	int rc;
	if (f->size < 4 || (memcpy(&magic, f->data, 4), magic != GGUF_MAGIC))
		return diag_set(d, ERR_FORMAT, "not a GGUF file (bad magic)");
	c.pos = 4;
	if ((rc = cur_u32(&c, &version, "version")))
		return rc;
	if (version == 1)
		return diag_set(d, ERR_UNSUPPORTED, "gguf: version 1 is not supported (re-convert the model)");
	if (version != 2 && version != 3) {
		if ((version & 0xffff) == 0)
			return diag_set(d, ERR_UNSUPPORTED, "gguf: big-endian files are not supported");
		return diag_set(d, ERR_UNSUPPORTED, "gguf: version %u is not supported", version);
	}
	f->version = version;
	if ((rc = cur_u64(&c, &n_tensors, "tensor count")) || (rc = cur_u64(&c, &n_kv, "key count")))
		return rc;
	/* A key-value pair takes at least 8 (key length) + 1 (key) + 4 (type) + 1
	 * bytes; a tensor info at least 8 + 1 + 4 + 8 + 4 + 8. */
	if (n_kv > cur_left(&c) / 14)
		return diag_set(d, ERR_FORMAT, "gguf: %llu keys cannot fit in a %zu-byte file",
				(unsigned long long)n_kv, f->size);
	if (n_tensors > cur_left(&c) / 33)
		return diag_set(d, ERR_FORMAT, "gguf: %llu tensors cannot fit in a %zu-byte file",
				(unsigned long long)n_tensors, f->size);
	f->kv = calloc((size_t)(n_kv ? n_kv : 1), sizeof *f->kv);
	f->tensors = calloc((size_t)(n_tensors ? n_tensors : 1), sizeof *f->tensors);
	if (!f->kv || !f->tensors)
		return diag_set(d, ERR_NOMEM, "gguf: out of memory");
	f->alignment = GGUF_DEFAULT_ALIGNMENT;
	for (uint64_t i = 0; i < n_kv; i++) {
		struct gguf_kv *kv = &f->kv[i];
		f->n_kv = (int64_t)i + 1; /* so close() frees what was parsed */
		if ((rc = cur_name(&c, &kv->key, "key")) || (rc = parse_value(&c, kv)))
			return rc;
		if (!strcmp(kv->key, "general.alignment")) {
			uint32_t a;
			if (kv->type != GGUF_TYPE_UINT32)
				return diag_set(d, ERR_FORMAT, "gguf: general.alignment must be a u32 (is %s)",
						gguf_type_name(kv->type));
			memcpy(&a, f->data + kv->off, 4);
			if (a == 0 || (a & (a - 1)))
				return diag_set(d, ERR_FORMAT, "gguf: general.alignment %u is not a power of two", a);
			f->alignment = a;
		}
	}
	for (uint64_t i = 0; i < n_tensors; i++) {
		f->n_tensors = (int64_t)i + 1;
		if ((rc = parse_tensor_info(&c, &f->tensors[i])))
			return rc;
	}
	if ((rc = build_index(&f->kv_sorted, f->n_kv, gguf_kv_key, f, "key", d)) ||
	    (rc = build_index(&f->t_sorted, f->n_tensors, tensor_name_at, f, "tensor name", d)))
		return rc;
	size_t data_start;
	if (ck_align_up(c.pos, f->alignment, &data_start))
		return diag_set(d, ERR_FORMAT, "gguf: data section start overflows");
	if (f->n_tensors > 0 && data_start > f->size)
		return diag_set(d, ERR_FORMAT, "gguf: data section starts past the end of the file");
	return place_tensors(f, data_start, d);
}

static int open_common(struct gguf_file *f, struct gguf_file **out, struct diag *d)
{
	int rc = parse(f, d);
	if (rc) {
		gguf_close(f);
		return rc;
	}
	*out = f;
	return 0;
}

int gguf_open_mem(const void *data, size_t size, struct gguf_file **out, struct diag *d)
{
	struct gguf_file *f = calloc(1, sizeof *f);
	if (!f)
		return diag_set(d, ERR_NOMEM, "gguf: out of memory");
	f->data = data;
	f->size = size;
	return open_common(f, out, d);
}

int gguf_open(const char *path, struct gguf_file **out, struct diag *d)
{
	const void *p;
	size_t size;
	int rc = mapfile_open(path, 24, "GGUF", &p, &size, d);
	if (rc)
		return rc;
	struct gguf_file *f = calloc(1, sizeof *f);
	if (!f) {
		mapfile_close(p, size);
		return diag_set(d, ERR_NOMEM, "gguf: out of memory");
	}
	f->data = p;
	f->size = size;
	f->mapped = true;
	return open_common(f, out, d);
}

void gguf_close(struct gguf_file *f)
{
	if (!f)
		return;
	for (int64_t i = 0; i < f->n_kv; i++) {
		free(f->kv[i].key);
		free(f->kv[i].str_offs);
	}
	for (int64_t i = 0; i < f->n_tensors; i++)
		free((char *)f->tensors[i].name);
	free(f->kv);
	free(f->tensors);
	free(f->kv_sorted);
	free(f->t_sorted);
	if (f->mapped)
		mapfile_close(f->data, f->size);
	free(f);
}

/* ---- simple accessors ------------------------------------------------------ */

uint32_t gguf_version(const struct gguf_file *f) { return f->version; }
size_t gguf_alignment(const struct gguf_file *f) { return f->alignment; }
uint64_t gguf_file_size(const struct gguf_file *f) { return f->size; }
int64_t gguf_n_kv(const struct gguf_file *f) { return f->n_kv; }
int64_t gguf_n_tensors(const struct gguf_file *f) { return f->n_tensors; }

const char *gguf_kv_key(const struct gguf_file *f, int64_t i)
{
	return (i >= 0 && i < f->n_kv) ? f->kv[i].key : NULL;
}

enum gguf_type gguf_kv_type(const struct gguf_file *f, int64_t i)
{
	return (i >= 0 && i < f->n_kv) ? f->kv[i].type : GGUF_TYPE__COUNT;
}

int64_t gguf_find_key(const struct gguf_file *f, const char *key)
{
	return name_find(f->kv_sorted, f->n_kv, key);
}

const struct gguf_tensor_info *gguf_tensor(const struct gguf_file *f, int64_t i)
{
	return (i >= 0 && i < f->n_tensors) ? &f->tensors[i] : NULL;
}

const struct gguf_tensor_info *gguf_find_tensor(const struct gguf_file *f, const char *name)
{
	int64_t i = name_find(f->t_sorted, f->n_tensors, name);
	return i < 0 ? NULL : &f->tensors[i];
}
