/* engine/tok/tok_util.c — the tokenizer's building blocks: string pool, hash maps
 * (piece -> id, u64 -> u64), the GPT-2 byte map, the pre-tokenizer regex,
 * destruction and the small accessors. The final indexing step (tries) is
 * tok_index.c; UTF-8 is common/utf8.
 *
 * Tested through tests/tokenizer/test_tokenizer.c (fixture vectors) and
 * tests/fuzz/fuzz_tokenizer.c (invalid UTF-8).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "engine/tok/tok_internal.h"

/* ---- hashing ---- */

uint64_t tok_hash(const void *p, size_t n)
{
	const unsigned char *s = p;
	uint64_t h = 0x243F6A8885A308D3ull ^ (n * 0x9E3779B97F4A7C15ull);
	while (n >= 8) {
		uint64_t v;
		memcpy(&v, s, 8);
		h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
		h ^= h >> 31;
		s += 8;
		n -= 8;
	}
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)s[i] << (8 * i);
	h = (h ^ v) * 0x94D049BB133111EBull;
	h ^= h >> 29;
	h *= 0xBF58476D1CE4E5B9ull;
	h ^= h >> 32;
	return h;
}

static int table_size(size_t expect, size_t *out)
{
	size_t need, cap = 16;
	if (ck_mul(expect, 2, &need))
		return ERR_OVERFLOW;
	while (cap < need) {
		if (cap > SIZE_MAX / 2)
			return ERR_OVERFLOW;
		cap *= 2;
	}
	*out = cap;
	return 0;
}

int tok_u64map_init(struct tok_u64map *m, size_t expect)
{
	size_t cap;
	memset(m, 0, sizeof(*m));
	if (table_size(expect, &cap))
		return ERR_OVERFLOW;
	m->ent = malloc(cap * sizeof(*m->ent));
	if (!m->ent)
		return ERR_NOMEM;
	memset(m->ent, 0xff, cap * sizeof(*m->ent));
	m->mask = cap - 1;
	return 0;
}

void tok_u64map_deinit(struct tok_u64map *m)
{
	free(m->ent);
	memset(m, 0, sizeof(*m));
}

static int u64map_grow(struct tok_u64map *m)
{
	struct tok_u64map n2;
	int rc = tok_u64map_init(&n2, (m->mask + 1));
	if (rc)
		return rc;
	for (size_t i = 0; i <= m->mask; i++)
		if (m->ent[i].key != UINT64_MAX)
			tok_u64map_put(&n2, m->ent[i].key, m->ent[i].val);
	tok_u64map_deinit(m);
	*m = n2;
	return 0;
}

int tok_u64map_put(struct tok_u64map *m, uint64_t key, uint64_t val)
{
	if (key == UINT64_MAX)
		return ERR_INVAL;
	if ((m->n + 1) * 2 > m->mask + 1) {
		int rc = u64map_grow(m);
		if (rc)
			return rc;
	}
	size_t i = tok_u64_slot(key, m->mask);
	while (m->ent[i].key != UINT64_MAX) {
		if (m->ent[i].key == key)
			return 0;
		i = (i + 1) & m->mask;
	}
	m->ent[i].key = key;
	m->ent[i].val = val;
	m->n++;
	return 0;
}

/* ---- pool, ids, piece maps ---- */

int tok_create_empty(struct tokenizer **out)
{
	struct tokenizer *t = calloc(1, sizeof(*t));
	if (!t)
		return ERR_NOMEM;
	t->unk_id = -1;
	t->bos = -1;
	t->eos = -1;
	for (int i = 0; i < 256; i++) {
		t->byte_tok[i] = -1;
		t->bl_id[i] = -1;
	}
	*out = t;
	return 0;
}

