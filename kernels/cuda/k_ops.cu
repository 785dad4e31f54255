// kernels/cuda/k_ops.cu — the elementwise and per-row kernels of the CUDA
// forward pass (kcuda_ops.h): embedding gather, residual add + RMSNorm, the
// gathered LM-head norm, Q/K/V bias + q/k norm + RoPE + paged KV store,
// SiLU·mul, the norm and SiLU·mul fused with per-token quantization, F32
// casts. Stateless; launchers never synchronize.
// CPU counterparts: kernels/cpu/ops_ref.c and engine/backend/cpu_forward.c (job_qkv_post);
// test: tests/kernels/test_cuda_ops.c.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "common/err.h"
#include "kernels/cuda/kcuda_internal.h"
#include "kernels/cuda/kcuda_ops.h"

// ---- shared helpers --------------------------------------------------------

// 0 for F32/F16/BF16; ERR_UNSUPPORTED for another known dtype; ERR_INVAL otherwise.
static int check_dt(enum dtype dt)
{
	if (kcu_is_16bit_or_f32(dt))
		return 0;
	return (int)dt >= 0 && (int)dt < (int)DT__COUNT ? ERR_UNSUPPORTED : ERR_INVAL;
}

__device__ __forceinline__ bool aligned(const void *p, size_t bytes)
{
	return ((uintptr_t)p & (bytes - 1)) == 0;
}

__device__ __forceinline__ size_t dt_size(enum dtype dt)
{
	return dt == DT_F32 ? 4 : 2;
}

// Store v as elements i..i+3 of a dt array; the address of element i is
// 16-byte (F32) or 8-byte (16-bit) aligned.
__device__ __forceinline__ void store4(void *p, enum dtype dt, size_t i, float4 v)
{
	if (dt == DT_F16) {
		__half2 *h = (__half2 *)p + i / 2;
		h[0] = __floats2half2_rn(v.x, v.y);
		h[1] = __floats2half2_rn(v.z, v.w);
	} else if (dt == DT_BF16) {
		__nv_bfloat162 *h = (__nv_bfloat162 *)p + i / 2;
		h[0] = __floats2bfloat162_rn(v.x, v.y);
		h[1] = __floats2bfloat162_rn(v.z, v.w);
	} else {
		((float4 *)p)[i / 4] = v;
	}
}

// Sum (MAX: largest, by fmaxf) of v over the block (blockDim.x a multiple
// of 32, every thread calls it). sh: 32 floats of shared memory, free again
// when this returns.
template <bool MAX> __device__ float block_reduce(float v, float *sh)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	v = MAX ? kcu_warp_max(v) : kcu_warp_sum(v);
	if (lane == 0)
		sh[warp] = v;
	__syncthreads();
	if (warp == 0) {
		v = lane < (int)(blockDim.x >> 5) ? sh[lane] : 0.0f;
		v = MAX ? kcu_warp_max(v) : kcu_warp_sum(v);
		if (lane == 0)
			sh[0] = v;
	}
	__syncthreads();
	v = sh[0];
	__syncthreads(); // every thread has read sh[0] before sh is reused
	return v;
}

__device__ __forceinline__ float block_sum(float v, float *sh)
{
	return block_reduce<false>(v, sh);
}

static unsigned round_up32(size_t n)
{
	return (unsigned)((n + 31) / 32 * 32);
}

// ---- embedding ---------------------------------------------------------------

__global__ void embed_kernel(const void *table, enum dtype dt, int hidden,
			     const int32_t *tokens, float *x)
{
	const size_t r = blockIdx.x;
	const size_t src = (size_t)tokens[r] * (size_t)hidden;
	float *xr = x + r * (size_t)hidden;
	for (int i = threadIdx.x; i < hidden; i += blockDim.x)
		xr[i] = kcu_load(table, dt, src + (size_t)i);
}

