/* engine/model/safetensors.c — safetensors reader (single file and sharded sets)
 * and writer.
 *
 * The JSON header is parsed with cJSON after its length is bounded by the
 * format's 100 MB limit and by the file size; each entry is then validated
 * (dtype, integral shape, offsets, size = product * element size, no overlap,
 * unique UTF-8 names) before any tensor pointer is formed. Shard file names
 * from an index must be plain names inside the directory (no '/', no "..").
 * Tests: tests/models/test_safetensors.c; fuzz: tests/fuzz/fuzz_safetensors.c.
 */
#include "engine/model/safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/checked.h"
#include "common/mapfile.h"
#include "common/utf8.h"

struct name_idx {
	const char *name;
	int64_t idx;
};

struct st_file {
	const uint8_t *data;
	size_t size;
	bool mapped;
	int64_t n;
	struct st_tensor *t;
	struct name_idx *sorted;
};

static const struct {
	const char *name;
	enum dtype dt;
	size_t size;
} st_dtypes[] = {
	{ "F32", DT_F32, 4 },
	{ "F16", DT_F16, 2 },
	{ "BF16", DT_BF16, 2 },
	{ "F8_E4M3", DT_F8_E4M3, 1 },
};
#define N_ST_DTYPES (sizeof st_dtypes / sizeof st_dtypes[0])

const char *st_dtype_name(enum dtype t)
{
	for (size_t i = 0; i < N_ST_DTYPES; i++)
		if (st_dtypes[i].dt == t)
			return st_dtypes[i].name;
	return NULL;
}

