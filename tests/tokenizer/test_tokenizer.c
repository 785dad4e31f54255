/* tests/tokenizer/test_tokenizer.c — the tokenizer against the reference
 * vectors in $AORTA_FIXTURES/tokenizers/<name>/vectors.jsonl (ids,
 * ids_with_special, decoded; README.md there explains them), streaming decode
 * against whole decode for every vector, and the behaviours the vectors do not
 * cover (parse-special off, skip-special, invalid UTF-8, bad ids).
 * Skips (exit 77) when the fixtures are absent.
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/model/model.h"
#include "engine/tok/tokenizer.h"
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
		if (!cJSON_IsNumber(v) || v->valueint != a[i++])
			return false;
	}
	return true;
}

static void print_ids(const char *what, const int32_t *a, size_t n)
{
	fprintf(stderr, "  %s:", what);
	for (size_t i = 0; i < n && i < 40; i++)
		fprintf(stderr, " %d", a[i]);
	fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* Decode ids one by one through a stream; the concatenation goes to out. */
static int stream_all(const struct tokenizer *t, const int32_t *ids, size_t n, unsigned flags, struct buf *out)
{
	struct tok_stream s;
	tok_stream_init(&s, t, flags);
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i++)
		rc = tok_stream_push(&s, ids[i], out);
	if (!rc)
		rc = tok_stream_finish(&s, out);
	tok_stream_deinit(&s);
	return rc;
}

static void run_vectors(const char *name)
{
	struct tokenizer *t = NULL;
	struct diag d = { 0 };
	int rc = tt_load(name, &t, &d);
	ck_assert_msg(rc == 0, "%s: load failed: %s", name, d.msg);
	char *vec_path = tt_path(name, "vectors.jsonl");
	FILE *f = fopen(vec_path, "rb");
	ck_assert_msg(f != NULL, "%s missing", vec_path);
	char *line = NULL;
	size_t cap = 0;
	ssize_t got;
	int n = 0, ok_ids = 0, ok_special = 0, ok_dec = 0, ok_stream = 0, shown = 0;
	while ((got = getline(&line, &cap, f)) > 0) {
		cJSON *v = cJSON_ParseWithLength(line, (size_t)got);
		ck_assert_ptr_nonnull(v);
		const cJSON *text = cJSON_GetObjectItem(v, "text");
		const char *id = cJSON_GetObjectItem(v, "id")->valuestring;
		const char *want_dec = cJSON_GetObjectItem(v, "decoded")->valuestring;
		size_t len = strlen(text->valuestring);
		int32_t *ids, *ids2;
		size_t n1, n2;
		ck_assert_int_eq(tok_encode(t, text->valuestring, len, TOK_PARSE_SPECIAL, &ids, &n1), 0);
		ck_assert_int_eq(tok_encode(t, text->valuestring, len, TOK_PARSE_SPECIAL | TOK_ADD_SPECIAL, &ids2, &n2),
				 0);
		bool a = ids_eq(ids, n1, cJSON_GetObjectItem(v, "ids"));
		bool b = ids_eq(ids2, n2, cJSON_GetObjectItem(v, "ids_with_special"));
		/* decode the reference ids, so a decode check does not depend on encode */
		const cJSON *ref = cJSON_GetObjectItem(v, "ids");
		size_t nr = (size_t)cJSON_GetArraySize(ref), k = 0;
		int32_t *rids = malloc((nr + 1) * sizeof(int32_t));
		const cJSON *x;
		cJSON_ArrayForEach(x, ref) rids[k++] = x->valueint;
		struct buf dec, st;
		buf_init(&dec);
		buf_init(&st);
		ck_assert_int_eq(tok_decode(t, rids, nr, 0, &dec), 0);
		ck_assert_int_eq(stream_all(t, rids, nr, 0, &st), 0);
		bool c = dec.len == strlen(want_dec) && (dec.len == 0 || !memcmp(dec.data, want_dec, dec.len));
		bool s = st.len == dec.len && (dec.len == 0 || !memcmp(st.data, dec.data, dec.len));
		ok_ids += a;
		ok_special += b;
		ok_dec += c;
		ok_stream += s;
		if ((!a || !b || !c || !s) && shown++ < 8) {
			fprintf(stderr, "%s %s: ids %s, with_special %s, decoded %s, stream %s\n", name, id,
				a ? "ok" : "MISMATCH", b ? "ok" : "MISMATCH", c ? "ok" : "MISMATCH", s ? "ok" : "MISMATCH");
			if (!a) {
				print_ids("got ", ids, n1);
				print_ids("want", rids, nr);
			}
			if (!c)
				fprintf(stderr, "  got  [%s]\n  want [%s]\n", dec.data, want_dec);
			if (!s)
				fprintf(stderr, "  stream [%s]\n", st.data);
		}
		free(rids);
		free(ids);
		free(ids2);
		buf_deinit(&dec);
		buf_deinit(&st);
		cJSON_Delete(v);
		n++;
	}
	free(line);
	fclose(f);
	free(vec_path);
	printf("%-8s %d vectors: ids %d/%d, ids_with_special %d/%d, decoded %d/%d, stream==decode %d/%d\n", name,
	       n, ok_ids, n, ok_special, n, ok_dec, n, ok_stream, n);
	fflush(stdout);
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(ok_ids, n);
	ck_assert_int_eq(ok_special, n);
	ck_assert_int_eq(ok_dec, n);
	ck_assert_int_eq(ok_stream, n);
	tok_destroy(t);
}

