/* kernels/cuda/kcuda_gemv.h — the decode GEMV: Y[t, n] (+)= X[t, k] ·
 * dequant(W[n, k])^T for a few tokens (t up to 8 per pass over W), 16-bit
 * X, F32 Y, weights F16, BF16, I8, F8 E4M3 or repacked Q8_0. Built to read
 * W at memory bandwidth, one memory round trip per K step (1-4 steps per
 * CTA at the Llama shapes). Plain C; launchers never synchronize (graph
 * capture works). Code: kernels/cuda/k_gemv.cu; test:
 * tests/kernels/test_cuda_gemv.c; benchmark: tests/bench/bench_cuda_gemv.c.
 *
 * Semantics are k_gemv_w8's (kcuda_quant.h), so the two are interchangeable
 * where both apply: F32 accumulation of the dequantized weights times X;
 * I8 / F8 row (or tensor) scales applied to each finished sum; Q8_0 codes
 * times their F16 block scale (exact in F32) before the products. For F16
 * and BF16 weights the result is the F32 dot product of the 16-bit values.
 */
#ifndef AORTA_KERNELS_CUDA_KCUDA_GEMV_H
#define AORTA_KERNELS_CUDA_KCUDA_GEMV_H

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* On stream, asynchronously. d_x [t, k] of x_dt DT_F16 or DT_BF16 (either
 * with either weight type), d_y [t, n] F32; accumulate != 0 adds into Y,
 * else Y is only written (NaN in it is never read). Weights, by w_dt:
 *   DT_F16, DT_BF16   W [n, k] 16-bit; k a multiple of 8;
 *   DT_I8, DT_F8_E4M3 W [n, k] one byte each; k a multiple of 16;
 *                     d_scale[n_scales], n_scales 1 (per tensor) or n (per
 *                     row), or d_scale NULL for a scale of 1;
 *   DT_Q8_0           the layout of k_q8_0_repack (kcuda_quant.h): d_w the
 *                     int8 codes [n, k], d_q8_d the F16 scales [n, k / 32]
 *                     (2-byte aligned); k a multiple of 32.
 * d_w 16-byte aligned, d_x 16-byte aligned. t of any size: each group of up
 * to 8 tokens reads W once (so above 8 tokens W is read ceil(t / 8) times;
 * a W8A8 or 16-bit GEMM is the better tool there).
 * Returns 0; ERR_INVAL for NULL pointers (d_q8_d for DT_Q8_0), n, k or t
 * <= 0, n_scales neither 1 nor n, x_dt not a dtype; ERR_UNSUPPORTED for
 * another w_dt, x_dt F32 or 8-bit, k not a multiple of the granularity
 * above, misaligned pointers, or t above 8 * 65535; ERR_DEVICE for a
 * failed launch. Ignored: d_scale and n_scales for 16-bit and Q8_0 weights,
 * d_q8_d for the others. */
int k_gemv(void *stream, const void *d_w, enum dtype w_dt, const float *d_scale, int n_scales,
           const void *d_q8_d, int n, int k, const void *d_x, enum dtype x_dt, int t, float *d_y,
           int accumulate);

/* k_gemv with the rows per CTA chosen by the caller (2, 4 or 8; 0 = k_gemv's
 * own choice): for the benchmark, which times each to tune that choice.
 * Same results up to summation order; ERR_INVAL for another value. */
int k_gemv_rows(void *stream, const void *d_w, enum dtype w_dt, const float *d_scale, int n_scales,
                const void *d_q8_d, int n, int k, const void *d_x, enum dtype x_dt, int t,
                float *d_y, int accumulate, int rows_per_cta);

/* Epilogues fused into the GEMV, so that a decode step launches fewer
 * kernels (each small kernel costs a launch and a ramp that no byte of W
 * pays for):
 *   K_GEMV_EPI_SILU_MUL  W is the fused [gate; up] matrix (n = 2 ffn rows,
 *     gate rows first); instead of Y, out[t, ffn] = silu(gate) * up in
 *     out_dt, the bits of k_gemv into Y followed by k_silu_mul
 *     (kcuda_ops.h). d_y and accumulate are ignored (d_y may be NULL).
 *   K_GEMV_EPI_RMSNORM  Y (+)= X W^T as k_gemv, then out[t, n] =
 *     rmsnorm(Y[t]) * norm_w (eps), the bits of k_add_rmsnorm(Y, NULL,
 *     norm_w, ...) run after it: the last CTA of each group of 8 tokens to
 *     finish counts itself in counters[group] and norms the group's rows.
 *     counters: ceil(t / 8) unsigned, zero before the call and zero again
 *     after it; one launch at a time per array (one stream). Needs n a
 *     multiple of 4 and d_y, norm_w and out aligned to 16 bytes (out: to 4
 *     elements); ERR_UNSUPPORTED otherwise, before anything is launched.
 * out_dt: DT_F16, DT_BF16 or DT_F32. Every other argument and error as
 * k_gemv's; 4 rows per CTA. K_GEMV_EPI_NONE is k_gemv. */
enum k_gemv_epi_kind { K_GEMV_EPI_NONE, K_GEMV_EPI_SILU_MUL, K_GEMV_EPI_RMSNORM };
struct k_gemv_epi {
	enum k_gemv_epi_kind kind;
	void *out;
	enum dtype out_dt;
	const float *norm_w; /* RMSNORM: F32 [n] */
	float eps;
	unsigned *counters; /* RMSNORM */
};
int k_gemv_epi(void *stream, const void *d_w, enum dtype w_dt, const float *d_scale, int n_scales,
               const void *d_q8_d, int n, int k, const void *d_x, enum dtype x_dt, int t,
               float *d_y, int accumulate, const struct k_gemv_epi *epi);

#ifdef __cplusplus
}
#endif

#endif
