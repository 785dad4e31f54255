/* engine/tok/tok_gguf.c — tokenizers from and into GGUF tokenizer.ggml.* keys, in
 * llama.cpp's conventions:
 *   model "gpt2":  byte-level BPE; tokens + merges ("a b", by rank) + pre name
 *                  (llama-bpe, qwen2, gpt-2) mapped to the known split regexes;
 *   model "llama": SentencePiece BPE; tokens + scores + token_type; merging
 *                  takes the adjacent pair whose concatenation has the best
 *                  score; <0xNN> byte fallback; add_space_prefix.
 * Token types: 1 normal, 2 unknown, 3 control (special), 4 user-defined (added,
 * not special), 5 unused, 6 byte. Both build the same struct tokenizer the
 * tokenizer.json loader does. Test: tests/tokenizer/test_tok_gguf.c (every
 * fixture vocabulary written to GGUF gives the tokenizer.json ids).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/gguf.h"
#include "engine/tok/tok_internal.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static const char re_llama3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
				"?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char re_qwen2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
			       "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char re_gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const struct {
	const char *name;
	const char *re;
	bool nfc, ignore_merges, cleanup;
} pre_table[] = {
	/* Llama 3: HF ignore_merges, and its config asks for the clean-up */
	{ "llama-bpe", re_llama3, false, true, true },
	{ "llama3", re_llama3, false, true, true },
	/* Qwen2/3: their tokenizer.json has an NFC normalizer */
	{ "qwen2", re_qwen2, true, false, false },
	{ "gpt-2", re_gpt2, false, false, false },
	{ "default", re_gpt2, false, false, false },
};

#define GROW1(arr, n)                                                          \
	do {                                                                   \
		void *p_ = realloc((arr), ((size_t)(n) + 1) * sizeof(*(arr)));  \
		if (!p_)                                                       \
			return ERR_NOMEM;                                      \
		(arr) = p_;                                                    \
		memset(&(arr)[(n)], 0, sizeof(*(arr)));                        \
	} while (0)

static char *dupmem(const char *s, size_t n)
{
	char *p = malloc(n + 1);
	if (p) {
		memcpy(p, s, n);
		p[n] = 0;
	}
	return p;
}

static int add_dec(struct tokenizer *t, enum tok_dec_kind k, const char *a, const char *b, int start)
{
	GROW1(t->decs, t->n_decs);
	struct tok_dec *dc = &t->decs[t->n_decs++];
	dc->kind = k;
	if (a && !(dc->a = dupmem(a, dc->a_len = strlen(a))))
		return ERR_NOMEM;
	if (b && !(dc->b = dupmem(b, dc->b_len = strlen(b))))
		return ERR_NOMEM;
	dc->start = start;
	return 0;
}

static int add_norm(struct tokenizer *t, enum tok_norm_kind k, const char *a, const char *b)
{
	GROW1(t->norms, t->n_norms);
	struct tok_norm *nm = &t->norms[t->n_norms++];
	nm->kind = k;
	if (a && !(nm->a = dupmem(a, nm->a_len = strlen(a))))
		return ERR_NOMEM;
	if (b && !(nm->b = dupmem(b, nm->b_len = strlen(b))))
		return ERR_NOMEM;
	return 0;
}