START_TEST(test_vectors)
{
	run_vectors(names[_i]);
}
END_TEST

static void encode_expect(const struct tokenizer *t, const char *s, unsigned flags, const int32_t *want, size_t nw)
{
	int32_t *ids;
	size_t n;
	ck_assert_int_eq(tok_encode(t, s, strlen(s), flags, &ids, &n), 0);
	ck_assert_uint_eq(n, nw);
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(ids[i], want[i]);
	free(ids);
}

START_TEST(test_parse_special_flag)
{
	struct tokenizer *t;
	struct diag d;
	ck_assert_msg(tt_load("qwen3", &t, &d) == 0, "%s", d.msg);
	const char *s = "<|im_start|>";
	encode_expect(t, s, TOK_PARSE_SPECIAL, (const int32_t[]){ 151644 }, 1);
	/* as user text the special token is plain text, several tokens */
	int32_t *ids;
	size_t n;
	ck_assert_int_eq(tok_encode(t, s, strlen(s), 0, &ids, &n), 0);
	ck_assert_uint_gt(n, 1);
	for (size_t i = 0; i < n; i++)
		ck_assert(!tok_is_special(t, ids[i]));
	struct buf b;
	buf_init(&b);
	ck_assert_int_eq(tok_decode(t, ids, n, 0, &b), 0);
	ck_assert_str_eq(b.data, s);
	free(ids);
	/* non-special added tokens (<think>) are matched either way */
	int32_t think = tok_piece_id(t, "<think>", 7);
	ck_assert_int_ge(think, 0);
	ck_assert(!tok_is_special(t, think));
	encode_expect(t, "<think>", 0, (const int32_t[]){ think }, 1);
	/* skip special on decode */
	buf_clear(&b);
	const int32_t seq[] = { 151644, think };
	ck_assert_int_eq(tok_decode(t, seq, 2, TOK_SKIP_SPECIAL, &b), 0);
	ck_assert_str_eq(b.data, "<think>");
	ck_assert_int_eq(tok_eos(t), 151645);
	ck_assert_int_eq(tok_bos(t), -1);
	/* out of range ids */
	buf_clear(&b);
	const int32_t bad[] = { 5, tok_vocab_size(t) };
	ck_assert_int_eq(tok_decode(t, bad, 2, 0, &b), ERR_RANGE);
	buf_deinit(&b);
	tok_destroy(t);
}
END_TEST

