// kernels/cuda/k_gemv.cu — kcuda_gemv.h: the decode GEMV for 16-bit and
// 8-bit weights, Y[t, n] (+)= X[t, k] · dequant(W[n, k])^T, t small.
// Owns no state. CPU counterpart: kcpu_matmul_ref (kernels/cpu/matmul_ref.c)
// on the same weights; test: tests/kernels/test_cuda_gemv.c; benchmark:
// tests/bench/bench_cuda_gemv.c.
//
// Layout of the work. A CTA owns R consecutive rows of W and a group of up
// to TG tokens (blockIdx.y); all of its threads split K. A row is cut into
// 16-byte chunks (8 values of 16-bit W, 16 of 8-bit W); thread i takes
// chunks i, i + nt, i + 2 nt, ... A step issues every load of the thread,
// U chunks of each of the R rows (R * U = 8 loads of 16 bytes, plus the
// Q8_0 block scales), before it uses any of them: one memory round trip per
// step (one to four steps per CTA at the Llama shapes). X is read straight
// from global memory in 16-byte loads (it is small and every CTA reads the
// same X: L1/L2 serve it), issued with the weight loads when they fit in
// registers (T <= 2), else all TG tokens' loads of 8 values together — no
// shared-memory staging, no barrier before the weight loads. Partial sums
// are reduced by warp shuffles, then across warps in shared memory (one
// barrier at the end), in a fixed order: results do not depend on timing.
// FP32 FMA throughput bounds it from about 4 tokens (8-bit W) or 8 (16-bit
// W) on: above that a tensor-core GEMM is the better tool.
//
// Epilogues (k_gemv_epi): SwiGLU has each CTA take R / 2 gate rows and the
// up rows of the same outputs, and write silu(g) * u instead of Y; RMSNorm
// has the last CTA of a token group (a counter in global memory, the
// threadfence-reduction pattern) norm the group's finished rows of Y in
// k_ops.cu's summation order. Both give the unfused kernels' bits.
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cuda/kcuda_gemv.h"
#include "kernels/cuda/kcuda_internal.h"

// Weight kinds (template parameter).
enum { GW_F16, GW_BF16, GW_I8, GW_F8, GW_Q8R };
// Epilogues (template parameter): none, SwiGLU, RMSNorm (kcuda_gemv.h).
enum { GE_NONE, GE_SILU, GE_NORM };

#define GEMV_MAX_THREADS 256
#define GEMV_MAX_WARPS   (GEMV_MAX_THREADS / 32)
#define GEMV_LOADS       8 // 16-byte weight loads per thread per step
#define GEMV_TG_MAX      8 // tokens per pass over W

__host__ __device__ constexpr bool gw_is16(int wk)
{
	return wk == GW_F16 || wk == GW_BF16;
}
// Values per 16-byte chunk of W.
__host__ __device__ constexpr int gw_vpc(int wk)
{
	return gw_is16(wk) ? 8 : 16;
}
// Chunks of each row per step.
__host__ __device__ constexpr int gw_unroll(int r)
{
	return r >= GEMV_LOADS ? 1 : GEMV_LOADS / r;
}

// ---- conversions in registers --------------------------------------------------

// Two 16-bit values (packed in u, lowest first) to floats; exact.
template <bool BF> __device__ __forceinline__ float2 gv_h2(uint32_t u)
{
	if (BF)
		return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xFFFF0000u));
	__half2_raw r;
	r.x = (unsigned short)(u & 0xFFFFu);
	r.y = (unsigned short)(u >> 16);
	return __half22float2(__half2(r));
}

// Values 4q .. 4q + 3 of a 16-byte chunk w[4] of kind WK, as floats.
template <int WK> __device__ __forceinline__ void gv_w4(const uint32_t w[4], int q, float f[4])
{
	if (gw_is16(WK)) {
		const float2 a = gv_h2<WK == GW_BF16>(w[2 * q]);
		const float2 b = gv_h2<WK == GW_BF16>(w[2 * q + 1]);
		f[0] = a.x;
		f[1] = a.y;
		f[2] = b.x;
		f[3] = b.y;
	} else if (WK == GW_F8) {
		kcu_f8x4(w[q], f);
	} else {
		kcu_i8x4(w[q], f);
	}
}

// ---- epilogues ----------------------------------------------------------------------

// The epilogue's arguments on the device (k_gemv_epi's, checked).
struct gemv_epi_dev {
	void *out;
	enum dtype out_dt;
	const float *norm_w;
	float eps;
	unsigned *counters;
	int norm_threads; // kcu_norm_threads(n): the separate norm's block size
};

