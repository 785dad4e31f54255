/* engine/tok/tok_encode.c — text -> ids, the way Hugging Face `tokenizers` does it:
 * added tokens are split out of the raw text first (leftmost-longest, with
 * lstrip/rstrip/single_word), each remaining segment is normalized,
 * pre-tokenized into words, and each word goes through BPE (tok_bpe.c).
 * All scratch lives in struct enc on the caller's stack: the tokenizer is
 * shared read-only between threads. Tests: tests/tokenizer/test_tokenizer.c.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "common/checked.h"
#include "engine/tok/tok_internal.h"

/* ---- per-call scratch ---- */

struct spans {
	struct tok_span *v;
	size_t n, cap;
};

static int spans_push(struct spans *s, uint32_t off, uint32_t len)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct tok_span *p = realloc(s->v, cap * sizeof(*p));
		if (!p)
			return ERR_NOMEM;
		s->v = p;
		s->cap = cap;
	}
	s->v[s->n++] = (struct tok_span){ off, len };
	return 0;
}

/* word cache: piece text -> ids, for one call (long inputs repeat words) */
struct wcache {
	uint32_t *slots; /* entry index + 1 */
	size_t mask;
	struct {
		uint64_t h;
		uint32_t text_off, text_len, ids_off, n_ids;
	} *ent;
	size_t n_ent, cap_ent;
	struct buf text;
	int32_t *ids;
	size_t n_ids, cap_ids;
};

struct enc {
	const struct tokenizer *t;
	int32_t *ids;
	size_t n, cap;
	struct buf nb[2];  /* normalizer ping-pong */
	struct buf pt;	   /* pre-tokenizer text when a step rewrites it */
	struct spans pieces, tmp;
	pcre2_match_data *md;
	struct tok_bpe_scratch bpe;
	struct wcache wc;
	bool use_cache;
	unsigned flags; /* TOK_PARSE_SPECIAL */
};

/* One word through the per-call cache. */
static int word_ids(struct enc *e, const char *w, size_t n, bool byte_mapped)
{
	if (!e->use_cache || n > 64)
		return tok_bpe_word(e->t, &e->bpe, w, n, byte_mapped, &e->ids, &e->n, &e->cap);
	struct wcache *c = &e->wc;
	uint64_t h = tok_hash(w, n);
	size_t i = (size_t)h & c->mask;
	while (c->slots[i]) {
		size_t k = c->slots[i] - 1;
		if (c->ent[k].h == h && c->ent[k].text_len == n && !memcmp(c->text.data + c->ent[k].text_off, w, n)) {
			for (uint32_t j = 0; j < c->ent[k].n_ids; j++)
				if (tok_ids_push(&e->ids, &e->n, &e->cap, c->ids[c->ent[k].ids_off + j]))
					return ERR_NOMEM;
			return 0;
		}
		i = (i + 1) & c->mask;
	}
	size_t before = e->n;
	int rc = tok_bpe_word(e->t, &e->bpe, w, n, byte_mapped, &e->ids, &e->n, &e->cap);
	if (rc || (c->n_ent + 1) * 2 > c->mask + 1)
		return rc; /* cache full: just stop adding */
	if (c->n_ent == c->cap_ent) {
		size_t cap = c->cap_ent ? c->cap_ent * 2 : 256;
		void *p = realloc(c->ent, cap * sizeof(*c->ent));
		if (!p)
			return ERR_NOMEM;
		c->ent = p;
		c->cap_ent = cap;
	}
	size_t off = c->text.len, ioff = c->n_ids;
	if (buf_append(&c->text, w, n))
		return ERR_NOMEM;
	for (size_t j = before; j < e->n; j++)
		if (tok_ids_push(&c->ids, &c->n_ids, &c->cap_ids, e->ids[j]))
			return ERR_NOMEM;
	c->ent[c->n_ent].h = h;
	c->ent[c->n_ent].text_off = (uint32_t)off;
	c->ent[c->n_ent].text_len = (uint32_t)n;
	c->ent[c->n_ent].ids_off = (uint32_t)ioff;
	c->ent[c->n_ent].n_ids = (uint32_t)(e->n - before);
	c->slots[i] = (uint32_t)++c->n_ent;
	return 0;
}

