// kernels/cuda/kcuda_internal.h — shared by the .cu files only (CUDA C++):
// error capture, 16-bit load/store helpers, warp reductions.
#ifndef AORTA_KERNELS_CUDA_KCUDA_INTERNAL_H
#define AORTA_KERNELS_CUDA_KCUDA_INTERNAL_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "common/err.h"
#include "kernels/dtype.h"

// 0, or ERR_DEVICE with "what: CUDA message" kept for k_cuda_last_error().
int kcu_check(cudaError_t e, const char *what);
// kcu_check(cudaGetLastError(), what): call right after a launch.
int kcu_launched(const char *what);

// Lets func launch with bytes of dynamic shared memory: past the default 48
// KB, cudaFuncSetAttribute(MaxDynamicSharedMemorySize), asked once per
// kernel, device and size (k_runtime.cu). cudaErrorInvalidValue: more than
// the device allows a CTA.
cudaError_t kcu_smem_optin(const void *func, size_t bytes);
template <typename... P> static inline cudaError_t kcu_smem_optin(void (*kernel)(P...), size_t bytes)
{
	return kcu_smem_optin((const void *)kernel, bytes);
}

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

// v rounded to dt as kcu_store (and k_ops.cu's store4) round it, back as a
// float: the value a 16-bit row keeps.
__device__ __forceinline__ float kcu_round(enum dtype dt, float v)
{
	if (dt == DT_F16)
		return __half2float(__float2half_rn(v));
	if (dt == DT_BF16)
		return __bfloat162float(__float2bfloat16_rn(v));
	return v;
}

// Four int8 (packed in v, lowest byte first) to floats, exactly, without the
// slow int->float conversion: with b = byte ^ 0x80 = s + 128, the float with
// bits 0x4B0000bb is 2^23 + b, so subtracting 2^23 + 128 leaves s.
__device__ __forceinline__ void kcu_i8x4(uint32_t v, float f[4])
{
	const uint32_t u = v ^ 0x80808080u;
	f[0] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540)) - 8388736.0f;
	f[1] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7541)) - 8388736.0f;
	f[2] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7542)) - 8388736.0f;
	f[3] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7543)) - 8388736.0f;
}

// Four FP8 E4M3 (lowest byte first) to floats, exactly (every E4M3 value is an
// F16 value; 0x7F / 0xFF become NaN, as on the CPU). Hardware on sm_89+.
__device__ __forceinline__ void kcu_f8x4(uint32_t v, float f[4])
{
	const __half2_raw lo =
		__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(v & 0xFFFFu), __NV_E4M3);
	const __half2_raw hi =
		__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(v >> 16), __NV_E4M3);
	const float2 a = __half22float2(__half2(lo));
	const float2 b = __half22float2(__half2(hi));
	f[0] = a.x;
	f[1] = a.y;
	f[2] = b.x;
	f[3] = b.y;
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

// silu(g) * u, as kops_silu_mul_ref: k_silu_mul and k_gemv_epi's SwiGLU
// epilogue share it, so the fused and the separate step give the same bits.
__device__ __forceinline__ float kcu_silu_mul1(float g, float u)
{
	return g / (1.0f + expf(-g)) * u;
}

// ss + (v.x^2 + v.y^2 + v.z^2 + v.w^2), the products summed in this order
// with explicit fmaf: the per-thread step of every RMSNorm here (k_ops.cu's
// kernel and k_gemv_epi's fused norm), spelled out so that the compiler's
// contraction choices cannot make the two differ.
__device__ __forceinline__ float kcu_sumsq4(float ss, float4 v)
{
	float q = v.x * v.x;
	q = fmaf(v.y, v.y, q);
	q = fmaf(v.z, v.z, q);
	q = fmaf(v.w, v.w, q);
	return ss + q;
}

