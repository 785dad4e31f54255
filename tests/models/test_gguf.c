/* tests/models/test_gguf.c — engine/model/gguf.c and gguf_write.c: writer -> reader
 * round trips (every metadata type, every tensor dtype, v2 and v3, custom
 * alignment) and the corruption suite: truncations at every length, huge
 * counts, overflowing dimension products, offsets past the end, misaligned
 * data, long strings, nested arrays, duplicates, bad UTF-8, unsupported types,
 * random byte flips. Each bad file must be refused with a message, and none
 * may crash (this suite also runs under ASan/UBSan).
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/gguf.h"

/* ---- a tiny byte builder for hand-made files ---- */
struct bb {
	uint8_t p[8192];
	size_t n;
};
static void put(struct bb *b, const void *x, size_t n)
{
	ck_assert_uint_le(b->n + n, sizeof b->p);
	memcpy(b->p + b->n, x, n);
	b->n += n;
}
static void u32(struct bb *b, uint32_t v) { put(b, &v, 4); }
static void u64(struct bb *b, uint64_t v) { put(b, &v, 8); }
static void str(struct bb *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }
static void header(struct bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
	b->n = 0;
	put(b, "GGUF", 4);
	u32(b, version);
	u64(b, n_tensors);
	u64(b, n_kv);
}
static void tinfo(struct bb *b, const char *name, uint32_t nd, const uint64_t *ne, uint32_t type,
		  uint64_t off)
{
	str(b, name);
	u32(b, nd);
	for (uint32_t i = 0; i < nd; i++)
		u64(b, ne[i]);
	u32(b, type);
	u64(b, off);
}
static void pad(struct bb *b, size_t align)
{
	while (b->n % align)
		b->p[b->n++] = 0;
}

/* Open bytes that must be refused with `want` (0: any error) and a message. */
static void expect_bad(const void *p, size_t n, int want, const char *msg_part)
{
	/* copy into a fresh 64-aligned buffer of exactly n bytes so ASan sees overreads */
	uint8_t *copy = aligned_alloc(64, (n + 63) / 64 * 64 + 64);
	memcpy(copy, p, n);
	struct gguf_file *f = NULL;
	struct diag d = { 0 };
	int rc = gguf_open_mem(copy, n, &f, &d);
	ck_assert_msg(rc < 0, "expected an error, got %d", rc);
	if (want)
		ck_assert_msg(rc == want, "rc %d (%s), want %d; msg: %s", rc, err_str(rc), want, d.msg);
	ck_assert_msg(d.msg[0] != '\0', "no message for rc %d", rc);
	if (msg_part)
		ck_assert_msg(strstr(d.msg, msg_part), "message '%s' lacks '%s'", d.msg, msg_part);
	free(copy);
}

static struct gguf_file *open_ok(const void *p, size_t n)
{
	struct gguf_file *f = NULL;
	struct diag d = { 0 };
	int rc = gguf_open_mem(p, n, &f, &d);
	ck_assert_msg(rc == 0, "open failed: %d %s", rc, d.msg);
	return f;
}

/* ---- round trips ---- */