extern "C" int k_embed(void *stream, const void *d_table, enum dtype table_dt, int hidden,
		       const int32_t *d_tokens, int n_rows, float *d_x)
{
	if (n_rows < 0 || hidden <= 0)
		return ERR_INVAL;
	int rc = check_dt(table_dt);
	if (rc)
		return rc;
	if (n_rows == 0)
		return 0;
	if (!d_table || !d_tokens || !d_x)
		return ERR_INVAL;
	unsigned threads = round_up32(hidden < 256 ? hidden : 256);
	embed_kernel<<<(unsigned)n_rows, threads, 0, (cudaStream_t)stream>>>(
		d_table, table_dt, hidden, d_tokens, d_x);
	return kcu_launched("k_embed");
}

// ---- RMSNorm (with the residual add, or gathered) ----------------------------

// 1 / rms of row xr (n floats, after xr += ar when ar): the sum of squares
// in float4 steps over the first nv groups of 4 (kcu_sumsq4), then the
// scalar tail, then block_sum. rmsnorm_kernel and rmsnorm_quant_kernel
// both take it, so their sums agree bit for bit for the same nv.
__device__ float row_inv_rms(float *xr, const float *ar, int n, int nv, float eps, float *sh)
{
	const int tid = threadIdx.x, bd = blockDim.x;
	float ss = 0.0f;
	for (int j = tid; j < nv; j += bd) {
		float4 v = ((const float4 *)xr)[j];
		if (ar) {
			float4 a = ((const float4 *)ar)[j];
			v.x += a.x;
			v.y += a.y;
			v.z += a.z;
			v.w += a.w;
			((float4 *)xr)[j] = v;
		}
		ss = kcu_sumsq4(ss, v);
	}
	for (int i = 4 * nv + tid; i < n; i += bd) {
		float v = xr[i];
		if (ar) {
			v += ar[i];
			xr[i] = v;
		}
		ss += v * v;
	}
	ss = block_sum(ss, sh);
	return kcu_inv_rms(ss, n, eps);
}

// x * inv * w for 4 values (rmsnorm_kernel's products, in this order).
__device__ __forceinline__ float4 norm4(float4 v, float inv, float4 g)
{
	return make_float4(v.x * inv * g.x, v.y * inv * g.y, v.z * inv * g.z, v.w * inv * g.w);
}

// One CTA per output row. Input row = rows ? rows[blockIdx.x] : blockIdx.x.
// If add: x[row] += add[row] (written back). Then out = x * inv_rms * w with
// the sum of squares in F32 (block-wide). The same thread reads in the second
// pass exactly the elements it wrote in the first, so out may equal x (F32,
// not gathered). Rows whose pointers are aligned run float4 loads with a
// scalar tail; others run scalar.
__global__ void rmsnorm_kernel(float *x, const float *add, const int32_t *rows, const float *w,
			       int n, float eps, void *out, enum dtype out_dt)
{
	__shared__ float sh[32];
	kcu_pdl_trigger(); // PDL: nothing read or written before the wait
	kcu_pdl_wait();
	const size_t r_out = blockIdx.x;
	const size_t r_in = rows ? (size_t)rows[r_out] : r_out;
	float *xr = x + r_in * (size_t)n;
	const float *ar = add ? add + r_in * (size_t)n : NULL;
	const size_t ob = r_out * (size_t)n; // element offset of the output row
	const size_t osz = dt_size(out_dt);
	const bool vec = aligned(xr, 16) && (!ar || aligned(ar, 16)) && aligned(w, 16) &&
			 aligned((const char *)out + ob * osz, 4 * osz);
	const int nv = vec ? n / 4 : 0;
	const int tid = threadIdx.x, bd = blockDim.x;
	const float inv = row_inv_rms(xr, ar, n, nv, eps, sh);

	for (int j = tid; j < nv; j += bd) {
		float4 v = ((const float4 *)xr)[j];
		store4(out, out_dt, ob + 4 * (size_t)j, norm4(v, inv, ((const float4 *)w)[j]));
	}
	for (int i = 4 * nv + tid; i < n; i += bd)
		kcu_store(out, out_dt, ob + (size_t)i, xr[i] * inv * w[i]);
}


