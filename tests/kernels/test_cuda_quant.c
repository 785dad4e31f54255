/* tests/kernels/test_cuda_quant.c — the 8-bit GPU paths (kernels/cuda/
 * kcuda_quant.h) against the CPU kernels. Exit 77 without a GPU.
 *
 * k_gemv_w8: I8 and F8 E4M3 (per-row and per-tensor scale) and Q8_0 weights
 *   with random codes (every byte value but the FP8 NaNs), at (N, K) =
 *   (1000, 4096), (64, 96), (4096, 14336) and T in {1, 3, 16, 33} (T 1 and 16
 *   for the big shape: its CPU reference is slow), X F16 and BF16, accumulate
 *   0 (Y pre-filled with NaN) and 1, against kcpu_matmul_ref on the same
 *   weights and the same 16-bit-rounded X; Q8_0 also repacked
 *   (k_q8_0_repack, checked byte for byte) through k_gemv_q8_0r.
 * k_quant_rows: INT8 codes and scales exactly those of kcpu_quantize_act_i8,
 *   FP8 exactly those of kcpu_quantize_f8 (the CPU's per-row FP8 rule), for
 *   X F32 / F16 / BF16 with an all-zero row and outlier rows.
 * k_gemm_w8a8: X -> k_quant_rows -> GEMM. INT8 against kcpu_matmul_ref_xq
 *   (exact int32 dot products, then the same F32 scaling: bit-exact expected);
 *   FP8 against a double product of the quantized operands. Per-row and
 *   per-tensor weight scales, accumulate 0 and 1, T below 32 (padded in the
 *   workspace) and above, one case big enough that the accumulate path takes
 *   two row chunks; argument errors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_gemm.h"
#include "kernels/cuda/kcuda_quant.h"
#include "tests/kernels/kcheck.h"

static void *xmalloc(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);
	if (!p)
		kc_fail("out of memory (%zu bytes)", bytes);
	return p;
}

/* ---- weights ---------------------------------------------------------------- */

enum wkind { W_I8_ROW, W_I8_TENSOR, W_F8_ROW, W_F8_TENSOR, W_Q8_0, W__COUNT };
static const char *const wkind_name[] = {"i8/row", "i8/tensor", "f8/row", "f8/tensor", "q8_0"};

struct wmat {
	struct kmat m;     /* host view for the CPU kernels */
	struct kmat abs_m; /* |w|: for the sum of |w||x| in the tolerance */
	void *data, *abs_data;
	float *scale;
	size_t bytes;
};

static uint8_t rand_f8(struct kc_rng *r)
{
	uint8_t b = (uint8_t)kc_below(r, 256);
	return (b & 0x7f) == 0x7f ? (uint8_t)(b - 1) : b; /* no NaN codes */
}

static void make_weights(struct kc_rng *r, enum wkind kind, int n, int k, struct wmat *w)
{
	memset(w, 0, sizeof *w);
	const bool per_row = kind == W_I8_ROW || kind == W_F8_ROW;
	w->m.rows = n;
	w->m.cols = k;
	if (kind == W_Q8_0) {
		const size_t nb = (size_t)n * (k / Q8_0_BLOCK);
		struct q8_0_block *b = xmalloc(nb * sizeof *b), *a = xmalloc(nb * sizeof *a);
		for (size_t i = 0; i < nb; i++) {
			b[i].d = f32_to_f16(kc_uniform(r, 0.002f, 0.03f));
			if (kc_below(r, 16) == 0)
				b[i].d |= 0x8000; /* a negative block scale now and then */
			a[i].d = b[i].d & 0x7fff;
			for (int j = 0; j < Q8_0_BLOCK; j++) {
				b[i].qs[j] = (int8_t)((int)kc_below(r, 255) - 127);
				a[i].qs[j] = (int8_t)abs(b[i].qs[j]);
			}
		}
		w->data = b;
		w->abs_data = a;
		w->bytes = nb * sizeof *b;
		w->m.dtype = DT_Q8_0;
	} else {
		const size_t cnt = (size_t)n * k;
		uint8_t *q = xmalloc(cnt), *a = xmalloc(cnt);
		const bool f8 = kind == W_F8_ROW || kind == W_F8_TENSOR;
		for (size_t i = 0; i < cnt; i++) {
			if (f8) {
				q[i] = rand_f8(r);
				a[i] = q[i] & 0x7f;
			} else {
				int v = (int)kc_below(r, 255) - 127;
				q[i] = (uint8_t)(int8_t)v;
				a[i] = (uint8_t)(int8_t)abs(v);
			}
		}
		w->data = q;
		w->abs_data = a;
		w->bytes = cnt;
		w->m.dtype = f8 ? DT_F8_E4M3 : DT_I8;
		w->m.n_scale = per_row ? n : 1;
		w->scale = xmalloc((size_t)w->m.n_scale * sizeof(float));
		for (int64_t i = 0; i < w->m.n_scale; i++)
			w->scale[i] = kc_uniform(r, 0.001f, 0.02f) * (f8 ? 0.05f : 1.0f);
		w->m.scale = w->scale;
	}
	w->m.data = w->data;
	w->abs_m = w->m;
	w->abs_m.data = w->abs_data;
}

