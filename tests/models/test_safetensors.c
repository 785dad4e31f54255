/* tests/models/test_safetensors.c — engine/model/safetensors.c: writer -> reader
 * round trips for every dtype (single file, sharded directory with an index),
 * and the header corruption suite: truncations, oversized or lying header
 * lengths, bad JSON, unknown dtypes, non-integral / overflowing shapes,
 * offsets past the end or inconsistent with the shape, overlaps, duplicate
 * names, bad UTF-8, unsafe shard names in an index. Runs under ASan/UBSan too.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/model/safetensors.h"

/* header JSON + data bytes -> a file image (header padded to 8) */
static size_t image(uint8_t *out, size_t cap, const char *json, const void *data, size_t n_data)
{
	size_t hl = strlen(json), padded = (hl + 7) & ~(size_t)7;
	uint64_t h = padded;
	ck_assert_uint_le(8 + padded + n_data, cap);
	memcpy(out, &h, 8);
	memcpy(out + 8, json, hl);
	memset(out + 8 + hl, ' ', padded - hl);
	if (n_data)
		memcpy(out + 8 + padded, data, n_data);
	return 8 + padded + n_data;
}

static void expect_bad(const void *p, size_t n, int want, const char *msg_part)
{
	uint8_t *copy = aligned_alloc(64, (n + 63) / 64 * 64 + 64);
	memcpy(copy, p, n);
	struct st_file *f = NULL;
	struct diag d = { 0 };
	int rc = st_open_mem(copy, n, &f, &d);
	ck_assert_msg(rc < 0, "expected an error, got %d", rc);
	if (want)
		ck_assert_msg(rc == want, "rc %d (%s), want %d; msg: %s", rc, err_str(rc), want, d.msg);
	ck_assert_msg(d.msg[0] != '\0', "no message");
	if (msg_part)
		ck_assert_msg(strstr(d.msg, msg_part), "message '%s' lacks '%s'", d.msg, msg_part);
	free(copy);
}

static void expect_bad_json(const char *json, size_t n_data, int want, const char *msg_part)
{
	static uint8_t img[1 << 16];
	uint8_t data[256] = { 0 };
	ck_assert_uint_le(n_data, sizeof data);
	size_t n = image(img, sizeof img, json, data, n_data);
	expect_bad(img, n, want, msg_part);
}