extern "C" int k_add_rmsnorm(void *stream, float *d_x, const float *d_add, const float *d_w,
			     int n_rows, int hidden, float eps, void *d_out, enum dtype out_dt)
{
	if (n_rows < 0 || hidden <= 0 || !(eps >= 0.0f))
		return ERR_INVAL;
	int rc = check_dt(out_dt);
	if (rc)
		return rc;
	if (n_rows == 0)
		return 0;
	if (!d_x || !d_w || !d_out)
		return ERR_INVAL;
	return kcu_launch_pdl("k_add_rmsnorm", rmsnorm_kernel, dim3((unsigned)n_rows),
			      dim3(kcu_norm_threads(hidden)), 0, (cudaStream_t)stream, d_x, d_add,
			      (const int32_t *)NULL, d_w, hidden, eps, d_out, out_dt);
}

extern "C" int k_rmsnorm_rows(void *stream, const float *d_x, const int32_t *d_rows, int n_out,
			      const float *d_w, int hidden, float eps, void *d_out,
			      enum dtype out_dt)
{
	if (n_out < 0 || hidden <= 0 || !(eps >= 0.0f))
		return ERR_INVAL;
	int rc = check_dt(out_dt);
	if (rc)
		return rc;
	if (n_out == 0)
		return 0;
	if (!d_x || !d_rows || !d_w || !d_out)
		return ERR_INVAL;
	// Without add the kernel never writes x: the cast only shares the kernel.
	return kcu_launch_pdl("k_rmsnorm_rows", rmsnorm_kernel, dim3((unsigned)n_out),
			      dim3(kcu_norm_threads(hidden)), 0, (cudaStream_t)stream, (float *)d_x,
			      (const float *)NULL, d_rows, d_w, hidden, eps, d_out, out_dt);
}

// ---- Q/K/V: bias, q/k norm, RoPE, paged KV store -----------------------------

#define QKV_WARPS     8	  // heads per CTA, one warp each
#define ROPE_MAX_HALF 512 // head_dim <= 1024
// More CTAs of 8 heads than this: one CTA per row instead (about 4 waves of
// 8 CTAs on 132 SMs; a 2048-token prefill of 48 heads would launch 12288).
#define QKV_ROW_CTAS  4096

// 2*pi split in two doubles (Cody–Waite): HI is the double nearest 2*pi, LO
// the rest, so k*2*pi is subtracted with ~2^-100 relative error.
#define TWO_PI_HI     6.283185307179586232
#define TWO_PI_LO     2.449293598294706414e-16
#define INV_TWO_PI    0.15915494309189533577