static void free_weights(struct wmat *w)
{
	free(w->data);
	free(w->abs_data);
	free(w->scale);
}

/* ---- k_gemv_w8 ------------------------------------------------------------------ */

/* Tolerance: GPU and CPU both multiply the same dequantized F32 weights by
 * the same F32 X and accumulate in F32, in different orders (the GPU also
 * applies an I8/F8 row scale after the sum instead of before each product:
 * one rounding more per output). The difference is a few ulps of the
 * partial sums, below ~1e-6 of S = sum |w||x| (+ |y0| when accumulating)
 * for these K; we allow 2e-5 * S. A dropped or doubled 16-byte weight
 * group (~16/K of S, >= 1e-3 here), a wrong scale, row or token is far
 * above it. */
#define GEMV_TOL 2e-5f

static size_t g_cases;

/* misalign: X placed 2 bytes past a 16-byte boundary (the element-wise
 * staging path instead of 16-byte loads). */
static void gemv_case(struct kc_rng *r, enum wkind kind, int n, int k, int t, enum dtype x_dt,
                      int accumulate, int misalign)
{
	struct wmat w;
	make_weights(r, kind, n, k, &w);
	const size_t nx = (size_t)t * k, ny = (size_t)t * n;
	float *x = xmalloc(nx * sizeof(float)), *xa = xmalloc(nx * sizeof(float));
	kc_fill(r, x, nx, -1.0f, 1.0f);
	kc_round(x, nx, x_dt);
	for (size_t i = 0; i < nx; i++)
		xa[i] = fabsf(x[i]);
	float *y0 = xmalloc(ny * sizeof(float)), *ref = xmalloc(ny * sizeof(float));
	float *sabs = xmalloc(ny * sizeof(float)), *got = xmalloc(ny * sizeof(float));
	kc_fill(r, y0, ny, -1.0f, 1.0f);
	kcpu_matmul_ref(&w.m, x, t, ref);
	kcpu_matmul_ref(&w.abs_m, xa, t, sabs);

	void *xp = kc_pack(x, nx, x_dt);
	void *d_w = kc_upload(w.data, w.bytes);
	const size_t xbytes = nx * (x_dt == DT_F32 ? 4 : 2);
	char *d_xbuf = kc_dev_alloc(xbytes + 16);
	void *d_x = d_xbuf + (misalign ? 2 : 0);
	kc_ok(k_cuda_memcpy_h2d(d_x, xp, xbytes), "upload x");
	float *d_s = w.scale ? kc_upload(w.scale, (size_t)w.m.n_scale * sizeof(float)) : NULL;
	float *d_y = kc_dev_alloc(ny * sizeof(float));

	/* ref and the norm S (+ |y0|) once; outputs are compared as got / S. */
	float *norm = xmalloc(ny * sizeof(float));
	for (size_t i = 0; i < ny; i++) {
		float s = sabs[i];
		if (accumulate) {
			ref[i] += y0[i];
			s += fabsf(y0[i]);
		}
		norm[i] = s > 0.0f ? s : 1.0f;
		ref[i] /= norm[i];
	}
	/* Variant 0: k_gemv_w8; variant 1 (Q8_0): k_q8_0_repack + k_gemv_q8_0r,
	 * whose repacked codes and scales are checked byte for byte too. */
	void *d_qs = NULL, *d_d = NULL;
	for (int variant = 0; variant < (kind == W_Q8_0 ? 2 : 1); variant++) {
		if (accumulate)
			kc_ok(k_cuda_memcpy_h2d(d_y, y0, ny * sizeof(float)), "upload y0");
		else
			kc_ok(k_cuda_memset_async(NULL, d_y, 0xff, ny * sizeof(float)),
			      "NaN-fill y");
		if (variant == 0) {
			kc_ok(k_gemv_w8(NULL, d_w, w.m.dtype, d_s, (int)w.m.n_scale, n, k, d_x,
			                x_dt, t, d_y, accumulate),
			      "k_gemv_w8");
		} else {
			const size_t nb = (size_t)n * (k / Q8_0_BLOCK);
			d_qs = kc_dev_alloc((size_t)n * k);
			d_d = kc_dev_alloc(nb * 2);
			kc_ok(k_q8_0_repack(NULL, d_w, n, k, d_qs, d_d), "k_q8_0_repack");
			kc_ok(k_gemv_q8_0r(NULL, d_qs, d_d, n, k, d_x, x_dt, t, d_y, accumulate),
			      "k_gemv_q8_0r");
			int8_t *qs = xmalloc((size_t)n * k);
			uint16_t *dd = xmalloc(nb * 2);
			kc_sync("k_q8_0_repack");
			kc_download(qs, d_qs, (size_t)n * k);
			kc_download(dd, d_d, nb * 2);
			const struct q8_0_block *b = w.data;
			for (size_t i = 0; i < nb; i++)
				if (dd[i] != b[i].d ||
				    memcmp(qs + i * Q8_0_BLOCK, b[i].qs, Q8_0_BLOCK))
					kc_fail("k_q8_0_repack: block %zu differs (N=%d K=%d)", i,
					        n, k);
			free(qs);
			free(dd);
		}
		kc_sync("k_gemv_w8");
		kc_download(got, d_y, ny * sizeof(float));
		for (size_t i = 0; i < ny; i++)
			got[i] /= norm[i];
		char what[160];
		snprintf(what, sizeof what, "gemv %s%s N=%d K=%d T=%d x=%s%s acc=%d (/ sum|w||x|)",
		         wkind_name[kind], variant ? " repacked" : "", n, k, t, dtype_name(x_dt),
		         misalign ? " misaligned" : "", accumulate);
		kc_compare(what, got, ref, ny, GEMV_TOL, 0.0f);
		g_cases++;
	}
	kc_dev_free(d_qs);
	kc_dev_free(d_d);
	free(norm);

	kc_dev_free(d_w);
	kc_dev_free(d_xbuf);
	kc_dev_free(d_s);
	kc_dev_free(d_y);
	free(xp);
	free(x);
	free(xa);
	free(y0);
	free(ref);
	free(sabs);
	free(got);
	free_weights(&w);
}

