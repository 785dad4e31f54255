/* engine/tok/tok_bpe.c — BPE over one pre-tokenized word. Two ways of choosing
 * the next merge: by merge rank (tokenizer.json merges; GGUF "gpt2"), as the
 * Rust `tokenizers` BPE does (lowest rank first, then leftmost), or by
 * SentencePiece score (GGUF "llama": the adjacent pair whose concatenation is
 * the best-scored piece). Words start from one symbol per byte (byte-level)
 * or per character (with <0xNN> byte fallback or unk). Short words scan an
 * array of pair priorities; long ones use a heap with lazy invalidation.
 * Tests: tests/tokenizer/ (fixture vectors, GGUF round trips, synthetic).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "engine/tok/tok_internal.h"

int tok_ids_push(int32_t **ids, size_t *n, size_t *cap, int32_t id)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 64;
		int32_t *p = realloc(*ids, c * sizeof(int32_t));
		if (!p)
			return ERR_NOMEM;
		*ids = p;
		*cap = c;
	}
	(*ids)[(*n)++] = id;
	return 0;
}

struct tok_bpe_heap {
	uint64_t key; /* priority: smaller first; low 32 bits are the left position */
	uint32_t aux; /* BPE: id of the merged token; SPM: byte length of the pair */
};

struct tok_bpe_sym {
	int32_t id;
	uint32_t off, len; /* bytes of the word (SPM) */
	int32_t prev, next;
};


static void heap_push(struct tok_bpe_heap *h, size_t *n, struct tok_bpe_heap e)
{
	size_t i = (*n)++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (h[p].key <= e.key)
			break;
		h[i] = h[p];
		i = p;
	}
	h[i] = e;
}

static struct tok_bpe_heap heap_pop(struct tok_bpe_heap *h, size_t *n)
{
	struct tok_bpe_heap top = h[0], last = h[--*n];
	size_t i = 0, m = *n;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= m)
			break;
		if (c + 1 < m && h[c + 1].key < h[c].key)
			c++;
		if (last.key <= h[c].key)
			break;
		h[i] = h[c];
		i = c;
	}
	if (m > 0)
		h[i] = last;
	return top;
}

/* Descending float score -> ascending u32 (bigger score pops first). */
static uint32_t score_key(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
	return ~u;
}

static int ensure_scratch(struct tok_bpe_scratch *e, size_t n)
{
	if (n + 1 > e->cap_sym) {
		size_t c = n + 64;
		struct tok_bpe_sym *s = realloc(e->sym, c * sizeof(*s));
		if (!s)
			return ERR_NOMEM;
		e->sym = s;
		e->cap_sym = c;
	}
	/* each merge pushes at most two entries; initial pairs n */
	size_t hc;
	if (ck_mul(n + 1, 3, &hc))
		return ERR_OVERFLOW;
	if (hc > e->cap_heap) {
		struct tok_bpe_heap *h = realloc(e->heap, hc * sizeof(*h));
		if (!h)
			return ERR_NOMEM;
		e->heap = h;
		e->cap_heap = hc;
	}
	return 0;
}

/* Can symbols a and b merge? Fills the heap entry. */
static bool pair_entry(const struct tokenizer *t, const char *w, const struct tok_bpe_sym *a, const struct tok_bpe_sym *b,
		       int32_t pos, struct tok_bpe_heap *out)
{
	if (t->model == TOK_MODEL_BPE) {
		uint64_t v;
		if (a->id < 0 || b->id < 0)
			return false;
		if (!tok_u64map_get(&t->merges, (uint64_t)a->id << 32 | (uint32_t)b->id, &v))
			return false;
		out->key = (v & 0xFFFFFFFF00000000ull) | (uint32_t)pos;
		out->aux = (uint32_t)v;
		return true;
	}
	int32_t id = tok_strmap_get(t, &t->vocab, w + a->off, (size_t)a->len + b->len);
	if (id < 0 || t->scores[id] == -INFINITY) /* -inf: never the result of a merge */
		return false;
	out->key = (uint64_t)score_key(t->scores[id]) << 32 | (uint32_t)pos;
	out->aux = a->len + b->len;
	return true;
}

/* Initial symbols of a word. Byte-mapped words start from one symbol per
 * byte; others from one per character, with byte fallback or unk. */