static size_t st_elem_size(enum dtype t)
{
	for (size_t i = 0; i < N_ST_DTYPES; i++)
		if (st_dtypes[i].dt == t)
			return st_dtypes[i].size;
	return 0;
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

/* An exact non-negative integer from a JSON number (<= 2^53). */
static bool json_uint(const cJSON *j, uint64_t *out)
{
	if (!cJSON_IsNumber(j))
		return false;
	double v = j->valuedouble;
	if (!isfinite(v) || v < 0 || v > 9007199254740992.0 || floor(v) != v)
		return false;
	*out = (uint64_t)v;
	return true;
}

/* ---- reader ---------------------------------------------------------------- */

static int parse_entry(const cJSON *e, struct st_tensor *t, uint64_t data_size, struct diag *d)
{
	const char *name = t->name;
	if (!cJSON_IsObject(e))
		return diag_set(d, ERR_FORMAT, "%s: header entry is not an object", name);
	const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
	const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
	const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
	if (!cJSON_IsString(jd) || !cJSON_IsArray(js) || !cJSON_IsArray(jo))
		return diag_set(d, ERR_FORMAT, "%s: entry needs dtype, shape and data_offsets", name);
	size_t es = 0;
	for (size_t i = 0; i < N_ST_DTYPES; i++)
		if (!strcmp(jd->valuestring, st_dtypes[i].name)) {
			t->dtype = st_dtypes[i].dt;
			es = st_dtypes[i].size;
		}
	if (!es) {
		char shown[32];
		snprintf(shown, sizeof shown, "%s", jd->valuestring);
		if (!utf8_valid(shown, strlen(shown)))
			snprintf(shown, sizeof shown, "(invalid)");
		return diag_set(d, ERR_UNSUPPORTED, "%s: dtype %s is not supported", name, shown);
	}
	int nd = cJSON_GetArraySize(js);
	if (nd > ST_MAX_DIMS)
		return diag_set(d, ERR_UNSUPPORTED, "%s: %d dimensions (at most %d supported)", name, nd,
				ST_MAX_DIMS);
	t->n_dims = nd;
	uint64_t n_elems = 1;
	int i = 0;
	const cJSON *dim;
	cJSON_ArrayForEach(dim, js)
	{
		uint64_t v;
		if (!json_uint(dim, &v))
			return diag_set(d, ERR_FORMAT, "%s: shape[%d] is not a non-negative integer", name, i);
		if (ck_mul_u64(n_elems, v, &n_elems) || n_elems > INT64_MAX)
			return diag_set(d, ERR_OVERFLOW, "%s: the product of its dimensions overflows", name);
		t->shape[i++] = (int64_t)v;
	}
	t->n_elems = n_elems;
	if (ck_mul_u64(n_elems, es, &t->n_bytes))
		return diag_set(d, ERR_OVERFLOW, "%s: byte size overflows", name);
	uint64_t begin, end;
	if (cJSON_GetArraySize(jo) != 2 || !json_uint(cJSON_GetArrayItem(jo, 0), &begin) ||
	    !json_uint(cJSON_GetArrayItem(jo, 1), &end))
		return diag_set(d, ERR_FORMAT, "%s: data_offsets must be two non-negative integers", name);
	if (begin > end || end > data_size)
		return diag_set(d, ERR_FORMAT, "%s: data_offsets [%llu, %llu] outside the %llu data bytes",
				name, (unsigned long long)begin, (unsigned long long)end,
				(unsigned long long)data_size);
	if (end - begin != t->n_bytes)
		return diag_set(d, ERR_FORMAT, "%s: data_offsets span %llu bytes but shape and dtype need %llu",
				name, (unsigned long long)(end - begin), (unsigned long long)t->n_bytes);
	t->data = (const void *)(uintptr_t)begin; /* relative for now; rebased by the caller */
	return 0;
}

struct span {
	uint64_t begin, end;
	int64_t idx;
};

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;
	return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

static int check_layout(struct st_file *f, const uint8_t *base, struct diag *d)
{
	struct span *sp = malloc((size_t)(f->n ? f->n : 1) * sizeof *sp);
	if (!sp)
		return diag_set(d, ERR_NOMEM, "safetensors: out of memory");
	int rc = 0;
	for (int64_t i = 0; i < f->n; i++) {
		uint64_t b = (uint64_t)(uintptr_t)f->t[i].data;
		sp[i] = (struct span){ b, b + f->t[i].n_bytes, i };
		f->t[i].data = base + b;
		size_t nat = st_elem_size(f->t[i].dtype);
		if (!rc && f->t[i].n_bytes && ((uintptr_t)f->t[i].data) % nat)
			rc = diag_set(d, ERR_FORMAT, "%s: data is misaligned for %s", f->t[i].name,
				      st_dtype_name(f->t[i].dtype));
	}
	if (!rc && f->n > 1) {
		qsort(sp, (size_t)f->n, sizeof *sp, span_cmp);
		for (int64_t i = 1; i < f->n && !rc; i++)
			if (sp[i].begin < sp[i - 1].end)
				rc = diag_set(d, ERR_FORMAT, "safetensors: tensors %s and %s overlap",
					      f->t[sp[i - 1].idx].name, f->t[sp[i].idx].name);
	}
	free(sp);
	return rc;
}

static int parse_header(struct st_file *f, struct diag *d)
{
	uint64_t hlen;
	if (f->size < 8)
		return diag_set(d, ERR_FORMAT, "safetensors: file of %zu bytes is truncated", f->size);
	memcpy(&hlen, f->data, 8);
	if (hlen > ST_MAX_HEADER)
		return diag_set(d, ERR_FORMAT, "safetensors: header of %llu bytes is over the 100 MB limit",
				(unsigned long long)hlen);
	if (hlen > f->size - 8)
		return diag_set(d, ERR_FORMAT, "safetensors: header of %llu bytes runs past the end of the file",
				(unsigned long long)hlen);
	if (hlen < 2 || f->data[8] != '{')
		return diag_set(d, ERR_FORMAT, "safetensors: header is not a JSON object");
	if (!utf8_valid((const char *)f->data + 8, (size_t)hlen))
		return diag_set(d, ERR_FORMAT, "safetensors: header is not valid UTF-8");
	if (memchr(f->data + 8, '\0', (size_t)hlen))
		return diag_set(d, ERR_FORMAT, "safetensors: header contains a NUL byte");
	cJSON *root = cJSON_ParseWithLength((const char *)f->data + 8, (size_t)hlen);
	if (!cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return diag_set(d, ERR_FORMAT, "safetensors: header is not valid JSON");
	}
	int rc = 0;
	int n_entries = cJSON_GetArraySize(root);
	f->t = calloc((size_t)(n_entries ? n_entries : 1), sizeof *f->t);
	if (!f->t)
		rc = diag_set(d, ERR_NOMEM, "safetensors: out of memory");
	uint64_t data_size = f->size - 8 - hlen;
	const cJSON *e;
	cJSON_ArrayForEach(e, root)
	{
		if (rc)
			break;
		if (!e->string || !*e->string) {
			rc = diag_set(d, ERR_FORMAT, "safetensors: empty tensor name");
			break;
		}
		if (!strcmp(e->string, "__metadata__")) {
			if (!cJSON_IsObject(e))
				rc = diag_set(d, ERR_FORMAT, "safetensors: __metadata__ is not an object");
			continue;
		}
		struct st_tensor *t = &f->t[f->n];
		t->name = strdup(e->string);
		if (!t->name) {
			rc = diag_set(d, ERR_NOMEM, "safetensors: out of memory");
			break;
		}
		f->n++;
		rc = parse_entry(e, t, data_size, d);
	}
	cJSON_Delete(root);
	if (rc)
		return rc;
	f->sorted = malloc((size_t)(f->n ? f->n : 1) * sizeof *f->sorted);
	if (!f->sorted)
		return diag_set(d, ERR_NOMEM, "safetensors: out of memory");
	for (int64_t i = 0; i < f->n; i++)
		f->sorted[i] = (struct name_idx){ f->t[i].name, i };
	qsort(f->sorted, (size_t)f->n, sizeof *f->sorted, name_cmp);
	for (int64_t i = 1; i < f->n; i++)
		if (!strcmp(f->sorted[i].name, f->sorted[i - 1].name))
			return diag_set(d, ERR_FORMAT, "safetensors: duplicate tensor name '%s'",
					f->sorted[i].name);
	return check_layout(f, f->data + 8 + hlen, d);
}

static int open_common(struct st_file *f, struct st_file **out, struct diag *d)
{
	int rc = parse_header(f, d);
	if (rc) {
		st_close(f);
		return rc;
	}
	*out = f;
	return 0;
}

int st_open_mem(const void *data, size_t size, struct st_file **out, struct diag *d)
{
	struct st_file *f = calloc(1, sizeof *f);
	if (!f)
		return diag_set(d, ERR_NOMEM, "safetensors: out of memory");
	f->data = data;
	f->size = size;
	return open_common(f, out, d);
}

int st_open(const char *path, struct st_file **out, struct diag *d)
{
	const void *p;
	size_t size;
	int rc = mapfile_open(path, 10, "safetensors", &p, &size, d);
	if (rc)
		return rc;
	struct st_file *f = calloc(1, sizeof *f);
	if (!f) {
		mapfile_close(p, size);
		return diag_set(d, ERR_NOMEM, "safetensors: out of memory");
	}
	f->data = p;
	f->size = size;
	f->mapped = true;
	rc = open_common(f, out, d);
	if (rc && d) {
		/* prefix the file name so a shard's error says which shard */
		char msg[sizeof d->msg];
		memcpy(msg, d->msg, sizeof msg);
		diag_set(d, rc, "%s: %s", path, msg);
	}
	return rc;
}

void st_close(struct st_file *f)
{
	if (!f)
		return;
	for (int64_t i = 0; i < f->n; i++)
		free((char *)f->t[i].name);
	free(f->t);
	free(f->sorted);
	if (f->mapped)
		mapfile_close(f->data, f->size);
	free(f);
}

int64_t st_n_tensors(const struct st_file *f) { return f->n; }

const struct st_tensor *st_tensor_at(const struct st_file *f, int64_t i)
{
	return (i >= 0 && i < f->n) ? &f->t[i] : NULL;
}

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
	int64_t i = name_find(f->sorted, f->n, name);
	return i < 0 ? NULL : &f->t[i];
}