// Row of W of the CTA's row r. GE_SILU: the first R / 2 rows are gate rows
// j0 .. j0 + R/2 - 1 of the [gate; up] matrix (n = 2 ffn rows), the others
// the up rows of the same j, so that one CTA finishes both halves of its
// outputs. n (past the end) for a row past the matrix.
template <int EPI, int R> __device__ __forceinline__ int gemv_row(int r, int n)
{
	if (EPI != GE_SILU)
		return (int)blockIdx.x * R + r;
	constexpr int H = R / 2;
	const int nh = n / 2, j = (int)blockIdx.x * H + (r % H);
	if (j >= nh)
		return n;
	return r < H ? j : nh + j;
}

// GE_NORM, run by the last CTA of a token group to finish: out[t] =
// rmsnorm(y[t]) * w for the group's tokens, with the sums of squares in
// exactly the order of k_ops.cu's rmsnorm_kernel on norm_threads threads
// (each of this CTA's threads plays several of those; the warp butterflies
// and the final warp run on the same values), so the fused norm gives the
// separate kernel's bits. y is read through L2 (__ldcg): other SMs wrote it.
__device__ void gemv_norm_rows(const float *y, int n, int t0, int tn, const gemv_epi_dev &e)
{
	__shared__ float part[512];
	__shared__ float wsum[16];
	const int nt = (int)blockDim.x, tid = (int)threadIdx.x;
	const int lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
	const int vbd = e.norm_threads, nv = n / 4;
	for (int tt = 0; tt < tn; tt++) {
		const float4 *xr = (const float4 *)(y + (size_t)(t0 + tt) * n);
		for (int vt = tid; vt < vbd; vt += nt) {
			float ss = 0.0f;
			for (int j = vt; j < nv; j += vbd)
				ss = kcu_sumsq4(ss, __ldcg(xr + j));
			part[vt] = ss;
		}
		__syncthreads();
		for (int vw = warp; vw < vbd / 32; vw += nw) {
			const float v = kcu_warp_sum(part[vw * 32 + lane]);
			if (lane == 0)
				wsum[vw] = v;
		}
		__syncthreads();
		if (warp == 0) {
			float v = lane < vbd / 32 ? wsum[lane] : 0.0f;
			v = kcu_warp_sum(v);
			if (lane == 0)
				part[0] = v;
		}
		__syncthreads();
		const float inv = kcu_inv_rms(part[0], n, e.eps);
		const size_t ob = (size_t)(t0 + tt) * n;
		for (int j = tid; j < nv; j += nt) {
			const float4 v = __ldcg(xr + j);
			const float4 g = ((const float4 *)e.norm_w)[j];
			kcu_store(e.out, e.out_dt, ob + 4 * (size_t)j, v.x * inv * g.x);
			kcu_store(e.out, e.out_dt, ob + 4 * (size_t)j + 1, v.y * inv * g.y);
			kcu_store(e.out, e.out_dt, ob + 4 * (size_t)j + 2, v.z * inv * g.z);
			kcu_store(e.out, e.out_dt, ob + 4 * (size_t)j + 3, v.w * inv * g.w);
		}
		__syncthreads(); // part is reused by the next token
	}
}

// ---- the kernel -------------------------------------------------------------------

// Values 8 j .. 8 j + 7 of token tt of the group at xg: one 16-byte load
// (k % 8 == 0 and d_x 16-byte aligned). Tokens past the group's last (tt >=
// tn, when t is not a multiple of TG) read the last token's row instead:
// their sums are computed and dropped, which costs less than a branch that
// would keep the loads of the other tokens from being issued together.
__device__ __forceinline__ uint4 x_load(const unsigned short *xg, int tt, int tn, int k, int j)
{
	return __ldg((const uint4 *)(xg + (size_t)min(tt, tn - 1) * k) + j);
}

