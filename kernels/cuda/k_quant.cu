// kernels/cuda/k_quant.cu — kcuda_quant.h: the 8-bit weight paths on the GPU.
//   k_gemv_w8     weight-only GEMV/skinny GEMM for decode (I8, F8 E4M3, Q8_0),
//   k_q8_0_repack, k_gemv_q8_0r  Q8_0 split into aligned codes + scales, and
//                 the same GEMV on that layout (16-byte loads, like I8),
//   k_quant_rows  per-token activation quantization (the CPU's rule),
//   k_gemm_w8a8   FP8 x FP8 and INT8 x INT8 GEMMs through cuBLASLt, with the
//                 per-token and per-channel scales applied in a small epilogue.
// Owns no state except a per-device "has FP8" cache. Launchers never
// synchronize. CPU counterparts: kernels/cpu/matmul_ref.c (kcpu_matmul_ref),
// matmul_qref.c, quant.c; test: tests/kernels/test_cuda_quant.c; benchmark:
// tests/bench/bench_cuda_quant.c.
#include <atomic>
#include <cublasLt.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "common/err.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_gemm.h"
#include "kernels/cuda/kcuda_internal.h"
#include "kernels/cuda/kcuda_quant.h"

// ---- dequantization in registers --------------------------------------------

// WK_Q8R: Q8_0 repacked by k_q8_0_repack (int8 rows + F16 block scales).
enum { WK_I8, WK_F8, WK_Q8, WK_Q8R };

// Eight F16 or BF16 values (a 16-byte load, lowest first) to floats.
__device__ __forceinline__ void load8(uint4 raw, enum dtype dt, float f[8])
{
	const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		float2 v;
		if (dt == DT_BF16) {
			__nv_bfloat162_raw r;
			r.x = (unsigned short)(w[i] & 0xFFFFu);
			r.y = (unsigned short)(w[i] >> 16);
			v = __bfloat1622float2(__nv_bfloat162(r));
		} else {
			__half2_raw r;
			r.x = (unsigned short)(w[i] & 0xFFFFu);
			r.y = (unsigned short)(w[i] >> 16);
			v = __half22float2(__half2(r));
		}
		f[2 * i] = v.x;
		f[2 * i + 1] = v.y;
	}
}

// ---- k_gemv_w8 ---------------------------------------------------------------
//
// One CTA = 8 warps; a warp owns RW consecutive output rows and a group of up
// to TG tokens (blockIdx.y). A warp step covers SB = 32 * SPAN weights of each
// of its rows: lane l takes SPAN consecutive bytes at l * SPAN (one 16-byte
// load for I8/F8, one 34-byte Q8_0 block read as 17 halfwords, since blocks
// are only 2-byte aligned), so a row is read once, coalesced. X [TG, chunk] is
// staged in shared memory as F32, permuted inside each SB block so that lane
// l's q-th group of 4 values sits at float4 index q * 32 + l: the float4
// reads of a warp are consecutive, free of bank conflicts. K is walked in
// chunks that fit 48 KB of shared memory; the tail of a chunk is zero-filled.

#define GEMV_THREADS     256
#define GEMV_WARPS       (GEMV_THREADS / 32)
#define GEMV_SMEM_FLOATS 12288 // 48 KB: no opt-in needed, 4 CTAs per SM

__host__ __device__ constexpr int gemv_span(int wk)
{
	return wk == WK_Q8 ? 32 : 16;
}
__host__ __device__ constexpr int gemv_rw(int tg)
{
	return tg <= 2 ? 2 : 4;
}
// Steps whose loads are issued together (more bytes in flight per thread).
__host__ __device__ constexpr int gemv_unroll(int wk, int tg)
{
	return tg <= 2 ? (wk == WK_Q8 ? 2 : 4) : (tg <= 8 && wk != WK_Q8 ? 2 : 1);
}

