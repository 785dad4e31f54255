/* server/bench/bench_workload.c — the benchmark's prompts: fixed lengths,
 * ShareGPT-like log-normal lengths, or a JSONL file, with optional shared-
 * prefix groups. Without a tokenizer, a prompt of N "tokens" is N words drawn
 * from a list of common English words that BPE vocabularies (GPT-2, Llama,
 * Qwen) keep as one token with a leading space; the server's usage reports the
 * real count. Parameters are documented in bench_serve.h.
 * Tested in tests/bench_serve/test_bench_stats.c (lengths, determinism). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "bench_rng.h"
#include "bench_serve.h"
#include "common/buf.h"
#include "common/checked.h"
#include "engine/model/gguf.h"
#include "engine/tok/tokenizer.h"

static const char *const words[] = {
    "the",    "of",    "and",   "to",    "in",     "is",     "that",    "for",   "it",
    "as",     "was",   "with",  "be",    "by",     "on",     "not",     "he",    "this",
    "are",    "or",    "his",   "from",  "at",     "which",  "but",     "have",  "an",
    "had",    "they",  "you",   "were",  "their",  "one",    "all",     "we",    "can",
    "her",    "has",   "there", "been",  "if",     "more",   "when",    "will",  "would",
    "who",    "so",    "no",    "time",  "people", "year",   "way",     "day",   "man",
    "thing",  "world", "life",  "hand",  "part",   "child",  "eye",     "woman", "place",
    "work",   "week",  "case",  "point", "number", "group",  "problem", "fact",  "good",
    "new",    "first", "last",  "long",  "great",  "little", "own",     "other", "old",
    "right",  "big",   "high",  "small", "large",  "next",   "early",   "young", "important",
    "public", "bad",   "same",  "able",  "house",  "water",  "city",    "light", "music",
    "river",  "table", "green", "blue",  "red",    "black",  "white",   "night", "morning",
    "book",   "story", "game",  "money", "power",  "school", "family",  "state", "system",
};
#define N_WORDS (sizeof words / sizeof words[0])

static int append_words(struct buf *b, struct bench_rng *rng, int n)
{
	for (int i = 0; i < n; i++) {
		if (b->len && buf_append_char(b, ' '))
			return ERR_NOMEM;
		if (buf_append_str(b, words[bench_rng_u64(rng) % N_WORDS]))
			return ERR_NOMEM;
	}
	return 0;
}

static int clamp_int(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* Log-normal length with the given median and sigma, clipped to [lo, hi]. */
static int lognormal_len(struct bench_rng *rng, double median, double sigma, int lo, int hi)
{
	double x = median * exp(sigma * bench_rng_normal(rng));
	if (!(x < (double)hi))
		return hi;
	return clamp_int((int)lround(x), lo, hi);
}

static int count_words(const char *s)
{
	int n = 0;
	bool in_word = false;
	for (; *s; s++) {
		bool sp = *s == ' ' || *s == '\n' || *s == '\t' || *s == '\r';
		if (!sp && !in_word)
			n++;
		in_word = !sp;
	}
	return n;
}

/* Read the JSONL file into a NULL-terminated array of prompt objects' fields. */
struct jsonl_line {
	char *prompt;
	int output_len; /* 0: not given */
};