/* ---- normalizers ---- */

static int norm_unicode(const char *s, size_t n, int opts, struct buf *out)
{
	utf8proc_uint8_t *dst = NULL;
	if (n > (size_t)PTRDIFF_MAX / 8)
		return ERR_TOO_LARGE;
	utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
					  (utf8proc_option_t)(UTF8PROC_STABLE | opts));
	if (r < 0) {
		free(dst);
		return r == UTF8PROC_ERROR_NOMEM ? ERR_NOMEM : ERR_INVAL;
	}
	int rc = buf_append(out, dst, (size_t)r) ? ERR_NOMEM : 0;
	free(dst);
	return rc;
}

static int replace_lit(const char *s, size_t n, const char *pat, size_t pn, const char *rep, size_t rn,
		       struct buf *out)
{
	size_t i = 0, run = 0;
	if (pn == 0)
		return buf_append(out, s, n) ? ERR_NOMEM : 0;
	while (i + pn <= n) {
		if (!memcmp(s + i, pat, pn)) {
			if (buf_append(out, s + run, i - run) || buf_append(out, rep, rn))
				return ERR_NOMEM;
			i += pn;
			run = i;
		} else {
			i++;
		}
	}
	return buf_append(out, s + run, n - run) ? ERR_NOMEM : 0;
}

/* True when NFC cannot change s: every character is a starter that is
 * already NFC and is never the second half of a composition. Below U+0300
 * that holds for all; above, for CJK ideographs, kana and Hangul syllables
 * (a following conjoining jamo or mark is not in these ranges, so it sends
 * the text through utf8proc). */
static bool nfc_stable(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		if (p[i] < 0xCC) { /* ASCII, continuation bytes, or a lead below U+0300 */
			i++;
			continue;
		}
		uint32_t cp;
		size_t k = utf8_decode(s + i, &cp);
		if (!((cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3041 && cp <= 0x3096) || (cp >= 0x30A1 && cp <= 0x30FA) ||
		      (cp >= 0xAC00 && cp <= 0xD7A3)))
			return false;
		i += k;
	}
	return true;
}

static int apply_norm(struct enc *e, const struct tok_norm *nm, const char *s, size_t n, struct buf *out)
{
	switch (nm->kind) {
	case NORM_NFC:
		if (nfc_stable(s, n))
			return buf_append(out, s, n) ? ERR_NOMEM : 0;
		return norm_unicode(s, n, UTF8PROC_COMPOSE, out);
	case NORM_NFD:
		return norm_unicode(s, n, UTF8PROC_DECOMPOSE, out);
	case NORM_NFKC:
		return norm_unicode(s, n, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, out);
	case NORM_NFKD:
		return norm_unicode(s, n, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, out);
	case NORM_LOWERCASE:
		for (size_t i = 0; i < n;) {
			uint32_t cp;
			i += utf8_decode(s + i, &cp);
			char u[4];
			size_t k = utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), u);
			if (buf_append(out, u, k))
				return ERR_NOMEM;
		}
		return 0;
	case NORM_PREPEND:
		if (n > 0 && buf_append(out, nm->a, nm->a_len))
			return ERR_NOMEM;
		return buf_append(out, s, n) ? ERR_NOMEM : 0;
	case NORM_REPLACE:
		if (!nm->re)
			return replace_lit(s, n, nm->a, nm->a_len, nm->b, nm->b_len, out);
		{
			size_t run = 0, start = 0;
			while (start <= n) {
				int r = pcre2_match(nm->re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, e->md, NULL);
				if (r < 0)
					break;
				PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
				if (ov[1] == ov[0]) { /* empty match: step one character */
					if (ov[0] >= n)
						break;
					start = ov[0] + (utf8_len(s + ov[0], n - ov[0]) > 0 ? utf8_len(s + ov[0], n - ov[0]) : 1);
					continue;
				}
				if (buf_append(out, s + run, ov[0] - run) || buf_append(out, nm->b, nm->b_len))
					return ERR_NOMEM;
				run = start = ov[1];
			}
			return buf_append(out, s + run, n - run) ? ERR_NOMEM : 0;
		}
	}
	return ERR_INTERNAL;
}