// One head hh of row r (qkv_rope_store_kernel), by one warp.
__device__ __forceinline__ void qkv_head(const struct k_qkv_args &a, size_t r, int hh,
					 int32_t slot, int lane, const float *sh_cos,
					 const float *sh_sin)
{
	const int hd = a.head_dim, half = hd / 2;
	const int nq = a.n_heads, nkv = a.n_kv_heads;
	const int kind = hh < nq ? 0 : hh < nq + nkv ? 1 : 2; // q, k, v
	if (kind != 0 && slot < 0)
		return; // padding row: q only, the pools stay untouched
	const size_t col = (size_t)hh * hd;
	const float *x = a.qkv + r * ((size_t)(nq + 2 * nkv) * hd) + col;
	const float *bias = a.bias ? a.bias + col : NULL;
	const float *nw = kind == 0 ? a.q_norm : kind == 1 ? a.k_norm : NULL;

	float inv = 1.0f;
	if (nw) {
		float ss = 0.0f;
		for (int i = lane; i < hd; i += 32) {
			float v = x[i];
			if (bias)
				v += bias[i];
			ss += v * v;
		}
		ss = kcu_warp_sum(ss); // all 32 lanes: the loop above has no exit
		inv = 1.0f / sqrtf(ss / (float)hd + a.eps);
	}

	float *qo = NULL;
	void *cache = NULL;
	size_t kvo = 0;
	const int kvh = kind == 1 ? hh - nq : hh - nq - nkv; // k / v: its KV head
	if (kind == 0) {
		qo = a.q + r * ((size_t)nq * hd) + col;
	} else {
		const int h = kvh;
		const size_t blk = (size_t)(slot / a.block_size), j = (size_t)(slot % a.block_size);
		kvo = ((blk * nkv + h) * a.block_size + j) * hd; // kops_kv_offset
		cache = kind == 1 ? a.k_cache : a.v_cache;
	}
	const bool neox = a.rope_style == 0;
	for (int i = lane; i < half; i += 32) {
		const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
		float v0 = x[i0], v1 = x[i1];
		if (bias) {
			v0 += bias[i0];
			v1 += bias[i1];
		}
		if (nw) {
			v0 = v0 * inv * nw[i0];
			v1 = v1 * inv * nw[i1];
		}
		if (kind != 2) {
			const float c = sh_cos[i], s = sh_sin[i];
			const float t0 = v0 * c - v1 * s;
			const float t1 = v1 * c + v0 * s;
			v0 = t0;
			v1 = t1;
		}
		if (qo) {
			qo[i0] = v0;
			qo[i1] = v1;
		} else if (a.kv_dt == DT_F8_E4M3) {
			const float *hs = kind == 1 ? a.k_head_scale : a.v_head_scale;
			const float inv_s =
				1.0f / (hs ? hs[kvh] : kind == 1 ? a.k_scale : a.v_scale);
			__nv_fp8_storage_t *c8 = (__nv_fp8_storage_t *)cache;
			c8[kvo + (size_t)i0] = __nv_cvt_float_to_fp8(v0 * inv_s, __NV_SATFINITE, __NV_E4M3);
			c8[kvo + (size_t)i1] = __nv_cvt_float_to_fp8(v1 * inv_s, __NV_SATFINITE, __NV_E4M3);
		} else {
			kcu_store(cache, a.kv_dt, kvo + (size_t)i0, v0);
			kcu_store(cache, a.kv_dt, kvo + (size_t)i1, v1);
		}
	}
}

// Grid (n_rows, ceil(heads / (QKV_WARPS * hpw))), QKV_WARPS warps; warp w of
// CTA (r, y) takes heads y * QKV_WARPS * hpw + w + i * QKV_WARPS (i < hpw).
// hpw is 1 for few rows (decode: the heads of a row spread over CTAs) and
// all of a row's heads for many (prefill: a CTA per row, its angle table
// built once, not once per 8 heads; QKV_ROW_CTAS). Each head is computed
// the same way either way. Head hh of a row covers columns [hh*hd,
// (hh+1)*hd): q heads, then k heads, then v heads.
// Angles: pos * inv_freq in double (as kops_rope_angles; the product is the
// same double as on the CPU), reduced to [-pi, pi] in double, then sincosf in
// F32 — within ~2e-7 of the CPU's (float)cos(double) even at pos 1e5+, where
// an F32 product would already be off by ~4e-3 rad. Each lane owns rotation
// pairs (i, i+half) or (2i, 2i+1), so norm, rotation and store need no
// shared memory beyond the row's cos/sin table.
__global__ void __launch_bounds__(QKV_WARPS * 32)
	qkv_rope_store_kernel(struct k_qkv_args a, int hpw)
{
	__shared__ float sh_cos[ROPE_MAX_HALF], sh_sin[ROPE_MAX_HALF];
	kcu_pdl_trigger(); // PDL: nothing read or written before the wait
	kcu_pdl_wait();
	const int hd = a.head_dim, half = hd / 2;
	const int nq = a.n_heads, nkv = a.n_kv_heads;
	const size_t r = blockIdx.x;
	const double pos = (double)a.positions[r];
	for (int i = threadIdx.x; i < half; i += blockDim.x) {
		double ang = pos * (double)a.inv_freq[i];
		double k = rint(ang * INV_TWO_PI);
		double red = fma(-k, TWO_PI_LO, fma(-k, TWO_PI_HI, ang));
		float s, c;
		sincosf((float)red, &s, &c);
		sh_cos[i] = c;
		sh_sin[i] = s;
	}
	__syncthreads(); // the only barrier: warps may leave after it

	const int lane = threadIdx.x & 31;
	const int32_t slot = a.slots[r];
	const int h_first = blockIdx.y * QKV_WARPS * hpw + (threadIdx.x >> 5);
	const int h_end = min(nq + 2 * nkv, (int)(blockIdx.y + 1) * QKV_WARPS * hpw);
	for (int hh = h_first; hh < h_end; hh += QKV_WARPS)
		qkv_head(a, r, hh, slot, lane, sh_cos, sh_sin);
}

