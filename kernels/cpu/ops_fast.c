/* kernels/cpu/ops_fast.c — the fast forward-pass ops (see ops.h): the same
 * math as ops_ref.c with AVX2/FMA/F16C or AVX-512F inner loops, picked by the
 * `isa` argument (kops_isa_detect() at run time), and a portable scalar path.
 * Functions for one ISA are compiled with a target attribute so the file
 * builds with the default flags (ops_impl.h). Attention: kops_attn_rows and
 * kops_attn_group dispatch to the tiled AVX-512 kernel in ops_attn_avx512.c
 * (head_dim a multiple of 16), else run one row at a time here (the AVX2
 * kernel for head_dim a multiple of 32, else plain loops over dot/axpy).
 * Results differ from the reference only by summation order;
 * tests/kernels/test_ops.c checks every ISA on ragged sizes.
 */
#include <math.h>
#include <string.h>

#include "ops_impl.h"

enum kops_isa kops_isa_detect(void)
{
#if KOPS_X86
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
	    __builtin_cpu_supports("fma"))
		return KOPS_ISA_AVX512;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
	    __builtin_cpu_supports("f16c"))
		return KOPS_ISA_AVX2;
#endif
	return KOPS_ISA_SCALAR;
}

const char *kops_isa_name(enum kops_isa isa)
{
	switch (isa) {
	case KOPS_ISA_SCALAR: return "scalar";
	case KOPS_ISA_AVX2: return "avx2";
	case KOPS_ISA_AVX512: return "avx512";
	default: return "?";
	}
}

/* ---- vector primitives: dot products and axpy over F32 / F16 -------------- */

static float dot_f32_scalar(const float *a, const float *b, int n)
{
	/* four accumulators so the compiler can keep the loop pipelined */
	float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
	int i = 0;
	for (; i + 4 <= n; i += 4) {
		s0 += a[i] * b[i];
		s1 += a[i + 1] * b[i + 1];
		s2 += a[i + 2] * b[i + 2];
		s3 += a[i + 3] * b[i + 3];
	}
	for (; i < n; i++)
		s0 += a[i] * b[i];
	return (s0 + s1) + (s2 + s3);
}

static float dot_f16_scalar(const float *a, const uint16_t *b, int n)
{
	float s = 0;
	for (int i = 0; i < n; i++)
		s += a[i] * f16_to_f32(b[i]);
	return s;
}

static void axpy_f32_scalar(float *y, float p, const float *x, int n)
{
	for (int i = 0; i < n; i++)
		y[i] += p * x[i];
}

static void axpy_f16_scalar(float *y, float p, const uint16_t *x, int n)
{
	for (int i = 0; i < n; i++)
		y[i] += p * f16_to_f32(x[i]);
}

#if KOPS_X86
T_AVX2 static float hsum256(__m256 v)
{
	__m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
	lo = _mm_add_ps(lo, hi);
	lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
	lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
	return _mm_cvtss_f32(lo);
}

T_AVX2 static float dot_f32_avx2(const float *a, const float *b, int n)
{
	__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
	int i = 0;
	for (; i + 16 <= n; i += 16) {
		acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
		acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
	}
	for (; i + 8 <= n; i += 8)
		acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
	float s = hsum256(_mm256_add_ps(acc0, acc1));
	for (; i < n; i++)
		s += a[i] * b[i];
	return s;
}

T_AVX2 static float dot_f16_avx2(const float *a, const uint16_t *b, int n)
{
	__m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
	int i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256 b0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));
		__m256 b1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i + 8)));
		acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), b0, acc0);
		acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), b1, acc1);
	}
	for (; i + 8 <= n; i += 8) {
		__m256 b0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));
		acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), b0, acc0);
	}
	float s = hsum256(_mm256_add_ps(acc0, acc1));
	for (; i < n; i++)
		s += a[i] * f16_to_f32(b[i]);
	return s;
}

T_AVX2 static void axpy_f32_avx2(float *y, float p, const float *x, int n)
{
	__m256 vp = _mm256_set1_ps(p);
	int i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(vp, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
	for (; i < n; i++)
		y[i] += p * x[i];
}

T_AVX2 static void axpy_f16_avx2(float *y, float p, const uint16_t *x, int n)
{
	__m256 vp = _mm256_set1_ps(p);
	int i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 xv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(vp, xv, _mm256_loadu_ps(y + i)));
	}
	for (; i < n; i++)
		y[i] += p * f16_to_f32(x[i]);
}

