/* engine/tok/tok_json.c — load a Hugging Face tokenizer.json (+ tokenizer_config.json).
 *
 * Reads the pieces that occur in real files: model BPE (vocab, merges as
 * "a b" strings or [a, b] pairs, byte_fallback, fuse_unk, ignore_merges),
 * added_tokens, normalizers (NFC/NFD/NFKC/NFKD, Prepend, Replace, Lowercase,
 * Sequence), pre-tokenizers (Split, ByteLevel, Metaspace, Sequence),
 * post-processors (TemplateProcessing, ByteLevel, Roberta/Bert, Sequence) and
 * decoders (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence).
 * Anything else is ERR_UNSUPPORTED naming the piece. Tests: tests/tokenizer/.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model/model.h"
#include "engine/tok/tok_internal.h"

static int read_file(const char *path, char **out, size_t *len, struct diag *d)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return diag_set(d, ERR_IO, "%s: cannot open", path);
	struct buf b;
	buf_init(&b);
	char tmp[65536];
	size_t n;
	while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0) {
		if (buf_append(&b, tmp, n)) {
			fclose(f);
			buf_deinit(&b);
			return diag_set(d, ERR_NOMEM, "%s: out of memory", path);
		}
	}
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		buf_deinit(&b);
		return diag_set(d, ERR_IO, "%s: read failed", path);
	}
	*out = buf_take(&b, len);
	return *out ? 0 : diag_set(d, ERR_NOMEM, "out of memory");
}

static bool jbool(const cJSON *o, const char *k, bool def)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	if (cJSON_IsBool(v))
		return cJSON_IsTrue(v);
	return def;
}

static const char *jstr(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static char *dupn(const char *s, size_t *len)
{
	size_t n = strlen(s);
	char *p = malloc(n + 1);
	if (p)
		memcpy(p, s, n + 1);
	*len = n;
	return p;
}

/* A pattern object {"String": "..."} or {"Regex": "..."}: either *lit or *re is set. */
static int parse_pattern(const cJSON *pat, char **lit, size_t *lit_len, pcre2_code **re, struct diag *d)
{
	const char *s = jstr(pat, "String");
	if (s) {
		*lit = dupn(s, lit_len);
		return *lit ? 0 : ERR_NOMEM;
	}
	s = jstr(pat, "Regex");
	if (s) {
		int err;
		*re = tok_regex_compile(s, strlen(s), d, &err);
		return err;
	}
	return diag_set(d, ERR_FORMAT, "tokenizer.json: pattern without String or Regex");
}

#define GROW(arr, n, err)                                                     \
	do {                                                                  \
		void *p_ = realloc((arr), ((size_t)(n) + 1) * sizeof(*(arr))); \
		if (!p_)                                                      \
			return (err);                                         \
		(arr) = p_;                                                   \
		memset(&(arr)[(n)], 0, sizeof(*(arr)));                       \
	} while (0)

static int parse_normalizer(struct tokenizer *t, const cJSON *n, struct diag *d)
{
	if (!n || cJSON_IsNull(n))
		return 0;
	const char *type = jstr(n, "type");
	if (!type)
		return diag_set(d, ERR_FORMAT, "normalizer without type");
	if (!strcmp(type, "Sequence")) {
		const cJSON *c;
		cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(n, "normalizers"))
		{
			int rc = parse_normalizer(t, c, d);
			if (rc)
				return rc;
		}
		return 0;
	}
	GROW(t->norms, t->n_norms, ERR_NOMEM);
	struct tok_norm *s = &t->norms[t->n_norms];
	if (!strcmp(type, "NFC"))
		s->kind = NORM_NFC;
	else if (!strcmp(type, "NFD"))
		s->kind = NORM_NFD;
	else if (!strcmp(type, "NFKC"))
		s->kind = NORM_NFKC;
	else if (!strcmp(type, "NFKD"))
		s->kind = NORM_NFKD;
	else if (!strcmp(type, "Lowercase"))
		s->kind = NORM_LOWERCASE;
	else if (!strcmp(type, "Prepend")) {
		const char *p = jstr(n, "prepend");
		if (!p)
			return diag_set(d, ERR_FORMAT, "Prepend normalizer without prepend");
		s->kind = NORM_PREPEND;
		if (!(s->a = dupn(p, &s->a_len)))
			return ERR_NOMEM;
	} else if (!strcmp(type, "Replace")) {
		const char *c = jstr(n, "content");
		if (!c)
			return diag_set(d, ERR_FORMAT, "Replace normalizer without content");
		s->kind = NORM_REPLACE;
		int rc = parse_pattern(cJSON_GetObjectItemCaseSensitive(n, "pattern"), &s->a, &s->a_len, &s->re, d);
		if (rc)
			return rc;
		if (!(s->b = dupn(c, &s->b_len)))
			return ERR_NOMEM;
	} else {
		return diag_set(d, ERR_UNSUPPORTED, "normalizer %s is not supported", type);
	}
	t->n_norms++;
	return 0;
}