extern "C" int k_qkv_rope_store(void *stream, const struct k_qkv_args *a)
{
	if (!a || a->n_rows < 0 || a->n_heads <= 0 || a->n_kv_heads <= 0 || a->head_dim <= 0 ||
	    (a->head_dim & 1) || a->block_size <= 0 || (a->rope_style != 0 && a->rope_style != 1))
		return ERR_INVAL;
	if (!a->q_norm != !a->k_norm || (a->q_norm && !(a->eps >= 0.0f)))
		return ERR_INVAL;
	int rc = a->kv_dt == DT_F8_E4M3 ? 0 : check_dt(a->kv_dt);
	if (rc)
		return rc;
	if (a->kv_dt == DT_F8_E4M3 && !(a->k_scale > 0.0f && a->v_scale > 0.0f))
		return ERR_INVAL;
	const long long heads = (long long)a->n_heads + 2LL * a->n_kv_heads;
	if (heads * a->head_dim > INT_MAX)
		return ERR_INVAL;
	long long groups = (heads + QKV_WARPS - 1) / QKV_WARPS;
	if (a->head_dim / 2 > ROPE_MAX_HALF || groups > 65535)
		return ERR_UNSUPPORTED;
	int hpw = 1;
	if ((long long)a->n_rows * groups > QKV_ROW_CTAS) { // a CTA per row
		hpw = (int)groups;
		groups = 1;
	}
	if (a->n_rows == 0)
		return 0;
	if (!a->qkv || !a->inv_freq || !a->positions || !a->slots || !a->q || !a->k_cache ||
	    !a->v_cache)
		return ERR_INVAL;
	dim3 grid((unsigned)a->n_rows, (unsigned)groups);
	return kcu_launch_pdl("k_qkv_rope_store", qkv_rope_store_kernel, grid,
			      dim3(QKV_WARPS * 32), 0, (cudaStream_t)stream, *a, hpw);
}

// ---- SiLU·mul ------------------------------------------------------------------

#define SILU_THREADS 256

__device__ __forceinline__ float silu_mul1(float g, float u)
{
	return kcu_silu_mul1(g, u); // as kops_silu_mul_ref
}

// Grid (n_rows, ceil(ffn / (4 * SILU_THREADS))): each thread 4 consecutive
// columns of one row, float4 when the row's pointers allow it.
__global__ void silu_mul_kernel(const float *gu, int ffn, void *out, enum dtype out_dt)
{
	kcu_pdl_trigger(); // PDL: nothing read or written before the wait
	kcu_pdl_wait();
	const size_t r = blockIdx.x;
	const float *g = gu + r * 2 * (size_t)ffn, *u = g + ffn;
	const size_t ob = r * (size_t)ffn;
	const int i = 4 * (blockIdx.y * SILU_THREADS + threadIdx.x);
	if (i >= ffn)
		return;
	const size_t osz = dt_size(out_dt);
	if (i + 4 <= ffn && aligned(g + i, 16) && aligned(u + i, 16) &&
	    aligned((const char *)out + (ob + i) * osz, 4 * osz)) {
		float4 a = *(const float4 *)(g + i), b = *(const float4 *)(u + i);
		float4 o = make_float4(silu_mul1(a.x, b.x), silu_mul1(a.y, b.y), silu_mul1(a.z, b.z),
				       silu_mul1(a.w, b.w));
		store4(out, out_dt, ob + i, o);
		return;
	}
	for (int k = i; k < i + 4 && k < ffn; k++)
		kcu_store(out, out_dt, ob + k, silu_mul1(g[k], u[k]));
}

