/* engine/tok/tok_index.c — the final indexing step shared by both loaders
 * (tok_json.c, tok_gguf.c): once the vocabulary, the added tokens and the
 * pipeline are set, tok_finalize builds the piece maps and the two
 * added-token tries (raw texts, and normalized ones, which needs the
 * normalizer of tok_encode.c), and the byte tables.
 *
 * Tested through tests/tokenizer/test_tokenizer.c (fixture vectors).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "engine/tok/tok_internal.h"

static int trie_add(struct tok_trie *tr, const unsigned char *s, size_t n, int32_t idx)
{
	uint32_t node = 0;
	if (n == 0)
		return 0;
	tr->first[s[0]] = true;
	for (size_t k = 0; k < n; k++) {
		uint64_t key = (uint64_t)node << 8 | s[k], child;
		if (tok_u64map_get(&tr->map, key, &child)) {
			node = (uint32_t)child;
			continue;
		}
		child = tr->n_nodes++;
		tr->term[child] = -1;
		int rc = tok_u64map_put(&tr->map, key, child);
		if (rc)
			return rc;
		node = (uint32_t)child;
	}
	if (tr->term[node] < 0)
		tr->term[node] = idx; /* the first of equal texts wins */
	return 0;
}

static int trie_init(struct tok_trie *tr, size_t total)
{
	int rc = tok_u64map_init(&tr->map, total);
	if (rc)
		return rc;
	tr->term = malloc((total + 1) * sizeof(int32_t));
	if (!tr->term)
		return ERR_NOMEM;
	tr->term[0] = -1;
	tr->n_nodes = 1;
	return 0;
}

static int trie_build(struct tokenizer *t)
{
	size_t total = 1, ntotal = 1;
	int rc;
	struct buf nb;
	buf_init(&nb);
	/* normalized texts, one after another in nb (offsets in added[].norm) */
	size_t *noff = calloc((size_t)t->n_added + 1, sizeof(size_t));
	if (!noff)
		return ERR_NOMEM;
	for (int i = 0; i < t->n_added; i++) {
		noff[i] = nb.len;
		if (t->added[i].normalized) {
			if ((rc = tok_normalize(t, tok_span_ptr(t, t->added[i].text), t->added[i].text.len, &nb))) {
				free(noff);
				buf_deinit(&nb);
				return rc;
			}
			ntotal += nb.len - noff[i];
		} else {
			total += t->added[i].text.len;
		}
	}
	noff[t->n_added] = nb.len;
	rc = trie_init(&t->trie, total);
	if (!rc)
		rc = trie_init(&t->ntrie, ntotal);
	for (int i = 0; i < t->n_added && !rc; i++) {
		if (t->added[i].normalized)
			rc = trie_add(&t->ntrie, (const unsigned char *)(nb.data ? nb.data + noff[i] : ""),
				      noff[i + 1] - noff[i], i);
		else
			rc = trie_add(&t->trie, (const unsigned char *)tok_span_ptr(t, t->added[i].text),
				      t->added[i].text.len, i);
	}
	/* HF decodes a normalized added token as its normalized text, and
	 * then (matching specials by that text) does not skip it */
	for (int i = 0; i < t->n_added && !rc; i++) {
		struct tok_added *a = &t->added[i];
		size_t nl = noff[i + 1] - noff[i];
		if (!a->normalized ||
		    (nl == a->text.len && (nl == 0 || !memcmp(nb.data + noff[i], tok_span_ptr(t, a->text), nl))))
			continue;
		if (!t->out_piece) {
			t->out_piece = malloc((size_t)t->n_ids * sizeof(*t->out_piece));
			if (!t->out_piece) {
				rc = ERR_NOMEM;
				break;
			}
			memcpy(t->out_piece, t->piece, (size_t)t->n_ids * sizeof(*t->out_piece));
		}
		rc = tok_pool_add(t, nl ? nb.data + noff[i] : "", nl, &t->out_piece[a->id]);
		if (a->special)
			t->attr[a->id] |= TOK_ATTR_NOSKIP;
	}
	free(noff);
	buf_deinit(&nb);
	return rc;
}

int tok_finalize(struct tokenizer *t, struct diag *d)
{
	int rc;
	if ((rc = tok_strmap_build(t, &t->vocab, TOK_ATTR_VOCAB)))
		return diag_set(d, rc, "tokenizer: out of memory");
	if ((rc = tok_strmap_build(t, &t->all, TOK_ATTR_VOCAB | TOK_ATTR_ADDED)))
		return diag_set(d, rc, "tokenizer: out of memory");
	if ((rc = trie_build(t)))
		return diag_set(d, rc, "tokenizer: out of memory");
	for (int b = 0; b < 256; b++) {
		char name[8];
		static const char hex[] = "0123456789ABCDEF";
		name[0] = '<', name[1] = '0', name[2] = 'x', name[3] = hex[b >> 4], name[4] = hex[b & 15],
		name[5] = '>';
		t->byte_tok[b] = tok_strmap_get(t, &t->vocab, name, 6);
		char u[4];
		size_t n = utf8_encode(tok_byte_to_cp((uint8_t)b), u);
		t->bl_id[b] = tok_strmap_get(t, &t->vocab, u, n);
	}
	for (int32_t id = 0; id < t->n_ids; id++) {
		struct tok_span s = t->piece[id];
		const char *p = tok_span_ptr(t, s);
		if (!(t->attr[id] & TOK_ATTR_HOLE) && s.len == 6 && p[0] == '<' && p[1] == '0' && p[2] == 'x' &&
		    p[5] == '>') {
			char hx[3] = { p[3], p[4], 0 };
			char *end;
			long v = strtol(hx, &end, 16);
			if (*end == 0 && end == hx + 2) {
				t->attr[id] |= TOK_ATTR_BYTE;
				t->byte_val[id] = (uint8_t)v;
			}
		}
	}
	if (t->byte_level) {
		for (int b = 0; b < 256; b++)
			if (t->bl_id[b] < 0)
				return diag_set(d, ERR_FORMAT, "byte-level vocabulary lacks byte 0x%02X", b);
	}
	return 0;
}
