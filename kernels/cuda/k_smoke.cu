// kernels/cuda/k_smoke.cu — device helpers and the build smoke kernel (axpy).
// CPU counterpart: kernels/cpu/k_smoke.c; test: tests/cuda/test_cuda_smoke.c
// (exits 77 where no GPU is visible).
#include <cuda_runtime.h>
#include <stdio.h>

#include "common/err.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_internal.h"

static thread_local char g_last_error[256];

int kcu_check(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	// clear it (when not sticky): else the next launch check reports it
	// again, under another kernel's name
	(void)cudaGetLastError();
	snprintf(g_last_error, sizeof g_last_error, "%s: %s", what, cudaGetErrorString(e));
	return ERR_DEVICE;
}

int kcu_launched(const char *what)
{
	return kcu_check(cudaGetLastError(), what);
}

extern "C" const char *k_cuda_last_error(void)
{
	return g_last_error;
}

extern "C" int k_cuda_device_count(int *n_out)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) {
		(void)cudaGetLastError(); // clear the sticky "no device" error
		n = 0;
	}
	*n_out = n;
	return 0;
}

extern "C" int k_cuda_malloc(void **d_ptr, size_t bytes)
{
	return kcu_check(cudaMalloc(d_ptr, bytes), "cudaMalloc");
}

extern "C" void k_cuda_free(void *d_ptr)
{
	if (d_ptr)
		cudaFree(d_ptr);
}

extern "C" int k_cuda_memcpy_h2d(void *d_dst, const void *src, size_t bytes)
{
	return kcu_check(cudaMemcpy(d_dst, src, bytes, cudaMemcpyHostToDevice), "memcpy h2d");
}

extern "C" int k_cuda_memcpy_d2h(void *dst, const void *d_src, size_t bytes)
{
	return kcu_check(cudaMemcpy(dst, d_src, bytes, cudaMemcpyDeviceToHost), "memcpy d2h");
}

extern "C" int k_cuda_sync(void)
{
	return kcu_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

__global__ void axpy_kernel(size_t n, float a, const float *__restrict__ x, float *__restrict__ y)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	size_t stride = (size_t)gridDim.x * blockDim.x;
	for (; i < n; i += stride)
		y[i] += a * x[i];
}

extern "C" int k_axpy_f32(void *stream, size_t n, float a, const float *d_x, float *d_y)
{
	if (n == 0)
		return 0;
	if (!d_x || !d_y)
		return ERR_INVAL;
	const int threads = 256;
	size_t blocks = (n + threads - 1) / threads;
	if (blocks > 65535)
		blocks = 65535;
	axpy_kernel<<<(unsigned)blocks, threads, 0, (cudaStream_t)stream>>>(n, a, d_x, d_y);
	return kcu_check(cudaGetLastError(), "axpy launch");
}