extern "C" int k_silu_mul(void *stream, const float *d_gu, int n_rows, int ffn, void *d_out,
			  enum dtype out_dt)
{
	if (n_rows < 0 || ffn <= 0)
		return ERR_INVAL;
	int rc = check_dt(out_dt);
	if (rc)
		return rc;
	const long long chunks = ((long long)ffn + 4 * SILU_THREADS - 1) / (4 * SILU_THREADS);
	if (chunks > 65535)
		return ERR_UNSUPPORTED;
	if (n_rows == 0)
		return 0;
	if (!d_gu || !d_out)
		return ERR_INVAL;
	dim3 grid((unsigned)n_rows, (unsigned)chunks);
	return kcu_launch_pdl("k_silu_mul", silu_mul_kernel, grid, dim3(SILU_THREADS), 0,
			      (cudaStream_t)stream, d_gu, ffn, d_out, out_dt);
}

// ---- RMSNorm and SiLU·mul straight to per-token codes -------------------------
//
// For the W8A8 prefill (kcuda_quant.h): the out_dt rows the two kernels
// above would write are quantized per row, as k_quant_rows quantizes them,
// and only the codes and the row scales are written. A CTA owns a row: it
// computes the results as those kernels do, rounds them to out_dt, takes
// the largest |rounded value| (block_reduce<true>; fmaxf skips NaN, as
// k_quant_rows does), then the codes of the same rounded values
// (kcu_quant_one). Max is exact in any order, so the scale is k_quant_rows'
// bit for bit.

__device__ __forceinline__ float amax4(float m, float4 v)
{
	return fmaxf(fmaxf(m, fmaxf(fabsf(v.x), fabsf(v.y))), fmaxf(fabsf(v.z), fabsf(v.w)));
}

__device__ __forceinline__ float4 round4(enum dtype dt, float4 v)
{
	return make_float4(kcu_round(dt, v.x), kcu_round(dt, v.y), kcu_round(dt, v.z),
			   kcu_round(dt, v.w));
}

// Codes of 4 values, lowest first, at q (4-byte aligned when vec).
template <bool FP8>
__device__ __forceinline__ void put_codes4(uint8_t *q, float4 v, float s, float inv)
{
	const uint32_t c = (uint32_t)kcu_quant_one<FP8>(v.x, s, inv) |
			   (uint32_t)kcu_quant_one<FP8>(v.y, s, inv) << 8 |
			   (uint32_t)kcu_quant_one<FP8>(v.z, s, inv) << 16 |
			   (uint32_t)kcu_quant_one<FP8>(v.w, s, inv) << 24;
	*(uint32_t *)q = c;
}

// rmsnorm_kernel without add, not gathered, then the codes. Its float4
// choice is rmsnorm_kernel's for an output at an aligned base (row offset
// a multiple of 4), so the sums, and then every product, are the same. The
// codes pass recomputes the products (L1 hits) instead of keeping them.
template <bool FP8>
__global__ void rmsnorm_quant_kernel(const float *x, const float *w, int n, float eps,
				     enum dtype out_dt, uint8_t *xq, float *scale)
{
	__shared__ float sh[32];
	kcu_pdl_trigger(); // PDL: nothing read or written before the wait
	kcu_pdl_wait();
	const size_t r = blockIdx.x, ob = r * (size_t)n;
	float *xr = (float *)x + ob; // row_inv_rms only reads it (no add)
	const bool vec = aligned(xr, 16) && aligned(w, 16) && ob % 4 == 0;
	const int nv = vec ? n / 4 : 0;
	const int tid = threadIdx.x, bd = blockDim.x;
	const float inv = row_inv_rms(xr, NULL, n, nv, eps, sh);
	const float4 *x4 = (const float4 *)xr, *w4 = (const float4 *)w;

	float m = 0.0f;
	for (int j = tid; j < nv; j += bd)
		m = amax4(m, round4(out_dt, norm4(x4[j], inv, w4[j])));
	for (int i = 4 * nv + tid; i < n; i += bd)
		m = fmaxf(m, fabsf(kcu_round(out_dt, xr[i] * inv * w[i])));
	const float s = kcu_quant_scale<FP8>(block_reduce<true>(m, sh));
	const float qi = kcu_quant_inv(s);
	if (tid == 0)
		scale[r] = s;

