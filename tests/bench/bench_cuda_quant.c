/* tests/bench/bench_cuda_quant.c — the 8-bit GPU paths (kcuda_quant.h) at
 * the Llama-3-8B projection shapes (N, K = 4096,4096 / 6144,4096 /
 * 28672,4096 / 4096,14336), against the BF16 path of the same shapes
 * (k_gemm, cuBLAS). Not a test: run it by hand on a GPU machine.
 *
 *   decode (T = 1, 4, 8, 16): k_gemv_w8 for I8, F8 E4M3 (per-row scales) and
 *     Q8_0, k_gemv_q8_0r on repacked Q8_0 ("q8_0r"), and from T = 4 the
 *     W8A8 path (k_quant_rows + k_gemm_w8a8: "i8a8", "f8a8"): time, weight GB/s,
 *     and bf16_ms / w8_ms (how much faster than the BF16 GEMV through
 *     k_gemm; about 2 would be the byte ratio);
 *   prefill (T = 2048): k_gemm_w8a8 FP8 (and INT8) TFLOP/s against BF16
 *     k_gemm, the GEMM alone and with k_quant_rows of X in front;
 *   prefill producers (T = 2048): the RMSNorm (hidden 4096) and SwiGLU
 *     (ffn 14336) in front of an 8-bit projection, as two kernels
 *     (k_add_rmsnorm / k_silu_mul to BF16 rows, then k_quant_rows) and fused
 *     (k_rmsnorm_quant / k_silu_mul_quant): time, and GB/s of the fused
 *     kernel's own traffic (F32 in, codes out) against the copy bandwidth.
 * Every run: the L2 flushed (a 256 MiB memset), CUDA events around the
 * kernel, median of --reps (default 10). Output: a table, then key=value
 * lines ("quant.<what>=<value>") for grep. Exit 77 without a GPU. About
 * 10-20 s on an H200, most of it uploads and cuBLAS start-up.
 * Usage: bench_cuda_quant [--reps N]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_gemm.h"
#include "kernels/cuda/kcuda_ops.h"
#include "kernels/cuda/kcuda_quant.h"
#include "kernels/dtype.h"

#define MAX_REPS    50
#define FLUSH_BYTES ((size_t)256 << 20)
#define FILL_BYTES  ((size_t)16 << 20) /* host pattern, tiled over device buffers */
#define PREFILL_T   2048

