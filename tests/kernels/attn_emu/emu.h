// tests/kernels/attn_emu/emu.h — a CPU emulation of the CUDA subset that
// kernels/cuda/k_attn.cu uses, to run test_cuda_attn where there is no GPU
// (run.sh). One CTA at a time, one fiber per CUDA thread, switches only at
// __syncthreads and warp shuffles; a shuffle needs all 32 lanes of its warp
// with the full mask and one offset, a barrier needs every thread, else it
// stops with "EMU ERROR". It checks indexing, masking, the online softmax and
// the split merge; not timing, races the fixed fiber order hides, or the
// real intrinsics' last bits. x86-64 only (hand-written context switch).
#pragma once
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <functional>
extern "C" {
#include "kernels/dtype.h"
}
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct uint3e { unsigned x, y, z; };
struct dim3 {
	unsigned x, y, z;
	dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
extern uint3e threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
extern unsigned char *emu_dyn_smem;

struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }

struct __half { uint16_t x; };
struct __half2_raw { unsigned short x, y; };
struct __half2 {
	__half x, y;
	__half2() = default;
	__half2(const __half2_raw &r) { x.x = r.x; y.x = r.y; }
};
struct __nv_bfloat16 { uint16_t x; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
struct __nv_fp8_e4m3 { uint8_t __x; };
typedef unsigned short __nv_fp8x2_storage_t;
enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 };
inline __half2_raw __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t x, __nv_fp8_interpretation_t)
{
	__half2_raw r;
	r.x = f32_to_f16(f8e4m3_to_f32((uint8_t)(x & 0xff)));
	r.y = f32_to_f16(f8e4m3_to_f32((uint8_t)(x >> 8)));
	return r;
}
inline float2 __half22float2(__half2 h) { return float2{f16_to_f32(h.x.x), f16_to_f32(h.y.x)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{bf16_to_f32(h.x.x), bf16_to_f32(h.y.x)}; }
inline float __half2float(__half h) { return f16_to_f32(h.x); }
inline float __bfloat162float(__nv_bfloat16 h) { return bf16_to_f32(h.x); }
inline __half __float2half_rn(float f) { return __half{f32_to_f16(f)}; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{f32_to_bf16(f)}; }

template <class T> inline T min(T a, T b) { return a < b ? a : b; }
template <class T> inline T max(T a, T b) { return a > b ? a : b; }

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorLaunchFailure = 4 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
typedef struct CUstream_st *cudaStream_t;
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);
template <class F> cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int v)
{
	extern int emu_max_dyn_smem_set;
	if (v > emu_max_dyn_smem_set)
		emu_max_dyn_smem_set = v;
	return cudaSuccess;
}

void __syncthreads(void);
float __shfl_xor_sync(unsigned mask, float v, int o, int width = 32);
void emu_run_grid(dim3 grid, dim3 block, size_t smem, const std::function<void()> &fn);
template <class F> void emu_launch(dim3 grid, dim3 block, size_t smem, cudaStream_t, F fn)
{
	emu_run_grid(grid, block, smem, std::function<void()>(fn));
}
