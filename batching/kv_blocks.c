/* batching/kv_blocks.c — KV block pool: refcounts, never-cached free stack,
 * LRU of cached-but-free blocks, and the prefix-hash map (chained buckets,
 * verified against the stored parent hash and token ids on every hit).
 *
 * Every operation is O(blocks touched); nothing scans the whole pool except
 * kv_pool_check. Tests: tests/batching/test_kv_blocks.c (unit) and
 * tests/batching/test_sched_sim.c (randomized, via the scheduler).
 */
#include "batching/kv_blocks.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"

enum { LIST_NONE = 0, LIST_FREE = 1, LIST_LRU = 2 };

#define KV_ROOT_HASH 0x6a09e667f3bcc908ULL /* parent hash of a sequence's first block */

struct kv_block {
	int32_t ref;
	int32_t prev, next; /* links in the free stack (next only) or the LRU */
	int32_t hnext;      /* next block in the same hash bucket */
	uint8_t list;       /* LIST_* */
	bool registered;    /* in the hash map */
	uint64_t hash, parent;
};

struct kv_pool {
	int n_blocks, block_size;
	bool prefix_caching;
	struct kv_block *blocks;
	int32_t *tokens; /* [n_blocks * block_size]: token ids of registered blocks */
	int32_t *buckets;
	uint32_t bucket_mask;
	int32_t free_head; /* never-cached (or unregistered) free blocks, a stack */
	int n_free_uncached;
	int32_t lru_head, lru_tail; /* cached free blocks, oldest first */
	int n_lru;
	struct kv_stats st;
};

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

uint64_t kv_hash_block(uint64_t parent, const int32_t *tokens, int block_size)
{
	uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ULL);
	for (int i = 0; i < block_size; i++)
		h = mix64(h ^ ((uint64_t)(uint32_t)tokens[i] +
		               0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1)));
	return h;
}

int kv_pool_create(const struct kv_opts *o, struct kv_pool **out, struct diag *d)
{
	if (o->n_blocks < 1 || o->block_size < 1 || o->block_size > 4096)
		return diag_set(d, ERR_RANGE, "kv pool: n_blocks %d, block_size %d out of range",
		                o->n_blocks, o->block_size);
	size_t n_tok;
	if (ck_mul((size_t)o->n_blocks, (size_t)o->block_size, &n_tok) || n_tok > INT32_MAX)
		return diag_set(d, ERR_OVERFLOW, "kv pool: %d blocks of %d tokens is too many",
		                o->n_blocks, o->block_size);
	uint32_t nb = 16;
	while (nb < (uint32_t)o->n_blocks * 2u && nb < (1u << 30))
		nb <<= 1;
	struct kv_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return diag_set(d, ERR_NOMEM, "kv pool: out of memory");
	p->n_blocks = o->n_blocks;
	p->block_size = o->block_size;
	p->prefix_caching = o->prefix_caching;
	p->blocks = calloc((size_t)o->n_blocks, sizeof(*p->blocks));
	p->tokens = o->prefix_caching ? malloc(n_tok * sizeof(int32_t)) : NULL;
	p->buckets = malloc((size_t)nb * sizeof(int32_t));
	if (!p->blocks || !p->buckets || (o->prefix_caching && !p->tokens)) {
		kv_pool_destroy(p);
		return diag_set(d, ERR_NOMEM, "kv pool: out of memory for %d blocks", o->n_blocks);
	}
	p->bucket_mask = nb - 1;
	for (uint32_t i = 0; i < nb; i++)
		p->buckets[i] = -1;
	/* Free stack in ascending id order: block 0 is handed out first. */
	p->free_head = -1;
	for (int32_t i = o->n_blocks - 1; i >= 0; i--) {
		struct kv_block *b = &p->blocks[i];
		b->prev = -1;
		b->next = p->free_head;
		b->hnext = -1;
		b->list = LIST_FREE;
		p->free_head = i;
	}
	p->n_free_uncached = o->n_blocks;
	p->lru_head = p->lru_tail = -1;
	p->st.n_blocks = o->n_blocks;
	*out = p;
	return 0;
}

void kv_pool_destroy(struct kv_pool *p)
{
	if (!p)
		return;
	free(p->blocks);
	free(p->tokens);
	free(p->buckets);
	free(p);
}

int kv_block_size(const struct kv_pool *p)
{
	return p->block_size;
}

bool kv_prefix_caching(const struct kv_pool *p)
{
	return p->prefix_caching;
}

int kv_table_init(struct kv_table *t, int cap_blocks)
{
	memset(t, 0, sizeof(*t));
	if (cap_blocks < 1)
		return ERR_RANGE;
	t->ids = malloc((size_t)cap_blocks * sizeof(int32_t));
	t->hashes = malloc((size_t)cap_blocks * sizeof(uint64_t));
	if (!t->ids || !t->hashes) {
		kv_table_deinit(t);
		return ERR_NOMEM;
	}
	t->cap = cap_blocks;
	return 0;
}

