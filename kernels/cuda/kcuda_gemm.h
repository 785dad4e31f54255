/* kernels/cuda/kcuda_gemm.h — dense GEMMs through cuBLAS / cuBLASLt.
 *
 * Every projection of the forward pass is Y[T, N] = X[T, K] · W[N, K]^T with
 * W row-major (a row per output feature, as in the model files) and X, Y
 * row-major. Weights and activations are 16-bit (DT_F16 or DT_BF16, the
 * same for both), accumulation and Y are F32. accumulate != 0 adds into Y
 * (beta = 1: the residual add fused into the output projection).
 * A handle owns the cuBLAS and cuBLASLt handles and a fixed workspace, bound
 * to one stream, so calls can be captured in a CUDA graph. Plain C, no CUDA
 * header; tests: tests/kernels/test_cuda_gemm.c (against kernels/cpu matmul
 * reference on the same 16-bit inputs).
 */
#ifndef AORTA_KERNELS_CUDA_KCUDA_GEMM_H
#define AORTA_KERNELS_CUDA_KCUDA_GEMM_H

#include <stdint.h>

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct k_blas;

int k_blas_create(void *stream, struct k_blas **out);
void k_blas_destroy(struct k_blas *h);

int k_gemm(struct k_blas *h, const void *d_w, enum dtype dt, int n, int k, const void *d_x,
	   int t, float *d_y, int accumulate);

#ifdef __cplusplus
}
#endif

#endif
