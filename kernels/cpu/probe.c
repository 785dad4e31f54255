/* kernels/cpu/probe.c — machine probes (see probe.h). */
#include "probe.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define PROBE_X86 1
#else
#define PROBE_X86 0
#endif

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- memory ------------------------------------------------------------------- */

struct mem_job {
	float *a, *b, *c;
	long n;
	int op; /* 0 fill, 1 triad, 2 read */
	double sink[64];
};

static void mem_fn(void *p, int ith, int nth)
{
	struct mem_job *j = p;
	long i0, i1;
	kpool_split(j->n, ith, nth, &i0, &i1);
	if (j->op == 0) {
		for (long i = i0; i < i1; i++)
			j->a[i] = 0, j->b[i] = 1, j->c[i] = 2;
	} else if (j->op == 1) {
		for (long i = i0; i < i1; i++)
			j->a[i] = j->b[i] + 1.5f * j->c[i];
	} else {
		float s[16] = { 0 };
		for (long i = i0; i + 16 <= i1; i += 16)
			for (int k = 0; k < 16; k++)
				s[k] += j->b[i + k];
		double t = 0;
		for (int k = 0; k < 16; k++)
			t += s[k];
		j->sink[ith % 64] = t;
	}
}

struct kcpu_mem_bw kcpu_probe_memory(struct kpool *pool, size_t array_bytes)
{
	struct kcpu_mem_bw bw = { 0, 0 };
	struct mem_job j = { .n = (long)(array_bytes / sizeof(float)) };
	j.a = malloc((size_t)j.n * sizeof(float));
	j.b = malloc((size_t)j.n * sizeof(float));
	j.c = malloc((size_t)j.n * sizeof(float));
	if (j.a && j.b && j.c && j.n > 0) {
		j.op = 0; /* first touch on the threads that use them */
		kpool_run(pool, mem_fn, &j);
		for (int r = 0; r < 5; r++)
			for (int op = 1; op <= 2; op++) {
				j.op = op;
				double t0 = now_s();
				kpool_run(pool, mem_fn, &j);
				double dt = now_s() - t0;
				double gbs = (op == 1 ? 3.0 : 1.0) * (double)j.n * 4 / dt / 1e9;
				double *best = op == 1 ? &bw.triad_gbs : &bw.read_gbs;
				*best = gbs > *best ? gbs : *best;
			}
	}
	free(j.a), free(j.b), free(j.c);
	return bw;
}

/* ---- compute ------------------------------------------------------------------ */

enum { P_SCALAR, P_FMA256, P_FMA512, P_VNNI512 };

struct peak_job {
	int kind;
	long iters;
	double ops[1024]; /* per thread, per second */
	float sinkf[64];  /* results, so the loops are not optimized away */
	int sinki[64];
};

#if PROBE_X86
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma")))
#define T256 __attribute__((target("avx2,fma")))

T512 static float fma512(long iters)
{
	__m512 a[16];
	const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
	for (int i = 0; i < 16; i++)
		a[i] = _mm512_set1_ps((float)i);
	for (long it = 0; it < iters; it++)
#pragma GCC unroll 16
		for (int i = 0; i < 16; i++)
			a[i] = _mm512_fmadd_ps(a[i], b, c);
	for (int i = 1; i < 16; i++)
		a[0] = _mm512_add_ps(a[0], a[i]);
	return _mm512_reduce_add_ps(a[0]);
}

T512 static int vnni512(long iters)
{
	__m512i a[16];
	const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
	for (int i = 0; i < 16; i++)
		a[i] = _mm512_set1_epi32(i);
	for (long it = 0; it < iters; it++)
#pragma GCC unroll 16
		for (int i = 0; i < 16; i++)
			a[i] = _mm512_dpbusd_epi32(a[i], u, s);
	for (int i = 1; i < 16; i++)
		a[0] = _mm512_add_epi32(a[0], a[i]);
	return _mm512_reduce_add_epi32(a[0]);
}

T256 static float fma256(long iters)
{
	__m256 a[12];
	const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
	for (int i = 0; i < 12; i++)
		a[i] = _mm256_set1_ps((float)i);
	for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
		for (int i = 0; i < 12; i++)
			a[i] = _mm256_fmadd_ps(a[i], b, c);
	for (int i = 1; i < 12; i++)
		a[0] = _mm256_add_ps(a[0], a[i]);
	float o[8];
	_mm256_storeu_ps(o, a[0]);
	return o[0] + o[7];
}
#endif

/* ops per iteration of each loop */
static double ops_per_iter(int kind)
{
	switch (kind) {
	case P_FMA512: return 16.0 * 16 * 2;
	case P_VNNI512: return 16.0 * 64 * 2;
	case P_FMA256: return 12.0 * 8 * 2;
	default: return 12.0 * 2;
	}
}

static void peak_fn(void *p, int ith, int nth)
{
	struct peak_job *j = p;
	(void)nth;
	double t0 = now_s();
	switch (j->kind) {
#if PROBE_X86
	case P_FMA512: j->sinkf[ith % 64] = fma512(j->iters); break;
	case P_VNNI512: j->sinki[ith % 64] = vnni512(j->iters); break;
	case P_FMA256: j->sinkf[ith % 64] = fma256(j->iters); break;
#endif
	default: {
		float a = 1; /* 12 dependent multiply-adds: the scalar path's best */
		for (long i = 0; i < j->iters * 12; i++)
			a = a * 0.999999f + 1e-7f;
		j->sinkf[ith % 64] = a;
		break;
	}
	}
	if (ith < 1024)
		j->ops[ith] = ops_per_iter(j->kind) * (double)j->iters / (now_s() - t0);
}

/* Sum over threads of the loop's rate, best of 3 after a warm-up run that
 * lets the clock settle. */
static double peak(struct kpool *pool, int kind)
{
	struct peak_job j = { .kind = kind, .iters = 2000000 };
	kpool_run(pool, peak_fn, &j);
	double best = 0;
	for (int r = 0; r < 3; r++) {
		kpool_run(pool, peak_fn, &j);
		double total = 0;
		for (int i = 0; i < kpool_size(pool) && i < 1024; i++)
			total += j.ops[i];
		best = total > best ? total : best;
	}
	return best / 1e9;
}

double kcpu_probe_fma_gflops(struct kpool *pool)
{
#if PROBE_X86
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f"))
		return peak(pool, P_FMA512);
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return peak(pool, P_FMA256);
#endif
	return peak(pool, P_SCALAR);
}

double kcpu_probe_int8_gops(struct kpool *pool)
{
#if PROBE_X86
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni"))
		return peak(pool, P_VNNI512);
#endif
	(void)pool;
	return 0;
}
