/* kernels/cpu/matmul_avx512.c — AVX-512 (F/BW/DQ/VL) + VNNI inner kernels of
 * kcpu_matmul (see matmul_impl.h). Compiled with target attributes so the
 * binary still runs on CPUs without AVX-512; matmul.c only calls in after
 * __builtin_cpu_supports says yes. Integer dots use vpdpbusd (u8 x s8): the
 * activation side is made unsigned by adding 128 (xor 0x80) and the 128*sum(w)
 * this adds is subtracted, computed once per weight vector. Batched Q8_0
 * decode uses AMX-INT8 tiles (signed x signed, no correction) when the CPU
 * has them and Linux grants the tile state. Tested against the references
 * in tests/kernels/test_matmul.c. */
#include "matmul_impl.h"

#if defined(__x86_64__)

#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,avx2")))
#define INLINE512 static inline __attribute__((always_inline)) T512

/* The address of p + off bytes, formed as an integer: the GEMV tiles
 * prefetch the next tile's rows, which past the last row point beyond the
 * weights; a prefetch may do that, C pointer arithmetic may not. */
static inline const char *addr_plus(const void *p, size_t off)
{
	return (const char *)(uintptr_t)((uintptr_t)p + off);
}

/* 1 << n lanes set, n <= 16. */
static inline __mmask16 low_mask16(int64_t n)
{
	return (__mmask16)((1u << n) - 1u);
}

/* FP8 E4M3 -> F16 bit pattern: same sign, exponent and mantissa moved into
 * place; the F16 exponent bias is 8 more than E4M3's (15 vs 7), so the F16
 * value is the E4M3 value * 2^-8 exactly (subnormals too); callers fold 2^8
 * into the row scale. NaN (0x7F/0xFF) is not preserved. */
INLINE512 __m256i f8_to_f16_bits(__m128i b)
{
	/* sign-extended, shifted left 7: the sign lands in bits 15 and 14,
	 * exponent and mantissa in 13..7; clear bit 14 (three operations where
	 * masking sign and magnitude apart takes five: FP8 decode converts every
	 * weight it reads) */
	__m256i h = _mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7);
	return _mm256_and_si256(h, _mm256_set1_epi16((short)0xBFFF));
}

T512 static void cvt_avx512(const struct kmat *w, int64_t r, int64_t k0, int64_t n, float *out)
{
	const int64_t off = r * w->cols + k0;
	int64_t k = 0;
	switch (w->dtype) {
	case DT_F32:
		memcpy(out, (const float *)w->data + off, (size_t)n * sizeof(float));
		break;
	case DT_F16: {
		const uint16_t *p = (const uint16_t *)w->data + off;
		for (; k + 16 <= n; k += 16)
			_mm512_storeu_ps(out + k, _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(p + k))));
		if (k < n) {
			__mmask16 mk = low_mask16(n - k);
			_mm512_mask_storeu_ps(out + k, mk,
					      _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, p + k)));
		}
		break;
	}
	case DT_BF16: {
		const uint16_t *p = (const uint16_t *)w->data + off;
		for (; k + 16 <= n; k += 16) {
			__m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(p + k)));
			_mm512_storeu_ps(out + k, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
		}
		if (k < n) {
			__mmask16 mk = low_mask16(n - k);
			__m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, p + k));
			_mm512_mask_storeu_ps(out + k, mk, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
		}
		break;
	}
	case DT_F8_E4M3: {
		const uint8_t *p = (const uint8_t *)w->data + off;
		const __m512 s = _mm512_set1_ps(mm_row_scale(w, r) * 256.0f);
		for (; k + 16 <= n; k += 16) {
			__m256i h = f8_to_f16_bits(_mm_loadu_si128((const void *)(p + k)));
			_mm512_storeu_ps(out + k, _mm512_mul_ps(_mm512_cvtph_ps(h), s));
		}
		if (k < n) {
			__mmask16 mk = low_mask16(n - k);
			__m256i h = f8_to_f16_bits(_mm_maskz_loadu_epi8(mk, p + k));
			_mm512_mask_storeu_ps(out + k, mk, _mm512_mul_ps(_mm512_cvtph_ps(h), s));
		}
		break;
	}
	default:
		memset(out, 0, (size_t)n * sizeof(float));
		break;
	}
}

/* ---- F32 dot tile ---------------------------------------------------------- */

/* Horizontal sums of 16 vectors at once (a transposing add tree: 15 steps of
 * two shuffles and an add, instead of 16 separate reductions). On return
 * out[4*i + j] = sum of the lanes of v[4*j + i]. */
/* The same tree for a sum (MAX 0) or a maximum (MAX 1), as a vector:
 * lane 4*i + j reduces v[4*j + i]. */
INLINE512 __m512 reduce16_v(const __m512 v[16], const int MAX)
{
#define RED16(a, b) (MAX ? _mm512_max_ps(a, b) : _mm512_add_ps(a, b))
	__m512 r1[8], r2[4], r3[2];
#pragma GCC unroll 8
	for (int p = 0; p < 8; p++) /* 256-bit halves: each vector to 8 partials */
		r1[p] = RED16(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0x44),
			      _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], 0xEE));
#pragma GCC unroll 4
	for (int p = 0; p < 4; p++) /* 128-bit chunks: each vector to 4 partials */
		r2[p] = RED16(_mm512_shuffle_f32x4(r1[2 * p], r1[2 * p + 1], 0x88),
			      _mm512_shuffle_f32x4(r1[2 * p], r1[2 * p + 1], 0xDD));
#pragma GCC unroll 2
	for (int p = 0; p < 2; p++) /* within chunks: to 2 partials */
		r3[p] = RED16(_mm512_shuffle_ps(r2[2 * p], r2[2 * p + 1], 0x88),
			      _mm512_shuffle_ps(r2[2 * p], r2[2 * p + 1], 0xDD));
	return RED16(_mm512_shuffle_ps(r3[0], r3[1], 0x88), _mm512_shuffle_ps(r3[0], r3[1], 0xDD));
#undef RED16
}

INLINE512 void reduce16(const __m512 v[16], float out[16])
{
	_mm512_storeu_ps(out, reduce16_v(v, 0));
}

INLINE512 void dot_f32_tile(const int NW, const int NX, const float *w, int64_t ldw,
			    const float *x, int64_t ldx, int64_t n, float *y, int64_t ldy)
{
	__m512 acc[MM_TX][MM_TW];
#pragma GCC unroll 4
	for (int j = 0; j < NX; j++)
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++)
			acc[j][i] = _mm512_setzero_ps();
	int64_t k = 0;
	for (; k + 16 <= n; k += 16) {
		__m512 wv[MM_TW];
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++) {
			wv[i] = _mm512_loadu_ps(w + i * ldw + k);
			/* keep it in a register: GCC otherwise folds the load into
			 * each of the NX FMAs, and the tile becomes load-bound */
			__asm__("" : "+v"(wv[i]));
		}
#pragma GCC unroll 4
		for (int j = 0; j < NX; j++) {
			__m512 xv = _mm512_loadu_ps(x + j * ldx + k);
			__asm__("" : "+v"(xv));
#pragma GCC unroll 4
			for (int i = 0; i < NW; i++)
				acc[j][i] = _mm512_fmadd_ps(wv[i], xv, acc[j][i]);
		}
	}
	if (k < n) {
		__mmask16 mk = low_mask16(n - k);
		__m512 wv[MM_TW];
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++)
			wv[i] = _mm512_maskz_loadu_ps(mk, w + i * ldw + k);
#pragma GCC unroll 4
		for (int j = 0; j < NX; j++) {
			__m512 xv = _mm512_maskz_loadu_ps(mk, x + j * ldx + k);
#pragma GCC unroll 4
			for (int i = 0; i < NW; i++)
				acc[j][i] = _mm512_fmadd_ps(wv[i], xv, acc[j][i]);
		}
	}
	__m512 v[16];
	float sums[16];
#pragma GCC unroll 4
	for (int j = 0; j < MM_TX; j++)
#pragma GCC unroll 4
		for (int i = 0; i < MM_TW; i++)
			v[4 * j + i] = j < NX && i < NW ? acc[j][i] : _mm512_setzero_ps();
	reduce16(v, sums);
#pragma GCC unroll 4
	for (int j = 0; j < NX; j++)
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++)
			y[j * ldy + i] = sums[4 * i + j];
}

