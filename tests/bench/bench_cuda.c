/* tests/bench/bench_cuda.c — the GPU's machine limits and what k_gemm reaches
 * against them (issue #9). Not a test: run it by hand on a GPU machine.
 *
 * On device 0:
 *   - name, compute capability, SMs, memory;
 *   - device memory bandwidth, best of several runs over arrays of 1 GiB
 *     (--quick: 256 MiB): a D2D cudaMemcpy (counted as read + write) and the
 *     axpy smoke kernel y += a x (read x, read y, write y); the better of the
 *     two is "the measured bandwidth", also shown as a fraction of --hbm-gbs;
 *   - dense BF16 GEMM through k_gemm (F32 out) at M = N = K = 8192 and at the
 *     Llama-3-8B prefill shapes (T = 2048; N, K = 6144,4096 / 4096,4096 /
 *     28672,4096 / 4096,14336), in TFLOP/s and as a fraction of --bf16-tflops;
 *   - the same weights GEMV-shaped (T = 1 and T = 16): weight bytes / time,
 *     as a fraction of the measured bandwidth (L2 flushed before every run).
 * GEMM times: CUDA events around each run, all runs queued back to back
 * after a warm-up, median of --reps (>= 10). Output: a table, then one
 * key=value line per figure for scripts. Exit 77 without a GPU. Well under
 * 60 s on an H200 (about 5 s of GPU work; most of the rest is cuBLAS start-up).
 * Usage: bench_cuda [--quick] [--hbm-gbs 4800] [--bf16-tflops 989] [--reps 20]
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_gemm.h"
#include "kernels/dtype.h"

#define MAX_REPS 64
#define MAX_KV 96
#define FLUSH_BYTES ((size_t)256 << 20) /* > 5x the L2 of an H100/H200 (50 MB) */

struct opts {
	int quick;
	int reps;
	double hbm_gbs;	    /* nominal HBM bandwidth, GB/s */
	double bf16_tflops; /* nominal dense BF16 peak, TFLOP/s */
};

struct kv {
	char key[64];
	char val[160];
};

struct bench {
	struct opts o;
	void *stream;
	struct k_blas *blas;
	void *ev_start[MAX_REPS], *ev_end[MAX_REPS];
	void *d_flush;	/* FLUSH_BYTES, written before each GEMM run */
	uint16_t *host_bf16; /* random BF16 in [-1, 1], HOST_ELEMS values */
	struct kv kv[MAX_KV];
	int n_kv;
	double bw_gbs; /* measured bandwidth, GB/s */
};

#define HOST_ELEMS ((size_t)8 << 20)

static int fail(const char *what, int rc)
{
	fprintf(stderr, "bench_cuda: %s failed: %d (%s) %s\n", what, rc, err_str(rc),
		k_cuda_last_error());
	return rc ? rc : ERR_INTERNAL;
}

#define TRY(call, what)                        \
	do {                                   \
		int rc_ = (call);              \
		if (rc_)                       \
			return fail(what, rc_); \
	} while (0)

