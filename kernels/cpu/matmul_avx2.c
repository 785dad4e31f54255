/* kernels/cpu/matmul_avx2.c — AVX2 + FMA + F16C inner kernels of kcpu_matmul
 * (see matmul_impl.h), for x86 CPUs without AVX-512. Compiled with target
 * attributes; matmul.c calls in only after __builtin_cpu_supports agrees.
 * With 16 vector registers, dot tiles are taken as at most 4 weight rows x 2
 * activation rows. Integer dots use the sign trick with vpmaddubsw:
 * |w| (unsigned, up to 128) times x carrying w's sign (|x| <= 127), so the
 * int16 pair sums cannot saturate. No packed integer GEMM here: the integer
 * path uses dot tiles for every m; activations are quantized here with
 * quant.c's bits (test_quant_act_bits). Tested in tests/kernels/test_matmul.c. */
#include "matmul_impl.h"
#include "quant.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <string.h>

#define T256 __attribute__((target("avx2,fma,f16c")))
#define INLINE256 static inline __attribute__((always_inline)) T256

INLINE256 __m128i f8_to_f16_bits8(__m128i b)
{
	__m128i h = _mm_cvtepu8_epi16(b);
	__m128i mag = _mm_slli_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7F)), 7);
	__m128i sgn = _mm_slli_epi16(_mm_and_si128(h, _mm_set1_epi16(0x80)), 8);
	return _mm_or_si128(mag, sgn);
}

T256 static void cvt_avx2(const struct kmat *w, int64_t r, int64_t k0, int64_t n, float *out)
{
	const int64_t off = r * w->cols + k0;
	int64_t k = 0;
	switch (w->dtype) {
	case DT_F32:
		memcpy(out, (const float *)w->data + off, (size_t)n * sizeof(float));
		break;
	case DT_F16: {
		const uint16_t *p = (const uint16_t *)w->data + off;
		for (; k + 8 <= n; k += 8)
			_mm256_storeu_ps(out + k, _mm256_cvtph_ps(_mm_loadu_si128((const void *)(p + k))));
		for (; k < n; k++)
			out[k] = f16_to_f32(p[k]);
		break;
	}
	case DT_BF16: {
		const uint16_t *p = (const uint16_t *)w->data + off;
		for (; k + 8 <= n; k += 8) {
			__m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)(p + k)));
			_mm256_storeu_ps(out + k, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
		}
		for (; k < n; k++)
			out[k] = bf16_to_f32(p[k]);
		break;
	}
	case DT_F8_E4M3: {
		const uint8_t *p = (const uint8_t *)w->data + off;
		const float sc = mm_row_scale(w, r);
		const __m256 s = _mm256_set1_ps(sc * 256.0f); /* see f8_to_f16_bits8 */
		for (; k + 8 <= n; k += 8) {
			__m128i h = f8_to_f16_bits8(_mm_loadl_epi64((const void *)(p + k)));
			_mm256_storeu_ps(out + k, _mm256_mul_ps(_mm256_cvtph_ps(h), s));
		}
		for (; k < n; k++)
			out[k] = sc * f8e4m3_to_f32(p[k]);
		break;
	}
	default:
		memset(out, 0, (size_t)n * sizeof(float));
		break;
	}
}

INLINE256 float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

INLINE256 int32_t hsum8i(__m256i v)
{
	__m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
	s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
	return _mm_cvtsi128_si32(s);
}

/* Calls fn(NW, NX, ...) for nw in 1..4, nx in 1..2. */
#define AVX2_DISPATCH(fn, nw, nx, ...)                            \
	do {                                                      \
		switch ((nw) * 8 + (nx)) {                        \
		case 011: fn(1, 1, __VA_ARGS__); break;           \
		case 012: fn(1, 2, __VA_ARGS__); break;           \
		case 021: fn(2, 1, __VA_ARGS__); break;           \
		case 022: fn(2, 2, __VA_ARGS__); break;           \
		case 031: fn(3, 1, __VA_ARGS__); break;           \
		case 032: fn(3, 2, __VA_ARGS__); break;           \
		case 041: fn(4, 1, __VA_ARGS__); break;           \
		case 042: fn(4, 2, __VA_ARGS__); break;           \
		default: break;                                   \
		}                                                 \
	} while (0)

/* ---- F32 dot tile ---------------------------------------------------------- */

