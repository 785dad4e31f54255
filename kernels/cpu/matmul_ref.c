/* kernels/cpu/matmul_ref.c — the reference Y = X·Wᵀ and row dequantization
 * (see matmul.h). Plain C, one thread, F32 accumulation. */
#include <stdlib.h>
#include <string.h>

#include "matmul.h"

static float row_scale(const struct kmat *w, int64_t r)
{
	if (!w->scale)
		return 1.0f;
	return w->n_scale == 1 ? w->scale[0] : w->scale[r];
}

void kcpu_dequant_row(const struct kmat *w, int64_t r, float *out)
{
	const int64_t n = w->cols;
	switch (w->dtype) {
	case DT_F32:
		memcpy(out, (const float *)w->data + r * n, (size_t)n * sizeof(float));
		break;
	case DT_F16: {
		const uint16_t *p = (const uint16_t *)w->data + r * n;
		for (int64_t i = 0; i < n; i++)
			out[i] = f16_to_f32(p[i]);
		break;
	}
	case DT_BF16: {
		const uint16_t *p = (const uint16_t *)w->data + r * n;
		for (int64_t i = 0; i < n; i++)
			out[i] = bf16_to_f32(p[i]);
		break;
	}
	case DT_Q8_0: {
		const struct q8_0_block *b = (const struct q8_0_block *)w->data + r * (n / Q8_0_BLOCK);
		for (int64_t j = 0; j < n / Q8_0_BLOCK; j++) {
			float d = f16_to_f32(b[j].d);
			for (int k = 0; k < Q8_0_BLOCK; k++)
				out[j * Q8_0_BLOCK + k] = d * (float)b[j].qs[k];
		}
		break;
	}
	case DT_I8: {
		const int8_t *p = (const int8_t *)w->data + r * n;
		float s = row_scale(w, r);
		for (int64_t i = 0; i < n; i++)
			out[i] = s * (float)p[i];
		break;
	}
	case DT_F8_E4M3: {
		const uint8_t *p = (const uint8_t *)w->data + r * n;
		float s = row_scale(w, r);
		for (int64_t i = 0; i < n; i++)
			out[i] = s * f8e4m3_to_f32(p[i]);
		break;
	}
	default:
		memset(out, 0, (size_t)n * sizeof(float));
		break;
	}
}

void kcpu_matmul_ref(const struct kmat *w, const float *x, int m, float *y)
{
	float *row = malloc((size_t)w->cols * sizeof(float));
	if (!row)
		return;
	for (int64_t r = 0; r < w->rows; r++) {
		kcpu_dequant_row(w, r, row);
		for (int i = 0; i < m; i++) {
			const float *xi = x + (int64_t)i * w->cols;
			float acc = 0.0f;
			for (int64_t k = 0; k < w->cols; k++)
				acc += row[k] * xi[k];
			y[(int64_t)i * w->rows + r] = acc;
		}
	}
	free(row);
}