T_AVX512 static float dot_f32_avx512(const float *a, const float *b, int n)
{
	__m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
	int i = 0;
	for (; i + 32 <= n; i += 32) {
		acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
		acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
	}
	for (; i + 16 <= n; i += 16)
		acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
	if (i < n) { /* masked tail: no scalar remainder loop */
		__mmask16 m = (__mmask16)((1u << (n - i)) - 1);
		acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc1);
	}
	return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

T_AVX512 static float dot_f16_avx512(const float *a, const uint16_t *b, int n)
{
	__m512 acc0 = _mm512_setzero_ps();
	int i = 0;
	for (; i + 16 <= n; i += 16) {
		__m512 bv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + i)));
		acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), bv, acc0);
	}
	float s = _mm512_reduce_add_ps(acc0);
	for (; i < n; i++)
		s += a[i] * f16_to_f32(b[i]);
	return s;
}

T_AVX512 static void axpy_f32_avx512(float *y, float p, const float *x, int n)
{
	__m512 vp = _mm512_set1_ps(p);
	int i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(y + i, _mm512_fmadd_ps(vp, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
	if (i < n) {
		__mmask16 m = (__mmask16)((1u << (n - i)) - 1);
		__m512 r = _mm512_fmadd_ps(vp, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i));
		_mm512_mask_storeu_ps(y + i, m, r);
	}
}

T_AVX512 static void axpy_f16_avx512(float *y, float p, const uint16_t *x, int n)
{
	__m512 vp = _mm512_set1_ps(p);
	int i = 0;
	for (; i + 16 <= n; i += 16) {
		__m512 xv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
		_mm512_storeu_ps(y + i, _mm512_fmadd_ps(vp, xv, _mm512_loadu_ps(y + i)));
	}
	for (; i < n; i++)
		y[i] += p * f16_to_f32(x[i]);
}
#endif /* KOPS_X86 */

static float dot_f32(enum kops_isa isa, const float *a, const float *b, int n)
{
#if KOPS_X86
	if (isa == KOPS_ISA_AVX512)
		return dot_f32_avx512(a, b, n);
	if (isa == KOPS_ISA_AVX2)
		return dot_f32_avx2(a, b, n);
#endif
	(void)isa;
	return dot_f32_scalar(a, b, n);
}

static float dot_f16(enum kops_isa isa, const float *a, const uint16_t *b, int n)
{
#if KOPS_X86
	if (isa == KOPS_ISA_AVX512)
		return dot_f16_avx512(a, b, n);
	if (isa == KOPS_ISA_AVX2)
		return dot_f16_avx2(a, b, n);
#endif
	(void)isa;
	return dot_f16_scalar(a, b, n);
}

static void axpy_f32(enum kops_isa isa, float *y, float p, const float *x, int n)
{
#if KOPS_X86
	if (isa == KOPS_ISA_AVX512) {
		axpy_f32_avx512(y, p, x, n);
		return;
	}
	if (isa == KOPS_ISA_AVX2) {
		axpy_f32_avx2(y, p, x, n);
		return;
	}
#endif
	(void)isa;
	axpy_f32_scalar(y, p, x, n);
}

static void axpy_f16(enum kops_isa isa, float *y, float p, const uint16_t *x, int n)
{
#if KOPS_X86
	if (isa == KOPS_ISA_AVX512) {
		axpy_f16_avx512(y, p, x, n);
		return;
	}
	if (isa == KOPS_ISA_AVX2) {
		axpy_f16_avx2(y, p, x, n);
		return;
	}
#endif
	(void)isa;
	axpy_f16_scalar(y, p, x, n);
}

/* ---- row ops ---------------------------------------------------------------- */

void kops_rmsnorm(enum kops_isa isa, float *out, const float *x, const float *w, int n, float eps)
{
	float ss = dot_f32(isa, x, x, n);
	float inv = 1.0f / sqrtf(ss / (float)n + eps);
	for (int i = 0; i < n; i++) /* the compiler vectorizes this at -O2 */
		out[i] = x[i] * inv * w[i];
}

void kops_add(enum kops_isa isa, float *x, const float *y, int n)
{
	axpy_f32(isa, x, 1.0f, y, n);
}


void kops_rope(enum kops_isa isa, float *x, int n_heads, int head_dim, const float *cos_t,
	       const float *sin_t, enum kops_rope_style style)
{
	(void)isa;
	const int half = head_dim / 2;
	for (int h = 0; h < n_heads; h++) {
		float *v = x + (long)h * head_dim;
		if (style == KOPS_ROPE_NEOX) {
			/* two contiguous halves: this loop vectorizes */
			float *lo = v, *hi = v + half;
			for (int i = 0; i < half; i++) {
				float a = lo[i], b = hi[i];
				lo[i] = a * cos_t[i] - b * sin_t[i];
				hi[i] = b * cos_t[i] + a * sin_t[i];
			}
		} else {
			for (int i = 0; i < half; i++) {
				float a = v[2 * i], b = v[2 * i + 1];
				v[2 * i] = a * cos_t[i] - b * sin_t[i];
				v[2 * i + 1] = b * cos_t[i] + a * sin_t[i];
			}
		}
	}
}

/* ---- attention -------------------------------------------------------------- */

/* Walk the sequence block by block so the slot arithmetic is once per block. */
void kops_attn_head(enum kops_isa isa, const struct kops_attn_args *a)
{
	const int hd = a->head_dim, bs = a->block_size;
	const long row_stride = hd; /* one head's keys are contiguous in a block */
	const int is_f16 = a->kv_dtype == DT_F16;
	float *s = a->scratch;
	float max = -INFINITY;
	for (int t0 = 0; t0 < a->n_ctx; t0 += bs) {
		int n = a->n_ctx - t0 < bs ? a->n_ctx - t0 : bs;
		long base = kops_kv_offset(a->block_table[t0 / bs], 0, a->kv_head, a->n_kv_heads, bs, hd);
		for (int j = 0; j < n; j++) {
			long off = base + j * row_stride;
			float d = is_f16 ? dot_f16(isa, a->q, (const uint16_t *)a->k_cache + off, hd)
					 : dot_f32(isa, a->q, (const float *)a->k_cache + off, hd);
			d *= a->scale;
			s[t0 + j] = d;
			if (d > max)
				max = d;
		}
	}
	float sum = 0.0f;
	for (int t = 0; t < a->n_ctx; t++) {
		s[t] = expf(s[t] - max);
		sum += s[t];
	}
	const float inv = 1.0f / sum;
	memset(a->out, 0, (size_t)hd * sizeof(float));
	for (int t0 = 0; t0 < a->n_ctx; t0 += bs) {
		int n = a->n_ctx - t0 < bs ? a->n_ctx - t0 : bs;
		long base = kops_kv_offset(a->block_table[t0 / bs], 0, a->kv_head, a->n_kv_heads, bs, hd);
		for (int j = 0; j < n; j++) {
			long off = base + j * row_stride;
			float p = s[t0 + j] * inv;
			if (is_f16)
				axpy_f16(isa, a->out, p, (const uint16_t *)a->v_cache + off, hd);
			else
				axpy_f32(isa, a->out, p, (const float *)a->v_cache + off, hd);
		}
	}
}

#if KOPS_X86
/* The group kernel for AVX2 + FMA + F16C, for head_dim a multiple of 32:
 * scores four keys at a time, their K rows shared by the group's heads and
 * the four horizontal sums done together; the output built 32 floats at a
 * time over all keys, two heads per pass (16 ymm registers). Each head's
 * arithmetic is the same whatever the group size. */
T_AVX2 static inline __m256 load8(const void *base, long off, int is_f16)
{
	if (is_f16)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + off)));
	return _mm256_loadu_ps((const float *)base + off);
}

