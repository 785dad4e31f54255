/* tests/unit/test_common.c — common/: errors, checked arithmetic, buf, arena,
 * clock, log formatting. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/arena.h"
#include "common/buf.h"
#include "common/checked.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "common/utf8.h"

/* common/utf8 against Python's codec (bytes.decode("utf-8", "replace"),
 * values recorded from python3): Unicode §3.9's maximal-subpart example,
 * the edges of RFC 3629's table, and every code point round-tripped. */
START_TEST(test_utf8)
{
	static const char ex[] = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
	static const char ex_fixed[] = "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD"
				       "c\xEF\xBF\xBD\xEF\xBF\xBD" "d";
	struct buf b;
	buf_init(&b);
	ck_assert_int_eq(utf8_lossy(ex, sizeof ex - 1, &b), 0);
	ck_assert_uint_eq(b.len, sizeof ex_fixed - 1);
	ck_assert(memcmp(b.data, ex_fixed, b.len) == 0);
	buf_deinit(&b);
	static const struct {
		const char *s;
		bool ok;
	} edges[] = {
		{ "\xED\xA0\x80", false },     /* surrogate U+D800 */
		{ "\xF4\x90\x80\x80", false }, /* U+110000 */
		{ "\xC0\xAF", false },	       /* overlong '/' */
		{ "\xE0\x9F\xBF", false },     /* overlong U+07FF */
		{ "\xF0\x90\x80\x80", true },  /* U+10000 */
		{ "\xEF\xBF\xBF", true },      /* U+FFFF */
		{ "\xF4\x8F\xBF\xBF", true },  /* U+10FFFF */
		{ "\xE2\x82", false },	       /* truncated */
	};
	for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
		ck_assert_msg(utf8_valid(edges[i].s, strlen(edges[i].s)) == edges[i].ok, "edge %zu", i);
	ck_assert(utf8_incomplete_tail("a\xE2\x82", 3));
	ck_assert(!utf8_incomplete_tail("a\xE2\x82\xAC", 4));
	/* a cut inside the euro sign moves before its lead byte */
	ck_assert_uint_eq(utf8_cut("a\xE2\x82\xAC", 4, 3), 1);
	ck_assert_uint_eq(utf8_cut("a\xE2\x82\xAC", 4, 4), 4);
	for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
		if (cp >= 0xD800 && cp <= 0xDFFF)
			continue;
		char u[4];
		uint32_t back;
		const size_t n = utf8_encode(cp, u);
		if (!utf8_valid(u, n) || utf8_len(u, n) != n || utf8_decode(u, &back) != n || back != cp)
			ck_abort_msg("U+%04X does not round-trip", cp);
	}
}
END_TEST

START_TEST(test_err_str)
{
	ck_assert_str_eq(err_str(0), "ok");
	ck_assert_str_eq(err_str(ERR_NOMEM), "out of memory");
	ck_assert_str_eq(err_str(ERR_DEVICE), "device error");
	ck_assert_str_eq(err_str(-999), "unknown error");
	ck_assert_str_eq(err_str(5), "unknown error");
	for (int e = 0; e > -ERR__COUNT; e--)
		ck_assert_ptr_nonnull(err_str(e));
	struct diag d;
	ck_assert_int_eq(diag_set(&d, ERR_FORMAT, "tensor %s: %d", "x", 3), ERR_FORMAT);
	ck_assert_str_eq(d.msg, "tensor x: 3");
	ck_assert_int_eq(d.code, ERR_FORMAT);
	ck_assert_int_eq(diag_set(NULL, ERR_IO, "ignored"), ERR_IO);
}
END_TEST

START_TEST(test_checked)
{
	size_t r = 7;
	ck_assert_int_eq(ck_add(1, 2, &r), 0);
	ck_assert_uint_eq(r, 3);
	ck_assert_int_eq(ck_add(SIZE_MAX, 1, &r), ERR_OVERFLOW);
	ck_assert_uint_eq(r, 3); /* untouched on overflow */
	ck_assert_int_eq(ck_mul(SIZE_MAX / 2, 3, &r), ERR_OVERFLOW);
	ck_assert_int_eq(ck_mul(1 << 20, 1 << 10, &r), 0);
	ck_assert_uint_eq(r, (size_t)1 << 30);
	uint64_t u;
	ck_assert_int_eq(ck_mul_u64(UINT64_MAX, 2, &u), ERR_OVERFLOW);
	ck_assert_int_eq(ck_add_u64(UINT64_MAX - 1, 1, &u), 0);
	ck_assert_uint_eq(u, UINT64_MAX);
	ck_assert_int_eq(ck_align_up(33, 32, &r), 0);
	ck_assert_uint_eq(r, 64);
	ck_assert_int_eq(ck_align_up(64, 32, &r), 0);
	ck_assert_uint_eq(r, 64);
	ck_assert_int_eq(ck_align_up(SIZE_MAX, 32, &r), ERR_OVERFLOW);
	ck_assert_int_eq(ck_align_up(5, 0, &r), ERR_INVAL);
}
END_TEST

