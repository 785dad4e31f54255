/* tests/batching/test_kv_blocks.c — batching/kv_blocks: refcounts, prefix
 * hashing and hits, hash-collision safety, LRU eviction order,
 * copy-on-write, exhaustion. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "batching/kv_blocks.h"

#define BS 4

static struct kv_pool *mk_pool(int n_blocks, bool cache)
{
	struct kv_opts o = {.n_blocks = n_blocks, .block_size = BS, .prefix_caching = cache};
	struct kv_pool *p = NULL;
	ck_assert_int_eq(kv_pool_create(&o, &p, NULL), 0);
	return p;
}

static void check_pool(const struct kv_pool *p)
{
	struct diag d = {0};
	int rc = kv_pool_check(p, &d);
	ck_assert_msg(rc == 0, "%s", d.msg);
}

static int n_free(const struct kv_pool *p)
{
	struct kv_stats s;
	kv_get_stats(p, &s);
	return s.n_free;
}

/* Give t blocks for tokens[0, n) and mark them computed. */
static void fill(struct kv_pool *p, struct kv_table *t, const int32_t *tok, int n)
{
	kv_table_hash(p, t, tok, n);
	int have = kv_acquire_prefix(p, t, tok, n);
	struct kv_copy c;
	int nc;
	ck_assert_int_eq(kv_append(p, t, have, n - have, &c, &nc), 0);
	ck_assert_int_eq(nc, 0);
	kv_commit(p, t, tok, n);
}

START_TEST(test_create_limits)
{
	struct kv_pool *p = NULL;
	struct kv_opts o = {.n_blocks = 0, .block_size = 16, .prefix_caching = true};
	struct diag d;
	ck_assert_int_eq(kv_pool_create(&o, &p, &d), ERR_RANGE);
	o.n_blocks = 1 << 30;
	o.block_size = 4096;
	ck_assert_int_eq(kv_pool_create(&o, &p, &d), ERR_OVERFLOW);
	ck_assert_ptr_null(p);
}
END_TEST

START_TEST(test_alloc_release_refcounts)
{
	struct kv_pool *p = mk_pool(8, false);
	struct kv_table t;
	ck_assert_int_eq(kv_table_init(&t, 8), 0);
	ck_assert_int_eq(kv_blocks_needed(p, &t, 0, 9), 3);
	struct kv_copy c;
	int nc;
	ck_assert_int_eq(kv_append(p, &t, 0, 9, &c, &nc), 0);
	ck_assert_int_eq(t.n_ids, 3);
	ck_assert_int_eq(n_free(p), 5);
	/* Decode into the partial third block needs nothing; the 13th token does. */
	ck_assert_int_eq(kv_blocks_needed(p, &t, 9, 3), 0);
	ck_assert_int_eq(kv_blocks_needed(p, &t, 12, 1), 1);
	for (int i = 0; i < t.n_ids; i++)
		ck_assert_int_eq(kv_ref(p, t.ids[i]), 1);
	check_pool(p);
	struct kv_table f;
	ck_assert_int_eq(kv_table_init(&f, 8), 0);
	ck_assert_int_eq(kv_fork(p, &t, &f), 0);
	for (int i = 0; i < t.n_ids; i++)
		ck_assert_int_eq(kv_ref(p, t.ids[i]), 2);
	ck_assert_int_eq(n_free(p), 5);
	kv_release(p, &t);
	ck_assert_int_eq(n_free(p), 5); /* f still holds them */
	for (int i = 0; i < f.n_ids; i++)
		ck_assert_int_eq(kv_ref(p, f.ids[i]), 1);
	kv_release(p, &f);
	ck_assert_int_eq(n_free(p), 8);
	ck_assert_double_eq(kv_usage(p), 0.0);
	check_pool(p);
	kv_table_deinit(&t);
	kv_table_deinit(&f);
	kv_pool_destroy(p);
}
END_TEST