	uint8_t *q = xq + ob;
	const int nq = aligned(q, 4) ? nv : 0; // float4 steps that store 4 codes at once
	for (int j = tid; j < nq; j += bd)
		put_codes4<FP8>(q + 4 * (size_t)j, round4(out_dt, norm4(x4[j], inv, w4[j])), s, qi);
	for (int j = nq + tid; j < nv; j += bd) {
		const float4 o = round4(out_dt, norm4(x4[j], inv, w4[j]));
		q[4 * j] = kcu_quant_one<FP8>(o.x, s, qi);
		q[4 * j + 1] = kcu_quant_one<FP8>(o.y, s, qi);
		q[4 * j + 2] = kcu_quant_one<FP8>(o.z, s, qi);
		q[4 * j + 3] = kcu_quant_one<FP8>(o.w, s, qi);
	}
	for (int i = 4 * nv + tid; i < n; i += bd)
		q[i] = kcu_quant_one<FP8>(kcu_round(out_dt, xr[i] * inv * w[i]), s, qi);
}

// The arguments both quantizing launchers share: rows of n values in
// out_dt, codes in q_dt. 0 or the error.
static int check_quant(int n_rows, int n, enum dtype out_dt, enum dtype q_dt)
{
	if (n_rows < 0 || n <= 0)
		return ERR_INVAL;
	int rc = check_dt(out_dt);
	if (rc)
		return rc;
	if (q_dt != DT_F8_E4M3 && q_dt != DT_I8)
		return (int)q_dt >= 0 && (int)q_dt < (int)DT__COUNT ? ERR_UNSUPPORTED : ERR_INVAL;
	return 0;
}

extern "C" int k_rmsnorm_quant(void *stream, const float *d_x, const float *d_w, int n_rows,
			       int hidden, float eps, enum dtype out_dt, enum dtype q_dt,
			       void *d_xq, float *d_scale)
{
	int rc = check_quant(n_rows, hidden, out_dt, q_dt);
	if (rc)
		return rc;
	if (!(eps >= 0.0f))
		return ERR_INVAL;
	if (n_rows == 0)
		return 0;
	if (!d_x || !d_w || !d_xq || !d_scale)
		return ERR_INVAL;
	const dim3 grid((unsigned)n_rows), block(kcu_norm_threads(hidden));
	const cudaStream_t st = (cudaStream_t)stream;
	uint8_t *q = (uint8_t *)d_xq;
	if (q_dt == DT_F8_E4M3)
		return kcu_launch_pdl("k_rmsnorm_quant", rmsnorm_quant_kernel<true>, grid, block, 0,
				      st, d_x, d_w, hidden, eps, out_dt, q, d_scale);
	return kcu_launch_pdl("k_rmsnorm_quant", rmsnorm_quant_kernel<false>, grid, block, 0, st,
			      d_x, d_w, hidden, eps, out_dt, q, d_scale);
}