static void put_kv(struct bench *b, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void put_kv(struct bench *b, const char *key, const char *fmt, ...)
{
	if (b->n_kv >= MAX_KV)
		return;
	struct kv *e = &b->kv[b->n_kv++];
	snprintf(e->key, sizeof e->key, "%s", key);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->val, sizeof e->val, fmt, ap);
	va_end(ap);
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

static double median_ms(float *ms, int n)
{
	qsort(ms, (size_t)n, sizeof *ms, cmp_float);
	return n % 2 ? ms[n / 2] : 0.5 * ((double)ms[n / 2 - 1] + ms[n / 2]);
}

static double best_ms(const float *ms, int n)
{
	double best = ms[0];
	for (int i = 1; i < n; i++)
		if (ms[i] < best)
			best = ms[i];
	return best;
}

/* ---- timing ------------------------------------------------------------- */

/* One operation to time, queued on b->stream. */
struct op {
	enum { OP_D2D, OP_AXPY, OP_GEMM } kind;
	void *a, *b; /* D2D: dst, src; AXPY: y, x; GEMM: w, x */
	size_t bytes;
	float *y;
	int t, n, k;
};

static int run_op(struct bench *b, const struct op *op)
{
	switch (op->kind) {
	case OP_D2D:
		return k_cuda_memcpy_d2d_async(b->stream, op->a, op->b, op->bytes);
	case OP_AXPY:
		return k_axpy_f32(b->stream, op->bytes / sizeof(float), 1.0f, (const float *)op->b,
				  (float *)op->a);
	case OP_GEMM:
		return k_gemm(b->blas, op->a, DT_BF16, op->n, op->k, op->b, op->t, op->y, 0);
	}
	return ERR_INTERNAL;
}

/* Two warm-up runs, then reps runs queued back to back, each between two
 * events (and after an L2 flush when flush is set); ms[i] per run. */
static int time_op(struct bench *b, const struct op *op, int reps, int flush, float *ms)
{
	for (int i = 0; i < 2; i++)
		TRY(run_op(b, op), "warm-up");
	TRY(k_cuda_stream_sync(b->stream), "warm-up sync");
	for (int i = 0; i < reps; i++) {
		if (flush)
			TRY(k_cuda_memset_async(b->stream, b->d_flush, i & 0xFF, FLUSH_BYTES),
			    "L2 flush");
		TRY(k_cuda_event_record(b->ev_start[i], b->stream), "event record");
		TRY(run_op(b, op), "timed run");
		TRY(k_cuda_event_record(b->ev_end[i], b->stream), "event record");
	}
	for (int i = 0; i < reps; i++)
		TRY(k_cuda_event_elapsed_ms(b->ev_start[i], b->ev_end[i], &ms[i]), "event time");
	return 0;
}

/* ---- device, bandwidth ------------------------------------------------------ */

static int bench_device(struct bench *b)
{
	struct k_cuda_props p;
	TRY(k_cuda_props(0, &p), "k_cuda_props");
	double gib = (double)p.total_mem / (double)(1u << 30);
	printf("device 0: %s, compute capability %d.%d, %d SMs, %.1f GiB\n", p.name, p.cc_major,
	       p.cc_minor, p.n_sms, gib);
	put_kv(b, "device_name", "%s", p.name);
	put_kv(b, "device_cc", "%d.%d", p.cc_major, p.cc_minor);
	put_kv(b, "device_sms", "%d", p.n_sms);
	put_kv(b, "device_mem_gib", "%.1f", gib);
	return 0;
}

static int bench_bandwidth(struct bench *b)
{
	size_t bytes = b->o.quick ? (size_t)256 << 20 : (size_t)1 << 30;
	int reps = b->o.reps;
	void *d_a = NULL, *d_b = NULL;
	float ms[MAX_REPS];
	TRY(k_cuda_malloc(&d_a, bytes), "cudaMalloc (bandwidth)");
	int rc = k_cuda_malloc(&d_b, bytes);
	if (rc) {
		k_cuda_free(d_a);
		return fail("cudaMalloc (bandwidth)", rc);
	}
	/* Zeros: axpy on them stays finite; touching them also maps the pages. */
	rc = k_cuda_memset_async(b->stream, d_a, 0, bytes);
	if (!rc)
		rc = k_cuda_memset_async(b->stream, d_b, 0, bytes);
	struct op copy = {.kind = OP_D2D, .a = d_a, .b = d_b, .bytes = bytes};
	struct op axpy = {.kind = OP_AXPY, .a = d_a, .b = d_b, .bytes = bytes};
	double d2d = 0, ax = 0;
	if (!rc)
		rc = time_op(b, &copy, reps, 0, ms);
	if (!rc) {
		d2d = 2.0 * (double)bytes / (best_ms(ms, reps) * 1e-3) / 1e9;
		rc = time_op(b, &axpy, reps, 0, ms);
	}
	if (!rc)
		ax = 3.0 * (double)bytes / (best_ms(ms, reps) * 1e-3) / 1e9;
	k_cuda_free(d_a);
	k_cuda_free(d_b);
	if (rc)
		return rc; /* time_op has printed why */

	b->bw_gbs = d2d > ax ? d2d : ax;
	double nom = b->o.hbm_gbs;
	printf("\nmemory bandwidth (best of %d, %zu MiB arrays; nominal %.0f GB/s)\n", reps,
	       bytes >> 20, nom);
	printf("  %-26s %9.1f GB/s  %5.3f of nominal\n", "D2D memcpy (read+write)", d2d,
	       d2d / nom);
	printf("  %-26s %9.1f GB/s  %5.3f of nominal\n", "axpy y += a*x (3 arrays)", ax, ax / nom);
	printf("  %-26s %9.1f GB/s  %5.3f of nominal\n", "measured (best)", b->bw_gbs,
	       b->bw_gbs / nom);
	put_kv(b, "hbm_nominal_gbs", "%.1f", nom);
	put_kv(b, "bw_d2d_gbs", "%.1f", d2d);
	put_kv(b, "bw_axpy_gbs", "%.1f", ax);
	put_kv(b, "bw_gbs", "%.1f", b->bw_gbs);
	put_kv(b, "bw_frac_nominal", "%.3f", b->bw_gbs / nom);
	return 0;
}

/* ---- GEMM and GEMV through k_gemm ------------------------------------------- */

/* Fill n BF16 values of d from the random host block (repeated). */
static int fill_bf16(struct bench *b, void *d, size_t n)
{
	for (size_t off = 0; off < n; off += HOST_ELEMS) {
		size_t c = n - off < HOST_ELEMS ? n - off : HOST_ELEMS;
		TRY(k_cuda_memcpy_h2d((uint16_t *)d + off, b->host_bf16, c * 2), "upload");
	}
	return 0;
}

/* Median ms of Y[t, n] = X[t, k] · W[n, k]^T in BF16. */
static int time_gemm(struct bench *b, int t, int n, int k, double *ms_out)
{
	void *d_w = NULL, *d_x = NULL;
	float *d_y = NULL;
	float ms[MAX_REPS];
	int rc = k_cuda_malloc(&d_w, (size_t)n * k * 2);
	if (!rc)
		rc = k_cuda_malloc(&d_x, (size_t)t * k * 2);
	if (!rc)
		rc = k_cuda_malloc((void **)&d_y, (size_t)t * n * sizeof(float));
	if (rc)
		fail("cudaMalloc (gemm)", rc);
	if (!rc)
		rc = fill_bf16(b, d_w, (size_t)n * k);
	if (!rc)
		rc = fill_bf16(b, d_x, (size_t)t * k);
	/* Uploads ran on the legacy stream; ours does not wait for it. */
	if (!rc)
		rc = k_cuda_sync();
	struct op op = {.kind = OP_GEMM, .a = d_w, .b = d_x, .y = d_y, .t = t, .n = n, .k = k};
	if (!rc)
		rc = time_op(b, &op, b->o.reps, 1, ms);
	if (!rc)
		*ms_out = median_ms(ms, b->o.reps);
	k_cuda_free(d_w);
	k_cuda_free(d_x);
	k_cuda_free(d_y);
	return rc;
}

struct wshape {
	int n, k;
	const char *name;
};

/* Llama-3-8B projections: fused QKV, attention output, fused gate+up, down. */
static const struct wshape llama_shapes[] = {
	{6144, 4096, "qkv"},
	{4096, 4096, "o"},
	{28672, 4096, "gate_up"},
	{4096, 14336, "down"},
};
#define N_LLAMA (int)(sizeof llama_shapes / sizeof llama_shapes[0])

static int gemm_row(struct bench *b, const char *label, int t, int n, int k)
{
	double ms = 0;
	TRY(time_gemm(b, t, n, k, &ms), "gemm");
	double tflops = 2.0 * t * n * (double)k / (ms * 1e-3) / 1e12;
	double frac = tflops / b->o.bf16_tflops;
	printf("  %-10s %6d %6d %6d %10.3f %10.1f %8.3f\n", label, t, n, k, ms, tflops, frac);
	char key[64];
	snprintf(key, sizeof key, "gemm_bf16_t%d_n%d_k%d_tflops", t, n, k);
	put_kv(b, key, "%.1f", tflops);
	snprintf(key, sizeof key, "gemm_bf16_t%d_n%d_k%d_frac", t, n, k);
	put_kv(b, key, "%.3f", frac);
	return 0;
}

static int bench_gemm(struct bench *b)
{
	int sq = b->o.quick ? 4096 : 8192;
	int tp = b->o.quick ? 512 : 2048;
	printf("\ndense BF16 GEMM via k_gemm (F32 out; median of %d; peak %.0f TFLOP/s)\n",
	       b->o.reps, b->o.bf16_tflops);
	printf("  %-10s %6s %6s %6s %10s %10s %8s\n", "shape", "T", "N", "K", "ms", "TFLOP/s",
	       "of peak");
	TRY(gemm_row(b, "square", sq, sq, sq), "square gemm");
	for (int i = 0; i < N_LLAMA; i++)
		TRY(gemm_row(b, llama_shapes[i].name, tp, llama_shapes[i].n, llama_shapes[i].k),
		    "prefill gemm");
	put_kv(b, "bf16_nominal_tflops", "%.1f", b->o.bf16_tflops);
	return 0;
}

static int bench_gemv(struct bench *b)
{
	static const int ts[] = {1, 16};
	printf("\nGEMV-shaped BF16 via k_gemm (weight bytes / time; median of %d; L2 flushed;"
	       " measured bandwidth %.1f GB/s)\n",
	       b->o.reps, b->bw_gbs);
	printf("  %-10s %6s %6s %6s %10s %10s %8s\n", "shape", "T", "N", "K", "us", "GB/s",
	       "of bw");
	for (int j = 0; j < 2; j++) {
		for (int i = 0; i < N_LLAMA; i++) {
			const struct wshape *s = &llama_shapes[i];
			double ms = 0;
			TRY(time_gemm(b, ts[j], s->n, s->k, &ms), "gemv");
			double gbs = 2.0 * s->n * (double)s->k / (ms * 1e-3) / 1e9;
			double frac = b->bw_gbs > 0 ? gbs / b->bw_gbs : 0;
			printf("  %-10s %6d %6d %6d %10.1f %10.1f %8.3f\n", s->name, ts[j], s->n,
			       s->k, ms * 1e3, gbs, frac);
			char key[64];
			snprintf(key, sizeof key, "gemv_bf16_t%d_n%d_k%d_us", ts[j], s->n, s->k);
			put_kv(b, key, "%.1f", ms * 1e3);
			snprintf(key, sizeof key, "gemv_bf16_t%d_n%d_k%d_gbs", ts[j], s->n, s->k);
			put_kv(b, key, "%.1f", gbs);
			snprintf(key, sizeof key, "gemv_bf16_t%d_n%d_k%d_frac_bw", ts[j], s->n, s->k);
			put_kv(b, key, "%.3f", frac);
		}
	}
	return 0;
}

/* ---- main ------------------------------------------------------------------- */

static int parse_args(int argc, char **argv, struct opts *o)
{
	o->quick = 0;
	o->reps = 20;
	o->hbm_gbs = 4800;
	o->bf16_tflops = 989;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int has_val = i + 1 < argc;
		if (!strcmp(a, "--quick")) {
			o->quick = 1;
		} else if (!strcmp(a, "--hbm-gbs") && has_val) {
			o->hbm_gbs = atof(argv[++i]);
		} else if (!strcmp(a, "--bf16-tflops") && has_val) {
			o->bf16_tflops = atof(argv[++i]);
		} else if (!strcmp(a, "--reps") && has_val) {
			o->reps = atoi(argv[++i]);
		} else {
			fprintf(stderr,
				"usage: %s [--quick] [--hbm-gbs 4800] [--bf16-tflops 989]"
				" [--reps 20 (10..%d)]\n",
				argv[0], MAX_REPS);
			return ERR_INVAL;
		}
	}
	if (o->hbm_gbs <= 0 || o->bf16_tflops <= 0 || o->reps < 10 || o->reps > MAX_REPS) {
		fprintf(stderr, "bench_cuda: nominal figures must be > 0 and reps in 10..%d\n",
			MAX_REPS);
		return ERR_INVAL;
	}
	return 0;
}

