/* tests/bench/bench_matmul.c — kernel benchmark for kcpu_matmul (not a test).
 *
 * Measures, in one run and on the same threads:
 *   - the machine's limits (kernels/cpu/probe.h, wall clock): a STREAM-like
 *     triad and a read-only sum (what a GEMV does) over 256 MiB arrays, the
 *     FMA peak and the int8 dot peak (vpdpbusd: 64 MACs per instruction,
 *     counted as 128 ops);
 *   - kcpu_matmul on the shapes of a 2048-hidden, 8-KV-head, 8192-FFN,
 *     32000-vocab model, F16 and Q8_0, each as the file lays it out and
 *     repacked (kcpu_pack, as the CPU backend does on AVX-512; for Q8_0 not
 *     where AMX tiles read the blocks in place), at m = 1 (GB/s of weight
 *     bytes read,
 *     vs triad and read bandwidth), m = 16 (speed-up in tokens/s over m = 1)
 *     and m = 512 (GFLOP/s vs the FMA peak for F16, vs the int8 dot peak for
 *     Q8_0);
 *   - a per-token decode estimate for a 16-layer model from the per-shape
 *     times (matmuls only).
 * Usage: bench_matmul [-t threads] [-q (quick: fewer reps, no m=512 LM head)]
 *                     [-c (time the matmuls by CPU time / threads: see now_s)]
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
#include "kernels/cpu/probe.h"
#include "kernels/cpu/quant.h"

/* -c: time in process CPU seconds divided by the thread count instead of
 * wall seconds. On a shared, overloaded machine wall time mostly measures the
 * other processes; CPU time approximates what the threads would take alone
 * (the pool's workers spin between runs, so idle waiting is counted too). */
static int use_cpu_time;
static int n_threads_for_time = 1;