static void test_gemv(struct kc_rng *r)
{
	static const int shapes[][2] = {{1000, 4096}, {64, 96}, {4096, 14336}};
	static const int ts[] = {1, 3, 16, 33};
	int combo = 0;
	for (int kind = 0; kind < W__COUNT; kind++) {
		for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
			const bool big = shapes[s][1] > 8192;
			/* The big shape's CPU reference costs ~1 s per T: per-row
			 * I8/F8 and Q8_0 only, T 1 and 16. */
			if (big && (kind == W_I8_TENSOR || kind == W_F8_TENSOR))
				continue;
			for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
				if (big && ts[ti] != 1 && ts[ti] != 16)
					continue;
				/* X dtype and accumulate rotate so every weight kind
				 * and shape meets all four pairs. */
				const enum dtype x_dt = (combo & 1) ? DT_BF16 : DT_F16;
				const int acc = (combo >> 1) & 1;
				combo++;
				gemv_case(r, (enum wkind)kind, shapes[s][0], shapes[s][1], ts[ti],
				          x_dt, acc, 0);
			}
		}
	}
	/* F32 X (accepted too) and 16-bit X not 16-byte aligned: the
	 * element-wise staging path, with K over one 48 KB chunk (T 1: two
	 * chunks of 7168) and 16-token groups of 512 (T 16). */
	gemv_case(r, W_I8_ROW, 48, 512, 5, DT_F32, 1, 0);
	gemv_case(r, W_F8_ROW, 100, 14336, 1, DT_BF16, 0, 1);
	gemv_case(r, W_Q8_0, 100, 4096, 16, DT_F16, 1, 1);
	gemv_case(r, W_I8_TENSOR, 37, 1024, 16, DT_F32, 0, 0);
}