T_AVX2 static inline __m128 reduce4_256(__m256 a, __m256 b, __m256 c, __m256 d)
{
	__m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
	return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* e^x for x <= 0, as kops__exp_nonpos16; 2^n built in the exponent bits. */
T_AVX2 static inline __m256 exp_nonpos8(__m256 x)
{
	x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
	__m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
				   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
	__m256 p = _mm256_set1_ps(1.9875691500e-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
	__m256 y = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	/* n >= -126 here (x >= -87), so 2^n is a normal float */
	__m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

T_AVX2 static float softmax_unnorm_avx2(float *s, int n)
{
	float m = -INFINITY;
	for (int i = 0; i < n; i++)
		m = s[i] > m ? s[i] : m;
	__m256 vm = _mm256_set1_ps(m), sum = _mm256_setzero_ps();
	int i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 e = exp_nonpos8(_mm256_sub_ps(_mm256_loadu_ps(s + i), vm));
		_mm256_storeu_ps(s + i, e);
		sum = _mm256_add_ps(sum, e);
	}
	float total = hsum256(sum);
	for (; i < n; i++) {
		s[i] = expf(s[i] - m);
		total += s[i];
	}
	return total;
}

T_AVX2 static inline __attribute__((always_inline)) void
pv_chunk8(const struct kops_attn_args *a, const float *s, const float *inv, int g0, const int GN,
	  int c)
{
	const int bs = a->block_size, n_ctx = a->n_ctx, is_f16 = a->kv_dtype == DT_F16;
	__m256 acc[2][4];
#pragma GCC unroll 2
	for (int g = 0; g < GN; g++)
#pragma GCC unroll 4
		for (int i = 0; i < 4; i++)
			acc[g][i] = _mm256_setzero_ps();
	for (int t0 = 0; t0 < n_ctx; t0 += bs) {
		const int n = n_ctx - t0 < bs ? n_ctx - t0 : bs;
		long off = kops_kv_offset(a->block_table[t0 / bs], 0, a->kv_head, a->n_kv_heads, bs,
					  a->head_dim) + c;
		for (int j = 0; j < n; j++, off += a->head_dim) {
			__m256 v0 = load8(a->v_cache, off, is_f16), v1 = load8(a->v_cache, off + 8, is_f16);
			__m256 v2 = load8(a->v_cache, off + 16, is_f16);
			__m256 v3 = load8(a->v_cache, off + 24, is_f16);
#pragma GCC unroll 2
			for (int g = 0; g < GN; g++) {
				__m256 p = _mm256_set1_ps(s[(long)(g0 + g) * n_ctx + t0 + j]);
				acc[g][0] = _mm256_fmadd_ps(p, v0, acc[g][0]);
				acc[g][1] = _mm256_fmadd_ps(p, v1, acc[g][1]);
				acc[g][2] = _mm256_fmadd_ps(p, v2, acc[g][2]);
				acc[g][3] = _mm256_fmadd_ps(p, v3, acc[g][3]);
			}
		}
	}
#pragma GCC unroll 2
	for (int g = 0; g < GN; g++) {
		__m256 sc = _mm256_set1_ps(inv[g0 + g]);
		float *o = a->out + (long)(g0 + g) * a->head_dim + c;
#pragma GCC unroll 4
		for (int i = 0; i < 4; i++)
			_mm256_storeu_ps(o + 8 * i, _mm256_mul_ps(acc[g][i], sc));
	}
}

T_AVX2 static void attn_group_avx2(const struct kops_attn_args *a, int n_q)
{
	const int hd = a->head_dim, bs = a->block_size, n_ctx = a->n_ctx;
	const int is_f16 = a->kv_dtype == DT_F16, nc = hd / 8;
	float *s = a->scratch; /* [n_q][n_ctx] */
	float inv[64];
#define SLOT_OFF(t) kops_kv_offset(a->block_table[(t) / bs], (t) % bs, a->kv_head, a->n_kv_heads, bs, hd)
	int t = 0;
	for (; t + 4 <= n_ctx; t += 4) {
		const long o0 = SLOT_OFF(t), o1 = SLOT_OFF(t + 1), o2 = SLOT_OFF(t + 2),
			   o3 = SLOT_OFF(t + 3);
		for (int g = 0; g < n_q; g++) {
			const float *q = a->q + (long)g * hd;
			__m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
			for (int c = 0; c < nc; c++) {
				__m256 qv = _mm256_loadu_ps(q + 8 * c);
				s0 = _mm256_fmadd_ps(qv, load8(a->k_cache, o0 + 8 * c, is_f16), s0);
				s1 = _mm256_fmadd_ps(qv, load8(a->k_cache, o1 + 8 * c, is_f16), s1);
				s2 = _mm256_fmadd_ps(qv, load8(a->k_cache, o2 + 8 * c, is_f16), s2);
				s3 = _mm256_fmadd_ps(qv, load8(a->k_cache, o3 + 8 * c, is_f16), s3);
			}
			__m128 r = _mm_mul_ps(reduce4_256(s0, s1, s2, s3), _mm_set1_ps(a->scale));
			_mm_storeu_ps(s + (long)g * n_ctx + t, r);
		}
	}
	for (; t < n_ctx; t++) {
		const long o = SLOT_OFF(t);
		for (int g = 0; g < n_q; g++) {
			const float *q = a->q + (long)g * hd;
			__m256 acc = _mm256_setzero_ps();
			for (int c = 0; c < nc; c++)
				acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * c),
						      load8(a->k_cache, o + 8 * c, is_f16), acc);
			s[(long)g * n_ctx + t] = hsum256(acc) * a->scale;
		}
	}
#undef SLOT_OFF
	for (int g = 0; g < n_q; g++)
		inv[g] = 1.0f / softmax_unnorm_avx2(s + (long)g * n_ctx, n_ctx);
	for (int c = 0; c < hd; c += 32) {
		int g = 0;
		for (; g + 2 <= n_q; g += 2)
			pv_chunk8(a, s, inv, g, 2, c);
		if (g < n_q)
			pv_chunk8(a, s, inv, g, 1, c);
	}
}
#endif