START_TEST(test_bos_eos)
{
	struct tokenizer *t;
	struct diag d;
	ck_assert_msg(tt_load("mistral", &t, &d) == 0, "%s", d.msg);
	ck_assert_int_eq(tok_bos(t), 1);
	ck_assert_int_eq(tok_eos(t), 2);
	ck_assert(tok_add_bos(t));
	ck_assert(tok_is_special(t, 1));
	size_t len;
	const char *p = tok_token_text(t, 22557, &len);
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq((int)len, 8);
	ck_assert_int_eq(memcmp(p, "\xE2\x96\x81Hello", 8), 0);
	ck_assert_ptr_null(tok_token_text(t, -1, &len));
	ck_assert_ptr_null(tok_token_text(t, 32000, &len));
	tok_destroy(t);
	ck_assert_msg(tt_load("llama3", &t, &d) == 0, "%s", d.msg);
	ck_assert_int_eq(tok_bos(t), 128000);
	ck_assert(!tok_add_bos(t));
	tok_destroy(t);
}
END_TEST

/* Invalid UTF-8 encodes exactly as its lossy repair; decode stays valid
 * (but for TOK_KEEP_BYTES). */
START_TEST(test_invalid_utf8)
{
	static const struct {
		const char *bad, *fixed;
	} cases[] = {
		{ "a\xFF" "b", "a\xEF\xBF\xBD" "b" },
		{ "\xE4\xB8", "\xEF\xBF\xBD" },
		{ "x\xE4\xB8y\x80\x80", "x\xEF\xBF\xBDy\xEF\xBF\xBD\xEF\xBF\xBD" },
		{ "\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" }, /* surrogate */
		{ "\xF0\x9F\x98", "\xEF\xBF\xBD" },
		{ "\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD" }, /* overlong */
	};
	for (int k = 0; k < 4; k++) {
		struct tokenizer *t;
		struct diag d;
		ck_assert_msg(tt_load(names[k], &t, &d) == 0, "%s", d.msg);
		for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
			int32_t *a, *b;
			size_t na, nb;
			ck_assert_int_eq(tok_encode(t, cases[c].bad, strlen(cases[c].bad), 0, &a, &na), 0);
			ck_assert_int_eq(tok_encode(t, cases[c].fixed, strlen(cases[c].fixed), 0, &b, &nb), 0);
			ck_assert_uint_eq(na, nb);
			ck_assert_int_eq(memcmp(a, b, na * sizeof(int32_t)), 0);
			free(a);
			free(b);
		}
		/* bytes that do not form UTF-8 decode to U+FFFD, whole and streamed */
		int32_t lone = k == 0 || k == 3 ? tok_piece_id(t, "<0xE4>", 6) : tok_piece_id(t, "\xC3\xA4", 2);
		ck_assert_int_ge(lone, 0);
		int32_t seq[] = { lone, lone };
		struct buf w, s;
		buf_init(&w);
		buf_init(&s);
		ck_assert_int_eq(tok_decode(t, seq, 2, 0, &w), 0);
		ck_assert_int_eq(stream_all(t, seq, 2, 0, &s), 0);
		ck_assert_uint_gt(w.len, 0);
		ck_assert_int_eq(strstr(w.data, "\xEF\xBF\xBD") != NULL, 1);
		ck_assert_str_eq(w.data, s.data);
		/* TOK_KEEP_BYTES: the token's own byte instead (logprobs' "bytes") */
		buf_clear(&w);
		ck_assert_int_eq(tok_decode(t, seq, 2, TOK_KEEP_BYTES, &w), 0);
		ck_assert_uint_eq(w.len, 2);
		ck_assert_int_eq(memcmp(w.data, "\xE4\xE4", 2), 0);
		buf_deinit(&w);
		buf_deinit(&s);
		tok_destroy(t);
	}
}
END_TEST