// Per-token quantization of one value v of a row whose scale is s (amax /
// 448 for FP8 E4M3, amax / 127 for INT8) and inv = 1 / s (0 when s is 0):
// the CPU's rules (kernels/cpu/quant.c), shared by k_quant_rows and the
// kernels that quantize their own output rows (k_rmsnorm_quant,
// k_silu_mul_quant), so that they give the same codes.
template <bool FP8> __device__ __forceinline__ uint8_t kcu_quant_one(float v, float s, float inv)
{
	if (FP8)
		return s > 0.0f ? (uint8_t)__nv_cvt_float_to_fp8(__fmul_rn(v, inv), __NV_SATFINITE,
								 __NV_E4M3)
				: (uint8_t)0;
	v = __fmul_rn(v, inv);
	v = v > -127.0f ? v : -127.0f;
	v = v < 127.0f ? v : 127.0f;
	return (uint8_t)(int8_t)__float2int_rn(v);
}

// A row's scale from its largest |value|: amax / 448 (FP8 E4M3) or / 127.
template <bool FP8> __device__ __forceinline__ float kcu_quant_scale(float amax)
{
	return __fdiv_rn(amax, FP8 ? 448.0f : 127.0f);
}

// 1 / s, or 0 for an all-zero row (s == 0: every code is 0).
__device__ __forceinline__ float kcu_quant_inv(float s)
{
	return s > 0.0f ? __fdiv_rn(1.0f, s) : 0.0f;
}

// 1 / rms from the sum of squares of n values (eps inside the sqrt).
__device__ __forceinline__ float kcu_inv_rms(float ss, int n, float eps)
{
	return 1.0f / sqrtf(ss / (float)n + eps);
}

// Threads per row of k_ops.cu's RMSNorm kernel for a row of n floats: the
// fused norm of k_gemv_epi reproduces that kernel's summation order for it.
static inline unsigned kcu_norm_threads(int n)
{
	size_t t = ((size_t)n + 3) / 4;
	t = (t + 31) / 32 * 32;
	return (unsigned)(t > 512 ? 512 : t);
}

// ---- programmatic dependent launch (sm_90+) ------------------------------------
//
// A kernel launched by kcu_launch_pdl while PDL is on (k_cuda_set_pdl) may
// start while the kernel before it in the stream still runs. Such a kernel
// calls kcu_pdl_trigger() first (its own successor may then launch once all
// its CTAs have started) and kcu_pdl_wait() before it reads anything an
// earlier step wrote and before it writes anything: the wait returns when
// the whole previous grid has finished and its memory is visible. Only
// what never changes during a step (weights) may be read before it. Both
// are no-ops on older GPUs, without PDL and in the host emulator.
__device__ __forceinline__ void kcu_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void kcu_pdl_trigger(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether kcu_launch_pdl launches with the PDL attribute (k_runtime.cu).
bool kcu_pdl_on(void);

// kernel<<<grid, block, smem, st>>>(args...), with the programmatic stream
// serialization attribute when kcu_pdl_on(); then kcu_launched(name). Only
// for kernels that follow the rules above.
template <typename... P, typename... A>
static inline int kcu_launch_pdl(const char *name, void (*kernel)(P...), dim3 grid, dim3 block,
				 size_t smem, cudaStream_t st, A... args)
{
#ifdef AORTA_TESTS_EMU_EMU_CUDA_H
	emu_launch(grid, block, smem, st, name, 0, kernel, args...);
	return kcu_launched(name);
#else
	if (!kcu_pdl_on()) {
		kernel<<<grid, block, smem, st>>>(args...);
		return kcu_launched(name);
	}
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute attr[1];
	attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	attr[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = st;
	cfg.attrs = attr;
	cfg.numAttrs = 1;
	return kcu_check(cudaLaunchKernelEx(&cfg, kernel, args...), name);
#endif
}

static inline bool kcu_is_16bit_or_f32(enum dtype dt)
{
	return dt == DT_F32 || dt == DT_F16 || dt == DT_BF16;
}

#endif
