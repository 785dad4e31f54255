/* tests/kernels/test_matmul.c — kcpu_matmul (every instruction-set path this
 * CPU has, 1/2/3 threads) against the references, for every weight dtype on
 * ragged shapes.
 *
 * Float dtypes (F32, F16, BF16, F8_E4M3): fast and kcpu_matmul_ref multiply
 * the same F32 values and differ only in summation order, so
 *   |got - ref| <= 1e-6 + 2e-5 * sum_k |w_k x_k|
 * (a bound on reordering error that does not blow up under cancellation).
 * Q8_0: against kcpu_matmul_ref_xq (same X quantization, exact integer block
 * dots), same bound. I8: against kcpu_matmul_ref_xq, bit-exact (integer sums
 * are exact and the scaling is the same F32 expression). Both integer dtypes
 * are also checked against the plain float reference with the X quantization
 * error bound: |got - ref| <= 1e-5 + 1.001 * sum_k |w_k| * d_x(k) / 2 + the
 * reordering bound, with d_x the activation scale of k's block or row.
 *
 * It ends by saying which paths ran ('ISA <path>: ran (N runs)' or 'ISA
 * <path>: not run: <why>', for scalar, avx2, avx512, vnni, amx), and a case
 * this CPU cannot run prints 'SKIP: <case>: <why>': tools/test-summary.py
 * collects both, so a path that did not run never reads as a pass.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/err.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_impl.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/quant.h"

/* ---- which instruction-set paths ran ----------------------------------------
 * Check runs each test in a forked child, so the counts live in a shared
 * mapping that main reads after the run. vnni: the AVX-512 path's integer
 * dots (vpdpbusd, I8 and Q8_0); amx: its AMX-INT8 tiles (batched Q8_0). */

enum ran_path { RAN_SCALAR, RAN_AVX2, RAN_AVX512, RAN_VNNI, RAN_AMX, RAN__COUNT };
static const char *const ran_names[RAN__COUNT] = { "scalar", "avx2", "avx512", "vnni", "amx" };
static long *ran_count; /* (RAN__COUNT): MAP_SHARED, set up by main */

static void ran(enum ran_path p)
{
	if (ran_count)
		__atomic_fetch_add(&ran_count[p], 1, __ATOMIC_RELAXED);
}

static int amx_here(void)
{
	const struct mm_kernels *k = mm_kernels_avx512();
	return kcpu_isa_supported(KCPU_ISA_AVX512) && k && k->amx_ok && k->amx_ok();
}

/* NULL when the path can run here, else why not. */
static const char *why_not(enum ran_path p)
{
	switch (p) {
	case RAN_SCALAR:
		return NULL;
	case RAN_AVX2:
		if (!mm_kernels_avx2())
			return "not built (the compiler cannot target AVX2)";
		return kcpu_isa_supported(KCPU_ISA_AVX2) ? NULL : "this CPU has no AVX2 + FMA + F16C";
	case RAN_AVX512:
	case RAN_VNNI:
		if (!mm_kernels_avx512())
			return "not built (the compiler cannot target AVX-512)";
		return kcpu_isa_supported(KCPU_ISA_AVX512) ? NULL
							   : "this CPU has no AVX-512 F/BW/DQ/VL + VNNI";
	case RAN_AMX:
		if (!kcpu_isa_supported(KCPU_ISA_AVX512))
			return "this CPU has no AVX-512 (the AMX tiles are driven from that path)";
		return amx_here() ? NULL : "this CPU has no AMX-INT8 (or Linux did not grant the tile state)";
	default:
		return "?";
	}
}

/* Print the ISA lines; returns the number of paths that could run here
 * yet ran no case (a test bug: their absence would read as coverage). */
static int report_paths(void)
{
	int missing = 0;
	for (int p = 0; p < RAN__COUNT; p++) {
		const char *why = why_not((enum ran_path)p);
		if (ran_count[p] > 0)
			printf("ISA %s: ran (%ld runs)\n", ran_names[p], ran_count[p]);
		else if (why)
			printf("ISA %s: not run: %s\n", ran_names[p], why);
		else {
			printf("ISA %s: not run: supported here, yet no case ran it\n", ran_names[p]);
			missing++;
		}
	}
	return missing;
}