static int read_jsonl(const char *path, struct jsonl_line **out, int *n_out, struct diag *d)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return diag_set(d, ERR_IO, "%s: cannot open", path);
	struct jsonl_line *v = NULL;
	int n = 0, cap = 0, lineno = 0, rc = 0;
	struct buf line;
	buf_init(&line);
	for (;;) {
		int ch = fgetc(f);
		if (ch != EOF && ch != '\n') {
			if (line.len >= (64u << 20)) {
				rc = diag_set(d, ERR_TOO_LARGE, "%s:%d: line over 64 MiB", path,
				              lineno + 1);
				break;
			}
			if (buf_append_char(&line, (char)ch)) {
				rc = diag_set(d, ERR_NOMEM, "out of memory");
				break;
			}
			continue;
		}
		lineno++;
		bool blank = true;
		for (size_t i = 0; i < line.len; i++)
			blank = blank && (line.data[i] == ' ' || line.data[i] == '\t' ||
			                  line.data[i] == '\r');
		if (!blank) {
			cJSON *o = cJSON_ParseWithLength(line.data, line.len);
			cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prompt");
			cJSON *ol = cJSON_GetObjectItemCaseSensitive(o, "output_len");
			if (!cJSON_IsString(p) ||
			    (ol && (!cJSON_IsNumber(ol) || ol->valuedouble < 1 ||
			            ol->valuedouble > 1e7))) {
				cJSON_Delete(o);
				rc =
				    diag_set(d, ERR_FORMAT,
				             "%s:%d: expected {\"prompt\": string, \"output_len\": "
				             "positive int (optional)}",
				             path, lineno);
				break;
			}
			if (n == cap) {
				int nc = cap ? cap * 2 : 64;
				struct jsonl_line *nv = realloc(v, (size_t)nc * sizeof *v);
				if (!nv || nc < cap) {
					cJSON_Delete(o);
					rc = diag_set(d, ERR_NOMEM, "out of memory");
					break;
				}
				v = nv;
				cap = nc;
			}
			v[n].prompt = strdup(p->valuestring);
			v[n].output_len = ol ? (int)ol->valuedouble : 0;
			cJSON_Delete(o);
			if (!v[n].prompt) {
				rc = diag_set(d, ERR_NOMEM, "out of memory");
				break;
			}
			n++;
		}
		buf_clear(&line);
		if (ch == EOF)
			break;
	}
	buf_deinit(&line);
	fclose(f);
	if (!rc && n == 0)
		rc = diag_set(d, ERR_FORMAT, "%s: no prompts", path);
	if (rc) {
		for (int i = 0; i < n; i++)
			free(v[i].prompt);
		free(v);
		return rc;
	}
	*out = v;
	*n_out = n;
	return 0;
}

/* ---- prompt text: words, or random tokens of a real tokenizer ---- */

struct gen {
	struct tokenizer *tok; /* NULL: words */
	struct gguf_file *gguf;
	int32_t *pool; /* ids random text is drawn from: not special, not holes */
	size_t n_pool;
};

static void gen_deinit(struct gen *g)
{
	if (g->tok)
		tok_destroy(g->tok);
	if (g->gguf)
		gguf_close(g->gguf);
	free(g->pool);
	memset(g, 0, sizeof *g);
}

static int gen_load(struct gen *g, const char *path, struct diag *d)
{
	size_t l = strlen(path);
	struct stat st;
	if (l > 5 && !strcmp(path + l - 5, ".gguf")) {
		int rc = gguf_open(path, &g->gguf, d);
		return rc ? rc : tok_load_gguf(g->gguf, &g->tok, d);
	}
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		char json[4096], cfg[4096];
		if (snprintf(json, sizeof json, "%s/tokenizer.json", path) >= (int)sizeof json ||
		    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", path) >= (int)sizeof cfg)
			return diag_set(d, ERR_RANGE, "--tokenizer: path too long");
		return tok_load_json(json, access(cfg, R_OK) == 0 ? cfg : NULL, &g->tok, d);
	}
	return tok_load_json(path, NULL, &g->tok, d);
}

/* Text a prompt can carry as a C string and that survives a JSON round trip
 * unchanged: no control bytes (NUL would cut the prompt short) and no U+FFFD
 * (the decode of a byte token that is not a whole character). */
static bool plain_text(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch < 0x20 || ch == 0x7f)
			return false;
		if (ch == 0xef && i + 2 < n && (unsigned char)s[i + 1] == 0xbf &&
		    (unsigned char)s[i + 2] == 0xbd)
			return false;
	}
	return true;
}

static int gen_init(struct gen *g, const char *path, struct diag *d)
{
	memset(g, 0, sizeof *g);
	if (!path)
		return 0;
	int rc = gen_load(g, path, d);
	if (rc) {
		gen_deinit(g);
		return rc;
	}
	int32_t nv = tok_vocab_size(g->tok);
	g->pool = malloc((size_t)(nv > 0 ? nv : 1) * sizeof *g->pool);
	if (!g->pool) {
		gen_deinit(g);
		return diag_set(d, ERR_NOMEM, "out of memory");
	}
	struct buf one;
	buf_init(&one);
	for (int32_t id = 0; id < nv; id++) {
		size_t len;
		if (!tok_token_text(g->tok, id, &len) || !len || tok_is_special(g->tok, id))
			continue;
		buf_clear(&one);
		if (tok_decode(g->tok, &id, 1, 0, &one) || !one.len ||
		    !plain_text(one.data, one.len))
			continue;
		g->pool[g->n_pool++] = id;
	}
	buf_deinit(&one);
	if (!g->n_pool) {
		gen_deinit(g);
		return diag_set(d, ERR_FORMAT, "%s: no ordinary tokens in the vocabulary", path);
	}
	return 0;
}

