/* tests/bench/bench_matmul.c — kernel benchmark for kcpu_matmul (not a test).
 *
 * Measures, in one run and on the same threads:
 *   - a STREAM-like triad a = b + s*c (bytes counted as STREAM does: 3 arrays)
 *     and a read-only sum (what a GEMV does) over arrays far larger than L2;
 *   - the FMA peak: a register-only loop of independent FMAs on every thread;
 *   - the int8 dot peak: the same with vpdpbusd (AVX-512 VNNI) — 64 MACs per
 *     instruction, counted as 128 ops;
 *   - kcpu_matmul on the shapes of a 2048-hidden, 8-KV-head, 8192-FFN,
 *     32000-vocab model, F16 and Q8_0, at m = 1 (GB/s of weight bytes read,
 *     vs triad and read bandwidth), m = 16 (speed-up in tokens/s over m = 1)
 *     and m = 512 (GFLOP/s vs the FMA peak for F16, vs the int8 dot peak for
 *     Q8_0);
 *   - a per-token decode estimate for a 16-layer model from the per-shape
 *     times (matmuls only).
 * Usage: bench_matmul [-t threads] [-q (quick: fewer reps, no m=512 LM head)]
 * Timings are the best of several repetitions; the machine is shared, so
 * check `uptime` and run it when the load is low.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/quant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- memory bandwidth probes ------------------------------------------------- */

struct mem_probe {
	float *a, *b, *c;
	size_t n;
	double sink[64];
};

static void triad_fn(void *p, int ith, int nth)
{
	struct mem_probe *mp = p;
	long i0, i1;
	kpool_split((long)mp->n, ith, nth, &i0, &i1);
	for (long i = i0; i < i1; i++)
		mp->a[i] = mp->b[i] + 1.5f * mp->c[i];
}

static void read_fn(void *p, int ith, int nth)
{
	struct mem_probe *mp = p;
	long i0, i1;
	kpool_split((long)mp->n, ith, nth, &i0, &i1);
	float s[16] = { 0 };
	for (long i = i0; i + 16 <= i1; i += 16)
		for (int k = 0; k < 16; k++)
			s[k] += mp->b[i + k];
	double t = 0;
	for (int k = 0; k < 16; k++)
		t += s[k];
	mp->sink[ith % 64] = t;
}

static void init_fn(void *p, int ith, int nth)
{
	struct mem_probe *mp = p;
	long i0, i1;
	kpool_split((long)mp->n, ith, nth, &i0, &i1);
	for (long i = i0; i < i1; i++) {
		mp->a[i] = 0;
		mp->b[i] = 1;
		mp->c[i] = 2;
	}
}

/* ---- compute peak probes ------------------------------------------------------ */

struct peak_probe {
	long iters;
	int isa; /* 0 avx2 fma, 1 avx512 fma, 2 avx512 vnni */
	float sinkf[64];
	int sinki[64];
};

#if defined(__x86_64__)
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma")))
#define T256 __attribute__((target("avx2,fma")))

T512 static void fma512(struct peak_probe *pp, int ith)
{
	__m512 a[16];
	const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
	for (int i = 0; i < 16; i++)
		a[i] = _mm512_set1_ps((float)i);
	for (long it = 0; it < pp->iters; it++)
#pragma GCC unroll 16
		for (int i = 0; i < 16; i++)
			a[i] = _mm512_fmadd_ps(a[i], b, c);
	for (int i = 1; i < 16; i++)
		a[0] = _mm512_add_ps(a[0], a[i]);
	pp->sinkf[ith % 64] = _mm512_reduce_add_ps(a[0]);
}

T512 static void vnni512(struct peak_probe *pp, int ith)
{
	__m512i a[16];
	const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
	for (int i = 0; i < 16; i++)
		a[i] = _mm512_set1_epi32(i);
	for (long it = 0; it < pp->iters; it++)
#pragma GCC unroll 16
		for (int i = 0; i < 16; i++)
			a[i] = _mm512_dpbusd_epi32(a[i], u, s);
	for (int i = 1; i < 16; i++)
		a[0] = _mm512_add_epi32(a[0], a[i]);
	pp->sinki[ith % 64] = _mm512_reduce_add_epi32(a[0]);
}

T256 static void fma256(struct peak_probe *pp, int ith)
{
	__m256 a[12];
	const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
	for (int i = 0; i < 12; i++)
		a[i] = _mm256_set1_ps((float)i);
	for (long it = 0; it < pp->iters; it++)
#pragma GCC unroll 12
		for (int i = 0; i < 12; i++)
			a[i] = _mm256_fmadd_ps(a[i], b, c);
	for (int i = 1; i < 12; i++)
		a[0] = _mm256_add_ps(a[0], a[i]);
	float o[8];
	_mm256_storeu_ps(o, a[0]);
	pp->sinkf[ith % 64] = o[0] + o[7];
}
#endif