/* One row's n_q <= KOPS__ATTN_MAX_Q heads without the AVX-512 kernel: AVX2,
 * or plain loops over the dot/axpy primitives. GQA: the K/V row of each
 * position is loaded once (it stays in L1) for all n_q heads; each head
 * keeps its own scores and max. */
static void attn_group_row(enum kops_isa isa, const struct kops_attn_args *a, int n_q)
{
#if KOPS_X86
	if (isa >= KOPS_ISA_AVX2 && a->head_dim % 32 == 0) {
		attn_group_avx2(a, n_q);
		return;
	}
#endif
	const int hd = a->head_dim, bs = a->block_size, n_ctx = a->n_ctx;
	const long row_stride = hd; /* one head's keys are contiguous in a block */
	const int is_f16 = a->kv_dtype == DT_F16;
	float *s = a->scratch; /* [n_q][n_ctx] */
	float max[KOPS__ATTN_MAX_Q], inv[KOPS__ATTN_MAX_Q];
	for (int g = 0; g < n_q; g++)
		max[g] = -INFINITY;
	for (int t0 = 0; t0 < n_ctx; t0 += bs) {
		int n = n_ctx - t0 < bs ? n_ctx - t0 : bs;
		long base = kops_kv_offset(a->block_table[t0 / bs], 0, a->kv_head, a->n_kv_heads, bs, hd);
		for (int j = 0; j < n; j++) {
			long off = base + j * row_stride;
			for (int g = 0; g < n_q; g++) {
				const float *q = a->q + (long)g * hd;
				float d = is_f16 ? dot_f16(isa, q, (const uint16_t *)a->k_cache + off, hd)
						 : dot_f32(isa, q, (const float *)a->k_cache + off, hd);
				d *= a->scale;
				s[(long)g * n_ctx + t0 + j] = d;
				if (d > max[g])
					max[g] = d;
			}
		}
	}
	for (int g = 0; g < n_q; g++) {
		float *sg = s + (long)g * n_ctx, sum = 0.0f;
		for (int t = 0; t < n_ctx; t++) {
			sg[t] = expf(sg[t] - max[g]);
			sum += sg[t];
		}
		inv[g] = 1.0f / sum;
	}
	memset(a->out, 0, (size_t)n_q * hd * sizeof(float));
	for (int t0 = 0; t0 < n_ctx; t0 += bs) {
		int n = n_ctx - t0 < bs ? n_ctx - t0 : bs;
		long base = kops_kv_offset(a->block_table[t0 / bs], 0, a->kv_head, a->n_kv_heads, bs, hd);
		for (int j = 0; j < n; j++) {
			long off = base + j * row_stride;
			for (int g = 0; g < n_q; g++) {
				float p = s[(long)g * n_ctx + t0 + j] * inv[g];
				float *o = a->out + (long)g * hd;
				if (is_f16)
					axpy_f16(isa, o, p, (const uint16_t *)a->v_cache + off, hd);
				else
					axpy_f32(isa, o, p, (const float *)a->v_cache + off, hd);
			}
		}
	}
}