T512 static void dot_f32_avx512(int nw, int nx, const float *w, int64_t ldw, const float *x,
				int64_t ldx, int64_t n, float *y, int64_t ldy)
{
	MM_TILE_DISPATCH(dot_f32_tile, nw, nx, w, ldw, x, ldx, n, y, ldy);
}

/* ---- dot tile reading W in its storage dtype ------------------------------ */

/* 16 weights from row p at k, as F32 (F8: times 2^-8, see f8_to_f16_bits;
 * the row scale is applied after the reduction). */
INLINE512 __m512 load_w16(const enum dtype T, const void *p, int64_t k, __mmask16 mk)
{
	switch (T) {
	case DT_F16:
		return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)p + k));
	case DT_BF16:
		return _mm512_castsi512_ps(_mm512_slli_epi32(
			_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, (const uint16_t *)p + k)), 16));
	case DT_F8_E4M3:
		return _mm512_cvtph_ps(f8_to_f16_bits(_mm_maskz_loadu_epi8(mk, (const uint8_t *)p + k)));
	default:
		return _mm512_maskz_loadu_ps(mk, (const float *)p + k);
	}
}

INLINE512 void dot_w_tile(const int NW, const int NX, const enum dtype T, const struct kmat *w,
			  int64_t r0, const float *x, int64_t ldx, float *y, int64_t ldy)
{
	const int64_t n = w->cols;
	const size_t esize = T == DT_F32 ? 4 : T == DT_F8_E4M3 ? 1 : 2;
	const void *rowp[MM_TW];
	__m512 acc[MM_TX][MM_TW];
#pragma GCC unroll 4
	for (int i = 0; i < NW; i++) {
		rowp[i] = (const char *)w->data + (size_t)((r0 + i) * n) * esize;
#pragma GCC unroll 4
		for (int j = 0; j < NX; j++)
			acc[j][i] = _mm512_setzero_ps();
	}
	int64_t k = 0;
	for (; k < n; k += 16) {
		const __mmask16 mk = n - k >= 16 ? (__mmask16)0xFFFF : low_mask16(n - k);
		__m512 wv[MM_TW];
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++) {
			if (((size_t)k * esize) % 64 == 0) /* once per cache line */
				_mm_prefetch(addr_plus(rowp[i], esize * (size_t)(k + NW * n)),
					     _MM_HINT_T0);
			wv[i] = load_w16(T, rowp[i], k, mk);
		}
#pragma GCC unroll 4
		for (int j = 0; j < NX; j++) {
			__m512 xv = _mm512_maskz_loadu_ps(mk, x + j * ldx + k);
#pragma GCC unroll 4
			for (int i = 0; i < NW; i++)
				acc[j][i] = _mm512_fmadd_ps(wv[i], xv, acc[j][i]);
		}
	}
#pragma GCC unroll 4
	for (int i = 0; i < NW; i++) {
		const float s = T == DT_F8_E4M3 ? mm_row_scale(w, r0 + i) * 256.0f : 1.0f;
#pragma GCC unroll 4
		for (int j = 0; j < NX; j++)
			y[j * ldy + i] = _mm512_reduce_add_ps(acc[j][i]) * s;
	}
}

#define DOT_W_F16(NW, NX, ...) dot_w_tile(NW, NX, DT_F16, __VA_ARGS__)
#define DOT_W_BF16(NW, NX, ...) dot_w_tile(NW, NX, DT_BF16, __VA_ARGS__)
#define DOT_W_F8(NW, NX, ...) dot_w_tile(NW, NX, DT_F8_E4M3, __VA_ARGS__)
#define DOT_W_F32(NW, NX, ...) dot_w_tile(NW, NX, DT_F32, __VA_ARGS__)

T512 static void dot_w_avx512(int nw, int nx, const struct kmat *w, int64_t r0, const float *x,
			      int64_t ldx, float *y, int64_t ldy)
{
	switch (w->dtype) {
	case DT_F16: MM_TILE_DISPATCH(DOT_W_F16, nw, nx, w, r0, x, ldx, y, ldy); break;
	case DT_BF16: MM_TILE_DISPATCH(DOT_W_BF16, nw, nx, w, r0, x, ldx, y, ldy); break;
	case DT_F8_E4M3: MM_TILE_DISPATCH(DOT_W_F8, nw, nx, w, r0, x, ldx, y, ldy); break;
	default: MM_TILE_DISPATCH(DOT_W_F32, nw, nx, w, r0, x, ldx, y, ldy); break;
	}
}

/* ---- broadcast GEMV (medium m) ---------------------------------------------- */

/* For MM_TX < m <= 16 (batched decode): the 16 X rows at one k fill one
 * register of xt, and each weight, converted once to F32 into an L1-sized
 * chunk (16 rows x MM_BX_KC), is broadcast from there straight into its FMA
 * (vfmadd231ps with {1to16}): one FMA per weight whatever m is, no
 * horizontal sums, acc[i] = y[0..15][r0+i] held over the whole row.
 * Two chunk buffers: while one is multiplied, the next chunk is converted
 * into the other one row at a time between the FMAs, so its loads (from L2,
 * where the chunk after it is being prefetched) overlap the arithmetic.
 * A/B in bench_matmul at m = 16 (loaded machine): 162-176 ms/step against
 * 175-191 converting each chunk in one burst, 250-265 converting 16 k at a
 * time just before use, 238-275 with the dot tiles. */
#define MM_BX_KC 128 /* k per chunk */
/* row stride of a chunk buffer: not a multiple of 1 KiB, so the 16 rows
 * read at the same k fall in different L1 sets */
#define MM_BX_LDB (MM_BX_KC + 16)
#define MM_BX_STEP (MM_BX_KC / MM_BX_ROWS) /* k-steps per row converted ahead */

INLINE512 void bx_fma_step(__m512 acc[MM_BX_ROWS], const float *xt, const float *wk)
{
	const __m512 xv = _mm512_loadu_ps(xt);
#pragma GCC unroll 16
	for (int i = 0; i < MM_BX_ROWS; i++)
		acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(wk[i * MM_BX_LDB]), xv, acc[i]);
}

/* Row r's values k0 .. k0+kn-1 (kn <= MM_BX_KC) as F32 into out (F8: times
 * 2^-8, the row scale is applied at the end). */
INLINE512 void bx_cvt_row(const enum dtype T, const char *row, int64_t k0, int64_t kn, float *out)
{
	for (int64_t k = 0; k < kn; k += 16) {
		const __mmask16 mk = kn - k >= 16 ? (__mmask16)0xFFFF : low_mask16(kn - k);
		_mm512_store_ps(out + k, load_w16(T, row, k0 + k, mk));
	}
}