template <int WK, int TG>
__global__ void __launch_bounds__(GEMV_THREADS)
    gemv_w8_kernel(const uint8_t *__restrict__ w, const float *__restrict__ scale, int n_scales,
                   const unsigned short *__restrict__ wd16, int n, int k,
                   const void *__restrict__ x, enum dtype x_dt, int t, float *__restrict__ y,
                   int accumulate, int kc, int x_vec)
{
	constexpr int SPAN = gemv_span(WK);
	constexpr int SB = 32 * SPAN;
	constexpr int NQ = SPAN / 4; // words (and float4 of X) per lane per step
	constexpr int RW = gemv_rw(TG);
	constexpr int U = gemv_unroll(WK, TG);
	extern __shared__ float4 xs4[]; // [TG][kc / 4], permuted per SB block
	float *xs = (float *)xs4;

	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int t0 = blockIdx.y * TG;
	const int tn = min(TG, t - t0);
	const int row0 = (blockIdx.x * GEMV_WARPS + warp) * RW;
	const size_t row_bytes = WK == WK_Q8 ? (size_t)(k / 32) * 34 : (size_t)k;

	float acc[RW][TG];
#pragma unroll
	for (int r = 0; r < RW; r++)
#pragma unroll
		for (int tt = 0; tt < TG; tt++)
			acc[r][tt] = 0.0f;

	for (int kb = 0; kb < k; kb += kc) {
		const int klen = min(kc, k - kb);
		const int nsteps = (klen + SB - 1) / SB;
		const int kpad = nsteps * SB; // <= kc
		__syncthreads();              // the previous chunk's readers are done
		if (x_vec) {
			// 8 values per 16-byte load; klen is a multiple of SPAN, so a
			// vector is wholly inside or wholly past the chunk's end.
			const int nv = kpad / 8;
#pragma unroll 4
			for (int i = threadIdx.x; i < tn * nv; i += GEMV_THREADS) {
				const int tt = i / nv, j = (i - tt * nv) * 8;
				float f[8];
				if (j < klen) {
					const uint4 raw =
					    __ldg((const uint4 *)((const uint16_t *)x +
					                          (size_t)(t0 + tt) * k + kb + j));
					load8(raw, x_dt, f);
				} else {
#pragma unroll
					for (int e = 0; e < 8; e++)
						f[e] = 0.0f;
				}
				const int sb = j / SB, in = j - sb * SB;
				const int l = in / SPAN, q = (in - l * SPAN) / 4;
				float4 *o = xs4 + ((size_t)tt * kc + sb * SB) / 4 + l;
				o[q * 32] = make_float4(f[0], f[1], f[2], f[3]);
				o[(q + 1) * 32] = make_float4(f[4], f[5], f[6], f[7]);
			}
		} else {
#pragma unroll 4
			for (int i = threadIdx.x; i < tn * kpad; i += GEMV_THREADS) {
				const int tt = i / kpad, j = i - tt * kpad;
				const int sb = j / SB, in = j - sb * SB;
				const int l = in / SPAN, e = in - l * SPAN;
				const int pos = sb * SB + ((e >> 2) * 32 + l) * 4 + (e & 3);
				xs[(size_t)tt * kc + pos] =
				    j < klen ? kcu_load(x, x_dt, (size_t)(t0 + tt) * k + kb + j)
				             : 0.0f;
			}
		}
		__syncthreads();

		for (int s0 = 0; s0 < nsteps; s0 += U) {
			uint32_t wv[U][RW][NQ];
			float wd[U][RW]; // Q8_0 block scale
#pragma unroll
			for (int u = 0; u < U; u++) {
				const int j = (s0 + u) * SB + lane * SPAN; // >= klen past the end
#pragma unroll
				for (int r = 0; r < RW; r++) {
					const int row = row0 + r;
					wd[u][r] = 0.0f;
#pragma unroll
					for (int q = 0; q < NQ; q++)
						wv[u][r][q] = 0;
					if (row >= n || j >= klen)
						continue;
					const uint8_t *p = w + (size_t)row * row_bytes;
					if (WK == WK_Q8R) // two lanes per 32-block: one scale
						wd[u][r] = __half2float(__ushort_as_half(
						    __ldg(wd16 + (size_t)row * (k / 32) +
						          (kb + j) / 32)));
					if (WK == WK_Q8) {
						const unsigned short *b =
						    (const unsigned short *)(p + (size_t)((kb + j) /
						                                          32) *
						                                     34);
						wd[u][r] = __half2float(__ushort_as_half(__ldg(b)));
#pragma unroll
						for (int q = 0; q < NQ; q++)
							wv[u][r][q] =
							    (uint32_t)__ldg(b + 1 + 2 * q) |
							    ((uint32_t)__ldg(b + 2 + 2 * q) << 16);
					} else {
						const uint4 v = __ldg((const uint4 *)(p + kb + j));
						wv[u][r][0] = v.x;
						wv[u][r][1] = v.y;
						wv[u][r][2] = v.z;
						wv[u][r][3] = v.w;
					}
				}
			}
#pragma unroll
			for (int u = 0; u < U; u++) {
				if (s0 + u >= nsteps) // same for the whole CTA
					break;
				const float4 *xb = xs4 + (size_t)(s0 + u) * (SB / 4) + lane;
#pragma unroll
				for (int q = 0; q < NQ; q++) {
					float wf[RW][4];
#pragma unroll
					for (int r = 0; r < RW; r++) {
						if (WK == WK_F8)
							kcu_f8x4(wv[u][r][q], wf[r]);
						else
							kcu_i8x4(wv[u][r][q], wf[r]);
						if (WK == WK_Q8 || WK == WK_Q8R) {
#pragma unroll
							for (int e = 0; e < 4; e++)
								wf[r][e] *= wd[u][r];
						}
					}
#pragma unroll
					for (int tt = 0; tt < TG; tt++) {
						if (tt >= tn)
							break;
						const float4 xv =
						    xb[(size_t)tt * (kc / 4) + q * 32];
#pragma unroll
						for (int r = 0; r < RW; r++) {
							float a = acc[r][tt];
							a = fmaf(wf[r][0], xv.x, a);
							a = fmaf(wf[r][1], xv.y, a);
							a = fmaf(wf[r][2], xv.z, a);
							a = fmaf(wf[r][3], xv.w, a);
							acc[r][tt] = a;
						}
					}
				}
			}
		}
	}

	// Every lane of every warp gets here (no early exit above): full-mask sums.
#pragma unroll
	for (int r = 0; r < RW; r++) {
		const int row = row0 + r;
		float s = 1.0f;
		if ((WK == WK_I8 || WK == WK_F8) && scale && row < n)
			s = scale[n_scales == 1 ? 0 : row];
#pragma unroll
		for (int tt = 0; tt < TG; tt++) {
			const float v = kcu_warp_sum(acc[r][tt]) * s;
			if (lane == 0 && row < n && tt < tn) {
				float *o = y + (size_t)(t0 + tt) * n + row;
				*o = accumulate ? *o + v : v;
			}
		}
	}
}