INLINE256 void dot_f32_tile(const int NW, const int NX, const float *w, int64_t ldw,
			    const float *x, int64_t ldx, int64_t n, float *y, int64_t ldy)
{
	__m256 acc[2][MM_TW];
#pragma GCC unroll 2
	for (int j = 0; j < NX; j++)
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++)
			acc[j][i] = _mm256_setzero_ps();
	int64_t k = 0;
	for (; k + 8 <= n; k += 8) {
		__m256 wv[MM_TW];
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++)
			wv[i] = _mm256_loadu_ps(w + i * ldw + k);
#pragma GCC unroll 2
		for (int j = 0; j < NX; j++) {
			__m256 xv = _mm256_loadu_ps(x + j * ldx + k);
#pragma GCC unroll 4
			for (int i = 0; i < NW; i++)
				acc[j][i] = _mm256_fmadd_ps(wv[i], xv, acc[j][i]);
		}
	}
#pragma GCC unroll 2
	for (int j = 0; j < NX; j++)
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++) {
			float s = hsum8(acc[j][i]);
			for (int64_t t = k; t < n; t++)
				s += w[i * ldw + t] * x[j * ldx + t];
			y[j * ldy + i] = s;
		}
}

T256 static void dot_f32_avx2(int nw, int nx, const float *w, int64_t ldw, const float *x,
			      int64_t ldx, int64_t n, float *y, int64_t ldy)
{
	for (int j0 = 0; j0 < nx; j0 += 2)
		AVX2_DISPATCH(dot_f32_tile, nw, nx - j0 < 2 ? nx - j0 : 2, w, ldw, x + j0 * ldx, ldx,
			      n, y + j0 * ldy, ldy);
}

/* ---- dot tile reading W in its storage dtype (m <= 4) ----------------------- */

/* 8 weights from row p at k as F32 (F8: times 2^-8, the row scale comes
 * after the reduction). */
INLINE256 __m256 load_w8(const enum dtype T, const void *p, int64_t k)
{
	switch (T) {
	case DT_F16:
		return _mm256_cvtph_ps(_mm_loadu_si128((const void *)((const uint16_t *)p + k)));
	case DT_BF16:
		return _mm256_castsi256_ps(_mm256_slli_epi32(
			_mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)((const uint16_t *)p + k))),
			16));
	case DT_F8_E4M3:
		return _mm256_cvtph_ps(
			f8_to_f16_bits8(_mm_loadl_epi64((const void *)((const uint8_t *)p + k))));
	default:
		return _mm256_loadu_ps((const float *)p + k);
	}
}

/* One weight as F32, on the same scale as load_w8. */
INLINE256 float load_w1(const enum dtype T, const void *p, int64_t k)
{
	switch (T) {
	case DT_F16:
		return f16_to_f32(((const uint16_t *)p)[k]);
	case DT_BF16:
		return bf16_to_f32(((const uint16_t *)p)[k]);
	case DT_F8_E4M3:
		return f8e4m3_to_f32(((const uint8_t *)p)[k]) * (1.0f / 256.0f);
	default:
		return ((const float *)p)[k];
	}
}

INLINE256 void dot_w_tile(const int NW, const int NX, const enum dtype T, const struct kmat *w,
			  int64_t r0, const float *x, int64_t ldx, float *y, int64_t ldy)
{
	const int64_t n = w->cols;
	const size_t esize = T == DT_F32 ? 4 : T == DT_F8_E4M3 ? 1 : 2;
	const void *rowp[MM_TW];
	__m256 acc[2][MM_TW];
#pragma GCC unroll 4
	for (int i = 0; i < NW; i++) {
		rowp[i] = (const char *)w->data + (size_t)((r0 + i) * n) * esize;
#pragma GCC unroll 2
		for (int j = 0; j < NX; j++)
			acc[j][i] = _mm256_setzero_ps();
	}
	int64_t k = 0;
	for (; k + 8 <= n; k += 8) {
		__m256 wv[MM_TW];
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++)
			wv[i] = load_w8(T, rowp[i], k);
#pragma GCC unroll 2
		for (int j = 0; j < NX; j++) {
			__m256 xv = _mm256_loadu_ps(x + j * ldx + k);
#pragma GCC unroll 4
			for (int i = 0; i < NW; i++)
				acc[j][i] = _mm256_fmadd_ps(wv[i], xv, acc[j][i]);
		}
	}
#pragma GCC unroll 4
	for (int i = 0; i < NW; i++) {
		const float s = T == DT_F8_E4M3 ? mm_row_scale(w, r0 + i) * 256.0f : 1.0f;
#pragma GCC unroll 2
		for (int j = 0; j < NX; j++) {
			float sum = hsum8(acc[j][i]);
			for (int64_t t = k; t < n; t++)
				sum += load_w1(T, rowp[i], t) * x[j * ldx + t];
			y[j * ldy + i] = sum * s;
		}
	}
}

