/* tests/tokenizer/test_tok_gguf.c — each fixture vocabulary written into a GGUF
 * the way llama.cpp's converter does (tok_export_gguf: "gpt2" + pre name +
 * merges for byte-level, "llama" + scores + token types for SentencePiece
 * style), read back with tok_load_gguf: every vector must give the reference
 * ids (with and without special tokens) and the tokenizer.json path's decode.
 * Skips (exit 77) when the fixtures are absent.
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "tok_test_util.h"

static const char *const names[] = { "mistral", "llama3", "qwen3", "gemma3" };

static bool ids_eq(const int32_t *a, size_t na, const cJSON *arr)
{
	if ((int)na != cJSON_GetArraySize(arr))
		return false;
	size_t i = 0;
	const cJSON *v;
	cJSON_ArrayForEach(v, arr)
	{
		if (v->valueint != a[i++])
			return false;
	}
	return true;
}

START_TEST(test_gguf_roundtrip)
{
	const char *name = names[_i];
	struct tokenizer *tj, *tg;
	struct diag d = { 0 };
	ck_assert_msg(tt_load(name, &tj, &d) == 0, "%s", d.msg);
	struct gguf_writer *w;
	ck_assert_int_eq(gguf_writer_create(3, &w), 0);
	ck_assert_msg(tok_export_gguf(tj, w, &d) == 0, "%s: export: %s", name, d.msg);
	void *mem;
	size_t len;
	ck_assert_int_eq(gguf_writer_write_mem(w, &mem, &len), 0);
	gguf_writer_destroy(w);
	struct gguf_file *g;
	ck_assert_msg(gguf_open_mem(mem, len, &g, &d) == 0, "%s", d.msg);
	ck_assert_msg(tok_load_gguf(g, &tg, &d) == 0, "%s: load: %s", name, d.msg);
	ck_assert_int_eq(tok_vocab_size(tg), tok_vocab_size(tj));
	ck_assert_int_eq(tok_bos(tg), tok_bos(tj));
	ck_assert_int_eq(tok_eos(tg), tok_eos(tj));
	ck_assert_int_eq(tok_add_bos(tg), tok_add_bos(tj));

	char *vp = tt_path(name, "vectors.jsonl");
	FILE *f = fopen(vp, "rb");
	ck_assert_ptr_nonnull(f);
	char *line = NULL;
	size_t cap = 0;
	ssize_t got;
	int n = 0, ok = 0, ok_dec = 0, shown = 0;
	while ((got = getline(&line, &cap, f)) > 0) {
		cJSON *v = cJSON_ParseWithLength(line, (size_t)got);
		const char *text = cJSON_GetObjectItem(v, "text")->valuestring;
		int32_t *a, *b;
		size_t na, nb;
		ck_assert_int_eq(tok_encode(tg, text, strlen(text), TOK_PARSE_SPECIAL, &a, &na), 0);
		ck_assert_int_eq(tok_encode(tg, text, strlen(text), TOK_PARSE_SPECIAL | TOK_ADD_SPECIAL, &b, &nb), 0);
		bool good = ids_eq(a, na, cJSON_GetObjectItem(v, "ids")) &&
			    ids_eq(b, nb, cJSON_GetObjectItem(v, "ids_with_special"));
		struct buf dj, dg;
		buf_init(&dj);
		buf_init(&dg);
		ck_assert_int_eq(tok_decode(tj, a, na, 0, &dj), 0);
		ck_assert_int_eq(tok_decode(tg, a, na, 0, &dg), 0);
		bool dec = dj.len == dg.len && !memcmp(dj.data, dg.data, dj.len);
		ok += good;
		ok_dec += dec;
		if ((!good || !dec) && shown++ < 5)
			fprintf(stderr, "%s gguf %s: ids %s decode %s\n", name, cJSON_GetObjectItem(v, "id")->valuestring,
				good ? "ok" : "MISMATCH", dec ? "ok" : "MISMATCH");
		free(a);
		free(b);
		buf_deinit(&dj);
		buf_deinit(&dg);
		cJSON_Delete(v);
		n++;
	}
	free(line);
	fclose(f);
	free(vp);
	printf("%-8s gguf (%zu bytes): ids %d/%d, decode==json %d/%d\n", name, len, ok, n, ok_dec, n);
	fflush(stdout);
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(ok, n);
	ck_assert_int_eq(ok_dec, n);
	tok_destroy(tg);
	gguf_close(g);
	free(mem);
	tok_destroy(tj);
}
END_TEST

int main(void)
{
	char *probe = tt_path("llama3", "tokenizer.json");
	bool have = probe && access(probe, R_OK) == 0;
	free(probe);
	if (!have) {
		fprintf(stderr, "SKIP: tokenizer fixtures not found (set AORTA_FIXTURES)\n");
		return 77;
	}
	Suite *s = suite_create("tok_gguf");
	TCase *tc = tcase_create("gguf");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_gguf_roundtrip, 0, 4);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