/* The stream holds back a partial character and never emits one. */
START_TEST(test_stream_partial)
{
	struct tokenizer *t;
	struct diag d;
	ck_assert_msg(tt_load("llama3", &t, &d) == 0, "%s", d.msg);
	/* "中" is E4 B8 AD: push its bytes as byte-level tokens one by one */
	const char *bytes[] = { "\xC3\xA4", "\xC2\xB8", "\xC5\x83" }; /* ä ¸ Ń */
	struct tok_stream s;
	tok_stream_init(&s, t, 0);
	struct buf out;
	buf_init(&out);
	for (int i = 0; i < 3; i++) {
		int32_t id = tok_piece_id(t, bytes[i], strlen(bytes[i]));
		ck_assert_int_ge(id, 0);
		ck_assert_int_eq(tok_stream_push(&s, id, &out), 0);
		ck_assert_uint_eq(out.len, i < 2 ? 0 : 3);
	}
	ck_assert_int_eq(memcmp(out.data, "\xE4\xB8\xAD", 3), 0);
	ck_assert_int_eq(tok_stream_finish(&s, &out), 0);
	ck_assert_uint_eq(out.len, 3);
	ck_assert_int_eq(tok_stream_push(&s, tok_vocab_size(t) + 5, &out), ERR_RANGE);
	tok_stream_deinit(&s);
	buf_deinit(&out);
	tok_destroy(t);
}
END_TEST

/* A byte that can never start a character is final at once: the stream emits
 * its U+FFFD on the spot (and keeps its window short), while a lead byte waits. */
START_TEST(test_stream_invalid_bytes)
{
	struct tokenizer *t;
	struct diag d;
	ck_assert_msg(tt_load("llama3", &t, &d) == 0, "%s", d.msg);
	int32_t cont = tok_piece_id(t, "\xC4\xA2", 2); /* byte 0x80 */
	int32_t lead = tok_piece_id(t, "\xC3\xA4", 2); /* byte 0xE4 */
	ck_assert_int_ge(cont, 0);
	ck_assert_int_ge(lead, 0);
	struct tok_stream s;
	tok_stream_init(&s, t, 0);
	struct buf out;
	buf_init(&out);
	for (int i = 0; i < 2000; i++) {
		ck_assert_int_eq(tok_stream_push(&s, cont, &out), 0);
		ck_assert_uint_eq(out.len, 3 * (size_t)(i + 1));
		ck_assert_uint_le(s.n_ids, 1);
	}
	ck_assert_int_eq(tok_stream_push(&s, lead, &out), 0);
	ck_assert_uint_eq(out.len, 3 * 2000); /* held: E4 may start a character */
	ck_assert_int_eq(tok_stream_finish(&s, &out), 0);
	ck_assert_uint_eq(out.len, 3 * 2001);
	ck_assert_int_eq(memcmp(out.data + 3 * 2000, "\xEF\xBF\xBD", 3), 0);
	tok_stream_deinit(&s);
	buf_deinit(&out);
	tok_destroy(t);
}
END_TEST

/* Every sequence of up to max_len ids from pieces[] streams to exactly its
 * whole decode. */
static void stream_exhaustive(const char *name, const char *const *pieces, int np, int max_len)
{
	struct tokenizer *t;
	struct diag d;
	ck_assert_msg(tt_load(name, &t, &d) == 0, "%s", d.msg);
	int32_t id[16];
	ck_assert_int_le(np, 16);
	for (int i = 0; i < np; i++) {
		id[i] = tok_piece_id(t, pieces[i], strlen(pieces[i]));
		ck_assert_msg(id[i] >= 0, "%s: piece %d", name, i);
	}
	int bad = 0, total = 0;
	struct buf w, s;
	buf_init(&w);
	buf_init(&s);
	for (int len = 1; len <= max_len; len++) {
		int n_seq = 1;
		for (int k = 0; k < len; k++)
			n_seq *= np;
		for (int q = 0; q < n_seq; q++) {
			int32_t seq[8];
			int which[8];
			for (int k = 0, x = q; k < len; k++, x /= np) {
				which[k] = x % np;
				seq[k] = id[which[k]];
			}
			buf_clear(&w);
			buf_clear(&s);
			ck_assert_int_eq(tok_decode(t, seq, (size_t)len, 0, &w), 0);
			ck_assert_int_eq(stream_all(t, seq, (size_t)len, 0, &s), 0);
			if (s.len != w.len || (w.len && memcmp(s.data, w.data, w.len))) {
				if (bad++ < 5) {
					fprintf(stderr, "%s: stream [%s] != whole [%s] for", name, s.data ? s.data : "", w.data);
					for (int k = 0; k < len; k++)
						fprintf(stderr, " [%s]", pieces[which[k]]);
					fprintf(stderr, "\n");
				}
			}
			total++;
		}
	}
	buf_deinit(&w);
	buf_deinit(&s);
	ck_assert_msg(bad == 0, "%s: %d of %d sequences stream differently", name, bad, total);
	tok_destroy(t);
}