static void peak_fn(void *p, int ith, int nth)
{
	(void)nth;
	struct peak_probe *pp = p;
#if defined(__x86_64__)
	if (pp->isa == 1)
		fma512(pp, ith);
	else if (pp->isa == 2)
		vnni512(pp, ith);
	else
		fma256(pp, ith);
#else
	(void)pp;
	(void)ith;
#endif
}

/* ops per iteration per thread of each probe */
static double peak_ops_per_iter(int isa)
{
	return isa == 0 ? 12.0 * 8 * 2 : isa == 1 ? 16.0 * 16 * 2 : 16.0 * 64 * 2;
}

static double measure_peak(struct kpool *pool, int isa)
{
	struct peak_probe pp = { .iters = 2000000, .isa = isa };
	kpool_run(pool, peak_fn, &pp); /* warm up, let the clock ramp */
	double best = 0;
	for (int r = 0; r < 3; r++) {
		double t0 = now_s();
		kpool_run(pool, peak_fn, &pp);
		double t = now_s() - t0;
		double ops = peak_ops_per_iter(isa) * (double)pp.iters * kpool_size(pool) / t;
		if (ops > best)
			best = ops;
	}
	return best;
}

/* ---- matmul ---------------------------------------------------------------------- */

struct shape {
	const char *name;
	int64_t rows, cols;
	int per_layer; /* how many of these a layer has (0: once per model) */
};

static const struct shape shapes[] = {
	{ "q/o  2048x2048", 2048, 2048, 2 },
	{ "k/v   512x2048", 512, 2048, 2 },
	{ "gate/up 8192x2048", 8192, 2048, 2 },
	{ "down 2048x8192", 2048, 8192, 1 },
	{ "lm_head 32000x2048", 32000, 2048, 0 },
};
#define N_LAYERS 16

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

/* Best time of reps runs (at least one warm-up). */
static double time_matmul(struct kpool *pool, const struct kmat *w, const float *x, int m, float *y,
			  int reps)
{
	kcpu_matmul(pool, w, x, m, y);
	double best = 1e30;
	for (int r = 0; r < reps; r++) {
		double t0 = now_s();
		kcpu_matmul(pool, w, x, m, y);
		double t = now_s() - t0;
		if (t < best)
			best = t;
	}
	return best;
}

static int make_weight(enum dtype t, int64_t rows, int64_t cols, struct kmat *w)
{
	size_t n = (size_t)rows * (size_t)cols;
	float *f = malloc(n * sizeof(float));
	if (!f)
		return -1;
	for (size_t i = 0; i < n; i++)
		f[i] = frand() * 0.05f;
	struct kmat src = { DT_F32, rows, cols, f, NULL, 0 };
	*w = (struct kmat){ t, rows, cols, NULL, NULL, 0 };
	if (t == DT_F16) {
		uint16_t *h = malloc(n * 2);
		if (h)
			for (size_t i = 0; i < n; i++)
				h[i] = f32_to_f16(f[i]);
		w->data = h;
	} else {
		struct q8_0_block *b = malloc(n / 32 * sizeof *b);
		if (b && kcpu_quantize_q8_0(&src, b)) {
			free(b);
			b = NULL;
		}
		w->data = b;
	}
	free(f);
	return w->data ? 0 : -1;
}