INLINE512 void bx_tile(const enum dtype T, const struct kmat *w, int64_t r0, int nv,
		       const float *xt, int m, float *y, int64_t ldy)
{
	float buf[2][MM_BX_ROWS * MM_BX_LDB] __attribute__((aligned(64))); /* 18 KiB */
	const int64_t cols = w->cols, n_chunks = (cols + MM_BX_KC - 1) / MM_BX_KC;
	const size_t esize = T == DT_F32 ? 4 : T == DT_F8_E4M3 ? 1 : 2;
	const size_t rstride = (size_t)cols * esize;
	const char *base = (const char *)w->data + (size_t)r0 * rstride;
	/* lines per row per chunk: MM_BX_KC * esize / 64 = 2, 4 or 8 */
	const int lpr_log2 = esize == 1 ? 1 : esize == 2 ? 2 : 3;
	const int lines_per_step = (MM_BX_ROWS << lpr_log2) / (MM_BX_KC / MM_BX_STEP);
	__m512 acc[MM_BX_ROWS];
#pragma GCC unroll 16
	for (int i = 0; i < MM_BX_ROWS; i++)
		acc[i] = _mm512_setzero_ps();
	for (int i = nv; i < MM_BX_ROWS; i++) { /* missing rows: zero weights */
		memset(buf[0] + i * MM_BX_LDB, 0, MM_BX_KC * sizeof(float));
		memset(buf[1] + i * MM_BX_LDB, 0, MM_BX_KC * sizeof(float));
	}
	const int64_t kc0 = cols < MM_BX_KC ? cols : MM_BX_KC;
	for (int i = 0; i < nv; i++)
		bx_cvt_row(T, base + (size_t)i * rstride, 0, kc0, buf[0] + i * MM_BX_LDB);
	for (int64_t c = 0; c < n_chunks; c++) {
		const int64_t k0 = c * MM_BX_KC, kc = cols - k0 < MM_BX_KC ? cols - k0 : MM_BX_KC;
		const int64_t k1 = k0 + MM_BX_KC;
		const int64_t kc1 = k1 < cols ? (cols - k1 < MM_BX_KC ? cols - k1 : MM_BX_KC) : 0;
		const float *cur = buf[c & 1];
		float *nxt = buf[(c + 1) & 1];
		/* byte offset (from base) of the chunk after next: the same rows
		 * further on, or past the end the next 16 rows (may lie past the
		 * weights: prefetches do not fault) */
		const int64_t k2 = k0 + 2 * MM_BX_KC;
		const size_t pf = k2 < cols ? (size_t)k2 * esize
					    : (size_t)MM_BX_ROWS * rstride + (size_t)(k2 - cols) * esize;
		const float *xk = xt + k0 * MM_BX_LANES;
		int64_t k = 0;
		int row = 0;
		/* every MM_BX_STEP k-steps, one row of the next chunk is
		 * converted: its loads go out long before they are needed and
		 * overlap the FMAs */
		for (; k + MM_BX_STEP <= kc; k += MM_BX_STEP, row++) {
			for (int l = row * lines_per_step; l < (row + 1) * lines_per_step; l++)
				_mm_prefetch(addr_plus(base, pf + (size_t)(l >> lpr_log2) * rstride +
								    (size_t)(l & ((1 << lpr_log2) - 1)) * 64),
					     _MM_HINT_T0);
#pragma GCC unroll 8
			for (int u = 0; u < MM_BX_STEP; u++)
				bx_fma_step(acc, xk + (k + u) * MM_BX_LANES, cur + k + u);
			if (row < nv && kc1)
				bx_cvt_row(T, base + (size_t)row * rstride, k1, kc1, nxt + row * MM_BX_LDB);
		}
		for (; k < kc; k++)
			bx_fma_step(acc, xk + k * MM_BX_LANES, cur + k);
		for (; row < nv && kc1; row++) /* only when kc < MM_BX_KC: never, kc1 is then 0 */
			bx_cvt_row(T, base + (size_t)row * rstride, k1, kc1, nxt + row * MM_BX_LDB);
	}
	float t[MM_BX_ROWS * MM_BX_LANES] __attribute__((aligned(64)));
#pragma GCC unroll 16
	for (int i = 0; i < MM_BX_ROWS; i++)
		_mm512_store_ps(t + i * MM_BX_LANES, acc[i]);
	for (int i = 0; i < nv; i++) {
		const float sc = T == DT_F8_E4M3 ? mm_row_scale(w, r0 + i) * 256.0f : 1.0f;
		for (int j = 0; j < m; j++)
			y[j * ldy + i] = t[i * MM_BX_LANES + j] * sc;
	}
}
_Static_assert(MM_BX_KC == 128 && MM_BX_STEP * MM_BX_ROWS == MM_BX_KC,
	       "bx_tile: lines per row and k-steps per converted row assume these");

T512 static void gemv_bx_avx512(const struct kmat *w, int64_t r0, int nv, const float *xt, int m,
				float *y, int64_t ldy)
{
	switch (w->dtype) {
	case DT_F16: bx_tile(DT_F16, w, r0, nv, xt, m, y, ldy); break;
	case DT_BF16: bx_tile(DT_BF16, w, r0, nv, xt, m, y, ldy); break;
	case DT_F8_E4M3: bx_tile(DT_F8_E4M3, w, r0, nv, xt, m, y, ldy); break;
	default: bx_tile(DT_F32, w, r0, nv, xt, m, y, ldy); break;
	}
}

/* ---- activation quantization ------------------------------------------------ */

/* The steps of quant.c's q127 on 16 lanes: multiply, clamp (NaN -> -127, as
 * max/min return their second operand on NaN), round to nearest even with
 * the 1.5 * 2^23 trick, narrow. Same IEEE operations, same results. */
INLINE512 __m128i q127_16(__m512 x, __m512 inv)
{
	__m512 v = _mm512_mul_ps(x, inv);
	v = _mm512_max_ps(v, _mm512_set1_ps(-127.0f));
	v = _mm512_min_ps(v, _mm512_set1_ps(127.0f));
	const __m512 magic = _mm512_set1_ps(12582912.0f);
	v = _mm512_sub_ps(_mm512_add_ps(v, magic), magic);
	return _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v));
}

/* max |x| over n (masked tail); NaN lanes are skipped like quant.c's compare */
INLINE512 float absmax_avx512(const float *x, int64_t n)
{
	__m512 m = _mm512_setzero_ps();
	for (int64_t k = 0; k < n; k += 16) {
		const __mmask16 mk = n - k >= 16 ? (__mmask16)0xFFFF : low_mask16(n - k);
		m = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(mk, x + k)), m);
	}
	return _mm512_reduce_max_ps(m);
}

INLINE512 void quant_span(const float *x, int64_t n, int8_t *q, float amax)
{
	const float s = amax / 127.0f;
	const __m512 inv = _mm512_set1_ps(s > 0.0f ? 1.0f / s : 0.0f);
	for (int64_t k = 0; k < n; k += 16) {
		const __mmask16 mk = n - k >= 16 ? (__mmask16)0xFFFF : low_mask16(n - k);
		_mm_mask_storeu_epi8(q + k, mk, q127_16(_mm512_maskz_loadu_ps(mk, x + k), inv));
	}
}

T512 static void quant_act_avx512(const float *x, int64_t n, int8_t *q, float *d, int per_block)
{
	if (!per_block) {
		const float amax = absmax_avx512(x, n);
		d[0] = amax / 127.0f;
		quant_span(x, n, q, amax);
		return;
	}
	const int64_t nb = n / Q8_0_BLOCK;
	int64_t b = 0;
	/* 16 blocks at a time: their maxima in one tree and one vector of
	 * scales, so a block does not wait on its own reduction and divisions
	 * (one block at a time is latency-bound at ~2 cycles per value). The
	 * same IEEE operations per block as quant.c: the same bits. */
	const __m512i lane_of = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
	for (; b + 16 <= nb; b += 16) {
		const float *xb = x + b * Q8_0_BLOCK;
		__m512 m[16];
#pragma GCC unroll 16
		for (int i = 0; i < 16; i++) { /* NaN lanes skipped, as absmax_avx512 */
			const __m512 a = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb + 32 * i)),
						       _mm512_setzero_ps());
			m[i] = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb + 32 * i + 16)), a);
		}
		/* lane 4i + j holds block 4j + i's maximum: put block k in lane k */
		const __m512 amax = _mm512_permutexvar_ps(lane_of, reduce16_v(m, 1));
		const __m512 s = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
		const __m512 inv = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(s, _mm512_setzero_ps(), _CMP_GT_OQ),
						       _mm512_set1_ps(1.0f), s);
		_mm512_storeu_ps(d + b, s);
#pragma GCC unroll 16
		for (int i = 0; i < 16; i++) {
			const __m512 iv = _mm512_permutexvar_ps(_mm512_set1_epi32(i), inv);
			int8_t *qb = q + (b + i) * Q8_0_BLOCK;
			_mm_storeu_si128((__m128i *)(void *)qb, q127_16(_mm512_loadu_ps(xb + 32 * i), iv));
			_mm_storeu_si128((__m128i *)(void *)(qb + 16),
					 q127_16(_mm512_loadu_ps(xb + 32 * i + 16), iv));
		}
	}
	for (; b < nb; b++) {
		const float amax = absmax_avx512(x + b * Q8_0_BLOCK, Q8_0_BLOCK);
		d[b] = amax / 127.0f;
		quant_span(x + b * Q8_0_BLOCK, Q8_0_BLOCK, q + b * Q8_0_BLOCK, amax);
	}
}

/* ---- Q8_0 dot tile ---------------------------------------------------------- */

/* Two consecutive Q8_0 blocks' quants in one register (the second may be
 * absent: zeros, which contribute nothing). */
INLINE512 __m512i load_q8_pair(const struct q8_0_block *b, int two)
{
	__m512i lo = _mm512_zextsi256_si512(_mm256_loadu_si256((const void *)b[0].qs));
	return two ? _mm512_inserti64x4(lo, _mm256_loadu_si256((const void *)b[1].qs), 1) : lo;
}

#define MM_Q8_PF 32 /* blocks (1088 bytes) */