void kv_table_deinit(struct kv_table *t)
{
	assert(t->n_ids == 0 && "kv_release the table before deinit");
	free(t->ids);
	free(t->hashes);
	memset(t, 0, sizeof(*t));
}

void kv_table_hash(const struct kv_pool *p, struct kv_table *t, const int32_t *tokens, int n_tokens)
{
	int full = n_tokens / p->block_size;
	if (full > t->cap)
		full = t->cap;
	for (int i = t->n_hashes; i < full; i++) {
		uint64_t parent = i == 0 ? KV_ROOT_HASH : t->hashes[i - 1];
		t->hashes[i] =
		    kv_hash_block(parent, tokens + (size_t)i * p->block_size, p->block_size);
	}
	if (full > t->n_hashes)
		t->n_hashes = full;
}

/* ---- hash map -------------------------------------------------------------- */

static int32_t map_find(const struct kv_pool *p, uint64_t hash, uint64_t parent,
                        const int32_t *tokens)
{
	for (int32_t id = p->buckets[hash & p->bucket_mask]; id >= 0; id = p->blocks[id].hnext) {
		const struct kv_block *b = &p->blocks[id];
		if (b->hash == hash && b->parent == parent &&
		    memcmp(p->tokens + (size_t)id * p->block_size, tokens,
		           (size_t)p->block_size * sizeof(int32_t)) == 0)
			return id;
	}
	return -1;
}

static void map_insert(struct kv_pool *p, int32_t id, uint64_t hash, uint64_t parent,
                       const int32_t *tokens)
{
	struct kv_block *b = &p->blocks[id];
	b->hash = hash;
	b->parent = parent;
	b->registered = true;
	memcpy(p->tokens + (size_t)id * p->block_size, tokens,
	       (size_t)p->block_size * sizeof(int32_t));
	uint32_t k = (uint32_t)(hash & p->bucket_mask);
	b->hnext = p->buckets[k];
	p->buckets[k] = id;
}

static void map_remove(struct kv_pool *p, int32_t id)
{
	struct kv_block *b = &p->blocks[id];
	int32_t *link = &p->buckets[b->hash & p->bucket_mask];
	while (*link != id) {
		assert(*link >= 0);
		link = &p->blocks[*link].hnext;
	}
	*link = b->hnext;
	b->hnext = -1;
	b->registered = false;
}

/* ---- free stack and LRU ------------------------------------------------------ */

static void lru_unlink(struct kv_pool *p, int32_t id)
{
	struct kv_block *b = &p->blocks[id];
	assert(b->list == LIST_LRU);
	if (b->prev >= 0)
		p->blocks[b->prev].next = b->next;
	else
		p->lru_head = b->next;
	if (b->next >= 0)
		p->blocks[b->next].prev = b->prev;
	else
		p->lru_tail = b->prev;
	b->prev = b->next = -1;
	b->list = LIST_NONE;
	p->n_lru--;
}

static void lru_push_tail(struct kv_pool *p, int32_t id)
{
	struct kv_block *b = &p->blocks[id];
	b->list = LIST_LRU;
	b->next = -1;
	b->prev = p->lru_tail;
	if (p->lru_tail >= 0)
		p->blocks[p->lru_tail].next = id;
	else
		p->lru_head = id;
	p->lru_tail = id;
	p->n_lru++;
}

static void free_push(struct kv_pool *p, int32_t id)
{
	struct kv_block *b = &p->blocks[id];
	b->list = LIST_FREE;
	b->prev = -1;
	b->next = p->free_head;
	p->free_head = id;
	p->n_free_uncached++;
}

static int n_free(const struct kv_pool *p)
{
	return p->n_free_uncached + p->n_lru;
}

/* Take a free block, preferring one that caches nothing; the caller checked
 * that one exists. */
static int32_t take_block(struct kv_pool *p)
{
	int32_t id = p->free_head;
	if (id >= 0) {
		p->free_head = p->blocks[id].next;
		p->n_free_uncached--;
		p->blocks[id].next = -1;
		p->blocks[id].list = LIST_NONE;
	} else {
		id = p->lru_head;
		assert(id >= 0);
		lru_unlink(p, id);
		map_remove(p, id);
		p->st.evictions++;
	}
	p->blocks[id].ref = 1;
	return id;
}

static void drop_ref(struct kv_pool *p, int32_t id)
{
	struct kv_block *b = &p->blocks[id];
	assert(b->ref > 0 && "double free of a KV block");
	if (--b->ref > 0)
		return;
	if (b->registered)
		lru_push_tail(p, id);
	else
		free_push(p, id);
}

