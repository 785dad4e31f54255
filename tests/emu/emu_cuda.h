// tests/emu/emu_cuda.h — the device side of the CUDA emulator, force-included
// (-include) into every kernels/cuda/*.cu after cu2emu.py has rewritten its
// launches and dynamic shared arrays; compiled by the host C++ compiler
// against the CUDA toolkit headers (host __half / __nv_bfloat16 / fp8 code).
//
// Model: one CTA at a time, one fiber per CUDA thread (emu_rt.cpp). A fiber
// runs until it reaches a block barrier or a warp collective; the scheduler
// releases a barrier when every thread of the CTA waits on it, a collective
// when every lane of its mask waits on one with the same mask and kind, and
// stops the program with "emu: ..." on anything undefined (a barrier some
// threads left early, a full-mask collective in a partial warp, a deadlock,
// launch limits). Atomics are plain read-modify-writes (one OS thread runs
// all fibers). `__shared__` variables are function statics (shared by every
// fiber; they keep their values from one CTA to the next); dynamic shared
// memory is fresh per CTA and filled with 0xff (NaN) bytes.
#ifndef AORTA_TESTS_EMU_EMU_CUDA_H
#define AORTA_TESTS_EMU_EMU_CUDA_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __noinline__
#undef __shared__
#undef __constant__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __shared__ static
#define __constant__ static
#define __launch_bounds__(...)

// ---- per-fiber identity ------------------------------------------------------

struct emu_ids {
	uint3 thread, block;
	dim3 block_dim, grid_dim;
};
extern thread_local emu_ids emu_id;
#define threadIdx (emu_id.thread)
#define blockIdx (emu_id.block)
#define blockDim (emu_id.block_dim)
#define gridDim (emu_id.grid_dim)
static const int warpSize = 32;

// Dynamic shared memory of the running CTA (16-byte aligned, 0xff-filled).
void *emu_dyn_smem(void);

// ---- barriers and warp collectives (emu_rt.cpp) ------------------------------

enum emu_bar_op { EMU_BAR_SYNC, EMU_BAR_OR, EMU_BAR_AND, EMU_BAR_COUNT };
int emu_barrier(enum emu_bar_op op, int pred);

enum emu_warp_op {
	EMU_W_SYNC,
	EMU_W_IDX,
	EMU_W_UP,
	EMU_W_DOWN,
	EMU_W_XOR,
	EMU_W_BALLOT,
	EMU_W_ANY,
	EMU_W_ALL,
	EMU_W_MATCH_ANY,
	EMU_W_MATCH_ALL,
};
// The lane waits until every lane of mask calls this with the same op and
// mask; returns the lane's result (a value, a lane mask or a predicate).
uint64_t emu_warp(enum emu_warp_op op, unsigned mask, uint64_t v, int param, int width);

inline void __syncthreads(void)
{
	emu_barrier(EMU_BAR_SYNC, 0);
}
inline int __syncthreads_or(int p)
{
	return emu_barrier(EMU_BAR_OR, p);
}
inline int __syncthreads_and(int p)
{
	return emu_barrier(EMU_BAR_AND, p);
}
inline int __syncthreads_count(int p)
{
	return emu_barrier(EMU_BAR_COUNT, p);
}
inline void __syncwarp(unsigned mask = 0xffffffffu)
{
	emu_warp(EMU_W_SYNC, mask, 0, 0, 32);
}
inline void __threadfence_block(void) {}
inline void __threadfence(void) {}