INLINE512 void dot_q8_tile(const int NW, const int NX, const struct q8_0_block *w, int64_t nb,
			   const int8_t *xq, const float *xd, float *y, int64_t ldy)
{
	const __m512i c80 = _mm512_set1_epi8((char)0x80);
	const __m512i zero = _mm512_setzero_si512();
	/* lanes 0-7 take the first block's scale, lanes 8-15 the second's */
	const __m512i pair_idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
	__m512 acc[MM_TX][MM_TW];
#pragma GCC unroll 4
	for (int j = 0; j < NX; j++)
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++)
			acc[j][i] = _mm512_setzero_ps();
	for (int64_t b = 0; b < nb; b += 2) {
		const int two = b + 1 < nb;
		/* decode streams weights from memory once: ask for each row
		 * MM_Q8_PF blocks ahead, and near its end for the same row of
		 * the next tile (rows are only 2-9 KB, too short for the
		 * hardware prefetcher to ramp up on each) */
		const int64_t pf = b + MM_Q8_PF < nb ? b + MM_Q8_PF : b + MM_Q8_PF + (NW - 1) * nb;
		__m512i wv[MM_TW], corr[MM_TW];
		__m512 dw[MM_TW];
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++) {
			const struct q8_0_block *p = w + i * nb + b;
			_mm_prefetch(addr_plus(w + i * nb, (size_t)pf * sizeof *p), _MM_HINT_T0);
			wv[i] = load_q8_pair(p, two);
			corr[i] = _mm512_dpbusd_epi32(zero, c80, wv[i]);
			/* both F16 scales in one register, converted together and
			 * spread to lanes 0-7 / 8-15 */
			__m128i dh = _mm_cvtsi32_si128(p[0].d);
			if (two)
				dh = _mm_insert_epi16(dh, (short)p[1].d, 1);
			dw[i] = _mm512_permutexvar_ps(pair_idx, _mm512_castps128_ps512(_mm_cvtph_ps(dh)));
		}
		const __mmask64 xm = two ? ~(__mmask64)0 : (__mmask64)0xFFFFFFFFu;
#pragma GCC unroll 4
		for (int j = 0; j < NX; j++) {
			const int8_t *xp = xq + j * nb * Q8_0_BLOCK + b * Q8_0_BLOCK;
			__m512i xv = _mm512_xor_si512(_mm512_maskz_loadu_epi8(xm, xp), c80);
			const float *dp = xd + j * nb + b;
			__m128 d2 = two ? _mm_castsi128_ps(_mm_loadl_epi64((const void *)dp))
					: _mm_set_ss(dp[0]);
			__m512 dx = _mm512_permutexvar_ps(pair_idx, _mm512_castps128_ps512(d2));
#pragma GCC unroll 4
			for (int i = 0; i < NW; i++) {
				__m512i s = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, xv, wv[i]), corr[i]);
				acc[j][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
							    _mm512_mul_ps(dx, dw[i]), acc[j][i]);
			}
		}
	}
#pragma GCC unroll 4
	for (int j = 0; j < NX; j++)
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++)
			y[j * ldy + i] = _mm512_reduce_add_ps(acc[j][i]);
}

T512 static void dot_q8_avx512(int nw, int nx, const struct q8_0_block *w, int64_t nb,
			       const int8_t *xq, const float *xd, float *y, int64_t ldy)
{
	MM_TILE_DISPATCH(dot_q8_tile, nw, nx, w, nb, xq, xd, y, ldy);
}

/* ---- I8 dot tile -------------------------------------------------------------- */

INLINE512 void dot_i8_tile(const int NW, const int NX, const int8_t *w, int64_t ldw,
			   const int8_t *xq, int64_t ldx, int64_t n, int32_t *isum)
{
	const __m512i c80 = _mm512_set1_epi8((char)0x80);
	__m512i acc[MM_TX][MM_TW], corr[MM_TW];
#pragma GCC unroll 4
	for (int i = 0; i < NW; i++) {
		corr[i] = _mm512_setzero_si512();
#pragma GCC unroll 4
		for (int j = 0; j < NX; j++)
			acc[j][i] = _mm512_setzero_si512();
	}
	for (int64_t k = 0; k < n; k += 64) {
		/* the tail loads zeros for both sides past n: w = 0 adds nothing */
		const __mmask64 mk = n - k >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (n - k)) - 1);
		__m512i wv[MM_TW];
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++) {
			wv[i] = _mm512_maskz_loadu_epi8(mk, w + i * ldw + k);
			corr[i] = _mm512_dpbusd_epi32(corr[i], c80, wv[i]);
		}
#pragma GCC unroll 4
		for (int j = 0; j < NX; j++) {
			__m512i xv = _mm512_xor_si512(_mm512_maskz_loadu_epi8(mk, xq + j * ldx + k), c80);
#pragma GCC unroll 4
			for (int i = 0; i < NW; i++)
				acc[j][i] = _mm512_dpbusd_epi32(acc[j][i], xv, wv[i]);
		}
	}
#pragma GCC unroll 4
	for (int j = 0; j < NX; j++)
#pragma GCC unroll 4
		for (int i = 0; i < NW; i++)
			isum[j * MM_TW + i] =
				_mm512_reduce_add_epi32(_mm512_sub_epi32(acc[j][i], corr[i]));
}

T512 static void dot_i8_avx512(int nw, int nx, const int8_t *w, int64_t ldw, const int8_t *xq,
			       int64_t ldx, int64_t n, int32_t *isum)
{
	MM_TILE_DISPATCH(dot_i8_tile, nw, nx, w, ldw, xq, ldx, n, isum);
}

/* ---- GEMM micro-kernel: 12 rows of X x 32 columns of a packed W panel --------- */

#define MR512 12
#define NR512 32

INLINE512 void gemm_tile(const int MR, int64_t kc, const float *panel, const float *x, int64_t ldx,
			 float *y, int64_t ldy, int nv, int accumulate)
{
	__m512 c0[MR512], c1[MR512];
#pragma GCC unroll 12
	for (int i = 0; i < MR; i++) {
		c0[i] = _mm512_setzero_ps();
		c1[i] = _mm512_setzero_ps();
	}
	for (int64_t k = 0; k < kc; k++) {
		__m512 b0 = _mm512_load_ps(panel + k * NR512);
		__m512 b1 = _mm512_load_ps(panel + k * NR512 + 16);
#pragma GCC unroll 12
		for (int i = 0; i < MR; i++) {
			__m512 a = _mm512_set1_ps(x[i * ldx + k]);
			c0[i] = _mm512_fmadd_ps(a, b0, c0[i]);
			c1[i] = _mm512_fmadd_ps(a, b1, c1[i]);
		}
	}
	const __mmask16 m0 = nv >= 16 ? (__mmask16)0xFFFF : low_mask16(nv);
	const __mmask16 m1 = nv >= 32 ? (__mmask16)0xFFFF : nv > 16 ? low_mask16(nv - 16) : 0;
#pragma GCC unroll 12
	for (int i = 0; i < MR; i++) {
		float *yi = y + i * ldy;
		if (accumulate) {
			c0[i] = _mm512_add_ps(c0[i], _mm512_maskz_loadu_ps(m0, yi));
			c1[i] = _mm512_add_ps(c1[i], _mm512_maskz_loadu_ps(m1, yi + 16));
		}
		_mm512_mask_storeu_ps(yi, m0, c0[i]);
		_mm512_mask_storeu_ps(yi + 16, m1, c1[i]);
	}
}