START_TEST(test_buf)
{
	struct buf b;
	buf_init(&b);
	ck_assert_int_eq(buf_append_str(&b, "hello"), 0);
	ck_assert_int_eq(buf_append_char(&b, ' '), 0);
	ck_assert_int_eq(buf_printf(&b, "%s %d", "world", 42), 0);
	ck_assert_str_eq(b.data, "hello world 42");
	ck_assert_uint_eq(b.len, 14);
	buf_consume(&b, 6);
	ck_assert_str_eq(b.data, "world 42");
	/* growth across many reallocations keeps contents */
	for (int i = 0; i < 10000; i++)
		ck_assert_int_eq(buf_append(&b, "0123456789", 10), 0);
	ck_assert_uint_eq(b.len, 8 + 100000);
	ck_assert_int_eq(memcmp(b.data + 8 + 99990, "0123456789", 10), 0);
	ck_assert_int_eq(buf_reserve(&b, SIZE_MAX), ERR_OVERFLOW);
	buf_clear(&b);
	ck_assert_uint_eq(b.len, 0);
	ck_assert_str_eq(b.data, "");
	size_t len = 99;
	char *s = buf_take(&b, &len);
	ck_assert_str_eq(s, "");
	ck_assert_uint_eq(len, 0);
	ck_assert_ptr_null(b.data);
	free(s);
	s = buf_take(&b, &len); /* nothing appended: still a valid empty string */
	ck_assert_ptr_nonnull(s);
	free(s);
	buf_consume(&b, 5); /* on an empty buffer: no-op */
	buf_deinit(&b);
}
END_TEST

START_TEST(test_arena)
{
	struct arena a;
	arena_init(&a, 256);
	char *p1 = arena_alloc(&a, 10);
	char *p2 = arena_alloc(&a, 10);
	ck_assert_ptr_nonnull(p1);
	ck_assert_ptr_nonnull(p2);
	ck_assert_ptr_ne(p1, p2);
	ck_assert_uint_eq((uintptr_t)p1 % 16, 0);
	ck_assert_uint_eq((uintptr_t)p2 % 16, 0);
	void *big = arena_alloc(&a, 10000); /* larger than a chunk */
	ck_assert_ptr_nonnull(big);
	memset(big, 0xab, 10000);
	void *al = arena_alloc_aligned(&a, 100, 256);
	ck_assert_uint_eq((uintptr_t)al % 256, 0);
	ck_assert_ptr_null(arena_alloc_aligned(&a, 8, 24)); /* not a power of two */
	ck_assert_ptr_null(arena_alloc(&a, SIZE_MAX - 8));
	ck_assert_ptr_null(arena_calloc(&a, SIZE_MAX / 2, 4));
	int *z = arena_calloc(&a, 100, sizeof(int));
	for (int i = 0; i < 100; i++)
		ck_assert_int_eq(z[i], 0);
	char *s = arena_strdup(&a, "prefix");
	ck_assert_str_eq(s, "prefix");
	char *s2 = arena_strndup(&a, "abcdef", 3);
	ck_assert_str_eq(s2, "abc");
	for (int i = 0; i < 1000; i++)
		ck_assert_ptr_nonnull(arena_alloc(&a, 100));
	arena_reset(&a);
	ck_assert_uint_eq(a.total, 0);
	ck_assert_ptr_nonnull(arena_alloc(&a, 10));
	arena_deinit(&a);
	arena_deinit(&a); /* idempotent */
}
END_TEST

START_TEST(test_clock)
{
	uint64_t t0 = clock_now_ns();
	uint64_t t1 = clock_now_ns();
	ck_assert_uint_ge(t1, t0);
	ck_assert(clock_now_s() > 0);
	ck_assert_int_gt(clock_unix_s(), 1700000000);
}
END_TEST

START_TEST(test_log_format)
{
	char line[256];
	int n = log_format(line, sizeof line, false, LOG_WARN, "engine", "disk \"full\"");
	ck_assert_int_eq(n, (int)strlen(line));
	ck_assert_ptr_nonnull(strstr(line, "WARN  [engine] disk \"full\""));
	n = log_format(line, sizeof line, true, LOG_ERROR, "srv", "a\"b\\c\nd\x01");
	ck_assert_ptr_nonnull(strstr(line, "\"level\":\"error\""));
	ck_assert_ptr_nonnull(strstr(line, "\"module\":\"srv\""));
	ck_assert_ptr_nonnull(strstr(line, "\"msg\":\"a\\\"b\\\\c\\nd\\u0001\"}"));
	/* truncation keeps a closed JSON object */
	char small[64];
	char longmsg[500];
	memset(longmsg, 'x', sizeof longmsg - 1);
	longmsg[sizeof longmsg - 1] = 0;
	n = log_format(small, sizeof small, true, LOG_INFO, "m", longmsg);
	ck_assert_int_lt(n, 64);
	ck_assert_str_eq(small + n - 2, "\"}");
	enum log_level lv;
	ck_assert_int_eq(log_level_parse("WARNING", &lv), 0);
	ck_assert_int_eq(lv, LOG_WARN);
	ck_assert_int_eq(log_level_parse("verbose", &lv), ERR_INVAL);
	log_configure(LOG_ERROR, false);
	ck_assert_int_eq(log_min_level(), LOG_ERROR);
	log_info("test", "suppressed %d", 1);
	log_configure(LOG_INFO, false);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("common");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_err_str);
	tcase_add_test(tc, test_checked);
	tcase_add_test(tc, test_buf);
	tcase_add_test(tc, test_arena);
	tcase_add_test(tc, test_clock);
	tcase_add_test(tc, test_log_format);
	tcase_add_test(tc, test_utf8);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
