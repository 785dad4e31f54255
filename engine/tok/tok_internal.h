/* engine/tok/tok_internal.h — the tokenizer's internal representation, shared by
 * the engine/tok_*.c files only (the public API is engine/tok/tokenizer.h).
 *
 * Both loaders (tok_json.c, tok_gguf.c) fill the same struct tokenizer: a
 * string pool holding every piece, hash maps piece->id and (left,right)->merge,
 * a byte trie of added tokens, and the pipeline as flat arrays of steps
 * (Sequence nodes are flattened at load). Everything here is immutable after
 * loading; per-call scratch lives in the callers' stack frames.
 */
#ifndef AORTA_ENGINE_TOK_TOK_INTERNAL_H
#define AORTA_ENGINE_TOK_TOK_INTERNAL_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"
#include "common/utf8.h"
#include "engine/tok/tokenizer.h"

/* ---- string pool + maps (tok_util.c) ---- */

struct tok_span {
	uint32_t off, len;
};

/* piece -> id, open addressing; a slot holds id+1 (0 = empty) in its low 32
 * bits and the key's hash's high 32 bits above, so most misses never touch the
 * pool; the key text is the piece of that id. */
struct tok_strmap {
	uint64_t *slots;
	size_t mask;
	size_t n;
};

/* u64 -> u64, open addressing; key UINT64_MAX marks an empty slot. Key and
 * value share a slot so a lookup touches one cache line. */
struct tok_kv {
	uint64_t key, val;
};

struct tok_u64map {
	struct tok_kv *ent;
	size_t mask;
	size_t n;
};

uint64_t tok_hash(const void *p, size_t n);
int tok_u64map_init(struct tok_u64map *m, size_t expect);
void tok_u64map_deinit(struct tok_u64map *m);
int tok_u64map_put(struct tok_u64map *m, uint64_t key, uint64_t val); /* keeps the first value */
/* Every key bit must reach the slot bits: merge keys are (left << 32 | right). */
static inline size_t tok_u64_slot(uint64_t key, size_t mask)
{
	key ^= key >> 33;
	key *= 0xFF51AFD7ED558CCDull;
	key ^= key >> 33;
	key *= 0xC4CEB9FE1A85EC53ull;
	key ^= key >> 33;
	return (size_t)key & mask;
}

static inline bool tok_u64map_get(const struct tok_u64map *m, uint64_t key, uint64_t *val)
{
	if (!m->ent)
		return false;
	size_t i = tok_u64_slot(key, m->mask);
	for (;;) {
		uint64_t k = m->ent[i].key;
		if (k == key) {
			*val = m->ent[i].val;
			return true;
		}
		if (k == UINT64_MAX)
			return false;
		i = (i + 1) & m->mask;
	}
}

/* ---- pipeline steps ---- */

enum tok_norm_kind { NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD, NORM_PREPEND, NORM_REPLACE, NORM_LOWERCASE };

struct tok_norm {
	enum tok_norm_kind kind;
	char *a; /* Prepend: the text; Replace: the literal pattern (NULL when regex) */
	size_t a_len;
	char *b; /* Replace: the content */
	size_t b_len;
	pcre2_code *re; /* Replace with a Regex pattern */
};

enum tok_split_behavior { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };
enum tok_prepend { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

enum tok_pretok_kind { PRETOK_SPLIT, PRETOK_BYTELEVEL, PRETOK_METASPACE };

struct tok_pretok {
	enum tok_pretok_kind kind;
	pcre2_code *re;	 /* Split (regex) / ByteLevel with use_regex */
	char *re_src;	 /* the regex's source text (GGUF export names it) */
	char *lit;	 /* Split with a String pattern; Metaspace replacement */
	size_t lit_len;
	enum tok_split_behavior behavior;
	bool invert;
	bool add_prefix_space; /* ByteLevel */
	enum tok_prepend prepend; /* Metaspace */
	bool split;		  /* Metaspace */
};

enum tok_dec_kind { DEC_BYTELEVEL, DEC_REPLACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_METASPACE };

struct tok_dec {
	enum tok_dec_kind kind;
	char *a; /* Replace pattern; Strip content; Metaspace replacement */
	size_t a_len;
	char *b; /* Replace content */
	size_t b_len;
	int start, stop;  /* Strip */
	bool prepend;	  /* Metaspace: strip the space it prepended to the first token */
};

struct tok_added {
	int32_t id;
	struct tok_span text;
	bool special, lstrip, rstrip, single_word, normalized;
};

enum tok_model_kind { TOK_MODEL_BPE, TOK_MODEL_SPM };

/* A byte trie of added-token texts: (node << 8 | byte) -> child node. */
struct tok_trie {
	struct tok_u64map map;
	int32_t *term;	   /* [n_nodes] index into added[], -1 */
	uint32_t n_nodes;
	bool first[256];   /* bytes a token can start with */
};

enum {
	TOK_ATTR_SPECIAL = 1,
	TOK_ATTR_ADDED = 2,
	TOK_ATTR_BYTE = 4,
	TOK_ATTR_HOLE = 8,
	TOK_ATTR_VOCAB = 16,
	TOK_ATTR_NOSKIP = 32, /* special, but decode's skip misses it (see out_piece) */
};

struct tokenizer {
	/* every id's piece (added tokens included) */
	int32_t n_ids;
	struct tok_span *piece; /* [n_ids] */
	uint8_t *attr;		/* [n_ids] TOK_ATTR_* */
	uint8_t *byte_val;	/* [n_ids] byte of a <0xNN> token */
	char *pool;
	size_t pool_len, pool_cap;
	struct tok_strmap vocab; /* model vocabulary only */
	struct tok_strmap all;	 /* vocab + added tokens (tok_piece_id) */