START_TEST(test_metadata_roundtrip)
{
	for (uint32_t version = 2; version <= 3; version++) {
		struct gguf_writer *w;
		ck_assert_int_eq(gguf_writer_create(version, &w), 0);
		ck_assert_int_eq(gguf_writer_set_u8(w, "t.u8", 200), 0);
		ck_assert_int_eq(gguf_writer_set_i8(w, "t.i8", -100), 0);
		ck_assert_int_eq(gguf_writer_set_u16(w, "t.u16", 60000), 0);
		ck_assert_int_eq(gguf_writer_set_i16(w, "t.i16", -30000), 0);
		ck_assert_int_eq(gguf_writer_set_u32(w, "t.u32", 4000000000u), 0);
		ck_assert_int_eq(gguf_writer_set_i32(w, "t.i32", -2000000000), 0);
		ck_assert_int_eq(gguf_writer_set_u64(w, "t.u64", UINT64_MAX), 0);
		ck_assert_int_eq(gguf_writer_set_i64(w, "t.i64", -5), 0);
		ck_assert_int_eq(gguf_writer_set_f32(w, "t.f32", 1.5f), 0);
		ck_assert_int_eq(gguf_writer_set_f64(w, "t.f64", 0.25), 0);
		ck_assert_int_eq(gguf_writer_set_bool(w, "t.bool", true), 0);
		ck_assert_int_eq(gguf_writer_set_str(w, "t.str", "h\xc3\xa9llo"), 0);
		ck_assert_int_eq(gguf_writer_set_str(w, "t.str", "replaced"), 0);
		const char *strs[] = { "a", "", "\xc4\xa0the", "<|end|>" };
		ck_assert_int_eq(gguf_writer_set_arr_str(w, "t.strs", strs, NULL, 4), 0);
		int32_t iv[3] = { 1, -2, 3 };
		ck_assert_int_eq(gguf_writer_set_arr(w, "t.i32s", GGUF_TYPE_INT32, iv, 3), 0);
		float fv[2] = { 0.5f, -1.0f };
		ck_assert_int_eq(gguf_writer_set_arr(w, "t.f32s", GGUF_TYPE_FLOAT32, fv, 2), 0);
		uint64_t big[1] = { (uint64_t)1 << 40 };
		ck_assert_int_eq(gguf_writer_set_arr(w, "t.u64s", GGUF_TYPE_UINT64, big, 1), 0);
		ck_assert_int_eq(gguf_writer_set_arr(w, "t.empty", GGUF_TYPE_UINT8, NULL, 0), 0);
		void *buf;
		size_t len;
		ck_assert_int_eq(gguf_writer_write_mem(w, &buf, &len), 0);
		gguf_writer_destroy(w);

		struct gguf_file *f = open_ok(buf, len);
		ck_assert_uint_eq(gguf_version(f), version);
		ck_assert_int_eq(gguf_n_kv(f), 17);
		ck_assert_int_eq(gguf_n_tensors(f), 0);
		uint32_t u;
		int32_t i;
		uint64_t u6;
		float fl;
		bool b;
		ck_assert_int_eq(gguf_get_u32(f, "t.u8", &u), 0);
		ck_assert_uint_eq(u, 200);
		ck_assert_int_eq(gguf_get_i32(f, "t.i8", &i), 0);
		ck_assert_int_eq(i, -100);
		ck_assert_int_eq(gguf_get_u32(f, "t.i8", &u), ERR_RANGE); /* negative into unsigned */
		ck_assert_int_eq(gguf_get_u32(f, "t.u16", &u), 0);
		ck_assert_uint_eq(u, 60000);
		ck_assert_int_eq(gguf_get_i32(f, "t.i16", &i), 0);
		ck_assert_int_eq(i, -30000);
		ck_assert_int_eq(gguf_get_u32(f, "t.u32", &u), 0);
		ck_assert_uint_eq(u, 4000000000u);
		ck_assert_int_eq(gguf_get_i32(f, "t.u32", &i), ERR_RANGE);
		ck_assert_int_eq(gguf_get_i32(f, "t.i32", &i), 0);
		ck_assert_int_eq(i, -2000000000);
		ck_assert_int_eq(gguf_get_u64(f, "t.u64", &u6), 0);
		ck_assert_uint_eq(u6, UINT64_MAX);
		ck_assert_int_eq(gguf_get_u32(f, "t.u64", &u), ERR_RANGE);
		ck_assert_int_eq(gguf_get_i32(f, "t.i64", &i), 0);
		ck_assert_int_eq(i, -5);
		ck_assert_int_eq(gguf_get_f32(f, "t.f32", &fl), 0);
		ck_assert_float_eq(fl, 1.5f);
		ck_assert_int_eq(gguf_get_f32(f, "t.f64", &fl), 0);
		ck_assert_float_eq(fl, 0.25f);
		ck_assert_int_eq(gguf_get_f32(f, "t.u32", &fl), ERR_FORMAT);
		ck_assert_int_eq(gguf_get_bool(f, "t.bool", &b), 0);
		ck_assert(b);
		ck_assert_int_eq(gguf_get_bool(f, "t.u8", &b), ERR_FORMAT);
		ck_assert_int_eq(gguf_get_u32(f, "missing", &u), ERR_NOTFOUND);
		const char *s;
		size_t sl;
		ck_assert_int_eq(gguf_get_str(f, "t.str", &s, &sl), 0);
		ck_assert_uint_eq(sl, 8);
		ck_assert_int_eq(memcmp(s, "replaced", 8), 0);
		ck_assert_int_eq(gguf_get_str(f, "t.u8", &s, &sl), ERR_FORMAT);
		enum gguf_type et;
		uint64_t n;
		ck_assert_int_eq(gguf_get_arr(f, "t.strs", &et, &n), 0);
		ck_assert_int_eq(et, GGUF_TYPE_STRING);
		ck_assert_uint_eq(n, 4);
		for (uint64_t k = 0; k < 4; k++) {
			ck_assert_int_eq(gguf_arr_str(f, "t.strs", k, &s, &sl), 0);
			ck_assert_uint_eq(sl, strlen(strs[k]));
			ck_assert_int_eq(memcmp(s, strs[k], sl), 0);
		}
		ck_assert_int_eq(gguf_arr_str(f, "t.strs", 4, &s, &sl), ERR_RANGE);
		ck_assert_int_eq(gguf_arr_str(f, "t.i32s", 0, &s, &sl), ERR_FORMAT);
		int32_t iv2[3];
		ck_assert_int_eq(gguf_arr_read_i32(f, "t.i32s", iv2, 3), 0);
		ck_assert_int_eq(memcmp(iv, iv2, sizeof iv), 0);
		ck_assert_int_eq(gguf_arr_read_i32(f, "t.i32s", iv2, 2), ERR_FORMAT); /* wrong count */
		ck_assert_int_eq(gguf_arr_read_i32(f, "t.u64s", iv2, 1), ERR_RANGE);
		ck_assert_int_eq(gguf_arr_read_i32(f, "t.f32s", iv2, 2), ERR_FORMAT);
		float fv2[2];
		ck_assert_int_eq(gguf_arr_read_f32(f, "t.f32s", fv2, 2), 0);
		ck_assert_int_eq(memcmp(fv, fv2, sizeof fv), 0);
		ck_assert_int_eq(gguf_get_arr(f, "t.empty", &et, &n), 0);
		ck_assert_uint_eq(n, 0);
		/* keys in insertion order, found by index too */
		ck_assert_str_eq(gguf_kv_key(f, 0), "t.u8");
		ck_assert_int_eq(gguf_kv_type(f, 11), GGUF_TYPE_STRING);
		ck_assert_int_eq(gguf_find_key(f, "t.bool"), 10);
		ck_assert_int_eq(gguf_find_key(f, "nope"), -1);
		gguf_close(f);
		free(buf);
	}
}
END_TEST

