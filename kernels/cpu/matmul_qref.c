/* kernels/cpu/matmul_qref.c — reference of kcpu_matmul's integer path (see
 * matmul.h, kcpu_matmul_ref_xq): plain C, one thread. X rows are quantized
 * with the same functions the fast path uses, so the fast path must match
 * this to accumulation-order tolerance (Q8_0) or exactly (I8); the distance
 * from the plain float reference is the X quantization error, bounded
 * separately in tests/kernels/test_matmul.c. */
#include <stdlib.h>

#include "matmul.h"
#include "quant.h"

static float row_scale(const struct kmat *w, int64_t r)
{
	if (!w->scale)
		return 1.0f;
	return w->n_scale == 1 ? w->scale[0] : w->scale[r];
}

void kcpu_matmul_ref_xq(const struct kmat *w, const float *x, int m, float *y)
{
	if (w->dtype != DT_Q8_0 && w->dtype != DT_I8) {
		kcpu_matmul_ref(w, x, m, y);
		return;
	}
	const int64_t n = w->cols;
	const int64_t nb = w->dtype == DT_Q8_0 ? n / Q8_0_BLOCK : 1;
	int8_t *xq = malloc((size_t)n);
	float *xd = malloc((size_t)nb * sizeof(float));
	if (!xq || !xd)
		goto out;
	for (int j = 0; j < m; j++) {
		const float *xj = x + (int64_t)j * n;
		float *yj = y + (int64_t)j * w->rows;
		if (w->dtype == DT_Q8_0) {
			kcpu_quantize_act_q8_0(xj, n, xq, xd);
			const struct q8_0_block *wb = w->data;
			for (int64_t r = 0; r < w->rows; r++) {
				float acc = 0.0f;
				for (int64_t b = 0; b < nb; b++) {
					const struct q8_0_block *blk = wb + r * nb + b;
					int32_t s = 0;
					for (int k = 0; k < Q8_0_BLOCK; k++)
						s += (int32_t)blk->qs[k] * xq[b * Q8_0_BLOCK + k];
					acc += (float)s * (f16_to_f32(blk->d) * xd[b]);
				}
				yj[r] = acc;
			}
		} else {
			kcpu_quantize_act_i8(xj, n, xq, xd);
			const int8_t *wq = w->data;
			for (int64_t r = 0; r < w->rows; r++) {
				int64_t s = 0;
				for (int64_t k = 0; k < n; k++)
					s += (int32_t)wq[r * n + k] * xq[k];
				yj[r] = (float)s * (row_scale(w, r) * xd[0]);
			}
		}
	}
out:
	free(xq);
	free(xd);
}
