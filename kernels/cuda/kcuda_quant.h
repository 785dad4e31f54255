/* kernels/cuda/kcuda_quant.h — 8-bit weight paths on the GPU (INT8, Q8_0,
 * FP8 E4M3): weight-only GEMV for small batches, W8A8 GEMMs through
 * cuBLASLt for prefill, per-token activation quantization.
 *
 * Same shapes as kcuda_gemm.h: Y[T, N] (F32, accumulate != 0 adds) =
 * X[T, K] · dequant(W)[N, K]^T. Weight layouts are those of the CPU engine
 * (engine/model.h struct tensor, kernels/cpu/quant.h): DT_I8 and DT_F8_E4M3
 * one byte per value with scale[N] per output row, or one scale for the
 * whole tensor (n_scales == 1); DT_Q8_0 rows of 34-byte blocks (F16 scale +
 * 32 int8). CPU counterparts: kernels/cpu matmul on the same weights;
 * tests: tests/kernels/test_cuda_quant.c.
 */
#ifndef AORTA_KERNELS_CUDA_KCUDA_QUANT_H
#define AORTA_KERNELS_CUDA_KCUDA_QUANT_H

#include <stdint.h>

#include "kernels/cuda/kcuda_gemm.h"
#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Weight-only: reads each weight byte once per call, dequantizes in
 * registers, F32 accumulation; X is 16-bit (x_dt DT_F16 / DT_BF16). Built for
 * t <= 16; correct for any t. */
int k_gemv_w8(void *stream, const void *d_w, enum dtype w_dt, const float *d_scale,
	      int n_scales, int n, int k, const void *d_x, enum dtype x_dt, int t, float *d_y,
	      int accumulate);

/* Per-token (row) quantization of X [t, k] (x_dt 16-bit or F32) to q_dt
 * (DT_F8_E4M3: scale = amax / 448; DT_I8: scale = amax / 127), d_scale[t]. */
int k_quant_rows(void *stream, const void *d_x, enum dtype x_dt, int t, int k, enum dtype q_dt,
		 void *d_xq, float *d_scale);

/* W8A8 through cuBLASLt: Y = (Xq · Wq^T) * x_scale[row] * w_scale[col or 0].
 * DT_F8_E4M3 needs FP8 tensor cores (k_cuda_props.has_fp8; else
 * ERR_UNSUPPORTED); DT_I8 uses the INT32-accumulating integer GEMM. */
int k_gemm_w8a8(struct k_blas *h, const void *d_w, enum dtype w_dt, const float *d_w_scale,
		int n_w_scales, int n, int k, const void *d_xq, const float *d_x_scale, int t,
		float *d_y, int accumulate);

#ifdef __cplusplus
}
#endif

#endif
