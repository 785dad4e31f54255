// kernels/cuda/kcuda_internal.h — shared by the .cu files only (CUDA C++):
// error capture, 16-bit load/store helpers, warp reductions.
#ifndef AORTA_KERNELS_CUDA_KCUDA_INTERNAL_H
#define AORTA_KERNELS_CUDA_KCUDA_INTERNAL_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/err.h"
#include "kernels/dtype.h"

// 0, or ERR_DEVICE with "what: CUDA message" kept for k_cuda_last_error().
int kcu_check(cudaError_t e, const char *what);
// kcu_check(cudaGetLastError(), what): call right after a launch.
int kcu_launched(const char *what);

// Load element i of a DT_F32 / DT_F16 / DT_BF16 array as float.
__device__ __forceinline__ float kcu_load(const void *p, enum dtype dt, size_t i)
{
	if (dt == DT_F16)
		return __half2float(((const __half *)p)[i]);
	if (dt == DT_BF16)
		return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
	return ((const float *)p)[i];
}

// Store v as element i of a DT_F32 / DT_F16 / DT_BF16 array (round to nearest even).
__device__ __forceinline__ void kcu_store(void *p, enum dtype dt, size_t i, float v)
{
	if (dt == DT_F16)
		((__half *)p)[i] = __float2half_rn(v);
	else if (dt == DT_BF16)
		((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
	else
		((float *)p)[i] = v;
}

__device__ __forceinline__ float kcu_warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float kcu_warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

static inline bool kcu_is_16bit_or_f32(enum dtype dt)
{
	return dt == DT_F32 || dt == DT_F16 || dt == DT_BF16;
}

#endif