/* ---- sets (directories) ---------------------------------------------------- */

struct st_set {
	int n_files;
	struct st_file **files;
	int64_t n;
	const struct st_tensor **t;
	struct name_idx *sorted;
};

void st_set_close(struct st_set *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->n_files; i++)
		st_close(s->files[i]);
	free(s->files);
	free(s->t);
	free(s->sorted);
	free(s);
}

int st_set_n_files(const struct st_set *s) { return s->n_files; }
int64_t st_set_n_tensors(const struct st_set *s) { return s->n; }

const struct st_tensor *st_set_tensor_at(const struct st_set *s, int64_t i)
{
	return (i >= 0 && i < s->n) ? s->t[i] : NULL;
}

const struct st_tensor *st_set_find(const struct st_set *s, const char *name)
{
	int64_t i = name_find(s->sorted, s->n, name);
	return i < 0 ? NULL : s->t[i];
}

static bool plain_shard_name(const char *s)
{
	size_t n = strlen(s);
	return n > 12 && n < 256 && !strchr(s, '/') && !strchr(s, '\\') && s[0] != '.' &&
	       !strcmp(s + n - 12, ".safetensors");
}

static int add_file(struct st_set *s, const char *dir, const char *name, struct diag *d)
{
	struct st_file **nf = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *nf);
	if (!nf)
		return diag_set(d, ERR_NOMEM, "out of memory");
	s->files = nf;
	char path[4096];
	if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
		return diag_set(d, ERR_INVAL, "%s: path too long", dir);
	int rc = st_open(path, &s->files[s->n_files], d);
	if (!rc)
		s->n_files++;
	return rc;
}

