/* kernels/cpu/quant.c — weight quantization at load time and activation
 * quantization for the integer matmul path (see quant.h). Plain C: load-time
 * conversion runs once per weight and activation rows are small next to the
 * weights they meet. Tested in tests/kernels/test_quant.c (round trips and
 * error bounds) and, for the activation side, by tests/kernels/test_matmul.c. */
#include "quant.h"

#include <math.h>
#include <stdlib.h>

#include "common/err.h"

static float absmax(const float *x, int64_t n)
{
	float a = 0.0f;
	for (int64_t i = 0; i < n; i++) {
		float v = fabsf(x[i]);
		if (v > a)
			a = v;
	}
	return a;
}

void kcpu_quantize_act_q8_0(const float *x, int64_t n, int8_t *q, float *d)
{
	for (int64_t b = 0; b < n / Q8_0_BLOCK; b++) {
		const float *xb = x + b * Q8_0_BLOCK;
		float s = absmax(xb, Q8_0_BLOCK) / 127.0f;
		float inv = s > 0.0f ? 1.0f / s : 0.0f;
		d[b] = s;
		for (int k = 0; k < Q8_0_BLOCK; k++)
			q[b * Q8_0_BLOCK + k] = kcpu_q127(xb[k], inv);
	}
}

void kcpu_quantize_act_i8(const float *x, int64_t n, int8_t *q, float *d)
{
	float s = absmax(x, n) / 127.0f;
	float inv = s > 0.0f ? 1.0f / s : 0.0f;
	d[0] = s;
	for (int64_t k = 0; k < n; k++)
		q[k] = kcpu_q127(x[k], inv);
}

static int check_src(const struct kmat *src)
{
	if (!src || !src->data || src->rows < 0 || src->cols <= 0)
		return ERR_INVAL;
	switch (src->dtype) {
	case DT_F32:
	case DT_F16:
	case DT_BF16:
	case DT_Q8_0:
	case DT_I8:
	case DT_F8_E4M3:
		break;
	default:
		return ERR_INVAL;
	}
	if (src->dtype == DT_Q8_0 && src->cols % Q8_0_BLOCK)
		return ERR_INVAL;
	if ((src->dtype == DT_I8 || src->dtype == DT_F8_E4M3) && src->scale &&
	    src->n_scale != 1 && src->n_scale != src->rows)
		return ERR_INVAL;
	if ((uint64_t)src->cols > SIZE_MAX / sizeof(float))
		return ERR_OVERFLOW;
	return 0;
}

int kcpu_quantize_i8(const struct kmat *src, int8_t *q, float *scale)
{
	int rc = check_src(src);
	if (rc)
		return rc;
	const int64_t n = src->cols;
	float *row = malloc((size_t)n * sizeof(float));
	if (!row)
		return ERR_NOMEM;
	for (int64_t r = 0; r < src->rows; r++) {
		kcpu_dequant_row(src, r, row);
		float s = absmax(row, n) / 127.0f;
		float inv = s > 0.0f ? 1.0f / s : 0.0f;
		scale[r] = s;
		for (int64_t k = 0; k < n; k++)
			q[r * n + k] = kcpu_q127(row[k], inv);
	}
	free(row);
	return 0;
}

int kcpu_quantize_f8(const struct kmat *src, uint8_t *q, float *scale)
{
	int rc = check_src(src);
	if (rc)
		return rc;
	const int64_t n = src->cols;
	float *row = malloc((size_t)n * sizeof(float));
	if (!row)
		return ERR_NOMEM;
	for (int64_t r = 0; r < src->rows; r++) {
		kcpu_dequant_row(src, r, row);
		float s = absmax(row, n) / 448.0f;
		/* x * (1 / s), as the INT8 rule: the GPU's per-token quantizer
		 * (k_quant_rows) mirrors this bit for bit, and one IEEE division
		 * per value was the larger part of its time on an H200. absmax
		 * times 1/s may round a hair above 448: it saturates to 448, the
		 * code it would round to anyway. */
		const float inv = s > 0.0f ? 1.0f / s : 0.0f;
		scale[r] = s;
		for (int64_t k = 0; k < n; k++)
			q[r * n + k] = s > 0.0f ? f32_to_f8e4m3(row[k] * inv) : 0;
	}
	free(row);
	return 0;
}

int kcpu_quantize_q8_0(const struct kmat *src, struct q8_0_block *out)
{
	int rc = check_src(src);
	if (rc)
		return rc;
	if (src->cols % Q8_0_BLOCK)
		return ERR_INVAL;
	const int64_t n = src->cols, nb = n / Q8_0_BLOCK;
	float *row = malloc((size_t)n * sizeof(float));
	if (!row)
		return ERR_NOMEM;
	for (int64_t r = 0; r < src->rows; r++) {
		kcpu_dequant_row(src, r, row);
		for (int64_t b = 0; b < nb; b++) {
			const float *xb = row + b * Q8_0_BLOCK;
			struct q8_0_block *o = out + r * nb + b;
			/* Quantize with the F16-rounded scale that dequantization
			 * will use, so q * d reproduces x as closely as it can. */
			o->d = f32_to_f16(absmax(xb, Q8_0_BLOCK) / 127.0f);
			float s = f16_to_f32(o->d);
			float inv = s > 0.0f ? 1.0f / s : 0.0f;
			for (int k = 0; k < Q8_0_BLOCK; k++)
				o->qs[k] = kcpu_q127(xb[k], inv);
		}
	}
	free(row);
	return 0;
}
