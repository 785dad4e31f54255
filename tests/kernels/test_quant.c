/* tests/kernels/test_quant.c — kernels/cpu/quant.c: load-time I8 / FP8 / Q8_0
 * weight quantization round trips (quantize, then kcpu_dequant_row) within
 * their rounding bounds, from F32, F16 and BF16 sources; activation
 * quantizers; bad shapes and dtypes. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"

enum { ROWS = 9, COLS = 96 };

static uint64_t rng = 88172645463325252ull;
static float frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

/* Source matrix: rows with different magnitudes, one all-zero row, one with
 * tiny values (FP8 subnormal range after scaling is exercised by the spread). */
static void make_src(float *f)
{
	for (int r = 0; r < ROWS; r++) {
		float mag = r == 0 ? 0.0f : powf(10.0f, (float)(r - 4));
		for (int k = 0; k < COLS; k++)
			f[r * COLS + k] = mag * frand() * (k % 7 == 0 ? 1.0f : 0.01f);
	}
}

/* The source as the quantizer sees it (after F16/BF16 rounding). */
static void src_values(const struct kmat *src, float *out)
{
	for (int r = 0; r < ROWS; r++)
		kcpu_dequant_row(src, r, out + r * COLS);
}

static void make_kmat(enum dtype t, const float *f, uint16_t *h, struct kmat *k)
{
	k->dtype = t;
	k->rows = ROWS;
	k->cols = COLS;
	k->scale = NULL;
	k->n_scale = 0;
	if (t == DT_F32) {
		k->data = f;
		return;
	}
	for (int i = 0; i < ROWS * COLS; i++)
		h[i] = t == DT_F16 ? f32_to_f16(f[i]) : f32_to_bf16(f[i]);
	k->data = h;
}

static const enum dtype src_types[] = { DT_F32, DT_F16, DT_BF16 };

START_TEST(test_i8_round_trip)
{
	static float f[ROWS * COLS], v[ROWS * COLS], back[COLS];
	static uint16_t h[ROWS * COLS];
	static int8_t q[ROWS * COLS];
	float scale[ROWS];
	make_src(f);
	struct kmat src;
	make_kmat(src_types[_i], f, h, &src);
	src_values(&src, v);
	ck_assert_int_eq(kcpu_quantize_i8(&src, q, scale), 0);
	struct kmat w = { DT_I8, ROWS, COLS, q, scale, ROWS };
	for (int r = 0; r < ROWS; r++) {
		float amax = 0;
		int qmax = 0;
		for (int k = 0; k < COLS; k++) {
			amax = fmaxf(amax, fabsf(v[r * COLS + k]));
			qmax = abs(q[r * COLS + k]) > qmax ? abs(q[r * COLS + k]) : qmax;
		}
		ck_assert_float_eq_tol(scale[r], amax / 127.0f, 1e-12f);
		ck_assert_int_eq(qmax, amax > 0 ? 127 : 0);
		kcpu_dequant_row(&w, r, back);
		for (int k = 0; k < COLS; k++)
			ck_assert_msg(fabsf(back[k] - v[r * COLS + k]) <= scale[r] * 0.5001f,
				      "row %d col %d: %g vs %g (scale %g)", r, k, back[k],
				      v[r * COLS + k], scale[r]);
	}
}
END_TEST

START_TEST(test_f8_round_trip)
{
	static float f[ROWS * COLS], v[ROWS * COLS], back[COLS];
	static uint16_t h[ROWS * COLS];
	static uint8_t q[ROWS * COLS];
	float scale[ROWS];
	make_src(f);
	struct kmat src;
	make_kmat(src_types[_i], f, h, &src);
	src_values(&src, v);
	ck_assert_int_eq(kcpu_quantize_f8(&src, q, scale), 0);
	struct kmat w = { DT_F8_E4M3, ROWS, COLS, q, scale, ROWS };
	for (int r = 0; r < ROWS; r++) {
		float amax = 0;
		for (int k = 0; k < COLS; k++)
			amax = fmaxf(amax, fabsf(v[r * COLS + k]));
		ck_assert_float_eq_tol(scale[r], amax / 448.0f, 1e-12f);
		kcpu_dequant_row(&w, r, back);
		for (int k = 0; k < COLS; k++) {
			float x = v[r * COLS + k];
			/* 3 mantissa bits: half an ulp is 2^-4 relative; below the
			 * normal range (2^-6) the step is 2^-9, half of it 2^-10 */
			float tol = fmaxf(fabsf(x) * 0.0625f, scale[r] * 0.0009766f) * 1.0001f;
			ck_assert_msg(fabsf(back[k] - x) <= tol, "row %d col %d: %g vs %g", r, k,
				      back[k], x);
			ck_assert_int_ne(q[r * COLS + k] & 0x7F, 0x7F); /* never NaN */
		}
	}
}
END_TEST

