/* engine/tok/tok_decode.c — ids -> text: the decoder chain of Hugging Face
 * `tokenizers` (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace) over
 * the list of token pieces, then transformers' clean_up_tokenization_spaces
 * when the config asks for it; and the incremental decoder for streaming.
 *
 * The stream decodes a window of ids that starts where decoding separates
 * (nothing held back, last piece not a byte token) and appends only the part
 * of the window's text that no later id can change, so the concatenation is
 * exactly tok_decode of all ids. Tests: tests/tokenizer/test_tokenizer.c.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/tok/tok_internal.h"

/* A list of token strings: spans into one buffer. */
struct toks {
	struct buf b;
	struct tok_span *v;
	size_t n, cap;
};

static int toks_add(struct toks *l, const char *s, size_t n)
{
	if (l->n == l->cap) {
		size_t c = l->cap ? l->cap * 2 : 32;
		struct tok_span *p = realloc(l->v, c * sizeof(*p));
		if (!p)
			return ERR_NOMEM;
		l->v = p;
		l->cap = c;
	}
	size_t off = l->b.len;
	if (n && buf_append(&l->b, s, n))
		return ERR_NOMEM;
	if (off > UINT32_MAX || n > UINT32_MAX)
		return ERR_TOO_LARGE;
	l->v[l->n++] = (struct tok_span){ (uint32_t)off, (uint32_t)n };
	return 0;
}