/* llama3's clean-up: pieces around its patterns (" ' " + "s" cascades into "'s"). */
START_TEST(test_stream_cleanup_exhaustive)
{
	/* 39 spaces: a run longer than any pattern (libFuzzer found a cut inside one) */
	static const char sp39[] = "\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0"
				   "\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0"
				   "\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0"
				   "\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0";
	static const char *const pieces[] = { "\xC4\xA0", "\xC4\xA0'", "\xC4\xA0s", "\xC4\xA0n", "'t", ".", "\xC4\xA0.",
					      "'s", "'ve", "x", "'", "\xC4\xA0,", "ve", sp39 };
	stream_exhaustive("llama3", pieces, 14, 4);
}
END_TEST

/* SentencePiece decoders: Replace, ByteFallback runs (valid, invalid, cut
 * short), Fuse, Strip of the leading space; specials in between. */
START_TEST(test_stream_spm_exhaustive)
{
	static const char *const mistral[] = { "\xE2\x96\x81", "\xE2\x96\x81" "a", "<0xE4>", "<0xB8>", "<0xAD>",
					       "<0x80>", "a", "<s>", "</s>" };
	stream_exhaustive("mistral", mistral, 9, 5);
	static const char *const gemma[] = { "\xE2\x96\x81", "\xE2\x96\x81\xE2\x96\x81", "<0xE4>", "<0xB8>",
					     "<0xAD>", "<0xF0>", "a", "<bos>", "\n" };
	stream_exhaustive("gemma3", gemma, 9, 5);
}
END_TEST

/* Byte-level: bytes of a 3-byte character, a stray continuation byte, an
 * ASCII letter, a space, special and non-special added tokens. */
START_TEST(test_stream_bytelevel_exhaustive)
{
	static const char *const qwen[] = { "\xC3\xA4", "\xC2\xB8", "\xC5\x83", "\xC4\xA2", "a", "\xC4\xA0",
					    "<|im_start|>", "<think>" };
	stream_exhaustive("qwen3", qwen, 8, 5);
}
END_TEST

/* tok_load_for_model picks the HF directory's tokenizer.json (+ config). */
START_TEST(test_load_for_model)
{
	struct model m;
	memset(&m, 0, sizeof(m));
	struct tokenizer *t;
	struct diag d = { 0 };
	ck_assert_int_eq(tok_load_for_model(&m, &t, &d), ERR_NOTFOUND);
	m.format = MODEL_FORMAT_HF;
	m.tokenizer_json_path = tt_path("mistral", "tokenizer.json");
	m.tokenizer_config_path = tt_path("mistral", "tokenizer_config.json");
	ck_assert_msg(tok_load_for_model(&m, &t, &d) == 0, "%s", d.msg);
	ck_assert_int_eq(tok_bos(t), 1);
	ck_assert(tok_add_bos(t));
	tok_destroy(t);
	free(m.tokenizer_json_path);
	free(m.tokenizer_config_path);
	/* a missing or broken file is an error with a message, not a crash */
	m.tokenizer_json_path = (char *)"/nonexistent/tokenizer.json";
	m.tokenizer_config_path = NULL;
	ck_assert_int_eq(tok_load_for_model(&m, &t, &d), ERR_IO);
	ck_assert_ptr_nonnull(strstr(d.msg, "/nonexistent/tokenizer.json"));
}
END_TEST