START_TEST(test_q8_0_round_trip)
{
	static float f[ROWS * COLS], v[ROWS * COLS], back[COLS];
	static uint16_t h[ROWS * COLS];
	static struct q8_0_block b[ROWS * COLS / 32];
	make_src(f);
	struct kmat src;
	make_kmat(src_types[_i], f, h, &src);
	src_values(&src, v);
	ck_assert_int_eq(kcpu_quantize_q8_0(&src, b), 0);
	struct kmat w = { DT_Q8_0, ROWS, COLS, b, NULL, 0 };
	for (int r = 0; r < ROWS; r++) {
		kcpu_dequant_row(&w, r, back);
		for (int k = 0; k < COLS; k++) {
			const struct q8_0_block *blk = &b[r * (COLS / 32) + k / 32];
			float d = f16_to_f32(blk->d);
			ck_assert_int_ge(blk->qs[k % 32], -127);
			ck_assert_msg(fabsf(back[k] - v[r * COLS + k]) <= d * 0.5001f + 1e-30f,
				      "row %d col %d: %g vs %g (d %g)", r, k, back[k], v[r * COLS + k],
				      d);
		}
	}
}
END_TEST

START_TEST(test_activation_quant)
{
	float x[128], d[4];
	int8_t q[128];
	for (int k = 0; k < 128; k++)
		x[k] = frand() * (float)(k / 32 + 1);
	for (int k = 64; k < 96; k++)
		x[k] = 0; /* a zero block: scale 0, quants 0 */
	kcpu_quantize_act_q8_0(x, 128, q, d);
	ck_assert_float_eq(d[2], 0.0f);
	for (int k = 0; k < 128; k++) {
		ck_assert_int_ge(q[k], -127);
		ck_assert_float_le(fabsf((float)q[k] * d[k / 32] - x[k]), d[k / 32] * 0.5001f);
	}
	kcpu_quantize_act_i8(x, 128, q, d);
	int seen127 = 0;
	for (int k = 0; k < 128; k++) {
		ck_assert_float_le(fabsf((float)q[k] * d[0] - x[k]), d[0] * 0.5001f);
		seen127 |= abs(q[k]) == 127;
	}
	ck_assert(seen127);
}
END_TEST

START_TEST(test_bad_input)
{
	float f[2 * 33] = { 0 };
	int8_t q[2 * 33];
	float s[2];
	struct q8_0_block b[4];
	struct kmat src = { DT_F32, 2, 33, f, NULL, 0 };
	ck_assert_int_eq(kcpu_quantize_q8_0(&src, b), ERR_INVAL); /* 33 not a multiple of 32 */
	ck_assert_int_eq(kcpu_quantize_i8(&src, q, s), 0);	  /* fine for I8 */
	ck_assert_float_eq(s[0], 0.0f);
	src.dtype = DT_I32;
	ck_assert_int_eq(kcpu_quantize_i8(&src, q, s), ERR_INVAL);
	ck_assert_int_eq(kcpu_quantize_f8(NULL, (uint8_t *)q, s), ERR_INVAL);
}
END_TEST

static Suite *quant_suite(void)
{
	Suite *s = suite_create("quant");
	TCase *tc = tcase_create("core");
	tcase_add_loop_test(tc, test_i8_round_trip, 0, 3);
	tcase_add_loop_test(tc, test_f8_round_trip, 0, 3);
	tcase_add_loop_test(tc, test_q8_0_round_trip, 0, 3);
	tcase_add_test(tc, test_activation_quant);
	tcase_add_test(tc, test_bad_input);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(quant_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