static void test_gemv_errors(void)
{
	float *d = kc_dev_alloc(4096);
	const float *s = (const float *)d;
	int rc = k_gemv_w8(NULL, d, DT_I8, s, 1, 4, 24, d, DT_F16, 1, d, 0);
	if (rc != ERR_UNSUPPORTED)
		kc_fail("k_gemv_w8 I8 with K %% 16 != 0: %d, want ERR_UNSUPPORTED", rc);
	rc = k_gemv_w8(NULL, d, DT_Q8_0, NULL, 0, 4, 48, d, DT_F16, 1, d, 0);
	if (rc != ERR_INVAL)
		kc_fail("k_gemv_w8 Q8_0 with K %% 32 != 0: %d, want ERR_INVAL", rc);
	rc = k_gemv_w8(NULL, d, DT_I8, s, 3, 4, 32, d, DT_F16, 1, d, 0);
	if (rc != ERR_INVAL)
		kc_fail("k_gemv_w8 with 3 scales for 4 rows: %d, want ERR_INVAL", rc);
	rc = k_gemv_w8(NULL, d, DT_F16, NULL, 0, 4, 32, d, DT_F16, 1, d, 0);
	if (rc != ERR_UNSUPPORTED)
		kc_fail("k_gemv_w8 with F16 weights: %d, want ERR_UNSUPPORTED", rc);
	rc = k_gemv_w8(NULL, d, DT_I8, s, 1, 4, 32, d, DT_I8, 1, d, 0);
	if (rc != ERR_INVAL)
		kc_fail("k_gemv_w8 with I8 X: %d, want ERR_INVAL", rc);
	rc = k_gemv_w8(NULL, d, DT_I8, s, 1, 0, 32, d, DT_F16, 1, d, 0);
	if (rc != ERR_INVAL)
		kc_fail("k_gemv_w8 with N 0: %d, want ERR_INVAL", rc);
	rc = k_q8_0_repack(NULL, d, 4, 48, d, d);
	if (rc != ERR_INVAL)
		kc_fail("k_q8_0_repack with K %% 32 != 0: %d, want ERR_INVAL", rc);
	rc = k_q8_0_repack(NULL, d, 4, 32, (char *)d + 8, d);
	if (rc != ERR_INVAL)
		kc_fail("k_q8_0_repack into misaligned codes: %d, want ERR_INVAL", rc);
	rc = k_gemv_q8_0r(NULL, d, d, 4, 48, d, DT_F16, 1, d, 0);
	if (rc != ERR_INVAL)
		kc_fail("k_gemv_q8_0r with K %% 32 != 0: %d, want ERR_INVAL", rc);
	kc_dev_free(d);
	printf("ok gemv argument errors\n");
}

/* ---- k_quant_rows ----------------------------------------------------------------- */

/* X [t, k]: rows of different magnitudes, row 1 all zero (scale 0, codes 0),
 * a few outliers. Rounded to x_dt. */
static void make_act(struct kc_rng *r, float *x, int t, int k, enum dtype x_dt)
{
	for (int i = 0; i < t; i++) {
		float mag = i == 1 ? 0.0f : kc_uniform(r, 0.01f, 8.0f);
		for (int j = 0; j < k; j++)
			x[(size_t)i * k + j] = mag * kc_uniform(r, -1.0f, 1.0f);
		if (i != 1 && kc_below(r, 2))
			x[(size_t)i * k + kc_below(r, (uint32_t)k)] = mag * 50.0f;
	}
	kc_round(x, (size_t)t * k, x_dt);
}