/* ---- pre-tokenizers ---- */

/* Matches of a regex or a literal inside one piece, as (start, end) pairs. */
static int find_matches(struct enc *e, const struct tok_pretok *p, const char *s, size_t n, struct spans *m)
{
	m->n = 0;
	if (!p->re) {
		size_t pn = p->lit_len;
		for (size_t i = 0; pn && i + pn <= n;) {
			if (!memcmp(s + i, p->lit, pn)) {
				if (spans_push(m, (uint32_t)i, (uint32_t)pn))
					return ERR_NOMEM;
				i += pn;
			} else {
				i++;
			}
		}
		return 0;
	}
	size_t start = 0;
	while (start < n) {
		int r = pcre2_match(p->re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, e->md, NULL);
		if (r == PCRE2_ERROR_JIT_STACKLIMIT)
			r = pcre2_match(p->re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, e->md,
					NULL);
		if (r == PCRE2_ERROR_NOMATCH)
			break;
		if (r < 0)
			return ERR_INTERNAL;
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
		if (ov[1] == ov[0]) {
			size_t k = utf8_len(s + ov[0], n - ov[0]);
			start = ov[0] + (k ? k : 1);
			continue;
		}
		if (spans_push(m, (uint32_t)ov[0], (uint32_t)(ov[1] - ov[0])))
			return ERR_NOMEM;
		start = ov[1];
	}
	return 0;
}

/* Split one piece (base offset off in the text) by behavior; appends to out. */
static int split_piece(struct enc *e, const struct tok_pretok *p, const char *text, struct tok_span pc,
		       enum tok_split_behavior behavior, bool invert, struct spans *out)
{
	struct spans m = { 0 };
	int rc = find_matches(e, p, text + pc.off, pc.len, &m);
	if (rc) {
		free(m.v);
		return rc;
	}
	/* (start, end, is_match) covering the piece, as HF's find_matches */
	size_t prev = 0, first = out->n;
	bool prev_match = false;
	for (size_t i = 0; i <= m.n && !rc; i++) {
		size_t ms = i < m.n ? m.v[i].off : pc.len, me = i < m.n ? ms + m.v[i].len : pc.len;
		for (int part = 0; part < 2 && !rc; part++) {
			size_t a = part == 0 ? prev : ms, b = part == 0 ? ms : me;
			bool is_match = (part == 1) != invert;
			if (a == b)
				continue;
			switch (behavior) {
			case SPLIT_REMOVED:
				if (!is_match)
					rc = spans_push(out, pc.off + (uint32_t)a, (uint32_t)(b - a));
				break;
			case SPLIT_ISOLATED:
				rc = spans_push(out, pc.off + (uint32_t)a, (uint32_t)(b - a));
				break;
			case SPLIT_MERGED_PREV:
				if (is_match && !prev_match && out->n > first)
					out->v[out->n - 1].len = pc.off + (uint32_t)b - out->v[out->n - 1].off;
				else
					rc = spans_push(out, pc.off + (uint32_t)a, (uint32_t)(b - a));
				break;
			case SPLIT_CONTIGUOUS:
				if (is_match == prev_match && out->n > first)
					out->v[out->n - 1].len = pc.off + (uint32_t)b - out->v[out->n - 1].off;
				else
					rc = spans_push(out, pc.off + (uint32_t)a, (uint32_t)(b - a));
				break;
			case SPLIT_MERGED_NEXT:
				/* a match opens a new piece; what follows joins it */
				if (!is_match && prev_match && out->n > first)
					out->v[out->n - 1].len = pc.off + (uint32_t)b - out->v[out->n - 1].off;
				else
					rc = spans_push(out, pc.off + (uint32_t)a, (uint32_t)(b - a));
				break;
			}
			prev_match = is_match;
		}
		prev = me;
	}
	free(m.v);
	return rc;
}