static float val(int i)
{
	return sinf((float)i * 0.37f) * 3.0f;
}

START_TEST(test_tensor_roundtrip)
{
	const enum dtype types[] = { DT_F32, DT_F16, DT_BF16, DT_Q8_0 };
	for (int align_case = 0; align_case < 2; align_case++) {
		struct gguf_writer *w;
		ck_assert_int_eq(gguf_writer_create(3, &w), 0);
		if (align_case)
			ck_assert_int_eq(gguf_writer_set_u32(w, "general.alignment", 64), 0);
		const int rows = 3, cols = 64, n = rows * cols;
		float src[3 * 64];
		for (int i = 0; i < n; i++)
			src[i] = val(i);
		void *data[4];
		uint64_t nbytes[4];
		for (int t = 0; t < 4; t++) {
			uint64_t rb;
			ck_assert_int_eq(dtype_row_bytes(types[t], cols, &rb), 0);
			nbytes[t] = rb * rows;
			data[t] = malloc(nbytes[t]);
			for (int i = 0; i < n; i++) {
				if (types[t] == DT_F32)
					((float *)data[t])[i] = src[i];
				else if (types[t] == DT_F16)
					((uint16_t *)data[t])[i] = f32_to_f16(src[i]);
				else if (types[t] == DT_BF16)
					((uint16_t *)data[t])[i] = f32_to_bf16(src[i]);
			}
			if (types[t] == DT_Q8_0)
				gguf_quantize_q8_0(src, n, data[t]);
			char name[32];
			snprintf(name, sizeof name, "t.%s", dtype_name(types[t]));
			int64_t shape[2] = { rows, cols };
			ck_assert_int_eq(gguf_writer_add_tensor(w, name, types[t], 2, shape, data[t], nbytes[t]), 0);
		}
		int64_t shape1[1] = { 5 };
		float five[5] = { 1, 2, 3, 4, 5 };
		ck_assert_int_eq(gguf_writer_add_tensor(w, "v", DT_F32, 1, shape1, five, 20), 0);
		/* refused by the writer: duplicate, wrong byte count, Q8_0 row not a block multiple */
		ck_assert_int_eq(gguf_writer_add_tensor(w, "v", DT_F32, 1, shape1, five, 20), ERR_INVAL);
		ck_assert_int_eq(gguf_writer_add_tensor(w, "w", DT_F32, 1, shape1, five, 16), ERR_INVAL);
		ck_assert_int_eq(gguf_writer_add_tensor(w, "q", DT_Q8_0, 1, shape1, five, 20), ERR_INVAL);
		void *buf;
		size_t len;
		ck_assert_int_eq(gguf_writer_write_mem(w, &buf, &len), 0);
		gguf_writer_destroy(w);
		struct gguf_file *f = open_ok(buf, len);
		ck_assert_uint_eq(gguf_alignment(f), align_case ? 64 : 32);
		ck_assert_int_eq(gguf_n_tensors(f), 5);
		for (int t = 0; t < 4; t++) {
			char name[32];
			snprintf(name, sizeof name, "t.%s", dtype_name(types[t]));
			const struct gguf_tensor_info *ti = gguf_find_tensor(f, name);
			ck_assert_ptr_nonnull(ti);
			ck_assert_int_eq(ti->dtype, types[t]);
			ck_assert_int_eq(ti->n_dims, 2);
			ck_assert_int_eq(ti->shape[0], rows);
			ck_assert_int_eq(ti->shape[1], cols);
			ck_assert_int_eq(ti->ne[0], cols);
			ck_assert_int_eq(ti->ne[1], rows);
			ck_assert_uint_eq(ti->n_bytes, nbytes[t]);
			ck_assert_uint_eq(ti->offset % gguf_alignment(f), 0);
			ck_assert_int_eq(memcmp(ti->data, data[t], nbytes[t]), 0);
			free(data[t]);
		}
		/* Q8_0 dequantizes within half a step of each block's scale */
		const struct gguf_tensor_info *q = gguf_find_tensor(f, "t.q8_0");
		const struct q8_0_block *blk = q->data;
		for (int i = 0; i < n; i++) {
			float dsc = f16_to_f32(blk[i / 32].d);
			ck_assert_float_le(fabsf(dsc * blk[i / 32].qs[i % 32] - src[i]), dsc * 0.5f + 1e-3f);
		}
		const struct gguf_tensor_info *v = gguf_find_tensor(f, "v");
		ck_assert_int_eq(v->n_dims, 1);
		ck_assert_int_eq(memcmp(v->data, five, 20), 0);
		ck_assert_ptr_null(gguf_find_tensor(f, "w"));
		gguf_close(f);
		free(buf);
	}
}
END_TEST