/* Runs k_quant_rows on x; returns codes (as float values) and scales. */
static void gpu_quant(const float *x, int t, int k, enum dtype x_dt, enum dtype q_dt, float *codes,
                      float *scales, uint8_t *raw)
{
	const size_t nx = (size_t)t * k;
	void *xp = kc_pack(x, nx, x_dt);
	void *d_x = kc_upload(xp, nx * (x_dt == DT_F32 ? 4 : 2));
	void *d_q = kc_dev_alloc(nx);
	float *d_s = kc_dev_alloc((size_t)t * sizeof(float));
	kc_ok(k_quant_rows(NULL, d_x, x_dt, t, k, q_dt, d_q, d_s), "k_quant_rows");
	kc_sync("k_quant_rows");
	kc_download(raw, d_q, nx);
	kc_download(scales, d_s, (size_t)t * sizeof(float));
	for (size_t i = 0; i < nx; i++)
		codes[i] = q_dt == DT_I8 ? (float)(int8_t)raw[i] : f8e4m3_to_f32(raw[i]);
	kc_dev_free(d_x);
	kc_dev_free(d_q);
	kc_dev_free(d_s);
	free(xp);
}

static void test_quant_rows(struct kc_rng *r)
{
	/* every X dtype at every width: 16-bit X with k % 8 == 0 takes the
	 * vector kernel (k = 1000: fewer groups than threads; 14336: a partial
	 * double step), the rest the scalar one */
	static const int shapes[][2] = {{1, 4096}, {37, 1000}, {5, 14336}, {3, 7}};
	static const enum dtype xdts[] = {DT_F16, DT_BF16, DT_F32};
	for (size_t c = 0; c < 3 * sizeof shapes / sizeof shapes[0]; c++) {
		const size_t s = c / 3;
		const int t = shapes[s][0], k = shapes[s][1];
		const size_t nx = (size_t)t * k;
		const enum dtype x_dt = xdts[c % 3];
		float *x = xmalloc(nx * sizeof(float));
		float *codes = xmalloc(nx * sizeof(float)), *ref = xmalloc(nx * sizeof(float));
		float *sc = xmalloc((size_t)t * sizeof(float)),
		      *sref = xmalloc((size_t)t * sizeof(float));
		uint8_t *raw = xmalloc(nx), *qref = xmalloc(nx);
		make_act(r, x, t, k, x_dt);
		char what[128];

		/* INT8: kcpu_quantize_act_i8 row by row. */
		gpu_quant(x, t, k, x_dt, DT_I8, codes, sc, raw);
		for (int i = 0; i < t; i++)
			kcpu_quantize_act_i8(x + (size_t)i * k, k, (int8_t *)qref + (size_t)i * k,
			                     &sref[i]);
		for (size_t i = 0; i < nx; i++)
			ref[i] = (float)(int8_t)qref[i];
		snprintf(what, sizeof what, "quant_rows i8 codes t=%d k=%d x=%s", t, k,
		         dtype_name(x_dt));
		kc_compare(what, codes, ref, nx, 0.0f, 0.0f);
		snprintf(what, sizeof what, "quant_rows i8 scales t=%d k=%d", t, k);
		kc_compare(what, sc, sref, (size_t)t, 0.0f, 0.0f);

		/* FP8: the CPU's per-row FP8 quantizer on the same F32 rows. */
		gpu_quant(x, t, k, x_dt, DT_F8_E4M3, codes, sc, raw);
		struct kmat xm = {.dtype = DT_F32, .rows = t, .cols = k, .data = x};
		kc_ok(kcpu_quantize_f8(&xm, qref, sref), "kcpu_quantize_f8");
		for (size_t i = 0; i < nx; i++)
			ref[i] = f8e4m3_to_f32(qref[i]);
		snprintf(what, sizeof what, "quant_rows f8 codes t=%d k=%d x=%s", t, k,
		         dtype_name(x_dt));
		kc_compare(what, codes, ref, nx, 0.0f, 0.0f);
		snprintf(what, sizeof what, "quant_rows f8 scales t=%d k=%d", t, k);
		kc_compare(what, sc, sref, (size_t)t, 0.0f, 0.0f);
		if (t > 1 && (sc[1] != 0.0f || codes[k] != 0.0f))
			kc_fail("quant_rows: the all-zero row must give scale 0 and codes 0");

		free(x);
		free(codes);
		free(ref);
		free(sc);
		free(sref);
		free(raw);
		free(qref);
	}
	int rc = k_quant_rows(NULL, (void *)16, DT_F16, 1, 16, DT_F16, (void *)16, (float *)16);
	if (rc != ERR_UNSUPPORTED)
		kc_fail("k_quant_rows to F16: %d, want ERR_UNSUPPORTED", rc);
	rc = k_quant_rows(NULL, (void *)16, DT_I8, 1, 16, DT_I8, (void *)16, (float *)16);
	if (rc != ERR_INVAL)
		kc_fail("k_quant_rows from I8: %d, want ERR_INVAL", rc);
}