static int init_symbols(const struct tokenizer *t, struct tok_bpe_scratch *e, const char *w, size_t n, bool byte_mapped,
			size_t *n_sym)
{
	size_t k = 0;
	if (byte_mapped) {
		for (size_t i = 0; i < n; i++)
			e->sym[k++] = (struct tok_bpe_sym){ t->bl_id[(unsigned char)w[i]], (uint32_t)i, 1, 0, 0 };
		*n_sym = k;
		return 0;
	}
	int32_t unk_pending = -1;
	uint32_t unk_off = 0, unk_len = 0;
	size_t i = 0;
	while (i < n) {
		size_t cl = utf8_len(w + i, n - i);
		if (!cl)
			cl = 1;
		int32_t id = tok_strmap_get(t, &t->vocab, w + i, cl);
		if (t->model == TOK_MODEL_SPM) {
			/* SentencePiece merges text; unknown chars resolve at the end */
			e->sym[k++] = (struct tok_bpe_sym){ id, (uint32_t)i, (uint32_t)cl, 0, 0 };
			i += cl;
			continue;
		}
		if (id >= 0) {
			if (unk_pending >= 0) {
				e->sym[k++] = (struct tok_bpe_sym){ unk_pending, unk_off, unk_len, 0, 0 };
				unk_pending = -1;
			}
			e->sym[k++] = (struct tok_bpe_sym){ id, (uint32_t)i, (uint32_t)cl, 0, 0 };
			i += cl;
			continue;
		}
		if (t->byte_fallback) {
			bool all = true;
			for (size_t j = 0; j < cl; j++)
				all = all && t->byte_tok[(unsigned char)w[i + j]] >= 0;
			if (all) {
				/* HF does not flush a pending unk here; it stays pending */
				for (size_t j = 0; j < cl; j++)
					e->sym[k++] = (struct tok_bpe_sym){ t->byte_tok[(unsigned char)w[i + j]],
								    (uint32_t)(i + j), 1, 0, 0 };
				i += cl;
				continue;
			}
		}
		if (t->unk_id >= 0) {
			if (unk_pending >= 0 && t->fuse_unk) {
				unk_len += (uint32_t)cl;
			} else {
				if (unk_pending >= 0)
					e->sym[k++] = (struct tok_bpe_sym){ unk_pending, unk_off, unk_len, 0, 0 };
				unk_pending = t->unk_id;
				unk_off = (uint32_t)i;
				unk_len = (uint32_t)cl;
			}
		}
		i += cl;
	}
	if (unk_pending >= 0)
		e->sym[k++] = (struct tok_bpe_sym){ unk_pending, unk_off, unk_len, 0, 0 };
	*n_sym = k;
	return 0;
}

/* SPM: a final symbol whose text is not a token becomes its bytes. */
static int spm_emit(const struct tokenizer *t, const char *w, const struct tok_bpe_sym *s, int32_t **ids, size_t *n, size_t *cap)
{
	int32_t id = tok_strmap_get(t, &t->vocab, w + s->off, s->len);
	if (id >= 0)
		return tok_ids_push(ids, n, cap, id);
	for (uint32_t j = 0; j < s->len; j++) {
		int32_t b = t->byte_tok[(unsigned char)w[s->off + j]];
		if (b < 0)
			b = t->unk_id;
		if (b >= 0 && tok_ids_push(ids, n, cap, b))
			return ERR_NOMEM;
	}
	return 0;
}

/* Short words: keep each adjacent pair's priority in an array and scan it for
 * the best (same order as the heap: lowest key = best rank, then leftmost),
 * recomputing only the two pairs a merge changes. */
#define SMALL_WORD 48

static void bpe_small(const struct tokenizer *t, const char *w, struct tok_bpe_sym *s, size_t ns)
{
	uint64_t key[SMALL_WORD];
	uint32_t aux[SMALL_WORD];
	struct tok_bpe_heap he;
	for (size_t i = 0; i < ns; i++) {
		bool ok = i + 1 < ns && pair_entry(t, w, &s[i], &s[i + 1], (int32_t)i, &he);
		key[i] = ok ? he.key : UINT64_MAX;
		aux[i] = ok ? he.aux : 0;
	}
	for (;;) {
		uint64_t best = UINT64_MAX;
		int32_t bi = -1;
		for (int32_t i = 0; i >= 0; i = s[i].next)
			if (key[i] < best) {
				best = key[i];
				bi = i;
			}
		if (bi < 0)
			break;
		struct tok_bpe_sym *a = &s[bi], *b = &s[a->next];
		if (t->model == TOK_MODEL_BPE)
			a->id = (int32_t)aux[bi];
		a->len += b->len;
		b->len = 0;
		a->next = b->next;
		if (b->next >= 0)
			s[b->next].prev = bi;
		bool ok = a->next >= 0 && pair_entry(t, w, a, &s[a->next], bi, &he);
		key[bi] = ok ? he.key : UINT64_MAX;
		aux[bi] = ok ? he.aux : 0;
		if (a->prev >= 0) {
			int32_t p = a->prev;
			ok = pair_entry(t, w, &s[p], a, p, &he);
			key[p] = ok ? he.key : UINT64_MAX;
			aux[p] = ok ? he.aux : 0;
		}
	}
}