#define DOT_W_F16(NW, NX, ...) dot_w_tile(NW, NX, DT_F16, __VA_ARGS__)
#define DOT_W_BF16(NW, NX, ...) dot_w_tile(NW, NX, DT_BF16, __VA_ARGS__)
#define DOT_W_F8(NW, NX, ...) dot_w_tile(NW, NX, DT_F8_E4M3, __VA_ARGS__)
#define DOT_W_F32(NW, NX, ...) dot_w_tile(NW, NX, DT_F32, __VA_ARGS__)

T256 static void dot_w_avx2(int nw, int nx, const struct kmat *w, int64_t r0, const float *x,
			    int64_t ldx, float *y, int64_t ldy)
{
	for (int j0 = 0; j0 < nx; j0 += 2) {
		const int n2 = nx - j0 < 2 ? nx - j0 : 2;
		const float *xj = x + j0 * ldx;
		float *yj = y + j0 * ldy;
		switch (w->dtype) {
		case DT_F16: AVX2_DISPATCH(DOT_W_F16, nw, n2, w, r0, xj, ldx, yj, ldy); break;
		case DT_BF16: AVX2_DISPATCH(DOT_W_BF16, nw, n2, w, r0, xj, ldx, yj, ldy); break;
		case DT_F8_E4M3: AVX2_DISPATCH(DOT_W_F8, nw, n2, w, r0, xj, ldx, yj, ldy); break;
		default: AVX2_DISPATCH(DOT_W_F32, nw, n2, w, r0, xj, ldx, yj, ldy); break;
		}
	}
}

/* ---- Q8_0 dot tile ---------------------------------------------------------- */

INLINE256 void dot_q8_tile(const int NW, const int NX, const struct q8_0_block *w, int64_t nb,
			   const int8_t *xq, const float *xd, float *y, int64_t ldy)
{
	const __m256i ones = _mm256_set1_epi16(1);
	__m256 acc[2][MM_TW];
#pragma GCC unroll 2
	for (int j = 0; j < NX; j++)
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++)
			acc[j][i] = _mm256_setzero_ps();
	for (int64_t b = 0; b < nb; b++) {
		__m256i aw[MM_TW], wv[MM_TW];
		float dw[MM_TW];
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++) {
			const struct q8_0_block *p = w + i * nb + b;
			wv[i] = _mm256_loadu_si256((const void *)p->qs);
			aw[i] = _mm256_abs_epi8(wv[i]);
			dw[i] = _cvtsh_ss(p->d);
		}
#pragma GCC unroll 2
		for (int j = 0; j < NX; j++) {
			__m256i xv = _mm256_loadu_si256((const void *)(xq + (j * nb + b) * Q8_0_BLOCK));
			const float dx = xd[j * nb + b];
#pragma GCC unroll 4
			for (int i = 0; i < NW; i++) {
				__m256i p16 = _mm256_maddubs_epi16(aw[i], _mm256_sign_epi8(xv, wv[i]));
				__m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
				acc[j][i] = _mm256_fmadd_ps(s, _mm256_set1_ps(dw[i] * dx), acc[j][i]);
			}
		}
	}
#pragma GCC unroll 2
	for (int j = 0; j < NX; j++)
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++)
			y[j * ldy + i] = hsum8(acc[j][i]);
}

T256 static void dot_q8_avx2(int nw, int nx, const struct q8_0_block *w, int64_t nb,
			     const int8_t *xq, const float *xd, float *y, int64_t ldy)
{
	for (int j0 = 0; j0 < nx; j0 += 2)
		AVX2_DISPATCH(dot_q8_tile, nw, nx - j0 < 2 ? nx - j0 : 2, w, nb,
			      xq + j0 * nb * Q8_0_BLOCK, xd + j0 * nb, y + j0 * ldy, ldy);
}

/* ---- I8 dot tile -------------------------------------------------------------- */

INLINE256 void dot_i8_tile(const int NW, const int NX, const int8_t *w, int64_t ldw,
			   const int8_t *xq, int64_t ldx, int64_t n, int32_t *isum)
{
	const __m256i ones = _mm256_set1_epi16(1);
	__m256i acc[2][MM_TW];
#pragma GCC unroll 2
	for (int j = 0; j < NX; j++)
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++)
			acc[j][i] = _mm256_setzero_si256();
	int64_t k = 0;
	for (; k + 32 <= n; k += 32) {
		__m256i aw[MM_TW], wv[MM_TW];
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++) {
			wv[i] = _mm256_loadu_si256((const void *)(w + i * ldw + k));
			aw[i] = _mm256_abs_epi8(wv[i]);
		}