/* Shards named by an index's weight_map (each distinct file once). */
static int open_index(struct st_set *s, const char *dir, const char *index_path, struct diag *d)
{
	char *text;
	size_t len;
	int rc = mapfile_read(index_path, 64u << 20, &text, &len, d);
	if (rc)
		return rc;
	cJSON *root = cJSON_ParseWithLength(text, len);
	free(text);
	const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
	if (!cJSON_IsObject(map)) {
		cJSON_Delete(root);
		return diag_set(d, ERR_FORMAT, "%s: no weight_map object", index_path);
	}
	const cJSON *e;
	cJSON_ArrayForEach(e, map)
	{
		if (!cJSON_IsString(e) || !plain_shard_name(e->valuestring)) {
			rc = diag_set(d, ERR_FORMAT, "%s: weight_map entry for '%s' is not a plain *.safetensors name",
				      index_path, e->string ? e->string : "?");
			break;
		}
		bool seen = false;
		for (const cJSON *p = map->child; p != e; p = p->next)
			if (!strcmp(p->valuestring, e->valuestring))
				seen = true;
		if (!seen && (rc = add_file(s, dir, e->valuestring, d)))
			break;
	}
	/* Every tensor the index names must be in the shard it names. */
	for (const cJSON *p = rc ? NULL : map->child; p && !rc; p = p->next) {
		bool found = false;
		for (int i = 0; i < s->n_files && !found; i++) {
			found = st_find(s->files[i], p->string) != NULL;
		}
		if (!found)
			rc = diag_set(d, ERR_FORMAT, "%s: tensor '%s' is not in %s", index_path, p->string,
				      p->valuestring);
	}
	cJSON_Delete(root);
	return rc;
}

static int open_single(struct st_set *s, const char *dir, struct diag *d)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	if (access(path, R_OK) == 0)
		return add_file(s, dir, "model.safetensors", d);
	DIR *dd = opendir(dir);
	if (!dd)
		return diag_set(d, ERR_IO, "%s: cannot open directory", dir);
	char found[256] = "";
	int n = 0;
	struct dirent *de;
	while ((de = readdir(dd))) {
		if (plain_shard_name(de->d_name)) {
			n++;
			snprintf(found, sizeof found, "%s", de->d_name);
		}
	}
	closedir(dd);
	if (n == 0)
		return diag_set(d, ERR_NOTFOUND, "%s: no *.safetensors file", dir);
	if (n > 1)
		return diag_set(d, ERR_FORMAT, "%s: %d *.safetensors files but no model.safetensors.index.json",
				dir, n);
	return add_file(s, dir, found, d);
}