static const char gpt2_regex[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int parse_pretok(struct tokenizer *t, const cJSON *n, struct diag *d)
{
	if (!n || cJSON_IsNull(n))
		return 0;
	const char *type = jstr(n, "type");
	if (!type)
		return diag_set(d, ERR_FORMAT, "pre_tokenizer without type");
	if (!strcmp(type, "Sequence")) {
		const cJSON *c;
		cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(n, "pretokenizers"))
		{
			int rc = parse_pretok(t, c, d);
			if (rc)
				return rc;
		}
		return 0;
	}
	if (t->byte_level)
		return diag_set(d, ERR_UNSUPPORTED, "pre-tokenizer %s after ByteLevel is not supported", type);
	GROW(t->pretoks, t->n_pretoks, ERR_NOMEM);
	struct tok_pretok *p = &t->pretoks[t->n_pretoks];
	int rc = 0;
	if (!strcmp(type, "Split")) {
		p->kind = PRETOK_SPLIT;
		const cJSON *pat = cJSON_GetObjectItemCaseSensitive(n, "pattern");
		rc = parse_pattern(pat, &p->lit, &p->lit_len, &p->re, d);
		if (rc)
			return rc;
		size_t sl;
		if (p->re && !(p->re_src = dupn(jstr(pat, "Regex"), &sl)))
			return ERR_NOMEM;
		const char *b = jstr(n, "behavior");
		if (!b)
			return diag_set(d, ERR_FORMAT, "Split without behavior");
		if (!strcmp(b, "Removed"))
			p->behavior = SPLIT_REMOVED;
		else if (!strcmp(b, "Isolated"))
			p->behavior = SPLIT_ISOLATED;
		else if (!strcmp(b, "MergedWithPrevious"))
			p->behavior = SPLIT_MERGED_PREV;
		else if (!strcmp(b, "MergedWithNext"))
			p->behavior = SPLIT_MERGED_NEXT;
		else if (!strcmp(b, "Contiguous"))
			p->behavior = SPLIT_CONTIGUOUS;
		else
			return diag_set(d, ERR_UNSUPPORTED, "Split behavior %s", b);
		p->invert = jbool(n, "invert", false);
	} else if (!strcmp(type, "ByteLevel")) {
		p->kind = PRETOK_BYTELEVEL;
		p->add_prefix_space = jbool(n, "add_prefix_space", true);
		if (jbool(n, "use_regex", true)) {
			size_t sl;
			p->re = tok_regex_compile(gpt2_regex, sizeof(gpt2_regex) - 1, d, &rc);
			if (!rc && !(p->re_src = dupn(gpt2_regex, &sl)))
				return ERR_NOMEM;
		}
		t->byte_level = true;
	} else if (!strcmp(type, "Metaspace")) {
		p->kind = PRETOK_METASPACE;
		const char *r = jstr(n, "replacement");
		if (!(p->lit = dupn(r ? r : "\xE2\x96\x81", &p->lit_len)))
			return ERR_NOMEM;
		const char *ps = jstr(n, "prepend_scheme");
		if (ps)
			p->prepend = !strcmp(ps, "first") ? PREPEND_FIRST :
				     !strcmp(ps, "never") ? PREPEND_NEVER :
							    PREPEND_ALWAYS;
		else
			p->prepend = jbool(n, "add_prefix_space", true) ? PREPEND_ALWAYS : PREPEND_NEVER;
		p->split = jbool(n, "split", true);
	} else {
		return diag_set(d, ERR_UNSUPPORTED, "pre-tokenizer %s is not supported", type);
	}
	t->n_pretoks++;
	return rc;
}