template <int WK, int TG>
static int gemv_launch(cudaStream_t st, const void *d_w, const float *d_scale, int n_scales,
                       const void *d_wd, int n, int k, const void *d_x, enum dtype x_dt, int t,
                       float *d_y, int accumulate)
{
	constexpr int SB = 32 * gemv_span(WK);
	constexpr int RW = gemv_rw(TG);
	// Largest chunk that fits, then chunks of equal size (a multiple of SB).
	int kcmax = GEMV_SMEM_FLOATS / TG / SB * SB;
	if (kcmax < SB)
		kcmax = SB;
	const int nch = (k + kcmax - 1) / kcmax;
	const int per = (k + nch - 1) / nch;
	const int kc = (per + SB - 1) / SB * SB;
	const size_t smem = (size_t)TG * kc * sizeof(float);
	const unsigned gx = (unsigned)((n + GEMV_WARPS * RW - 1) / (GEMV_WARPS * RW));
	const unsigned gy = (unsigned)((t + TG - 1) / TG);
	if (gy > 65535)
		return ERR_UNSUPPORTED;
	// 16-byte loads of X: 16-bit values, rows (k a multiple of 16 here) and
	// chunk starts 16-byte aligned when d_x is.
	const int x_vec = x_dt != DT_F32 && ((uintptr_t)d_x & 15) == 0;
	gemv_w8_kernel<WK, TG><<<dim3(gx, gy), GEMV_THREADS, smem, st>>>(
	    (const uint8_t *)d_w, d_scale, n_scales, (const unsigned short *)d_wd, n, k, d_x, x_dt,
	    t, d_y, accumulate, kc, x_vec);
	return kcu_launched("k_gemv_w8");
}

template <int WK>
static int gemv_dispatch(cudaStream_t st, const void *d_w, const float *d_scale, int n_scales,
                         const void *d_wd, int n, int k, const void *d_x, enum dtype x_dt, int t,
                         float *d_y, int accumulate)
{
#define GEMV_LAUNCH(TG)                                                                            \
	gemv_launch<WK, TG>(st, d_w, d_scale, n_scales, d_wd, n, k, d_x, x_dt, t, d_y, accumulate)
	if (t == 1)
		return GEMV_LAUNCH(1);
	if (t == 2)
		return GEMV_LAUNCH(2);
	if (t <= 4)
		return GEMV_LAUNCH(4);
	// Q8_0 stops at 8 tokens per group: 8 x 1024 F32 of X is the 32 KB chunk.
	if (t <= 8 || WK == WK_Q8)
		return GEMV_LAUNCH(8);
	return GEMV_LAUNCH(WK == WK_Q8 ? 8 : 16);
#undef GEMV_LAUNCH
}

extern "C" int k_gemv_w8(void *stream, const void *d_w, enum dtype w_dt, const float *d_scale,
                         int n_scales, int n, int k, const void *d_x, enum dtype x_dt, int t,
                         float *d_y, int accumulate)
{
	if (!d_w || !d_x || !d_y || n <= 0 || k <= 0 || t <= 0)
		return ERR_INVAL;
	if (!kcu_is_16bit_or_f32(x_dt))
		return ERR_INVAL;
	cudaStream_t st = (cudaStream_t)stream;
	if (w_dt == DT_Q8_0) {
		if (k % 32 || ((uintptr_t)d_w & 1))
			return ERR_INVAL;
		return gemv_dispatch<WK_Q8>(st, d_w, NULL, 0, NULL, n, k, d_x, x_dt, t, d_y,
		                            accumulate);
	}
	if (w_dt != DT_I8 && w_dt != DT_F8_E4M3)
		return ERR_UNSUPPORTED;
	if (d_scale && n_scales != 1 && n_scales != n)
		return ERR_INVAL;
	// 16-byte loads of every row: rows start at multiples of k bytes.
	if (k % 16 || ((uintptr_t)d_w & 15))
		return ERR_UNSUPPORTED;
	if (w_dt == DT_I8)
		return gemv_dispatch<WK_I8>(st, d_w, d_scale, n_scales, NULL, n, k, d_x, x_dt, t,
		                            d_y, accumulate);
	return gemv_dispatch<WK_F8>(st, d_w, d_scale, n_scales, NULL, n, k, d_x, x_dt, t, d_y,
	                            accumulate);
}

extern "C" int k_gemv_q8_0r(void *stream, const void *d_qs, const void *d_d, int n, int k,
                            const void *d_x, enum dtype x_dt, int t, float *d_y, int accumulate)
{
	if (!d_qs || !d_d || !d_x || !d_y || n <= 0 || k <= 0 || t <= 0 || k % 32)
		return ERR_INVAL;
	if (!kcu_is_16bit_or_f32(x_dt) || ((uintptr_t)d_qs & 15) || ((uintptr_t)d_d & 1))
		return ERR_INVAL;
	return gemv_dispatch<WK_Q8R>((cudaStream_t)stream, d_qs, NULL, 0, d_d, n, k, d_x, x_dt, t,
	                             d_y, accumulate);
}

// One thread per 34-byte block: the F16 scale to d, the 32 codes to qs
// (two 16-byte stores; qs + 32 * block is 16-byte aligned).
__global__ void q8_0_repack_kernel(const unsigned short *__restrict__ src, size_t n_blocks,
                                   uint4 *__restrict__ qs, unsigned short *__restrict__ d)
{
	for (size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x; b < n_blocks;
	     b += (size_t)gridDim.x * blockDim.x) {
		const unsigned short *p = src + b * 17;
		uint32_t v[8];
#pragma unroll
		for (int i = 0; i < 8; i++)
			v[i] = (uint32_t)p[1 + 2 * i] | ((uint32_t)p[2 + 2 * i] << 16);
		d[b] = p[0];
		qs[2 * b] = make_uint4(v[0], v[1], v[2], v[3]);
		qs[2 * b + 1] = make_uint4(v[4], v[5], v[6], v[7]);
	}
}