T512 static void gemm_avx512(int mr, int64_t kc, const float *panel, const float *x, int64_t ldx,
			     float *y, int64_t ldy, int nv, int accumulate)
{
	switch (mr) {
	case 1: gemm_tile(1, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	case 2: gemm_tile(2, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	case 3: gemm_tile(3, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	case 4: gemm_tile(4, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	case 5: gemm_tile(5, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	case 6: gemm_tile(6, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	case 7: gemm_tile(7, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	case 8: gemm_tile(8, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	case 9: gemm_tile(9, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	case 10: gemm_tile(10, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	case 11: gemm_tile(11, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	case 12: gemm_tile(12, kc, panel, x, ldx, y, ldy, nv, accumulate); break;
	default: break;
	}
}

/* ---- integer GEMM micro-kernels: 4 rows of X x 32 packed weight rows ------------ */

#define QMR512 4

INLINE512 __m512i bcast_word(const uint8_t *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return _mm512_set1_epi32(v);
}

/* The packers gather one dword (4 consecutive k) from each of 16 rows per
 * instruction: a 16 x 8 dword transpose per Q8_0 block without scalar code.
 * Lanes of rows past nv are masked off, so they read nothing and hold 0. */
T512 static void pack_q8_avx512(const struct kmat *w, int64_t r0, int nv, uint8_t *panel,
				float *dw, int32_t *corr)
{
	const int64_t nb = w->cols / Q8_0_BLOCK;
	const int32_t row_bytes = (int32_t)(nb * (int64_t)sizeof(struct q8_0_block));
	const uint8_t *base = (const uint8_t *)((const struct q8_0_block *)w->data + r0 * nb);
	const __m512i c80 = _mm512_set1_epi8((char)0x80);
	const __m512i idx = _mm512_mullo_epi32(
		_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
		_mm512_set1_epi32(row_bytes));
	for (int h = 0; h < MM_QNR / 16; h++) {
		const int nvh = nv - h * 16 < 0 ? 0 : nv - h * 16 > 16 ? 16 : nv - h * 16;
		const __mmask16 km = low_mask16(nvh);
		const uint8_t *bh = nvh ? base + (int64_t)h * 16 * row_bytes : base;
		for (int64_t b = 0; b < nb; b++) {
			const uint8_t *pb = bh + b * (int64_t)sizeof(struct q8_0_block);
			__m512i dd = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), km, idx, pb, 1);
			_mm512_store_ps(dw + b * MM_QNR + h * 16, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd)));
			__m512i cs = _mm512_setzero_si512();
#pragma GCC unroll 8
			for (int q = 0; q < Q8_0_BLOCK / 4; q++) {
				__m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), km, idx,
									pb + 2 + 4 * q, 1);
				_mm512_store_si512((void *)(panel + ((b * 8 + q) * MM_QNR + h * 16) * 4), v);
				cs = _mm512_dpbusd_epi32(cs, c80, v);
			}
			_mm512_store_si512((void *)(corr + b * MM_QNR + h * 16), cs);
		}
	}
}

T512 static void pack_i8_avx512(const struct kmat *w, int64_t r0, int nv, uint8_t *panel,
				int32_t *corr)
{
	const int64_t cols = w->cols, full = cols / 4, ng = (cols + 3) / 4;
	const uint8_t *base = (const uint8_t *)w->data + r0 * cols;
	const __m512i c80 = _mm512_set1_epi8((char)0x80);
	const __m512i idx = _mm512_mullo_epi32(
		_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
		_mm512_set1_epi32((int32_t)cols));
	for (int h = 0; h < MM_QNR / 16; h++) {
		const int nvh = nv - h * 16 < 0 ? 0 : nv - h * 16 > 16 ? 16 : nv - h * 16;
		const __mmask16 km = low_mask16(nvh);
		const uint8_t *bh = nvh ? base + (int64_t)h * 16 * cols : base;
		__m512i cs = _mm512_setzero_si512();
		for (int64_t g = 0; g < full; g++) {
			__m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), km, idx,
								bh + 4 * g, 1);
			_mm512_store_si512((void *)(panel + (g * MM_QNR + h * 16) * 4), v);
			cs = _mm512_dpbusd_epi32(cs, c80, v);
		}
		if (full < ng) { /* a partial last group: zero-padded, byte by byte */
			uint8_t *dst = panel + (full * MM_QNR + h * 16) * 4;
			memset(dst, 0, 64);
			for (int c = 0; c < nvh; c++)
				memcpy(dst + 4 * c, bh + c * cols + 4 * full, (size_t)(cols - 4 * full));
			cs = _mm512_dpbusd_epi32(cs, c80, _mm512_load_si512((const void *)dst));
		}
		_mm512_storeu_si512((void *)(corr + h * 16), cs);
	}
}

INLINE512 void gemm_q8_tile(const int MR, int64_t nb, const uint8_t *panel, const float *dw,
			    const int32_t *corr, const uint8_t *xu, const float *xd, int64_t ldx,
			    float *y, int64_t ldy, int nv)
{
	__m512 f0[QMR512], f1[QMR512];
#pragma GCC unroll 4
	for (int i = 0; i < MR; i++) {
		f0[i] = _mm512_setzero_ps();
		f1[i] = _mm512_setzero_ps();
	}
	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *pb = panel + b * (Q8_0_BLOCK / 4) * MM_QNR * 4;
		__m512i a0[QMR512], a1[QMR512];
#pragma GCC unroll 4
		for (int i = 0; i < MR; i++) {
			a0[i] = _mm512_setzero_si512();
			a1[i] = _mm512_setzero_si512();
		}
#pragma GCC unroll 8
		for (int q = 0; q < Q8_0_BLOCK / 4; q++) {
			__m512i w0 = _mm512_load_si512((const void *)(pb + q * MM_QNR * 4));
			__m512i w1 = _mm512_load_si512((const void *)(pb + q * MM_QNR * 4 + 64));
			/* load once into registers: GCC would otherwise fold the
			 * loads into each of the MR dpbusd and the kernel becomes
			 * load-bound */
			__asm__("" : "+v"(w0), "+v"(w1));
#pragma GCC unroll 4
			for (int i = 0; i < MR; i++) {
				__m512i xb = bcast_word(xu + i * ldx + b * Q8_0_BLOCK + q * 4);
				a0[i] = _mm512_dpbusd_epi32(a0[i], xb, w0);
				a1[i] = _mm512_dpbusd_epi32(a1[i], xb, w1);
			}
		}
		const __m512i c0 = _mm512_load_si512((const void *)(corr + b * MM_QNR));
		const __m512i c1 = _mm512_load_si512((const void *)(corr + b * MM_QNR + 16));
		const __m512 d0 = _mm512_load_ps(dw + b * MM_QNR);
		const __m512 d1 = _mm512_load_ps(dw + b * MM_QNR + 16);
#pragma GCC unroll 4
		for (int i = 0; i < MR; i++) {
			__m512 dx = _mm512_set1_ps(xd[i * nb + b]);
			f0[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a0[i], c0)),
						_mm512_mul_ps(d0, dx), f0[i]);
			f1[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a1[i], c1)),
						_mm512_mul_ps(d1, dx), f1[i]);
		}
	}
	const __mmask16 m0 = nv >= 16 ? (__mmask16)0xFFFF : low_mask16(nv);
	const __mmask16 m1 = nv >= 32 ? (__mmask16)0xFFFF : nv > 16 ? low_mask16(nv - 16) : 0;
#pragma GCC unroll 4
	for (int i = 0; i < MR; i++) {
		_mm512_mask_storeu_ps(y + i * ldy, m0, f0[i]);
		_mm512_mask_storeu_ps(y + i * ldy + 16, m1, f1[i]);
	}
}

T512 static void gemm_q8_avx512(int mr, int64_t nb, const uint8_t *panel, const float *dw,
				const int32_t *corr, const uint8_t *xu, const float *xd, int64_t ldx,
				float *y, int64_t ldy, int nv)
{
	switch (mr) {
	case 1: gemm_q8_tile(1, nb, panel, dw, corr, xu, xd, ldx, y, ldy, nv); break;
	case 2: gemm_q8_tile(2, nb, panel, dw, corr, xu, xd, ldx, y, ldy, nv); break;
	case 3: gemm_q8_tile(3, nb, panel, dw, corr, xu, xd, ldx, y, ldy, nv); break;
	case 4: gemm_q8_tile(4, nb, panel, dw, corr, xu, xd, ldx, y, ldy, nv); break;
	default: break;
	}
}

INLINE512 void gemm_i8_tile(const int MR, int64_t ng, const uint8_t *panel, const int32_t *corr,
			    const uint8_t *xu, int64_t ldx, int32_t *isum)
{
	__m512i a0[QMR512], a1[QMR512];
#pragma GCC unroll 4
	for (int i = 0; i < MR; i++) {
		a0[i] = _mm512_setzero_si512();
		a1[i] = _mm512_setzero_si512();
	}
	for (int64_t g = 0; g < ng; g++) {
		__m512i w0 = _mm512_load_si512((const void *)(panel + g * MM_QNR * 4));
		__m512i w1 = _mm512_load_si512((const void *)(panel + g * MM_QNR * 4 + 64));
		__asm__("" : "+v"(w0), "+v"(w1)); /* see gemm_q8_tile */
#pragma GCC unroll 4
		for (int i = 0; i < MR; i++) {
			__m512i xb = bcast_word(xu + i * ldx + g * 4);
			a0[i] = _mm512_dpbusd_epi32(a0[i], xb, w0);
			a1[i] = _mm512_dpbusd_epi32(a1[i], xb, w1);
		}
	}
	const __m512i c0 = _mm512_loadu_si512((const void *)corr);
	const __m512i c1 = _mm512_loadu_si512((const void *)(corr + 16));
#pragma GCC unroll 4
	for (int i = 0; i < MR; i++) {
		_mm512_storeu_si512((void *)(isum + i * MM_QNR), _mm512_sub_epi32(a0[i], c0));
		_mm512_storeu_si512((void *)(isum + i * MM_QNR + 16), _mm512_sub_epi32(a1[i], c1));
	}
}