int st_set_open(const char *dir, struct st_set **out, struct diag *d)
{
	if (strlen(dir) > 3000)
		return diag_set(d, ERR_INVAL, "model directory path is too long");
	struct st_set *s = calloc(1, sizeof *s);
	if (!s)
		return diag_set(d, ERR_NOMEM, "out of memory");
	char index_path[4096];
	snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", dir);
	int rc = access(index_path, R_OK) == 0 ? open_index(s, dir, index_path, d)
					       : open_single(s, dir, d);
	int64_t total = 0;
	for (int i = 0; i < s->n_files && !rc; i++)
		if (ck_add_u64((uint64_t)total, (uint64_t)s->files[i]->n, (uint64_t *)&total))
			rc = ERR_OVERFLOW;
	if (!rc) {
		s->t = malloc((size_t)(total ? total : 1) * sizeof *s->t);
		s->sorted = malloc((size_t)(total ? total : 1) * sizeof *s->sorted);
		if (!s->t || !s->sorted)
			rc = diag_set(d, ERR_NOMEM, "out of memory");
	}
	for (int i = 0; i < s->n_files && !rc; i++)
		for (int64_t j = 0; j < s->files[i]->n; j++) {
			s->sorted[s->n] = (struct name_idx){ s->files[i]->t[j].name, s->n };
			s->t[s->n++] = &s->files[i]->t[j];
		}
	if (!rc) {
		qsort(s->sorted, (size_t)s->n, sizeof *s->sorted, name_cmp);
		for (int64_t i = 1; i < s->n && !rc; i++)
			if (!strcmp(s->sorted[i].name, s->sorted[i - 1].name))
				rc = diag_set(d, ERR_FORMAT, "%s: tensor '%s' is in two shards", dir,
					      s->sorted[i].name);
	}
	if (rc) {
		st_set_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

/* ---- writer ---------------------------------------------------------------- */

struct st_wtensor {
	char *name;
	enum dtype dtype;
	int n_dims;
	int64_t shape[ST_MAX_DIMS];
	const void *data;
	uint64_t n_bytes;
};

struct st_writer {
	struct st_wtensor *t;
	size_t n, cap;
	cJSON *meta;
	size_t *order; /* data order: wider elements first, so each stays aligned */
};

/* Lay the data out widest element type first (as the reference writer does):
 * with an 8-aligned header every tensor is then naturally aligned. */
static int plan_order(struct st_writer *w)
{
	free(w->order);
	w->order = malloc((w->n ? w->n : 1) * sizeof *w->order);
	if (!w->order)
		return ERR_NOMEM;
	size_t k = 0;
	for (size_t es = 8; es >= 1; es /= 2)
		for (size_t i = 0; i < w->n; i++)
			if (st_elem_size(w->t[i].dtype) == es)
				w->order[k++] = i;
	return 0;
}

int st_writer_create(struct st_writer **out)
{
	struct st_writer *w = calloc(1, sizeof *w);
	if (!w)
		return ERR_NOMEM;
	*out = w;
	return 0;
}

void st_writer_destroy(struct st_writer *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < w->n; i++)
		free(w->t[i].name);
	free(w->t);
	free(w->order);
	cJSON_Delete(w->meta);
	free(w);
}

int st_writer_add(struct st_writer *w, const char *name, enum dtype dtype, int n_dims,
		  const int64_t *shape, const void *data, uint64_t n_bytes)
{
	size_t es = st_elem_size(dtype);
	if (!name || !*name || !strcmp(name, "__metadata__") || !es || n_dims < 0 ||
	    n_dims > ST_MAX_DIMS)
		return ERR_INVAL;
	uint64_t n = es;
	for (int i = 0; i < n_dims; i++)
		if (shape[i] < 0 || ck_mul_u64(n, (uint64_t)shape[i], &n))
			return ERR_INVAL;
	if (n != n_bytes)
		return ERR_INVAL;
	for (size_t i = 0; i < w->n; i++)
		if (!strcmp(w->t[i].name, name))
			return ERR_INVAL;
	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 64;
		struct st_wtensor *nt = realloc(w->t, cap * sizeof *nt);
		if (!nt)
			return ERR_NOMEM;
		w->t = nt;
		w->cap = cap;
	}
	struct st_wtensor *t = &w->t[w->n];
	if (!(t->name = strdup(name)))
		return ERR_NOMEM;
	t->dtype = dtype;
	t->n_dims = n_dims;
	for (int i = 0; i < n_dims; i++)
		t->shape[i] = shape[i];
	t->data = data;
	t->n_bytes = n_bytes;
	w->n++;
	return 0;
}