static int parse_decoder(struct tokenizer *t, const cJSON *n, struct diag *d)
{
	if (!n || cJSON_IsNull(n))
		return 0;
	const char *type = jstr(n, "type");
	if (!type)
		return diag_set(d, ERR_FORMAT, "decoder without type");
	if (!strcmp(type, "Sequence")) {
		const cJSON *c;
		cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(n, "decoders"))
		{
			int rc = parse_decoder(t, c, d);
			if (rc)
				return rc;
		}
		return 0;
	}
	GROW(t->decs, t->n_decs, ERR_NOMEM);
	struct tok_dec *s = &t->decs[t->n_decs];
	if (!strcmp(type, "ByteLevel")) {
		s->kind = DEC_BYTELEVEL;
	} else if (!strcmp(type, "ByteFallback")) {
		s->kind = DEC_BYTEFALLBACK;
	} else if (!strcmp(type, "Fuse")) {
		s->kind = DEC_FUSE;
	} else if (!strcmp(type, "Replace")) {
		s->kind = DEC_REPLACE;
		pcre2_code *re = NULL;
		int rc = parse_pattern(cJSON_GetObjectItemCaseSensitive(n, "pattern"), &s->a, &s->a_len, &re, d);
		if (rc)
			return rc;
		if (re) {
			pcre2_code_free(re);
			return diag_set(d, ERR_UNSUPPORTED, "Replace decoder with a regex");
		}
		const char *c = jstr(n, "content");
		if (!c || !(s->b = dupn(c, &s->b_len)))
			return diag_set(d, ERR_FORMAT, "Replace decoder without content");
	} else if (!strcmp(type, "Strip")) {
		s->kind = DEC_STRIP;
		const char *c = jstr(n, "content");
		if (!c || !(s->a = dupn(c, &s->a_len)))
			return diag_set(d, ERR_FORMAT, "Strip decoder without content");
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(n, "start");
		s->start = cJSON_IsNumber(v) ? v->valueint : 0;
		v = cJSON_GetObjectItemCaseSensitive(n, "stop");
		s->stop = cJSON_IsNumber(v) ? v->valueint : 0;
	} else if (!strcmp(type, "Metaspace")) {
		s->kind = DEC_METASPACE;
		const char *r = jstr(n, "replacement");
		if (!(s->a = dupn(r ? r : "\xE2\x96\x81", &s->a_len)))
			return ERR_NOMEM;
		const char *ps = jstr(n, "prepend_scheme");
		s->prepend = ps ? strcmp(ps, "never") != 0 : jbool(n, "add_prefix_space", true);
	} else {
		return diag_set(d, ERR_UNSUPPORTED, "decoder %s is not supported", type);
	}
	t->n_decs++;
	return 0;
}

static int push_id(int32_t **arr, int *n, int32_t id)
{
	int32_t *p = realloc(*arr, ((size_t)*n + 1) * sizeof(int32_t));
	if (!p)
		return ERR_NOMEM;
	p[(*n)++] = id;
	*arr = p;
	return 0;
}

