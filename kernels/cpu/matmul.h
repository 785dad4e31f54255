/* kernels/cpu/matmul.h — Y = X · Wᵀ for every weight dtype, the hot path of
 * the CPU backend.
 *
 * W is a weight matrix (rows = output features, cols = input features),
 * row-major in its storage dtype: F32, F16, BF16, Q8_0 (blocks of 32 along a
 * row), I8 or F8_E4M3 (one byte per value, scale per row or per tensor).
 * X is (m, cols) F32 row-major, Y is (m, rows) F32 row-major.
 *
 * kcpu_matmul_ref is the readable reference (no intrinsics, one thread,
 * F32 accumulation, dequantize-then-multiply); kcpu_matmul is the fast path
 * (SIMD chosen at run time, threaded over the pool, GEMV-shaped for small m,
 * cache-blocked for large m; for Q8_0/I8 it quantizes X per row to int8 and
 * uses integer dot products). The fast path must agree with the reference to
 * accumulation-order tolerance; tests/engine/test_matmul.c checks it on ragged
 * shapes. Stateless apart from the pool; any one thread.
 */
#ifndef AORTA_KERNELS_CPU_MATMUL_H
#define AORTA_KERNELS_CPU_MATMUL_H

#include <stdint.h>

#include "kernels/cpu/pool.h"
#include "kernels/dtype.h"

struct kmat {
	enum dtype dtype;
	int64_t rows;	    /* output features */
	int64_t cols;	    /* input features (a multiple of 32 for Q8_0) */
	const void *data;   /* rows * row_bytes(cols) bytes */
	const float *scale; /* I8 / F8_E4M3: n_scale values, else NULL */
	int64_t n_scale;    /* 1 (per tensor) or rows (per row) */
};

/* Dequantize row r of w into out[cols] (reference; also used for embedding gathers). */
void kcpu_dequant_row(const struct kmat *w, int64_t r, float *out);

void kcpu_matmul_ref(const struct kmat *w, const float *x, int m, float *y);
void kcpu_matmul(struct kpool *pool, const struct kmat *w, const float *x, int m, float *y);

#endif