template <int WK, int TG, int R, bool XBF, int EPI>
__global__ void __launch_bounds__(GEMV_MAX_THREADS)
    gemv_kernel(const uint8_t *__restrict__ w, const float *__restrict__ scale, int n_scales,
                const unsigned short *__restrict__ qd, int n, int k,
                const unsigned short *__restrict__ x, int t, float *__restrict__ y, int accumulate,
                const gemv_epi_dev e)
{
	constexpr int VPC = gw_vpc(WK);
	constexpr int NH = VPC / 8; // 16-byte X loads per chunk and token
	constexpr int U = gw_unroll(R);
	// X of the whole step preloaded with W when it takes <= 32 registers.
	constexpr bool XPRE = TG * U * NH <= 8;
	__shared__ float red[GEMV_MAX_WARPS][R * TG];

	const int nt = (int)blockDim.x, tid = (int)threadIdx.x;
	const int lane = tid & 31, warp = tid >> 5;
	const int nck = k / VPC; // chunks per row
	const int t0 = (int)blockIdx.y * TG;
	const int tn = min(TG, t - t0);
	const size_t row_bytes = (size_t)k * (gw_is16(WK) ? 2 : 1);
	const unsigned short *xg = x + (size_t)t0 * k;

	float acc[R][TG];
#pragma unroll
	for (int r = 0; r < R; r++)
#pragma unroll
		for (int tt = 0; tt < TG; tt++)
			acc[r][tt] = 0.0f;
	// PDL: the first step's weight loads may overlap the previous kernel;
	// X and Y only after the wait (kcuda_internal.h)
	kcu_pdl_trigger();

	for (int c0 = 0; c0 < nck; c0 += U * nt) {
		// Every load of the step first: R * U chunks (zero where past the
		// row's end or past n), for Q8_0 their block scales, and when it
		// fits in registers X too (XPRE).
		uint32_t wv[R][U][4];
		float wd[R][U];
		uint4 xr[XPRE ? U : 1][XPRE ? NH : 1][XPRE ? TG : 1];
#pragma unroll
		for (int r = 0; r < R; r++) {
			const int row = gemv_row<EPI, R>(r, n);
#pragma unroll
			for (int u = 0; u < U; u++) {
				const int c = c0 + u * nt + tid;
				wd[r][u] = 0.0f;
				wv[r][u][0] = wv[r][u][1] = wv[r][u][2] = wv[r][u][3] = 0;
				if (row >= n || c >= nck)
					continue;
				// Streaming loads (evict first): W is read once and should
				// not push X out of L1 / L2.
				const uint4 v =
				    __ldcs((const uint4 *)(w + (size_t)row * row_bytes) + c);
				wv[r][u][0] = v.x;
				wv[r][u][1] = v.y;
				wv[r][u][2] = v.z;
				wv[r][u][3] = v.w;
				if (WK == GW_Q8R) // chunk c: values 16c .. 16c + 15, block c / 2
					wd[r][u] = __half2float(__ushort_as_half(
					    __ldcs(qd + (size_t)row * (k / 32) + c / 2)));
			}
		}
		if (c0 == 0)
			kcu_pdl_wait();
		if (XPRE) {
#pragma unroll
			for (int u = 0; u < U; u++) {
				const int c = c0 + u * nt + tid;
#pragma unroll
				for (int h = 0; h < NH; h++)
#pragma unroll
					for (int tt = 0; tt < TG; tt++)
						xr[XPRE ? u : 0][XPRE ? h : 0][XPRE ? tt : 0] =
						    c < nck ? x_load(xg, tt, tn, k, c * NH + h)
						            : make_uint4(0u, 0u, 0u, 0u);
			}
		}
#pragma unroll
		for (int u = 0; u < U; u++) {
			const int c = c0 + u * nt + tid;
			if (c >= nck) // c grows with u: nothing further for this thread
				break;
#pragma unroll
			for (int h = 0; h < NH; h++) {
				// 8 values of X per token, all TG loads before their use.
				uint4 xq[TG];
#pragma unroll
				for (int tt = 0; tt < TG; tt++)
					xq[tt] = XPRE
					             ? xr[XPRE ? u : 0][XPRE ? h : 0][XPRE ? tt : 0]
					             : x_load(xg, tt, tn, k, c * NH + h);
#pragma unroll
				for (int q = 2 * h; q < 2 * h + 2; q++) {
					float wf[R][4];
#pragma unroll
					for (int r = 0; r < R; r++) {
						gv_w4<WK>(wv[r][u], q, wf[r]);
						if (WK ==
						    GW_Q8R) { // code * F16 scale: exact in F32
#pragma unroll
							for (int e = 0; e < 4; e++)
								wf[r][e] *= wd[r][u];
						}
					}
#pragma unroll
					for (int tt = 0; tt < TG; tt++) {
						const uint32_t x0 = (q & 1) ? xq[tt].z : xq[tt].x;
						const uint32_t x1 = (q & 1) ? xq[tt].w : xq[tt].y;
						const float2 xa = gv_h2<XBF>(x0),
						             xb = gv_h2<XBF>(x1);
#pragma unroll
						for (int r = 0; r < R; r++) {
							float a = acc[r][tt];
							a = fmaf(wf[r][0], xa.x, a);
							a = fmaf(wf[r][1], xa.y, a);
							a = fmaf(wf[r][2], xb.x, a);
							a = fmaf(wf[r][3], xb.y, a);
							acc[r][tt] = a;
						}
					}
				}
			}
		}
	}

	kcu_pdl_wait(); // (returns at once when the loop above has waited)
	// Every thread gets here (no early exit above), and nt is a multiple of
	// 32: full-mask shuffles are safe.
#pragma unroll
	for (int r = 0; r < R; r++)
#pragma unroll
		for (int tt = 0; tt < TG; tt++) {
			const float v = kcu_warp_sum(acc[r][tt]);
			if (lane == 0)
				red[warp][r * TG + tt] = v;
		}
	__syncthreads();
	const int nw = nt >> 5;
	__shared__ float fin[EPI == GE_SILU ? R * TG : 1]; // GE_SILU: the finished sums
	for (int i = tid; i < R * TG; i += nt) {
		const int r = i / TG, tt = i - r * TG, row = gemv_row<EPI, R>(r, n);
		if (row >= n || tt >= tn)
			continue;
		float s = red[0][i];
		for (int j = 1; j < nw; j++)
			s += red[j][i];
		// __fmul_rn: never contracted into the accumulate below, so that
		// every instantiation (epilogue or not) rounds alike
		if ((WK == GW_I8 || WK == GW_F8) && scale)
			s = __fmul_rn(s, scale[n_scales == 1 ? 0 : row]);
		if (EPI == GE_SILU) {
			fin[EPI == GE_SILU ? i : 0] = s;
			continue;
		}
		float *o = y + (size_t)(t0 + tt) * n + row;
		*o = accumulate ? *o + s : s;
	}
	if (EPI == GE_SILU) {
		// act[t, j] = silu(gate_j) * up_j, as k_silu_mul computes it from Y
		constexpr int H = R / 2;
		const int nh = n / 2;
		__syncthreads();
		for (int i = tid; i < H * TG; i += nt) {
			const int r = i / TG, tt = i - r * TG, j = (int)blockIdx.x * H + r;
			if (j >= nh || tt >= tn)
				continue;
			kcu_store(e.out, e.out_dt, (size_t)(t0 + tt) * nh + j,
			          kcu_silu_mul1(fin[EPI == GE_SILU ? i : 0],
			                        fin[EPI == GE_SILU ? (r + H) * TG + tt : 0]));
		}
	}
	if (EPI == GE_NORM) {
		// The last CTA of the token group to finish its rows norms them:
		// every thread fences its Y stores, then one counts the CTA in.
		__shared__ int s_last;
		__threadfence();
		__syncthreads();
		// atomicInc wraps to 0 at the last CTA: ready for the next launch
		if (tid == 0)
			s_last = atomicInc(e.counters + blockIdx.y, gridDim.x - 1) == gridDim.x - 1;
		__syncthreads();
		if (s_last) {
			__threadfence();
			gemv_norm_rows(y, n, t0, tn, e);
		}
	}
}