template <typename T> inline uint64_t emu_bits(T v)
{
	static_assert(sizeof(T) <= 8, "emu: shuffles of more than 8 bytes");
	uint64_t u = 0;
	memcpy(&u, &v, sizeof v);
	return u;
}
template <typename T> inline T emu_unbits(uint64_t u)
{
	T v;
	memcpy(&v, &u, sizeof v);
	return v;
}
template <typename T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
	return emu_unbits<T>(emu_warp(EMU_W_IDX, mask, emu_bits(v), src, width));
}
template <typename T> inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32)
{
	return emu_unbits<T>(emu_warp(EMU_W_UP, mask, emu_bits(v), (int)d, width));
}
template <typename T> inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32)
{
	return emu_unbits<T>(emu_warp(EMU_W_DOWN, mask, emu_bits(v), (int)d, width));
}
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32)
{
	return emu_unbits<T>(emu_warp(EMU_W_XOR, mask, emu_bits(v), m, width));
}
inline unsigned __ballot_sync(unsigned mask, int p)
{
	return (unsigned)emu_warp(EMU_W_BALLOT, mask, p != 0, 0, 32);
}
inline int __any_sync(unsigned mask, int p)
{
	return (int)emu_warp(EMU_W_ANY, mask, p != 0, 0, 32);
}
inline int __all_sync(unsigned mask, int p)
{
	return (int)emu_warp(EMU_W_ALL, mask, p != 0, 0, 32);
}
template <typename T> inline unsigned __match_any_sync(unsigned mask, T v)
{
	return (unsigned)emu_warp(EMU_W_MATCH_ANY, mask, emu_bits(v), 0, 32);
}
template <typename T> inline unsigned __match_all_sync(unsigned mask, T v, int *pred)
{
	unsigned r = (unsigned)emu_warp(EMU_W_MATCH_ALL, mask, emu_bits(v), 0, 32);
	*pred = r != 0;
	return r;
}
unsigned emu_activemask(void);
inline unsigned __activemask(void)
{
	return emu_activemask();
}

// ---- atomics: plain read-modify-write (fibers never interleave inside) -------

template <typename T> inline T atomicAdd(T *p, T v)
{
	T o = *p;
	*p = o + v;
	return o;
}
template <typename T> inline T atomicSub(T *p, T v)
{
	T o = *p;
	*p = o - v;
	return o;
}
template <typename T> inline T atomicExch(T *p, T v)
{
	T o = *p;
	*p = v;
	return o;
}
template <typename T> inline T atomicMin(T *p, T v)
{
	T o = *p;
	*p = v < o ? v : o;
	return o;
}
template <typename T> inline T atomicMax(T *p, T v)
{
	T o = *p;
	*p = v > o ? v : o;
	return o;
}
template <typename T> inline T atomicAnd(T *p, T v)
{
	T o = *p;
	*p = o & v;
	return o;
}
template <typename T> inline T atomicOr(T *p, T v)
{
	T o = *p;
	*p = o | v;
	return o;
}
template <typename T> inline T atomicXor(T *p, T v)
{
	T o = *p;
	*p = o ^ v;
	return o;
}
template <typename T> inline T atomicCAS(T *p, T cmp, T v)
{
	T o = *p;
	if (o == cmp)
		*p = v;
	return o;
}
inline unsigned atomicInc(unsigned *p, unsigned lim)
{
	unsigned o = *p;
	*p = o >= lim ? 0 : o + 1;
	return o;
}

// ---- integer and float intrinsics --------------------------------------------