T512 static void gemm_i8_avx512(int mr, int64_t ng, const uint8_t *panel, const int32_t *corr,
				const uint8_t *xu, int64_t ldx, int32_t *isum)
{
	switch (mr) {
	case 1: gemm_i8_tile(1, ng, panel, corr, xu, ldx, isum); break;
	case 2: gemm_i8_tile(2, ng, panel, corr, xu, ldx, isum); break;
	case 3: gemm_i8_tile(3, ng, panel, corr, xu, ldx, isum); break;
	case 4: gemm_i8_tile(4, ng, panel, corr, xu, ldx, isum); break;
	default: break;
	}
}

/* ---- repacked Q8_0 and I8 (kcpu_pack): decode and prefill ------------- */

#define MM_Q8P_PF 4	    /* pairs (4.3 KB) ahead */
#define MM_Q8P_PF_MIN_MR 2 /* software prefetch above this many X rows */
#define MM_I8P_PF 8	    /* I8 blocks (4 KB) ahead */

/* vpdpbusd with the signed operand broadcast from memory ({1to16}): GCC
 * would load it with a separate vpbroadcastd first. */
#define DPBUSD_BCST(acc, w, p)                                                        \
	__asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)(p)))

/* One 16-row panel against MR X rows (a chunk in the layout of
 * matmul_impl.h), block by block: the 8 lines of quants (w + 128,
 * unsigned) are loaded once into registers and each X row's 4 quants per
 * line are broadcast from memory into vpdpbusd (the signed operand), so the
 * correction is the X side's -128 * sum(block), which starts the sum. Per
 * X row and block: 8 vpdpbusd and 3 other operations, for every m: decode
 * at any batch size streams the panels once, and the F32 expression per
 * output is gemm_q8_tile's, bit for bit. */
INLINE512 void q8p_tile(const int MR, int64_t nb, const uint8_t *panel, const int8_t *xq,
			const float *xd, const int32_t *xc, float *y, int64_t ldy, int nv)
{
	__m512 acc[MM_Q8P_MR];
#pragma GCC unroll 16
	for (int i = 0; i < MR; i++)
		acc[i] = _mm512_setzero_ps();
	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *pair = panel + (b >> 1) * MM_Q8P_PAIR_BYTES;
		const uint8_t *codes = pair + (b & 1) * 8 * 64;
		/* Panels stream from memory (the next panel follows this one):
		 * with more than MM_Q8P_PF_MIN_MR X rows the loop is too long per
		 * line for the out-of-order window to keep enough loads in
		 * flight, so ask for the lines MM_Q8P_PF pairs ahead, half a pair
		 * per block (may point past the weights: prefetches do not
		 * fault). */
		const char *pf = addr_plus(pair, (size_t)MM_Q8P_PF * MM_Q8P_PAIR_BYTES +
							 (size_t)(b & 1) * (MM_Q8P_PAIR_BYTES / 2));
#pragma GCC unroll 9
		for (int l = 0; MR > MM_Q8P_PF_MIN_MR && l < (MM_Q8P_PAIR_BYTES / 2 + 63) / 64; l++)
			_mm_prefetch(pf + l * 64, _MM_HINT_T0);
		const __m512 dw = _mm512_cvtph_ps(
			_mm256_load_si256((const void *)(pair + 2 * 8 * 64 + (b & 1) * 32)));
		__m512i wv[8];
#pragma GCC unroll 8
		for (int g = 0; g < 8; g++) {
			wv[g] = _mm512_load_si512((const void *)(codes + g * 64));
			__asm__("" : "+v"(wv[g])); /* one load, reused by every X row */
		}
		const int8_t *xb = xq + b * MM_Q8P_MR * Q8_0_BLOCK;
		const float *db = xd + b * MM_Q8P_MR;
		const int32_t *cb = xc + b * MM_Q8P_MR;
#pragma GCC unroll 16
		for (int i = 0; i < MR; i++) {
			const int8_t *xp = xb + i * Q8_0_BLOCK;
			__m512i s = _mm512_set1_epi32(cb[i]);
			if (MR <= 2) { /* few rows: two chains, so the block's latency hides */
				__m512i s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
				for (int g = 0; g < 8; g += 2) {
					DPBUSD_BCST(s, wv[g], xp + 4 * g);
					DPBUSD_BCST(s1, wv[g + 1], xp + 4 * g + 4);
				}
				s = _mm512_add_epi32(s, s1);
			} else {
#pragma GCC unroll 8
				for (int g = 0; g < 8; g++)
					DPBUSD_BCST(s, wv[g], xp + 4 * g);
			}
			acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
						 _mm512_mul_ps(dw, _mm512_set1_ps(db[i])), acc[i]);
		}
	}
	const __mmask16 mk = nv >= 16 ? (__mmask16)0xFFFF : low_mask16(nv);
#pragma GCC unroll 16
	for (int i = 0; i < MR; i++)
		_mm512_mask_storeu_ps(y + i * ldy, mk, acc[i]);
}

#define Q8P_CASE(n)                                                             \
	case n: q8p_tile(n, nb, panel, xq, xd, xc, y, ldy, nv); break

T512 static void gemm_q8p_avx512(int mr, int64_t nb, const uint8_t *panel, const int8_t *xq,
				 const float *xd, const int32_t *xc, float *y, int64_t ldy, int nv)
{
	switch (mr) {
	Q8P_CASE(1); Q8P_CASE(2); Q8P_CASE(3); Q8P_CASE(4);
	Q8P_CASE(5); Q8P_CASE(6); Q8P_CASE(7); Q8P_CASE(8);
	Q8P_CASE(9); Q8P_CASE(10); Q8P_CASE(11); Q8P_CASE(12);
	Q8P_CASE(13); Q8P_CASE(14); Q8P_CASE(15); Q8P_CASE(16);
	default: break;
	}
}
/* I8 panels: the same loads and vpdpbusd, but X has one scale per row,
 * so the int32 sums run over the whole row (started at the row's
 * correction) and are scaled once at the end. 8 vpdpbusd per X row and
 * block, nothing else. */
INLINE512 void i8p_tile(const int MR, int64_t nb, const uint8_t *panel, const int8_t *xq,
			const float *xd, const int32_t *xc, const float *ws, float *y, int64_t ldy,
			int nv)
{
	/* few rows: a second chain per row for the odd lines, so the sums'
	 * latency hides (integer sums: the split changes no bit) */
	const int NC = MR <= 2 ? 2 : 1;
	__m512i acc[MM_Q8P_MR], acc2[2];
#pragma GCC unroll 16
	for (int i = 0; i < MR; i++)
		acc[i] = _mm512_set1_epi32(xc[i]);
#pragma GCC unroll 2
	for (int i = 0; i < MR && NC == 2; i++)
		acc2[i] = _mm512_setzero_si512();
	for (int64_t b = 0; b < nb; b++) {
		const uint8_t *codes = panel + b * MM_I8P_BLOCK_BYTES;
		const char *pf = addr_plus(codes, (size_t)MM_I8P_PF * MM_I8P_BLOCK_BYTES);
#pragma GCC unroll 8
		for (int l = 0; MR > MM_Q8P_PF_MIN_MR && l < MM_I8P_BLOCK_BYTES / 64; l++)
			_mm_prefetch(pf + l * 64, _MM_HINT_T0);
		__m512i wv[8];
#pragma GCC unroll 8
		for (int g = 0; g < 8; g++) {
			wv[g] = _mm512_load_si512((const void *)(codes + g * 64));
			__asm__("" : "+v"(wv[g]));
		}
		const int8_t *xb = xq + b * MM_Q8P_MR * Q8_0_BLOCK;
#pragma GCC unroll 16
		for (int i = 0; i < MR; i++)
#pragma GCC unroll 8
			for (int g = 0; g < 8; g++) {
				if (NC == 2 && (g & 1))
					DPBUSD_BCST(acc2[i], wv[g], xb + i * Q8_0_BLOCK + 4 * g);
				else
					DPBUSD_BCST(acc[i], wv[g], xb + i * Q8_0_BLOCK + 4 * g);
			}
	}
#pragma GCC unroll 2
	for (int i = 0; i < MR && NC == 2; i++)
		acc[i] = _mm512_add_epi32(acc[i], acc2[i]);
	const __mmask16 mk = nv >= 16 ? (__mmask16)0xFFFF : low_mask16(nv);
	const __m512 wsv = _mm512_maskz_loadu_ps(mk, ws);
#pragma GCC unroll 16
	for (int i = 0; i < MR; i++)
		_mm512_mask_storeu_ps(y + i * ldy, mk,
				      _mm512_mul_ps(_mm512_cvtepi32_ps(acc[i]),
						    _mm512_mul_ps(wsv, _mm512_set1_ps(xd[i]))));
}

