// kernels/cuda/k_gemm.cu — kcuda_gemm.h: the 16-bit dense GEMM of every
// projection, Y[T, N] (+)= X[T, K] · W[N, K]^T, through cuBLAS. Owns struct
// k_blas (cuBLAS + cuBLASLt handles and a fixed device workspace, bound to one
// stream). Called from one thread per handle. Test: tests/kernels/
// test_cuda_gemm.c; benchmark: tests/bench/bench_cuda.c.
//
// cublasGemmEx rather than cublasLtMatmul: on CUDA 12/13 cuBLAS dispatches
// this call to the same cuBLASLt kernels, picks them with the same heuristic
// and caches that choice itself, so an Lt path with our own per-shape cache
// would buy nothing for a plain GEMM (no epilogue to fuse) and adds four
// descriptors and a heuristic query per shape that can each go wrong. What Lt
// is needed for (FP8 / INT8 W8A8, scaling modes) uses the Lt handle and the
// shared workspace exported below.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/err.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_gemm.h"
#include "kernels/cuda/kcuda_internal.h"

// cuBLAS recommends 32 MiB on Hopper (4 MiB before); one size for all.
#define K_BLAS_WORKSPACE_BYTES ((size_t)32 << 20)

struct k_blas {
	cudaStream_t stream; // borrowed
	cublasHandle_t blas;
	cublasLtHandle_t lt;
	void *workspace; // K_BLAS_WORKSPACE_BYTES, shared by cuBLAS and Lt users
	size_t workspace_bytes;
};

// 0, or ERR_DEVICE with "what: cuBLAS status" kept for k_cuda_last_error()
// (through kcu_check, which owns the thread-local message buffer).
static int blas_check(cublasStatus_t s, const char *what)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return 0;
	char buf[192];
	snprintf(buf, sizeof buf, "%s: %s (%d)", what, cublasGetStatusString(s), (int)s);
	kcu_check(cudaErrorUnknown, buf);
	return ERR_DEVICE;
}

extern "C" void k_blas_destroy(struct k_blas *h)
{
	if (!h)
		return;
	if (h->blas)
		cublasDestroy(h->blas);
	if (h->lt)
		cublasLtDestroy(h->lt);
	if (h->workspace)
		cudaFree(h->workspace);
	free(h);
}

extern "C" int k_blas_create(void *stream, struct k_blas **out)
{
	if (!out)
		return ERR_INVAL;
	*out = NULL;
	struct k_blas *h = (struct k_blas *)calloc(1, sizeof *h);
	if (!h)
		return ERR_NOMEM;
	h->stream = (cudaStream_t)stream;
	int rc = blas_check(cublasCreate(&h->blas), "cublasCreate");
	if (!rc)
		rc = blas_check(cublasLtCreate(&h->lt), "cublasLtCreate");
	if (!rc)
		rc = kcu_check(cudaMalloc(&h->workspace, K_BLAS_WORKSPACE_BYTES),
			       "cudaMalloc (cuBLAS workspace)");
	if (!rc) {
		h->workspace_bytes = K_BLAS_WORKSPACE_BYTES;
		rc = blas_check(cublasSetStream(h->blas, h->stream), "cublasSetStream");
	}
	// After cublasSetStream, which resets the workspace to cuBLAS's own pool.
	// A user workspace keeps cuBLAS from allocating inside a graph capture.
	if (!rc)
		rc = blas_check(cublasSetWorkspace(h->blas, h->workspace, h->workspace_bytes),
				"cublasSetWorkspace");
	// alpha and beta are host values, baked into the launch (and a graph).
	if (!rc)
		rc = blas_check(cublasSetPointerMode(h->blas, CUBLAS_POINTER_MODE_HOST),
				"cublasSetPointerMode");
	if (rc) {
		k_blas_destroy(h);
		return rc;
	}
	*out = h;
	return 0;
}

extern "C" int k_gemm(struct k_blas *h, const void *d_w, enum dtype dt, int n, int k,
		      const void *d_x, int t, float *d_y, int accumulate)
{
	if (!h || !d_w || !d_x || !d_y || n <= 0 || k <= 0 || t <= 0)
		return ERR_INVAL;
	if ((int)dt < 0 || (int)dt >= (int)DT__COUNT)
		return ERR_INVAL;
	cudaDataType_t ab;
	if (dt == DT_F16)
		ab = CUDA_R_16F;
	else if (dt == DT_BF16)
		ab = CUDA_R_16BF;
	else
		return ERR_UNSUPPORTED;
	const float alpha = 1.0f;
	const float beta = accumulate ? 1.0f : 0.0f; // beta 0: C is never read
	// Column-major view of the row-major operands: W[N, K] is a K x N matrix
	// (ld K), X[T, K] is K x T (ld K), Y[T, N] is N x T (ld N). So
	// C(N x T) = op(A) · B with A = W-as-stored transposed (N x K) and B = X:
	// C[n, t] = sum_k W[n, k] · X[t, k].
	cublasStatus_t s = cublasGemmEx(h->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, t, k, &alpha, d_w,
					ab, k, d_x, ab, k, &beta, d_y, CUDA_R_32F, n,
					CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	int rc = blas_check(s, "k_gemm: cublasGemmEx");
	return rc ? rc : kcu_launched("k_gemm");
}

extern "C" void *k_blas_stream(struct k_blas *h)
{
	return h ? (void *)h->stream : NULL;
}

extern "C" void *k_blas_lt_handle(struct k_blas *h)
{
	return h ? (void *)h->lt : NULL;
}

extern "C" void *k_blas_workspace(struct k_blas *h, size_t *bytes)
{
	if (bytes)
		*bytes = h ? h->workspace_bytes : 0;
	return h ? h->workspace : NULL;
}