inline int __popc(unsigned x)
{
	return __builtin_popcount(x);
}
inline int __popcll(unsigned long long x)
{
	return __builtin_popcountll(x);
}
inline int __clz(int x)
{
	return x ? __builtin_clz((unsigned)x) : 32;
}
inline int __clzll(long long x)
{
	return x ? __builtin_clzll((unsigned long long)x) : 64;
}
inline int __ffs(int x)
{
	return __builtin_ffs(x);
}
inline int __ffsll(long long x)
{
	return __builtin_ffsll(x);
}
inline unsigned __brev(unsigned x)
{
	unsigned r = 0;
	for (int i = 0; i < 32; i++)
		r |= ((x >> i) & 1u) << (31 - i);
	return r;
}
// PTX prmt: result byte i = byte s[4i+2:4i] of the 8 bytes {y, x} (x low).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s)
{
	uint64_t b = ((uint64_t)y << 32) | x;
	unsigned r = 0;
	for (int i = 0; i < 4; i++)
		r |= (unsigned)((b >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
	return r;
}
inline float __uint_as_float(unsigned u)
{
	return emu_unbits<float>(u);
}
inline unsigned __float_as_uint(float f)
{
	return (unsigned)emu_bits(f);
}
inline float __int_as_float(int u)
{
	return emu_unbits<float>((unsigned)u);
}
inline int __float_as_int(float f)
{
	return (int)(unsigned)emu_bits(f);
}
inline double __longlong_as_double(long long u)
{
	return emu_unbits<double>((uint64_t)u);
}
inline long long __double_as_longlong(double d)
{
	return (long long)emu_bits(d);
}
inline int __float2int_rn(float f)
{
	return (int)nearbyintf(f);
}
inline int __float2int_rz(float f)
{
	return (int)f;
}
inline int __float2int_rd(float f)
{
	return (int)floorf(f);
}
inline int __float2int_ru(float f)
{
	return (int)ceilf(f);
}
inline unsigned __float2uint_rn(float f)
{
	return (unsigned)nearbyintf(f);
}
inline float __int2float_rn(int i)
{
	return (float)i;
}
// The _rn arithmetic is IEEE round-to-nearest, as on the host.
inline float __fadd_rn(float a, float b)
{
	return a + b;
}
inline float __fsub_rn(float a, float b)
{
	return a - b;
}
inline float __fmul_rn(float a, float b)
{
	return a * b;
}
inline float __fdiv_rn(float a, float b)
{
	return a / b;
}
inline float __frcp_rn(float a)
{
	return 1.0f / a;
}
inline float __fsqrt_rn(float a)
{
	return sqrtf(a);
}
inline float __fmaf_rn(float a, float b, float c)
{
	return fmaf(a, b, c);
}
inline double __dadd_rn(double a, double b)
{
	return a + b;
}
inline double __dmul_rn(double a, double b)
{
	return a * b;
}
// The fast approximations: exact host functions (the device's are within a
// few ulp; tests must tolerate that anyway).
inline float __expf(float x)
{
	return expf(x);
}
inline float __exp10f(float x)
{
	return exp10f(x);
}
inline float __logf(float x)
{
	return logf(x);
}
inline float __log2f(float x)
{
	return log2f(x);
}
inline float __sinf(float x)
{
	return sinf(x);
}
inline float __cosf(float x)
{
	return cosf(x);
}
inline void __sincosf(float x, float *s, float *c)
{
	*s = sinf(x);
	*c = cosf(x);
}
inline float __powf(float a, float b)
{
	return powf(a, b);
}
inline float __fdividef(float a, float b)
{
	return a / b;
}
inline float __saturatef(float x)
{
	return x != x ? 0.0f : x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x;
}
inline float rsqrtf(float x)
{
	return 1.0f / sqrtf(x);
}
inline double rsqrt(double x)
{
	return 1.0 / sqrt(x);
}
inline float __frsqrt_rn(float x)
{
	return 1.0f / sqrtf(x);
}
template <typename T> inline T __ldg(const T *p)
{
	return *p;
}
template <typename T> inline T __ldcs(const T *p)
{
	return *p;
}
template <typename T> inline T __ldcg(const T *p)
{
	return *p;
}
template <typename T> inline void __stcs(T *p, T v)
{
	*p = v;
}

// min / max overloads of CUDA's math_functions.hpp (host code has none).
inline int min(int a, int b)
{
	return (int)a < (int)b ? (int)a : (int)b;
}
inline unsigned int min(unsigned int a, unsigned int b)
{
	return (unsigned int)a < (unsigned int)b ? (unsigned int)a : (unsigned int)b;
}
inline unsigned int min(int a, unsigned int b)
{
	return (unsigned int)a < (unsigned int)b ? (unsigned int)a : (unsigned int)b;
}
inline unsigned int min(unsigned int a, int b)
{
	return (unsigned int)a < (unsigned int)b ? (unsigned int)a : (unsigned int)b;
}
inline long min(long a, long b)
{
	return (long)a < (long)b ? (long)a : (long)b;
}
inline unsigned long min(unsigned long a, unsigned long b)
{
	return (unsigned long)a < (unsigned long)b ? (unsigned long)a : (unsigned long)b;
}
inline unsigned long min(long a, unsigned long b)
{
	return (unsigned long)a < (unsigned long)b ? (unsigned long)a : (unsigned long)b;
}
inline unsigned long min(unsigned long a, long b)
{
	return (unsigned long)a < (unsigned long)b ? (unsigned long)a : (unsigned long)b;
}
inline long long min(long long a, long long b)
{
	return (long long)a < (long long)b ? (long long)a : (long long)b;
}
inline unsigned long long min(unsigned long long a, unsigned long long b)
{
	return (unsigned long long)a < (unsigned long long)b ? (unsigned long long)a : (unsigned long long)b;
}
inline unsigned long long min(long long a, unsigned long long b)
{
	return (unsigned long long)a < (unsigned long long)b ? (unsigned long long)a : (unsigned long long)b;
}
inline unsigned long long min(unsigned long long a, long long b)
{
	return (unsigned long long)a < (unsigned long long)b ? (unsigned long long)a : (unsigned long long)b;
}
inline float min(float a, float b)
{
	return (float)a < (float)b ? (float)a : (float)b;
}
inline double min(double a, double b)
{
	return (double)a < (double)b ? (double)a : (double)b;
}
inline double min(float a, double b)
{
	return (double)a < (double)b ? (double)a : (double)b;
}
inline double min(double a, float b)
{
	return (double)a < (double)b ? (double)a : (double)b;
}
inline int max(int a, int b)
{
	return (int)a > (int)b ? (int)a : (int)b;
}
inline unsigned int max(unsigned int a, unsigned int b)
{
	return (unsigned int)a > (unsigned int)b ? (unsigned int)a : (unsigned int)b;
}
inline unsigned int max(int a, unsigned int b)
{
	return (unsigned int)a > (unsigned int)b ? (unsigned int)a : (unsigned int)b;
}
inline unsigned int max(unsigned int a, int b)
{
	return (unsigned int)a > (unsigned int)b ? (unsigned int)a : (unsigned int)b;
}
inline long max(long a, long b)
{
	return (long)a > (long)b ? (long)a : (long)b;
}
inline unsigned long max(unsigned long a, unsigned long b)
{
	return (unsigned long)a > (unsigned long)b ? (unsigned long)a : (unsigned long)b;
}
inline unsigned long max(long a, unsigned long b)
{
	return (unsigned long)a > (unsigned long)b ? (unsigned long)a : (unsigned long)b;
}
inline unsigned long max(unsigned long a, long b)
{
	return (unsigned long)a > (unsigned long)b ? (unsigned long)a : (unsigned long)b;
}
inline long long max(long long a, long long b)
{
	return (long long)a > (long long)b ? (long long)a : (long long)b;
}
inline unsigned long long max(unsigned long long a, unsigned long long b)
{
	return (unsigned long long)a > (unsigned long long)b ? (unsigned long long)a : (unsigned long long)b;
}
inline unsigned long long max(long long a, unsigned long long b)
{
	return (unsigned long long)a > (unsigned long long)b ? (unsigned long long)a : (unsigned long long)b;
}
inline unsigned long long max(unsigned long long a, long long b)
{
	return (unsigned long long)a > (unsigned long long)b ? (unsigned long long)a : (unsigned long long)b;
}
inline float max(float a, float b)
{
	return (float)a > (float)b ? (float)a : (float)b;
}
inline double max(double a, double b)
{
	return (double)a > (double)b ? (double)a : (double)b;
}
inline double max(float a, double b)
{
	return (double)a > (double)b ? (double)a : (double)b;
}
inline double max(double a, float b)
{
	return (double)a > (double)b ? (double)a : (double)b;
}

// ---- warp matrix multiply-accumulate: nvcuda::wmma (<mma.h>) -------------------
//
// m16n16k16 with __half / __nv_bfloat16 inputs and float accumulators. CUDA
// leaves the fragment's element mapping unspecified; here each use maps
// differently, so a kernel that assumes a mapping or mixes fragments of
// different uses element-wise gets wrong numbers: element t of lane l is
// tile element i = 8 l + t in row-major order for a ((row, k)), in
// column-major order for b ((k, col)), and i = 32 t + l in row-major order
// for the accumulator. Fragments of one type map alike, so element-wise
// work between them is legal (as on the device). load/store/mma are warp-wide:
// every lane of a full warp must call the same one with the same pointer,
// ldm and layout (checked); pointers 32-byte aligned, ldm a multiple of 16
// bytes (checked). mma sums in F32 in k order (products of 16-bit values are
// exact in F32). fill_fragment is per lane.

// Every lane of the calling warp (a full warp) calls this with the same kind
// and fn; the last to arrive runs fn with all 32 lanes' arg, then all go on.
void emu_warp_exec(int kind, void *arg, void (*fn)(void *args[32]));
[[noreturn]] void emu_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
	static_assert(M == 16 && N == 16 && K == 16, "emu: wmma m16n16k16 only");
	static_assert(std::is_same<Use, accumulator>::value
			      ? std::is_same<T, float>::value && std::is_void<Layout>::value
			      : (std::is_same<T, __half>::value ||
				 std::is_same<T, __nv_bfloat16>::value) &&
					(std::is_same<Layout, row_major>::value ||
					 std::is_same<Layout, col_major>::value),
		      "emu: wmma fragments of __half / __nv_bfloat16 (a, b) and float (accumulator)");
	typedef T element_type;
	typedef T storage_element_type;
	static const int num_elements = 8;
	T x[8];
};

template <typename Use, int M, int N, int K, typename T, typename L, typename V>
inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, const V &v)
{
	for (int i = 0; i < 8; i++)
		f.x[i] = (T)v;
}

} // namespace wmma
} // namespace nvcuda