struct shape {
	const char *name;
	int n, k;
};
static const struct shape shapes[] = {
    {"qkv", 6144, 4096},
    {"o", 4096, 4096},
    {"gate_up", 28672, 4096},
    {"down", 4096, 14336},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

struct bench {
	int reps;
	void *stream;
	struct k_blas *blas;
	void *ev0[MAX_REPS], *ev1[MAX_REPS];
	void *d_flush;
	uint8_t *fill; /* FILL_BYTES of pattern */
	int has_fp8;
};

/* One timed operation: which kernel and its operands. */
enum op_kind {
	OP_BF16, OP_GEMV, OP_GEMV_Q8R, OP_W8A8, OP_QUANT_W8A8, OP_DEQUANT_BF16,
	OP_NORM_THEN_QUANT, OP_NORM_QUANT, OP_SILU_THEN_QUANT, OP_SILU_QUANT, OP_COPY,
};
struct op {
	enum op_kind kind;
	enum dtype w_dt;
	int n, k, t;
	const void *d_w;
	const float *d_ws;
	int n_ws;
	const void *d_wd; /* repacked Q8_0 scales */
	const void *d_x;  /* BF16 [t, k] */
	void *d_xq;       /* 8-bit [t, k] */
	float *d_xs;      /* [t] */
	float *d_y;       /* F32 [t, n] */
	void *d_wtmp;     /* BF16 [n, k]: OP_DEQUANT_BF16's dequantized weights */
	float *d_in;      /* producers: F32 x [t, k] (norm) or gu [t, 2k] (SwiGLU) */
	const float *d_nw; /* the norm's weights [k] */
};

static int check(int rc, const char *what)
{
	if (rc)
		fprintf(stderr, "bench_cuda_quant: %s failed: %d (%s)\n", what, rc,
		        k_cuda_last_error());
	return rc;
}

static int run_op(struct bench *b, const struct op *o)
{
	switch (o->kind) {
	case OP_BF16:
		return k_gemm(b->blas, o->d_w, DT_BF16, o->n, o->k, o->d_x, o->t, o->d_y, 0);
	case OP_GEMV:
		return k_gemv_w8(b->stream, o->d_w, o->w_dt, o->d_ws, o->n_ws, o->n, o->k, o->d_x,
		                 DT_BF16, o->t, o->d_y, 0);
	case OP_GEMV_Q8R:
		return k_gemv_q8_0r(b->stream, o->d_w, o->d_wd, o->n, o->k, o->d_x, DT_BF16, o->t,
		                    o->d_y, 0);
	case OP_DEQUANT_BF16: { /* the weight-only path: dequantize, then BF16 */
		int rc = k_dequant_w8(b->stream, o->d_w, o->w_dt, o->d_ws, o->n_ws, NULL, o->n,
		                      o->k, o->d_wtmp, DT_BF16);
		return rc ? rc : k_gemm(b->blas, o->d_wtmp, DT_BF16, o->n, o->k, o->d_x, o->t,
		                        o->d_y, 0);
	}
	case OP_NORM_THEN_QUANT: {
		int rc = k_add_rmsnorm(b->stream, o->d_in, NULL, o->d_nw, o->t, o->k, 1e-5f,
		                       (void *)o->d_x, DT_BF16);
		return rc ? rc : k_quant_rows(b->stream, o->d_x, DT_BF16, o->t, o->k, o->w_dt,
		                              o->d_xq, o->d_xs);
	}
	case OP_COPY: /* the first half of d_in onto the second: t * k floats */
		return k_cuda_memcpy_d2d_async(b->stream, o->d_in + (size_t)o->t * o->k, o->d_in,
		                               (size_t)o->t * o->k * sizeof(float));
	case OP_NORM_QUANT:
		return k_rmsnorm_quant(b->stream, o->d_in, o->d_nw, o->t, o->k, 1e-5f, DT_BF16,
		                       o->w_dt, o->d_xq, o->d_xs);
	case OP_SILU_THEN_QUANT: {
		int rc = k_silu_mul(b->stream, o->d_in, o->t, o->k, (void *)o->d_x, DT_BF16);
		return rc ? rc : k_quant_rows(b->stream, o->d_x, DT_BF16, o->t, o->k, o->w_dt,
		                              o->d_xq, o->d_xs);
	}
	case OP_SILU_QUANT:
		return k_silu_mul_quant(b->stream, o->d_in, o->t, o->k, DT_BF16, o->w_dt, o->d_xq,
		                        o->d_xs);
	case OP_QUANT_W8A8: {
		int rc =
		    k_quant_rows(b->stream, o->d_x, DT_BF16, o->t, o->k, o->w_dt, o->d_xq, o->d_xs);
		if (rc)
			return rc;
	}
		/* fall through */
	case OP_W8A8:
		return k_gemm_w8a8(b->blas, o->d_w, o->w_dt, o->d_ws, o->n_ws, o->n, o->k, o->d_xq,
		                   o->d_xs, o->t, o->d_y, 0);
	}
	return ERR_INVAL;
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

/* Median milliseconds of b->reps runs, L2 flushed before each. */
static int time_op(struct bench *b, const struct op *o, double *ms_out)
{
	int rc = check(run_op(b, o), "warm-up");
	for (int i = 0; !rc && i < b->reps; i++) {
		rc = k_cuda_memset_async(b->stream, b->d_flush, i & 0xff, FLUSH_BYTES);
		if (!rc)
			rc = k_cuda_event_record(b->ev0[i], b->stream);
		if (!rc)
			rc = check(run_op(b, o), "run");
		if (!rc)
			rc = k_cuda_event_record(b->ev1[i], b->stream);
	}
	float ms[MAX_REPS];
	for (int i = 0; !rc && i < b->reps; i++)
		rc = k_cuda_event_elapsed_ms(b->ev0[i], b->ev1[i], &ms[i]);
	if (rc)
		return check(rc, "timing");
	qsort(ms, (size_t)b->reps, sizeof ms[0], cmp_float);
	*ms_out = ms[b->reps / 2];
	return 0;
}

/* Device buffer of bytes filled with the host pattern (tiled). */
static int alloc_filled(struct bench *b, void **d, size_t bytes)
{
	int rc = check(k_cuda_malloc(d, bytes), "k_cuda_malloc");
	for (size_t off = 0; !rc && off < bytes; off += FILL_BYTES) {
		size_t len = bytes - off < FILL_BYTES ? bytes - off : FILL_BYTES;
		rc = check(k_cuda_memcpy_h2d((char *)*d + off, b->fill, len), "upload");
	}
	return rc;
}

/* The pattern: random bytes, finite read as FP8 E4M3 (no 0x7f/0xff), and
 * with bit 6 of every odd byte clear, so that BF16, F16 (Q8_0 scales sit at
 * even offsets) and F32 values read from it have small exponents: finite.
 * Values do not change the time; NaN and Inf would only look odd. */
static void make_fill(uint8_t *p, size_t n)
{
	uint64_t s = 0x9E3779B97F4A7C15ull;
	for (size_t i = 0; i < n; i++) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		uint8_t v = (uint8_t)(s >> 24);
		if (i & 1)
			v &= 0xbf; /* BF16/F16 high byte: exponent well below Inf/NaN */
		if ((v & 0x7f) == 0x7f)
			v = 0x3e;
		p[i] = v;
	}
}

static int bench_decode(struct bench *b)
{
	/* the last two: W8A8 (k_quant_rows + k_gemm_w8a8, padded to 32 rows),
	 * the backend's alternative above its GEMV row limit */
	static const enum dtype wdts[] = {DT_I8, DT_F8_E4M3, DT_Q8_0, DT_Q8_0, DT_I8, DT_F8_E4M3};
	static const char *const wnames[] = {"i8", "f8_e4m3", "q8_0", "q8_0r", "i8a8", "f8a8"};
	static const int ts[] = {1, 4, 8, 16};
	printf("\ndecode: k_gemv_w8 vs BF16 k_gemm (X BF16, L2 flushed, median of %d)\n", b->reps);
	printf("%-8s %5s %2s %-8s %9s %9s %9s\n", "shape", "N", "T", "weights", "ms", "GB/s",
	       "bf16/w8");
	int rc = 0;
	for (int s = 0; !rc && s < N_SHAPES; s++) {
		const int n = shapes[s].n, k = shapes[s].k;
		void *d_w16 = NULL, *d_w8 = NULL, *d_x = NULL, *d_ws = NULL, *d_y = NULL,
		     *d_wd = NULL, *d_xq = NULL, *d_xs = NULL;
		const size_t q8_bytes = (size_t)n * (k / Q8_0_BLOCK) * sizeof(struct q8_0_block);
		rc = alloc_filled(b, &d_w16, (size_t)n * k * 2);
		if (!rc)
			rc = alloc_filled(b, &d_w8,
			                  q8_bytes); /* >= n * k: fits every 8-bit layout */
		if (!rc)
			rc = alloc_filled(b, &d_wd, (size_t)n * (k / Q8_0_BLOCK) * 2);
		if (!rc)
			rc = alloc_filled(b, &d_x, (size_t)16 * k * 2);
		if (!rc)
			rc = check(k_cuda_malloc(&d_ws, (size_t)n * sizeof(float)), "malloc");
		if (!rc)
			rc = check(k_cuda_memset_async(NULL, d_ws, 0, (size_t)n * sizeof(float)),
			           "memset"); /* scale 0: finite outputs */
		if (!rc)
			rc = check(k_cuda_malloc(&d_y, (size_t)16 * n * sizeof(float)), "malloc");
		if (!rc)
			rc = check(k_cuda_malloc(&d_xq, (size_t)16 * k), "malloc");
		if (!rc)
			rc = check(k_cuda_malloc(&d_xs, (size_t)16 * sizeof(float)), "malloc");
		for (int ti = 0; !rc && ti < (int)(sizeof ts / sizeof ts[0]); ti++) {
			const int t = ts[ti];
			struct op o = {.kind = OP_BF16,
			               .n = n,
			               .k = k,
			               .t = t,
			               .d_w = d_w16,
			               .d_x = d_x,
			               .d_y = d_y};
			double bf16_ms = 0;
			rc = time_op(b, &o, &bf16_ms);
			if (rc)
				break;
			printf("%-8s %5d %2d %-8s %9.4f %9.0f %9s\n", shapes[s].name, n, t, "bf16",
			       bf16_ms, (double)n * k * 2 / bf16_ms / 1e6, "1.00");
			printf("quant.decode.%s.t%d.bf16_ms=%.4f\n", shapes[s].name, t, bf16_ms);
			for (int w = 0; !rc && w < 6; w++) {
				if (w >= 4 && (t < 4 || (wdts[w] == DT_F8_E4M3 && !b->has_fp8)))
					continue;
				o.kind = w >= 4 ? OP_QUANT_W8A8 : w == 3 ? OP_GEMV_Q8R : OP_GEMV;
				o.d_xq = d_xq;
				o.d_xs = d_xs;
				o.w_dt = wdts[w];
				o.d_w = d_w8;
				o.d_wd = d_wd;
				o.d_ws = wdts[w] == DT_Q8_0 ? NULL : (const float *)d_ws;
				o.n_ws = wdts[w] == DT_Q8_0 ? 0 : n;
				double ms = 0;
				rc = time_op(b, &o, &ms);
				if (rc) { /* report it and go on with the other kinds */
					printf("quant.decode.%s.t%d.%s_error=%d\n", shapes[s].name,
					       t, wnames[w], rc);
					rc = 0;
					continue;
				}
				const double bytes =
				    wdts[w] == DT_Q8_0 ? (double)q8_bytes : (double)n * k;
				const char *wn = wnames[w];
				printf("%-8s %5d %2d %-8s %9.4f %9.0f %9.2f\n", shapes[s].name, n,
				       t, wn, ms, bytes / ms / 1e6, bf16_ms / ms);
				printf("quant.decode.%s.t%d.%s_ms=%.4f\n", shapes[s].name, t, wn,
				       ms);
				printf("quant.decode.%s.t%d.%s_gbs=%.0f\n", shapes[s].name, t, wn,
				       bytes / ms / 1e6);
				printf("quant.decode.%s.t%d.%s_speedup_vs_bf16=%.3f\n",
				       shapes[s].name, t, wn, bf16_ms / ms);
			}
		}
		k_cuda_free(d_w16);
		k_cuda_free(d_w8);
		k_cuda_free(d_x);
		k_cuda_free(d_ws);
		k_cuda_free(d_y);
		k_cuda_free(d_wd);
		k_cuda_free(d_xq);
		k_cuda_free(d_xs);
	}
	return rc;
}

static int bench_prefill(struct bench *b)
{
	const int t = PREFILL_T;
	printf("\nprefill T=%d: k_gemm_w8a8 vs BF16 k_gemm (TFLOP/s; +q: with k_quant_rows;\n"
	       "deq ms: k_dequant_w8 + BF16 k_gemm, the weight-only alternative)\n", t);
	printf("%-8s %5s %5s %-6s %9s %9s %9s %9s %9s\n", "shape", "N", "K", "path", "ms",
	       "TFLOP/s", "+q ms", "bf16/w8", "deq ms");
	int rc = 0;
	for (int s = 0; !rc && s < N_SHAPES; s++) {
		const int n = shapes[s].n, k = shapes[s].k;
		const double flop = 2.0 * t * n * k;
		void *d_w16 = NULL, *d_w8 = NULL, *d_x = NULL, *d_xq = NULL, *d_ws = NULL,
		     *d_xs = NULL, *d_y = NULL, *d_wtmp = NULL;
		rc = alloc_filled(b, &d_w16, (size_t)n * k * 2);
		if (!rc)
			rc = check(k_cuda_malloc(&d_wtmp, (size_t)n * k * 2), "malloc");
		if (!rc)
			rc = alloc_filled(b, &d_w8, (size_t)n * k);
		if (!rc)
			rc = alloc_filled(b, &d_x, (size_t)t * k * 2);
		if (!rc)
			rc = check(k_cuda_malloc(&d_xq, (size_t)t * k), "malloc");
		if (!rc)
			rc = alloc_filled(b, &d_ws, (size_t)n * sizeof(float));
		if (!rc)
			rc = check(k_cuda_malloc(&d_xs, (size_t)t * sizeof(float)), "malloc");
		if (!rc)
			rc = check(k_cuda_malloc(&d_y, (size_t)t * n * sizeof(float)), "malloc");
		struct op o = {
		    .kind = OP_BF16, .n = n, .k = k, .t = t, .d_w = d_w16, .d_x = d_x, .d_y = d_y};
		double bf16_ms = 0;
		if (!rc)
			rc = time_op(b, &o, &bf16_ms);
		if (rc)
			break;
		printf("%-8s %5d %5d %-6s %9.4f %9.1f %9s %9s %9s\n", shapes[s].name, n, k, "bf16",
		       bf16_ms, flop / bf16_ms / 1e9, "-", "1.00", "-");
		printf("quant.prefill.%s.bf16_tflops=%.1f\n", shapes[s].name, flop / bf16_ms / 1e9);
		for (int q = 0; !rc && q < 2; q++) {
			const enum dtype w_dt = q ? DT_I8 : DT_F8_E4M3;
			if (w_dt == DT_F8_E4M3 && !b->has_fp8) {
				printf("%-8s FP8: no FP8 tensor cores on this device\n",
				       shapes[s].name);
				continue;
			}
			o.w_dt = w_dt;
			o.d_w = d_w8;
			o.d_ws = d_ws;
			o.n_ws = n;
			o.d_xq = d_xq;
			o.d_xs = d_xs;
			/* X quantized once so the GEMM-only runs see real codes. */
			rc = check(k_quant_rows(b->stream, d_x, DT_BF16, t, k, w_dt, d_xq, d_xs),
			           "k_quant_rows");
			double ms = 0, msq = 0, msd = 0;
			o.kind = OP_W8A8;
			if (!rc)
				rc = time_op(b, &o, &ms);
			o.kind = OP_QUANT_W8A8;
			if (!rc)
				rc = time_op(b, &o, &msq);
			o.kind = OP_DEQUANT_BF16;
			o.d_wtmp = d_wtmp;
			if (!rc)
				rc = time_op(b, &o, &msd);
			if (rc) { /* report it and go on with the other type and shapes */
				printf("quant.prefill.%s.%s_error=%d\n", shapes[s].name,
				       dtype_name(w_dt), rc);
				rc = 0;
				continue;
			}
			const char *nm = dtype_name(w_dt);
			printf("%-8s %5d %5d %-6s %9.4f %9.1f %9.4f %9.2f %9.4f\n", shapes[s].name, n,
			       k, nm, ms, flop / ms / 1e9, msq, bf16_ms / ms, msd);
			printf("quant.prefill.%s.%s_dequant_bf16_ms=%.4f\n", shapes[s].name, nm, msd);
			printf("quant.prefill.%s.%s_w8a8_with_quant_ms=%.4f\n", shapes[s].name, nm, msq);
			printf("quant.prefill.%s.%s_tflops=%.1f\n", shapes[s].name, nm,
			       flop / ms / 1e9);
			printf("quant.prefill.%s.%s_with_quant_tflops=%.1f\n", shapes[s].name, nm,
			       flop / msq / 1e9);
			printf("quant.prefill.%s.%s_speedup_vs_bf16=%.3f\n", shapes[s].name, nm,
			       bf16_ms / ms);
		}
		k_cuda_free(d_w16);
		k_cuda_free(d_wtmp);
		k_cuda_free(d_w8);
		k_cuda_free(d_x);
		k_cuda_free(d_xq);
		k_cuda_free(d_ws);
		k_cuda_free(d_xs);
		k_cuda_free(d_y);
	}
	return rc;
}

/* The norm and SwiGLU in front of an 8-bit projection at T = 2048, unfused
 * and fused (FP8 codes; INT8 costs the same). */
static int bench_producers(struct bench *b)
{
	const int t = PREFILL_T, hidden = 4096, ffn = 14336;
	printf("\nprefill producers T=%d, BF16 rows, FP8 codes: two kernels (then k_quant_rows) "
	       "vs fused\n", t);
	printf("%-6s %6s %10s %10s %9s %9s\n", "what", "K", "2 kern ms", "fused ms", "speedup",
	       "fused GB/s");
	void *d_in = NULL, *d_16 = NULL, *d_xq = NULL, *d_xs = NULL, *d_nw = NULL;
	int rc = alloc_filled(b, &d_in, (size_t)t * 2 * ffn * sizeof(float));
	if (!rc)
		rc = check(k_cuda_malloc(&d_16, (size_t)t * ffn * 2), "malloc");
	if (!rc)
		rc = check(k_cuda_malloc(&d_xq, (size_t)t * ffn), "malloc");
	if (!rc)
		rc = check(k_cuda_malloc(&d_xs, (size_t)t * sizeof(float)), "malloc");
	if (!rc)
		rc = alloc_filled(b, &d_nw, (size_t)hidden * sizeof(float));
	/* the ceiling, in the same run: a device copy of t * ffn floats */
	struct op cp = {.kind = OP_COPY, .k = ffn, .t = t, .d_in = d_in};
	double copy_ms = 0, copy_gbs = 0;
	if (!rc && !(rc = time_op(b, &cp, &copy_ms))) {
		copy_gbs = 2.0 * t * ffn * sizeof(float) / copy_ms / 1e6;
		printf("device copy (read + write): %.0f GB/s\n", copy_gbs);
		printf("quant.producer.copy_gbs=%.0f\n", copy_gbs);
	}
	for (int i = 0; !rc && i < 2; i++) {
		const bool silu = i == 1;
		const int k = silu ? ffn : hidden;
		struct op o = {.w_dt = DT_F8_E4M3, .k = k, .t = t, .d_in = d_in, .d_nw = d_nw,
		               .d_x = d_16, .d_xq = d_xq, .d_xs = d_xs};
		double ms2 = 0, ms1 = 0;
		o.kind = silu ? OP_SILU_THEN_QUANT : OP_NORM_THEN_QUANT;
		rc = time_op(b, &o, &ms2);
		o.kind = silu ? OP_SILU_QUANT : OP_NORM_QUANT;
		if (!rc)
			rc = time_op(b, &o, &ms1);
		if (rc)
			break;
		/* the fused kernel's DRAM traffic: F32 rows in, codes and scales out */
		const double bytes = (double)t * k * ((silu ? 8.0 : 4.0) + 1.0) + t * 4.0;
		const char *nm = silu ? "silu" : "norm";
		printf("%-6s %6d %10.4f %10.4f %9.2f %9.0f (%.0f%% of copy)\n", nm, k, ms2, ms1,
		       ms2 / ms1, bytes / ms1 / 1e6, 100.0 * bytes / ms1 / 1e6 / copy_gbs);
		printf("quant.producer.%s.two_kernels_ms=%.4f\n", nm, ms2);
		printf("quant.producer.%s.fused_ms=%.4f\n", nm, ms1);
		printf("quant.producer.%s.fused_gbs=%.0f\n", nm, bytes / ms1 / 1e6);
	}
	k_cuda_free(d_in);
	k_cuda_free(d_16);
	k_cuda_free(d_xq);
	k_cuda_free(d_xs);
	k_cuda_free(d_nw);
	return rc;
}

int main(int argc, char **argv)
{
	struct bench b;
	memset(&b, 0, sizeof b);
	b.reps = 10;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
			b.reps = atoi(argv[++i]);
		} else {
			fprintf(stderr, "usage: bench_cuda_quant [--reps N (1..%d)]\n", MAX_REPS);
			return 2;
		}
	}
	if (b.reps < 1 || b.reps > MAX_REPS) {
		fprintf(stderr, "bench_cuda_quant: --reps must be 1..%d\n", MAX_REPS);
		return 2;
	}
	int n_dev = 0;
	k_cuda_device_count(&n_dev);
	if (n_dev <= 0) {
		printf("bench_cuda_quant: SKIP: no CUDA device visible\n");
		return 77;
	}
	struct k_cuda_props p;
	int rc = check(k_cuda_set_device(0), "set device");
	if (!rc)
		rc = check(k_cuda_props(0, &p), "props");
	if (rc)
		return 1;
	b.has_fp8 = p.has_fp8;
	printf("device: %s (cc %d.%d, %d SMs)\n", p.name, p.cc_major, p.cc_minor, p.n_sms);
	b.fill = malloc(FILL_BYTES);
	if (!b.fill)
		return 1;
	make_fill(b.fill, FILL_BYTES);
	rc = check(k_cuda_stream_create(&b.stream), "stream");
	if (!rc)
		rc = check(k_blas_create(b.stream, &b.blas), "k_blas_create");
	if (!rc)
		rc = check(k_cuda_malloc(&b.d_flush, FLUSH_BYTES), "flush buffer");
	for (int i = 0; !rc && i < b.reps; i++) {
		rc = k_cuda_event_create(&b.ev0[i]);
		if (!rc)
			rc = k_cuda_event_create(&b.ev1[i]);
	}
	if (!rc)
		rc = bench_decode(&b);
	if (!rc)
		rc = bench_prefill(&b);
	if (!rc)
		rc = bench_producers(&b);
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