START_TEST(test_roundtrip_mem)
{
	float f32[6] = { 1, -2, 3.5f, 4, 5, 6 };
	uint16_t f16[4], bf16[3];
	uint8_t f8[8];
	for (int i = 0; i < 4; i++)
		f16[i] = f32_to_f16((float)i - 1.5f);
	for (int i = 0; i < 3; i++)
		bf16[i] = f32_to_bf16((float)i * 7.0f);
	for (int i = 0; i < 8; i++)
		f8[i] = f32_to_f8e4m3((float)i * 0.5f);
	float scale = 0.125f;
	struct st_writer *w;
	ck_assert_int_eq(st_writer_create(&w), 0);
	int64_t s23[2] = { 2, 3 }, s4[1] = { 4 }, s13[2] = { 1, 3 }, s24[2] = { 2, 4 };
	ck_assert_int_eq(st_writer_add(w, "a.weight", DT_F32, 2, s23, f32, sizeof f32), 0);
	ck_assert_int_eq(st_writer_add(w, "b", DT_F16, 1, s4, f16, sizeof f16), 0);
	ck_assert_int_eq(st_writer_add(w, "c", DT_BF16, 2, s13, bf16, sizeof bf16), 0);
	ck_assert_int_eq(st_writer_add(w, "q.weight", DT_F8_E4M3, 2, s24, f8, sizeof f8), 0);
	ck_assert_int_eq(st_writer_add(w, "q.weight_scale", DT_F32, 0, NULL, &scale, 4), 0);
	/* refused: duplicate, wrong size, unsupported dtype */
	ck_assert_int_eq(st_writer_add(w, "b", DT_F16, 1, s4, f16, sizeof f16), ERR_INVAL);
	ck_assert_int_eq(st_writer_add(w, "x", DT_F16, 1, s4, f16, 6), ERR_INVAL);
	ck_assert_int_eq(st_writer_add(w, "y", DT_Q8_0, 1, s4, f16, 8), ERR_INVAL);
	ck_assert_int_eq(st_writer_set_meta(w, "format", "pt"), 0);
	void *buf;
	size_t len;
	ck_assert_int_eq(st_writer_write_mem(w, &buf, &len), 0);
	st_writer_destroy(w);
	uint64_t hl;
	memcpy(&hl, buf, 8);
	ck_assert_uint_eq(hl % 8, 0);
	struct st_file *f;
	struct diag d = { 0 };
	ck_assert_int_eq(st_open_mem(buf, len, &f, &d), 0);
	ck_assert_int_eq(st_n_tensors(f), 5);
	const struct st_tensor *t = st_find(f, "a.weight");
	ck_assert_int_eq(t->dtype, DT_F32);
	ck_assert_int_eq(t->n_dims, 2);
	ck_assert_int_eq(t->shape[0], 2);
	ck_assert_int_eq(t->shape[1], 3);
	ck_assert_int_eq(memcmp(t->data, f32, sizeof f32), 0);
	t = st_find(f, "b");
	ck_assert_int_eq(t->dtype, DT_F16);
	ck_assert_int_eq(memcmp(t->data, f16, sizeof f16), 0);
	t = st_find(f, "c");
	ck_assert_int_eq(t->dtype, DT_BF16);
	ck_assert_int_eq(memcmp(t->data, bf16, sizeof bf16), 0);
	t = st_find(f, "q.weight");
	ck_assert_int_eq(t->dtype, DT_F8_E4M3);
	ck_assert_int_eq(memcmp(t->data, f8, sizeof f8), 0);
	t = st_find(f, "q.weight_scale");
	ck_assert_int_eq(t->n_dims, 0);
	ck_assert_uint_eq(t->n_elems, 1);
	ck_assert_int_eq(memcmp(t->data, &scale, 4), 0);
	ck_assert_ptr_null(st_find(f, "__metadata__"));
	ck_assert_ptr_null(st_find(f, "x"));
	st_close(f);
	free(buf);
}
END_TEST

static char tmpdir[64];

static void write_file(const char *dir, const char *name, const void *p, size_t n)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *fp = fopen(path, "wb");
	ck_assert_ptr_nonnull(fp);
	ck_assert_uint_eq(fwrite(p, 1, n, fp), n);
	fclose(fp);
}