static int pipeline_gpt2(struct tokenizer *t, const char *pre, size_t pre_len, struct diag *d)
{
	int k = -1;
	for (size_t i = 0; i < sizeof(pre_table) / sizeof(pre_table[0]); i++)
		if (strlen(pre_table[i].name) == pre_len && !memcmp(pre_table[i].name, pre, pre_len))
			k = (int)i;
	if (k < 0)
		return diag_set(d, ERR_UNSUPPORTED, "tokenizer.ggml.pre \"%.*s\" is not supported", (int)pre_len, pre);
	snprintf(t->gguf_pre, sizeof(t->gguf_pre), "%s", pre_table[k].name);
	t->ignore_merges = pre_table[k].ignore_merges;
	t->cleanup = pre_table[k].cleanup;
	if (pre_table[k].nfc && add_norm(t, NORM_NFC, NULL, NULL))
		return ERR_NOMEM;
	int rc;
	t->pretoks = calloc(2, sizeof(*t->pretoks));
	if (!t->pretoks)
		return ERR_NOMEM;
	t->pretoks[0].kind = PRETOK_SPLIT;
	t->pretoks[0].behavior = SPLIT_ISOLATED;
	t->pretoks[0].re = tok_regex_compile(pre_table[k].re, strlen(pre_table[k].re), d, &rc);
	t->n_pretoks = 1;
	if (rc)
		return rc;
	t->pretoks[1].kind = PRETOK_BYTELEVEL;
	t->n_pretoks = 2;
	t->byte_level = true;
	return add_dec(t, DEC_BYTELEVEL, NULL, NULL, 0);
}

static int pipeline_llama(struct tokenizer *t, bool add_space_prefix)
{
	if (add_space_prefix && add_norm(t, NORM_PREPEND, "\xE2\x96\x81", NULL))
		return ERR_NOMEM;
	if (add_norm(t, NORM_REPLACE, " ", "\xE2\x96\x81"))
		return ERR_NOMEM;
	int rc = add_dec(t, DEC_REPLACE, "\xE2\x96\x81", " ", 0);
	if (!rc)
		rc = add_dec(t, DEC_BYTEFALLBACK, NULL, NULL, 0);
	if (!rc)
		rc = add_dec(t, DEC_FUSE, NULL, NULL, 0);
	if (!rc && add_space_prefix)
		rc = add_dec(t, DEC_STRIP, " ", NULL, 1);
	t->byte_fallback = true;
	t->fuse_unk = true;
	return rc;
}

static int opt_id(const struct gguf_file *g, const char *key, int32_t n_ids, int32_t *out)
{
	uint32_t v;
	int rc = gguf_get_u32(g, key, &v);
	if (rc == ERR_NOTFOUND)
		return 0;
	if (rc)
		return rc;
	if (v >= (uint32_t)n_ids)
		return ERR_RANGE;
	*out = (int32_t)v;
	return 0;
}