START_TEST(test_file_roundtrip)
{
	struct gguf_writer *w;
	ck_assert_int_eq(gguf_writer_create(3, &w), 0);
	ck_assert_int_eq(gguf_writer_set_str(w, "general.name", "x"), 0);
	float data[32];
	for (int i = 0; i < 32; i++)
		data[i] = (float)i;
	int64_t shape[2] = { 4, 8 };
	ck_assert_int_eq(gguf_writer_add_tensor(w, "m", DT_F32, 2, shape, data, sizeof data), 0);
	char path[] = "/tmp/aorta_test_gguf_XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	struct diag d = { 0 };
	ck_assert_int_eq(gguf_writer_write(w, path, &d), 0);
	gguf_writer_destroy(w);
	struct gguf_file *f;
	ck_assert_int_eq(gguf_open(path, &f, &d), 0);
	ck_assert_int_eq(memcmp(gguf_find_tensor(f, "m")->data, data, sizeof data), 0);
	ck_assert_uint_gt(gguf_file_size(f), sizeof data);
	gguf_close(f);
	remove(path);
	ck_assert_int_eq(gguf_open("/nonexistent/x.gguf", &f, &d), ERR_IO);
	ck_assert(strstr(d.msg, "/nonexistent/x.gguf"));
}
END_TEST