/* ---- fixtures --------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float frand(void) /* uniform in [-1, 1) */
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (float)((rng_state >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

/* A weight matrix of one dtype with its own storage. */
struct wmat {
	struct kmat k;
	void *data;
	float *scale;
	void *packed;
};

/* PACKED: with its kcpu_pack copy (used by the AVX-512 path; I8 and F8
 * with per-row scales) */
enum scale_kind { PER_ROW, PER_TENSOR, PACKED };

static void wmat_pack(struct wmat *wm)
{
	size_t bytes;
	ck_assert_int_eq(kcpu_pack_bytes(&wm->k, &bytes), 0);
	wm->packed = aligned_alloc(64, (bytes + 63) / 64 * 64);
	ck_assert_ptr_nonnull(wm->packed);
	ck_assert_int_eq(kcpu_pack(NULL, &wm->k, wm->packed), 0);
	wm->k.packed = wm->packed;
}

static void wmat_make(struct wmat *wm, enum dtype t, int64_t rows, int64_t cols,
		      enum scale_kind sk)
{
	size_t n = (size_t)(rows * cols);
	float *f = malloc((n ? n : 1) * sizeof(float));
	ck_assert_ptr_nonnull(f);
	for (size_t i = 0; i < n; i++)
		f[i] = frand();
	struct kmat src = { DT_F32, rows, cols, f, NULL, 0 };
	memset(wm, 0, sizeof *wm);
	wm->k.dtype = t;
	wm->k.rows = rows;
	wm->k.cols = cols;
	switch (t) {
	case DT_F32:
		wm->data = f;
		f = NULL;
		break;
	case DT_F16:
	case DT_BF16: {
		uint16_t *h = malloc(n * 2 + 2);
		for (size_t i = 0; i < n; i++)
			h[i] = t == DT_F16 ? f32_to_f16(f[i]) : f32_to_bf16(f[i]);
		wm->data = h;
		break;
	}
	case DT_Q8_0: {
		struct q8_0_block *b = malloc(n / 32 * sizeof *b + 1);
		ck_assert_int_eq(kcpu_quantize_q8_0(&src, b), 0);
		/* -128 is legal in files though our quantizer never makes it */
		if (n >= 64)
			b[1].qs[5] = -128;
		wm->data = b;
		break;
	}
	case DT_I8:
	case DT_F8_E4M3: {
		uint8_t *q = malloc(n + 1);
		wm->scale = malloc((size_t)rows * sizeof(float) + 4);
		if (t == DT_I8)
			ck_assert_int_eq(kcpu_quantize_i8(&src, (int8_t *)q, wm->scale), 0);
		else
			ck_assert_int_eq(kcpu_quantize_f8(&src, q, wm->scale), 0);
		if (t == DT_I8 && n > 3)
			q[3] = 0x80; /* -128 */
		if (sk == PER_TENSOR)
			wm->scale[0] = 0.0123f;
		wm->k.scale = wm->scale;
		wm->k.n_scale = sk == PER_TENSOR ? 1 : rows;
		wm->data = q;
		break;
	}
	default:
		ck_abort_msg("bad dtype");
	}
	wm->k.data = wm->data;
	free(f);
	if (sk == PACKED && t != DT_F32 && rows > 0)
		wmat_pack(wm);
}

static void wmat_free(struct wmat *wm)
{
	free(wm->data);
	free(wm->scale);
	free(wm->packed);
}

/* sum_k |w_k x_k| and sum_k |w_k| * d_x(k) / 2 for every output. */
static void bounds(const struct kmat *w, const float *x, int m, double *abs_dot, double *q_err)
{
	const int64_t n = w->cols, nb = n / 32 + 1;
	float *row = malloc((size_t)n * sizeof(float));
	int8_t *xq = malloc((size_t)n);
	float *xd = malloc((size_t)(m * nb) * sizeof(float)); /* per X row */
	for (int j = 0; j < m; j++) {
		if (w->dtype == DT_Q8_0)
			kcpu_quantize_act_q8_0(x + (int64_t)j * n, n, xq, xd + j * nb);
		else if (w->dtype == DT_I8)
			kcpu_quantize_act_i8(x + (int64_t)j * n, n, xq, xd + j * nb);
	}
	for (int64_t r = 0; r < w->rows; r++) {
		kcpu_dequant_row(w, r, row);
		for (int j = 0; j < m; j++) {
			const float *xj = x + (int64_t)j * n, *dj = xd + j * nb;
			double a = 0, e = 0;
			for (int64_t k = 0; k < n; k++) {
				a += fabs((double)row[k] * xj[k]);
				if (w->dtype == DT_Q8_0)
					e += fabs(row[k]) * dj[k / 32] / 2;
				else if (w->dtype == DT_I8)
					e += fabs(row[k]) * dj[0] / 2;
			}
			abs_dot[(int64_t)j * w->rows + r] = a;
			q_err[(int64_t)j * w->rows + r] = e;
		}
	}
	free(row);
	free(xq);
	free(xd);
}

/* Compare; print the first mismatches. Returns the number of mismatches. */
static int compare(const char *what, const float *got, const float *ref, const double *abs_dot,
		   const double *extra, double rtol, double atol, int m, int64_t rows)
{
	int bad = 0;
	for (int j = 0; j < m; j++)
		for (int64_t r = 0; r < rows; r++) {
			int64_t i = (int64_t)j * rows + r;
			double tol = atol + rtol * abs_dot[i] + (extra ? 1.001 * extra[i] : 0);
			double diff = fabs((double)got[i] - ref[i]);
			if (!(diff <= tol)) {
				if (bad < 5)
					fprintf(stderr, "  %s: y[%d][%lld] got %.9g ref %.9g diff %.3g tol %.3g\n",
						what, j, (long long)r, got[i], ref[i], diff, tol);
				bad++;
			}
		}
	return bad;
}

/* ---- the sweep -------------------------------------------------------------- */

static const int ms[] = { 1, 2, 3, 4, 5, 7, 13, 16, 17, 33, 100 };
static const int64_t rows_set[] = { 1, 31, 257 };
static const int64_t cols_set[] = { 32, 96, 4096, 37 };
static const int threads_set[] = { 1, 2, 3 };

struct sweep_case {
	enum dtype dtype;
	enum scale_kind sk;
};

static const struct sweep_case cases[] = {
	{ DT_F32, PER_ROW }, { DT_F16, PER_ROW },  { DT_BF16, PER_ROW },     { DT_Q8_0, PER_ROW },
	{ DT_I8, PER_ROW },  { DT_I8, PER_TENSOR }, { DT_F8_E4M3, PER_ROW }, { DT_F8_E4M3, PER_TENSOR },
	{ DT_Q8_0, PACKED },   { DT_I8, PACKED },  { DT_F16, PACKED },       { DT_BF16, PACKED },
	{ DT_F8_E4M3, PACKED },
};

START_TEST(test_sweep)
{
	const struct sweep_case *sc = &cases[_i];
	const int is_int = sc->dtype == DT_Q8_0 || sc->dtype == DT_I8;
	struct kpool *pools[3];
	for (int t = 0; t < 3; t++)
		ck_assert_int_eq(kpool_create(threads_set[t], &pools[t]), 0);
	int total_bad = 0, n_runs = 0;
	for (size_t ci = 0; ci < sizeof cols_set / sizeof *cols_set; ci++) {
		const int64_t cols = cols_set[ci];
		if (sc->dtype == DT_Q8_0 && cols % 32)
			continue;
		for (size_t ri = 0; ri < sizeof rows_set / sizeof *rows_set; ri++) {
			const int64_t rows = rows_set[ri];
			struct wmat wm;
			wmat_make(&wm, sc->dtype, rows, cols, sc->sk);
			for (size_t mi = 0; mi < sizeof ms / sizeof *ms; mi++) {
				const int m = ms[mi];
				/* keep the debug/ASan run short: the biggest shapes
				 * with the most rows only at a few m */
				if (rows * cols * m > (int64_t)257 * 4096 * 16)
					continue;
				size_t ny = (size_t)m * rows, nx = (size_t)m * cols;
				float *x = malloc(nx * sizeof(float));
				float *ref = malloc(ny * sizeof(float));
				float *refq = malloc(ny * sizeof(float));
				float *got = malloc(ny * sizeof(float));
				double *ad = malloc(ny * sizeof(double));
				double *qe = malloc(ny * sizeof(double));
				for (size_t i = 0; i < nx; i++)
					x[i] = frand();
				if (m > 1) /* an all-zero row: zero activation scales */
					memset(x + cols, 0, (size_t)cols * sizeof(float));
				kcpu_matmul_ref(&wm.k, x, m, ref);
				if (is_int)
					kcpu_matmul_ref_xq(&wm.k, x, m, refq);
				else /* ref_xq is the float reference for these */
					memcpy(refq, ref, ny * sizeof(float));
				bounds(&wm.k, x, m, ad, qe);
				for (int isa = KCPU_ISA_SCALAR; isa < KCPU_ISA__COUNT; isa++) {
					if (!kcpu_isa_supported((enum kcpu_isa)isa))
						continue;
					for (int t = 0; t < 3; t++) {
						for (size_t i = 0; i < ny; i++)
							got[i] = NAN;
						ck_assert_int_eq(kcpu_matmul_isa(pools[t], &wm.k, x, m, got,
										 (enum kcpu_isa)isa),
								 0);
						char what[160];
						snprintf(what, sizeof what, "%s%s %s m=%d rows=%lld cols=%lld threads=%d",
							 dtype_name(sc->dtype),
							 sc->sk == PER_TENSOR ? "(per-tensor)"
							 : sc->sk == PACKED ? "(packed)" : "",
							 kcpu_isa_name((enum kcpu_isa)isa), m, (long long)rows,
							 (long long)cols, threads_set[t]);
						int bad;
						if (sc->dtype == DT_I8)
							bad = compare(what, got, refq, ad, NULL, 0, 0, m, rows);
						else
							bad = compare(what, got, refq, ad, NULL, 2e-5, 1e-6, m, rows);
						if (is_int)
							bad += compare(what, got, ref, ad, qe, 2e-5, 1e-5, m, rows);
						total_bad += bad;
						n_runs++;
						ran((enum ran_path)(RAN_SCALAR + isa - KCPU_ISA_SCALAR));
						if (isa == KCPU_ISA_AVX512 && is_int)
							ran(RAN_VNNI);
					}
				}
				free(x);
				free(ref);
				free(refq);
				free(got);
				free(ad);
				free(qe);
			}
			wmat_free(&wm);
		}
	}
	for (int t = 0; t < 3; t++)
		kpool_destroy(pools[t]);
	ck_assert_int_gt(n_runs, 0);
	ck_assert_msg(total_bad == 0, "%d mismatches (see stderr)", total_bad);
}
END_TEST

/* kcpu_matmul (AUTO, void) and a NULL pool give the same answer as the
 * explicit path; m = 0 and rows = 0 touch nothing. */
START_TEST(test_entry_points)
{
	struct wmat wm;
	wmat_make(&wm, DT_F16, 19, 64, PER_ROW);
	float x[3 * 64], y1[3 * 19], y2[3 * 19];
	for (int i = 0; i < 3 * 64; i++)
		x[i] = frand();
	struct kpool *pool;
	ck_assert_int_eq(kpool_create(2, &pool), 0);
	kcpu_matmul(pool, &wm.k, x, 3, y1);
	ck_assert_int_eq(kcpu_matmul_isa(NULL, &wm.k, x, 3, y2, KCPU_ISA_AUTO), 0);
	for (int i = 0; i < 3 * 19; i++)
		ck_assert_float_eq(y1[i], y2[i]);
	y1[0] = 42.0f;
	ck_assert_int_eq(kcpu_matmul_isa(pool, &wm.k, x, 0, y1, KCPU_ISA_AUTO), 0);
	ck_assert_float_eq(y1[0], 42.0f);
	kpool_destroy(pool);
	wmat_free(&wm);
}
END_TEST

START_TEST(test_bad_args)
{
	float x[64] = { 0 }, y[4] = { 0 };
	int8_t q[4 * 33] = { 0 };
	struct kmat w = { DT_Q8_0, 2, 33, q, NULL, 0 };
	ck_assert_int_eq(kcpu_matmul_isa(NULL, &w, x, 1, y, KCPU_ISA_AUTO), ERR_INVAL);
	w.dtype = DT_I32;
	w.cols = 32;
	ck_assert_int_eq(kcpu_matmul_isa(NULL, &w, x, 1, y, KCPU_ISA_AUTO), ERR_INVAL);
	float s[3] = { 1, 1, 1 };
	struct kmat wi = { DT_I8, 2, 32, q, s, 3 }; /* n_scale neither 1 nor rows */
	ck_assert_int_eq(kcpu_matmul_isa(NULL, &wi, x, 1, y, KCPU_ISA_AUTO), ERR_INVAL);
	wi.n_scale = 2;
	ck_assert_int_eq(kcpu_matmul_isa(NULL, &wi, x, -1, y, KCPU_ISA_AUTO), ERR_INVAL);
	ck_assert_int_eq(kcpu_matmul_isa(NULL, &wi, x, 1, y, (enum kcpu_isa)99), ERR_UNSUPPORTED);
	ck_assert_int_eq(kcpu_matmul_isa(NULL, &wi, x, 1, y, KCPU_ISA_AUTO), 0);
	struct kmat big = { DT_F32, 1, (int64_t)INT32_MAX + 1, x, NULL, 0 }; /* never read */
	ck_assert_int_eq(kcpu_matmul_isa(NULL, &big, x, 1, y, KCPU_ISA_AUTO), ERR_INVAL);
	ck_assert_str_eq(kcpu_isa_name(KCPU_ISA_SCALAR), "scalar");
	ck_assert(kcpu_isa_supported(kcpu_isa_best()));
}
END_TEST

/* Batched Q8_0 decode (4 <= m <= 16; on AVX-512 with AMX the tile path,
 * else the packed GEMM) and the repacked weights (kcpu_pack) at every
 * m, 1 to 40, give each X row exactly the bits the packed GEMM gives it at
 * m = 17: the same exact block dots, scaled and summed in the same F32
 * order, so a sequence's logits do not depend on its batch. Ragged rows
 * (257: a last group of 1; 31) and an odd block count (96 columns: a half
 * pair) cover the edges. */
START_TEST(test_q8_batched_bits)
{
	if (!kcpu_isa_supported(KCPU_ISA_AVX512)) {
		fprintf(stderr, "SKIP: test_q8_batched_bits: %s\n", why_not(RAN_AVX512));
		return;
	}
	static const int64_t shapes[][2] = { { 257, 96 }, { 31, 2048 }, { 48, 32 } };
	static const int bm[] = { 4, 5, 13, 16 };
	struct kpool *pool;
	ck_assert_int_eq(kpool_create(2, &pool), 0);
	int bad = 0;
	for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
		const int64_t rows = shapes[si][0], cols = shapes[si][1];
		struct wmat wm;
		wmat_make(&wm, DT_Q8_0, rows, cols, PER_ROW);
		float *x = malloc((size_t)(40 * cols) * sizeof(float));
		float *y17 = malloc((size_t)(17 * rows) * sizeof(float));
		float *y = malloc((size_t)(40 * rows) * sizeof(float));
		for (int64_t i = 0; i < 40 * cols; i++)
			x[i] = frand() * (i % 7 == 0 ? 100.0f : 1.0f);
		memset(x + 2 * cols, 0, (size_t)cols * sizeof(float)); /* zero scales */
		ck_assert_int_eq(kcpu_matmul_isa(pool, &wm.k, x, 17, y17, KCPU_ISA_AVX512), 0);
		for (size_t mi = 0; mi < sizeof bm / sizeof *bm; mi++) {
			const int m = bm[mi];
			for (int64_t i = 0; i < m * rows; i++)
				y[i] = NAN;
			ck_assert_int_eq(kcpu_matmul_isa(pool, &wm.k, x, m, y, KCPU_ISA_AVX512), 0);
			ran(RAN_VNNI);
			if (amx_here()) /* 4 <= m <= 16 take the tiles */
				ran(RAN_AMX);
			for (int64_t i = 0; i < m * rows; i++)
				if (memcmp(&y[i], &y17[i], sizeof(float))) {
					if (bad++ < 5)
						fprintf(stderr, "  q8 m=%d rows=%lld cols=%lld y[%lld]: %.9g vs m=17 %.9g\n",
							m, (long long)rows, (long long)cols, (long long)i,
							y[i], y17[i]);
				}
		}
		/* the repacked copy: m = 40 against m = 17's bits on its first 17
		 * rows, then every m below 40 against m = 40 */
		wmat_pack(&wm);
		float *y40 = malloc((size_t)(40 * rows) * sizeof(float));
		ck_assert_int_eq(kcpu_matmul_isa(pool, &wm.k, x, 40, y40, KCPU_ISA_AVX512), 0);
		for (int64_t i = 0; i < 17 * rows; i++)
			if (memcmp(&y40[i], &y17[i], sizeof(float)) && bad++ < 5)
				fprintf(stderr, "  q8 packed m=40 y[%lld]: %.9g vs m=17 %.9g\n",
					(long long)i, y40[i], y17[i]);
		for (int m = 1; m < 40; m++) {
			for (int64_t i = 0; i < m * rows; i++)
				y[i] = NAN;
			ck_assert_int_eq(kcpu_matmul_isa(pool, &wm.k, x, m, y, KCPU_ISA_AVX512), 0);
			for (int64_t i = 0; i < m * rows; i++)
				if (memcmp(&y[i], &y40[i], sizeof(float))) {
					if (bad++ < 5)
						fprintf(stderr, "  q8 packed m=%d rows=%lld cols=%lld y[%lld]: %.9g vs m=40 %.9g\n",
							m, (long long)rows, (long long)cols, (long long)i,
							y[i], y40[i]);
				}
		}
		free(y40);
		free(x);
		free(y17);
		free(y);
		wmat_free(&wm);
	}
	kpool_destroy(pool);
	ck_assert_msg(bad == 0, "%d outputs differ from the m = 17 path's bits", bad);
}
END_TEST

/* The repacked float and I8 paths (kcpu_pack) give each X row the same
 * bits at every m from 1 to 40 (one F32 FMA per k in k order whatever
 * the tile: a sequence's logits do not depend on its batch), on ragged
 * rows (a last panel of 1; 31) and columns. */
START_TEST(test_packed_batch_bits)
{
	if (!kcpu_isa_supported(KCPU_ISA_AVX512)) {
		fprintf(stderr, "SKIP: test_packed_batch_bits: %s\n", why_not(RAN_AVX512));
		return;
	}
	static const enum dtype dts[] = { DT_F16, DT_BF16, DT_F8_E4M3, DT_I8 };
	static const int64_t shapes[][2] = { { 257, 96 }, { 31, 1000 }, { 48, 37 } };
	struct kpool *pool;
	ck_assert_int_eq(kpool_create(2, &pool), 0);
	int bad = 0;
	for (size_t di = 0; di < sizeof dts / sizeof *dts; di++)
		for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
			const int64_t rows = shapes[si][0], cols = shapes[si][1];
			struct wmat wm;
			wmat_make(&wm, dts[di], rows, cols, PACKED);
			float *x = malloc((size_t)(40 * cols) * sizeof(float));
			float *y40 = malloc((size_t)(40 * rows) * sizeof(float));
			float *y = malloc((size_t)(40 * rows) * sizeof(float));
			for (int64_t i = 0; i < 40 * cols; i++)
				x[i] = frand() * (i % 5 == 0 ? 30.0f : 1.0f);
			ck_assert_int_eq(kcpu_matmul_isa(pool, &wm.k, x, 40, y40, KCPU_ISA_AVX512), 0);
			for (int m = 1; m < 40; m++) {
				for (int64_t i = 0; i < m * rows; i++)
					y[i] = NAN;
				ck_assert_int_eq(kcpu_matmul_isa(pool, &wm.k, x, m, y, KCPU_ISA_AVX512), 0);
				for (int64_t i = 0; i < m * rows; i++)
					if (memcmp(&y[i], &y40[i], sizeof(float)) && bad++ < 5)
						fprintf(stderr, "  %s packed m=%d rows=%lld cols=%lld y[%lld]: %.9g vs m=40 %.9g\n",
							dtype_name(dts[di]), m, (long long)rows,
							(long long)cols, (long long)i, y[i], y40[i]);
			}
			free(x);
			free(y40);
			free(y);
			wmat_free(&wm);
		}
	kpool_destroy(pool);
	ck_assert_msg(bad == 0, "%d outputs depend on m", bad);
}
END_TEST