/* ---- sequences --------------------------------------------------------------- */

int kv_match_prefix(const struct kv_pool *p, const struct kv_table *t, const int32_t *tokens,
                    int n_tokens, int *n_held)
{
	*n_held = 0;
	if (!p->prefix_caching || n_tokens < 1)
		return 0;
	int max = (n_tokens - 1) / p->block_size;
	if (max > t->n_hashes)
		max = t->n_hashes;
	int n = 0;
	for (; n < max; n++) {
		uint64_t parent = n == 0 ? KV_ROOT_HASH : t->hashes[n - 1];
		int32_t id = map_find(p, t->hashes[n], parent, tokens + (size_t)n * p->block_size);
		if (id < 0)
			break;
		if (p->blocks[id].ref > 0)
			(*n_held)++;
	}
	return n;
}

int kv_acquire_prefix(struct kv_pool *p, struct kv_table *t, const int32_t *tokens, int n_tokens)
{
	assert(t->n_ids == 0);
	int held;
	int n = kv_match_prefix(p, t, tokens, n_tokens, &held);
	for (int i = 0; i < n; i++) {
		uint64_t parent = i == 0 ? KV_ROOT_HASH : t->hashes[i - 1];
		int32_t id = map_find(p, t->hashes[i], parent, tokens + (size_t)i * p->block_size);
		assert(id >= 0);
		if (p->blocks[id].ref == 0)
			lru_unlink(p, id);
		p->blocks[id].ref++;
		t->ids[i] = id;
	}
	t->n_ids = n;
	t->n_registered = n;
	if (p->prefix_caching) {
		p->st.queries += (uint64_t)n_tokens;
		p->st.hits += (uint64_t)n * (uint64_t)p->block_size;
	}
	return n * p->block_size;
}

int kv_blocks_needed(const struct kv_pool *p, const struct kv_table *t, int n_have, int n_new)
{
	if (n_new <= 0)
		return 0;
	int bs = p->block_size;
	int total = (int)(((int64_t)n_have + n_new + bs - 1) / bs);
	int need = total > t->n_ids ? total - t->n_ids : 0;
	int first = n_have / bs;
	if (first < t->n_ids && p->blocks[t->ids[first]].ref > 1)
		need++; /* copy-on-write of the shared block the next token lands in */
	return need;
}

bool kv_can_append(const struct kv_pool *p, const struct kv_table *t, int n_have, int n_new)
{
	return kv_blocks_needed(p, t, n_have, n_new) <= n_free(p);
}

int kv_append(struct kv_pool *p, struct kv_table *t, int n_have, int n_new, struct kv_copy *cow,
              int *n_cow)
{
	*n_cow = 0;
	if (n_new <= 0)
		return 0;
	int bs = p->block_size;
	int total = (int)(((int64_t)n_have + n_new + bs - 1) / bs);
	if (total > t->cap)
		return ERR_RANGE;
	if (kv_blocks_needed(p, t, n_have, n_new) > n_free(p))
		return ERR_FULL;
	int first = n_have / bs;
	if (first < t->n_ids && p->blocks[t->ids[first]].ref > 1) {
		int32_t src = t->ids[first];
		int32_t dst = take_block(p);
		p->blocks[src].ref--; /* still >= 1: others hold it */
		t->ids[first] = dst;
		cow->src = src;
		cow->dst = dst;
		*n_cow = 1;
		p->st.cow_copies++;
		/* A registered block is full and never written, so the block we
		 * copy is partial and unregistered: n_registered is unaffected. */
		assert(first >= t->n_registered);
	}
	while (t->n_ids < total)
		t->ids[t->n_ids++] = take_block(p);
	return 0;
}

void kv_commit(struct kv_pool *p, struct kv_table *t, const int32_t *tokens, int n_computed)
{
	int full = n_computed / p->block_size;
	if (full > t->n_ids)
		full = t->n_ids;
	assert(full <= t->n_hashes);
	if (!p->prefix_caching) {
		if (full > t->n_registered)
			t->n_registered = full;
		return;
	}
	for (int i = t->n_registered; i < full; i++) {
		int32_t id = t->ids[i];
		if (p->blocks[id].registered)
			continue; /* shared with a fork that registered it */
		uint64_t parent = i == 0 ? KV_ROOT_HASH : t->hashes[i - 1];
		const int32_t *tok = tokens + (size_t)i * p->block_size;
		if (map_find(p, t->hashes[i], parent, tok) >= 0)
			continue; /* computed twice (two sequences at once): keep the first */
		map_insert(p, id, t->hashes[i], parent, tok);
	}
	if (full > t->n_registered)
		t->n_registered = full;
}

