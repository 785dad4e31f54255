// kernels/cuda/kcuda_mma.h — warp-level tensor-core primitives with a known
// per-lane layout (device code only; include from .cu files):
//   kmma_16816   mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.f32
//   kmma_ldsm4   ldmatrix.sync.aligned.m8n8.x4.shared.b16 (and .trans)
//   kmma_cp16 / kmma_commit / kmma_wait<N>   cp.async.cg 16 bytes
// On the device these are inline PTX; in the host emulator (tests/emu, no
// __CUDA_ARCH__, emu_cuda.h included) the same per-lane semantics run as one
// warp-wide step (emu_mma_16816 / emu_ldsm4) and cp.async is a plain copy.
// Test: tests/kernels/test_cuda_mma.c (k_mma_selftest in k_attn.cu)
// checks the layout against plain matrix products, on the GPU and emulated.
//
// Layout (PTX ISA, "Matrix fragments for mma.m16n8k16"), g = lane / 4,
// t = lane % 4, each 32-bit register two 16-bit values, low half first:
//   A 16x16 row-major: a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..],
//                      a[2] = A[g][2t+8..],   a[3] = A[g+8][2t+8..]
//   B 16x8 (k x n):    b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]
//   C, D 16x8 F32:     c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1]
// ldmatrix x4: lane l passes the address of row l % 8 of 8x8 matrix l / 8
// (16 bytes, 16-byte aligned, shared memory); r[i] of lane l gets matrix i's
// row l / 4, columns 2 (l % 4) .. +1; with trans, matrix i's column l / 4,
// rows 2 (l % 4) .. +1.
#ifndef AORTA_KERNELS_CUDA_KCUDA_MMA_H
#define AORTA_KERNELS_CUDA_KCUDA_MMA_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

// d = a b + c (d may alias c); T: __nv_bfloat16 or __half. Every lane of a
// full warp, converged.
template <typename T>
__device__ __forceinline__ void kmma_16816(float d[4], const uint32_t a[4], const uint32_t b[2],
					   const float c[4])
{
#if defined(__CUDA_ARCH__)
	constexpr bool bf = std::is_same<T, __nv_bfloat16>::value;
	if (bf)
		asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
			     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
			     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
			     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
			       "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
	else
		asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
			     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
			     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
			     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
			       "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#elif defined(AORTA_TESTS_EMU_EMU_CUDA_H)
	emu_mma_16816(d, a, b, c, std::is_same<T, __nv_bfloat16>::value);
#endif
}

// Four 8x8 matrices of 16-bit values from shared memory (see the layout above).
template <bool TRANS> __device__ __forceinline__ void kmma_ldsm4(uint32_t r[4], const void *row)
{
#if defined(__CUDA_ARCH__)
	const unsigned s = (unsigned)__cvta_generic_to_shared(row);
	if (TRANS)
		asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
			     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
			     : "r"(s));
	else
		asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
			     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
			     : "r"(s));
#elif defined(AORTA_TESTS_EMU_EMU_CUDA_H)
	emu_ldsm4(r, row, TRANS);
#endif
}

// Asynchronous 16-byte copy global -> shared (both 16-byte aligned), complete
// after kmma_commit() and a kmma_wait<N>() that leaves at most N newer groups
// pending (then a barrier makes it visible to the other threads).
__device__ __forceinline__ void kmma_cp16(void *smem, const void *gmem)
{
#if defined(__CUDA_ARCH__)
	const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
#elif defined(AORTA_TESTS_EMU_EMU_CUDA_H)
	memcpy(smem, gmem, 16);
#endif
}

__device__ __forceinline__ void kmma_commit(void)
{
#if defined(__CUDA_ARCH__)
	asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int N> __device__ __forceinline__ void kmma_wait(void)
{
#if defined(__CUDA_ARCH__)
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// Two floats rounded to T and packed as one 32-bit register, x in the low half.
__device__ __forceinline__ uint32_t kmma_pack(float x, float y, const __nv_bfloat16 *)
{
	const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
	return *reinterpret_cast<const uint32_t *>(&h);
}
__device__ __forceinline__ uint32_t kmma_pack(float x, float y, const __half *)
{
	const __half2 h = __floats2half2_rn(x, y);
	return *reinterpret_cast<const uint32_t *>(&h);
}

#endif