inline float emu_wmma_f(float v)
{
	return v;
}
inline float emu_wmma_f(__half v)
{
	return __half2float(v);
}
inline float emu_wmma_f(__nv_bfloat16 v)
{
	return __bfloat162float(v);
}

// One lane's part of a load or store: its fragment and the (shared) address.
struct emu_wmma_mem {
	void *frag;
	const void *ptr;
	unsigned ldm;
	bool col; // column-major memory
};

// Checks that every lane passed the same address, ldm and layout, and the
// alignment wmma requires; elem: bytes per element in memory.
inline void emu_wmma_check(void *args[32], size_t elem, const char *what)
{
	const emu_wmma_mem *m0 = (const emu_wmma_mem *)args[0];
	for (int l = 1; l < 32; l++) {
		const emu_wmma_mem *m = (const emu_wmma_mem *)args[l];
		if (m->ptr != m0->ptr || m->ldm != m0->ldm || m->col != m0->col)
			emu_fatal("%s: lanes 0 and %d pass different pointers, ldm or layouts", what, l);
	}
	if ((uintptr_t)m0->ptr % 32)
		emu_fatal("%s: pointer %p not 32-byte aligned", what, m0->ptr);
	if ((m0->ldm * elem) % 16 || m0->ldm < 16)
		emu_fatal("%s: ldm %u elements is not a multiple of 16 bytes (or < 16)", what,
			  m0->ldm);
}