// ---- launch -----------------------------------------------------------------------

struct gemv_args {
	cudaStream_t st;
	const void *w;
	const float *scale;
	int n_scales;
	const void *qd;
	int n, k;
	const void *x;
	bool x_bf16;
	int t;
	float *y;
	int accumulate;
	gemv_epi_dev e;
};

template <int WK, int TG, int R, bool XBF, int EPI> static int gemv_launch(const struct gemv_args *a)
{
	constexpr int U = gw_unroll(R);
	const int nck = a->k / gw_vpc(WK);
	// As few steps as GEMV_MAX_WARPS allow, then as few warps as cover the
	// row in that many steps (steps equally full: K = 14336 in 16-bit is
	// four steps of 7 warps, not three and a half of 8).
	const int wstep = 32 * U; // chunks a warp covers per step
	const int steps = (nck + wstep * GEMV_MAX_WARPS - 1) / (wstep * GEMV_MAX_WARPS);
	const int warps = (nck + steps * wstep - 1) / (steps * wstep);
	// GE_SILU: a CTA owns R / 2 outputs (a gate and an up row each)
	const unsigned gx = EPI == GE_SILU ? (unsigned)((a->n / 2 + R / 2 - 1) / (R / 2))
	                                   : (unsigned)((a->n + R - 1) / R);
	const unsigned gy = (unsigned)((a->t + TG - 1) / TG);
	return kcu_launch_pdl("k_gemv", gemv_kernel<WK, TG, R, XBF, EPI>, dim3(gx, gy),
	                      dim3((unsigned)(32 * warps)), 0, a->st, (const uint8_t *)a->w, a->scale,
	                      a->n_scales, (const unsigned short *)a->qd, a->n, a->k,
	                      (const unsigned short *)a->x, a->t, a->y, a->accumulate, a->e);
}