int kv_fork(struct kv_pool *p, const struct kv_table *src, struct kv_table *dst)
{
	assert(dst->n_ids == 0);
	if (src->n_ids > dst->cap || src->n_hashes > dst->cap)
		return ERR_RANGE;
	for (int i = 0; i < src->n_ids; i++) {
		dst->ids[i] = src->ids[i];
		p->blocks[src->ids[i]].ref++;
	}
	memcpy(dst->hashes, src->hashes, (size_t)src->n_hashes * sizeof(uint64_t));
	dst->n_ids = src->n_ids;
	dst->n_hashes = src->n_hashes;
	dst->n_registered = src->n_registered;
	return 0;
}

void kv_release(struct kv_pool *p, struct kv_table *t)
{
	for (int i = t->n_ids - 1; i >= 0; i--)
		drop_ref(p, t->ids[i]);
	t->n_ids = 0;
	t->n_registered = 0;
}

void kv_get_stats(const struct kv_pool *p, struct kv_stats *s)
{
	*s = p->st;
	s->n_free = n_free(p);
	s->n_cached_free = p->n_lru;
}

double kv_usage(const struct kv_pool *p)
{
	return (double)(p->n_blocks - n_free(p)) / (double)p->n_blocks;
}

int kv_ref(const struct kv_pool *p, int32_t block)
{
	assert(block >= 0 && block < p->n_blocks);
	return p->blocks[block].ref;
}

bool kv_is_cached(const struct kv_pool *p, int32_t block)
{
	assert(block >= 0 && block < p->n_blocks);
	return p->blocks[block].registered;
}

int kv_pool_check(const struct kv_pool *p, struct diag *d)
{
	int n_free_seen = 0, n_lru_seen = 0;
	for (int32_t id = p->free_head; id >= 0; id = p->blocks[id].next) {
		const struct kv_block *b = &p->blocks[id];
		if (b->list != LIST_FREE || b->ref != 0 || b->registered)
			return diag_set(d, ERR_INTERNAL,
			                "kv: block %d on the free stack: list %d ref %d reg %d", id,
			                b->list, b->ref, b->registered);
		if (++n_free_seen > p->n_blocks)
			return diag_set(d, ERR_INTERNAL, "kv: free stack has a cycle");
	}
	int32_t prev = -1;
	for (int32_t id = p->lru_head; id >= 0; id = p->blocks[id].next) {
		const struct kv_block *b = &p->blocks[id];
		if (b->list != LIST_LRU || b->ref != 0 || !b->registered || b->prev != prev)
			return diag_set(d, ERR_INTERNAL,
			                "kv: block %d on the LRU: list %d ref %d reg %d", id,
			                b->list, b->ref, b->registered);
		if (++n_lru_seen > p->n_blocks)
			return diag_set(d, ERR_INTERNAL, "kv: LRU has a cycle");
		prev = id;
	}
	if (prev != p->lru_tail)
		return diag_set(d, ERR_INTERNAL, "kv: LRU tail %d, walked to %d", p->lru_tail,
		                prev);
	if (n_free_seen != p->n_free_uncached || n_lru_seen != p->n_lru)
		return diag_set(d, ERR_INTERNAL, "kv: free counts %d/%d, lists hold %d/%d",
		                p->n_free_uncached, p->n_lru, n_free_seen, n_lru_seen);
	int n_zero = 0, n_reg = 0;
	for (int id = 0; id < p->n_blocks; id++) {
		const struct kv_block *b = &p->blocks[id];
		if (b->ref < 0)
			return diag_set(d, ERR_INTERNAL, "kv: block %d has ref %d", id, b->ref);
		if (b->ref == 0)
			n_zero++;
		else if (b->list != LIST_NONE)
			return diag_set(d, ERR_INTERNAL, "kv: held block %d is on a free list", id);
		if (b->registered) {
			n_reg++;
			if (map_find(p, b->hash, b->parent,
			             p->tokens + (size_t)id * p->block_size) < 0)
				return diag_set(d, ERR_INTERNAL,
				                "kv: registered block %d not in the map", id);
		}
	}
	if (n_zero != n_free(p))
		return diag_set(d, ERR_INTERNAL, "kv: %d blocks with ref 0, %d free", n_zero,
		                n_free(p));
	int n_chain = 0;
	for (uint32_t k = 0; k <= p->bucket_mask; k++)
		for (int32_t id = p->buckets[k]; id >= 0; id = p->blocks[id].hnext) {
			if (!p->blocks[id].registered || (p->blocks[id].hash & p->bucket_mask) != k)
				return diag_set(d, ERR_INTERNAL, "kv: block %d in the wrong bucket",
				                id);
			if (++n_chain > p->n_blocks)
				return diag_set(d, ERR_INTERNAL, "kv: hash chain cycle");
		}
	if (n_chain != n_reg)
		return diag_set(d, ERR_INTERNAL, "kv: %d registered, %d in the map", n_reg,
		                n_chain);
	return 0;
}