// Memory offset of tile element (r, c).
inline size_t emu_wmma_at(const emu_wmma_mem *m, int r, int c)
{
	return m->col ? (size_t)c * m->ldm + r : (size_t)r * m->ldm + c;
}

// The tile element (*r, *c) that element t of lane l holds; use: 0 a, 1 b,
// 2 accumulator (see above).
inline void emu_wmma_pos(int use, int l, int t, int *r, int *c)
{
	const int i = use == 2 ? 32 * t + l : 8 * l + t;
	*r = use == 1 ? i % 16 : i / 16;
	*c = use == 1 ? i / 16 : i % 16;
}

template <typename T, int USE> void emu_wmma_load(void *args[32])
{
	emu_wmma_check(args, sizeof(T), "wmma::load_matrix_sync");
	for (int l = 0; l < 32; l++) {
		const emu_wmma_mem *m = (const emu_wmma_mem *)args[l];
		T *x = (T *)m->frag;
		for (int t = 0; t < 8; t++) {
			int r, c;
			emu_wmma_pos(USE, l, t, &r, &c);
			x[t] = ((const T *)m->ptr)[emu_wmma_at(m, r, c)];
		}
	}
}

inline void emu_wmma_store(void *args[32])
{
	emu_wmma_check(args, sizeof(float), "wmma::store_matrix_sync");
	for (int l = 0; l < 32; l++) {
		const emu_wmma_mem *m = (const emu_wmma_mem *)args[l];
		const float *x = (const float *)m->frag;
		for (int t = 0; t < 8; t++) {
			int r, c;
			emu_wmma_pos(2, l, t, &r, &c);
			((float *)m->ptr)[emu_wmma_at(m, r, c)] = x[t];
		}
	}
}