START_TEST(test_exhaustion)
{
	struct kv_pool *p = mk_pool(4, true);
	struct kv_table a, b;
	kv_table_init(&a, 8);
	kv_table_init(&b, 8);
	struct kv_copy c;
	int nc;
	ck_assert_int_eq(kv_append(p, &a, 0, 12, &c, &nc), 0);
	ck_assert(kv_can_append(p, &b, 0, 4));
	ck_assert(!kv_can_append(p, &b, 0, 5));
	ck_assert_int_eq(kv_append(p, &b, 0, 5, &c, &nc), ERR_FULL);
	ck_assert_int_eq(b.n_ids, 0); /* unchanged on failure */
	ck_assert_int_eq(kv_append(p, &b, 0, 4, &c, &nc), 0);
	ck_assert_int_eq(n_free(p), 0);
	ck_assert_double_eq(kv_usage(p), 1.0);
	ck_assert(!kv_can_append(p, &a, 12, 1));
	/* Past the table's capacity. */
	ck_assert_int_eq(kv_append(p, &b, 4, 100, &c, &nc), ERR_RANGE);
	check_pool(p);
	kv_release(p, &a);
	kv_release(p, &b);
	ck_assert_int_eq(n_free(p), 4);
	kv_table_deinit(&a);
	kv_table_deinit(&b);
	kv_pool_destroy(p);
}
END_TEST

START_TEST(test_hash_chain)
{
	int32_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	int32_t y[8] = {1, 2, 3, 5, 5, 6, 7, 8};
	struct kv_pool *p = mk_pool(8, true);
	struct kv_table tx, ty;
	kv_table_init(&tx, 4);
	kv_table_init(&ty, 4);
	kv_table_hash(p, &tx, x, 8);
	kv_table_hash(p, &ty, y, 8);
	ck_assert_int_eq(tx.n_hashes, 2);
	/* Same second block, different first: the chained hash differs. */
	ck_assert_uint_ne(tx.hashes[0], ty.hashes[0]);
	ck_assert_uint_ne(tx.hashes[1], ty.hashes[1]);
	ck_assert_uint_eq(tx.hashes[1], kv_hash_block(tx.hashes[0], x + 4, BS));
	/* Partial blocks are not hashed; hashing is incremental. */
	kv_table_hash(p, &tx, x, 7);
	ck_assert_int_eq(tx.n_hashes, 2);
	struct kv_table tz;
	kv_table_init(&tz, 4);
	kv_table_hash(p, &tz, x, 5);
	ck_assert_int_eq(tz.n_hashes, 1);
	kv_table_hash(p, &tz, x, 8);
	ck_assert_uint_eq(tz.hashes[1], tx.hashes[1]);
	kv_table_deinit(&tx);
	kv_table_deinit(&ty);
	kv_table_deinit(&tz);
	kv_pool_destroy(p);
}
END_TEST