/* ---- k_gemm_w8a8 ------------------------------------------------------------------ */

/* FP8 tolerance, per output, relative to S = sum |xq||wq| * xs * ws (+ |y0|):
 * the products of two E4M3 values are exact in F32; Hopper's FP8 tensor
 * cores add them with fewer than 24 significant bits (about 14 retained
 * before cuBLAS promotes partial sums into F32). Measured on an H200
 * (2026-11-30): up to 5.8e-4 of S at K = 256, 3.1e-4 at K = 2048 (the first
 * guess, 2^-12, was too tight). 2^-10 keeps a 1.7x margin and still catches
 * a lost 16-wide K group (~16/K of S >= 4e-3 here), a wrong scale or index. */
#define FP8_TOL (1.0f / 1024.0f)

static void w8a8_case(struct k_blas *h, struct kc_rng *r, enum dtype w_dt, int per_row, int n,
                      int k, int t, int accumulate)
{
	const bool f8 = w_dt == DT_F8_E4M3;
	struct wmat w;
	make_weights(r,
	             f8 ? (per_row ? W_F8_ROW : W_F8_TENSOR) : (per_row ? W_I8_ROW : W_I8_TENSOR),
	             n, k, &w);
	const size_t nx = (size_t)t * k, ny = (size_t)t * n;
	float *x = xmalloc(nx * sizeof(float));
	make_act(r, x, t, k, DT_F16);
	float *y0 = xmalloc(ny * sizeof(float)), *ref = xmalloc(ny * sizeof(float));
	float *got = xmalloc(ny * sizeof(float));
	kc_fill(r, y0, ny, -1.0f, 1.0f);

	void *xp = kc_pack(x, nx, DT_F16);
	void *d_x = kc_upload(xp, nx * 2);
	void *d_xq = kc_dev_alloc(nx);
	float *d_xs = kc_dev_alloc((size_t)t * sizeof(float));
	void *d_w = kc_upload(w.data, w.bytes);
	float *d_ws = kc_upload(w.scale, (size_t)w.m.n_scale * sizeof(float));
	float *d_y = kc_dev_alloc(ny * sizeof(float));
	void *stream = NULL; /* the handle's stream is the default stream here */
	if (accumulate)
		kc_ok(k_cuda_memcpy_h2d(d_y, y0, ny * sizeof(float)), "upload y0");
	else
		kc_ok(k_cuda_memset_async(stream, d_y, 0xff, ny * sizeof(float)), "NaN-fill y");
	kc_ok(k_quant_rows(stream, d_x, DT_F16, t, k, w_dt, d_xq, d_xs), "k_quant_rows");
	kc_ok(
	    k_gemm_w8a8(h, d_w, w_dt, d_ws, (int)w.m.n_scale, n, k, d_xq, d_xs, t, d_y, accumulate),
	    "k_gemm_w8a8");
	kc_sync("k_gemm_w8a8");
	kc_download(got, d_y, ny * sizeof(float));

	char what[160];
	snprintf(what, sizeof what, "w8a8 %s/%s N=%d K=%d T=%d acc=%d", dtype_name(w_dt),
	         per_row ? "row" : "tensor", n, k, t, accumulate);
	if (!f8) {
		/* Exact int32 sums, then (float)sum * (w_scale * x_scale) on both
		 * sides; k_quant_rows is the CPU quantizer (checked above). */
		kcpu_matmul_ref_xq(&w.m, x, t, ref);
		float amax = 0.0f;
		for (size_t i = 0; i < ny; i++) {
			if (accumulate)
				ref[i] += y0[i];
			if (fabsf(ref[i]) > amax)
				amax = fabsf(ref[i]);
		}
		kc_compare(what, got, ref, ny, 1e-6f * amax, 1e-6f);
	} else {
		/* Double product of the GPU's own FP8 codes and scales. */
		uint8_t *xq = xmalloc(nx);
		float *xs = xmalloc((size_t)t * sizeof(float)), *xv = xmalloc(nx * sizeof(float));
		kc_download(xq, d_xq, nx);
		kc_download(xs, d_xs, (size_t)t * sizeof(float));
		for (size_t i = 0; i < nx; i++)
			xv[i] = f8e4m3_to_f32(xq[i]);
		const uint8_t *wq = w.data;
		float *wrow = xmalloc((size_t)k * sizeof(float));
		for (int j = 0; j < n; j++) {
			for (int l = 0; l < k; l++)
				wrow[l] = f8e4m3_to_f32(wq[(size_t)j * k + l]);
			const double ws = w.scale[w.m.n_scale == 1 ? 0 : j];
			for (int i = 0; i < t; i++) {
				const float *xr = xv + (size_t)i * k;
				double s = 0, sa = 0;
				for (int l = 0; l < k; l++) {
					s += (double)xr[l] * wrow[l];
					sa += fabs((double)xr[l] * wrow[l]);
				}
				const size_t o = (size_t)i * n + j;
				double v = s * ws * xs[i], d = sa * ws * xs[i];
				if (accumulate) {
					v += y0[o];
					d += fabs(y0[o]);
				}
				if (!(d > 0))
					d = 1;
				ref[o] = (float)(v / d);
				got[o] = (float)(got[o] / d);
			}
		}
		strncat(what, " (/ sum|x||w|)", sizeof what - strlen(what) - 1);
		kc_compare(what, got, ref, ny, FP8_TOL, 0.0f);
		free(xq);
		free(xs);
		free(xv);
		free(wrow);
	}
	kc_dev_free(d_x);
	kc_dev_free(d_xq);
	kc_dev_free(d_xs);
	kc_dev_free(d_w);
	kc_dev_free(d_ws);
	kc_dev_free(d_y);
	free(xp);
	free(x);
	free(y0);
	free(ref);
	free(got);
	free_weights(&w);
}

