/* tests/bench/bench_cuda_gemv.c — the decode GEMV (kcuda_gemv.h) at the
 * Llama-3-8B shapes (qkv 6144x4096, o 4096x4096, gate_up 28672x4096, down
 * 4096x14336, lm_head 128256x4096), T in {1, 2, 4, 8, 16}, weights bf16,
 * i8, f8_e4m3 (per-row scales) and q8_0r (repacked Q8_0), X BF16:
 *   k_gemv (its own rows per CTA) and k_gemv_rows with 2, 4 and 8 rows
 *   per CTA (to tune k_gemv's choice: "best_rows");
 *   k_gemv_w8 / k_gemv_q8_0r (kcuda_quant.h) for the 8-bit weights;
 *   cuBLAS BF16 through k_gemm, the 16-bit baseline.
 * The D2D copy bandwidth is measured first (a 512 MiB cudaMemcpyAsync;
 * read + write bytes / time) and every GEMV's weight GB/s is also given as
 * a fraction of it. Every run: the L2 flushed (a 256 MiB memset), CUDA
 * events around the kernel, median of --reps (default 10). Output: lines
 * "gemv.<shape>.t<T>.<weights>.<impl>_us=" (and _gbs, _frac_d2d), then a
 * short table. Exit 77 without a GPU. Under 30 s on an H200 (mostly
 * uploads and cuBLAS start-up). Not a test: run it by hand.
 * Usage: bench_cuda_gemv [--reps N] [--small]
 * --small: every N / 256 and K / 16, 1 MiB flush and copy: a smoke run of
 * this program's own logic (under tests/emu, say); its timings mean nothing.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_gemm.h"
#include "kernels/cuda/kcuda_gemv.h"
#include "kernels/cuda/kcuda_quant.h"
#include "kernels/dtype.h"

#define MAX_REPS    50
#define FLUSH_BYTES ((size_t)256 << 20)
#define COPY_BYTES  ((size_t)512 << 20)
#define FILL_BYTES  ((size_t)16 << 20) /* host pattern, tiled over device buffers */
#define MAX_T       16

struct shape {
	const char *name;
	int n, k;
};
static const struct shape shapes[] = {
    {"qkv", 6144, 4096},   {"o", 4096, 4096},         {"gate_up", 28672, 4096},
    {"down", 4096, 14336}, {"lm_head", 128256, 4096},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))
static const int ts[] = {1, 2, 4, 8, 16};
#define N_TS ((int)(sizeof ts / sizeof ts[0]))

enum wkind { WK_BF16, WK_I8, WK_F8, WK_Q8R, WK__COUNT };
static const char *const wk_name[] = {"bf16", "i8", "f8_e4m3", "q8_0r"};
static const enum dtype wk_dt[] = {DT_BF16, DT_I8, DT_F8_E4M3, DT_Q8_0};

/* Implementations timed. */
enum impl { IM_GEMV, IM_R2, IM_R4, IM_R8, IM_W8, IM_CUBLAS, IM__COUNT };
static const char *const im_name[] = {"gemv", "gemv_r2", "gemv_r4", "gemv_r8", "w8", "cublas"};
static const int im_rows[] = {0, 2, 4, 8, 0, 0};

struct bench {
	int reps;
	void *stream;
	struct k_blas *blas;
	void *ev0[MAX_REPS], *ev1[MAX_REPS];
	void *d_flush;
	size_t flush_bytes, copy_bytes;
	int small; /* --small */
	uint8_t *fill;
	double d2d_gbs;
	/* results for the table: us [shape][weights][t][impl], 0 = not run */
	double us[N_SHAPES][WK__COUNT][N_TS][IM__COUNT];
};

/* Operands of one shape. */
struct operands {
	int n, k;
	void *w16, *w8, *q8d, *x, *scale;
	float *y;
};

static int check(int rc, const char *what)
{
	if (rc)
		fprintf(stderr, "bench_cuda_gemv: %s failed: %d (%s)\n", what, rc,
		        k_cuda_last_error());
	return rc;
}