static int load_gguf(struct tokenizer *t, const struct gguf_file *g, struct diag *d)
{
	const char *model, *pre = "default";
	size_t model_len, pre_len = 7;
	if (gguf_get_str(g, "tokenizer.ggml.model", &model, &model_len))
		return diag_set(d, ERR_NOTFOUND, "GGUF has no tokenizer.ggml.model");
	bool gpt2 = model_len == 4 && !memcmp(model, "gpt2", 4);
	bool llama = model_len == 5 && !memcmp(model, "llama", 5);
	if (!gpt2 && !llama)
		return diag_set(d, ERR_UNSUPPORTED, "tokenizer.ggml.model \"%.*s\" is not supported", (int)model_len,
				model);
	gguf_get_str(g, "tokenizer.ggml.pre", &pre, &pre_len);

	enum gguf_type et;
	uint64_t n;
	if (gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n) || et != GGUF_TYPE_STRING || n == 0 ||
	    n > INT32_MAX - 1)
		return diag_set(d, ERR_FORMAT, "tokenizer.ggml.tokens: missing or not a string array");
	if (tok_set_ids(t, (int32_t)n))
		return ERR_NOMEM;
	int32_t *types = malloc(n * sizeof(int32_t));
	if (!types)
		return ERR_NOMEM;
	uint64_t nt;
	int rc = 0;
	if (gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &nt) == 0) {
		if (nt != n)
			rc = diag_set(d, ERR_FORMAT, "tokenizer.ggml.token_type: %llu entries for %llu tokens",
				      (unsigned long long)nt, (unsigned long long)n);
		else if ((rc = gguf_arr_read_i32(g, "tokenizer.ggml.token_type", types, n)))
			rc = diag_set(d, rc, "tokenizer.ggml.token_type: not integers");
	} else {
		for (uint64_t i = 0; i < n; i++)
			types[i] = TT_NORMAL;
	}
	for (uint64_t i = 0; i < n && !rc; i++) {
		const char *s;
		size_t len;
		if (gguf_arr_str(g, "tokenizer.ggml.tokens", i, &s, &len) || tok_pool_add(t, s, len, &t->piece[i])) {
			rc = diag_set(d, ERR_FORMAT, "tokenizer.ggml.tokens[%llu]: unreadable", (unsigned long long)i);
			break;
		}
		int ty = types[i];
		t->attr[i] = TOK_ATTR_VOCAB;
		if (ty == TT_CONTROL || ty == TT_USER || ty == TT_UNKNOWN) {
			void *p = realloc(t->added, ((size_t)t->n_added + 1) * sizeof(*t->added));
			if (!p) {
				rc = ERR_NOMEM;
				break;
			}
			t->added = p;
			struct tok_added *a = &t->added[t->n_added++];
			memset(a, 0, sizeof(*a));
			a->id = (int32_t)i;
			a->text = t->piece[i];
			a->special = ty != TT_USER;
			t->attr[i] |= TOK_ATTR_ADDED | (a->special ? TOK_ATTR_SPECIAL : 0);
		}
		if (ty == TT_UNKNOWN && t->unk_id < 0)
			t->unk_id = (int32_t)i;
	}
	if (rc) {
		free(types);
		return rc;
	}
	if ((rc = tok_strmap_build(t, &t->vocab, TOK_ATTR_VOCAB))) {
		free(types);
		return rc;
	}
	if (gpt2) {
		free(types);
		t->model = TOK_MODEL_BPE;
		uint64_t nm = 0;
		if (gguf_get_arr(g, "tokenizer.ggml.merges", &et, &nm) || et != GGUF_TYPE_STRING)
			return diag_set(d, ERR_FORMAT, "tokenizer.ggml.merges: missing or not a string array");
		if (tok_u64map_init(&t->merges, nm ? nm : 1))
			return ERR_NOMEM;
		struct buf cat;
		buf_init(&cat);
		for (uint64_t r = 0; r < nm && !rc; r++) {
			const char *s, *sp;
			size_t len;
			if (gguf_arr_str(g, "tokenizer.ggml.merges", r, &s, &len) || !(sp = memchr(s, ' ', len))) {
				rc = diag_set(d, ERR_FORMAT, "tokenizer.ggml.merges[%llu]: not \"a b\"", (unsigned long long)r);
				break;
			}
			size_t al = (size_t)(sp - s), bl = len - al - 1;
			int32_t ia = tok_strmap_get(t, &t->vocab, s, al), ib = tok_strmap_get(t, &t->vocab, sp + 1, bl);
			buf_clear(&cat);
			if (buf_append(&cat, s, al) || buf_append(&cat, sp + 1, bl)) {
				rc = ERR_NOMEM;
				break;
			}
			int32_t ic = tok_strmap_get(t, &t->vocab, cat.data, cat.len);
			if (ia < 0 || ib < 0 || ic < 0)
				rc = diag_set(d, ERR_FORMAT, "tokenizer.ggml.merges[%llu]: token not in the vocabulary",
					      (unsigned long long)r);
			else if (tok_u64map_put(&t->merges, (uint64_t)ia << 32 | (uint32_t)ib, r << 32 | (uint32_t)ic))
				rc = ERR_NOMEM;
		}
		buf_deinit(&cat);
		if (!rc)
			rc = pipeline_gpt2(t, pre, pre_len, d);
		return rc;
	}
	/* llama (SentencePiece) */
	t->model = TOK_MODEL_SPM;
	t->scores = malloc(n * sizeof(float));
	if (!t->scores) {
		free(types);
		return ERR_NOMEM;
	}
	uint64_t ns;
	if (gguf_get_arr(g, "tokenizer.ggml.scores", &et, &ns) || ns != n ||
	    gguf_arr_read_f32(g, "tokenizer.ggml.scores", t->scores, n)) {
		free(types);
		return diag_set(d, ERR_FORMAT, "tokenizer.ggml.scores: missing or not %llu floats", (unsigned long long)n);
	}
	/* byte and control pieces are never the result of a merge */
	for (uint64_t i = 0; i < n; i++)
		if (types[i] == TT_BYTE || types[i] == TT_CONTROL || types[i] == TT_UNUSED || isnan(t->scores[i]))
			t->scores[i] = -INFINITY;
	free(types);
	bool asp = true;
	gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &asp);
	return pipeline_llama(t, asp);
}