int tok_bpe_word(const struct tokenizer *t, struct tok_bpe_scratch *e, const char *w, size_t n, bool byte_mapped,
		 int32_t **ids, size_t *n_ids, size_t *cap)
{
	if (n == 0)
		return 0;
	if (t->ignore_merges) {
		int32_t id;
		if (byte_mapped) {
			buf_clear(&e->mapped);
			for (size_t i = 0; i < n; i++) {
				char u[4];
				size_t k = utf8_encode(tok_byte_to_cp((uint8_t)w[i]), u);
				if (buf_append(&e->mapped, u, k))
					return ERR_NOMEM;
			}
			id = tok_strmap_get(t, &t->vocab, e->mapped.data, e->mapped.len);
		} else {
			id = tok_strmap_get(t, &t->vocab, w, n);
		}
		if (id >= 0)
			return tok_ids_push(ids, n_ids, cap, id);
	}
	int rc = ensure_scratch(e, n * 4);
	if (rc)
		return rc;
	size_t ns;
	if ((rc = init_symbols(t, e, w, n, byte_mapped, &ns)))
		return rc;
	struct tok_bpe_sym *s = e->sym;
	for (size_t i = 0; i < ns; i++) {
		s[i].prev = (int32_t)i - 1;
		s[i].next = i + 1 < ns ? (int32_t)i + 1 : -1;
	}
	if (ns <= SMALL_WORD) {
		bpe_small(t, w, s, ns);
		goto emit;
	}
	size_t hn = 0;
	for (size_t i = 0; i + 1 < ns; i++) {
		struct tok_bpe_heap he;
		if (pair_entry(t, w, &s[i], &s[i + 1], (int32_t)i, &he))
			heap_push(e->heap, &hn, he);
	}
	while (hn > 0) {
		struct tok_bpe_heap top = heap_pop(e->heap, &hn);
		int32_t pos = (int32_t)(uint32_t)top.key;
		struct tok_bpe_sym *a = &s[pos];
		if (a->len == 0 || a->next < 0)
			continue;
		struct tok_bpe_sym *b = &s[a->next];
		/* stale entry? the pair must still produce the same token */
		if (t->model == TOK_MODEL_BPE) {
			uint64_t v;
			if (!tok_u64map_get(&t->merges, (uint64_t)a->id << 32 | (uint32_t)b->id, &v) ||
			    (uint32_t)v != top.aux)
				continue;
			a->id = (int32_t)top.aux;
		} else if (a->len + b->len != top.aux) {
			continue;
		}
		a->len += b->len;
		b->len = 0;
		a->next = b->next;
		if (b->next >= 0)
			s[b->next].prev = pos;
		struct tok_bpe_heap he;
		if (a->prev >= 0 && pair_entry(t, w, &s[a->prev], a, a->prev, &he))
			heap_push(e->heap, &hn, he);
		if (a->next >= 0 && pair_entry(t, w, a, &s[a->next], pos, &he))
			heap_push(e->heap, &hn, he);
	}
emit:
	for (int32_t i = ns ? 0 : -1; i >= 0; i = s[i].next) {
		if (t->model == TOK_MODEL_SPM)
			rc = spm_emit(t, w, &s[i], ids, n_ids, cap);
		else if (s[i].id >= 0)
			rc = tok_ids_push(ids, n_ids, cap, s[i].id);
		if (rc)
			return rc;
	}
	return 0;
}


void tok_bpe_scratch_free(struct tok_bpe_scratch *e)
{
	free(e->sym);
	free(e->heap);
	buf_deinit(&e->mapped);
	memset(e, 0, sizeof(*e));
}
