/* tests/fuzz/fuzz_tokenizer.c — libFuzzer target for the tokenizer
 * (engine/tok_*.c) on arbitrary bytes. The first byte picks one of the fixture
 * tokenizers and the flags; the rest is the text. Checked for every input:
 *   - encode succeeds and every id is in the vocabulary;
 *   - invalid UTF-8 encodes exactly as its lossy repair (U+FFFD per maximal
 *     invalid subsequence) — the behaviour tokenizer.h defines;
 *   - decode succeeds and gives valid UTF-8;
 *   - streaming decode, id by id, equals the whole decode;
 *   - round trip without special-token parsing: llama3 gives back the repaired
 *     text after transformers' clean-up; gemma3 gives it back with U+2581 as
 *     a space (its decoder's Replace).
 * The fixtures come from $AORTA_FIXTURES (default /work/shared/fixtures), the
 * synthetic tokenizers from $AORTA_SOURCE_ROOT/tests/tokenizer/synthetic.
 * With -DFUZZ_REPLAY_MAIN it is a plain program: it replays the files given
 * on the command line, then 2000 pseudo-random inputs from a fixed seed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "engine/tok/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* the four fixture tokenizers, then the synthetic ones of tests/tokenizer/
 * (lstrip/rstrip/single_word, normalized added tokens, Metaspace, Split modes) */
static const char *const names[] = { "mistral", "llama3", "qwen3", "gemma3", "bytelevel", "metaspace", "splits" };
#define N_TOK 7
#define N_FIXTURE 4

/* Loaded once per process: libFuzzer's harness has no context pointer. */
static struct tokenizer *toks[N_TOK];
static int loaded = -1; /* -1 not tried, 0 none, 1 loaded */

static void load_all(void)
{
	const char *root = getenv("AORTA_FIXTURES");
	if (!root)
		root = "/work/shared/fixtures";
	const char *src = getenv("AORTA_SOURCE_ROOT");
	if (!src)
		src = ".";
	loaded = 0;
	for (int i = 0; i < N_TOK; i++) {
		char j[1024], c[1024];
		if (i < N_FIXTURE) {
			snprintf(j, sizeof j, "%s/tokenizers/%s/tokenizer.json", root, names[i]);
			snprintf(c, sizeof c, "%s/tokenizers/%s/tokenizer_config.json", root, names[i]);
		} else {
			snprintf(j, sizeof j, "%s/tests/tokenizer/synthetic/%s.json", src, names[i]);
			c[0] = 0;
		}
		struct diag d;
		if (access(j, R_OK) == 0 && tok_load_json(j, c[0] ? c : NULL, &toks[i], &d) == 0)
			loaded = 1;
		else
			toks[i] = NULL;
	}
}

/* libFuzzer calls this once before timing inputs (loading takes seconds). */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	load_all();
	return 0;
}

static void fail(const char *what, const char *name)
{
	fprintf(stderr, "fuzz_tokenizer: %s (%s)\n", what, name);
	abort();
}

/* The lossy repair, written independently of the library's. */
static void lossy(const uint8_t *s, size_t n, struct buf *out)
{
	size_t i = 0;
	while (i < n) {
		uint8_t c = s[i];
		size_t need = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 :
					     (c >= 0xF0 && c <= 0xF4)	? 4 :
										  0;
		if (need == 0) {
			buf_append(out, "\xEF\xBF\xBD", 3);
			i++;
			continue;
		}
		size_t k = 1;
		for (; k < need && i + k < n; k++) {
			uint8_t b = s[i + k];
			uint8_t lo = 0x80, hi = 0xBF;
			if (k == 1 && c == 0xE0)
				lo = 0xA0;
			if (k == 1 && c == 0xED)
				hi = 0x9F;
			if (k == 1 && c == 0xF0)
				lo = 0x90;
			if (k == 1 && c == 0xF4)
				hi = 0x8F;
			if (b < lo || b > hi)
				break;
		}
		if (k == need)
			buf_append(out, s + i, need);
		else
			buf_append(out, "\xEF\xBF\xBD", 3);
		i += k;
	}
	if (!out->data)
		buf_append(out, "", 0);
}

static void replace_all(struct buf *s, const char *pat, const char *rep)
{
	struct buf o;
	buf_init(&o);
	size_t pn = strlen(pat), i = 0;
	while (i < s->len) {
		if (i + pn <= s->len && !memcmp(s->data + i, pat, pn)) {
			buf_append_str(&o, rep);
			i += pn;
		} else {
			buf_append(&o, s->data + i, 1);
			i++;
		}
	}
	buf_append(&o, "", 0);
	buf_deinit(s);
	*s = o;
}