static int parse_post(struct tokenizer *t, const cJSON *n, struct diag *d)
{
	if (!n || cJSON_IsNull(n))
		return 0;
	const char *type = jstr(n, "type");
	if (!type)
		return diag_set(d, ERR_FORMAT, "post_processor without type");
	if (!strcmp(type, "Sequence")) {
		const cJSON *c;
		cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(n, "processors"))
		{
			int rc = parse_post(t, c, d);
			if (rc)
				return rc;
		}
		return 0;
	}
	if (!strcmp(type, "ByteLevel"))
		return 0; /* offsets only */
	if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
		const cJSON *cls = cJSON_GetObjectItemCaseSensitive(n, "cls");
		const cJSON *sep = cJSON_GetObjectItemCaseSensitive(n, "sep");
		const cJSON *ci = cJSON_GetArrayItem(cls, 1), *si = cJSON_GetArrayItem(sep, 1);
		if (!cJSON_IsNumber(ci) || !cJSON_IsNumber(si))
			return diag_set(d, ERR_FORMAT, "%s without cls/sep ids", type);
		if (push_id(&t->pre_ids, &t->n_pre, ci->valueint) || push_id(&t->post_ids, &t->n_post, si->valueint))
			return ERR_NOMEM;
		return 0;
	}
	if (strcmp(type, "TemplateProcessing"))
		return diag_set(d, ERR_UNSUPPORTED, "post-processor %s is not supported", type);
	const cJSON *specials = cJSON_GetObjectItemCaseSensitive(n, "special_tokens");
	const cJSON *it;
	bool seen_a = false;
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(n, "single"))
	{
		const cJSON *st = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
		if (!st) {
			if (!cJSON_GetObjectItemCaseSensitive(it, "Sequence"))
				return diag_set(d, ERR_FORMAT, "TemplateProcessing: bad item");
			seen_a = true;
			continue;
		}
		const char *name = jstr(st, "id");
		const cJSON *sp = name ? cJSON_GetObjectItemCaseSensitive(specials, name) : NULL;
		const cJSON *ids = cJSON_GetObjectItemCaseSensitive(sp, "ids");
		if (!cJSON_IsArray(ids))
			return diag_set(d, ERR_FORMAT, "TemplateProcessing: special token %s has no ids",
					name ? name : "?");
		const cJSON *v;
		cJSON_ArrayForEach(v, ids)
		{
			if (!cJSON_IsNumber(v))
				return diag_set(d, ERR_FORMAT, "TemplateProcessing: bad id");
			int rc = seen_a ? push_id(&t->post_ids, &t->n_post, v->valueint) :
					  push_id(&t->pre_ids, &t->n_pre, v->valueint);
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* Split a legacy "a b" merge at its first space. */
static int merge_parts(const cJSON *m, const char **a, size_t *al, const char **b, size_t *bl)
{
	if (cJSON_IsString(m)) {
		const char *s = m->valuestring, *sp = strchr(s, ' ');
		if (!sp)
			return ERR_FORMAT;
		*a = s, *al = (size_t)(sp - s), *b = sp + 1, *bl = strlen(sp + 1);
		return 0;
	}
	const cJSON *x = cJSON_GetArrayItem(m, 0), *y = cJSON_GetArrayItem(m, 1);
	if (!cJSON_IsString(x) || !cJSON_IsString(y))
		return ERR_FORMAT;
	*a = x->valuestring, *al = strlen(x->valuestring), *b = y->valuestring, *bl = strlen(y->valuestring);
	return 0;
}

static int load_model(struct tokenizer *t, const cJSON *root, struct diag *d)
{
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
	const char *type = jstr(model, "type");
	if (!model)
		return diag_set(d, ERR_FORMAT, "tokenizer.json: no model");
	if (type && strcmp(type, "BPE"))
		return diag_set(d, ERR_UNSUPPORTED, "tokenizer model %s is not supported", type);
	const char *cp = jstr(model, "continuing_subword_prefix"), *ews = jstr(model, "end_of_word_suffix");
	if ((cp && *cp) || (ews && *ews))
		return diag_set(d, ERR_UNSUPPORTED, "BPE with subword prefix/suffix is not supported");
	t->model = TOK_MODEL_BPE;
	t->byte_fallback = jbool(model, "byte_fallback", false);
	t->fuse_unk = jbool(model, "fuse_unk", false);
	t->ignore_merges = jbool(model, "ignore_merges", false);

	const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
	const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
	if (!cJSON_IsObject(vocab))
		return diag_set(d, ERR_FORMAT, "tokenizer.json: model.vocab is not an object");
	int64_t max_id = -1;
	const cJSON *v;
	cJSON_ArrayForEach(v, vocab)
	{
		if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > INT32_MAX - 1)
			return diag_set(d, ERR_FORMAT, "vocab entry %s: bad id", v->string);
		if ((int64_t)v->valuedouble > max_id)
			max_id = (int64_t)v->valuedouble;
	}
	cJSON_ArrayForEach(v, added)
	{
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(v, "id");
		if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > INT32_MAX - 1 ||
		    !jstr(v, "content"))
			return diag_set(d, ERR_FORMAT, "added_tokens: bad entry");
		if ((int64_t)id->valuedouble > max_id)
			max_id = (int64_t)id->valuedouble;
	}
	if (tok_set_ids(t, (int32_t)(max_id + 1)))
		return diag_set(d, ERR_NOMEM, "out of memory");
	cJSON_ArrayForEach(v, vocab)
	{
		int32_t id = (int32_t)v->valuedouble;
		if (tok_pool_add(t, v->string, strlen(v->string), &t->piece[id]))
			return diag_set(d, ERR_NOMEM, "out of memory");
		t->attr[id] = TOK_ATTR_VOCAB;
	}
	if (tok_strmap_build(t, &t->vocab, TOK_ATTR_VOCAB))
		return diag_set(d, ERR_NOMEM, "out of memory");
	cJSON_ArrayForEach(v, added)
	{
		GROW(t->added, t->n_added, diag_set(d, ERR_NOMEM, "out of memory"));
		struct tok_added *a = &t->added[t->n_added];
		const char *content = jstr(v, "content");
		a->id = (int32_t)cJSON_GetObjectItemCaseSensitive(v, "id")->valuedouble;
		a->special = jbool(v, "special", false);
		a->lstrip = jbool(v, "lstrip", false);
		a->rstrip = jbool(v, "rstrip", false);
		a->single_word = jbool(v, "single_word", false);
		a->normalized = jbool(v, "normalized", !a->special);
		if (tok_pool_add(t, content, strlen(content), &a->text))
			return diag_set(d, ERR_NOMEM, "out of memory");
		/* an added token whose text the model has takes the model's id
		 * (what HF's AddedVocabulary does, whatever "id" says) */
		int32_t mid = tok_strmap_get(t, &t->vocab, content, strlen(content));
		if (mid >= 0)
			a->id = mid;
		struct tok_span old = t->piece[a->id];
		if ((t->attr[a->id] & TOK_ATTR_VOCAB) &&
		    (old.len != a->text.len || memcmp(tok_span_ptr(t, old), content, old.len)))
			t->attr[a->id] &= (uint8_t)~TOK_ATTR_VOCAB; /* the added token shadows it */
		t->piece[a->id] = a->text;
		t->attr[a->id] = (uint8_t)((t->attr[a->id] & ~TOK_ATTR_HOLE) | TOK_ATTR_ADDED |
					   (a->special ? TOK_ATTR_SPECIAL : 0));
		t->n_added++;
	}
	const char *unk = jstr(model, "unk_token");
	if (unk) {
		/* resolved against the vocab after tok_finalize builds the map */
		t->unk_id = -2;
	}

	if (tok_strmap_build(t, &t->vocab, TOK_ATTR_VOCAB))
		return diag_set(d, ERR_NOMEM, "out of memory");
	if (unk)
		t->unk_id = tok_strmap_get(t, &t->vocab, unk, strlen(unk));
	const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
	int n_merges = cJSON_GetArraySize(merges);
	if (tok_u64map_init(&t->merges, (size_t)(n_merges > 0 ? n_merges : 1)))
		return diag_set(d, ERR_NOMEM, "out of memory");
	struct buf cat;
	buf_init(&cat);
	uint32_t rank = 0;
	const cJSON *m;
	cJSON_ArrayForEach(m, merges)
	{
		const char *a, *b;
		size_t al, bl;
		if (merge_parts(m, &a, &al, &b, &bl)) {
			buf_deinit(&cat);
			return diag_set(d, ERR_FORMAT, "merges[%u]: not \"a b\" or [a, b]", rank);
		}
		int32_t ia = tok_strmap_get(t, &t->vocab, a, al), ib = tok_strmap_get(t, &t->vocab, b, bl);
		buf_clear(&cat);
		if (buf_append(&cat, a, al) || buf_append(&cat, b, bl)) {
			buf_deinit(&cat);
			return diag_set(d, ERR_NOMEM, "out of memory");
		}
		int32_t ic = tok_strmap_get(t, &t->vocab, cat.data, cat.len);
		if (ia < 0 || ib < 0 || ic < 0) {
			buf_deinit(&cat);
			return diag_set(d, ERR_FORMAT, "merges[%u]: token not in the vocabulary", rank);
		}
		if (tok_u64map_put(&t->merges, (uint64_t)ia << 32 | (uint32_t)ib, (uint64_t)rank << 32 | (uint32_t)ic)) {
			buf_deinit(&cat);
			return diag_set(d, ERR_NOMEM, "out of memory");
		}
		rank++;
	}
	buf_deinit(&cat);
	return 0;
}