extern "C" int k_q8_0_repack(void *stream, const void *d_src, int n, int k, void *d_qs, void *d_d)
{
	if (!d_src || !d_qs || !d_d || n <= 0 || k <= 0 || k % 32)
		return ERR_INVAL;
	if (((uintptr_t)d_src & 1) || ((uintptr_t)d_qs & 15) || ((uintptr_t)d_d & 1))
		return ERR_INVAL;
	const size_t n_blocks = (size_t)n * (k / 32);
	size_t grid = (n_blocks + 255) / 256;
	if (grid > 65535)
		grid = 65535;
	q8_0_repack_kernel<<<(unsigned)grid, 256, 0, (cudaStream_t)stream>>>(
	    (const unsigned short *)d_src, n_blocks, (uint4 *)d_qs, (unsigned short *)d_d);
	return kcu_launched("k_q8_0_repack");
}

// ---- k_quant_rows ------------------------------------------------------------
//
// One CTA per token row: block amax, then the CPU's exact arithmetic
// (kernels/cpu/quant.c): INT8 s = amax / 127, q = rint(clamp(x * (1 / s)))
// with NaN -> -127 and s = 0 -> all codes 0; FP8 s = amax / 448,
// q = fp8(x * (1 / s)) (round to nearest even, saturating), s = 0 -> codes 0.
// The __f*_rn intrinsics keep every operation IEEE-rounded (no contraction,
// whatever the fast-math flags).

// ---- dequantize to 16 bits (weight-only dequantizing GEMM) -----------------------

__global__ void dequant_w8_kernel(const uint8_t *__restrict__ w, enum dtype w_dt,
				  const float *__restrict__ scale, int n_scales,
				  const __half *__restrict__ q8d, int k, size_t total, void *out,
				  enum dtype out_dt)
{
	const size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
		const size_t row = i / (size_t)k, col = i % (size_t)k;
		float v;
		if (w_dt == DT_F8_E4M3) {
			__half_raw hr = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)w[i], __NV_E4M3);
			v = __half2float(__half(hr));
		} else {
			v = (float)(int8_t)w[i];
		}
		if (w_dt == DT_Q8_0)
			v = __fmul_rn(v, __half2float(q8d[row * (size_t)(k / 32) + col / 32]));
		else if (scale)
			v = __fmul_rn(v, scale[n_scales == 1 ? 0 : row]);
		kcu_store(out, out_dt, i, v);
	}
}

extern "C" int k_dequant_w8(void *stream, const void *d_w, enum dtype w_dt, const float *d_scale,
			    int n_scales, const void *d_q8_d, int n, int k, void *d_out,
			    enum dtype out_dt)
{
	if (!d_w || !d_out || n <= 0 || k <= 0)
		return ERR_INVAL;
	if (!(w_dt == DT_I8 || w_dt == DT_F8_E4M3 || w_dt == DT_Q8_0) ||
	    !kcu_is_16bit_or_f32(out_dt))
		return ERR_UNSUPPORTED;
	if (w_dt == DT_Q8_0 ? (!d_q8_d || k % 32) : (d_scale && n_scales != 1 && n_scales != n))
		return ERR_INVAL;
	const size_t total = (size_t)n * (size_t)k;
	size_t blocks = (total + 255) / 256;
	if (blocks > 65535)
		blocks = 65535;
	dequant_w8_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(
		(const uint8_t *)d_w, w_dt, d_scale, n_scales, (const __half *)d_q8_d, k, total, d_out,
		out_dt);
	return kcu_launched("k_dequant_w8");
}

#define QUANT_THREADS 256

// The CTA's largest |x| from each thread's m (>= 0): warp maxima through
// red[QUANT_THREADS / 32], one barrier; every thread gets the result.
__device__ __forceinline__ float block_amax(float m, float *red)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	m = kcu_warp_max(m);
	if (lane == 0)
		red[warp] = m;
	__syncthreads();
	float amax = red[0];
	for (int i = 1; i < QUANT_THREADS / 32; i++)
		amax = fmaxf(amax, red[i]);
	return amax;
}

template <bool FP8>
__global__ void __launch_bounds__(QUANT_THREADS)
    quant_rows_kernel(const void *__restrict__ x, enum dtype x_dt, int k, uint8_t *__restrict__ xq,
                      float *__restrict__ scale)
{
	__shared__ float red[QUANT_THREADS / 32];
	const size_t base = (size_t)blockIdx.x * k;

	float m = 0.0f; // fmaxf skips NaN, as the CPU's "if (v > a)" does
	for (int i = threadIdx.x; i < k; i += QUANT_THREADS)
		m = fmaxf(m, fabsf(kcu_load(x, x_dt, base + i)));
	const float amax = block_amax(m, red);

	const float s = kcu_quant_scale<FP8>(amax);
	const float inv = kcu_quant_inv(s);
	if (threadIdx.x == 0)
		scale[blockIdx.x] = s;
	for (int i = threadIdx.x; i < k; i += QUANT_THREADS)
		xq[base + i] = kcu_quant_one<FP8>(kcu_load(x, x_dt, base + i), s, inv);
}