int main(int argc, char **argv)
{
	int threads = 0, quick = 0, opt;
	while ((opt = getopt(argc, argv, "t:q")) != -1) {
		if (opt == 't')
			threads = atoi(optarg);
		else if (opt == 'q')
			quick = 1;
		else {
			fprintf(stderr, "usage: %s [-t threads] [-q]\n", argv[0]);
			return 2;
		}
	}
	struct kpool *pool;
	if (kpool_create(threads, &pool)) {
		fprintf(stderr, "pool creation failed\n");
		return 1;
	}
	const int nt = kpool_size(pool);
	const enum kcpu_isa isa = kcpu_isa_best();
	printf("bench_matmul: %d threads, matmul path %s\n", nt, kcpu_isa_name(isa));

	/* memory */
	struct mem_probe mp = { .n = (size_t)1 << 25 }; /* 128 MiB per array */
	mp.a = aligned_alloc(64, mp.n * sizeof(float));
	mp.b = aligned_alloc(64, mp.n * sizeof(float));
	mp.c = aligned_alloc(64, mp.n * sizeof(float));
	if (!mp.a || !mp.b || !mp.c)
		return 1;
	kpool_run(pool, init_fn, &mp);
	double triad = 0, rd = 0;
	for (int r = 0; r < 5; r++) {
		double t0 = now_s();
		kpool_run(pool, triad_fn, &mp);
		double t = now_s() - t0;
		if (3.0 * 4 * mp.n / t > triad)
			triad = 3.0 * 4 * mp.n / t;
		t0 = now_s();
		kpool_run(pool, read_fn, &mp);
		t = now_s() - t0;
		if (4.0 * mp.n / t > rd)
			rd = 4.0 * mp.n / t;
	}
	free(mp.a);
	free(mp.b);
	free(mp.c);
	printf("memory: triad %.1f GB/s (STREAM counting, 3 x 128 MiB arrays), read-only sum %.1f GB/s\n",
	       triad / 1e9, rd / 1e9);

	/* compute peaks */
	double fma_peak = 0, dot_peak = 0;
	if (isa == KCPU_ISA_AVX512) {
		fma_peak = measure_peak(pool, 1);
		dot_peak = measure_peak(pool, 2);
	} else if (isa == KCPU_ISA_AVX2) {
		fma_peak = measure_peak(pool, 0);
	}
	printf("peaks (register-only loops on all threads): FMA %.1f GFLOP/s, int8 dot (vpdpbusd) %.1f GOP/s\n",
	       fma_peak / 1e9, dot_peak / 1e9);

	const enum dtype dts[] = { DT_F16, DT_Q8_0 };
	const int ms[] = { 1, 16, 512 };
	for (int di = 0; di < 2; di++) {
		double model_t[3] = { 0 };
		double model_bytes = 0;
		printf("\n%s\n%-20s %6s %10s %9s %9s %9s %10s\n", dtype_name(dts[di]), "shape", "m",
		       "time ms", "GB/s", "GFLOP/s", "vs peak", "tok/s x");
		for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
			const struct shape *s = &shapes[si];
			struct kmat w;
			if (make_weight(dts[di], s->rows, s->cols, &w)) {
				fprintf(stderr, "out of memory\n");
				return 1;
			}
			uint64_t wbytes;
			dtype_row_bytes(w.dtype, (uint64_t)s->cols, &wbytes);
			wbytes *= (uint64_t)s->rows;
			double count = s->per_layer ? (double)s->per_layer * N_LAYERS : 1.0;
			model_bytes += count * (double)wbytes;
			double t1 = 0;
			for (int mi = 0; mi < 3; mi++) {
				const int m = ms[mi];
				if (m == 512 && quick && s->rows > 8192)
					continue;
				float *x = malloc((size_t)m * s->cols * sizeof(float));
				float *y = malloc((size_t)m * s->rows * sizeof(float));
				if (!x || !y)
					return 1;
				for (size_t i = 0; i < (size_t)m * s->cols; i++)
					x[i] = frand();
				int reps = m == 512 ? (quick ? 1 : 3) : (quick ? 5 : 20);
				double t = time_matmul(pool, &w, x, m, y, reps);
				double flops = 2.0 * m * (double)s->rows * (double)s->cols;
				double peak = dts[di] == DT_Q8_0 ? dot_peak : fma_peak;
				if (m == 1)
					t1 = t;
				if (m < 512)
					model_t[mi] += count * t;
				printf("%-20s %6d %10.3f %9.1f %9.1f %8.1f%% %10s\n", s->name, m, t * 1e3,
				       (double)wbytes / t / 1e9, flops / t / 1e9,
				       m == 1 ? 100.0 * (double)wbytes / t / triad
					      : peak > 0 ? 100.0 * flops / t / peak : 0.0,
				       "");
				if (m == 16)
					printf("%-20s %6s %10s %9s %9s %9s %9.2fx\n", "", "", "", "", "", "",
					       16.0 * t1 / t);
				free(x);
				free(y);
			}
			free((void *)w.data);
		}
		printf("model (16 layers + lm_head, matmuls only), %s: %.1f MB of weights\n",
		       dtype_name(dts[di]), model_bytes / 1e6);
		printf("  m=1 : %.2f ms/token, %.1f tok/s, %.1f GB/s = %.0f%% of triad, %.0f%% of read bw\n",
		       model_t[0] * 1e3, 1.0 / model_t[0], model_bytes / model_t[0] / 1e9,
		       100.0 * model_bytes / model_t[0] / triad, 100.0 * model_bytes / model_t[0] / rd);
		printf("  m=16: %.2f ms/step, %.1f tok/s = %.2fx the tok/s of m=1\n", model_t[1] * 1e3,
		       16.0 / model_t[1], 16.0 * model_t[0] / model_t[1]);
	}
	printf("\n(m=1 'vs peak' column: %% of triad bandwidth; m=16/512: %% of the FMA peak (F16) or int8 dot peak (Q8_0))\n");
	kpool_destroy(pool);
	return 0;
}