	/* added tokens: normalized=false ones are matched on the raw input
	 * (trie), normalized=true ones on each normalized segment by their
	 * normalized text (ntrie), as HF's AddedVocabulary does */
	struct tok_added *added;
	int n_added;
	struct tok_trie trie, ntrie;
	/* decode text per id when it differs from piece: HF decodes a
	 * normalized added token as its normalized text (NULL: none differ) */
	struct tok_span *out_piece;
	uint32_t n_nodes;

	/* model */
	enum tok_model_kind model;
	struct tok_u64map merges; /* (left << 32 | right) -> (rank << 32 | new id) */
	float *scores;		  /* SPM: [n_ids] */
	bool byte_fallback, fuse_unk, ignore_merges;
	int32_t unk_id;
	int32_t byte_tok[256];	 /* id of <0xNN>, -1 */
	bool byte_level;	 /* pieces are byte-mapped (ByteLevel pre-tokenizer) */
	int32_t bl_id[256];	 /* id of the byte-level char of each byte */

	/* pipeline */
	struct tok_norm *norms;
	int n_norms;
	struct tok_pretok *pretoks;
	int n_pretoks;
	int32_t *pre_ids, *post_ids; /* TemplateProcessing single: around $A */
	int n_pre, n_post;
	struct tok_dec *decs;
	int n_decs;
	bool cleanup; /* clean_up_tokenization_spaces */

	int32_t bos, eos;
	bool add_bos;
	char gguf_pre[64]; /* GGUF tokenizer.ggml.pre name when known */
};

/* tok_util.c */
int tok_create_empty(struct tokenizer **out);
int tok_pool_add(struct tokenizer *t, const char *s, size_t n, struct tok_span *sp);
static inline const char *tok_span_ptr(const struct tokenizer *t, struct tok_span s)
{
	return t->pool + s.off;
}
int tok_set_ids(struct tokenizer *t, int32_t n_ids); /* allocate per-id arrays, all holes */
int tok_strmap_build(struct tokenizer *t, struct tok_strmap *m, uint8_t need_attr);
int32_t tok_strmap_get(const struct tokenizer *t, const struct tok_strmap *m, const char *s, size_t n);
/* tok_index.c: after vocab, added tokens and the pipeline are set: maps,
 * tries, byte tables. */
int tok_finalize(struct tokenizer *t, struct diag *d);
pcre2_code *tok_regex_compile(const char *pat, size_t len, struct diag *d, int *err);
/* GPT-2 byte <-> unicode map. */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp); /* -1 when not in the map */
bool tok_is_whitespace(uint32_t cp);

/* tok_bpe.c */
struct tok_bpe_sym;
struct tok_bpe_heap;
/* Per-call BPE scratch: zero-initialise, free with tok_bpe_scratch_free. */
struct tok_bpe_scratch {
	struct tok_bpe_sym *sym;
	size_t cap_sym;
	struct tok_bpe_heap *heap;
	size_t cap_heap;
	struct buf mapped; /* byte-level mapped word (ignore_merges lookups) */
};
/* Append the ids of one word (w: its bytes; byte_mapped: byte-level vocab). */
int tok_bpe_word(const struct tokenizer *t, struct tok_bpe_scratch *sc, const char *w, size_t n, bool byte_mapped,
		 int32_t **ids, size_t *n_ids, size_t *cap);
void tok_bpe_scratch_free(struct tok_bpe_scratch *sc);
int tok_ids_push(int32_t **ids, size_t *n, size_t *cap, int32_t id);

/* tok_encode.c */
/* Run the normalizer chain over s (appends to out). */
int tok_normalize(const struct tokenizer *t, const char *s, size_t n, struct buf *out);

/* tok_decode.c */
int tok_decode_ex(const struct tokenizer *t, const int32_t *ids, size_t n, unsigned flags, bool at_start,
		  struct buf *out);

#endif
