/* batching/kv_blocks.h — the KV block manager: a fixed pool of KV blocks,
 * refcounts, and the prefix cache.
 *
 * Owns: which KV block ids are free, cached or held, and how many holders
 * each block has. The KV memory itself lives in the engine; this module only
 * hands out block ids (slot = block_id * block_size + offset).
 *
 * A sequence holds its blocks through a `struct kv_table` (caller-allocated,
 * kv_table_init/deinit). A full block is identified by
 * hash(parent block's hash, its block_size token ids); with prefix caching on,
 * a computed full block is registered under that hash, and a new sequence
 * takes the cached blocks of its longest cached prefix (refcount++). The pool
 * keeps each registered block's parent hash and tokens, so a hash collision is
 * caught on lookup and treated as a miss. A block whose last holder lets go
 * stays cached on an LRU list; blocks are taken first from the never-cached
 * free list, then by evicting the least recently freed cached block. A partial
 * last block shared by forks (n > 1) is copied on write (kv_append returns the
 * (src, dst) pairs the engine must copy before the step).
 *
 * Threads: a pool and its tables belong to one thread (the engine thread).
 * kv_can_append / kv_append are a pair: check, then allocate.
 */
#ifndef AORTA_BATCHING_KV_BLOCKS_H
#define AORTA_BATCHING_KV_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"

struct kv_pool;

struct kv_opts {
	int n_blocks;        /* blocks in the pool (>= 1) */
	int block_size;      /* token slots per block (>= 1) */
	bool prefix_caching; /* register full blocks and reuse them */
};

/* A sequence's blocks. ids[i] holds tokens [i*block_size, (i+1)*block_size).
 * hashes[i] is the prefix hash of full block i, known for i < n_hashes. */
struct kv_table {
	int32_t *ids;
	int n_ids;
	uint64_t *hashes;
	int n_hashes;
	int n_registered; /* leading full blocks that are registered or were cache hits */
	int cap;          /* capacity of ids and hashes, in blocks */
};

/* A block copy the engine must do before the step (copy-on-write). */
struct kv_copy {
	int32_t src, dst;
};

struct kv_stats {
	int n_blocks;
	int n_free;          /* free blocks, cached or not (allocatable) */
	int n_cached_free;   /* of those, still registered in the prefix cache */
	uint64_t queries;    /* prompt tokens looked up in the prefix cache */
	uint64_t hits;       /* of those, tokens found */
	uint64_t evictions;  /* cached blocks evicted to make room */
	uint64_t cow_copies; /* blocks copied on write */
};

int kv_pool_create(const struct kv_opts *o, struct kv_pool **out, struct diag *d);
void kv_pool_destroy(struct kv_pool *p);
int kv_block_size(const struct kv_pool *p);
bool kv_prefix_caching(const struct kv_pool *p);

/* cap_blocks: the most blocks the table may hold (max_model_len / block_size, rounded up). */
int kv_table_init(struct kv_table *t, int cap_blocks);
void kv_table_deinit(struct kv_table *t);

/* Hash every full block of tokens[0, n_tokens) not hashed yet. Call whenever
 * tokens are appended (cheap: only new full blocks are hashed). The token
 * prefix must be the same one earlier calls saw. */
void kv_table_hash(const struct kv_pool *p, struct kv_table *t, const int32_t *tokens,
                   int n_tokens);

/* Blocks of tokens[0, n_tokens) that the cache could supply to an empty table:
 * full blocks before the one holding the last token, so at least one token is
 * always computed and no cached block is written. t must be hashed. Returns
 * the number of leading blocks found; *n_held: how many of them are held by
 * someone (cost no free block). Read-only. */
int kv_match_prefix(const struct kv_pool *p, const struct kv_table *t, const int32_t *tokens,
                    int n_tokens, int *n_held);

/* Take the cached prefix into an empty table (refcount++, off the LRU) and
 * count the lookup in the stats. Returns the number of cached tokens
 * (a multiple of block_size, possibly 0). The caller must have checked with
 * kv_can_append that the blocks it then needs are there. */
int kv_acquire_prefix(struct kv_pool *p, struct kv_table *t, const int32_t *tokens, int n_tokens);

/* Free blocks needed so that t covers n_have + n_new tokens, when tokens
 * [n_have, ...) are about to be written (includes a copy-on-write block). */
int kv_blocks_needed(const struct kv_pool *p, const struct kv_table *t, int n_have, int n_new);
bool kv_can_append(const struct kv_pool *p, const struct kv_table *t, int n_have, int n_new);
/* Grow t to cover n_have + n_new tokens. If the block that token n_have goes
 * into is shared, it is replaced by a private copy and {src, dst} is written
 * to *cow with *n_cow = 1 (else 0). ERR_FULL (t unchanged) when the pool is
 * short, ERR_RANGE past the table's capacity. */
int kv_append(struct kv_pool *p, struct kv_table *t, int n_have, int n_new, struct kv_copy *cow,
              int *n_cow);

/* Register the full blocks among tokens[0, n_computed) (their KV is now
 * written) in the prefix cache. t must be hashed that far. A block whose
 * content is already registered under another id stays unregistered. */
void kv_commit(struct kv_pool *p, struct kv_table *t, const int32_t *tokens, int n_computed);

/* dst (empty) shares every block of src: refcount++ on each. */
int kv_fork(struct kv_pool *p, const struct kv_table *src, struct kv_table *dst);

/* Let go of every block (last block first, so a sequence's tail is evicted
 * before its head). The table is emptied; its hashes are kept (they depend
 * only on the tokens), so a preempted sequence can look its prefix up again. */
void kv_release(struct kv_pool *p, struct kv_table *t);

void kv_get_stats(const struct kv_pool *p, struct kv_stats *s);
/* Blocks held by at least one table / all blocks. */
double kv_usage(const struct kv_pool *p);
int kv_ref(const struct kv_pool *p, int32_t block);
bool kv_is_cached(const struct kv_pool *p, int32_t block);

/* Check the pool's own invariants (free lists vs refcounts, hash map vs
 * blocks). For tests; O(n_blocks). */
int kv_pool_check(const struct kv_pool *p, struct diag *d);

/* The prefix hash of one full block (exposed for tests). */
uint64_t kv_hash_block(uint64_t parent, const int32_t *tokens, int block_size);

#endif
