/* engine/model/gguf.h — GGUF files (v2 and v3): a validating reader over a memory
 * mapping, and a writer (used by tests, the test-model generator and
 * quantization).
 *
 * Reader: gguf_open() maps the file and checks every count, length, offset,
 * dimension and size against the file size before anything is used; after it
 * returns 0 every getter below is O(1) (or O(log n) for lookups by name) and
 * cannot read outside the mapping. The handle is read-only once open, so any
 * thread may call the getters concurrently. Tensor types F32, F16, BF16 and
 * Q8_0 are accepted; any other type is refused at open time with a message
 * naming the tensor and the type ("blk.0.attn_q.weight: type Q4_K is not
 * supported").
 *
 * Ownership: every pointer a getter returns (keys, strings, tensor names and
 * data) is borrowed from the handle and valid until gguf_close(). Strings
 * stored in the file are NOT NUL-terminated: they come as pointer + length.
 * Keys and tensor names ARE NUL-terminated copies (validated UTF-8, no NUL).
 *
 * Writer: build a file in memory-described form (keys, then tensors) and write
 * it in one go. Tensor data passed to gguf_writer_add_tensor() is borrowed and
 * must stay valid until gguf_writer_write*() returns. One thread per writer.
 *
 * Tests: tests/models/test_gguf.c (round trips, corruption suite),
 * tests/fuzz/fuzz_gguf.c (libFuzzer).
 */
#ifndef AORTA_ENGINE_MODEL_GGUF_H
#define AORTA_ENGINE_MODEL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "kernels/dtype.h"

/* Metadata value types, numbered as in the file. */
enum gguf_type {
	GGUF_TYPE_UINT8 = 0,
	GGUF_TYPE_INT8 = 1,
	GGUF_TYPE_UINT16 = 2,
	GGUF_TYPE_INT16 = 3,
	GGUF_TYPE_UINT32 = 4,
	GGUF_TYPE_INT32 = 5,
	GGUF_TYPE_FLOAT32 = 6,
	GGUF_TYPE_BOOL = 7,
	GGUF_TYPE_STRING = 8,
	GGUF_TYPE_ARRAY = 9,
	GGUF_TYPE_UINT64 = 10,
	GGUF_TYPE_INT64 = 11,
	GGUF_TYPE_FLOAT64 = 12,
	GGUF_TYPE__COUNT
};

/* ggml tensor types that aorta reads (numbered as in ggml). */
enum {
	GGML_TYPE_F32 = 0,
	GGML_TYPE_F16 = 1,
	GGML_TYPE_Q8_0 = 8,
	GGML_TYPE_BF16 = 30,
};

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

struct gguf_file;

struct gguf_tensor_info {
	const char *name;	       /* NUL-terminated, owned by the handle */
	uint32_t ggml_type;	       /* GGML_TYPE_* */
	enum dtype dtype;	       /* DT_F32, DT_F16, DT_BF16 or DT_Q8_0 */
	int n_dims;		       /* 1..4 */
	int64_t ne[GGUF_MAX_DIMS];     /* innermost-first, as in the file; 1 past n_dims */
	int64_t shape[GGUF_MAX_DIMS];  /* outermost-first (reversed ne); 0 past n_dims */
	uint64_t n_elems;
	uint64_t offset;	       /* from the start of the file */
	uint64_t n_bytes;
	const void *data;	       /* inside the mapping */
};

/* ---- reader ---------------------------------------------------------------- */

/* Map and validate a file. On failure returns ERR_IO / ERR_FORMAT /
 * ERR_UNSUPPORTED / ERR_OVERFLOW / ERR_NOMEM and one line in d. */
int gguf_open(const char *path, struct gguf_file **out, struct diag *d);
/* The same over a caller's buffer (borrowed: it must outlive the handle). */
int gguf_open_mem(const void *data, size_t size, struct gguf_file **out, struct diag *d);
void gguf_close(struct gguf_file *f);

uint32_t gguf_version(const struct gguf_file *f);
size_t gguf_alignment(const struct gguf_file *f);
uint64_t gguf_file_size(const struct gguf_file *f);
const char *gguf_type_name(enum gguf_type t);	  /* "u32", "string", "array", ... */
const char *gguf_ggml_type_name(uint32_t ggml_type); /* "F16", "Q4_K", ...; "?" if unknown */