static double now_s(void)
{
	struct timespec ts;
	if (use_cpu_time) {
		clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
		return ((double)ts.tv_sec + (double)ts.tv_nsec * 1e-9) / n_threads_for_time;
	}
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void print_load(const char *when)
{
	FILE *f = fopen("/proc/loadavg", "r");
	char buf[128] = "?";
	if (f) {
		if (!fgets(buf, sizeof buf, f))
			strcpy(buf, "?\n");
		fclose(f);
	}
	printf("load average %s: %s", when, buf);
}

/* ---- matmul ---------------------------------------------------------------------- */

struct shape {
	const char *name;
	int64_t rows, cols;
	int per_layer; /* how many of these a layer has (0: once per model) */
};

static const struct shape shapes[] = {
	{ "q/o 2048x2048", 2048, 2048, 2 },
	{ "k/v 512x2048", 512, 2048, 2 },
	{ "gate/up 8192x2048", 8192, 2048, 2 },
	{ "down 2048x8192", 2048, 8192, 1 },
	{ "lm_head 32000x2048", 32000, 2048, 0 },
};
#define N_SHAPES ((int)(sizeof shapes / sizeof *shapes))
#define N_LAYERS 16

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}
static float frand(void)
{
	return (float)((next_rand() >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static int copies_of(const struct shape *s)
{
	return s->per_layer ? s->per_layer * N_LAYERS : 1;
}

/* Random weights of dtype t; every copy distinct memory (the first one
 * random, the others copies of it: the data does not matter, the bytes
 * streamed do). Returns bytes per copy, 0 when out of memory. */
static uint64_t make_weights(enum dtype t, const struct shape *s, int n, struct kmat *w)
{
	uint64_t row_bytes;
	dtype_row_bytes(t, (uint64_t)s->cols, &row_bytes);
	const size_t bytes = (size_t)(row_bytes * (uint64_t)s->rows);
	for (int c = 0; c < n; c++) {
		void *p = malloc(bytes);
		if (!p)
			return 0;
		if (c > 0) {
			memcpy(p, w[0].data, bytes);
		} else if (t == DT_F16) {
			uint16_t *h = p;
			for (size_t i = 0; i < bytes / 2; i++)
				h[i] = f32_to_f16(frand() * 0.05f);
		} else {
			struct q8_0_block *b = p;
			const uint16_t d = f32_to_f16(0.05f / 127.0f);
			for (size_t i = 0; i < bytes / sizeof *b; i++) {
				b[i].d = d;
				for (int k = 0; k < Q8_0_BLOCK; k++)
					b[i].qs[k] = (int8_t)((int)(next_rand() % 255) - 127);
			}
		}
		w[c] = (struct kmat){ t, s->rows, s->cols, p, NULL, 0 };
	}
	return bytes;
}

/* One decode/prefill step over the whole model at m rows: every layer's
 * matmuls in order, then the LM head, so weights come from memory, not from
 * cache. Adds each shape's time to t_shape[]; returns the total. */
static double model_pass(struct kpool *pool, struct kmat *const *w, const float *x, int m,
			 float *y, double *t_shape)
{
	double total = 0;
	for (int l = 0; l < N_LAYERS; l++)
		for (int s = 0; s < N_SHAPES; s++)
			for (int u = 0; u < shapes[s].per_layer; u++) {
				double t0 = now_s();
				kcpu_matmul(pool, &w[s][l * shapes[s].per_layer + u], x, m, y);
				double t = now_s() - t0;
				t_shape[s] += t;
				total += t;
			}
	for (int s = 0; s < N_SHAPES; s++)
		if (!shapes[s].per_layer) {
			double t0 = now_s();
			kcpu_matmul(pool, &w[s][0], x, m, y);
			double t = now_s() - t0;
			t_shape[s] += t;
			total += t;
		}
	return total;
}

int main(int argc, char **argv)
{
	int threads = 0, quick = 0, opt;
	while ((opt = getopt(argc, argv, "t:qc")) != -1) {
		if (opt == 't')
			threads = atoi(optarg);
		else if (opt == 'q')
			quick = 1;
		else if (opt == 'c')
			use_cpu_time = 1;
		else {
			fprintf(stderr, "usage: %s [-t threads] [-q] [-c]\n", argv[0]);
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
	n_threads_for_time = nt;
	printf("bench_matmul: %d threads, matmul path %s%s, timing by %s\n", nt, kcpu_isa_name(isa),
	       quick ? ", quick" : "", use_cpu_time ? "CPU time / threads (-c)" : "wall clock");
	print_load("at start");

	/* memory: arrays well beyond the last-level cache; compute peaks */
	const struct kcpu_mem_bw mbw = kcpu_probe_memory(pool, (size_t)256 << 20);
	const double triad = mbw.triad_gbs * 1e9, rd = mbw.read_gbs * 1e9;
	if (triad <= 0)
		return 1;
	printf("memory: triad %.1f GB/s (STREAM counting, 3 x 256 MiB arrays), read-only sum %.1f GB/s\n",
	       triad / 1e9, rd / 1e9);
	const double fma_peak = kcpu_probe_fma_gflops(pool) * 1e9;
	const double dot_peak = kcpu_probe_int8_gops(pool) * 1e9;
	printf("peaks (register-only loops, all threads): FMA %.1f GFLOP/s, int8 dot (vpdpbusd, 1 MAC = 2 ops) %.1f GOP/s\n",
	       fma_peak / 1e9, dot_peak / 1e9);

	/* each twice: as the file lays it out, then with the kcpu_pack copy
	 * the CPU backend makes at load where kcpu_pack_wanted says so */
	const enum dtype dts[] = { DT_F16, DT_F16, DT_Q8_0, DT_Q8_0 };
	const int pack[] = { 0, 1, 0, 1 };
	const int max_m = 512;
	float *x = malloc((size_t)max_m * 8192 * sizeof(float));
	float *y = malloc((size_t)max_m * 32000 * sizeof(float));
	if (!x || !y)
		return 1;
	for (size_t i = 0; i < (size_t)max_m * 8192; i++)
		x[i] = frand();
	for (int di = 0; di < 4; di++) {
		const enum dtype t = dts[di];
		if (pack[di] && isa != KCPU_ISA_AVX512)
			continue;
		struct kmat *w[N_SHAPES];
		uint64_t bytes[N_SHAPES];
		double model_bytes = 0;
		for (int s = 0; s < N_SHAPES; s++) {
			w[s] = calloc((size_t)copies_of(&shapes[s]), sizeof **w);
			bytes[s] = w[s] ? make_weights(t, &shapes[s], copies_of(&shapes[s]), w[s]) : 0;
			if (!bytes[s]) {
				fprintf(stderr, "out of memory\n");
				return 1;
			}
			model_bytes += (double)bytes[s] * copies_of(&shapes[s]);
			for (int c = 0; pack[di] && c < copies_of(&shapes[s]); c++) {
				size_t pb;
				void *pp = NULL;
				if (kcpu_pack_bytes(&w[s][c], &pb) ||
				    !(pp = aligned_alloc(64, (pb + 63) / 64 * 64)) ||
				    kcpu_pack(pool, &w[s][c], pp)) {
					fprintf(stderr, "packing failed\n");
					return 1;
				}
				w[s][c].packed = pp;
			}
		}
		/* decode: whole-model passes, best of a few */
		double best[2] = { 1e30, 1e30 }, ts[2][N_SHAPES];
		const int dm[2] = { 1, 16 };
		for (int k = 0; k < 2; k++)
			for (int r = 0; r < (quick ? 2 : 4); r++) {
				double tsh[N_SHAPES] = { 0 };
				double tt = model_pass(pool, w, x, dm[k], y, tsh);
				if (r > 0 && tt < best[k]) { /* pass 0 warms up */
					best[k] = tt;
					memcpy(ts[k], tsh, sizeof tsh);
				}
			}
		printf("\n%s%s: model of 16 layers + lm_head, %.0f MB of weights, every matmul reading from memory\n",
		       dtype_name(t), pack[di] ? " (kcpu_pack)" : "", model_bytes / 1e6);
		printf("%-20s %12s %9s %8s %12s %14s\n", "shape", "m=1 ms/mat", "GB/s", "%triad",
		       "m=16 ms/mat", "m=16 tok/s x");
		for (int s = 0; s < N_SHAPES; s++) {
			double n = copies_of(&shapes[s]);
			double t1 = ts[0][s] / n, t16 = ts[1][s] / n;
			printf("%-20s %12.3f %9.1f %7.0f%% %12.3f %13.2fx\n", shapes[s].name, t1 * 1e3,
			       (double)bytes[s] / t1 / 1e9, 100.0 * (double)bytes[s] / t1 / triad,
			       t16 * 1e3, 16.0 * t1 / t16);
		}
		printf("  decode m=1 : %.2f ms/token, %.1f tok/s, %.1f GB/s = %.0f%% of triad, %.0f%% of read-only\n",
		       best[0] * 1e3, 1.0 / best[0], model_bytes / best[0] / 1e9,
		       100.0 * model_bytes / best[0] / triad, 100.0 * model_bytes / best[0] / rd);
		printf("  decode m=16: %.2f ms/step, %.1f tok/s = %.2fx the tok/s of m=1\n", best[1] * 1e3,
		       16.0 / best[1], 16.0 * best[0] / best[1]);

		/* prefill: m = 512 per shape (compute-bound; cache state matters little) */
		const double peak = t == DT_Q8_0 ? dot_peak : fma_peak;
		printf("  prefill m=512 (%s peak %.0f G/s):\n", t == DT_Q8_0 ? "int8 dot" : "FMA",
		       peak / 1e9);
		for (int s = 0; s < N_SHAPES; s++) {
			if (quick && shapes[s].rows > 8192)
				continue;
			double bt = 1e30;
			kcpu_matmul(pool, &w[s][0], x, max_m, y);
			for (int r = 0; r < (quick ? 1 : 2); r++) {
				double t0 = now_s();
				kcpu_matmul(pool, &w[s][0], x, max_m, y);
				double tt = now_s() - t0;
				if (tt < bt)
					bt = tt;
			}
			double flops = 2.0 * max_m * (double)shapes[s].rows * (double)shapes[s].cols;
			printf("    %-20s %9.2f ms %8.1f GFLOP/s %6.1f%% of peak\n", shapes[s].name,
			       bt * 1e3, flops / bt / 1e9, peak > 0 ? 100.0 * flops / bt / peak : 0.0);
		}
		for (int s = 0; s < N_SHAPES; s++) {
			for (int c = 0; c < copies_of(&shapes[s]); c++) {
				free((void *)w[s][c].data);
				free((void *)w[s][c].packed);
			}
			free(w[s]);
		}
	}
	free(x);
	free(y);
	print_load("at end");
	kpool_destroy(pool);
	return 0;
}