/* n random tokens, decoded; re-encoded and adjusted until the text encodes
 * to n tokens (merges across token boundaries and byte pieces that are not
 * whole characters change the count), at most 4 rounds. */
static int tok_random_text(const struct gen *g, struct bench_rng *rng, int n, struct buf *out)
{
	size_t bytes;
	if (n <= 0)
		return 0;
	if (ck_mul((size_t)n, sizeof(int32_t), &bytes))
		return ERR_OVERFLOW;
	int32_t *ids = malloc(bytes);
	if (!ids)
		return ERR_NOMEM;
	for (int i = 0; i < n; i++)
		ids[i] = g->pool[bench_rng_u64(rng) % g->n_pool];
	struct buf text;
	buf_init(&text);
	int rc = 0;
	for (int round = 0; round < 4; round++) {
		buf_clear(&text);
		if ((rc = tok_decode(g->tok, ids, (size_t)n, TOK_SKIP_SPECIAL, &text)))
			break;
		int32_t *enc;
		size_t ne;
		if ((rc = tok_encode(g->tok, text.data ? text.data : "", text.len, 0, &enc, &ne)))
			break;
		if (ne == (size_t)n || round == 3) {
			free(enc);
			break;
		}
		size_t keep = ne < (size_t)n ? ne : (size_t)n;
		memcpy(ids, enc, keep * sizeof *ids);
		for (size_t k = keep; k < (size_t)n; k++)
			ids[k] = g->pool[bench_rng_u64(rng) % g->n_pool];
		free(enc);
	}
	if (!rc && text.len)
		rc = buf_append(out, text.data, text.len);
	buf_deinit(&text);
	free(ids);
	return rc;
}

static int gen_append(const struct gen *g, struct buf *b, struct bench_rng *rng, int n)
{
	return g->tok ? tok_random_text(g, rng, n, b) : append_words(b, rng, n);
}

/* The prompt length reported when the server sends no usage: tokens with
 * special ones (BOS) under a tokenizer, else words. */
static int gen_count(const struct gen *g, const char *text, int *out)
{
	if (!g->tok) {
		*out = count_words(text);
		return 0;
	}
	int32_t *ids;
	size_t n;
	int rc = tok_encode(g->tok, text, strlen(text), TOK_ADD_SPECIAL, &ids, &n);
	if (rc)
		return rc;
	free(ids);
	*out = n > INT32_MAX ? INT32_MAX : (int)n;
	return 0;
}

static int build_prefixes(const struct bench_config *c, const struct gen *gen, char ***out,
                          struct diag *d)
{
	*out = NULL;
	if (c->prefix_len <= 0 || c->num_prefix_groups <= 0)
		return 0;
	char **p = calloc((size_t)c->num_prefix_groups, sizeof *p);
	if (!p)
		return diag_set(d, ERR_NOMEM, "out of memory");
	for (int g = 0; g < c->num_prefix_groups; g++) {
		/* Each group has its own stream, so adding groups keeps earlier prefixes. */
		struct bench_rng rng = {c->seed ^ (0x5eedULL * (uint64_t)(g + 1))};
		struct buf b;
		buf_init(&b);
		int rc = gen_append(gen, &b, &rng, c->prefix_len);
		p[g] = rc ? NULL : buf_take(&b, NULL);
		buf_deinit(&b);
		if (!p[g]) {
			for (int i = 0; i < g; i++)
				free(p[i]);
			free(p);
			return diag_set(d, ERR_NOMEM, "out of memory");
		}
	}
	*out = p;
	return 0;
}

void bench_workload_free(struct bench_workload *w)
{
	if (!w->items)
		return;
	for (int i = 0; i < w->n; i++)
		free(w->items[i].text);
	free(w->items);
	w->items = NULL;
	w->n = 0;
}