static void test_w8a8(struct kc_rng *r)
{
	struct k_cuda_props p;
	kc_ok(k_cuda_props(0, &p), "k_cuda_props");
	struct k_blas *h = NULL;
	kc_ok(k_blas_create(NULL, &h), "k_blas_create");

	struct {
		int n, k, t;
	} shapes[] = {/* T < 32 goes through the padded path */
	              {1008, 1024, 1},
	              {64, 96, 7},
	              {128, 256, 31},
	              {256, 4096, 33},
	              {512, 2048, 64},
	              /* accumulate: two row chunks of the 24 MiB scratch */
	              {65536, 32, 112}};
	const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
	for (int q = 0; q < 2; q++) {
		const enum dtype w_dt = q ? DT_F8_E4M3 : DT_I8;
		if (w_dt == DT_F8_E4M3 && !p.has_fp8) {
			printf("SKIP w8a8 FP8: %s (cc %d.%d) has no FP8 tensor cores\n", p.name,
			       p.cc_major, p.cc_minor);
			float *d = kc_dev_alloc(4096);
			int rc = k_gemm_w8a8(h, d, DT_F8_E4M3, d, 1, 16, 16, d, d, 1, d, 0);
			if (rc != ERR_UNSUPPORTED)
				kc_fail("FP8 W8A8 without FP8: %d, want ERR_UNSUPPORTED", rc);
			kc_dev_free(d);
			continue;
		}
		for (int s = 0; s < n_shapes; s++) {
			const bool last = s == n_shapes - 1;
			for (int acc = 0; acc < 2; acc++) {
				if (last && !acc)
					continue;
				w8a8_case(h, r, w_dt, (s + acc) & 1, shapes[s].n, shapes[s].k,
				          shapes[s].t, acc);
			}
		}
	}

	float *d = kc_dev_alloc(4096);
	int rc = k_gemm_w8a8(h, d, DT_I8, d, 1, 24, 32, d, d, 1, d, 0);
	if (rc != ERR_UNSUPPORTED)
		kc_fail("W8A8 with N %% 16 != 0: %d, want ERR_UNSUPPORTED", rc);
	rc = k_gemm_w8a8(h, d, DT_I8, d, 1, 32, 40, d, d, 1, d, 0);
	if (rc != ERR_UNSUPPORTED)
		kc_fail("W8A8 with K %% 16 != 0: %d, want ERR_UNSUPPORTED", rc);
	rc = k_gemm_w8a8(h, d, DT_I8, d, 3, 32, 32, d, d, 1, d, 0);
	if (rc != ERR_INVAL)
		kc_fail("W8A8 with 3 weight scales: %d, want ERR_INVAL", rc);
	rc = k_gemm_w8a8(h, d, DT_Q8_0, d, 1, 32, 32, d, d, 1, d, 0);
	if (rc != ERR_UNSUPPORTED)
		kc_fail("W8A8 with Q8_0: %d, want ERR_UNSUPPORTED", rc);
	kc_dev_free(d);
	printf("ok w8a8 argument errors\n");
	k_blas_destroy(h);
}