#pragma GCC unroll 2
		for (int j = 0; j < NX; j++) {
			__m256i xv = _mm256_loadu_si256((const void *)(xq + j * ldx + k));
#pragma GCC unroll 4
			for (int i = 0; i < NW; i++) {
				__m256i p16 = _mm256_maddubs_epi16(aw[i], _mm256_sign_epi8(xv, wv[i]));
				acc[j][i] = _mm256_add_epi32(acc[j][i], _mm256_madd_epi16(p16, ones));
			}
		}
	}
#pragma GCC unroll 2
	for (int j = 0; j < NX; j++)
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++) {
			int32_t s = hsum8i(acc[j][i]);
			for (int64_t t = k; t < n; t++)
				s += (int32_t)w[i * ldw + t] * xq[j * ldx + t];
			isum[j * MM_TW + i] = s;
		}
}

T256 static void dot_i8_avx2(int nw, int nx, const int8_t *w, int64_t ldw, const int8_t *xq,
			     int64_t ldx, int64_t n, int32_t *isum)
{
	for (int j0 = 0; j0 < nx; j0 += 2)
		AVX2_DISPATCH(dot_i8_tile, nw, nx - j0 < 2 ? nx - j0 : 2, w, ldw, xq + j0 * ldx, ldx,
			      n, isum + j0 * MM_TW);
}

/* ---- activation quantization ------------------------------------------------ */

/* quant.c's q127 and absmax on 8 lanes: multiply, clamp (NaN -> -127:
 * max/min return their second operand on NaN), round to nearest even with
 * the 1.5 * 2^23 trick. Same IEEE operations, same bits; max is exact, so
 * the lane order of the maximum does not matter. */
INLINE256 __m256i q127_8(__m256 x, __m256 inv)
{
	__m256 v = _mm256_mul_ps(x, inv);
	v = _mm256_max_ps(v, _mm256_set1_ps(-127.0f));
	v = _mm256_min_ps(v, _mm256_set1_ps(127.0f));
	const __m256 magic = _mm256_set1_ps(12582912.0f);
	return _mm256_cvtps_epi32(_mm256_sub_ps(_mm256_add_ps(v, magic), magic));
}

INLINE256 __m256 abs8(__m256 x)
{
	return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
}

INLINE256 float hmax8(__m256 v)
{
	__m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	m = _mm_max_ps(m, _mm_movehl_ps(m, m));
	m = _mm_max_ss(m, _mm_movehdup_ps(m));
	return _mm_cvtss_f32(m);
}

/* max |x| over n; NaN lanes are skipped like quant.c's compare */
INLINE256 float absmax_avx2(const float *x, int64_t n)
{
	__m256 m = _mm256_setzero_ps();
	int64_t k = 0;
	for (; k + 8 <= n; k += 8)
		m = _mm256_max_ps(abs8(_mm256_loadu_ps(x + k)), m);
	float a = hmax8(m);
	for (; k < n; k++) {
		const float v = __builtin_fabsf(x[k]);
		if (v > a)
			a = v;
	}
	return a;
}

/* q[0, n) from x with scale amax / 127: 32 at a time, packed to bytes
 * (packs works within 128-bit lanes; the permute puts the dwords back in
 * order), then the scalar tail */
INLINE256 void quant_span_avx2(const float *x, int64_t n, int8_t *q, float amax)
{
	const float s = amax / 127.0f;
	const float inv1 = s > 0.0f ? 1.0f / s : 0.0f;
	const __m256 inv = _mm256_set1_ps(inv1);
	const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	int64_t k = 0;
	for (; k + 32 <= n; k += 32) {
		const __m256i a = _mm256_packs_epi32(q127_8(_mm256_loadu_ps(x + k), inv),
						     q127_8(_mm256_loadu_ps(x + k + 8), inv));
		const __m256i b = _mm256_packs_epi32(q127_8(_mm256_loadu_ps(x + k + 16), inv),
						     q127_8(_mm256_loadu_ps(x + k + 24), inv));
		_mm256_storeu_si256((__m256i *)(void *)(q + k),
				    _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), order));
	}
	for (; k < n; k++)
		q[k] = kcpu_q127(x[k], inv1);
}