/* One loaded tokenizer shared by several threads: each encodes and decodes
 * every fixture text (different starting points) and must get what one thread
 * gets (the server tokenizes on a worker pool, detokenizes on the engine thread). */
struct mt_job {
	const struct tokenizer *t;
	char **texts;
	int32_t **ids;
	size_t *n_ids;
	int n, start, bad;
};

static void *mt_worker(void *arg)
{
	struct mt_job *j = arg;
	for (int r = 0; r < 3; r++)
		for (int k = 0; k < j->n; k++) {
			int i = (k + j->start) % j->n;
			int32_t *ids;
			size_t n;
			if (tok_encode(j->t, j->texts[i], strlen(j->texts[i]), TOK_PARSE_SPECIAL, &ids, &n) ||
			    n != j->n_ids[i] || (n && memcmp(ids, j->ids[i], n * sizeof(int32_t))))
				j->bad++;
			struct buf b;
			buf_init(&b);
			if (tok_decode(j->t, ids, n, 0, &b))
				j->bad++;
			buf_deinit(&b);
			free(ids);
		}
	return NULL;
}

START_TEST(test_threads)
{
	struct tokenizer *t;
	struct diag d;
	ck_assert_msg(tt_load(names[_i], &t, &d) == 0, "%s", d.msg);
	char *vp = tt_path(names[_i], "vectors.jsonl");
	FILE *f = fopen(vp, "rb");
	ck_assert_ptr_nonnull(f);
	char *texts[400], *line = NULL;
	int32_t *ids[400];
	size_t n_ids[400], cap = 0;
	int n = 0;
	ssize_t got;
	while (n < 400 && (got = getline(&line, &cap, f)) > 0) {
		cJSON *v = cJSON_ParseWithLength(line, (size_t)got);
		texts[n] = strdup(cJSON_GetObjectItem(v, "text")->valuestring);
		ck_assert_int_eq(tok_encode(t, texts[n], strlen(texts[n]), TOK_PARSE_SPECIAL, &ids[n], &n_ids[n]), 0);
		cJSON_Delete(v);
		n++;
	}
	free(line);
	fclose(f);
	free(vp);
	pthread_t th[4];
	struct mt_job jobs[4];
	for (int i = 0; i < 4; i++) {
		jobs[i] = (struct mt_job){ t, texts, ids, n_ids, n, i * 37, 0 };
		ck_assert_int_eq(pthread_create(&th[i], NULL, mt_worker, &jobs[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		ck_assert_int_eq(jobs[i].bad, 0);
	}
	for (int i = 0; i < n; i++) {
		free(texts[i]);
		free(ids[i]);
	}
	tok_destroy(t);
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
	Suite *s = suite_create("tokenizer");
	TCase *tc = tcase_create("vectors");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_vectors, 0, 4);
	suite_add_tcase(s, tc);
	TCase *tu = tcase_create("behaviour");
	tcase_set_timeout(tu, 120);
	tcase_add_test(tu, test_parse_special_flag);
	tcase_add_test(tu, test_bos_eos);
	tcase_add_test(tu, test_invalid_utf8);
	tcase_add_test(tu, test_stream_partial);
	tcase_add_test(tu, test_stream_invalid_bytes);
	tcase_add_test(tu, test_load_for_model);
	tcase_add_test(tu, test_stream_cleanup_exhaustive);
	tcase_add_test(tu, test_stream_spm_exhaustive);
	tcase_add_test(tu, test_stream_bytelevel_exhaustive);
	tcase_add_loop_test(tu, test_threads, 1, 3); /* llama3, qwen3 */
	suite_add_tcase(s, tu);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