/* Rewrite every piece into a fresh text (ByteLevel prefix space, Metaspace). */
static int rewrite_pieces(struct enc *e, const struct tok_pretok *p, const char **text, bool at_origin)
{
	struct buf nt;
	buf_init(&nt);
	e->tmp.n = 0;
	int rc = 0;
	for (size_t i = 0; i < e->pieces.n && !rc; i++) {
		struct tok_span pc = e->pieces.v[i];
		const char *s = *text + pc.off;
		size_t start = nt.len;
		if (p->kind == PRETOK_BYTELEVEL) {
			if (pc.len == 0 || s[0] != ' ')
				rc = buf_append_char(&nt, ' ');
			if (!rc && buf_append(&nt, s, pc.len))
				rc = ERR_NOMEM;
		} else {
			bool starts = pc.len >= p->lit_len && !memcmp(s, p->lit, p->lit_len);
			bool first = at_origin && pc.off == 0;
			if (s[0] != ' ' && !starts &&
			    (p->prepend == PREPEND_ALWAYS || (p->prepend == PREPEND_FIRST && first)))
				rc = buf_append(&nt, p->lit, p->lit_len) ? ERR_NOMEM : 0;
			if (!rc)
				rc = replace_lit(s, pc.len, " ", 1, p->lit, p->lit_len, &nt);
		}
		if (!rc && nt.len > UINT32_MAX)
			rc = ERR_TOO_LARGE;
		if (!rc)
			rc = spans_push(&e->tmp, (uint32_t)start, (uint32_t)(nt.len - start));
	}
	if (rc) {
		buf_deinit(&nt);
		return rc;
	}
	buf_deinit(&e->pt);
	e->pt = nt;
	*text = e->pt.data ? e->pt.data : "";
	struct spans sw = e->pieces;
	e->pieces = e->tmp;
	e->tmp = sw;
	return 0;
}

static int pretokenize(struct enc *e, const char **text, size_t len, bool at_origin)
{
	const struct tokenizer *t = e->t;
	e->pieces.n = 0;
	if (len > UINT32_MAX)
		return ERR_TOO_LARGE;
	int rc = spans_push(&e->pieces, 0, (uint32_t)len);
	for (int k = 0; k < t->n_pretoks && !rc; k++) {
		const struct tok_pretok *p = &t->pretoks[k];
		if (p->kind == PRETOK_BYTELEVEL && p->add_prefix_space)
			rc = rewrite_pieces(e, p, text, at_origin);
		else if (p->kind == PRETOK_METASPACE)
			rc = rewrite_pieces(e, p, text, at_origin);
		if (rc)
			break;
		bool split = p->kind == PRETOK_SPLIT || (p->kind == PRETOK_BYTELEVEL && p->re) ||
			     (p->kind == PRETOK_METASPACE && p->split);
		if (!split)
			continue;
		e->tmp.n = 0;
		struct tok_pretok ms;
		const struct tok_pretok *sp = p;
		enum tok_split_behavior beh = p->kind == PRETOK_SPLIT ? p->behavior : SPLIT_ISOLATED;
		if (p->kind == PRETOK_METASPACE) {
			ms = *p;
			ms.re = NULL;
			sp = &ms;
			beh = SPLIT_MERGED_NEXT;
		}
		for (size_t i = 0; i < e->pieces.n && !rc; i++)
			rc = split_piece(e, sp, *text, e->pieces.v[i], beh, p->kind == PRETOK_SPLIT && p->invert, &e->tmp);
		struct spans sw = e->pieces;
		e->pieces = e->tmp;
		e->tmp = sw;
	}
	return rc;
}

/* ---- one segment between added tokens ---- */