/* ---- corruption suite ---- */

/* A small valid file: 2 keys, 2 tensors (F32 (2,4) and F16 (8)). */
static size_t valid_file(struct bb *b)
{
	header(b, 3, 2, 2);
	str(b, "general.architecture");
	u32(b, GGUF_TYPE_STRING);
	str(b, "llama");
	str(b, "tokenizer.ggml.tokens");
	u32(b, GGUF_TYPE_ARRAY);
	u32(b, GGUF_TYPE_STRING);
	u64(b, 2);
	str(b, "a");
	str(b, "bc");
	uint64_t ne0[2] = { 4, 2 }, ne1[1] = { 8 };
	tinfo(b, "t0", 2, ne0, GGML_TYPE_F32, 0);
	tinfo(b, "t1", 1, ne1, GGML_TYPE_F16, 32);
	pad(b, 32);
	for (int i = 0; i < 48; i++)
		b->p[b->n++] = (uint8_t)i;
	return b->n;
}

START_TEST(test_valid_hand_made)
{
	struct bb b;
	size_t n = valid_file(&b);
	struct gguf_file *f = open_ok(b.p, n);
	ck_assert_int_eq(gguf_n_tensors(f), 2);
	ck_assert_uint_eq(gguf_find_tensor(f, "t1")->n_bytes, 16);
	gguf_close(f);
}
END_TEST

START_TEST(test_truncated_everywhere)
{
	struct bb b;
	size_t n = valid_file(&b);
	for (size_t cut = 0; cut < n; cut++)
		expect_bad(b.p, cut, 0, NULL);
}
END_TEST

START_TEST(test_huge_counts)
{
	struct bb b;
	header(&b, 3, 0, UINT64_MAX);
	expect_bad(b.p, b.n, ERR_FORMAT, "keys cannot fit");
	header(&b, 3, (uint64_t)1 << 62, 0);
	expect_bad(b.p, b.n, ERR_FORMAT, "tensors cannot fit");
	/* array of 2^62 u32: the byte count overflows */
	header(&b, 3, 0, 1);
	str(&b, "k");
	u32(&b, GGUF_TYPE_ARRAY);
	u32(&b, GGUF_TYPE_UINT32);
	u64(&b, (uint64_t)1 << 62);
	expect_bad(b.p, b.n, ERR_FORMAT, "overflows");
	/* array of 2^40 u8: fits in u64 but not in the file */
	header(&b, 3, 0, 1);
	str(&b, "k");
	u32(&b, GGUF_TYPE_ARRAY);
	u32(&b, GGUF_TYPE_UINT8);
	u64(&b, (uint64_t)1 << 40);
	expect_bad(b.p, b.n, ERR_FORMAT, "truncated");
	/* 2^60 strings */
	header(&b, 3, 0, 1);
	str(&b, "k");
	u32(&b, GGUF_TYPE_ARRAY);
	u32(&b, GGUF_TYPE_STRING);
	u64(&b, (uint64_t)1 << 60);
	expect_bad(b.p, b.n, ERR_FORMAT, "strings cannot fit");
}
END_TEST