static void rm_dir(const char *dir)
{
	char cmd[256];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_sharded_dir)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/aorta_st_XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	float a[4] = { 1, 2, 3, 4 }, b[2] = { 5, 6 };
	int64_t s4[1] = { 4 }, s2[1] = { 2 };
	struct diag d = { 0 };
	struct st_writer *w;
	char path[256];
	ck_assert_int_eq(st_writer_create(&w), 0);
	ck_assert_int_eq(st_writer_add(w, "a", DT_F32, 1, s4, a, 16), 0);
	snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", tmpdir);
	ck_assert_int_eq(st_writer_write(w, path, &d), 0);
	st_writer_destroy(w);
	ck_assert_int_eq(st_writer_create(&w), 0);
	ck_assert_int_eq(st_writer_add(w, "b", DT_F32, 1, s2, b, 8), 0);
	snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", tmpdir);
	ck_assert_int_eq(st_writer_write(w, path, &d), 0);
	st_writer_destroy(w);
	/* two files and no index: ambiguous */
	struct st_set *s;
	ck_assert_int_eq(st_set_open(tmpdir, &s, &d), ERR_FORMAT);
	ck_assert(strstr(d.msg, "index"));
	const char *idx = "{\"metadata\":{\"total_size\":24},\"weight_map\":{"
			  "\"a\":\"model-00001-of-00002.safetensors\","
			  "\"b\":\"model-00002-of-00002.safetensors\"}}";
	write_file(tmpdir, "model.safetensors.index.json", idx, strlen(idx));
	ck_assert_int_eq(st_set_open(tmpdir, &s, &d), 0);
	ck_assert_int_eq(st_set_n_files(s), 2);
	ck_assert_int_eq(st_set_n_tensors(s), 2);
	ck_assert_int_eq(memcmp(st_set_find(s, "b")->data, b, 8), 0);
	ck_assert_int_eq(memcmp(st_set_find(s, "a")->data, a, 16), 0);
	ck_assert_ptr_null(st_set_find(s, "c"));
	st_set_close(s);
	/* the index names a tensor that is not there */
	const char *idx2 = "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
			   "\"zz\":\"model-00001-of-00002.safetensors\"}}";
	write_file(tmpdir, "model.safetensors.index.json", idx2, strlen(idx2));
	ck_assert_int_eq(st_set_open(tmpdir, &s, &d), ERR_FORMAT);
	ck_assert(strstr(d.msg, "'zz'"));
	/* path traversal and non-safetensors names in the index are refused */
	const char *bad[] = {
		"{\"weight_map\":{\"a\":\"../etc/passwd.safetensors\"}}",
		"{\"weight_map\":{\"a\":\"/abs/x.safetensors\"}}",
		"{\"weight_map\":{\"a\":\"model.bin\"}}",
		"{\"weight_map\":{\"a\":7}}",
		"{\"weight_map\":[]}",
		"not json",
	};
	for (int i = 0; i < 6; i++) {
		write_file(tmpdir, "model.safetensors.index.json", bad[i], strlen(bad[i]));
		ck_assert_int_eq(st_set_open(tmpdir, &s, &d), ERR_FORMAT);
	}
	/* the same tensor in two shards */
	const char *idx3 = "{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\","
			   "\"b\":\"model-00001-of-00002.safetensors\","
			   "\"c\":\"dup.safetensors\"}}";
	ck_assert_int_eq(st_writer_create(&w), 0);
	ck_assert_int_eq(st_writer_add(w, "a", DT_F32, 1, s4, a, 16), 0);
	ck_assert_int_eq(st_writer_add(w, "b", DT_F32, 1, s2, b, 8), 0);
	ck_assert_int_eq(st_writer_add(w, "c", DT_F32, 1, s2, b, 8), 0);
	snprintf(path, sizeof path, "%s/dup.safetensors", tmpdir);
	ck_assert_int_eq(st_writer_write(w, path, &d), 0);
	st_writer_destroy(w);
	write_file(tmpdir, "model.safetensors.index.json", idx3, strlen(idx3));
	ck_assert_int_eq(st_set_open(tmpdir, &s, &d), ERR_FORMAT);
	ck_assert(strstr(d.msg, "two shards"));
	rm_dir(tmpdir);
}
END_TEST