// The same for 16-bit X with k a multiple of 8 and 16-byte aligned rows:
// 16-byte loads of 8 values, 8-byte stores of their codes, two loads in
// flight per thread in the amax pass; the second pass re-reads the row
// (L1/L2 hits). The scalar kernel moved 2 bytes per load, 1 per store
// (H200: 34 us for 2048 x 4096, 106 us for 2048 x 14336).
template <bool FP8, bool BF16>
__global__ void __launch_bounds__(QUANT_THREADS)
    quant_rows_vec_kernel(const uint16_t *__restrict__ x, int k, uint8_t *__restrict__ xq,
                          float *__restrict__ scale)
{
	__shared__ float red[QUANT_THREADS / 32];
	const int ng = k / 8;
	const uint4 *row = reinterpret_cast<const uint4 *>(x + (size_t)blockIdx.x * k);
	uint2 *out = reinterpret_cast<uint2 *>(xq + (size_t)blockIdx.x * k);
	auto vals = [](uint4 u, float f[8]) { load8(u, BF16 ? DT_BF16 : DT_F16, f); };
	float m = 0.0f; // fmaxf skips NaN, as the CPU's "if (v > a)" does
	int g = threadIdx.x;
	for (; g + QUANT_THREADS < ng; g += 2 * QUANT_THREADS) {
		const uint4 a = row[g], b = row[g + QUANT_THREADS];
		float f[8], h[8];
		vals(a, f);
		vals(b, h);
#pragma unroll
		for (int i = 0; i < 8; i++)
			m = fmaxf(m, fmaxf(fabsf(f[i]), fabsf(h[i])));
	}
	for (; g < ng; g += QUANT_THREADS) {
		float f[8];
		vals(row[g], f);
#pragma unroll
		for (int i = 0; i < 8; i++)
			m = fmaxf(m, fabsf(f[i]));
	}
	const float amax = block_amax(m, red);
	const float s = kcu_quant_scale<FP8>(amax);
	const float inv = kcu_quant_inv(s);
	if (threadIdx.x == 0)
		scale[blockIdx.x] = s;
	for (g = threadIdx.x; g < ng; g += QUANT_THREADS) {
		float f[8];
		vals(row[g], f);
		uint32_t lo = 0, hi = 0;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			lo |= (uint32_t)kcu_quant_one<FP8>(f[i], s, inv) << (8 * i);
			hi |= (uint32_t)kcu_quant_one<FP8>(f[4 + i], s, inv) << (8 * i);
		}
		out[g] = make_uint2(lo, hi);
	}
}

extern "C" int k_quant_rows(void *stream, const void *d_x, enum dtype x_dt, int t, int k,
                            enum dtype q_dt, void *d_xq, float *d_scale)
{
	if (!d_x || !d_xq || !d_scale || t <= 0 || k <= 0 || !kcu_is_16bit_or_f32(x_dt))
		return ERR_INVAL;
	cudaStream_t st = (cudaStream_t)stream;
	if ((q_dt == DT_F8_E4M3 || q_dt == DT_I8) && (x_dt == DT_F16 || x_dt == DT_BF16) &&
	    k % 8 == 0 && ((uintptr_t)d_x & 15) == 0 && ((uintptr_t)d_xq & 7) == 0) {
		const bool f8 = q_dt == DT_F8_E4M3, bf = x_dt == DT_BF16;
		uint8_t *q = (uint8_t *)d_xq;
		const uint16_t *xs = (const uint16_t *)d_x;
		if (f8 && bf)
			quant_rows_vec_kernel<true, true><<<(unsigned)t, QUANT_THREADS, 0, st>>>(xs, k, q,
			                                                                        d_scale);
		else if (f8)
			quant_rows_vec_kernel<true, false><<<(unsigned)t, QUANT_THREADS, 0, st>>>(xs, k, q,
			                                                                         d_scale);
		else if (bf)
			quant_rows_vec_kernel<false, true><<<(unsigned)t, QUANT_THREADS, 0, st>>>(xs, k, q,
			                                                                         d_scale);
		else
			quant_rows_vec_kernel<false, false><<<(unsigned)t, QUANT_THREADS, 0, st>>>(
			    xs, k, q, d_scale);
		return kcu_launched("k_quant_rows");
	}
	if (q_dt == DT_F8_E4M3)
		quant_rows_kernel<true>
		    <<<(unsigned)t, QUANT_THREADS, 0, st>>>(d_x, x_dt, k, (uint8_t *)d_xq, d_scale);
	else if (q_dt == DT_I8)
		quant_rows_kernel<false>
		    <<<(unsigned)t, QUANT_THREADS, 0, st>>>(d_x, x_dt, k, (uint8_t *)d_xq, d_scale);
	else
		return ERR_UNSUPPORTED;
	return kcu_launched("k_quant_rows");
}

// ---- k_gemm_w8a8 -------------------------------------------------------------
//
// cuBLASLt with unit scales: FP8 E4M3 x E4M3 -> F32 (compute 32F) or
// INT8 x INT8 -> INT32 (compute 32I), then an epilogue kernel
//   y[t, n] (+)= acc[t, n] * (w_scale[n] * x_scale[t])
// (the CPU reference's order of the two scale products). Why not cuBLASLt's
// outer-vector scale mode: it exists for FP8 only (INT8 needs the epilogue
// anyway) and its support per architecture and output type is not something
// we could check without a GPU; one path for both types is tested once.
// Without accumulate the GEMM writes into y itself (F32 or INT32, 4 bytes
// either way) and the epilogue converts in place; with accumulate the
// product goes to the handle's workspace in row chunks, so nothing is
// allocated per call (graph capture works). Fewer than 32 tokens are padded
// to 32 in the workspace (w8a8_padded).

