/* kernels/cuda/kcuda_gemm.h — dense GEMMs through cuBLAS / cuBLASLt.
 *
 * Every projection of the forward pass is Y[T, N] = X[T, K] · W[N, K]^T with
 * W row-major (a row per output feature, as in the model files) and X, Y
 * row-major. Weights and activations are 16-bit (DT_F16 or DT_BF16, the
 * same for both), accumulation and Y are F32. accumulate != 0 adds into Y
 * (beta = 1: the residual add fused into the output projection); with
 * accumulate == 0 Y is only written (its old contents, NaN included, are
 * never read).
 * A handle owns the cuBLAS and cuBLASLt handles and a fixed workspace, bound
 * to one stream, so calls can be captured in a CUDA graph. One thread at a
 * time per handle (the engine thread). Plain C, no CUDA header; code in
 * kernels/cuda/k_gemm.cu; tests: tests/kernels/test_cuda_gemm.c (against a
 * double-precision product of the same 16-bit inputs); benchmark:
 * tests/bench/bench_cuda.c.
 */
#ifndef AORTA_KERNELS_CUDA_KCUDA_GEMM_H
#define AORTA_KERNELS_CUDA_KCUDA_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct k_blas;

/* Make a handle on the current device, bound to stream (a cudaStream_t; NULL
 * = the legacy default stream; borrowed: it must outlive the handle). Not
 * during a stream capture (it allocates). 0, ERR_INVAL (out NULL), ERR_NOMEM
 * or ERR_DEVICE; *out is NULL on failure. */
int k_blas_create(void *stream, struct k_blas **out);
/* Frees the handle (NULL is fine). Synchronizes the device (cudaFree): not
 * during a capture, and not while work queued with it still matters. */
void k_blas_destroy(struct k_blas *h);

/* Y[t, n] (+)= X[t, k] · W[n, k]^T on the handle's stream, asynchronously.
 * 0; ERR_INVAL (NULL h or pointer, n, k or t <= 0, dt not a dtype);
 * ERR_UNSUPPORTED (dt not DT_F16 / DT_BF16); ERR_DEVICE (cuBLAS or CUDA
 * failure; k_cuda_last_error() says which). */
int k_gemm(struct k_blas *h, const void *d_w, enum dtype dt, int n, int k, const void *d_x,
	   int t, float *d_y, int accumulate);

/* For other kernels/cuda files (the W8A8 path in k_quant.cu): the handle's
 * stream (a cudaStream_t), its cuBLASLt handle (a cublasLtHandle_t) and its
 * device workspace (*bytes set to its size). Borrowed, valid until
 * k_blas_destroy. Work using the workspace must be queued on the handle's
 * stream: every call on that stream shares it, in stream order. */
void *k_blas_stream(struct k_blas *h);
void *k_blas_lt_handle(struct k_blas *h);
void *k_blas_workspace(struct k_blas *h, size_t *bytes);

#ifdef __cplusplus
}
#endif

#endif