int tok_load_gguf(const struct gguf_file *g, struct tokenizer **out, struct diag *d)
{
	struct tokenizer *t;
	int rc = tok_create_empty(&t);
	if (rc)
		return diag_set(d, rc, "out of memory");
	rc = load_gguf(t, g, d);
	if (!rc)
		rc = tok_finalize(t, d);
	if (!rc)
		rc = opt_id(g, "tokenizer.ggml.bos_token_id", t->n_ids, &t->bos);
	if (!rc)
		rc = opt_id(g, "tokenizer.ggml.eos_token_id", t->n_ids, &t->eos);
	if (!rc)
		rc = opt_id(g, "tokenizer.ggml.unknown_token_id", t->n_ids, &t->unk_id);
	bool add_bos = false;
	if (!rc)
		gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos);
	if (!rc && add_bos && t->bos >= 0) {
		t->pre_ids = malloc(sizeof(int32_t));
		if (!t->pre_ids)
			rc = ERR_NOMEM;
		else {
			t->pre_ids[0] = t->bos;
			t->n_pre = 1;
			t->add_bos = true;
		}
	}
	bool add_eos = false;
	if (!rc)
		gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &add_eos);
	if (!rc && add_eos && t->eos >= 0) {
		t->post_ids = malloc(sizeof(int32_t));
		if (!t->post_ids)
			rc = ERR_NOMEM;
		else {
			t->post_ids[0] = t->eos;
			t->n_post = 1;
		}
	}
	if (rc) {
		if (rc == ERR_NOMEM)
			diag_set(d, rc, "tokenizer from GGUF: out of memory");
		else if (rc == ERR_RANGE)
			diag_set(d, rc, "tokenizer.ggml.*_token_id out of range");
		tok_destroy(t);
		return rc;
	}
	*out = t;
	return 0;
}

/* ---- export ---- */

/* The name llama.cpp gives this tokenizer's split regex (NULL: none fits). */
static const char *pre_name(const struct tokenizer *t)
{
	if (t->gguf_pre[0])
		return t->gguf_pre;
	bool nfc = t->n_norms == 1 && t->norms[0].kind == NORM_NFC;
	if (t->n_norms > (nfc ? 1 : 0))
		return NULL;
	for (int i = 0; i < t->n_pretoks; i++) {
		const struct tok_pretok *p = &t->pretoks[i];
		if (!p->re_src)
			continue;
		if (t->n_pretoks != (p->kind == PRETOK_SPLIT ? 2 : 1) || p->add_prefix_space)
			return NULL;
		if (p->kind == PRETOK_SPLIT && (p->behavior != SPLIT_ISOLATED || p->invert))
			return NULL;
		for (size_t k = 0; k < sizeof(pre_table) / sizeof(pre_table[0]); k++)
			if (!strcmp(p->re_src, pre_table[k].re) && pre_table[k].nfc == nfc &&
			    pre_table[k].ignore_merges == t->ignore_merges)
				return pre_table[k].name;
	}
	return NULL;
}