static int setup(struct bench *b)
{
	TRY(k_cuda_set_device(0), "k_cuda_set_device");
	TRY(k_cuda_stream_create(&b->stream), "k_cuda_stream_create");
	TRY(k_blas_create(b->stream, &b->blas), "k_blas_create");
	for (int i = 0; i < MAX_REPS; i++) {
		TRY(k_cuda_event_create(&b->ev_start[i]), "k_cuda_event_create");
		TRY(k_cuda_event_create(&b->ev_end[i]), "k_cuda_event_create");
	}
	TRY(k_cuda_malloc(&b->d_flush, FLUSH_BYTES), "cudaMalloc (L2 flush)");
	b->host_bf16 = malloc(HOST_ELEMS * sizeof *b->host_bf16);
	if (!b->host_bf16)
		return fail("malloc", ERR_NOMEM);
	uint64_t s = 0x9E3779B97F4A7C15ull;
	for (size_t i = 0; i < HOST_ELEMS; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		float u = (float)((s >> 40) * (1.0 / 16777216.0)); /* [0, 1) */
		b->host_bf16[i] = f32_to_bf16(2.0f * u - 1.0f);
	}
	return 0;
}

static void teardown(struct bench *b)
{
	for (int i = 0; i < MAX_REPS; i++) {
		k_cuda_event_destroy(b->ev_start[i]);
		k_cuda_event_destroy(b->ev_end[i]);
	}
	k_cuda_free(b->d_flush);
	k_blas_destroy(b->blas);
	k_cuda_stream_destroy(b->stream);
	free(b->host_bf16);
}

int main(int argc, char **argv)
{
	struct bench b;
	memset(&b, 0, sizeof b);
	if (parse_args(argc, argv, &b.o))
		return 2;
	int n_dev = 0;
	k_cuda_device_count(&n_dev);
	if (n_dev <= 0) {
		printf("bench_cuda: SKIP: no CUDA device visible\n");
		return 77;
	}
	int rc = setup(&b);
	if (!rc)
		rc = bench_device(&b);
	if (!rc)
		rc = bench_bandwidth(&b);
	if (!rc)
		rc = bench_gemm(&b);
	if (!rc)
		rc = bench_gemv(&b);
	teardown(&b);
	printf("\n");
	put_kv(&b, "quick", "%d", b.o.quick);
	for (int i = 0; i < b.n_kv; i++)
		printf("%s=%s\n", b.kv[i].key, b.kv[i].val);
	if (rc) {
		printf("bench_cuda: FAILED (%s)\n", err_str(rc));
		return 1;
	}
	return 0;
}