T256 static void quant_act_avx2(const float *x, int64_t n, int8_t *q, float *d, int per_block)
{
	if (!per_block) {
		const float amax = absmax_avx2(x, n);
		d[0] = amax / 127.0f;
		quant_span_avx2(x, n, q, amax);
		return;
	}
	/* one block at a time: blocks are independent, so out-of-order
	 * execution overlaps one block's reduction and divisions with the
	 * next block's loads */
	for (int64_t b = 0; b < n / Q8_0_BLOCK; b++) {
		const float *xb = x + b * Q8_0_BLOCK;
		/* NaN lanes skipped as in absmax_avx2: the new values go first,
		 * since max returns its second operand on NaN */
		const __m256 z = _mm256_setzero_ps();
		const __m256 m0 = _mm256_max_ps(abs8(_mm256_loadu_ps(xb + 16)),
						_mm256_max_ps(abs8(_mm256_loadu_ps(xb)), z));
		const __m256 m1 = _mm256_max_ps(abs8(_mm256_loadu_ps(xb + 24)),
						_mm256_max_ps(abs8(_mm256_loadu_ps(xb + 8)), z));
		const float amax = hmax8(_mm256_max_ps(m0, m1));
		d[b] = amax / 127.0f;
		quant_span_avx2(xb, Q8_0_BLOCK, q + b * Q8_0_BLOCK, amax);
	}
}

/* ---- GEMM micro-kernel: 6 rows of X x 16 columns of a packed W panel ---------- */

#define MR256 6
#define NR256 16

INLINE256 void gemm_tile(const int MR, int64_t kc, const float *panel, const float *x, int64_t ldx,
			 float *y, int64_t ldy, int nv, int accumulate)
{
	__m256 c0[MR256], c1[MR256];
#pragma GCC unroll 6
	for (int i = 0; i < MR; i++) {
		c0[i] = _mm256_setzero_ps();
		c1[i] = _mm256_setzero_ps();
	}
	for (int64_t k = 0; k < kc; k++) {
		__m256 b0 = _mm256_load_ps(panel + k * NR256);
		__m256 b1 = _mm256_load_ps(panel + k * NR256 + 8);
#pragma GCC unroll 6
		for (int i = 0; i < MR; i++) {
			__m256 a = _mm256_broadcast_ss(x + i * ldx + k);
			c0[i] = _mm256_fmadd_ps(a, b0, c0[i]);
			c1[i] = _mm256_fmadd_ps(a, b1, c1[i]);
		}
	}
#pragma GCC unroll 6
	for (int i = 0; i < MR; i++) {
		float *yi = y + i * ldy;
		if (nv == NR256) {
			if (accumulate) {
				c0[i] = _mm256_add_ps(c0[i], _mm256_loadu_ps(yi));
				c1[i] = _mm256_add_ps(c1[i], _mm256_loadu_ps(yi + 8));
			}
			_mm256_storeu_ps(yi, c0[i]);
			_mm256_storeu_ps(yi + 8, c1[i]);
		} else {
			float tmp[NR256];
			_mm256_storeu_ps(tmp, c0[i]);
			_mm256_storeu_ps(tmp + 8, c1[i]);
			for (int c = 0; c < nv; c++)
				yi[c] = accumulate ? yi[c] + tmp[c] : tmp[c];
		}
	}
}

T256 static void gemm_avx2(int mr, int64_t kc, const float *panel, const float *x, int64_t ldx,
			   float *y, int64_t ldy, int nv, int accumulate)
{
	switch (mr) {
	case 1: gemm_tile(1, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	case 2: gemm_tile(2, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	case 3: gemm_tile(3, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	case 4: gemm_tile(4, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	case 5: gemm_tile(5, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	case 6: gemm_tile(6, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	default: break;
	}
}

static const struct mm_kernels avx2_kernels = {
	.name = "avx2",
	.cvt = cvt_avx2,
	.dot_f32 = dot_f32_avx2,
	.dot_w = dot_w_avx2,
	.dot_q8 = dot_q8_avx2,
	.dot_i8 = dot_i8_avx2,
	.quant_act = quant_act_avx2,
	.mr = MR256,
	.nr = NR256,
	.gemm = gemm_avx2,
	.qmr = 0,
	.pack_q8 = NULL,
	.pack_i8 = NULL,
	.gemm_q8 = NULL,
	.gemm_i8 = NULL,
};

const struct mm_kernels *mm_kernels_avx2(void)
{
	return &avx2_kernels;
}

#else

const struct mm_kernels *mm_kernels_avx2(void)
{
	return NULL;
}

#endif