START_TEST(test_prefix_hit)
{
	int32_t a[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
	int32_t b[11] = {1, 2, 3, 4, 5, 6, 7, 8, 20, 21, 22};
	struct kv_pool *p = mk_pool(16, true);
	struct kv_table ta, tb;
	kv_table_init(&ta, 4);
	kv_table_init(&tb, 4);
	fill(p, &ta, a, 10);
	ck_assert_int_eq(ta.n_registered, 2);
	ck_assert(kv_is_cached(p, ta.ids[0]) && kv_is_cached(p, ta.ids[1]));
	ck_assert(!kv_is_cached(p, ta.ids[2])); /* partial */
	kv_table_hash(p, &tb, b, 11);
	int held;
	ck_assert_int_eq(kv_match_prefix(p, &tb, b, 11, &held), 2);
	ck_assert_int_eq(held, 2);
	ck_assert_int_eq(kv_acquire_prefix(p, &tb, b, 11), 8);
	ck_assert_int_eq(tb.ids[0], ta.ids[0]);
	ck_assert_int_eq(tb.ids[1], ta.ids[1]);
	ck_assert_int_eq(kv_ref(p, ta.ids[0]), 2);
	struct kv_stats s;
	kv_get_stats(p, &s);
	ck_assert_uint_eq(s.queries, 10 + 11);
	ck_assert_uint_eq(s.hits, 8);
	kv_release(p, &tb);
	/* Freed but still cached: a later identical prompt hits, taking them
	 * off the LRU (held = 0: they cost free blocks). */
	kv_release(p, &ta);
	ck_assert_int_eq(n_free(p), 16);
	kv_get_stats(p, &s);
	ck_assert_int_eq(s.n_cached_free, 2);
	ck_assert_int_eq(kv_match_prefix(p, &ta, a, 10, &held), 2);
	ck_assert_int_eq(held, 0);
	ck_assert_int_eq(kv_acquire_prefix(p, &ta, a, 10), 8);
	ck_assert_int_eq(n_free(p), 14);
	check_pool(p);
	kv_release(p, &ta);
	/* The block holding the last token is never taken from the cache: an
	 * 8-token prompt reuses only its first block. */
	ck_assert_int_eq(kv_match_prefix(p, &ta, a, 8, &held), 1);
	kv_table_deinit(&ta);
	kv_table_deinit(&tb);
	kv_pool_destroy(p);
}
END_TEST

START_TEST(test_no_caching)
{
	int32_t a[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
	struct kv_pool *p = mk_pool(8, false);
	struct kv_table t;
	kv_table_init(&t, 4);
	fill(p, &t, a, 9);
	ck_assert(!kv_is_cached(p, t.ids[0]));
	kv_release(p, &t);
	int held;
	ck_assert_int_eq(kv_match_prefix(p, &t, a, 9, &held), 0);
	check_pool(p);
	kv_table_deinit(&t);
	kv_pool_destroy(p);
}
END_TEST

START_TEST(test_duplicate_registration)
{
	/* Two sequences compute the same prefix at once: the first one to commit
	 * registers it; the second's copy stays uncached and is freed plainly. */
	int32_t a[5] = {1, 2, 3, 4, 5};
	struct kv_pool *p = mk_pool(8, true);
	struct kv_table t1, t2;
	kv_table_init(&t1, 4);
	kv_table_init(&t2, 4);
	struct kv_copy c;
	int nc;
	kv_table_hash(p, &t1, a, 5);
	kv_table_hash(p, &t2, a, 5);
	ck_assert_int_eq(kv_acquire_prefix(p, &t1, a, 5), 0);
	ck_assert_int_eq(kv_acquire_prefix(p, &t2, a, 5), 0);
	kv_append(p, &t1, 0, 5, &c, &nc);
	kv_append(p, &t2, 0, 5, &c, &nc);
	kv_commit(p, &t1, a, 5);
	kv_commit(p, &t2, a, 5);
	ck_assert(kv_is_cached(p, t1.ids[0]));
	ck_assert(!kv_is_cached(p, t2.ids[0]));
	check_pool(p);
	kv_release(p, &t2);
	kv_release(p, &t1);
	struct kv_stats s;
	kv_get_stats(p, &s);
	ck_assert_int_eq(s.n_cached_free, 1);
	check_pool(p);
	kv_table_deinit(&t1);
	kv_table_deinit(&t2);
	kv_pool_destroy(p);
}
END_TEST

START_TEST(test_eviction_order)
{
	/* 6 blocks. A (2 full blocks + partial) then B (same) are freed, A
	 * first: A's cached blocks are evicted before B's, and within A its
	 * tail block before its head. Never-cached blocks go first of all. */
	int32_t a[9] = {1, 1, 1, 1, 2, 2, 2, 2, 3};
	int32_t b[9] = {5, 5, 5, 5, 6, 6, 6, 6, 7};
	struct kv_pool *p = mk_pool(6, true);
	struct kv_table ta, tb, tc;
	kv_table_init(&ta, 4);
	kv_table_init(&tb, 4);
	kv_table_init(&tc, 8);
	fill(p, &ta, a, 9);
	fill(p, &tb, b, 9);
	int32_t a0 = ta.ids[0], a1 = ta.ids[1], b0 = tb.ids[0], b1 = tb.ids[1];
	int32_t a2 = ta.ids[2], b2 = tb.ids[2];
	kv_release(p, &ta);
	kv_release(p, &tb);
	struct kv_stats s;
	kv_get_stats(p, &s);
	ck_assert_int_eq(s.n_cached_free, 4);
	struct kv_copy c;
	int nc;
	/* Two blocks: the uncached partial blocks a2/b2 come first. */
	ck_assert_int_eq(kv_append(p, &tc, 0, 8, &c, &nc), 0);
	ck_assert((tc.ids[0] == a2 || tc.ids[0] == b2) && (tc.ids[1] == a2 || tc.ids[1] == b2));
	kv_get_stats(p, &s);
	ck_assert_uint_eq(s.evictions, 0);
	/* Next: evict a1 (A's tail), then a0, then b1. */
	ck_assert_int_eq(kv_append(p, &tc, 8, 4, &c, &nc), 0);
	ck_assert_int_eq(tc.ids[2], a1);
	ck_assert(!kv_is_cached(p, a1));
	ck_assert(kv_is_cached(p, a0));
	ck_assert_int_eq(kv_append(p, &tc, 12, 4, &c, &nc), 0);
	ck_assert_int_eq(tc.ids[3], a0);
	/* A hit on B's head refreshes nothing here, but B's prefix still hits. */
	int held;
	kv_table_hash(p, &tb, b, 9);
	ck_assert_int_eq(kv_match_prefix(p, &tb, b, 9, &held), 2);
	ck_assert_int_eq(kv_append(p, &tc, 16, 4, &c, &nc), 0);
	ck_assert_int_eq(tc.ids[4], b1);
	ck_assert_int_eq(kv_match_prefix(p, &tb, b, 9, &held), 1);
	ck_assert(kv_is_cached(p, b0));
	kv_get_stats(p, &s);
	ck_assert_uint_eq(s.evictions, 3);
	/* A's prefix is gone. */
	kv_table_hash(p, &ta, a, 9);
	ck_assert_int_eq(kv_match_prefix(p, &ta, a, 9, &held), 0);
	check_pool(p);
	kv_release(p, &tc);
	kv_table_deinit(&ta);
	kv_table_deinit(&tb);
	kv_table_deinit(&tc);
	kv_pool_destroy(p);
}
END_TEST

START_TEST(test_lru_touch)
{
	/* A block taken from the cache and freed again moves to the young end. */
	int32_t a[5] = {1, 1, 1, 1, 9};
	int32_t b[5] = {2, 2, 2, 2, 9};
	struct kv_pool *p = mk_pool(4, true);
	struct kv_table ta, tb, tc;
	kv_table_init(&ta, 4);
	kv_table_init(&tb, 4);
	kv_table_init(&tc, 4);
	fill(p, &ta, a, 5);
	fill(p, &tb, b, 5);
	int32_t a0 = ta.ids[0], b0 = tb.ids[0];
	kv_release(p, &ta);
	kv_release(p, &tb); /* LRU: a0, b0 */
	fill(p, &ta, a, 5); /* hit a0 */
	ck_assert_int_eq(ta.ids[0], a0);
	kv_release(p, &ta); /* LRU: b0, a0 */
	struct kv_copy c;
	int nc;
	ck_assert_int_eq(kv_append(p, &tc, 0, 16, &c, &nc), 0);
	/* 2 uncached, then b0, then a0 */
	ck_assert_int_eq(tc.ids[2], b0);
	ck_assert_int_eq(tc.ids[3], a0);
	check_pool(p);
	kv_release(p, &tc);
	kv_table_deinit(&ta);
	kv_table_deinit(&tb);
	kv_table_deinit(&tc);
	kv_pool_destroy(p);
}
END_TEST

START_TEST(test_collision_is_a_miss)
{
	/* Forge a registered block whose hash equals another prefix's hash: the
	 * stored tokens differ, so lookup must miss rather than share wrong KV.
	 * We cannot find a real 64-bit collision, so we make the table claim
	 * the other prefix's hash for different tokens. */
	int32_t a[5] = {1, 2, 3, 4, 0};
	int32_t b[5] = {4, 3, 2, 1, 0};
	struct kv_pool *p = mk_pool(4, true);
	struct kv_table ta, tb;
	kv_table_init(&ta, 4);
	kv_table_init(&tb, 4);
	fill(p, &ta, a, 5);
	kv_table_hash(p, &tb, b, 5);
	tb.hashes[0] = ta.hashes[0]; /* collision */
	int held;
	ck_assert_int_eq(kv_match_prefix(p, &tb, b, 5, &held), 0);
	ck_assert_int_eq(kv_acquire_prefix(p, &tb, b, 5), 0);
	kv_release(p, &ta);
	kv_table_deinit(&ta);
	kv_table_deinit(&tb);
	kv_pool_destroy(p);
}
END_TEST

START_TEST(test_copy_on_write)
{
	int32_t a[6] = {1, 2, 3, 4, 5, 6};
	struct kv_pool *p = mk_pool(8, true);
	struct kv_table t, f;
	kv_table_init(&t, 4);
	kv_table_init(&f, 4);
	fill(p, &t, a, 6);
	ck_assert_int_eq(kv_fork(p, &t, &f), 0);
	int32_t shared = t.ids[1];
	ck_assert_int_eq(kv_ref(p, shared), 2);
	/* Writing token 6 into the shared partial block: one COW block. */
	ck_assert_int_eq(kv_blocks_needed(p, &f, 6, 1), 1);
	struct kv_copy c;
	int nc;
	ck_assert_int_eq(kv_append(p, &f, 6, 1, &c, &nc), 0);
	ck_assert_int_eq(nc, 1);
	ck_assert_int_eq(c.src, shared);
	ck_assert_int_eq(c.dst, f.ids[1]);
	ck_assert_int_ne(f.ids[1], shared);
	ck_assert_int_eq(kv_ref(p, shared), 1);
	ck_assert_int_eq(kv_ref(p, f.ids[1]), 1);
	ck_assert_int_eq(f.ids[0], t.ids[0]); /* the full block stays shared */
	ck_assert_int_eq(kv_ref(p, t.ids[0]), 2);
	/* The original now holds the block alone: no copy. */
	ck_assert_int_eq(kv_append(p, &t, 6, 1, &c, &nc), 0);
	ck_assert_int_eq(nc, 0);
	ck_assert_int_eq(t.ids[1], shared);
	/* COW when the pool is empty fails cleanly. */
	struct kv_table g;
	kv_table_init(&g, 4);
	kv_fork(p, &t, &g);
	struct kv_table hog;
	kv_table_init(&hog, 8);
	ck_assert_int_eq(kv_append(p, &hog, 0, 4 * 5, &c, &nc), 0);
	ck_assert_int_eq(n_free(p), 0);
	ck_assert(!kv_can_append(p, &g, 7, 1));
	ck_assert_int_eq(kv_append(p, &g, 7, 1, &c, &nc), ERR_FULL);
	ck_assert_int_eq(g.ids[1], shared);
	check_pool(p);
	struct kv_stats s;
	kv_get_stats(p, &s);
	ck_assert_uint_eq(s.cow_copies, 1);
	kv_release(p, &hog);
	kv_release(p, &g);
	kv_release(p, &f);
	kv_release(p, &t);
	ck_assert_int_eq(n_free(p), 8);
	check_pool(p);
	kv_table_deinit(&t);
	kv_table_deinit(&f);
	kv_table_deinit(&g);
	kv_table_deinit(&hog);
	kv_pool_destroy(p);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("kv_blocks");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_create_limits);
	tcase_add_test(tc, test_alloc_release_refcounts);
	tcase_add_test(tc, test_exhaustion);
	tcase_add_test(tc, test_hash_chain);
	tcase_add_test(tc, test_prefix_hit);
	tcase_add_test(tc, test_no_caching);
	tcase_add_test(tc, test_duplicate_registration);
	tcase_add_test(tc, test_eviction_order);
	tcase_add_test(tc, test_lru_touch);
	tcase_add_test(tc, test_collision_is_a_miss);
	tcase_add_test(tc, test_copy_on_write);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