template <int WK, int TG, int R, int EPI> static int gemv_by_x(const struct gemv_args *a)
{
	return a->x_bf16 ? gemv_launch<WK, TG, R, true, EPI>(a)
	                 : gemv_launch<WK, TG, R, false, EPI>(a);
}

// rows < 0: an epilogue (-1 SwiGLU, -2 RMSNorm), 4 rows per CTA.
template <int WK, int TG> static int gemv_by_rows(const struct gemv_args *a, int rows)
{
	if (rows == -1)
		return gemv_by_x<WK, TG, 4, GE_SILU>(a);
	if (rows == -2)
		return gemv_by_x<WK, TG, 4, GE_NORM>(a);
	if (rows == 2)
		return gemv_by_x<WK, TG, 2, GE_NONE>(a);
	if (rows == 8)
		return gemv_by_x<WK, TG, 8, GE_NONE>(a);
	return gemv_by_x<WK, TG, 4, GE_NONE>(a);
}

template <int WK> static int gemv_by_tokens(const struct gemv_args *a, int rows)
{
	if (a->t == 1)
		return gemv_by_rows<WK, 1>(a, rows);
	if (a->t == 2)
		return gemv_by_rows<WK, 2>(a, rows);
	if (a->t <= 4)
		return gemv_by_rows<WK, 4>(a, rows);
	return gemv_by_rows<WK, GEMV_TG_MAX>(a, rows);
}

// Rows per CTA when the caller leaves it to us. 4: eight 16-byte loads per
// thread per step as two chunks of four rows, so X values are reused four
// times from registers; bench_cuda_gemv times 2 and 8 beside it.
static int gemv_auto_rows(enum dtype w_dt, int n, int k, int t)
{
	(void)w_dt;
	(void)n;
	(void)k;
	(void)t;
	return 4;
}

// Checks the arguments shared by every entry and fills *a (no epilogue).
static int gemv_setup(struct gemv_args *a, void *stream, const void *d_w, enum dtype w_dt,
                      const float *d_scale, int n_scales, const void *d_q8_d, int n, int k,
                      const void *d_x, enum dtype x_dt, int t, float *d_y, int accumulate,
                      bool need_y)
{
	if (!d_w || !d_x || (need_y && !d_y) || n <= 0 || k <= 0 || t <= 0)
		return ERR_INVAL;
	if ((int)x_dt < 0 || x_dt >= DT__COUNT)
		return ERR_INVAL;
	const bool is8 = w_dt == DT_I8 || w_dt == DT_F8_E4M3;
	if (is8 && d_scale && n_scales != 1 && n_scales != n)
		return ERR_INVAL;
	if (w_dt == DT_Q8_0 && !d_q8_d)
		return ERR_INVAL;
	if (x_dt != DT_F16 && x_dt != DT_BF16)
		return ERR_UNSUPPORTED;
	const int gran = w_dt == DT_Q8_0 ? 32 : is8 ? 16 : 8;
	if (!(w_dt == DT_F16 || w_dt == DT_BF16 || is8 || w_dt == DT_Q8_0))
		return ERR_UNSUPPORTED;
	if (k % gran || ((uintptr_t)d_w & 15) || ((uintptr_t)d_x & 15))
		return ERR_UNSUPPORTED;
	if (w_dt == DT_Q8_0 && ((uintptr_t)d_q8_d & 1))
		return ERR_UNSUPPORTED;
	if ((t + GEMV_TG_MAX - 1) / GEMV_TG_MAX > 65535)
		return ERR_UNSUPPORTED;

	memset(a, 0, sizeof *a);
	a->st = (cudaStream_t)stream;
	a->w = d_w;
	a->scale = is8 ? d_scale : NULL;
	a->n_scales = n_scales;
	a->qd = w_dt == DT_Q8_0 ? d_q8_d : NULL;
	a->n = n;
	a->k = k;
	a->x = d_x;
	a->x_bf16 = x_dt == DT_BF16;
	a->t = t;
	a->y = d_y;
	a->accumulate = accumulate;
	return 0;
}