int tok_pool_add(struct tokenizer *t, const char *s, size_t n, struct tok_span *sp)
{
	size_t need;
	if (n > UINT32_MAX || ck_add(t->pool_len, n + 1, &need) || need > UINT32_MAX)
		return ERR_OVERFLOW;
	if (need > t->pool_cap) {
		size_t cap = t->pool_cap ? t->pool_cap : 1 << 16;
		while (cap < need)
			cap *= 2;
		char *p = realloc(t->pool, cap);
		if (!p)
			return ERR_NOMEM;
		t->pool = p;
		t->pool_cap = cap;
	}
	memcpy(t->pool + t->pool_len, s, n);
	t->pool[t->pool_len + n] = 0;
	sp->off = (uint32_t)t->pool_len;
	sp->len = (uint32_t)n;
	t->pool_len = need;
	return 0;
}

int tok_set_ids(struct tokenizer *t, int32_t n_ids)
{
	if (n_ids < 0)
		return ERR_INVAL;
	size_t n = (size_t)n_ids;
	struct tok_span *p = realloc(t->piece, (n ? n : 1) * sizeof(*p));
	if (!p)
		return ERR_NOMEM;
	t->piece = p;
	uint8_t *a = realloc(t->attr, n ? n : 1);
	if (!a)
		return ERR_NOMEM;
	t->attr = a;
	uint8_t *b = realloc(t->byte_val, n ? n : 1);
	if (!b)
		return ERR_NOMEM;
	t->byte_val = b;
	for (size_t i = (size_t)t->n_ids; i < n; i++) {
		t->piece[i] = (struct tok_span){ 0, 0 };
		t->attr[i] = TOK_ATTR_HOLE;
		t->byte_val[i] = 0;
	}
	t->n_ids = n_ids;
	return 0;
}

int tok_strmap_build(struct tokenizer *t, struct tok_strmap *m, uint8_t need_attr)
{
	size_t cap;
	if (table_size((size_t)t->n_ids, &cap))
		return ERR_OVERFLOW;
	free(m->slots);
	m->slots = calloc(cap, sizeof(uint64_t));
	if (!m->slots)
		return ERR_NOMEM;
	m->mask = cap - 1;
	m->n = 0;
	for (int32_t id = 0; id < t->n_ids; id++) {
		if (!(t->attr[id] & need_attr))
			continue;
		struct tok_span sp = t->piece[id];
		uint64_t h = tok_hash(t->pool + sp.off, sp.len);
		size_t i = (size_t)h & m->mask;
		bool dup = false;
		while (m->slots[i]) {
			struct tok_span o = t->piece[(uint32_t)m->slots[i] - 1];
			if ((m->slots[i] >> 32) == (h >> 32) && o.len == sp.len &&
			    !memcmp(t->pool + o.off, t->pool + sp.off, sp.len)) {
				dup = true; /* first id wins, as a JSON object's duplicate keys do */
				break;
			}
			i = (i + 1) & m->mask;
		}
		if (!dup) {
			m->slots[i] = (h & 0xFFFFFFFF00000000ull) | ((uint32_t)id + 1);
			m->n++;
		}
	}
	return 0;
}

int32_t tok_strmap_get(const struct tokenizer *t, const struct tok_strmap *m, const char *s, size_t n)
{
	if (!m->slots)
		return -1;
	uint64_t h = tok_hash(s, n);
	size_t i = (size_t)h & m->mask;
	while (m->slots[i]) {
		uint64_t v = m->slots[i];
		if ((v >> 32) == (h >> 32)) {
			struct tok_span o = t->piece[(uint32_t)v - 1];
			if (o.len == n && !memcmp(t->pool + o.off, s, n))
				return (int32_t)(uint32_t)v - 1;
		}
		i = (i + 1) & m->mask;
	}
	return -1;
}

/* ---- GPT-2 byte map ---- */

/* Byte b -> code point: printable bytes (33-126, 161-172, 174-255) map to
 * themselves, the others to 256, 257, ... in byte order (GPT-2's bytes_to_unicode). */
static const uint16_t bl_cp[256] = {
	256, 257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271,
	272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287,
	288, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
	48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
	64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79,
	80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95,
	96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111,
	112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 289,
	290, 291, 292, 293, 294, 295, 296, 297, 298, 299, 300, 301, 302, 303, 304, 305,
	306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 320, 321,
	322, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 323, 174, 175,
	176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191,
	192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207,
	208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223,
	224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239,
	240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255,
};