#define LT_WS_ACCUM_BYTES ((size_t)8 << 20) // Lt's share when the rest is scratch
#define W8A8_MIN_ROWS     32                // fewer tokens: padded (w8a8_padded)

static int lt_check(cublasStatus_t s, const char *what)
{
	if (s == CUBLAS_STATUS_SUCCESS)
		return 0;
	char buf[192];
	snprintf(buf, sizeof buf, "%s: cuBLASLt status %d", what, (int)s);
	kcu_check(cudaErrorUnknown, buf);
	return s == CUBLAS_STATUS_NOT_SUPPORTED ? ERR_UNSUPPORTED : ERR_DEVICE;
}

// 1: the current device has FP8 tensor cores (cc >= 8.9); 0: not; <0: error.
// Cached per device: the answer never changes (relaxed atomics, idempotent).
static int device_has_fp8(void)
{
	static std::atomic<int> cache[64]; // 0 unknown, 1 no, 2 yes
	int dev = 0;
	int rc = kcu_check(cudaGetDevice(&dev), "cudaGetDevice");
	if (rc)
		return rc;
	if (dev >= 0 && dev < 64) {
		int c = cache[dev].load(std::memory_order_relaxed);
		if (c)
			return c == 2;
	}
	cudaDeviceProp p;
	rc = kcu_check(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
	if (rc)
		return rc;
	const int yes = p.major > 8 || (p.major == 8 && p.minor >= 9);
	if (dev >= 0 && dev < 64)
		cache[dev].store(yes ? 2 : 1, std::memory_order_relaxed);
	return yes;
}

template <bool INT>
__global__ void w8a8_epilogue_kernel(const void *acc, const float *__restrict__ x_scale,
                                     const float *__restrict__ w_scale, int n_w_scales, int n,
                                     size_t count, float *y, int accumulate)
{
	// acc may alias y (in place): each element is read, then written, by one thread.
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
	     i += (size_t)gridDim.x * blockDim.x) {
		const size_t row = i / (size_t)n, col = i - row * (size_t)n;
		const float a = INT ? (float)((const int32_t *)acc)[i] : ((const float *)acc)[i];
		// _rn: no contraction into the add, so the rounding is the CPU's.
		const float v =
		    __fmul_rn(a, __fmul_rn(w_scale[n_w_scales == 1 ? 0 : col], x_scale[row]));
		y[i] = accumulate ? y[i] + v : v;
	}
}

struct lt_gemm {
	cublasLtHandle_t lt;
	cudaStream_t stream;
	bool is_int;
	int n, k;
	const void *d_w;
	void *ws;
	size_t ws_bytes;
	// FP8 with the scales in cuBLASLt (lt_fp8_scaled): A = W scales (one or
	// n, outer vector), B = X scales (t, outer vector), beta 1 to accumulate
	const float *a_scale, *b_scale;
	bool a_vec, scaled;
	float beta;
};

// acc[tc, n] = Xq[tc, k] · Wq[n, k]^T, unit scales, acc F32 or INT32.
static int lt_matmul(const struct lt_gemm *g, const void *d_xq, int tc, void *d_acc)
{
	cublasLtMatmulDesc_t op = NULL;
	cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
	cublasLtMatmulPreference_t pref = NULL;
	const cudaDataType_t ab = g->is_int ? CUDA_R_8I : CUDA_R_8F_E4M3;
	const cudaDataType_t cd = g->is_int ? CUDA_R_32I : CUDA_R_32F;
	const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
	int rc = lt_check(
	    cublasLtMatmulDescCreate(&op, g->is_int ? CUBLAS_COMPUTE_32I : CUBLAS_COMPUTE_32F,
	                             g->is_int ? CUDA_R_32I : CUDA_R_32F),
	    "cublasLtMatmulDescCreate");
	if (!rc)
		rc = lt_check(
		    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta),
		    "set TRANSA");
	if (!rc)
		rc = lt_check(
		    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb),
		    "set TRANSB");
	if (!rc && g->scaled) {
		const int32_t am = g->a_vec ? CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F
		                            : CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
		const int32_t bm = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
		rc = lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
		                                             &am, sizeof am),
		              "set A_SCALE_MODE");
		if (!rc)
			rc = lt_check(cublasLtMatmulDescSetAttribute(
			                  op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm, sizeof bm),
			              "set B_SCALE_MODE");
		if (!rc)
			rc = lt_check(cublasLtMatmulDescSetAttribute(
			                  op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g->a_scale,
			                  sizeof g->a_scale),
			              "set A_SCALE_POINTER");
		if (!rc)
			rc = lt_check(cublasLtMatmulDescSetAttribute(
			                  op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g->b_scale,
			                  sizeof g->b_scale),
			              "set B_SCALE_POINTER");
	}
	// Column-major view (as k_gemm): W[n, k] row-major is k x n (ld k), taken
	// transposed; Xq[tc, k] is k x tc (ld k); acc[tc, n] is n x tc (ld n).
	// This is the "TN" layout FP8 kernels require.
	if (!rc)
		rc = lt_check(cublasLtMatrixLayoutCreate(&la, ab, g->k, g->n, g->k), "layout A");
	if (!rc)
		rc = lt_check(cublasLtMatrixLayoutCreate(&lb, ab, g->k, tc, g->k), "layout B");
	if (!rc)
		rc = lt_check(cublasLtMatrixLayoutCreate(&lc, cd, g->n, tc, g->n), "layout C");
	if (!rc)
		rc = lt_check(cublasLtMatmulPreferenceCreate(&pref), "preference");
	if (!rc)
		rc = lt_check(cublasLtMatmulPreferenceSetAttribute(
		                  pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g->ws_bytes,
		                  sizeof g->ws_bytes),
		              "preference workspace");
	cublasLtMatmulHeuristicResult_t res;
	int n_res = 0;
	if (!rc)
		rc = lt_check(cublasLtMatmulAlgoGetHeuristic(g->lt, op, la, lb, lc, lc, pref, 1,
		                                             &res, &n_res),
		              "cublasLtMatmulAlgoGetHeuristic");
	if (!rc && n_res < 1) {
		kcu_check(cudaErrorNotSupported, "k_gemm_w8a8: no cuBLASLt algorithm");
		rc = ERR_UNSUPPORTED;
	}
	if (!rc) {
		const float af = 1.0f, bf = g->scaled ? g->beta : 0.0f;
		const int32_t ai = 1, bi = 0;
		const void *alpha = g->is_int ? (const void *)&ai : (const void *)&af;
		const void *beta = g->is_int ? (const void *)&bi : (const void *)&bf;
		rc =
		    lt_check(cublasLtMatmul(g->lt, op, alpha, g->d_w, la, d_xq, lb, beta, d_acc, lc,
		                            d_acc, lc, &res.algo, g->ws, g->ws_bytes, g->stream),
		             "cublasLtMatmul");
	}
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	if (lc)
		cublasLtMatrixLayoutDestroy(lc);
	if (lb)
		cublasLtMatrixLayoutDestroy(lb);
	if (la)
		cublasLtMatrixLayoutDestroy(la);
	if (op)
		cublasLtMatmulDescDestroy(op);
	return rc;
}