#define I8P_CASE(n)                                                             \
	case n: i8p_tile(n, nb, panel, xq, xd, xc, ws, y, ldy, nv); break

T512 static void gemm_i8p_avx512(int mr, int64_t nb, const uint8_t *panel, const int8_t *xq,
				 const float *xd, const int32_t *xc, const float *ws, float *y,
				 int64_t ldy, int nv)
{
	switch (mr) {
	I8P_CASE(1); I8P_CASE(2); I8P_CASE(3); I8P_CASE(4);
	I8P_CASE(5); I8P_CASE(6); I8P_CASE(7); I8P_CASE(8);
	I8P_CASE(9); I8P_CASE(10); I8P_CASE(11); I8P_CASE(12);
	I8P_CASE(13); I8P_CASE(14); I8P_CASE(15); I8P_CASE(16);
	default: break;
	}
}
/* ---- repacked F16 / BF16 / F8 (kcpu_pack): decode and prefill -------------- */

#define MM_FP_PF 1024 /* bytes ahead in each panel (software prefetch) */

/* The 16 rows' values at one k of a float panel, as F32 (F8: times 2^-8,
 * see f8_to_f16_bits; rs carries the row scale * 256). */
INLINE512 __m512 load_panel_k(const enum dtype T, const uint8_t *p)
{
	switch (T) {
	case DT_F16:
		return _mm512_cvtph_ps(_mm256_load_si256((const void *)p));
	case DT_BF16:
		return _mm512_castsi512_ps(
			_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_load_si256((const void *)p)), 16));
	default:
		return _mm512_cvtph_ps(f8_to_f16_bits(_mm_load_si128((const void *)p)));
	}
}

/* Lines [0, nk) of an F8 panel as F16 bits (times 2^-8), for prefill:
 * the bit shuffling then happens once for every X row of a block and the
 * kernel reads an F16 panel (the same F32 values, so the same bits). */
T512 static void f8_panel_f16_avx512(const uint8_t *src, int64_t nk, uint16_t *dst)
{
	for (int64_t k = 0; k < nk; k++)
		_mm256_store_si256((__m256i *)(void *)(dst + 16 * k),
				   f8_to_f16_bits(_mm_load_si128((const void *)(src + 16 * k))));
}

/* NP panels x MR X rows: each k's 16 x NP weights converted once, each X
 * value broadcast into NP FMAs; one accumulator per (panel, X row), one
 * FMA per k in k order. */
INLINE512 void fp_tile(const enum dtype T, const int NP, const int MR, const uint8_t *panel,
		       size_t pbytes, int64_t k0, int64_t k1, const float *xt, int ldxt, float *y,
		       int64_t ldy, int nv, int acc_in, const float *rs)
{
	const size_t es = T == DT_F8_E4M3 ? 1 : 2;
	const __mmask16 mlast = nv >= 16 ? (__mmask16)0xFFFF : low_mask16(nv);
	__m512 acc[4][MM_FP_PREFILL_MR > MM_Q8P_MR ? MM_FP_PREFILL_MR : MM_Q8P_MR];
#pragma GCC unroll 4
	for (int p = 0; p < NP; p++) {
		const __mmask16 mk = p == NP - 1 ? mlast : (__mmask16)0xFFFF;
#pragma GCC unroll 16
		for (int i = 0; i < MR; i++)
			acc[p][i] = acc_in ? _mm512_maskz_loadu_ps(mk, y + i * ldy + p * 16)
					   : _mm512_setzero_ps();
	}
	const uint8_t *pk = panel + (size_t)k0 * 16 * es;
	/* decode streams the panels from memory: with more than a couple of X
	 * rows the loop is long per line, so ask MM_FP_PF bytes ahead (past
	 * the end that is the next panel, or beyond the weights: prefetches do
	 * not fault) */
	const int64_t k_per_line = (int64_t)(64 / (16 * es));
	for (int64_t k = k0; k < k1; k++, pk += 16 * es) {
		if (MR > MM_Q8P_PF_MIN_MR && (k & (k_per_line - 1)) == 0)
#pragma GCC unroll 4
			for (int p = 0; p < NP; p++)
				_mm_prefetch(addr_plus(pk, (size_t)p * pbytes + MM_FP_PF), _MM_HINT_T0);
		__m512 wv[4];
#pragma GCC unroll 4
		for (int p = 0; p < NP; p++)
			wv[p] = load_panel_k(T, pk + (size_t)p * pbytes);
		const float *xk = xt + (k - k0) * ldxt;
#pragma GCC unroll 16
		for (int i = 0; i < MR; i++) {
			const __m512 xb = _mm512_set1_ps(xk[i]);
#pragma GCC unroll 4
			for (int p = 0; p < NP; p++)
				acc[p][i] = _mm512_fmadd_ps(wv[p], xb, acc[p][i]);
		}
	}
#pragma GCC unroll 4
	for (int p = 0; p < NP; p++) {
		const __mmask16 mk = p == NP - 1 ? mlast : (__mmask16)0xFFFF;
		const __m512 sc = rs ? _mm512_maskz_loadu_ps(mk, rs + p * 16) : _mm512_set1_ps(1.0f);
#pragma GCC unroll 16
		for (int i = 0; i < MR; i++)
			_mm512_mask_storeu_ps(y + i * ldy + p * 16, mk,
					      rs ? _mm512_mul_ps(acc[p][i], sc) : acc[p][i]);
	}
}

#define FP_ARGS panel, pbytes, k0, k1, xt, ldxt, y, ldy, nv, acc_in, rs
#define FP_CASE(T, NP, n) \
	case n: fp_tile(T, NP, n, FP_ARGS); break
/* np panels x mr rows, np * mr <= 16 or np = 2 and mr <= MM_FP_PREFILL_MR
 * (the accumulators fit in registers) */
#define FP_SWITCH(T)                                                            \
	if (np == 4) {                                                          \
		switch (mr) {                                                   \
		FP_CASE(T, 4, 1); FP_CASE(T, 4, 2); FP_CASE(T, 4, 3);           \
		FP_CASE(T, 4, 4);                                               \
		default: break;                                                 \
		}                                                               \
	} else if (np == 2) {                                                   \
		switch (mr) {                                                   \
		FP_CASE(T, 2, 1); FP_CASE(T, 2, 2); FP_CASE(T, 2, 3);           \
		FP_CASE(T, 2, 4); FP_CASE(T, 2, 5); FP_CASE(T, 2, 6);           \
		FP_CASE(T, 2, 7); FP_CASE(T, 2, 8); FP_CASE(T, 2, 9);           \
		FP_CASE(T, 2, 10); FP_CASE(T, 2, 11); FP_CASE(T, 2, 12);        \
		default: break;                                                 \
		}                                                               \
	} else {                                                                \
		switch (mr) {                                                   \
		FP_CASE(T, 1, 1); FP_CASE(T, 1, 2); FP_CASE(T, 1, 3);           \
		FP_CASE(T, 1, 4); FP_CASE(T, 1, 5); FP_CASE(T, 1, 6);           \
		FP_CASE(T, 1, 7); FP_CASE(T, 1, 8); FP_CASE(T, 1, 9);           \
		FP_CASE(T, 1, 10); FP_CASE(T, 1, 11); FP_CASE(T, 1, 12);        \
		FP_CASE(T, 1, 13); FP_CASE(T, 1, 14); FP_CASE(T, 1, 15);        \
		FP_CASE(T, 1, 16);                                              \
		default: break;                                                 \
		}                                                               \
	}