START_TEST(test_string_past_end)
{
	struct bb b;
	header(&b, 3, 0, 1);
	str(&b, "k");
	u32(&b, GGUF_TYPE_STRING);
	u64(&b, 1000); /* claims 1000 bytes, has 3 */
	put(&b, "abc", 3);
	expect_bad(b.p, b.n, ERR_FORMAT, "truncated");
	header(&b, 3, 0, 1);
	u64(&b, UINT64_MAX); /* key length */
	u64(&b, 0);
	u64(&b, 0);
	expect_bad(b.p, b.n, ERR_FORMAT, "truncated");
	/* a string inside an array running past the end */
	header(&b, 3, 0, 1);
	str(&b, "k");
	u32(&b, GGUF_TYPE_ARRAY);
	u32(&b, GGUF_TYPE_STRING);
	u64(&b, 2);
	str(&b, "ok");
	u64(&b, UINT64_MAX - 2);
	expect_bad(b.p, b.n, ERR_FORMAT, NULL);
}
END_TEST

START_TEST(test_dims)
{
	struct bb b;
	uint64_t big[3] = { (uint64_t)1 << 32, (uint64_t)1 << 32, (uint64_t)1 << 32 };
	header(&b, 3, 1, 0);
	tinfo(&b, "t", 3, big, GGML_TYPE_F32, 0);
	expect_bad(b.p, b.n, ERR_OVERFLOW, "t: the product of its dimensions overflows");
	/* the element count fits but the byte count does not */
	uint64_t big2[2] = { (uint64_t)1 << 31, (uint64_t)1 << 31 };
	header(&b, 3, 1, 0);
	tinfo(&b, "t", 2, big2, GGML_TYPE_F32, 0);
	expect_bad(b.p, b.n, ERR_OVERFLOW, "byte size overflows");
	uint64_t zero[2] = { 4, 0 };
	header(&b, 3, 1, 0);
	tinfo(&b, "t", 2, zero, GGML_TYPE_F32, 0);
	expect_bad(b.p, b.n, ERR_FORMAT, "dimension 1 is 0");
	uint64_t neg[1] = { (uint64_t)INT64_MAX + 1 };
	header(&b, 3, 1, 0);
	tinfo(&b, "t", 1, neg, GGML_TYPE_F32, 0);
	expect_bad(b.p, b.n, ERR_FORMAT, NULL);
	uint64_t five[5] = { 1, 1, 1, 1, 1 };
	header(&b, 3, 1, 0);
	tinfo(&b, "t", 5, five, GGML_TYPE_F32, 0);
	expect_bad(b.p, b.n, ERR_FORMAT, "5 dimensions");
	header(&b, 3, 1, 0);
	tinfo(&b, "t", 0, five, GGML_TYPE_F32, 0);
	u64(&b, 0);
	expect_bad(b.p, b.n, ERR_FORMAT, "0 dimensions");
	/* Q8_0 rows must be whole blocks */
	uint64_t q[1] = { 33 };
	header(&b, 3, 1, 0);
	tinfo(&b, "t", 1, q, GGML_TYPE_Q8_0, 0);
	expect_bad(b.p, b.n, ERR_FORMAT, "blocks");
}
END_TEST