void kops_attn_rows(enum kops_isa isa, const struct kops_attn_args *a, int n_q, int n_rows,
                    long q_stride, long out_stride)
{
	/* wider groups than any model has: KOPS__ATTN_MAX_Q heads at a time */
	for (int g0 = 0; g0 < n_q; g0 += KOPS__ATTN_MAX_Q) {
		const int n = n_q - g0 < KOPS__ATTN_MAX_Q ? n_q - g0 : KOPS__ATTN_MAX_Q;
		struct kops_attn_args h = *a;
		h.q = a->q + (long)g0 * a->head_dim;
		h.out = a->out + (long)g0 * a->head_dim;
#if KOPS_X86
		if (isa == KOPS_ISA_AVX512 && kops__attn_avx512_takes(a->head_dim)) {
			kops__attn_rows_avx512(&h, n, n_rows, q_stride, out_stride);
			continue;
		}
#endif
		for (int r = 0; r < n_rows; r++) {
			struct kops_attn_args t = h;
			t.q = h.q + r * q_stride;
			t.out = h.out + r * out_stride;
			t.n_ctx = h.n_ctx + r;
			attn_group_row(isa, &t, n);
		}
	}
}

void kops_attn_group(enum kops_isa isa, const struct kops_attn_args *a, int n_q)
{
	kops_attn_rows(isa, a, n_q, 1, 0, 0);
}