typedef int (*seg_fn)(struct enc *e, const char *s, size_t n, bool at_origin);
static int split_added(struct enc *e, const struct tok_trie *tr, const char *s, size_t n, bool origin, seg_fn fn);

/* Pre-tokenize normalized text and BPE each piece. */
static int pretok_segment(struct enc *e, const char *text, size_t len, bool at_origin)
{
	int rc;
	if (len == 0)
		return 0;
	if ((rc = pretokenize(e, &text, len, at_origin)))
		return rc;
	for (size_t i = 0; i < e->pieces.n; i++) {
		struct tok_span pc = e->pieces.v[i];
		if (pc.len && (rc = word_ids(e, text + pc.off, pc.len, e->t->byte_level)))
			return rc;
	}
	return 0;
}

static int encode_segment(struct enc *e, const char *s, size_t n, bool at_origin)
{
	const struct tokenizer *t = e->t;
	const char *text = s;
	size_t len = n;
	int cur = 0, rc;
	for (int k = 0; k < t->n_norms; k++) {
		buf_clear(&e->nb[cur]);
		if ((rc = apply_norm(e, &t->norms[k], text, len, &e->nb[cur])))
			return rc;
		text = e->nb[cur].data ? e->nb[cur].data : "";
		len = e->nb[cur].len;
		cur ^= 1;
	}
	/* normalized added tokens are found in the normalized text */
	if (t->ntrie.n_nodes > 1)
		return split_added(e, &t->ntrie, text, len, at_origin, pretok_segment);
	return pretok_segment(e, text, len, at_origin);
}

int tok_normalize(const struct tokenizer *t, const char *s, size_t n, struct buf *out)
{
	struct enc e;
	memset(&e, 0, sizeof(e));
	e.t = t;
	e.md = pcre2_match_data_create(4, NULL);
	int rc = e.md ? 0 : ERR_NOMEM, cur = 0;
	const char *text = s;
	size_t len = n;
	for (int k = 0; k < t->n_norms && !rc; k++) {
		buf_clear(&e.nb[cur]);
		rc = apply_norm(&e, &t->norms[k], text, len, &e.nb[cur]);
		text = e.nb[cur].data ? e.nb[cur].data : "";
		len = e.nb[cur].len;
		cur ^= 1;
	}
	if (!rc && len && buf_append(out, text, len))
		rc = ERR_NOMEM;
	buf_deinit(&e.nb[0]);
	buf_deinit(&e.nb[1]);
	pcre2_match_data_free(e.md);
	return rc;
}

/* ---- added tokens ---- */