START_TEST(test_offsets)
{
	struct bb b;
	uint64_t ne[1] = { 8 };
	header(&b, 3, 1, 0);
	tinfo(&b, "t", 1, ne, GGML_TYPE_F32, (uint64_t)1 << 40);
	pad(&b, 32);
	memset(b.p + b.n, 0, 32);
	b.n += 32;
	expect_bad(b.p, b.n, ERR_FORMAT, "runs past the end");
	header(&b, 3, 1, 0);
	tinfo(&b, "t", 1, ne, GGML_TYPE_F32, UINT64_MAX - 31);
	pad(&b, 32);
	b.n += 32;
	expect_bad(b.p, b.n, ERR_FORMAT, "runs past the end");
	/* misaligned: offset 4 with alignment 32 */
	header(&b, 3, 1, 0);
	tinfo(&b, "t", 1, ne, GGML_TYPE_F32, 4);
	pad(&b, 32);
	memset(b.p + b.n, 0, 64);
	b.n += 64;
	expect_bad(b.p, b.n, ERR_FORMAT, "not a multiple of the alignment");
	/* overlapping tensors */
	header(&b, 3, 2, 0);
	tinfo(&b, "a", 1, ne, GGML_TYPE_F32, 0);
	tinfo(&b, "b", 1, ne, GGML_TYPE_F32, 0);
	pad(&b, 32);
	memset(b.p + b.n, 0, 64);
	b.n += 64;
	expect_bad(b.p, b.n, ERR_FORMAT, "overlap");
	/* alignment 1 lets an F32 tensor start at an odd address */
	header(&b, 3, 1, 1);
	str(&b, "general.alignment");
	u32(&b, GGUF_TYPE_UINT32);
	u32(&b, 1);
	tinfo(&b, "t", 1, ne, GGML_TYPE_F32, (b.n + 8 + 1 + 4 + 8 + 4 + 8) % 4 ? 0 : 1);
	memset(b.p + b.n, 0, 64);
	b.n += 64;
	expect_bad(b.p, b.n, ERR_FORMAT, "misaligned");
}
END_TEST