/* ---- k_dequant_w8 (the dequantizing GEMM's first half) ------------------------ */

/* The GPU computes code * scale in F32 and rounds once to out_dt, as the CPU
 * reference kcpu_dequant_row then kc_round does: equal bit for bit. */
static void test_dequant(struct kc_rng *r)
{
	static const enum dtype outs[] = {DT_F16, DT_BF16, DT_F32};
	for (int kind = 0; kind < W__COUNT; kind++) {
		for (int o = 0; o < 3; o++) {
			const int n = 37 + 5 * kind, k = 96;
			struct wmat w;
			make_weights(r, (enum wkind)kind, n, k, &w);
			const size_t cnt = (size_t)n * k, esz = outs[o] == DT_F32 ? 4 : 2;
			float *ref = xmalloc(cnt * sizeof(float)), *got = xmalloc(cnt * sizeof(float));
			for (int row = 0; row < n; row++)
				kcpu_dequant_row(&w.m, row, ref + (size_t)row * k);
			kc_round(ref, cnt, outs[o]);
			void *d_w = kc_upload(w.data, w.bytes), *d_codes = d_w, *d_d = NULL;
			float *d_s = w.scale ? kc_upload(w.scale, (size_t)w.m.n_scale * 4) : NULL;
			if (kind == W_Q8_0) {
				d_codes = kc_dev_alloc(cnt);
				d_d = kc_dev_alloc(cnt / Q8_0_BLOCK * 2);
				kc_ok(k_q8_0_repack(NULL, d_w, n, k, d_codes, d_d), "k_q8_0_repack");
			}
			void *d_out = kc_dev_alloc(cnt * esz);
			kc_ok(k_dequant_w8(NULL, d_codes, w.m.dtype, d_s, (int)w.m.n_scale, d_d, n, k,
			                   d_out, outs[o]),
			      "k_dequant_w8");
			kc_sync("k_dequant_w8");
			void *h = xmalloc(cnt * esz);
			kc_download(h, d_out, cnt * esz);
			kc_unpack(h, cnt, outs[o], got);
			char what[96];
			snprintf(what, sizeof what, "dequant %s -> %s N=%d K=%d", wkind_name[kind],
			         dtype_name(outs[o]), n, k);
			kc_compare(what, got, ref, cnt, 0.0f, 0.0f);
			if (d_codes != d_w)
				kc_dev_free(d_codes);
			kc_dev_free(d_w);
			kc_dev_free(d_d);
			kc_dev_free(d_s);
			kc_dev_free(d_out);
			free(h);
			free(ref);
			free(got);
			free_weights(&w);
		}
	}
	int rc = k_dequant_w8(NULL, &rc, DT_Q8_0, NULL, 0, NULL, 4, 32, &rc, DT_F16);
	if (rc != ERR_INVAL)
		kc_fail("k_dequant_w8 Q8_0 without scales: %d, want ERR_INVAL", rc);
	rc = k_dequant_w8(NULL, &rc, DT_F16, NULL, 0, NULL, 4, 32, &rc, DT_F16);
	if (rc != ERR_UNSUPPORTED)
		kc_fail("k_dequant_w8 of F16: %d, want ERR_UNSUPPORTED", rc);
}

int main(void)
{
	kc_require_gpu("test_cuda_quant");
	struct kc_rng r;
	kc_seed(&r, 20261129);
	test_gemv_errors();
	test_gemv(&r);
	printf("%zu gemv cases\n", g_cases);
	test_quant_rows(&r);
	test_dequant(&r);
	test_w8a8(&r);
	return kc_finish();
}