static int token_type(const struct tokenizer *t, int32_t id)
{
	uint8_t a = t->attr[id];
	if (a & TOK_ATTR_HOLE)
		return TT_UNUSED;
	if (id == t->unk_id)
		return TT_UNKNOWN;
	if (a & TOK_ATTR_SPECIAL)
		return TT_CONTROL;
	if (a & TOK_ATTR_ADDED)
		return TT_USER;
	if ((a & TOK_ATTR_BYTE) && !t->byte_level)
		return TT_BYTE;
	return TT_NORMAL;
}

/* Merges in rank order as "a b" strings (into one buffer). */
static int merges_by_rank(const struct tokenizer *t, struct buf *text, size_t **offs, uint64_t *n_out)
{
	const struct tok_u64map *m = &t->merges;
	uint64_t n = m->n;
	uint64_t *pair = malloc((n ? n : 1) * sizeof(uint64_t));
	size_t *off = malloc((n + 1) * sizeof(size_t));
	if (!pair || !off) {
		free(pair);
		free(off);
		return ERR_NOMEM;
	}
	memset(pair, 0xff, (n ? n : 1) * sizeof(uint64_t));
	for (size_t i = 0; m->ent && i <= m->mask; i++) {
		if (m->ent[i].key == UINT64_MAX)
			continue;
		uint64_t rank = m->ent[i].val >> 32;
		if (rank >= n) {
			free(pair);
			free(off);
			return ERR_INTERNAL; /* ranks are 0..n-1 */
		}
		pair[rank] = m->ent[i].key;
	}
	int rc = 0;
	for (uint64_t r = 0; r < n && !rc; r++) {
		int32_t a = (int32_t)(pair[r] >> 32), b = (int32_t)(uint32_t)pair[r];
		off[r] = text->len;
		if (buf_append(text, tok_span_ptr(t, t->piece[a]), t->piece[a].len) || buf_append_char(text, ' ') ||
		    buf_append(text, tok_span_ptr(t, t->piece[b]), t->piece[b].len))
			rc = ERR_NOMEM;
	}
	off[n] = text->len;
	free(pair);
	*offs = off;
	*n_out = n;
	return rc;
}