size_t kops_attn_scratch_floats(int n_q, int max_ctx, int head_dim)
{
	return kops__attn_tile_scratch(n_q < KOPS__ATTN_MAX_Q ? n_q : KOPS__ATTN_MAX_Q, max_ctx,
	                               head_dim);
}

/* ---- SwiGLU ------------------------------------------------------------------ */

#if KOPS_X86
/* silu(g) = g * sigmoid(g), with e = exp(-|g|) <= 1 so the exp never
 * overflows: sigmoid = 1/(1+e) for g >= 0, e/(1+e) for g < 0. */
T_AVX512 static void silu_mul_avx512(float *out, const float *gate, const float *up, int n)
{
	const __m512 one = _mm512_set1_ps(1.0f);
	int i = 0;
	for (; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
		__m512 g = _mm512_maskz_loadu_ps(k, gate + i), u = _mm512_maskz_loadu_ps(k, up + i);
		__m512 e = kops__exp_nonpos16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(g)));
		__mmask16 neg = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ);
		__m512 num = _mm512_mask_blend_ps(neg, one, e);
		__m512 sig = _mm512_div_ps(num, _mm512_add_ps(one, e));
		_mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(_mm512_mul_ps(g, sig), u));
	}
}

T_AVX2 static void silu_mul_avx2(float *out, const float *gate, const float *up, int n)
{
	const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
	const __m256 sign = _mm256_set1_ps(-0.0f);
	int i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 g = _mm256_loadu_ps(gate + i), u = _mm256_loadu_ps(up + i);
		__m256 e = exp_nonpos8(_mm256_or_ps(g, sign)); /* -|g| */
		__m256 num = _mm256_blendv_ps(one, e, _mm256_cmp_ps(g, zero, _CMP_LT_OQ));
		__m256 sig = _mm256_div_ps(num, _mm256_add_ps(one, e));
		_mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(g, sig), u));
	}
	for (; i < n; i++) {
		float g = gate[i];
		out[i] = g / (1.0f + expf(-g)) * up[i];
	}
}
#endif

void kops_silu_mul(enum kops_isa isa, float *out, const float *gate, const float *up, int n)
{
#if KOPS_X86
	if (isa == KOPS_ISA_AVX512) {
		silu_mul_avx512(out, gate, up, n);
		return;
	}
	if (isa == KOPS_ISA_AVX2) {
		silu_mul_avx2(out, gate, up, n);
		return;
	}
#endif
	(void)isa;
	for (int i = 0; i < n; i++) {
		float g = gate[i];
		out[i] = g / (1.0f + expf(-g)) * up[i];
	}
}