int st_writer_set_meta(struct st_writer *w, const char *key, const char *value)
{
	if (!w->meta && !(w->meta = cJSON_CreateObject()))
		return ERR_NOMEM;
	cJSON_DeleteItemFromObjectCaseSensitive(w->meta, key);
	return cJSON_AddStringToObject(w->meta, key, value) ? 0 : ERR_NOMEM;
}

/* The header JSON, padded with spaces to a multiple of 8 bytes so the data
 * that follows is 8-byte aligned (as the reference writer does). */
static int build_header(struct st_writer *w, char **out, size_t *len)
{
	cJSON *root = cJSON_CreateObject();
	if (!root)
		return ERR_NOMEM;
	int rc = 0;
	if (w->meta) {
		cJSON *m = cJSON_Duplicate(w->meta, 1);
		if (!m || !cJSON_AddItemToObject(root, "__metadata__", m))
			rc = ERR_NOMEM;
	}
	uint64_t off = 0;
	for (size_t k = 0; k < w->n && !rc; k++) {
		const struct st_wtensor *t = &w->t[w->order[k]];
		cJSON *e = cJSON_AddObjectToObject(root, t->name);
		cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
		cJSON *offs = e ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
		if (!e || !shape || !offs || !cJSON_AddStringToObject(e, "dtype", st_dtype_name(t->dtype))) {
			rc = ERR_NOMEM;
			break;
		}
		for (int j = 0; j < t->n_dims; j++)
			cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[j]));
		cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
		off += t->n_bytes;
		cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
	}
	char *s = rc ? NULL : cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	if (!s)
		return ERR_NOMEM;
	size_t n = strlen(s), padded = (n + 7) & ~(size_t)7;
	char *p = realloc(s, padded + 1);
	if (!p) {
		free(s);
		return ERR_NOMEM;
	}
	memset(p + n, ' ', padded - n);
	p[padded] = '\0';
	*out = p;
	*len = padded;
	return 0;
}

static int emit(struct st_writer *w, FILE *fp, struct buf *b)
{
	char *hdr;
	size_t hlen;
	int rc = plan_order(w);
	if (rc || (rc = build_header(w, &hdr, &hlen)))
		return rc;
	uint64_t h = hlen;
	if (fp) {
		if (fwrite(&h, 8, 1, fp) != 1 || fwrite(hdr, 1, hlen, fp) != hlen)
			rc = ERR_IO;
		for (size_t k = 0; k < w->n && !rc; k++) {
			const struct st_wtensor *t = &w->t[w->order[k]];
			if (t->n_bytes && fwrite(t->data, 1, (size_t)t->n_bytes, fp) != t->n_bytes)
				rc = ERR_IO;
		}
	} else {
		rc = buf_append(b, &h, 8);
		if (!rc)
			rc = buf_append(b, hdr, hlen);
		for (size_t k = 0; k < w->n && !rc; k++) {
			const struct st_wtensor *t = &w->t[w->order[k]];
			if (t->n_bytes)
				rc = buf_append(b, t->data, (size_t)t->n_bytes);
		}
	}
	free(hdr);
	return rc;
}

int st_writer_write(struct st_writer *w, const char *path, struct diag *d)
{
	FILE *fp = fopen(path, "wb");
	if (!fp)
		return diag_set(d, ERR_IO, "%s: cannot create", path);
	int rc = emit(w, fp, NULL);
	if (fclose(fp) && !rc)
		rc = ERR_IO;
	if (rc) {
		remove(path);
		return diag_set(d, rc, "%s: write failed (%s)", path, err_str(rc));
	}
	return 0;
}

int st_writer_write_mem(struct st_writer *w, void **out, size_t *len)
{
	struct buf b;
	buf_init(&b);
	int rc = emit(w, NULL, &b);
	if (rc) {
		buf_deinit(&b);
		return rc;
	}
	*out = buf_take(&b, len);
	return *out ? 0 : ERR_NOMEM;
}