static int validate(const struct bench_config *c, struct diag *d)
{
	if (c->num_prompts < 1 || c->num_prompts > 10000000)
		return diag_set(d, ERR_RANGE, "--num-prompts must be in [1, 10000000]");
	if (c->dataset == BENCH_DATA_FIXED && (c->input_len < 1 || c->input_len > 10000000))
		return diag_set(d, ERR_RANGE, "--input-len must be in [1, 10000000]");
	if (c->output_len < 1 || c->output_len > 10000000)
		return diag_set(d, ERR_RANGE, "--output-len must be in [1, 10000000]");
	if (c->prefix_len < 0 || c->prefix_len > 10000000 || c->num_prefix_groups < 0 ||
	    c->num_prefix_groups > 100000)
		return diag_set(d, ERR_RANGE, "--prefix-len / --num-prefix-groups out of range");
	if (c->max_input_len < 0 || c->max_output_len < 0)
		return diag_set(d, ERR_RANGE, "--max-input-len / --max-output-len must be >= 0");
	if (c->dataset == BENCH_DATA_JSONL && !c->dataset_path)
		return diag_set(d, ERR_INVAL, "--dataset jsonl needs --dataset-path FILE");
	return 0;
}

int bench_workload_build(const struct bench_config *c, struct bench_workload *w, struct diag *d)
{
	memset(w, 0, sizeof *w);
	int rc = validate(c, d);
	if (rc)
		return rc;
	struct jsonl_line *lines = NULL;
	int n_lines = 0;
	if (c->dataset == BENCH_DATA_JSONL &&
	    (rc = read_jsonl(c->dataset_path, &lines, &n_lines, d)))
		return rc;
	char **prefixes = NULL;
	struct gen gen;
	if ((rc = gen_init(&gen, c->tokenizer_path, d)))
		goto out;
	if ((rc = build_prefixes(c, &gen, &prefixes, d)))
		goto out;
	w->items = calloc((size_t)c->num_prompts, sizeof *w->items);
	if (!w->items) {
		rc = diag_set(d, ERR_NOMEM, "out of memory");
		goto out;
	}
	w->n = c->num_prompts;
	struct bench_rng rng = {c->seed};
	int in_hi = c->max_input_len > 0 && c->max_input_len < 2048 ? c->max_input_len : 2048;
	int out_hi = c->max_output_len > 0 && c->max_output_len < 1024 ? c->max_output_len : 1024;
	for (int i = 0; i < w->n; i++) {
		struct bench_prompt *p = &w->items[i];
		struct buf b;
		buf_init(&b);
		int in_len = c->input_len;
		p->output_len = c->output_len;
		if (prefixes)
			rc = buf_append_str(&b, prefixes[i % c->num_prefix_groups]);
		if (!rc && c->dataset == BENCH_DATA_JSONL) {
			const struct jsonl_line *l = &lines[i % n_lines];
			if (b.len && !gen.tok)
				rc = buf_append_char(&b, ' ');
			if (!rc)
				rc = buf_append_str(&b, l->prompt);
			if (l->output_len)
				p->output_len = l->output_len;
		} else if (!rc) {
			if (c->dataset == BENCH_DATA_SHAREGPT) {
				in_len =
				    lognormal_len(&rng, 220, 0.9, in_hi < 4 ? in_hi : 4, in_hi);
				p->output_len =
				    lognormal_len(&rng, 180, 0.8, out_hi < 4 ? out_hi : 4, out_hi);
			}
			rc = gen_append(&gen, &b, &rng, in_len);
		}
		p->text = rc ? NULL : buf_take(&b, NULL);
		buf_deinit(&b);
		if (p->text)
			rc = gen_count(&gen, p->text, &p->prompt_len);
		if (!p->text || rc) {
			rc = diag_set(d, rc ? rc : ERR_NOMEM, "building prompts: %s",
			              err_str(rc ? rc : ERR_NOMEM));
			bench_workload_free(w);
			goto out;
		}
	}
out:
	gen_deinit(&gen);
	for (int i = 0; prefixes && i < c->num_prefix_groups; i++)
		free(prefixes[i]);
	free(prefixes);
	for (int i = 0; i < n_lines; i++)
		free(lines[i].prompt);
	free(lines);
	return rc;
}