START_TEST(test_bad_structure)
{
	struct bb b;
	/* nested arrays */
	header(&b, 3, 0, 1);
	str(&b, "k");
	u32(&b, GGUF_TYPE_ARRAY);
	u32(&b, GGUF_TYPE_ARRAY);
	u64(&b, 1);
	u32(&b, GGUF_TYPE_UINT8);
	u64(&b, 1);
	put(&b, "x", 1);
	expect_bad(b.p, b.n, ERR_UNSUPPORTED, "nested arrays");
	/* duplicate keys */
	header(&b, 3, 0, 2);
	for (int i = 0; i < 2; i++) {
		str(&b, "dup.key");
		u32(&b, GGUF_TYPE_UINT32);
		u32(&b, 7);
	}
	expect_bad(b.p, b.n, ERR_FORMAT, "duplicate key 'dup.key'");
	/* duplicate tensor names */
	uint64_t ne[1] = { 8 };
	header(&b, 3, 2, 0);
	tinfo(&b, "same", 1, ne, GGML_TYPE_F32, 0);
	tinfo(&b, "same", 1, ne, GGML_TYPE_F32, 32);
	pad(&b, 32);
	memset(b.p + b.n, 0, 64);
	b.n += 64;
	expect_bad(b.p, b.n, ERR_FORMAT, "duplicate tensor name 'same'");
	/* bad UTF-8 in a key, a NUL in a key, an empty key, bad UTF-8 in a tensor name */
	const char *bad_keys[] = { "a\xff", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80" };
	for (int i = 0; i < 4; i++) {
		header(&b, 3, 0, 1);
		str(&b, bad_keys[i]);
		u32(&b, GGUF_TYPE_UINT8);
		put(&b, "x", 1);
		expect_bad(b.p, b.n, ERR_FORMAT, "not valid UTF-8");
	}
	header(&b, 3, 0, 1);
	u64(&b, 3);
	put(&b, "a\0b", 3);
	u32(&b, GGUF_TYPE_UINT8);
	put(&b, "x", 1);
	expect_bad(b.p, b.n, ERR_FORMAT, "NUL");
	header(&b, 3, 0, 1);
	str(&b, "");
	u32(&b, GGUF_TYPE_UINT8);
	put(&b, "x", 1);
	u64(&b, 0);
	expect_bad(b.p, b.n, ERR_FORMAT, "empty key");
	header(&b, 3, 1, 0);
	tinfo(&b, "bad\xfe", 1, ne, GGML_TYPE_F32, 0);
	expect_bad(b.p, b.n, ERR_FORMAT, "not valid UTF-8");
	/* unknown value type, bool that is not 0/1 */
	header(&b, 3, 0, 1);
	str(&b, "k");
	u32(&b, 13);
	u64(&b, 0);
	expect_bad(b.p, b.n, ERR_FORMAT, "unknown value type");
	header(&b, 3, 0, 1);
	str(&b, "k");
	u32(&b, GGUF_TYPE_BOOL);
	put(&b, "\x02", 1);
	expect_bad(b.p, b.n, ERR_FORMAT, "bool");
	/* alignment: not a power of two, or the wrong type */
	header(&b, 3, 0, 1);
	str(&b, "general.alignment");
	u32(&b, GGUF_TYPE_UINT32);
	u32(&b, 48);
	expect_bad(b.p, b.n, ERR_FORMAT, "power of two");
	header(&b, 3, 0, 1);
	str(&b, "general.alignment");
	u32(&b, GGUF_TYPE_UINT64);
	u64(&b, 32);
	expect_bad(b.p, b.n, ERR_FORMAT, "must be a u32");
}
END_TEST

START_TEST(test_versions_and_types)
{
	struct bb b;
	header(&b, 1, 0, 0);
	expect_bad(b.p, b.n, ERR_UNSUPPORTED, "version 1");
	header(&b, 4, 0, 0);
	expect_bad(b.p, b.n, ERR_UNSUPPORTED, "version 4");
	header(&b, 0x03000000u, 0, 0);
	expect_bad(b.p, b.n, ERR_UNSUPPORTED, "big-endian");
	memcpy(b.p, "GGML", 4);
	expect_bad(b.p, b.n, ERR_FORMAT, "bad magic");
	uint64_t ne[2] = { 256, 4 };
	header(&b, 3, 1, 0);
	tinfo(&b, "blk.0.attn_q.weight", 2, ne, 12, 0);
	expect_bad(b.p, b.n, ERR_UNSUPPORTED, "blk.0.attn_q.weight: type Q4_K is not supported");
	header(&b, 3, 1, 0);
	tinfo(&b, "x", 2, ne, 2, 0);
	expect_bad(b.p, b.n, ERR_UNSUPPORTED, "x: type Q4_0 is not supported");
	header(&b, 3, 1, 0);
	tinfo(&b, "y", 2, ne, 9999, 0);
	expect_bad(b.p, b.n, ERR_UNSUPPORTED, "y: type (unknown) is not supported");
}
END_TEST

START_TEST(test_random_flips)
{
	/* Mutations of a valid file: each either opens (and every tensor lies
	 * inside the buffer) or fails with a message. ASan checks the reads. */
	struct bb b;
	size_t n = valid_file(&b);
	uint64_t s = 12345;
	for (int iter = 0; iter < 20000; iter++) {
		uint8_t *m = malloc(n);
		memcpy(m, b.p, n);
		int flips = 1 + iter % 4;
		for (int k = 0; k < flips; k++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			size_t pos = (size_t)(s >> 33) % n;
			uint8_t v = (uint8_t)(s >> 20);
			m[pos] = (iter & 1) ? v : (uint8_t)(m[pos] ^ (1u << (v & 7)));
		}
		struct gguf_file *f;
		struct diag d = { 0 };
		if (gguf_open_mem(m, n, &f, &d) == 0) {
			for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
				const struct gguf_tensor_info *t = gguf_tensor(f, i);
				ck_assert((const uint8_t *)t->data >= m);
				ck_assert((const uint8_t *)t->data + t->n_bytes <= m + n);
			}
			gguf_close(f);
		} else {
			ck_assert(d.msg[0] != '\0');
		}
		free(m);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("gguf");
	TCase *tc = tcase_create("roundtrip");
	tcase_add_test(tc, test_metadata_roundtrip);
	tcase_add_test(tc, test_tensor_roundtrip);
	tcase_add_test(tc, test_file_roundtrip);
	tcase_add_test(tc, test_valid_hand_made);
	suite_add_tcase(s, tc);
	TCase *bad = tcase_create("corruption");
	tcase_add_test(bad, test_truncated_everywhere);
	tcase_add_test(bad, test_huge_counts);
	tcase_add_test(bad, test_string_past_end);
	tcase_add_test(bad, test_dims);
	tcase_add_test(bad, test_offsets);
	tcase_add_test(bad, test_bad_structure);
	tcase_add_test(bad, test_versions_and_types);
	tcase_add_test(bad, test_random_flips);
	suite_add_tcase(s, bad);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