/* Every ISA's activation quantizer (matmul_impl.h: quant_act) gives the
 * bits of quant.c's, per 32-block and per row: row lengths that take the
 * 16-block batches and the tail, zeros, NaN, infinities, huge and tiny
 * values. */
START_TEST(test_quant_act_bits)
{
	const struct mm_kernels *ks[] = { mm_kernels_scalar(), mm_kernels_avx2(),
					  mm_kernels_avx512() };
	const enum kcpu_isa isas[] = { KCPU_ISA_SCALAR, KCPU_ISA_AVX2, KCPU_ISA_AVX512 };
	static const int64_t ns[] = { 32, 64, 480, 512, 544, 1024, 2048 + 96 };
	float x[2048 + 96], d1[80], d2[80];
	int8_t q1[2048 + 96], q2[2048 + 96];
	int bad = 0, runs = 0;
	for (size_t ki = 0; ki < 3; ki++) {
		if (!ks[ki] || !ks[ki]->quant_act || !kcpu_isa_supported(isas[ki]))
			continue;
		for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
			for (int pass = 0; pass < 4; pass++) {
				const int64_t n = ns[ni];
				for (int64_t i = 0; i < n; i++)
					x[i] = frand() * (pass == 1 ? 1e30f : pass == 2 ? 1e-30f : 3.0f);
				if (pass == 3) { /* specials, and whole zero blocks */
					x[5] = NAN;
					x[40 % n] = INFINITY;
					x[n - 1] = -INFINITY;
					for (int64_t i = 64; i < 96 && i < n; i++)
						x[i] = 0.0f;
				}
				for (int per_block = 0; per_block < 2; per_block++) {
					const int64_t nd = per_block ? n / 32 : 1;
					if (per_block)
						kcpu_quantize_act_q8_0(x, n, q1, d1);
					else
						kcpu_quantize_act_i8(x, n, q1, d1);
					ks[ki]->quant_act(x, n, q2, d2, per_block);
					bad += memcmp(q1, q2, (size_t)n) != 0;
					bad += memcmp(d1, d2, (size_t)nd * sizeof(float)) != 0;
					runs++;
				}
			}
	}
	ck_assert_int_gt(runs, 0);
	ck_assert_msg(bad == 0, "%d quantizations differ from quant.c", bad);
}
END_TEST

static Suite *matmul_suite(void)
{
	Suite *s = suite_create("matmul");
	TCase *tc = tcase_create("sweep");
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_sweep, 0, (int)(sizeof cases / sizeof *cases));
	tcase_add_test(tc, test_q8_batched_bits);
	tcase_add_test(tc, test_packed_batch_bits);
	tcase_add_test(tc, test_quant_act_bits);
	tcase_add_test(tc, test_entry_points);
	tcase_add_test(tc, test_bad_args);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	fprintf(stderr, "matmul paths here: best = %s\n", kcpu_isa_name(kcpu_isa_best()));
	ran_count = mmap(NULL, RAN__COUNT * sizeof(long), PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (ran_count == MAP_FAILED) {
		perror("mmap");
		return EXIT_FAILURE;
	}
	fflush(stdout); /* nothing buffered for the forked children to repeat */
	SRunner *sr = srunner_create(matmul_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	if (report_paths())
		failed++;
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