static int gemv_dispatch(enum dtype w_dt, const struct gemv_args *a, int rows)
{
	switch (w_dt) {
	case DT_F16:
		return gemv_by_tokens<GW_F16>(a, rows);
	case DT_BF16:
		return gemv_by_tokens<GW_BF16>(a, rows);
	case DT_I8:
		return gemv_by_tokens<GW_I8>(a, rows);
	case DT_F8_E4M3:
		return gemv_by_tokens<GW_F8>(a, rows);
	default:
		return gemv_by_tokens<GW_Q8R>(a, rows);
	}
}

extern "C" int k_gemv_rows(void *stream, const void *d_w, enum dtype w_dt, const float *d_scale,
                           int n_scales, const void *d_q8_d, int n, int k, const void *d_x,
                           enum dtype x_dt, int t, float *d_y, int accumulate, int rows_per_cta)
{
	struct gemv_args a;
	int rc = gemv_setup(&a, stream, d_w, w_dt, d_scale, n_scales, d_q8_d, n, k, d_x, x_dt, t,
	                    d_y, accumulate, true);
	if (rc)
		return rc;
	if (rows_per_cta != 0 && rows_per_cta != 2 && rows_per_cta != 4 && rows_per_cta != 8)
		return ERR_INVAL;
	const int rows = rows_per_cta ? rows_per_cta : gemv_auto_rows(w_dt, n, k, t);
	return gemv_dispatch(w_dt, &a, rows);
}

extern "C" int k_gemv_epi(void *stream, const void *d_w, enum dtype w_dt, const float *d_scale,
                          int n_scales, const void *d_q8_d, int n, int k, const void *d_x,
                          enum dtype x_dt, int t, float *d_y, int accumulate,
                          const struct k_gemv_epi *epi)
{
	if (!epi)
		return ERR_INVAL;
	const bool silu = epi->kind == K_GEMV_EPI_SILU_MUL;
	if (epi->kind == K_GEMV_EPI_NONE)
		return k_gemv(stream, d_w, w_dt, d_scale, n_scales, d_q8_d, n, k, d_x, x_dt, t, d_y,
		              accumulate);
	if (!silu && epi->kind != K_GEMV_EPI_RMSNORM)
		return ERR_INVAL;
	struct gemv_args a;
	int rc = gemv_setup(&a, stream, d_w, w_dt, d_scale, n_scales, d_q8_d, n, k, d_x, x_dt, t,
	                    d_y, accumulate, !silu);
	if (rc)
		return rc;
	if (!epi->out || !kcu_is_16bit_or_f32(epi->out_dt))
		return epi->out && (int)epi->out_dt >= 0 && epi->out_dt < DT__COUNT ? ERR_UNSUPPORTED
		                                                                   : ERR_INVAL;
	if (silu) {
		if (n % 2)
			return ERR_INVAL;
	} else {
		if (!epi->norm_w || !epi->counters || !(epi->eps >= 0.0f))
			return ERR_INVAL;
		// the float4 path of the separate norm only (k_ops.cu's rmsnorm_kernel)
		const size_t osz = epi->out_dt == DT_F32 ? 4 : 2;
		if (n % 4 || ((uintptr_t)d_y & 15) || ((uintptr_t)epi->norm_w & 15) ||
		    ((uintptr_t)epi->out & (4 * osz - 1)))
			return ERR_UNSUPPORTED;
	}
	a.e.out = epi->out;
	a.e.out_dt = epi->out_dt;
	a.e.norm_w = epi->norm_w;
	a.e.eps = epi->eps;
	a.e.counters = epi->counters;
	a.e.norm_threads = (int)kcu_norm_threads(n);
	return gemv_dispatch(w_dt, &a, silu ? -1 : -2);
}

extern "C" int k_gemv(void *stream, const void *d_w, enum dtype w_dt, const float *d_scale,
                      int n_scales, const void *d_q8_d, int n, int k, const void *d_x,
                      enum dtype x_dt, int t, float *d_y, int accumulate)
{
	return k_gemv_rows(stream, d_w, w_dt, d_scale, n_scales, d_q8_d, n, k, d_x, x_dt, t, d_y,
	                   accumulate, 0);
}