T512 static void gemm_fp_avx512(int np, int mr, enum dtype t, const uint8_t *panel,
				size_t pbytes, int64_t k0, int64_t k1, const float *xt, int ldxt,
				float *y, int64_t ldy, int nv, int acc_in, const float *rs)
{
	switch (t) {
	case DT_F16: FP_SWITCH(DT_F16) break;
	case DT_BF16: FP_SWITCH(DT_BF16) break;
	default: FP_SWITCH(DT_F8_E4M3) break;
	}
}

_Static_assert(MM_FP_PREFILL_MR <= 12, "fp_tile: 2 x MM_FP_PREFILL_MR accumulators + 2 weights");
_Static_assert(MM_Q8P_MR == 16 && MM_Q8P_ROWS == 16, "gemm_q8p_avx512: one zmm per X row");

/* ---- Q8_0 with AMX tiles (batched decode) ----------------------------------- */

/* Linux gives a process the AMX tile data state only on request. */
#define MM_ARCH_REQ_XCOMP_PERM 0x1023
#define MM_XFEATURE_XTILEDATA 18

static int amx_ok_avx512(void)
{
	static _Atomic int state; /* 0 not asked yet, 1 usable, -1 not */
	int s = atomic_load_explicit(&state, memory_order_acquire);
	if (s)
		return s > 0;
	unsigned a, b, c, d;
	int ok = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) /* AMX-TILE */ &&
		 (d >> 25 & 1) /* AMX-INT8 */;
#if defined(__linux__)
	ok = ok && syscall(SYS_arch_prctl, MM_ARCH_REQ_XCOMP_PERM, MM_XFEATURE_XTILEDATA) == 0;
#else
	ok = 0;
#endif
	atomic_store_explicit(&state, ok ? 1 : -1, memory_order_release);
	return ok;
}

#define TAMX                                                                                    \
	__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,avx2,"   \
			      "amx-tile,amx-int8")))

struct amx_tilecfg { /* the ldtilecfg operand, palette 1 */
	uint8_t palette, start_row, reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};

/* Tiles: 0/1 block sums C (nv weight rows x 16 X rows, int32), 2/3 the
 * weight quants A (nv rows x 32 bytes, read in place at the row stride),
 * 4/5 X (8 rows of 4 k x 16 X rows); two sets, so the tile unit works on
 * one block while the F32 scaling of the other runs. */
TAMX static void amx_config(int nv)
{
	struct amx_tilecfg cfg __attribute__((aligned(64)));
	memset(&cfg, 0, sizeof cfg);
	cfg.palette = 1;
	for (int t = 0; t < 6; t++) {
		cfg.rows[t] = (uint8_t)(t < 4 ? nv : 8);
		cfg.colsb[t] = (uint16_t)(t == 2 || t == 3 ? 32 : 64);
	}
	_tile_loadconfig(&cfg);
}

/* acc[i] (lanes: X rows) += (dw_i * dx) * C[i] for block b of rows wrow
 * (nv of them, row stride rb bytes): gemm_q8_tile's expression. Rows of
 * cbuf past nv stay 0 (never stored) and their scale lanes are masked to 0. */
INLINE512 void amx_scale_block(__m512 acc[16], const int32_t *cbuf, const uint8_t *wrow,
			       __m512i sidx, __mmask16 km, int64_t b, const float *xdt)
{
	float dwf[16] __attribute__((aligned(64)));
	const __m512i dd = _mm512_mask_i32gather_epi32(
		_mm512_setzero_si512(), km, sidx, wrow + b * (int64_t)sizeof(struct q8_0_block), 1);
	_mm512_store_ps(dwf, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd)));
	const __m512 dx = _mm512_loadu_ps(xdt + b * MM_AMX_LANES);
#pragma GCC unroll 16
	for (int i = 0; i < 16; i++) {
		const __m512 ci = _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(cbuf + i * 16)));
		acc[i] = _mm512_fmadd_ps(ci, _mm512_mul_ps(_mm512_set1_ps(dwf[i]), dx), acc[i]);
	}
}

#define MM_AMX_PF 16 /* blocks ahead (544 bytes of each row) */

TAMX static void gemm_q8_amx_avx512(const struct kmat *w, int64_t r0, int64_t nrows,
				    const int8_t *xt, const float *xdt, int m, float *y, int64_t ldy)
{
	const int64_t nb = w->cols / Q8_0_BLOCK;
	const int64_t rb = nb * (int64_t)sizeof(struct q8_0_block);
	const int64_t bsz = (int64_t)sizeof(struct q8_0_block);
	const __m512i sidx = _mm512_mullo_epi32(
		_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
		_mm512_set1_epi32((int32_t)rb));
	int32_t cbuf[2][16 * 16] __attribute__((aligned(64)));
	memset(cbuf, 0, sizeof cbuf);
	int cfg_rows = 0;
	for (int64_t g0 = 0; g0 < nrows; g0 += 16) {
		const int nv = (int)(nrows - g0 < 16 ? nrows - g0 : 16);
		if (nv != cfg_rows) {
			amx_config(nv);
			cfg_rows = nv;
		}
		const __mmask16 km = low_mask16(nv);
		const uint8_t *wrow = (const uint8_t *)((const struct q8_0_block *)w->data +
							(r0 + g0) * nb);
		const uint8_t *wq = wrow + 2; /* the quants of block 0 */
		__m512 acc[16];
#pragma GCC unroll 16
		for (int i = 0; i < 16; i++)
			acc[i] = _mm512_setzero_ps();
		for (int64_t b = 0; b < nb; b += 2) {
			/* the weights stream from memory once: every 2 blocks (68
			 * bytes) ask for each row MM_AMX_PF blocks ahead, past the
			 * row's end for the next group's rows (prefetches may
			 * point past the weights) */
			const size_t pf = b + MM_AMX_PF < nb ? (size_t)((b + MM_AMX_PF) * bsz)
							     : (size_t)(16 * rb + (b + MM_AMX_PF - nb) * bsz);
			for (int i = 0; i < nv; i++)
				_mm_prefetch(addr_plus(wrow, (size_t)(i * rb) + pf), _MM_HINT_T0);
			const int two = b + 1 < nb;
			_tile_zero(0);
			_tile_loadd(2, wq + b * bsz, rb);
			_tile_loadd(4, xt + b * (Q8_0_BLOCK / 4) * 64, 64);
			_tile_dpbssd(0, 2, 4);
			if (two) {
				_tile_zero(1);
				_tile_loadd(3, wq + (b + 1) * bsz, rb);
				_tile_loadd(5, xt + (b + 1) * (Q8_0_BLOCK / 4) * 64, 64);
				_tile_dpbssd(1, 3, 5);
			}
			_tile_stored(0, cbuf[0], 64);
			amx_scale_block(acc, cbuf[0], wrow, sidx, km, b, xdt);
			if (two) {
				_tile_stored(1, cbuf[1], 64);
				amx_scale_block(acc, cbuf[1], wrow, sidx, km, b + 1, xdt);
			}
		}
		float t[16 * MM_AMX_LANES] __attribute__((aligned(64)));
#pragma GCC unroll 16
		for (int i = 0; i < 16; i++)
			_mm512_store_ps(t + i * MM_AMX_LANES, acc[i]);
		for (int j = 0; j < m; j++)
			for (int i = 0; i < nv; i++)
				y[j * ldy + g0 + i] = t[i * MM_AMX_LANES + j];
	}
	_tile_release();
}

static const struct mm_kernels avx512_kernels = {
	.name = "avx512",
	.cvt = cvt_avx512,
	.dot_f32 = dot_f32_avx512,
	.dot_w = dot_w_avx512,
	.gemv_bx = gemv_bx_avx512,
	.quant_act = quant_act_avx512,
	.dot_q8 = dot_q8_avx512,
	.dot_i8 = dot_i8_avx512,
	.mr = MR512,
	.nr = NR512,
	.gemm = gemm_avx512,
	.qmr = QMR512,
	.pack_q8 = pack_q8_avx512,
	.pack_i8 = pack_i8_avx512,
	.gemm_q8 = gemm_q8_avx512,
	.gemm_i8 = gemm_i8_avx512,
	.amx_ok = amx_ok_avx512,
	.gemm_q8_amx = gemm_q8_amx_avx512,
	.gemm_q8p = gemm_q8p_avx512,
	.gemm_i8p = gemm_i8p_avx512,
	.gemm_fp = gemm_fp_avx512,
	.f8_panel_f16 = f8_panel_f16_avx512,
};

const struct mm_kernels *mm_kernels_avx512(void)
{
	return &avx512_kernels;
}

#else

const struct mm_kernels *mm_kernels_avx512(void)
{
	return NULL;
}

#endif