static int export_gguf(const struct tokenizer *t, struct gguf_writer *w, struct diag *d, char **strs, size_t *lens,
		       int32_t *types, float *scores, struct buf *pads)
{
	size_t n = (size_t)t->n_ids;
	int rc;
	/* holes get a name of their own, as llama.cpp's converter does */
	size_t *pad_off = malloc((n ? n : 1) * sizeof(size_t));
	if (!pad_off)
		return ERR_NOMEM;
	for (size_t i = 0; i < n; i++) {
		pad_off[i] = SIZE_MAX;
		if ((t->attr[i] & TOK_ATTR_HOLE)) {
			pad_off[i] = pads->len;
			if (buf_printf(pads, "[PAD%zu]", i) || buf_append_char(pads, 0)) {
				free(pad_off);
				return ERR_NOMEM;
			}
		}
	}
	for (size_t i = 0; i < n; i++) {
		if (pad_off[i] != SIZE_MAX) {
			strs[i] = pads->data + pad_off[i];
			lens[i] = strlen(strs[i]);
		} else {
			strs[i] = t->pool + t->piece[i].off;
			lens[i] = t->piece[i].len;
		}
		types[i] = token_type(t, (int32_t)i);
	}
	free(pad_off);
	if ((rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)strs, lens, n)) ||
	    (rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n)))
		return rc;
	if (t->byte_level) {
		const char *pre = pre_name(t);
		if (!pre)
			return diag_set(d, ERR_UNSUPPORTED, "byte-level pre-tokenizer has no GGUF pre name");
		if ((rc = gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2")) ||
		    (rc = gguf_writer_set_str(w, "tokenizer.ggml.pre", pre)))
			return rc;
		struct buf mt;
		buf_init(&mt);
		size_t *offs = NULL;
		uint64_t nm = 0;
		rc = merges_by_rank(t, &mt, &offs, &nm);
		if (!rc) {
			const char **ms = malloc((nm ? nm : 1) * sizeof(char *));
			size_t *ml = malloc((nm ? nm : 1) * sizeof(size_t));
			if (!ms || !ml)
				rc = ERR_NOMEM;
			for (uint64_t r = 0; !rc && r < nm; r++) {
				ms[r] = mt.data + offs[r];
				ml[r] = offs[r + 1] - offs[r];
			}
			if (!rc)
				rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", ms, ml, nm);
			free(ms);
			free(ml);
		}
		free(offs);
		buf_deinit(&mt);
		if (rc)
			return rc;
	} else {
		/* SentencePiece: scores. From BPE merges: a token's score is minus
		 * the best rank of a merge producing it, so the best-scored pair
		 * merges first; a token no merge produces gets -inf (never merged). */
		bool prepend = false;
		for (int i = 0; i < t->n_norms; i++)
			prepend = prepend || (t->norms[i].kind == NORM_PREPEND && t->norms[i].a_len == 3 &&
					      !memcmp(t->norms[i].a, "\xE2\x96\x81", 3));
		for (int i = 0; i < t->n_pretoks; i++)
			prepend = prepend || (t->pretoks[i].kind == PRETOK_METASPACE && t->pretoks[i].prepend != PREPEND_NEVER);
		for (size_t i = 0; i < n; i++)
			scores[i] = t->scores ? t->scores[i] : -INFINITY;
		const struct tok_u64map *m = &t->merges;
		for (size_t i = 0; !t->scores && m->ent && i <= m->mask; i++) {
			if (m->ent[i].key == UINT64_MAX)
				continue;
			uint32_t c = (uint32_t)m->ent[i].val;
			float sc = -(float)(m->ent[i].val >> 32);
			if (c < n && sc > scores[c])
				scores[c] = sc;
		}
		if ((rc = gguf_writer_set_str(w, "tokenizer.ggml.model", "llama")) ||
		    (rc = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, n)) ||
		    (rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", prepend)))
			return rc;
	}
	if (t->bos >= 0 && (rc = gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)t->bos)))
		return rc;
	if (t->eos >= 0 && (rc = gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)t->eos)))
		return rc;
	if (t->unk_id >= 0 && (rc = gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)t->unk_id)))
		return rc;
	if ((rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", t->n_post == 1)))
		return rc;
	return gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", t->add_bos);
}

int tok_export_gguf(const struct tokenizer *t, struct gguf_writer *w, struct diag *d)
{
	if (t->n_post > 1 || (t->n_post == 1 && t->post_ids[0] != t->eos) || t->n_pre > (t->add_bos ? 1 : 0))
		return diag_set(d, ERR_UNSUPPORTED, "post-processor other than BOS / EOS has no GGUF form");
	if (!t->byte_level && !t->byte_fallback)
		return diag_set(d, ERR_UNSUPPORTED, "only byte-level or byte-fallback BPE has a GGUF form");
	size_t n = (size_t)t->n_ids;
	char **strs = malloc((n ? n : 1) * sizeof(char *));
	size_t *lens = malloc((n ? n : 1) * sizeof(size_t));
	int32_t *types = malloc((n ? n : 1) * sizeof(int32_t));
	float *scores = malloc((n ? n : 1) * sizeof(float));
	struct buf pads;
	buf_init(&pads);
	int rc = (!strs || !lens || !types || !scores) ? ERR_NOMEM : export_gguf(t, w, d, strs, lens, types, scores, &pads);
	free(strs);
	free(lens);
	free(types);
	free(scores);
	buf_deinit(&pads);
	if (rc == ERR_NOMEM)
		diag_set(d, rc, "tokenizer export: out of memory");
	return rc;
}
