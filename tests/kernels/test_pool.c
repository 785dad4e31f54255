/* tests/kernels/test_pool.c — kernels/cpu/pool.c: every worker index runs
 * exactly once per run, back-to-back runs (spinning hand-off) and runs after
 * idle gaps (sleeping hand-off), the NULL pool, kpool_split, scratch. */
#include <check.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"
#include "kernels/cpu/pool.h"

enum { MAX_T = 16 };

struct counts {
	atomic_int hits[MAX_T];
	atomic_int bad_nth;
	int want_nth;
};

static void count_fn(void *p, int ith, int nth)
{
	struct counts *c = p;
	if (nth != c->want_nth || ith < 0 || ith >= MAX_T)
		atomic_fetch_add(&c->bad_nth, 1);
	else
		atomic_fetch_add(&c->hits[ith], 1);
}

static void check_runs(struct kpool *pool, int n, int runs, int sleep_us)
{
	struct counts c;
	memset(&c, 0, sizeof c);
	c.want_nth = n;
	for (int r = 0; r < runs; r++) {
		kpool_run(pool, count_fn, &c);
		/* all calls have returned when kpool_run does */
		for (int i = 0; i < n; i++)
			ck_assert_int_eq(atomic_load(&c.hits[i]), r + 1);
		if (sleep_us)
			usleep((useconds_t)sleep_us);
	}
	ck_assert_int_eq(atomic_load(&c.bad_nth), 0);
	for (int i = n; i < MAX_T; i++)
		ck_assert_int_eq(atomic_load(&c.hits[i]), 0);
}

START_TEST(test_run_counts)
{
	static const int sizes[] = { 1, 2, 3, 8 };
	for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
		struct kpool *pool = NULL;
		ck_assert_int_eq(kpool_create(sizes[s], &pool), 0);
		ck_assert_int_eq(kpool_size(pool), sizes[s]);
		check_runs(pool, sizes[s], 3000, 0); /* back to back: spinning path */
		check_runs(pool, sizes[s], 5, 20000); /* idle gaps: sleeping path */
		kpool_destroy(pool);
	}
}
END_TEST

START_TEST(test_null_and_defaults)
{
	struct counts c;
	memset(&c, 0, sizeof c);
	c.want_nth = 1;
	kpool_run(NULL, count_fn, &c);
	ck_assert_int_eq(atomic_load(&c.hits[0]), 1);
	ck_assert_int_eq(kpool_size(NULL), 1);
	struct kpool *pool = NULL;
	ck_assert_int_eq(kpool_create(-1, &pool), ERR_INVAL);
	ck_assert_int_eq(kpool_create(0, &pool), 0);
	ck_assert_int_eq(kpool_size(pool), (int)sysconf(_SC_NPROCESSORS_ONLN));
	kpool_destroy(pool);
	kpool_destroy(NULL);
	/* destroy right after create, with workers possibly not yet waiting */
	for (int i = 0; i < 50; i++) {
		ck_assert_int_eq(kpool_create(3, &pool), 0);
		kpool_destroy(pool);
	}
}
END_TEST

START_TEST(test_split)
{
	for (long total = 0; total < 50; total++)
		for (int nth = 1; nth < 9; nth++) {
			long next = 0;
			for (int i = 0; i < nth; i++) {
				long b, e;
				kpool_split(total, i, nth, &b, &e);
				ck_assert_int_eq(b, next);
				ck_assert_int_ge(e, b);
				ck_assert_int_le(e - b, total / nth + 1);
				next = e;
			}
			ck_assert_int_eq(next, total);
		}
}
END_TEST

struct scratch_ctx {
	struct kpool *pool;
	size_t bytes;
	atomic_int bad;
};

static void scratch_fn(void *p, int ith, int nth)
{
	(void)nth;
	struct scratch_ctx *c = p;
	unsigned char *s = kpool_scratch(c->pool, ith);
	if (!s || ((uintptr_t)s & 63))
		atomic_fetch_add(&c->bad, 1);
	else
		memset(s, ith, c->bytes); /* ASan catches a short buffer */
}

START_TEST(test_scratch)
{
	struct kpool *pool;
	ck_assert_int_eq(kpool_create(3, &pool), 0);
	ck_assert_int_eq(kpool_reserve(NULL, 1, 1), ERR_INVAL);
	struct scratch_ctx c = { pool, 1000, 0 };
	ck_assert_int_eq(kpool_reserve(pool, 1000, 10), 0);
	void *shared = kpool_shared(pool);
	ck_assert_ptr_nonnull(shared);
	kpool_run(pool, scratch_fn, &c);
	ck_assert_int_eq(kpool_reserve(pool, 10, 5), 0); /* smaller: no change */
	ck_assert_ptr_eq(kpool_shared(pool), shared);
	c.bytes = 100000;
	ck_assert_int_eq(kpool_reserve(pool, 100000, 100000), 0);
	kpool_run(pool, scratch_fn, &c);
	memset(kpool_shared(pool), 1, 100000);
	ck_assert_int_eq(atomic_load(&c.bad), 0);
	ck_assert_int_eq(kpool_reserve(pool, SIZE_MAX, 0), ERR_OVERFLOW);
	kpool_destroy(pool);
}
END_TEST

static Suite *pool_suite(void)
{
	Suite *s = suite_create("pool");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_run_counts);
	tcase_add_test(tc, test_null_and_defaults);
	tcase_add_test(tc, test_split);
	tcase_add_test(tc, test_scratch);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(pool_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
