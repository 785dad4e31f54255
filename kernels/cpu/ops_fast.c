/* kernels/cpu/ops_fast.c — the fast forward-pass ops (see ops.h): the same
 * math as ops_ref.c with AVX2/FMA/F16C or AVX-512F inner loops, picked by the
 * `isa` argument (kops_isa_detect() at run time), and a portable scalar path.
 * Functions for one ISA are compiled with a target attribute so the file
 * builds with the default flags. Results differ from the reference only by
 * summation order; tests/engine/test_ops.c checks every ISA on ragged sizes.
 */
#include <math.h>
#include <string.h>

#include "ops.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KOPS_X86 1
#include <immintrin.h>
#else
#define KOPS_X86 0
#endif

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
#define T_AVX2 __attribute__((target("avx2,fma,f16c")))
#define T_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

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

void kops_silu_mul(enum kops_isa isa, float *out, const float *gate, const float *up, int n)
{
	/* expf dominates and is not worth a vector exp here: silu is < 1% of a
	 * layer's time next to the FFN matmuls. */
	(void)isa;
	for (int i = 0; i < n; i++) {
		float g = gate[i];
		out[i] = g / (1.0f + expf(-g)) * up[i];
	}
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
	const long row_stride = (long)a->n_kv_heads * hd; /* values per slot */
	const int is_f16 = a->kv_dtype == DT_F16;
	float *s = a->scratch;
	float max = -INFINITY;
	for (int t0 = 0; t0 < a->n_ctx; t0 += bs) {
		int n = a->n_ctx - t0 < bs ? a->n_ctx - t0 : bs;
		long base = (long)a->block_table[t0 / bs] * bs * row_stride + (long)a->kv_head * hd;
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
		long base = (long)a->block_table[t0 / bs] * bs * row_stride + (long)a->kv_head * hd;
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

/* GQA: the K/V row of each position is loaded once (it stays in L1) for all
 * n_q query heads of the group; each head keeps its own scores and max. */
void kops_attn_group(enum kops_isa isa, const struct kops_attn_args *a, int n_q)
{
	const int hd = a->head_dim, bs = a->block_size, n_ctx = a->n_ctx;
	const long row_stride = (long)a->n_kv_heads * hd;
	const int is_f16 = a->kv_dtype == DT_F16;
	float *s = a->scratch; /* [n_q][n_ctx] */
	float max[64], inv[64];
	if (n_q > 64) { /* wider groups than any model has: one head at a time */
		for (int g = 0; g < n_q; g++) {
			struct kops_attn_args h = *a;
			h.q = a->q + (long)g * hd;
			h.out = a->out + (long)g * hd;
			kops_attn_head(isa, &h);
		}
		return;
	}
	for (int g = 0; g < n_q; g++)
		max[g] = -INFINITY;
	for (int t0 = 0; t0 < n_ctx; t0 += bs) {
		int n = n_ctx - t0 < bs ? n_ctx - t0 : bs;
		long base = (long)a->block_table[t0 / bs] * bs * row_stride + (long)a->kv_head * hd;
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
		long base = (long)a->block_table[t0 / bs] * bs * row_stride + (long)a->kv_head * hd;
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