static bool is_word_char(uint32_t cp)
{
	if (cp == '_')
		return true;
	utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
	return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
	       (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

static uint32_t last_cp(const char *s, size_t n)
{
	size_t i = n;
	while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
		i--;
	uint32_t cp = 0;
	if (i > 0)
		utf8_decode(s + i - 1, &cp);
	return cp;
}

/* The longest added token starting at s[i], or -1 (index into t->added). */
static int match_added(const struct tok_trie *tr, const char *s, size_t n, size_t i, size_t *end)
{
	uint32_t node = 0;
	int best = -1;
	for (size_t k = i; k < n; k++) {
		uint64_t child;
		if (!tok_u64map_get(&tr->map, (uint64_t)node << 8 | (unsigned char)s[k], &child))
			break;
		node = (uint32_t)child;
		if (tr->term[node] >= 0) {
			best = tr->term[node];
			*end = k + 1;
		}
	}
	return best;
}

/* Split s at the added tokens of trie tr; the text between goes to fn. */
static int split_added(struct enc *e, const struct tok_trie *tr, const char *s, size_t n, bool origin, seg_fn fn)
{
	const struct tokenizer *t = e->t;
	unsigned flags = e->flags;
	size_t seg = 0, i = 0;
	int rc;
	while (i < n) {
		size_t end = i;
		int a = tr->first[(unsigned char)s[i]] ? match_added(tr, s, n, i, &end) : -1;
		if (a < 0) {
			i++;
			continue;
		}
		const struct tok_added *ad = &t->added[a];
		size_t start = i;
		i = end;
		if (ad->special && !(flags & TOK_PARSE_SPECIAL))
			continue;
		if (ad->single_word) {
			uint32_t before = start > 0 ? last_cp(s, start) : 0, after = 0;
			if (end < n)
				utf8_decode(s + end, &after);
			if ((start > 0 && is_word_char(before)) || (end < n && is_word_char(after)))
				continue;
		}
		if (ad->lstrip) {
			while (start > seg) {
				size_t k = start - 1;
				while (k > seg && ((unsigned char)s[k] & 0xC0) == 0x80)
					k--;
				uint32_t cp;
				utf8_decode(s + k, &cp);
				if (!tok_is_whitespace(cp))
					break;
				start = k;
			}
		}
		if (ad->rstrip) {
			while (end < n) {
				uint32_t cp;
				size_t k = utf8_decode(s + end, &cp);
				if (!tok_is_whitespace(cp))
					break;
				end += k;
			}
			i = end;
		}
		if (start > seg && (rc = fn(e, s + seg, start - seg, origin && seg == 0)))
			return rc;
		if ((rc = tok_ids_push(&e->ids, &e->n, &e->cap, ad->id)))
			return rc;
		seg = end;
	}
	if (n > seg)
		return fn(e, s + seg, n - seg, origin && seg == 0);
	return 0;
}

static void enc_deinit(struct enc *e)
{
	buf_deinit(&e->nb[0]);
	buf_deinit(&e->nb[1]);
	buf_deinit(&e->pt);
	tok_bpe_scratch_free(&e->bpe);
	free(e->pieces.v);
	free(e->tmp.v);
	free(e->wc.slots);
	free(e->wc.ent);
	buf_deinit(&e->wc.text);
	free(e->wc.ids);
	if (e->md)
		pcre2_match_data_free(e->md);
	free(e->ids);
}

int tok_encode(const struct tokenizer *t, const char *text, size_t len, unsigned flags, int32_t **ids, size_t *n)
{
	struct enc e;
	memset(&e, 0, sizeof(e));
	e.t = t;
	e.flags = flags;
	struct buf fixed;
	buf_init(&fixed);
	int rc = 0;
	if (!text)
		len = 0;
	if (len && !utf8_valid(text, len)) {
		if ((rc = utf8_lossy(text, len, &fixed)))
			return rc;
		text = fixed.data;
		len = fixed.len;
	}
	e.md = pcre2_match_data_create(4, NULL);
	if (!e.md)
		rc = ERR_NOMEM;
	/* a per-call word cache pays off once words repeat */
	if (!rc && len >= 4096) {
		size_t slots = 1 << 12;
		while (slots < len / 2 && slots < (1u << 20))
			slots *= 2;
		e.wc.slots = calloc(slots, sizeof(uint32_t));
		e.wc.mask = slots - 1;
		e.use_cache = e.wc.slots != NULL;
	}
	if (!rc && (flags & TOK_ADD_SPECIAL))
		for (int i = 0; i < t->n_pre && !rc; i++)
			rc = tok_ids_push(&e.ids, &e.n, &e.cap, t->pre_ids[i]);
	if (!rc)
		rc = split_added(&e, &t->trie, text ? text : "", len, true, encode_segment);
	if (!rc && (flags & TOK_ADD_SPECIAL))
		for (int i = 0; i < t->n_post && !rc; i++)
			rc = tok_ids_push(&e.ids, &e.n, &e.cap, t->post_ids[i]);
	if (!rc && !e.ids) {
		e.ids = malloc(sizeof(int32_t));
		if (!e.ids)
			rc = ERR_NOMEM;
	}
	buf_deinit(&fixed);
	if (rc) {
		enc_deinit(&e);
		return rc;
	}
	*ids = e.ids;
	*n = e.n;
	e.ids = NULL;
	enc_deinit(&e);
	return 0;
}