static int w8a8_epilogue(const struct lt_gemm *g, const void *d_acc, const float *d_x_scale,
                         const float *d_w_scale, int n_w_scales, int tc, float *d_y, int accumulate)
{
	const size_t count = (size_t)tc * g->n;
	size_t blocks = (count + 255) / 256;
	if (blocks > 65535)
		blocks = 65535;
	if (g->is_int)
		w8a8_epilogue_kernel<true><<<(unsigned)blocks, 256, 0, g->stream>>>(
		    d_acc, d_x_scale, d_w_scale, n_w_scales, g->n, count, d_y, accumulate);
	else
		w8a8_epilogue_kernel<false><<<(unsigned)blocks, 256, 0, g->stream>>>(
		    d_acc, d_x_scale, d_w_scale, n_w_scales, g->n, count, d_y, accumulate);
	return kcu_launched("k_gemm_w8a8 epilogue");
}

// Fewer than W8A8_MIN_ROWS tokens: cuBLASLt's integer kernels reject small
// batches (PyTorch's _int_mm pads to 32 for the same reason) and FP8 ones
// are not worth trusting there either, so Xq is copied into the workspace,
// zero rows appended up to W8A8_MIN_ROWS (exact: zero rows add nothing), and
// only the first t rows of the product go through the epilogue.
static int w8a8_padded(struct lt_gemm *g, size_t ws_total, const void *d_xq, const float *d_x_scale,
                       const float *d_w_scale, int n_w_scales, int t, float *d_y, int accumulate)
{
	const size_t xq_bytes = ((size_t)W8A8_MIN_ROWS * g->k + 255) / 256 * 256;
	const size_t acc_bytes = (size_t)W8A8_MIN_ROWS * g->n * 4;
	if (ws_total < LT_WS_ACCUM_BYTES + xq_bytes + acc_bytes)
		return ERR_UNSUPPORTED;
	g->ws_bytes = LT_WS_ACCUM_BYTES;
	char *xq_pad = (char *)g->ws + LT_WS_ACCUM_BYTES;
	void *acc = xq_pad + xq_bytes;
	const size_t used = (size_t)t * g->k;
	int rc = kcu_check(cudaMemcpyAsync(xq_pad, d_xq, used, cudaMemcpyDeviceToDevice, g->stream),
	                   "k_gemm_w8a8: copy Xq");
	if (!rc)
		rc = kcu_check(cudaMemsetAsync(xq_pad + used, 0,
		                               (size_t)W8A8_MIN_ROWS * g->k - used, g->stream),
		               "k_gemm_w8a8: zero rows");
	if (!rc)
		rc = lt_matmul(g, xq_pad, W8A8_MIN_ROWS, acc);
	if (!rc)
		rc = w8a8_epilogue(g, acc, d_x_scale, d_w_scale, n_w_scales, t, d_y, accumulate);
	return rc;
}

