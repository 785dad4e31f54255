/* kernels/cpu/quant.h — int8 / fp8 / Q8_0 quantization of weights (at load
 * time, for --quantization int8|fp8) and of activations (inside kcpu_matmul's
 * integer path and its reference).
 *
 * Weights: a (rows, cols) matrix in any float dtype (F32, F16, BF16; also
 * Q8_0/I8/F8_E4M3, which are dequantized first) is converted row by row:
 *   I8      q = round(x / s), s = absmax(row) / 127, one F32 scale per row;
 *   F8_E4M3 q = fp8(x * (1 / s)), s = absmax(row) / 448, one F32 scale per row;
 *   Q8_0    blocks of 32: d = absmax(block) / 127 stored as F16, q = round(x / d).
 * Dequantize with kcpu_dequant_row (matmul.h). The caller owns every buffer;
 * the functions allocate one row of scratch. Stateless; any thread.
 *
 * Activations: one row of n floats to int8 with a scale per 32-block (Q8_0,
 * llama.cpp's q8_0 activation format but with an F32 scale) or per row (I8).
 * Values are rounded to nearest even and clamped to [-127, 127].
 */
#ifndef AORTA_KERNELS_CPU_QUANT_H
#define AORTA_KERNELS_CPU_QUANT_H

#include <stdint.h>

#include "kernels/cpu/matmul.h"

/* src: any dtype kcpu_dequant_row understands. q: rows*cols bytes; scale:
 * rows floats. 0, ERR_INVAL (bad shape/dtype) or ERR_NOMEM. */
int kcpu_quantize_i8(const struct kmat *src, int8_t *q, float *scale);
int kcpu_quantize_f8(const struct kmat *src, uint8_t *q, float *scale);
/* out: rows * cols/32 blocks; cols must be a multiple of 32 (else ERR_INVAL). */
int kcpu_quantize_q8_0(const struct kmat *src, struct q8_0_block *out);

/* One activation row: q[n]; d[n/32] (n a multiple of 32) or d[1]. */
void kcpu_quantize_act_q8_0(const float *x, int64_t n, int8_t *q, float *d);
void kcpu_quantize_act_i8(const float *x, int64_t n, int8_t *q, float *d);

/* round(x * inv) to nearest even, clamped to [-127, 127] (NaN gives -127).
 * Adding and subtracting 1.5 * 2^23 rounds a float of magnitude below 2^22
 * to an integer in the current (nearest-even) mode: the same result as
 * nearbyintf without a libm call, so the loops vectorize; activation
 * quantization runs on every integer matmul call. The SIMD quantizers
 * (matmul_avx2.c, matmul_avx512.c) take the same steps on vectors and call
 * this for their tails. */
static inline int8_t kcpu_q127(float x, float inv)
{
	float v = x * inv;
	v = v > -127.0f ? v : -127.0f;
	v = v < 127.0f ? v : 127.0f;
	v = (v + 12582912.0f) - 12582912.0f;
	return (int8_t)v;
}

#endif
