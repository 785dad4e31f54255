/* tests/unit/test_dtype.c — kernels/dtype.c: names, row sizes, and the scalar
 * conversions, checked exhaustively against independent definitions. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/err.h"
#include "kernels/dtype.h"

START_TEST(test_names_and_sizes)
{
	for (int t = 0; t < DT__COUNT; t++) {
		enum dtype back;
		ck_assert_int_eq(dtype_parse(dtype_name((enum dtype)t), &back), 0);
		ck_assert_int_eq(back, t);
	}
	enum dtype x;
	ck_assert_int_eq(dtype_parse("q4_k", &x), ERR_INVAL);
	uint64_t b;
	ck_assert_int_eq(dtype_row_bytes(DT_Q8_0, 64, &b), 0);
	ck_assert_uint_eq(b, 68);
	ck_assert_int_eq(dtype_row_bytes(DT_Q8_0, 33, &b), ERR_INVAL);
	ck_assert_int_eq(dtype_row_bytes(DT_F16, 3, &b), 0);
	ck_assert_uint_eq(b, 6);
	ck_assert_int_eq(dtype_row_bytes(DT_F32, UINT64_MAX / 2, &b), ERR_OVERFLOW);
	ck_assert_str_eq(dtype_name((enum dtype)99), "?");
}
END_TEST

/* f16 -> f32 from the definition: (-1)^s * 2^(e-15) * (1 + m/1024), subnormals 2^-14 * m/1024 */
static double f16_def(uint16_t h)
{
	int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
	double v;
	if (e == 0)
		v = ldexp(m / 1024.0, -14);
	else if (e == 31)
		v = m ? NAN : INFINITY;
	else
		v = ldexp(1 + m / 1024.0, e - 15);
	return s ? -v : v;
}

START_TEST(test_f16_exhaustive)
{
	for (uint32_t h = 0; h < 65536; h++) {
		double want = f16_def((uint16_t)h);
		float got = f16_to_f32((uint16_t)h);
		if (isnan(want)) {
			ck_assert(isnan(got));
			ck_assert(isnan(f16_to_f32(f32_to_f16(got))));
			continue;
		}
		ck_assert_msg((double)got == want, "h=%04x got %g want %g", h, got, want);
		/* every half round-trips exactly */
		ck_assert_uint_eq(f32_to_f16(got), h);
	}
	/* rounding: halfway cases go to even, overflow goes to inf */
	ck_assert_uint_eq(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);	    /* tie -> even (down) */
	ck_assert_uint_eq(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie -> even (up) */
	ck_assert_uint_eq(f32_to_f16(65520.0f), 0x7c00);
	ck_assert_uint_eq(f32_to_f16(65519.0f), 0x7bff);
	ck_assert_uint_eq(f32_to_f16(0x1p-25f), 0x0000);		   /* tie to even zero */
	ck_assert_uint_eq(f32_to_f16(0x1p-25f + 0x1p-30f), 0x0001);
}
END_TEST

START_TEST(test_bf16)
{
	for (uint32_t h = 0; h < 65536; h++) {
		float f = bf16_to_f32((uint16_t)h);
		uint32_t u;
		memcpy(&u, &f, 4);
		ck_assert_uint_eq(u, h << 16);
		if (!isnan(f))
			ck_assert_uint_eq(f32_to_bf16(f), h);
	}
	ck_assert_uint_eq(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);	    /* tie -> even */
	ck_assert_uint_eq(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie -> even */
	ck_assert(isnan(bf16_to_f32(f32_to_bf16(NAN))));
}
END_TEST

static double f8_def(uint8_t v)
{
	int s = v >> 7, e = (v >> 3) & 15, m = v & 7;
	if (e == 15 && m == 7)
		return NAN;
	double r = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1 + m / 8.0, e - 7);
	return s ? -r : r;
}

START_TEST(test_f8e4m3)
{
	for (int v = 0; v < 256; v++) {
		double want = f8_def((uint8_t)v);
		float got = f8e4m3_to_f32((uint8_t)v);
		if (isnan(want)) {
			ck_assert(isnan(got));
			continue;
		}
		ck_assert_msg((double)got == want, "v=%02x got %g want %g", v, got, want);
		if (v != 0x80) /* -0 encodes back as 0x80 too; skip the sign check for it */
			ck_assert_uint_eq(f32_to_f8e4m3(got), v);
	}
	ck_assert_uint_eq(f32_to_f8e4m3(1000.0f), 0x7e);  /* saturates to 448 */
	ck_assert_uint_eq(f32_to_f8e4m3(-1000.0f), 0xfe);
	ck_assert_uint_eq(f32_to_f8e4m3(INFINITY), 0x7e);
	ck_assert_uint_eq(f32_to_f8e4m3(1.0625f), 0x38); /* tie between 1.0 and 1.125 -> even */
	ck_assert_uint_eq(f32_to_f8e4m3(1.1875f), 0x3a); /* tie between 1.125 and 1.25 -> even */
	/* nearest-value property on a sweep */
	for (float x = -500; x <= 500; x += 0.37f) {
		float q = f8e4m3_to_f32(f32_to_f8e4m3(x));
		float ax = fabsf(x) > 448 ? copysignf(448, x) : x;
		for (int v = 0; v < 256; v++) {
			float c = f8e4m3_to_f32((uint8_t)v);
			if (!isnan(c))
				ck_assert(fabsf(c - ax) >= fabsf(q - ax));
		}
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dtype");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_names_and_sizes);
	tcase_add_test(tc, test_f16_exhaustive);
	tcase_add_test(tc, test_bf16);
	tcase_add_test(tc, test_f8e4m3);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