// silu_mul_kernel's values for one row per CTA, kept rounded (in out_dt) in
// shared memory between the amax and the codes: SiLU, the costly part, is
// computed once.
template <bool FP8>
__global__ void __launch_bounds__(SILU_THREADS)
    silu_quant_kernel(const float *gu, int ffn, enum dtype out_dt, uint8_t *xq, float *scale)
{
	extern __shared__ float4 silu_row4[]; // ffn values in out_dt
	void *row = silu_row4;
	__shared__ float sh[32];
	kcu_pdl_trigger(); // PDL: nothing read or written before the wait
	kcu_pdl_wait();
	const size_t r = blockIdx.x;
	const float *g = gu + r * 2 * (size_t)ffn, *u = g + ffn;
	uint8_t *q = xq + r * (size_t)ffn;
	const int tid = threadIdx.x;
	const int nv = aligned(g, 16) && aligned(u, 16) && aligned(q, 4) ? ffn / 4 : 0;
	const float4 *g4 = (const float4 *)g, *u4 = (const float4 *)u;

	float m = 0.0f;
	for (int j = tid; j < nv; j += SILU_THREADS) {
		const float4 a = g4[j], b = u4[j];
		const float4 o = round4(out_dt, make_float4(silu_mul1(a.x, b.x), silu_mul1(a.y, b.y),
							    silu_mul1(a.z, b.z), silu_mul1(a.w, b.w)));
		kcu_store(row, out_dt, 4 * (size_t)j, o.x); // exact: already rounded
		kcu_store(row, out_dt, 4 * (size_t)j + 1, o.y);
		kcu_store(row, out_dt, 4 * (size_t)j + 2, o.z);
		kcu_store(row, out_dt, 4 * (size_t)j + 3, o.w);
		m = amax4(m, o);
	}
	for (int i = 4 * nv + tid; i < ffn; i += SILU_THREADS) {
		const float o = kcu_round(out_dt, silu_mul1(g[i], u[i]));
		kcu_store(row, out_dt, (size_t)i, o);
		m = fmaxf(m, fabsf(o));
	}
	const float s = kcu_quant_scale<FP8>(block_reduce<true>(m, sh));
	const float qi = kcu_quant_inv(s);
	if (tid == 0)
		scale[r] = s;
	// each thread reads back only the values it stored itself
	for (int j = tid; j < nv; j += SILU_THREADS) {
		const size_t i = 4 * (size_t)j;
		put_codes4<FP8>(q + i,
				make_float4(kcu_load(row, out_dt, i), kcu_load(row, out_dt, i + 1),
					    kcu_load(row, out_dt, i + 2), kcu_load(row, out_dt, i + 3)),
				s, qi);
	}
	for (int i = 4 * nv + tid; i < ffn; i += SILU_THREADS)
		q[i] = kcu_quant_one<FP8>(kcu_load(row, out_dt, (size_t)i), s, qi);
}

#define SILU_QUANT_MAX_SMEM (160 << 10) // a row of ffn 81920 in 16 bits; H100/H200 allow 227 KB

extern "C" int k_silu_mul_quant(void *stream, const float *d_gu, int n_rows, int ffn,
				enum dtype out_dt, enum dtype q_dt, void *d_xq, float *d_scale)
{
	int rc = check_quant(n_rows, ffn, out_dt, q_dt);
	if (rc)
		return rc;
	const size_t smem = (size_t)ffn * (out_dt == DT_F32 ? 4 : 2);
	if (smem > SILU_QUANT_MAX_SMEM)
		return ERR_UNSUPPORTED;
	if (n_rows == 0)
		return 0;
	if (!d_gu || !d_xq || !d_scale)
		return ERR_INVAL;
	void (*kern)(const float *, int, enum dtype, uint8_t *, float *) =
		q_dt == DT_F8_E4M3 ? silu_quant_kernel<true> : silu_quant_kernel<false>;
	const cudaError_t e = kcu_smem_optin(kern, smem);
	if (e == cudaErrorInvalidValue) { // more than this device allows a CTA
		(void)cudaGetLastError();
		return ERR_UNSUPPORTED;
	}
	if ((rc = kcu_check(e, "k_silu_mul_quant: shared memory")))
		return rc;
	return kcu_launch_pdl("k_silu_mul_quant", kern, dim3((unsigned)n_rows), dim3(SILU_THREADS),
			      smem, (cudaStream_t)stream, d_gu, ffn, out_dt, (uint8_t *)d_xq,
			      d_scale);
}

// ---- cast --------------------------------------------------------------------

__global__ void cast_f32_kernel(const float *in, size_t n, void *out, enum dtype dt)
{
	const size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
		kcu_store(out, dt, i, in[i]);
}

extern "C" int k_cast_f32(void *stream, const float *d_in, size_t n, void *d_out,
			  enum dtype out_dt)
{
	int rc = check_dt(out_dt);
	if (rc)
		return rc;
	if (n == 0)
		return 0;
	if (!d_in || !d_out)
		return ERR_INVAL;
	const int threads = 256;
	size_t blocks = (n + threads - 1) / threads;
	if (blocks > 65535)
		blocks = 65535; // grid-stride loop covers the rest
	cast_f32_kernel<<<(unsigned)blocks, threads, 0, (cudaStream_t)stream>>>(d_in, n, d_out,
										out_dt);
	return kcu_launched("k_cast_f32");
}