static bool valid_utf8(const char *s, size_t n)
{
	struct buf b;
	buf_init(&b);
	lossy((const uint8_t *)s, n, &b);
	bool ok = b.len == n && (n == 0 || !memcmp(b.data, s, n));
	buf_deinit(&b);
	return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (loaded < 0)
		load_all();
	if (loaded == 0 || size == 0)
		return 0;
	int k = data[0] % N_TOK;
	const struct tokenizer *t = toks[k];
	if (!t)
		return 0;
	unsigned flags = ((data[0] >> 2) & 1 ? TOK_ADD_SPECIAL : 0) | ((data[0] >> 3) & 1 ? TOK_PARSE_SPECIAL : 0);
	const char *text = (const char *)data + 1;
	size_t len = size - 1;

	int32_t *ids, *ids2;
	size_t n, n2;
	if (tok_encode(t, text, len, flags, &ids, &n))
		fail("encode failed", names[k]);
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= tok_vocab_size(t))
			fail("id out of range", names[k]);
	struct buf fixed;
	buf_init(&fixed);
	lossy(data + 1, len, &fixed);
	if (tok_encode(t, fixed.data, fixed.len, flags, &ids2, &n2))
		fail("encode of repaired text failed", names[k]);
	if (n != n2 || memcmp(ids, ids2, n * sizeof(int32_t)))
		fail("invalid UTF-8 does not encode as its repair", names[k]);

	struct buf whole, streamed;
	buf_init(&whole);
	buf_init(&streamed);
	unsigned dflags = (data[0] >> 4) & 1 ? TOK_SKIP_SPECIAL : 0;
	if (tok_decode(t, ids, n, dflags, &whole))
		fail("decode failed", names[k]);
	if (!valid_utf8(whole.data, whole.len))
		fail("decode gave invalid UTF-8", names[k]);
	struct tok_stream s;
	tok_stream_init(&s, t, dflags);
	for (size_t i = 0; i < n; i++) {
		size_t before = streamed.len;
		if (tok_stream_push(&s, ids[i], &streamed))
			fail("stream push failed", names[k]);
		if (streamed.len > before && !valid_utf8(streamed.data + before, streamed.len - before))
			fail("stream emitted a partial character", names[k]);
	}
	if (tok_stream_finish(&s, &streamed))
		fail("stream finish failed", names[k]);
	tok_stream_deinit(&s);
	if (streamed.len != whole.len || (whole.len && memcmp(streamed.data, whole.data, whole.len)))
		fail("stream != whole decode", names[k]);

	if (!(flags & (TOK_PARSE_SPECIAL | TOK_ADD_SPECIAL)) && !dflags && (k == 1 || k == 3)) {
		if (k == 1) {
			static const char *const cl[][2] = { { " .", "." },	   { " ?", "?" },   { " !", "!" },
							     { " ,", "," },	   { " ' ", "'" },  { " n't", "n't" },
							     { " 'm", "'m" },	   { " 's", "'s" }, { " 've", "'ve" },
							     { " 're", "'re" } };
			for (size_t c = 0; c < sizeof cl / sizeof cl[0]; c++)
				replace_all(&fixed, cl[c][0], cl[c][1]);
		} else {
			replace_all(&fixed, "\xE2\x96\x81", " ");
		}
		if (fixed.len != whole.len || (whole.len && memcmp(fixed.data, whole.data, whole.len)))
			fail("round trip changed the text", names[k]);
	}
	free(ids);
	free(ids2);
	buf_deinit(&fixed);
	buf_deinit(&whole);
	buf_deinit(&streamed);
	return 0;
}

#ifdef FUZZ_REPLAY_MAIN
int main(int argc, char **argv)
{
	load_all();
	if (loaded == 0) {
		fprintf(stderr, "SKIP: tokenizer fixtures not found (set AORTA_FIXTURES)\n");
		return 77;
	}
	static uint8_t data[1 << 20];
	int n = 0;
	for (int i = 1; i < argc; i++) {
		FILE *fp = fopen(argv[i], "rb");
		if (!fp) {
			fprintf(stderr, "%s: cannot open\n", argv[i]);
			return 1;
		}
		size_t len = fread(data, 1, sizeof data, fp);
		fclose(fp);
		LLVMFuzzerTestOneInput(data, len);
		n++;
	}
	/* random inputs: mostly UTF-8-ish pieces, some raw bytes */
	static const char *const frag[] = { " ", "a", "Hello", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "\xE2\x96\x81", "'s",
					    " n't", " .", "<s>", "<|im_start|>", "<think>", "\n", "\r\n", "\t", "12345",
					    "\xC3\xA9", "e\xCC\x81", "\xEF\xBB\xBF", "\xC2\x85", " '", "'" };
	uint64_t x = 0x9E3779B97F4A7C15ull;
	for (int r = 0; r < 2000; r++) {
		size_t len = 0;
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		data[len++] = (uint8_t)x;
		int parts = (int)(x >> 8) % 24;
		for (int p = 0; p < parts; p++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			if ((x >> 40) % 4 == 0) {
				data[len++] = (uint8_t)(x >> 16);
			} else {
				const char *f = frag[(x >> 20) % (sizeof frag / sizeof frag[0])];
				memcpy(data + len, f, strlen(f));
				len += strlen(f);
			}
		}
		LLVMFuzzerTestOneInput(data, len);
		n++;
	}
	printf("replayed %d inputs\n", n);
	for (int i = 0; i < N_TOK; i++)
		tok_destroy(toks[i]);
	return 0;
}
#endif
