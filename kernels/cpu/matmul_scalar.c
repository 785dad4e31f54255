/* kernels/cpu/matmul_scalar.c — the portable inner kernels of kcpu_matmul
 * (plain C, any architecture; see matmul_impl.h). Dot tiles keep MM_TW x MM_TX
 * independent accumulators so the compiler can vectorize and pipeline them.
 * Tested against the reference in tests/kernels/test_matmul.c. */
#include <string.h>

#include "matmul_impl.h"

/* IEEE half -> float without branches on the value, so the conversion loop
 * vectorizes: the 15 value bits are placed where a float keeps them and the
 * result multiplied by 2^112 to move the exponent bias from 15 to 127 (exact
 * for subnormal halves too); Inf/NaN get the all-ones exponent. Equal to
 * kernels/dtype.c's f16_to_f32 for every input. */
static inline float half_to_float(uint16_t h)
{
	const uint32_t em = h & 0x7FFFu;
	uint32_t bits = em << 13;
	float f;
	memcpy(&f, &bits, sizeof f);
	f *= 0x1p112f;
	memcpy(&bits, &f, sizeof bits);
	bits = em >= 0x7C00u ? (em << 13) | 0x7F800000u : bits;
	bits |= (uint32_t)(h & 0x8000u) << 16;
	memcpy(&f, &bits, sizeof f);
	return f;
}

static void cvt_scalar(const struct kmat *w, int64_t r, int64_t k0, int64_t n, float *out)
{
	const int64_t off = r * w->cols + k0;
	switch (w->dtype) {
	case DT_F32:
		memcpy(out, (const float *)w->data + off, (size_t)n * sizeof(float));
		break;
	case DT_F16: {
		const uint16_t *p = (const uint16_t *)w->data + off;
		for (int64_t k = 0; k < n; k++)
			out[k] = half_to_float(p[k]);
		break;
	}
	case DT_BF16: {
		const uint16_t *p = (const uint16_t *)w->data + off;
		for (int64_t k = 0; k < n; k++)
			out[k] = bf16_to_f32(p[k]);
		break;
	}
	case DT_F8_E4M3: {
		const uint8_t *p = (const uint8_t *)w->data + off;
		float s = mm_row_scale(w, r);
		for (int64_t k = 0; k < n; k++)
			out[k] = s * f8e4m3_to_f32(p[k]);
		break;
	}
	default:
		memset(out, 0, (size_t)n * sizeof(float));
		break;
	}
}

/* MM_LANES independent partial sums per output: the compiler may not
 * reorder a float sum, but it can vectorize across these lanes (SSE, NEON). */
#define MM_LANES 8

static void dot_f32_scalar(int nw, int nx, const float *w, int64_t ldw, const float *x,
			   int64_t ldx, int64_t n, float *y, int64_t ldy)
{
	for (int j = 0; j < nx; j++)
		for (int i = 0; i < nw; i++) {
			const float *wi = w + i * ldw, *xj = x + j * ldx;
			float acc[MM_LANES] = { 0 };
			int64_t k = 0;
			for (; k + MM_LANES <= n; k += MM_LANES)
				for (int l = 0; l < MM_LANES; l++)
					acc[l] += wi[k + l] * xj[k + l];
			float s = 0.0f;
			for (int l = 0; l < MM_LANES; l++)
				s += acc[l];
			for (; k < n; k++)
				s += wi[k] * xj[k];
			y[j * ldy + i] = s;
		}
}

static void dot_q8_scalar(int nw, int nx, const struct q8_0_block *w, int64_t nb,
			  const int8_t *xq, const float *xd, float *y, int64_t ldy)
{
	float acc[MM_TX][MM_TW] = { { 0 } };
	for (int64_t b = 0; b < nb; b++) {
		for (int i = 0; i < nw; i++) {
			const struct q8_0_block *wb = w + i * nb + b;
			float dw = f16_to_f32(wb->d);
			for (int j = 0; j < nx; j++) {
				const int8_t *xb = xq + j * nb * Q8_0_BLOCK + b * Q8_0_BLOCK;
				int32_t s = 0;
				for (int k = 0; k < Q8_0_BLOCK; k++)
					s += (int32_t)wb->qs[k] * xb[k];
				acc[j][i] += (float)s * (dw * xd[j * nb + b]);
			}
		}
	}
	for (int j = 0; j < nx; j++)
		for (int i = 0; i < nw; i++)
			y[j * ldy + i] = acc[j][i];
}

static void dot_i8_scalar(int nw, int nx, const int8_t *w, int64_t ldw, const int8_t *xq,
			  int64_t ldx, int64_t n, int32_t *isum)
{
	for (int j = 0; j < nx; j++)
		for (int i = 0; i < nw; i++) {
			int32_t s = 0;
			for (int64_t k = 0; k < n; k++)
				s += (int32_t)w[i * ldw + k] * xq[j * ldx + k];
			isum[j * MM_TW + i] = s;
		}
}

static const struct mm_kernels scalar_kernels = {
	.name = "scalar",
	.cvt = cvt_scalar,
	.dot_f32 = dot_f32_scalar,
	.dot_q8 = dot_q8_scalar,
	.dot_i8 = dot_i8_scalar,
	.mr = 0,
	.nr = 0,
	.gemm = NULL,
};

const struct mm_kernels *mm_kernels_scalar(void)
{
	return &scalar_kernels;
}