START_TEST(test_header_bounds)
{
	uint8_t img[64] = { 0 };
	expect_bad(img, 0, ERR_FORMAT, "truncated");
	expect_bad(img, 7, ERR_FORMAT, "truncated");
	uint64_t h = (uint64_t)200 << 20; /* over the 100 MB limit */
	memcpy(img, &h, 8);
	expect_bad(img, 64, ERR_FORMAT, "100 MB");
	h = UINT64_MAX;
	memcpy(img, &h, 8);
	expect_bad(img, 64, ERR_FORMAT, "100 MB");
	h = 100; /* past the end of a 64-byte file */
	memcpy(img, &h, 8);
	expect_bad(img, 64, ERR_FORMAT, "past the end");
	/* every truncation of a valid file fails */
	static uint8_t good[512];
	float data[4] = { 1, 2, 3, 4 };
	size_t n = image(good, sizeof good,
			 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", data, 16);
	struct st_file *f;
	struct diag d;
	ck_assert_int_eq(st_open_mem(good, n, &f, &d), 0);
	st_close(f);
	for (size_t cut = 0; cut < n; cut++)
		expect_bad(good, cut, 0, NULL);
}
END_TEST

START_TEST(test_header_entries)
{
	expect_bad_json("[1,2]", 0, ERR_FORMAT, "JSON object");
	expect_bad_json("{\"a\":", 0, ERR_FORMAT, "not valid JSON");
	expect_bad_json("{\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8,
			ERR_UNSUPPORTED, "a: dtype I64 is not supported");
	expect_bad_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, ERR_FORMAT, "data_offsets");
	expect_bad_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4,
			ERR_FORMAT, "shape[0]");
	expect_bad_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
			ERR_FORMAT, "shape[0]");
	expect_bad_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,4]}}", 4,
			ERR_FORMAT, "shape[0]");
	expect_bad_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
			ERR_UNSUPPORTED, "dimensions");
	/* dimension product overflow: 2^52 * 2^52 */
	expect_bad_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[4503599627370496,4503599627370496],"
			"\"data_offsets\":[0,4]}}",
			4, ERR_OVERFLOW, "overflows");
	/* elements fit, bytes overflow: 2^62 * 4 */
	expect_bad_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],"
			"\"data_offsets\":[0,4]}}",
			4, 0, NULL);
	/* offsets past the end, reversed, or not matching the shape */
	expect_bad_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
			ERR_FORMAT, "outside");
	expect_bad_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8,
			ERR_FORMAT, "outside");
	expect_bad_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 8,
			ERR_FORMAT, "need 8");
	expect_bad_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e300]}}", 8,
			ERR_FORMAT, "data_offsets");
	expect_bad_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8,
			ERR_FORMAT, "data_offsets");
	/* overlapping tensors, misaligned F32 */
	expect_bad_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
			"\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
			16, ERR_FORMAT, "overlap");
	expect_bad_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}", 8,
			ERR_FORMAT, "misaligned");
	/* duplicate names, bad UTF-8, empty name, NUL, metadata of the wrong type */
	expect_bad_json("{\"a\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]},"
			"\"a\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[2,4]}}",
			4, ERR_FORMAT, "duplicate tensor name 'a'");
	expect_bad_json("{\"a\xff\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2,
			ERR_FORMAT, "UTF-8");
	expect_bad_json("{\"\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 2,
			ERR_FORMAT, "empty tensor name");
	expect_bad_json("{\"__metadata__\":[1]}", 0, ERR_FORMAT, "__metadata__");
	expect_bad_json("{\"a\":7}", 0, ERR_FORMAT, "not an object");
	/* a zero-element tensor and an empty header are fine */
	static uint8_t img[256];
	size_t n = image(img, sizeof img,
			 "{\"__metadata__\":{\"k\":\"v\"},\"z\":{\"dtype\":\"BF16\",\"shape\":[0,3],"
			 "\"data_offsets\":[0,0]}}",
			 NULL, 0);
	struct st_file *f;
	struct diag d;
	ck_assert_int_eq(st_open_mem(img, n, &f, &d), 0);
	ck_assert_uint_eq(st_find(f, "z")->n_bytes, 0);
	st_close(f);
	n = image(img, sizeof img, "{}", NULL, 0);
	ck_assert_int_eq(st_open_mem(img, n, &f, &d), 0);
	ck_assert_int_eq(st_n_tensors(f), 0);
	st_close(f);
}
END_TEST

START_TEST(test_random_flips)
{
	static uint8_t good[512];
	uint16_t data[8] = { 0 };
	size_t n = image(good, sizeof good,
			 "{\"a\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
			 "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[8,12]}}",
			 data, 16);
	uint64_t s = 99;
	for (int iter = 0; iter < 20000; iter++) {
		uint8_t *m = malloc(n);
		memcpy(m, good, n);
		for (int k = 0; k < 1 + iter % 3; k++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			size_t pos = (size_t)(s >> 33) % n;
			m[pos] = (iter & 1) ? (uint8_t)(s >> 20) : (uint8_t)(m[pos] ^ (1u << ((s >> 20) & 7)));
		}
		struct st_file *f;
		struct diag d = { 0 };
		if (st_open_mem(m, n, &f, &d) == 0) {
			for (int64_t i = 0; i < st_n_tensors(f); i++) {
				const struct st_tensor *t = st_tensor_at(f, i);
				ck_assert((const uint8_t *)t->data >= m);
				ck_assert((const uint8_t *)t->data + t->n_bytes <= m + n);
			}
			st_close(f);
		} else {
			ck_assert(d.msg[0] != '\0');
		}
		free(m);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("safetensors");
	TCase *tc = tcase_create("safetensors");
	tcase_add_test(tc, test_roundtrip_mem);
	tcase_add_test(tc, test_sharded_dir);
	tcase_add_test(tc, test_header_bounds);
	tcase_add_test(tc, test_header_entries);
	tcase_add_test(tc, test_random_flips);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
