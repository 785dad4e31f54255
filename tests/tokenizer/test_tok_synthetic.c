/* tests/tokenizer/test_tok_synthetic.c — small tokenizer.json files
 * (synthetic/gen_synthetic.py) covering what the real fixtures do not: added
 * tokens with lstrip/rstrip/single_word, ByteLevel with add_prefix_space and
 * its regex, BOS+EOS templates, Split behaviours and invert, Metaspace
 * pre-tokenizer/decoder, NFKC/Lowercase/regex Replace, unk. Expected values
 * (synthetic/expected.jsonl) come from Hugging Face tokenizers itself
 * (synthetic/expected.js). Also checks streaming == whole decode.
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/tok/tokenizer.h"

static char *src_path(const char *rel)
{
	const char *root = getenv("AORTA_SOURCE_ROOT");
	if (!root)
		root = ".";
	size_t n = strlen(root) + strlen(rel) + 2;
	char *p = malloc(n);
	snprintf(p, n, "%s/%s", root, rel);
	return p;
}

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

static bool text_eq(const struct buf *b, const char *s)
{
	return b->len == strlen(s) && (b->len == 0 || !memcmp(b->data, s, b->len));
}

START_TEST(test_synthetic)
{
	static const char *const names[] = { "bytelevel", "metaspace", "splits" };
	struct tokenizer *toks[3];
	for (int i = 0; i < 3; i++) {
		char rel[128];
		snprintf(rel, sizeof rel, "tests/tokenizer/synthetic/%s.json", names[i]);
		char *p = src_path(rel);
		struct diag d = { 0 };
		ck_assert_msg(tok_load_json(p, NULL, &toks[i], &d) == 0, "%s: %s", p, d.msg);
		free(p);
	}
	char *ep = src_path("tests/tokenizer/synthetic/expected.jsonl");
	FILE *f = fopen(ep, "rb");
	ck_assert_msg(f != NULL, "%s", ep);
	char *line = NULL;
	size_t cap = 0;
	ssize_t got;
	int n = 0, bad = 0;
	while ((got = getline(&line, &cap, f)) > 0) {
		cJSON *v = cJSON_ParseWithLength(line, (size_t)got);
		ck_assert_ptr_nonnull(v);
		const char *name = cJSON_GetObjectItem(v, "tokenizer")->valuestring;
		int k = !strcmp(name, "bytelevel") ? 0 : !strcmp(name, "metaspace") ? 1 : 2;
		const struct tokenizer *t = toks[k];
		const char *text = cJSON_GetObjectItem(v, "text")->valuestring;
		int32_t *a, *b;
		size_t na, nb;
		ck_assert_int_eq(tok_encode(t, text, strlen(text), TOK_PARSE_SPECIAL, &a, &na), 0);
		ck_assert_int_eq(tok_encode(t, text, strlen(text), TOK_PARSE_SPECIAL | TOK_ADD_SPECIAL, &b, &nb), 0);
		const cJSON *ws = cJSON_GetObjectItem(v, "ids_with_special");
		size_t nw = (size_t)cJSON_GetArraySize(ws), j = 0;
		int32_t *wids = malloc((nw + 1) * sizeof(int32_t));
		const cJSON *x;
		cJSON_ArrayForEach(x, ws) wids[j++] = x->valueint;
		struct buf dec, skip, st;
		buf_init(&dec);
		buf_init(&skip);
		buf_init(&st);
		ck_assert_int_eq(tok_decode(t, wids, nw, 0, &dec), 0);
		ck_assert_int_eq(tok_decode(t, wids, nw, TOK_SKIP_SPECIAL, &skip), 0);
		struct tok_stream s;
		tok_stream_init(&s, t, 0);
		for (size_t i = 0; i < nw; i++)
			ck_assert_int_eq(tok_stream_push(&s, wids[i], &st), 0);
		ck_assert_int_eq(tok_stream_finish(&s, &st), 0);
		tok_stream_deinit(&s);
		bool ok1 = ids_eq(a, na, cJSON_GetObjectItem(v, "ids"));
		bool ok2 = ids_eq(b, nb, ws);
		bool ok3 = text_eq(&dec, cJSON_GetObjectItem(v, "decoded")->valuestring);
		bool ok4 = text_eq(&skip, cJSON_GetObjectItem(v, "decoded_skip")->valuestring);
		bool ok5 = st.len == dec.len && (dec.len == 0 || !memcmp(st.data, dec.data, dec.len));
		if (!(ok1 && ok2 && ok3 && ok4 && ok5)) {
			bad++;
			fprintf(stderr, "%s [%s]: ids %d with_special %d decoded %d skip %d stream %d\n", name, text, ok1, ok2,
				ok3, ok4, ok5);
			fprintf(stderr, "  got ids:");
			for (size_t i = 0; i < na; i++)
				fprintf(stderr, " %d", a[i]);
			fprintf(stderr, "\n  got with special:");
			for (size_t i = 0; i < nb; i++)
				fprintf(stderr, " %d", b[i]);
			fprintf(stderr, "\n  got decoded [%s] skip [%s]\n", dec.data ? dec.data : "", skip.data ? skip.data : "");
		}
		free(a);
		free(b);
		free(wids);
		buf_deinit(&dec);
		buf_deinit(&skip);
		buf_deinit(&st);
		cJSON_Delete(v);
		n++;
	}
	free(line);
	fclose(f);
	free(ep);
	printf("synthetic: %d/%d cases match Hugging Face tokenizers\n", n - bad, n);
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(bad, 0);
	for (int i = 0; i < 3; i++)
		tok_destroy(toks[i]);
}
END_TEST

/* Broken or unsupported tokenizer.json files fail with a message. */
START_TEST(test_bad_json)
{
	static const struct {
		const char *json;
		int rc;
		const char *msg;
	} cases[] = {
		{ "{not json", ERR_FORMAT, "not valid JSON" },
		{ "{}", ERR_FORMAT, "no model" },
		{ "{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", ERR_UNSUPPORTED, "Unigram" },
		{ "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}", ERR_FORMAT, "bad id" },
		{ "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a b\"]}}", ERR_FORMAT,
		  "not in the vocabulary" },
		{ "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"ab\"]}}", ERR_FORMAT, "merges[0]" },
		{ "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
		  "\"normalizer\":{\"type\":\"BertNormalizer\"}}",
		  ERR_UNSUPPORTED, "BertNormalizer" },
		{ "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
		  "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}}",
		  ERR_UNSUPPORTED, "regex" },
		{ "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},"
		  "\"added_tokens\":[{\"id\":\"x\",\"content\":\"b\"}]}",
		  ERR_FORMAT, "added_tokens" },
		{ "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"post_processor\":"
		  "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\"}}],"
		  "\"special_tokens\":{\"<s>\":{\"ids\":[7]}}}}",
		  ERR_FORMAT, "out of range" },
	};
	char path[] = "/tmp/aorta_tok_bad_XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	close(fd);
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		FILE *f = fopen(path, "wb");
		fputs(cases[i].json, f);
		fclose(f);
		struct tokenizer *t = NULL;
		struct diag d = { 0 };
		int rc = tok_load_json(path, NULL, &t, &d);
		ck_assert_msg(rc == cases[i].rc, "case %zu: rc %d (%s)", i, rc, d.msg);
		ck_assert_msg(strstr(d.msg, cases[i].msg) != NULL, "case %zu: message '%s'", i, d.msg);
		ck_assert_ptr_null(t);
	}
	unlink(path);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tok_synthetic");
	TCase *tc = tcase_create("synthetic");
	tcase_add_test(tc, test_synthetic);
	tcase_add_test(tc, test_bad_json);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