// FP8 with per-channel (or per-tensor) weight scales and per-token X scales
// applied by cuBLASLt itself (outer-vector scale modes, cuBLASLt 12.9+), the
// accumulate as beta = 1 on C = Y: one pass over Y instead of the GEMM's F32
// write plus an epilogue that reads and writes it again. Where this cuBLASLt
// or device refuses the combination (status NOT_SUPPORTED / INVALID_VALUE, no
// algorithm), ERR_UNSUPPORTED, remembered for the process; the caller then
// takes the epilogue path. The products are scaled as acc * ws[n] * xs[t]
// (cuBLASLt's order), not the CPU's acc * (ws * xs): an FP8-tolerance
// difference, which the tests allow for FP8.
static int lt_fp8_scaled(struct lt_gemm *g, size_t ws_total, const void *d_xq,
                         const float *d_x_scale, const float *d_w_scale, int n_w_scales, int t,
                         float *d_y, int accumulate)
{
	static std::atomic<int> refused{0}; // 1: refused once, never ask again
	if (refused.load(std::memory_order_relaxed))
		return ERR_UNSUPPORTED;
	g->scaled = true;
	g->a_scale = d_w_scale;
	g->a_vec = n_w_scales != 1;
	g->b_scale = d_x_scale;
	g->beta = accumulate ? 1.0f : 0.0f;
	g->ws_bytes = ws_total;
	int rc = lt_matmul(g, d_xq, t, d_y);
	if (rc == ERR_UNSUPPORTED || rc == ERR_DEVICE) {
		// cuBLASLt checks the configuration before it launches anything, so
		// a refusal here left no work behind: fall back, and stop asking
		refused.store(1, std::memory_order_relaxed);
		(void)cudaGetLastError();
		return ERR_UNSUPPORTED;
	}
	return rc;
}

extern "C" int k_gemm_w8a8(struct k_blas *h, const void *d_w, enum dtype w_dt,
                           const float *d_w_scale, int n_w_scales, int n, int k, const void *d_xq,
                           const float *d_x_scale, int t, float *d_y, int accumulate)
{
	if (!h || !d_w || !d_w_scale || !d_xq || !d_x_scale || !d_y || n <= 0 || k <= 0 || t <= 0)
		return ERR_INVAL;
	if (n_w_scales != 1 && n_w_scales != n)
		return ERR_INVAL;
	if (w_dt != DT_I8 && w_dt != DT_F8_E4M3)
		return ERR_UNSUPPORTED;
	// cuBLASLt's 8-bit kernels: 16-byte aligned operands and leading dimensions.
	if (k % 16 || n % 16 || ((uintptr_t)d_w & 15) || ((uintptr_t)d_xq & 15) ||
	    ((uintptr_t)d_y & 15))
		return ERR_UNSUPPORTED;
	if (w_dt == DT_F8_E4M3) {
		int fp8 = device_has_fp8();
		if (fp8 < 0)
			return fp8;
		if (!fp8)
			return ERR_UNSUPPORTED;
	}
	struct lt_gemm g;
	g.lt = (cublasLtHandle_t)k_blas_lt_handle(h);
	g.stream = (cudaStream_t)k_blas_stream(h);
	g.is_int = w_dt == DT_I8;
	g.n = n;
	g.k = k;
	g.d_w = d_w;
	size_t ws_total = 0;
	g.ws = k_blas_workspace(h, &ws_total);
	if (!g.lt || !g.ws)
		return ERR_INVAL;

	g.a_scale = g.b_scale = NULL;
	g.a_vec = g.scaled = false;
	g.beta = 0.0f;
	if (!g.is_int && t >= W8A8_MIN_ROWS) {
		int rc = lt_fp8_scaled(&g, ws_total, d_xq, d_x_scale, d_w_scale, n_w_scales, t, d_y,
		                       accumulate);
		if (rc != ERR_UNSUPPORTED)
			return rc;
		g.scaled = false; // this cuBLASLt / device: the epilogue path below
	}
	if (t < W8A8_MIN_ROWS)
		return w8a8_padded(&g, ws_total, d_xq, d_x_scale, d_w_scale, n_w_scales, t, d_y,
		                   accumulate);
	if (!accumulate) {
		// The 4-byte accumulator lands in y, converted in place.
		g.ws_bytes = ws_total;
		int rc = lt_matmul(&g, d_xq, t, d_y);
		return rc ? rc
		          : w8a8_epilogue(&g, d_y, d_x_scale, d_w_scale, n_w_scales, t, d_y, 0);
	}
	// Workspace = Lt's part + a scratch accumulator for a chunk of rows.
	if (ws_total < 2 * LT_WS_ACCUM_BYTES)
		return ERR_UNSUPPORTED;
	g.ws_bytes = LT_WS_ACCUM_BYTES;
	void *scratch = (char *)g.ws + LT_WS_ACCUM_BYTES;
	// Chunks as equal as can be, at most `rows` each: with rows >= 64 every
	// chunk keeps >= 32 tokens (t / n_ch > rows / 2), none needs padding.
	const size_t rows = (ws_total - LT_WS_ACCUM_BYTES) / ((size_t)n * 4);
	if (rows < 2 * W8A8_MIN_ROWS)
		return ERR_UNSUPPORTED;
	const int n_ch = (int)(((size_t)t + rows - 1) / rows);
	for (int i = 0, t0 = 0; i < n_ch; i++) {
		const int tc = t / n_ch + (i < t % n_ch ? 1 : 0);
		int rc = lt_matmul(&g, (const uint8_t *)d_xq + (size_t)t0 * k, tc, scratch);
		if (!rc)
			rc = w8a8_epilogue(&g, scratch, d_x_scale + t0, d_w_scale, n_w_scales, tc,
			                   d_y + (size_t)t0 * n, 1);
		// a refusal after a chunk was added into y: not a shape the caller
		// may retry another way (it would add that chunk twice)
		if (rc == ERR_UNSUPPORTED && i > 0) {
			kcu_check(cudaErrorNotSupported, "k_gemm_w8a8: a later row chunk refused");
			return ERR_DEVICE;
		}
		if (rc)
			return rc;
		t0 += tc;
	}
	return 0;
}