namespace nvcuda {
namespace wmma {

template <typename Use, typename T, typename L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm)
{
	static_assert(!std::is_same<Use, accumulator>::value, "emu: accumulator loads take a layout");
	emu_wmma_mem m = {f.x, p, ldm, std::is_same<L, col_major>::value};
	emu_warp_exec(1, &m, emu_wmma_load<T, std::is_same<Use, matrix_a>::value ? 0 : 1>);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
			     unsigned ldm, layout_t layout)
{
	emu_wmma_mem m = {f.x, p, ldm, layout == mem_col_major};
	emu_warp_exec(2, &m, emu_wmma_load<float, 2>);
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
			      unsigned ldm, layout_t layout)
{
	emu_wmma_mem m = {(void *)f.x, p, ldm, layout == mem_col_major};
	emu_warp_exec(3, &m, emu_wmma_store);
}

} // namespace wmma
} // namespace nvcuda

// One lane's part of an mma: its fragments (d may be c).
struct emu_wmma_mma {
	void *d;
	const void *a, *b, *c;
};

template <typename T> void emu_wmma_mma_run(void *args[32])
{
	float A[16][16], B[16][16], D[16][16];
	for (int l = 0; l < 32; l++) {
		const emu_wmma_mma *m = (const emu_wmma_mma *)args[l];
		for (int t = 0; t < 8; t++) {
			int r, c;
			emu_wmma_pos(0, l, t, &r, &c);
			A[r][c] = emu_wmma_f(((const T *)m->a)[t]);
			emu_wmma_pos(1, l, t, &r, &c);
			B[r][c] = emu_wmma_f(((const T *)m->b)[t]);
			emu_wmma_pos(2, l, t, &r, &c);
			D[r][c] = ((const float *)m->c)[t];
		}
	}
	float R[16][16];
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 16; j++) {
			float s = D[i][j];
			for (int k = 0; k < 16; k++)
				s += A[i][k] * B[k][j];
			R[i][j] = s;
		}
	for (int l = 0; l < 32; l++) {
		float *d = (float *)((const emu_wmma_mma *)args[l])->d;
		for (int t = 0; t < 8; t++) {
			int r, c;
			emu_wmma_pos(2, l, t, &r, &c);
			d[t] = R[r][c];
		}
	}
}

namespace nvcuda {
namespace wmma {

template <typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
		     const fragment<matrix_a, 16, 16, 16, T, LA> &a,
		     const fragment<matrix_b, 16, 16, 16, T, LB> &b,
		     const fragment<accumulator, 16, 16, 16, float> &c)
{
	emu_wmma_mma m = {d.x, a.x, b.x, c.x};
	emu_warp_exec(4, &m, emu_wmma_mma_run<T>);
}

} // namespace wmma
} // namespace nvcuda

// ---- mma.sync m16n8k16 and ldmatrix x4 (kernels/cuda/kcuda_mma.h) --------------
//
// The per-lane layouts PTX documents (kcuda_mma.h repeats them), each a
// warp-wide step like wmma: every lane of a full warp calls with the same
// kind. mma sums in F32 in k order; ldmatrix checks that each lane's row
// address is 16-byte aligned and that all lanes agree on trans.

struct emu_mma_arg {
	float *d;
	const uint32_t *a, *b;
	const float *c;
	bool bf;
};

inline float emu_mma_half(uint32_t r, int hi, bool bf)
{
	const unsigned short u = (unsigned short)(hi ? r >> 16 : r & 0xffffu);
	if (bf) {
		__nv_bfloat16_raw x;
		x.x = u;
		return __bfloat162float(__nv_bfloat16(x));
	}
	__half_raw x;
	x.x = u;
	return __half2float(__half(x));
}

inline void emu_mma_run(void *args[32])
{
	float A[16][16], B[16][8], C[16][8];
	const bool bf = ((const emu_mma_arg *)args[0])->bf;
	for (int l = 0; l < 32; l++) {
		const emu_mma_arg *m = (const emu_mma_arg *)args[l];
		if (m->bf != bf)
			emu_fatal("mma.sync: lanes 0 and %d pass different types", l);
		const int g = l / 4, t = l % 4;
		for (int e = 0; e < 2; e++) {
			A[g][2 * t + e] = emu_mma_half(m->a[0], e, bf);
			A[g + 8][2 * t + e] = emu_mma_half(m->a[1], e, bf);
			A[g][2 * t + 8 + e] = emu_mma_half(m->a[2], e, bf);
			A[g + 8][2 * t + 8 + e] = emu_mma_half(m->a[3], e, bf);
			B[2 * t + e][g] = emu_mma_half(m->b[0], e, bf);
			B[2 * t + 8 + e][g] = emu_mma_half(m->b[1], e, bf);
			C[g][2 * t + e] = m->c[e];
			C[g + 8][2 * t + e] = m->c[2 + e];
		}
	}
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 8; j++) {
			float s = C[i][j];
			for (int k = 0; k < 16; k++)
				s += A[i][k] * B[k][j];
			C[i][j] = s;
		}
	for (int l = 0; l < 32; l++) {
		float *d = ((const emu_mma_arg *)args[l])->d;
		const int g = l / 4, t = l % 4;
		d[0] = C[g][2 * t];
		d[1] = C[g][2 * t + 1];
		d[2] = C[g + 8][2 * t];
		d[3] = C[g + 8][2 * t + 1];
	}
}