/* Metadata, by index [0, gguf_n_kv) or by key. */
int64_t gguf_n_kv(const struct gguf_file *f);
const char *gguf_kv_key(const struct gguf_file *f, int64_t i);
enum gguf_type gguf_kv_type(const struct gguf_file *f, int64_t i);
/* Index of key, or -1 when absent. */
int64_t gguf_find_key(const struct gguf_file *f, const char *key);

/* Typed getters by key. Return 0, ERR_NOTFOUND when the key is absent, or
 * ERR_FORMAT when its type does not fit (integers are accepted from any
 * integer type whose value is in range; f32 also from f64; bool only from
 * bool). *out is untouched on error. */
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out);
int gguf_get_i32(const struct gguf_file *f, const char *key, int32_t *out);
int gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out);
int gguf_get_f32(const struct gguf_file *f, const char *key, float *out);
int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out);
/* A string value: pointer into the mapping + length, not NUL-terminated. */
int gguf_get_str(const struct gguf_file *f, const char *key, const char **s, size_t *len);

/* Arrays, by key. gguf_get_arr gives the element type and the count. */
int gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_type *elem_type,
		 uint64_t *n);
/* The i-th string of a string array, without copying (O(1)). */
int gguf_arr_str(const struct gguf_file *f, const char *key, uint64_t i, const char **s,
		 size_t *len);
/* Copy a numeric array converting to int32 / float (n must equal the array's
 * count). Integer elements out of int32 range give ERR_RANGE. */
int gguf_arr_read_i32(const struct gguf_file *f, const char *key, int32_t *out, uint64_t n);
int gguf_arr_read_f32(const struct gguf_file *f, const char *key, float *out, uint64_t n);

/* Tensors, in file order. */
int64_t gguf_n_tensors(const struct gguf_file *f);
const struct gguf_tensor_info *gguf_tensor(const struct gguf_file *f, int64_t i);
/* NULL when absent. */
const struct gguf_tensor_info *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* ---- writer ---------------------------------------------------------------- */

struct gguf_writer;

/* version 2 or 3 (3 is what llama.cpp writes today). */
int gguf_writer_create(uint32_t version, struct gguf_writer **out);
void gguf_writer_destroy(struct gguf_writer *w);

/* Keys are copied. Setting a key twice replaces the value. "general.alignment"
 * (u32, a power of two) also sets the alignment the writer uses. */
int gguf_writer_set_u8(struct gguf_writer *w, const char *key, uint8_t v);
int gguf_writer_set_i8(struct gguf_writer *w, const char *key, int8_t v);
int gguf_writer_set_u16(struct gguf_writer *w, const char *key, uint16_t v);
int gguf_writer_set_i16(struct gguf_writer *w, const char *key, int16_t v);
int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_set_i64(struct gguf_writer *w, const char *key, int64_t v);
int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
int gguf_writer_set_f64(struct gguf_writer *w, const char *key, double v);
int gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *s);
int gguf_writer_set_strn(struct gguf_writer *w, const char *key, const char *s, size_t len);
/* Numeric arrays: elem_type a fixed-size type (not STRING/ARRAY); data holds
 * n elements in host (little-endian) layout and is copied. */
int gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type elem_type,
			const void *data, uint64_t n);
/* String arrays: strs[i] of lens[i] bytes (lens NULL: NUL-terminated); copied. */
int gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *strs,
			    const size_t *lens, uint64_t n);

/* Add a tensor: shape outermost-first (as in struct tensor), dtype one of
 * DT_F32/F16/BF16/Q8_0; data holds exactly the bytes of that shape and dtype
 * (borrowed until the write). Duplicate names give ERR_INVAL. */
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum dtype dtype, int n_dims,
			   const int64_t *shape, const void *data, uint64_t n_bytes);

int gguf_writer_write(struct gguf_writer *w, const char *path, struct diag *d);
/* Write to a malloc'd buffer (the caller frees it). */
int gguf_writer_write_mem(struct gguf_writer *w, void **buf, size_t *len);

/* Quantize n floats (a multiple of 32) to Q8_0 blocks, llama.cpp's way:
 * d = max|x| / 127, q = round(x / d), d stored as F16. out holds n/32 blocks. */
void gguf_quantize_q8_0(const float *x, uint64_t n, struct q8_0_block *out);

#endif