/* bos_token / eos_token in tokenizer_config.json: a string or {"content": ...}. */
static int32_t config_token(const struct tokenizer *t, const cJSON *cfg, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
	const char *s = cJSON_IsString(v) ? v->valuestring : jstr(v, "content");
	return s ? tok_piece_id(t, s, strlen(s)) : -1;
}

static int load_config(struct tokenizer *t, const char *path, struct diag *d)
{
	char *text;
	size_t len;
	int rc = read_file(path, &text, &len, d);
	if (rc)
		return rc;
	cJSON *cfg = cJSON_ParseWithLength(text, len);
	free(text);
	if (!cfg)
		return diag_set(d, ERR_FORMAT, "%s: not valid JSON", path);
	t->cleanup = jbool(cfg, "clean_up_tokenization_spaces", false);
	int32_t bos = config_token(t, cfg, "bos_token"), eos = config_token(t, cfg, "eos_token");
	if (bos >= 0)
		t->bos = bos;
	if (eos >= 0)
		t->eos = eos;
	cJSON_Delete(cfg);
	return 0;
}

int tok_load_json(const char *tokenizer_json, const char *tokenizer_config, struct tokenizer **out,
		  struct diag *d)
{
	char *text;
	size_t len;
	int rc = read_file(tokenizer_json, &text, &len, d);
	if (rc)
		return rc;
	cJSON *root = cJSON_ParseWithLength(text, len);
	free(text);
	if (!root)
		return diag_set(d, ERR_FORMAT, "%s: not valid JSON", tokenizer_json);
	struct tokenizer *t;
	if ((rc = tok_create_empty(&t))) {
		cJSON_Delete(root);
		return diag_set(d, rc, "out of memory");
	}
	rc = load_model(t, root, d);
	if (!rc)
		rc = parse_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), d);
	if (!rc)
		rc = parse_pretok(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), d);
	if (!rc)
		rc = parse_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), d);
	if (!rc)
		rc = parse_decoder(t, cJSON_GetObjectItemCaseSensitive(root, "decoder"), d);
	cJSON_Delete(root);
	if (!rc)
		rc = tok_finalize(t, d);
	for (int i = 0; !rc && i < t->n_pre + t->n_post; i++) {
		int32_t id = i < t->n_pre ? t->pre_ids[i] : t->post_ids[i - t->n_pre];
		if (id < 0 || id >= t->n_ids)
			rc = diag_set(d, ERR_FORMAT, "post-processor id %d out of range", id);
	}
	if (!rc && t->n_pre > 0)
		t->bos = t->pre_ids[0];
	if (!rc && tokenizer_config)
		rc = load_config(t, tokenizer_config, d);
	if (rc) {
		tok_destroy(t);
		return rc;
	}
	t->add_bos = t->n_pre > 0 && t->bos >= 0 && t->pre_ids[0] == t->bos;
	*out = t;
	return 0;
}

int tok_load_for_model(const struct model *m, struct tokenizer **out, struct diag *d)
{
	if (m->tokenizer_json_path)
		return tok_load_json(m->tokenizer_json_path, m->tokenizer_config_path, out, d);
	if (m->gguf)
		return tok_load_gguf(m->gguf, out, d);
	return diag_set(d, ERR_NOTFOUND, "model has no tokenizer");
}
