/* engine/model/safetensors.h — safetensors files: a validating reader over a memory
 * mapping (one file, or a sharded set through model.safetensors.index.json)
 * and a small writer (tests and the test-model generator).
 *
 * Format: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {..}},
 * then the data; offsets are relative to the end of the header. The header is
 * bounded (ST_MAX_HEADER) and every entry is checked: dtype known, shape
 * integral, offsets inside the data and consistent with shape * dtype size,
 * no two tensors overlapping, names valid UTF-8 and unique. Accepted dtypes:
 * F32, F16, BF16, F8_E4M3; any other is refused naming the tensor
 * ("lm_head.weight: dtype I64 is not supported").
 *
 * Ownership: handles own their mappings; every pointer a getter returns is
 * borrowed and valid until st_close()/st_set_close(). Open handles are
 * read-only, so any thread may read them. Writers: one thread; tensor data is
 * borrowed until the write.
 * Tests: tests/models/test_safetensors.c; fuzz: tests/fuzz/fuzz_safetensors.c.
 */
#ifndef AORTA_ENGINE_MODEL_SAFETENSORS_H
#define AORTA_ENGINE_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "kernels/dtype.h"

#define ST_MAX_DIMS 4
#define ST_MAX_HEADER (100u << 20) /* the format's own limit: 100 MB */

struct st_tensor {
	const char *name; /* NUL-terminated, owned by the handle */
	enum dtype dtype; /* DT_F32, DT_F16, DT_BF16 or DT_F8_E4M3 */
	int n_dims;	  /* 0 (a scalar) .. 4 */
	int64_t shape[ST_MAX_DIMS]; /* outermost-first; 0 past n_dims */
	uint64_t n_elems;
	uint64_t n_bytes;
	const void *data; /* inside the mapping */
};

/* ---- one file ---- */
struct st_file;

int st_open(const char *path, struct st_file **out, struct diag *d);
/* Over a caller's buffer (borrowed: it must outlive the handle). */
int st_open_mem(const void *data, size_t size, struct st_file **out, struct diag *d);
void st_close(struct st_file *f);
int64_t st_n_tensors(const struct st_file *f);
const struct st_tensor *st_tensor_at(const struct st_file *f, int64_t i);
const struct st_tensor *st_find(const struct st_file *f, const char *name); /* NULL if absent */

/* ---- a model directory: model.safetensors.index.json, else model.safetensors,
 * else the single *.safetensors file in it ---- */
struct st_set;

int st_set_open(const char *dir, struct st_set **out, struct diag *d);
void st_set_close(struct st_set *s);
int st_set_n_files(const struct st_set *s);
int64_t st_set_n_tensors(const struct st_set *s);
const struct st_tensor *st_set_tensor_at(const struct st_set *s, int64_t i);
const struct st_tensor *st_set_find(const struct st_set *s, const char *name);

/* ---- writer ---- */
struct st_writer;

int st_writer_create(struct st_writer **out);
void st_writer_destroy(struct st_writer *w);
/* dtype one of the four above; shape outermost-first (n_dims 0..4); data
 * exactly n_elems * element size bytes, borrowed until the write. */
int st_writer_add(struct st_writer *w, const char *name, enum dtype dtype, int n_dims,
		  const int64_t *shape, const void *data, uint64_t n_bytes);
/* A "__metadata__" string entry (copied). */
int st_writer_set_meta(struct st_writer *w, const char *key, const char *value);
int st_writer_write(struct st_writer *w, const char *path, struct diag *d);
int st_writer_write_mem(struct st_writer *w, void **buf, size_t *len);

/* "F32", "F16", "BF16", "F8_E4M3" for the accepted dtypes; NULL otherwise. */
const char *st_dtype_name(enum dtype t);

#endif
