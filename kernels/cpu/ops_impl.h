/* kernels/cpu/ops_impl.h — internal to kernels/cpu: what ops_fast.c and
 * ops_attn_avx512.c share. The x86 target attributes (functions for one ISA
 * are compiled with them, so the files build with the default flags and the
 * binary runs anywhere; callers check the ISA first), the vector exp of the
 * softmax and SwiGLU, and the AVX-512 attention entry that ops_fast.c
 * dispatches to.
 */
#ifndef AORTA_KERNELS_CPU_OPS_IMPL_H
#define AORTA_KERNELS_CPU_OPS_IMPL_H

#include "ops.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KOPS_X86 1
#include <immintrin.h>
#else
#define KOPS_X86 0
#endif

#if KOPS_X86
#define T_AVX2   __attribute__((target("avx2,fma,f16c")))
#define T_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

/* e^x for x <= 0 (softmax after subtracting the max): Cephes expf's
 * polynomial on x - n*ln2, scaled by 2^n; relative error ~1e-7. */
T_AVX512 static inline __m512 kops__exp_nonpos16(__m512 x)
{
	x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
	__m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
	                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
	__m512 p = _mm512_set1_ps(1.9875691500e-4f);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
	__m512 y = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
	return _mm512_scalef_ps(y, n);
}

/* Whether kops__attn_rows_avx512 takes this head_dim (a multiple of 16). */
static inline int kops__attn_avx512_takes(int head_dim)
{
	return head_dim > 0 && head_dim % 16 == 0;
}

/* kops_attn_rows (ops.h) on AVX-512 for n_q <= KOPS__ATTN_MAX_Q heads, any
 * n_rows (cut into tiles of at most kops_attn_tile_rows(n_q) rows); scratch
 * of kops__attn_tile_scratch(n_q, last row's n_ctx, head_dim) floats. */
void kops__attn_rows_avx512(const struct kops_attn_args *a, int n_q, int n_rows, long q_stride,
                            long out_stride);
#endif

/* Wider groups are cut into groups of this many heads. */
#define KOPS__ATTN_MAX_Q 64
/* Floats of scratch a tile of the AVX-512 kernel needs (the other paths
 * need n_q * max_ctx, less). */
size_t kops__attn_tile_scratch(int n_q, int max_ctx, int head_dim);

#endif