static int run(struct bench *b, const struct operands *o, enum wkind wk, enum impl im, int t)
{
	const void *w = wk == WK_BF16 ? o->w16 : o->w8;
	const float *sc = (wk == WK_I8 || wk == WK_F8) ? (const float *)o->scale : NULL;
	const int n_sc = sc ? o->n : 0;
	switch (im) {
	case IM_CUBLAS:
		return k_gemm(b->blas, o->w16, DT_BF16, o->n, o->k, o->x, t, o->y, 0);
	case IM_W8:
		if (wk == WK_Q8R)
			return k_gemv_q8_0r(b->stream, o->w8, o->q8d, o->n, o->k, o->x, DT_BF16, t,
			                    o->y, 0);
		return k_gemv_w8(b->stream, o->w8, wk_dt[wk], sc, n_sc, o->n, o->k, o->x, DT_BF16,
		                 t, o->y, 0);
	default:
		return k_gemv_rows(b->stream, w, wk_dt[wk], sc, n_sc, o->q8d, o->n, o->k, o->x,
		                   DT_BF16, t, o->y, 0, im_rows[im]);
	}
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

/* Median microseconds of b->reps runs of what run() does (or a D2D copy of
 * b->copy_bytes when o is NULL), the L2 flushed before each. */
static int time_it(struct bench *b, const struct operands *o, enum wkind wk, enum impl im, int t,
                   void *copy_dst, void *copy_src, double *us_out)
{
	int rc = 0;
	for (int i = -1; !rc && i < b->reps; i++) { /* i = -1: warm-up, not timed */
		rc = k_cuda_memset_async(b->stream, b->d_flush, i & 0xff, b->flush_bytes);
		if (!rc && i >= 0)
			rc = k_cuda_event_record(b->ev0[i], b->stream);
		if (!rc)
			rc = o ? run(b, o, wk, im, t)
			       : k_cuda_memcpy_d2d_async(b->stream, copy_dst, copy_src,
			                                 b->copy_bytes);
		if (!rc && i >= 0)
			rc = k_cuda_event_record(b->ev1[i], b->stream);
	}
	float ms[MAX_REPS];
	for (int i = 0; !rc && i < b->reps; i++)
		rc = k_cuda_event_elapsed_ms(b->ev0[i], b->ev1[i], &ms[i]);
	if (rc)
		return rc;
	qsort(ms, (size_t)b->reps, sizeof ms[0], cmp_float);
	*us_out = ms[b->reps / 2] * 1e3;
	return 0;
}

/* The pattern: random bytes, finite as FP8 E4M3 (no 0x7f/0xff), bit 6 of
 * every odd byte clear so BF16 / F16 values read from it are finite and
 * small. Values do not change the time; NaN would only look odd. */
static void make_fill(uint8_t *p, size_t n)
{
	uint64_t s = 0x9E3779B97F4A7C15ull;
	for (size_t i = 0; i < n; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		uint8_t v = (uint8_t)(s >> 24);
		if (i & 1)
			v &= 0xbf;
		if ((v & 0x7f) == 0x7f)
			v = 0x3e;
		p[i] = v;
	}
}

static int alloc_filled(struct bench *b, void **d, size_t bytes)
{
	int rc = check(k_cuda_malloc(d, bytes), "k_cuda_malloc");
	for (size_t off = 0; !rc && off < bytes; off += FILL_BYTES) {
		const size_t len = bytes - off < FILL_BYTES ? bytes - off : FILL_BYTES;
		rc = check(k_cuda_memcpy_h2d((char *)*d + off, b->fill, len), "upload");
	}
	return rc;
}

static void free_operands(struct operands *o)
{
	k_cuda_free(o->w16);
	k_cuda_free(o->w8);
	k_cuda_free(o->q8d);
	k_cuda_free(o->x);
	k_cuda_free(o->scale);
	k_cuda_free(o->y);
	memset(o, 0, sizeof *o);
}

static double weight_bytes(enum wkind wk, int n, int k)
{
	if (wk == WK_BF16)
		return 2.0 * n * k;
	return (double)n * k + (wk == WK_Q8R ? (double)n * (k / 32) * 2 : 0.0);
}

static int shape_n(const struct bench *b, int s)
{
	return b->small ? shapes[s].n / 256 : shapes[s].n;
}

static int shape_k(const struct bench *b, int s)
{
	return b->small ? shapes[s].k / 16 : shapes[s].k;
}

static int bench_shape(struct bench *b, int s)
{
	struct operands o;
	memset(&o, 0, sizeof o);
	o.n = shape_n(b, s);
	o.k = shape_k(b, s);
	const size_t nk = (size_t)o.n * o.k;
	int rc = alloc_filled(b, &o.w16, nk * 2);
	if (!rc)
		rc = alloc_filled(b, &o.w8, nk);
	if (!rc)
		rc = alloc_filled(b, &o.q8d, nk / 32 * 2);
	if (!rc)
		rc = alloc_filled(b, &o.x, (size_t)MAX_T * o.k * 2);
	if (!rc)
		rc = alloc_filled(b, &o.scale, (size_t)o.n * sizeof(float));
	if (!rc)
		rc = check(k_cuda_malloc((void **)&o.y, (size_t)MAX_T * o.n * sizeof(float)),
		           "k_cuda_malloc");
	for (int ti = 0; !rc && ti < N_TS; ti++) {
		const int t = ts[ti];
		double cublas_us = 0;
		rc = check(time_it(b, &o, WK_BF16, IM_CUBLAS, t, NULL, NULL, &cublas_us), "cublas");
		if (rc)
			break;
		printf("gemv.%s.t%d.bf16.cublas_us=%.2f\n", shapes[s].name, t, cublas_us);
		for (int wk = 0; wk < WK__COUNT; wk++) {
			b->us[s][wk][ti][IM_CUBLAS] = cublas_us;
			double best = 0;
			int best_rows = 0;
			const double bytes = weight_bytes((enum wkind)wk, o.n, o.k);
			for (int im = 0; im < IM_CUBLAS; im++) {
				if (im == IM_W8 && wk == WK_BF16)
					continue;
				double us = 0;
				const int r2 = time_it(b, &o, (enum wkind)wk, (enum impl)im, t,
				                       NULL, NULL, &us);
				const char *key = im_name[im];
				if (r2) { /* report it, go on with the rest */
					printf("gemv.%s.t%d.%s.%s_error=%d (%s)\n", shapes[s].name,
					       t, wk_name[wk], key, r2, k_cuda_last_error());
					continue;
				}
				b->us[s][wk][ti][im] = us;
				const double gbs = bytes / us / 1e3;
				printf("gemv.%s.t%d.%s.%s_us=%.2f\n", shapes[s].name, t,
				       wk_name[wk], key, us);
				printf("gemv.%s.t%d.%s.%s_gbs=%.0f\n", shapes[s].name, t,
				       wk_name[wk], key, gbs);
				printf("gemv.%s.t%d.%s.%s_frac_d2d=%.3f\n", shapes[s].name, t,
				       wk_name[wk], key, gbs / b->d2d_gbs);
				if (im_rows[im] && (best == 0 || us < best)) {
					best = us;
					best_rows = im_rows[im];
				}
			}
			if (best_rows)
				printf("gemv.%s.t%d.%s.best_rows=%d\n", shapes[s].name, t,
				       wk_name[wk], best_rows);
			if (b->us[s][wk][ti][IM_GEMV] > 0)
				printf("gemv.%s.t%d.%s.gemv_speedup_vs_cublas_bf16=%.3f\n",
				       shapes[s].name, t, wk_name[wk],
				       cublas_us / b->us[s][wk][ti][IM_GEMV]);
		}
	}
	free_operands(&o);
	return rc;
}

static int measure_d2d(struct bench *b)
{
	void *src = NULL, *dst = NULL;
	int rc = check(k_cuda_malloc(&src, b->copy_bytes), "k_cuda_malloc");
	if (!rc)
		rc = check(k_cuda_malloc(&dst, b->copy_bytes), "k_cuda_malloc");
	if (!rc)
		rc = check(k_cuda_memset_async(b->stream, src, 1, b->copy_bytes), "memset");
	double us = 0;
	if (!rc)
		rc = check(time_it(b, NULL, WK_BF16, IM_GEMV, 0, dst, src, &us), "d2d copy");
	if (!rc) {
		b->d2d_gbs = 2.0 * (double)b->copy_bytes / us / 1e3; /* read + write */
		printf("gemv.d2d_gbs=%.0f\n", b->d2d_gbs);
	}
	k_cuda_free(src);
	k_cuda_free(dst);
	return rc;
}

/* The short table: per shape and weights, k_gemv at T = 1 (us, % of D2D)
 * and cuBLAS BF16 time / k_gemv time at every T (> 1: k_gemv is faster). */
static void print_table(const struct bench *b)
{
	printf("\nk_gemv, X BF16, L2 flushed, median of %d; D2D copy %.0f GB/s\n", b->reps,
	       b->d2d_gbs);
	printf("%-8s %-8s %8s %6s %6s | cuBLAS-BF16 / k_gemv at T =", "shape", "weights", "T1 us",
	       "%D2D", "w8/gv");
	for (int ti = 0; ti < N_TS; ti++)
		printf(" %5d", ts[ti]);
	printf("\n");
	for (int s = 0; s < N_SHAPES; s++)
		for (int wk = 0; wk < WK__COUNT; wk++) {
			const double us = b->us[s][wk][0][IM_GEMV];
			const double w8 = b->us[s][wk][0][IM_W8];
			const double gbs =
			    us > 0 ? weight_bytes((enum wkind)wk, shape_n(b, s), shape_k(b, s)) /
			                 us / 1e3
			           : 0;
			printf("%-8s %-8s %8.2f %5.0f%% %6.2f | %27s", shapes[s].name, wk_name[wk],
			       us, 100.0 * gbs / b->d2d_gbs, us > 0 && w8 > 0 ? w8 / us : 0.0, "");
			for (int ti = 0; ti < N_TS; ti++) {
				const double g = b->us[s][wk][ti][IM_GEMV];
				const double c = b->us[s][wk][ti][IM_CUBLAS];
				printf(" %5.2f", g > 0 ? c / g : 0.0);
			}
			printf("\n");
		}
}

int main(int argc, char **argv)
{
	static struct bench b; /* large (the results table): not on the stack */
	b.reps = 10;
	b.flush_bytes = FLUSH_BYTES;
	b.copy_bytes = COPY_BYTES;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
			b.reps = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--small")) {
			b.small = 1;
		} else {
			fprintf(stderr, "usage: bench_cuda_gemv [--reps N (1..%d)] [--small]\n",
			        MAX_REPS);
			return 2;
		}
	}
	if (b.small)
		b.flush_bytes = b.copy_bytes = (size_t)1 << 20;
	if (b.reps < 1 || b.reps > MAX_REPS) {
		fprintf(stderr, "bench_cuda_gemv: --reps must be 1..%d\n", MAX_REPS);
		return 2;
	}
	int n_dev = 0;
	k_cuda_device_count(&n_dev);
	if (n_dev <= 0) {
		printf("bench_cuda_gemv: SKIP: no CUDA device visible\n");
		return 77;
	}
	struct k_cuda_props p;
	int rc = check(k_cuda_set_device(0), "set device");
	if (!rc)
		rc = check(k_cuda_props(0, &p), "props");
	if (rc)
		return 1;
	printf("device: %s (cc %d.%d, %d SMs)\n", p.name, p.cc_major, p.cc_minor, p.n_sms);
	b.fill = malloc(FILL_BYTES);
	if (!b.fill)
		return 1;
	make_fill(b.fill, FILL_BYTES);
	rc = check(k_cuda_stream_create(&b.stream), "stream");
	if (!rc)
		rc = check(k_blas_create(b.stream, &b.blas), "k_blas_create");
	if (!rc)
		rc = check(k_cuda_malloc(&b.d_flush, b.flush_bytes), "flush buffer");
	for (int i = 0; !rc && i < b.reps; i++) {
		rc = k_cuda_event_create(&b.ev0[i]);
		if (!rc)
			rc = k_cuda_event_create(&b.ev1[i]);
	}
	if (!rc)
		rc = measure_d2d(&b);
	for (int s = 0; !rc && s < N_SHAPES; s++)
		rc = bench_shape(&b, s);
	if (!rc)
		print_table(&b);
	for (int i = 0; i < b.reps; i++) {
		k_cuda_event_destroy(b.ev0[i]);
		k_cuda_event_destroy(b.ev1[i]);
	}
	k_cuda_free(b.d_flush);
	k_blas_destroy(b.blas);
	k_cuda_stream_destroy(b.stream);
	free(b.fill);
	return rc ? 1 : 0;
}