static void toks_free(struct toks *l)
{
	buf_deinit(&l->b);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static const char *tk(const struct toks *l, size_t i)
{
	return l->b.data ? l->b.data + l->v[i].off : "";
}

static int replace_into(const char *s, size_t n, const char *pat, size_t pn, const char *rep, size_t rn,
			struct buf *out)
{
	size_t i = 0, run = 0;
	while (pn && i + pn <= n) {
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

/* One decoder over the list; writes a new list into out. */
static int run_decoder(const struct tokenizer *t, const struct tok_dec *dc, const struct toks *in, struct toks *out,
		       bool at_start, bool at_end, bool keep_bytes, bool *fused, bool *tail_open)
{
	struct buf tmp;
	buf_init(&tmp);
	int rc = 0;
	switch (dc->kind) {
	case DEC_REPLACE:
	case DEC_METASPACE:
		for (size_t i = 0; i < in->n && !rc; i++) {
			buf_clear(&tmp);
			if (dc->kind == DEC_REPLACE)
				rc = replace_into(tk(in, i), in->v[i].len, dc->a, dc->a_len, dc->b, dc->b_len, &tmp);
			else
				rc = replace_into(tk(in, i), in->v[i].len, dc->a, dc->a_len, " ", 1, &tmp);
			const char *s = tmp.data ? tmp.data : "";
			size_t n = tmp.len;
			if (!rc && dc->kind == DEC_METASPACE && dc->prepend && i == 0 && at_start && n && s[0] == ' ')
				s++, n--;
			if (!rc)
				rc = toks_add(out, s, n);
		}
		break;
	case DEC_BYTEFALLBACK: {
		/* A run of <0xNN> pieces becomes its bytes when they are valid
		 * UTF-8, else one U+FFFD per byte (as the Rust decoder does). */
		size_t i = 0;
		while (i < in->n && !rc) {
			const char *s = tk(in, i);
			size_t n = in->v[i].len;
			bool is_byte = n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>';
			char hx[3] = { is_byte ? s[3] : 0, is_byte ? s[4] : 0, 0 };
			char *end = NULL;
			if (is_byte) {
				strtol(hx, &end, 16);
				is_byte = end == hx + 2;
			}
			if (!is_byte) {
				rc = toks_add(out, s, n);
				i++;
				continue;
			}
			buf_clear(&tmp);
			size_t j = i;
			for (; j < in->n; j++) {
				const char *q = tk(in, j);
				if (in->v[j].len != 6 || q[0] != '<' || q[1] != '0' || q[2] != 'x' || q[5] != '>')
					break;
				char h2[3] = { q[3], q[4], 0 };
				long v = strtol(h2, &end, 16);
				if (end != h2 + 2)
					break;
				char c = (char)v;
				if (buf_append(&tmp, &c, 1)) {
					rc = ERR_NOMEM;
					break;
				}
			}
			if (rc)
				break;
			if (keep_bytes || utf8_valid(tmp.data, tmp.len)) {
				rc = toks_add(out, tmp.data, tmp.len);
			} else {
				for (size_t k = i; k < j && !rc; k++)
					rc = toks_add(out, "\xEF\xBF\xBD", 3);
			}
			i = j;
		}
		break;
	}
	case DEC_FUSE:
		rc = toks_add(out, in->b.data ? in->b.data : "", in->b.len);
		/* the list's buffer is the concatenation only when spans are in order */
		if (!rc) {
			size_t total = 0;
			bool contiguous = true;
			for (size_t i = 0; i < in->n; i++) {
				contiguous = contiguous && in->v[i].off == total;
				total += in->v[i].len;
			}
			if (!contiguous) {
				out->n = 0;
				buf_clear(&out->b);
				for (size_t i = 0; i < in->n && !rc; i++)
					rc = buf_append(&tmp, tk(in, i), in->v[i].len) ? ERR_NOMEM : 0;
				if (!rc)
					rc = toks_add(out, tmp.data ? tmp.data : "", tmp.len);
			}
		}
		*fused = true;
		break;
	case DEC_STRIP:
		for (size_t i = 0; i < in->n && !rc; i++) {
			const char *s = tk(in, i);
			size_t n = in->v[i].len, cl = dc->a_len;
			/* after Fuse the one piece is the whole text: its ends are
			 * the sequence's only where this window has them */
			bool do_start = !*fused || at_start, do_end = !*fused || at_end;
			for (int k = 0; do_start && k < dc->start && cl && n >= cl && !memcmp(s, dc->a, cl); k++)
				s += cl, n -= cl;
			for (int k = 0; do_end && k < dc->stop && cl && n >= cl && !memcmp(s + n - cl, dc->a, cl); k++)
				n -= cl;
			rc = toks_add(out, s, n);
		}
		break;
	case DEC_BYTELEVEL:
		for (size_t i = 0; i < in->n && !rc; i++) {
			const char *s = tk(in, i);
			size_t n = in->v[i].len, start = tmp.len;
			bool all = true;
			for (size_t k = 0; k < n && all && !rc;) {
				uint32_t cp;
				if (!utf8_len(s + k, n - k)) {
					all = false;
					break;
				}
				k += utf8_decode(s + k, &cp);
				int b = tok_cp_to_byte(cp);
				char c = (char)b;
				if (b < 0)
					all = false;
				else if (buf_append(&tmp, &c, 1))
					rc = ERR_NOMEM;
			}
			if (!all && !rc) { /* a piece outside the byte map goes through as is */
				tmp.len = start;
				rc = buf_append(&tmp, s, n) ? ERR_NOMEM : 0;
			}
		}
		if (!rc) {
			struct buf lossy;
			buf_init(&lossy);
			/* a partial character at the end: more bytes may complete it */
			*tail_open = utf8_incomplete_tail(tmp.data ? tmp.data : "", tmp.len);
			if (keep_bytes)
				rc = buf_append(&lossy, tmp.data ? tmp.data : "", tmp.len) ? ERR_NOMEM : 0;
			else
				rc = utf8_lossy(tmp.data ? tmp.data : "", tmp.len, &lossy);
			if (!rc)
				rc = toks_add(out, lossy.data ? lossy.data : "", lossy.len);
			buf_deinit(&lossy);
		}
		*fused = true;
		break;
	}
	(void)t;
	buf_deinit(&tmp);
	return rc;
}

static const char *const cleanup_pat[][2] = {
	{ " .", "." },	   { " ?", "?" },     { " !", "!" },	 { " ,", "," },	    { " ' ", "'" },
	{ " n't", "n't" }, { " 'm", "'m" },   { " 's", "'s" },	 { " 've", "'ve" }, { " 're", "'re" },
};
#define N_CLEANUP (sizeof(cleanup_pat) / sizeof(cleanup_pat[0]))

static int cleanup(struct buf *s)
{
	struct buf tmp;
	buf_init(&tmp);
	for (size_t k = 0; k < N_CLEANUP; k++) {
		buf_clear(&tmp);
		if (replace_into(s->data ? s->data : "", s->len, cleanup_pat[k][0], strlen(cleanup_pat[k][0]),
				 cleanup_pat[k][1], strlen(cleanup_pat[k][1]), &tmp)) {
			buf_deinit(&tmp);
			return ERR_NOMEM;
		}
		struct buf sw = *s;
		*s = tmp;
		tmp = sw;
	}
	buf_deinit(&tmp);
	return 0;
}

/* do_cleanup: apply clean_up_tokenization_spaces when the config asks (the
 * stream applies it itself, to the part it can emit). */
static int decode_ex(const struct tokenizer *t, const int32_t *ids, size_t n, unsigned flags, bool at_start,
		     bool at_end, struct buf *out, bool *tail_open, bool do_cleanup)
{
	bool open_dummy;
	if (!tail_open)
		tail_open = &open_dummy;
	*tail_open = false;
	struct toks a = { 0 }, b = { 0 };
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i++) {
		int32_t id = ids[i];
		if (id < 0 || id >= t->n_ids || (t->attr[id] & TOK_ATTR_HOLE))
			rc = ERR_RANGE;
		else if ((flags & TOK_SKIP_SPECIAL) && (t->attr[id] & (TOK_ATTR_SPECIAL | TOK_ATTR_NOSKIP)) == TOK_ATTR_SPECIAL)
			continue;
		else {
			struct tok_span sp = t->out_piece ? t->out_piece[id] : t->piece[id];
			rc = toks_add(&a, tok_span_ptr(t, sp), sp.len);
		}
	}
	bool fused = false;
	for (int k = 0; k < t->n_decs && !rc; k++) {
		toks_free(&b);
		rc = run_decoder(t, &t->decs[k], &a, &b, at_start, at_end, (flags & TOK_KEEP_BYTES) != 0,
				 &fused, tail_open);
		struct toks sw = a;
		a = b;
		b = sw;
	}
	struct buf text;
	buf_init(&text);
	for (size_t i = 0; i < a.n && !rc; i++) {
		if (t->n_decs == 0 && i > 0 && buf_append_char(&text, ' '))
			rc = ERR_NOMEM; /* no decoder: HF joins pieces with spaces */
		else if (buf_append(&text, tk(&a, i), a.v[i].len))
			rc = ERR_NOMEM;
	}
	if (!rc && t->cleanup && do_cleanup)
		rc = cleanup(&text);
	if (!rc && text.len && buf_append(out, text.data, text.len))
		rc = ERR_NOMEM;
	if (!rc && !out->data && buf_reserve(out, 0))
		rc = ERR_NOMEM;
	buf_deinit(&text);
	toks_free(&a);
	toks_free(&b);
	return rc;
}

int tok_decode_ex(const struct tokenizer *t, const int32_t *ids, size_t n, unsigned flags, bool at_start,
		  struct buf *out)
{
	return decode_ex(t, ids, n, flags, at_start, true, out, NULL, true);
}

int tok_decode(const struct tokenizer *t, const int32_t *ids, size_t n, unsigned flags, struct buf *out)
{
	return decode_ex(t, ids, n, flags, true, true, out, NULL, true);
}

/* ---- streaming ---- */

void tok_stream_init(struct tok_stream *s, const struct tokenizer *t, unsigned flags)
{
	memset(s, 0, sizeof(*s));
	s->t = t;
	s->flags = flags;
	s->at_start = true;
	buf_init(&s->scratch);
}

void tok_stream_deinit(struct tok_stream *s)
{
	free(s->ids);
	buf_deinit(&s->scratch);
	memset(s, 0, sizeof(*s));
}

static bool has_dec(const struct tokenizer *t, enum tok_dec_kind k)
{
	for (int i = 0; i < t->n_decs; i++)
		if (t->decs[i].kind == k)
			return true;
	return false;
}

/* How much of the window's text (len bytes) later ids cannot change.
 * tail_open: the text ends in the U+FFFD of a partial character. */
static size_t stable_len(const struct tokenizer *t, const char *s, size_t len, bool tail_open)
{
	size_t stable = len;
	/* the next bytes may complete that character (ByteLevel); a run of
	 * byte-fallback tokens is held whole by the caller */
	if (tail_open && stable >= 3 && !memcmp(s + stable - 3, "\xEF\xBF\xBD", 3))
		stable -= 3;
	if (t->cleanup) {
		/* a space that may start a clean-up pattern once more text comes */
		size_t from = stable > 4 ? stable - 4 : 0;
		for (size_t p = from; p < stable; p++) {
			if (s[p] != ' ')
				continue;
			bool hold = stable - p == 3 && !memcmp(s + p, " ' ", 3);
			for (size_t k = 0; k < N_CLEANUP && !hold; k++) {
				size_t pl = strlen(cleanup_pat[k][0]);
				hold = stable - p < pl && !memcmp(s + p, cleanup_pat[k][0], stable - p);
			}
			if (hold) {
				/* a replacement there removes spaces, and the text it
				 * leaves can complete a pattern that starts further left
				 * (" ' " + "s" -> " 's" -> "'s" eats the space before):
				 * hold the whole run of pattern characters before it. A
				 * match never contains another character, so the cut
				 * after one splits no match, however the passes go. */
				while (p > 0 && s[p - 1] && strchr(" .?!,'ntmsver", s[p - 1]))
					p--;
				stable = p;
				break;
			}
		}
	}
	for (int i = 0; i < t->n_decs; i++) {
		const struct tok_dec *dc = &t->decs[i];
		if (dc->kind != DEC_STRIP || dc->stop <= 0 || !dc->a_len)
			continue;
		for (int k = 0; k < dc->stop && stable >= dc->a_len &&
				!memcmp(s + stable - dc->a_len, dc->a, dc->a_len);
		     k++)
			stable -= dc->a_len;
	}
	return stable;
}

int tok_stream_push(struct tok_stream *s, int32_t id, struct buf *out)
{
	const struct tokenizer *t = s->t;
	if (id < 0 || id >= t->n_ids || (t->attr[id] & TOK_ATTR_HOLE))
		return ERR_RANGE;
	if ((s->flags & TOK_SKIP_SPECIAL) && (t->attr[id] & (TOK_ATTR_SPECIAL | TOK_ATTR_NOSKIP)) == TOK_ATTR_SPECIAL)
		return 0;
	if (s->n_ids == s->cap_ids) {
		size_t c = s->cap_ids ? s->cap_ids * 2 : 16;
		int32_t *p = realloc(s->ids, c * sizeof(int32_t));
		if (!p)
			return ERR_NOMEM;
		s->ids = p;
		s->cap_ids = c;
	}
	s->ids[s->n_ids++] = id;
	/* a byte token may join the next ones into one character (or into
	 * replacement characters): wait for the run to end */
	bool open = (t->attr[id] & TOK_ATTR_BYTE) && has_dec(t, DEC_BYTEFALLBACK);
	if (open)
		return 0;
	buf_clear(&s->scratch);
	bool tail_open;
	int rc = decode_ex(t, s->ids, s->n_ids, s->flags, s->at_start, false, &s->scratch, &tail_open, false);
	if (rc) {
		s->n_ids--;
		return rc;
	}
	/* the hold is decided on the text before clean-up; what is emitted is
	 * the clean-up of the part before it, which no later text can reach */
	const char *txt = s->scratch.data ? s->scratch.data : "";
	size_t len = s->scratch.len, st = stable_len(t, txt, len, tail_open);
	if (t->cleanup) {
		s->scratch.len = st;
		if ((rc = cleanup(&s->scratch)))
			return rc;
		txt = s->scratch.data ? s->scratch.data : "";
		size_t cl = s->scratch.len;
		if (cl > s->emitted && buf_append(out, txt + s->emitted, cl - s->emitted))
			return ERR_NOMEM;
		if (cl > s->emitted)
			s->emitted = cl;
	} else if (st > s->emitted) {
		if (buf_append(out, txt + s->emitted, st - s->emitted))
			return ERR_NOMEM;
		s->emitted = st;
	}
	if (st == len && len > 0 && !tail_open) {
		/* decoding separates here: start a new window */
		s->n_ids = 0;
		s->emitted = 0;
		s->at_start = false;
	}
	return 0;
}

int tok_stream_finish(struct tok_stream *s, struct buf *out)
{
	int rc = 0;
	if (s->n_ids) {
		buf_clear(&s->scratch);
		rc = decode_ex(s->t, s->ids, s->n_ids, s->flags, s->at_start, true, &s->scratch, NULL, true);
		if (!rc && s->scratch.len > s->emitted &&
		    buf_append(out, s->scratch.data + s->emitted, s->scratch.len - s->emitted))
			rc = ERR_NOMEM;
	}
	s->n_ids = 0;
	s->emitted = 0;
	s->at_start = true;
	return rc;
}