/* Code point (< 324) -> byte, -1 when not in the map. */
static const int16_t bl_byte[324] = {
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
	48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
	64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79,
	80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95,
	96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111,
	112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, -1, 174, 175,
	176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191,
	192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207,
	208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223,
	224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239,
	240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255,
	0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
	16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
	32, 127, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141,
	142, 143, 144, 145, 146, 147, 148, 149, 150, 151, 152, 153, 154, 155, 156, 157,
	158, 159, 160, 173,
};

uint32_t tok_byte_to_cp(uint8_t b)
{
	return bl_cp[b];
}

int tok_cp_to_byte(uint32_t cp)
{
	return cp < 324 ? bl_byte[cp] : -1;
}

/* Unicode White_Space (what Rust's char::is_whitespace tests). */
bool tok_is_whitespace(uint32_t cp)
{
	return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
	       (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
	       cp == 0x205F || cp == 0x3000;
}

/* ---- regex ---- */

pcre2_code *tok_regex_compile(const char *pat, size_t len, struct diag *d, int *err)
{
	int ec;
	PCRE2_SIZE eo;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
	if (!re) {
		PCRE2_UCHAR msg[160];
		pcre2_get_error_message(ec, msg, sizeof(msg));
		*err = diag_set(d, ERR_UNSUPPORTED, "tokenizer regex at offset %zu: %s", (size_t)eo,
				(const char *)msg);
		return NULL;
	}
	/* JIT is an optimisation: without it pcre2_match still works */
	(void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
	*err = 0;
	return re;
}

void tok_destroy(struct tokenizer *t)
{
	if (!t)
		return;
	free(t->piece);
	free(t->attr);
	free(t->byte_val);
	free(t->pool);
	free(t->vocab.slots);
	free(t->all.slots);
	free(t->added);
	free(t->out_piece);
	tok_u64map_deinit(&t->trie.map);
	free(t->trie.term);
	tok_u64map_deinit(&t->ntrie.map);
	free(t->ntrie.term);
	tok_u64map_deinit(&t->merges);
	free(t->scores);
	for (int i = 0; i < t->n_norms; i++) {
		free(t->norms[i].a);
		free(t->norms[i].b);
		if (t->norms[i].re)
			pcre2_code_free(t->norms[i].re);
	}
	free(t->norms);
	for (int i = 0; i < t->n_pretoks; i++) {
		free(t->pretoks[i].lit);
		free(t->pretoks[i].re_src);
		if (t->pretoks[i].re)
			pcre2_code_free(t->pretoks[i].re);
	}
	free(t->pretoks);
	free(t->pre_ids);
	free(t->post_ids);
	for (int i = 0; i < t->n_decs; i++) {
		free(t->decs[i].a);
		free(t->decs[i].b);
	}
	free(t->decs);
	free(t);
}

/* ---- small public accessors ---- */

int32_t tok_vocab_size(const struct tokenizer *t)
{
	return t->n_ids;
}

int32_t tok_bos(const struct tokenizer *t)
{
	return t->bos;
}

int32_t tok_eos(const struct tokenizer *t)
{
	return t->eos;
}

bool tok_add_bos(const struct tokenizer *t)
{
	return t->add_bos;
}

const char *tok_token_text(const struct tokenizer *t, int32_t id, size_t *len)
{
	if (id < 0 || id >= t->n_ids || (t->attr[id] & TOK_ATTR_HOLE))
		return NULL;
	if (len)
		*len = t->piece[id].len;
	return tok_span_ptr(t, t->piece[id]);
}

bool tok_is_special(const struct tokenizer *t, int32_t id)
{
	return id >= 0 && id < t->n_ids && (t->attr[id] & TOK_ATTR_SPECIAL);
}

int32_t tok_piece_id(const struct tokenizer *t, const char *piece, size_t len)
{
	return tok_strmap_get(t, &t->all, piece, len);
}