inline void emu_mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4],
			  bool bf)
{
	emu_mma_arg m = {d, a, b, c, bf};
	emu_warp_exec(5, &m, emu_mma_run);
}

struct emu_ldsm_arg {
	uint32_t *r;
	const void *row;
	bool trans;
};

inline void emu_ldsm_run(void *args[32])
{
	unsigned short M[4][8][8]; // matrix, row, column
	const bool trans = ((const emu_ldsm_arg *)args[0])->trans;
	for (int l = 0; l < 32; l++) {
		const emu_ldsm_arg *m = (const emu_ldsm_arg *)args[l];
		if (m->trans != trans)
			emu_fatal("ldmatrix: lanes 0 and %d disagree on .trans", l);
		if ((uintptr_t)m->row % 16)
			emu_fatal("ldmatrix: lane %d row address %p not 16-byte aligned", l, m->row);
		memcpy(M[l / 8][l % 8], m->row, 16);
	}
	uint32_t R[32][4];
	for (int l = 0; l < 32; l++)
		for (int i = 0; i < 4; i++) {
			unsigned short lo, hi;
			if (trans) {
				lo = M[i][2 * (l % 4)][l / 4];
				hi = M[i][2 * (l % 4) + 1][l / 4];
			} else {
				lo = M[i][l / 4][2 * (l % 4)];
				hi = M[i][l / 4][2 * (l % 4) + 1];
			}
			R[l][i] = (uint32_t)lo | ((uint32_t)hi << 16);
		}
	for (int l = 0; l < 32; l++)
		memcpy(((const emu_ldsm_arg *)args[l])->r, R[l], sizeof R[l]);
}

inline void emu_ldsm4(uint32_t r[4], const void *row, bool trans)
{
	emu_ldsm_arg m = {r, row, trans};
	emu_warp_exec(6, &m, emu_ldsm_run);
}

// cuda_runtime.h's C++ overload (declared for nvcc only): a kernel by name.
template <typename T> inline cudaError_t cudaFuncSetAttribute(T *entry, cudaFuncAttribute attr, int v)
{
	return cudaFuncSetAttribute((const void *)entry, attr, v);
}

// ---- launches ----------------------------------------------------------------

// Runs (or, on a capturing stream, records) grid x block CTAs of body.
// max_threads: the kernel's __launch_bounds__ (0: none). Sets the error
// cudaGetLastError returns when the configuration is invalid.
void emu_submit(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const char *name,
		const void *func, int max_threads, std::function<void()> body);

// The type of parameter I of kernel pointer type K.
template <typename K, size_t I> struct emu_param;
template <typename... P, size_t I> struct emu_param<void (*)(P...), I> {
	typedef typename std::decay<typename std::tuple_element<I, std::tuple<P...>>::type>::type
		type;
};
template <typename K, size_t I> using emu_param_t = typename emu_param<K, I>::type;

// cu2emu.py turns k<<<g, b, smem, stream>>>(args...) into this call, each
// argument already converted to its parameter's type. As on the device, the
// arguments are copied at launch time (a captured graph replays the copies).
template <typename... P, typename... A>
inline void emu_launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const char *name,
		       int max_threads, void (*kernel)(P...), A &&...args)
{
	static_assert(sizeof...(P) == sizeof...(A), "emu: kernel argument count");
	std::tuple<typename std::decay<P>::type...> t(std::forward<A>(args)...);
	emu_submit(grid, block, smem, stream, name, (const void *)kernel, max_threads,
		   [kernel, t]() { std::apply(kernel, t); });
}

#endif
