/* tests/kernels/test_cuda_gemv.c — k_gemv and k_gemv_rows (kernels/cuda/
 * kcuda_gemv.h) against kcpu_matmul_ref on the same weights and the same
 * 16-bit-rounded X. Exit 77 without a GPU.
 *
 * Weights: F16 and BF16 (random values in [-1, 1)), I8 and F8 E4M3 with
 * per-row scales, per-tensor scales and no scale (NULL), and Q8_0 in the
 * repacked layout (codes + F16 block scales, split on the host from the CPU
 * blocks the reference reads; a negative block scale now and then). Random
 * codes take every byte value but the FP8 NaNs. Shapes (N, K), g the K
 * granularity (8, 16, 32): (1, g) the minimum, (5, 37 g) an odd multiple,
 * (1003, 1024), (37, 4096), (67, 14336) (several steps per row, the last
 * one partial); no N a multiple of the rows per CTA. T = 1..8 and 11 (a
 * second token group, partly filled); X F16 and BF16; accumulate 0 (Y
 * NaN-poisoned first) and 1; every case
 * with 2, 4 (k_gemv's choice) and 8 rows per CTA; a guard past Y must stay
 * untouched. Then the argument errors.
 *
 * k_gemv_epi: its SwiGLU and RMSNorm epilogues against the unfused steps
 * (k_gemv, then k_silu_mul or k_add_rmsnorm) on the same inputs, bit for
 * bit (memcmp of the outputs and of Y), for every weight kind, ragged N,
 * T up to two token groups, 16-bit and F32 outputs; the counters must be
 * zero again after each launch (each case launches twice), guards past the
 * outputs untouched; then its argument errors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_gemv.h"
#include "kernels/cuda/kcuda_ops.h"
#include "tests/kernels/kcheck.h"

static void *xmalloc(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);
	if (!p)
		kc_fail("out of memory (%zu bytes)", bytes);
	return p;
}

/* ---- weights ------------------------------------------------------------------ */

enum wkind {
	W_F16,
	W_BF16,
	W_I8_ROW,
	W_I8_TENSOR,
	W_I8_NONE,
	W_F8_ROW,
	W_F8_TENSOR,
	W_Q8R,
	W__COUNT
};
static const char *const wkind_name[] = {"f16",        "bf16",   "i8/row",    "i8/tensor",
                                         "i8/noscale", "f8/row", "f8/tensor", "q8_0r"};

static int granularity(enum wkind kind)
{
	return kind <= W_BF16 ? 8 : kind == W_Q8R ? 32 : 16;
}

struct wmat {
	struct kmat m;     /* host view for kcpu_matmul_ref */
	struct kmat abs_m; /* |w|: for sum |w||x| in the tolerance */
	void *data, *abs_data;
	float *scale;
	void *dev; /* what k_gemv reads: W, or the Q8_0 codes [n, k] */
	size_t dev_bytes;
	uint16_t *q8_d; /* Q8_0: F16 scales [n, k / 32] */
	enum dtype w_dt;
};

static uint8_t rand_f8(struct kc_rng *r)
{
	uint8_t b = (uint8_t)kc_below(r, 256);
	return (b & 0x7f) == 0x7f ? (uint8_t)(b - 1) : b; /* no NaN codes */
}

static void make_16bit(struct kc_rng *r, enum dtype dt, int n, int k, struct wmat *w)
{
	const size_t cnt = (size_t)n * k;
	float *v = xmalloc(cnt * sizeof(float));
	kc_fill(r, v, cnt, -1.0f, 1.0f);
	kc_round(v, cnt, dt);
	w->data = kc_pack(v, cnt, dt);
	for (size_t i = 0; i < cnt; i++)
		v[i] = fabsf(v[i]);
	w->abs_data = kc_pack(v, cnt, dt);
	free(v);
	w->m.dtype = dt;
	w->dev = w->data;
	w->dev_bytes = cnt * 2;
	w->w_dt = dt;
}

static void make_q8r(struct kc_rng *r, int n, int k, struct wmat *w)
{
	const size_t nb = (size_t)n * (k / Q8_0_BLOCK);
	struct q8_0_block *b = xmalloc(nb * sizeof *b), *a = xmalloc(nb * sizeof *a);
	int8_t *codes = xmalloc((size_t)n * k);
	w->q8_d = xmalloc(nb * sizeof(uint16_t));
	for (size_t i = 0; i < nb; i++) {
		b[i].d = f32_to_f16(kc_uniform(r, 0.002f, 0.03f));
		if (kc_below(r, 16) == 0)
			b[i].d |= 0x8000; /* a negative block scale now and then */
		a[i].d = b[i].d & 0x7fff;
		for (int j = 0; j < Q8_0_BLOCK; j++) {
			b[i].qs[j] = (int8_t)((int)kc_below(r, 255) - 127);
			a[i].qs[j] = (int8_t)abs(b[i].qs[j]);
		}
		/* The repacked layout: block i is row i / (k / 32), values
		 * 32 (i % (k / 32)) onwards, i.e. codes at 32 i. */
		memcpy(codes + i * Q8_0_BLOCK, b[i].qs, Q8_0_BLOCK);
		w->q8_d[i] = b[i].d;
	}
	w->data = b;
	w->abs_data = a;
	w->m.dtype = DT_Q8_0;
	w->dev = codes;
	w->dev_bytes = (size_t)n * k;
	w->w_dt = DT_Q8_0;
}

static void make_8bit(struct kc_rng *r, enum wkind kind, int n, int k, struct wmat *w)
{
	const size_t cnt = (size_t)n * k;
	uint8_t *q = xmalloc(cnt), *a = xmalloc(cnt);
	const bool f8 = kind == W_F8_ROW || kind == W_F8_TENSOR;
	for (size_t i = 0; i < cnt; i++) {
		if (f8) {
			q[i] = rand_f8(r);
			a[i] = q[i] & 0x7f;
		} else {
			const int v = (int)kc_below(r, 255) - 127;
			q[i] = (uint8_t)(int8_t)v;
			a[i] = (uint8_t)(int8_t)abs(v);
		}
	}
	w->data = q;
	w->abs_data = a;
	w->m.dtype = f8 ? DT_F8_E4M3 : DT_I8;
	w->dev = q;
	w->dev_bytes = cnt;
	w->w_dt = w->m.dtype;
	if (kind != W_I8_NONE) {
		const bool per_row = kind == W_I8_ROW || kind == W_F8_ROW;
		w->m.n_scale = per_row ? n : 1;
		w->scale = xmalloc((size_t)w->m.n_scale * sizeof(float));
		for (int64_t i = 0; i < w->m.n_scale; i++)
			w->scale[i] = kc_uniform(r, 0.001f, 0.02f) * (f8 ? 0.05f : 1.0f);
		w->m.scale = w->scale;
	}
}

static void make_weights(struct kc_rng *r, enum wkind kind, int n, int k, struct wmat *w)
{
	memset(w, 0, sizeof *w);
	w->m.rows = n;
	w->m.cols = k;
	if (kind == W_F16 || kind == W_BF16)
		make_16bit(r, kind == W_F16 ? DT_F16 : DT_BF16, n, k, w);
	else if (kind == W_Q8R)
		make_q8r(r, n, k, w);
	else
		make_8bit(r, kind, n, k, w);
	w->abs_m = w->m;
	w->m.data = w->data;
	w->abs_m.data = w->abs_data;
}

static void free_weights(struct wmat *w)
{
	if (w->dev != w->data)
		free(w->dev);
	free(w->data);
	free(w->abs_data);
	free(w->scale);
	free(w->q8_d);
}

/* ---- one case ------------------------------------------------------------------- */

/* Tolerance: both sides multiply the same F32 values (16-bit weights and
 * Q8_0 code * scale are exact in F32; I8/F8 codes are exact, their scale is
 * applied per product on the CPU and per sum on the GPU: one rounding) and
 * sum in F32 in different orders. The differences are a few ulps of the
 * partial sums, below ~1e-6 of S = sum |w||x| (+ |y0| when accumulating) at
 * these K (the largest is 14336); we allow 2e-5 S. A dropped or doubled
 * 16-byte chunk (8 / K of S for 16-bit weights, 16 / K for 8-bit: >= 5e-4
 * here), a wrong scale, row, token or X offset is far above it. */
#define GEMV_TOL  2e-5f
#define Y_GUARD   64 /* floats past Y that must stay untouched */
#define POISON_U8 0xff

static size_t g_cases;

static void gemv_case(struct kc_rng *r, enum wkind kind, int n, int k, int t, enum dtype x_dt,
                      int accumulate)
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
	float *sabs = xmalloc(ny * sizeof(float));
	float *got = xmalloc((ny + Y_GUARD) * sizeof(float));
	kc_fill(r, y0, ny, -1.0f, 1.0f);
	kcpu_matmul_ref(&w.m, x, t, ref);
	kcpu_matmul_ref(&w.abs_m, xa, t, sabs);
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

	void *xp = kc_pack(x, nx, x_dt);
	void *d_x = kc_dev_alloc(nx * 2);
	kc_ok(k_cuda_memcpy_h2d(d_x, xp, nx * 2), "upload x");
	void *d_w = kc_upload(w.dev, w.dev_bytes);
	float *d_s = w.scale ? kc_upload(w.scale, (size_t)w.m.n_scale * sizeof(float)) : NULL;
	void *d_q8d = w.q8_d ? kc_upload(w.q8_d, (size_t)n * (k / 32) * 2) : NULL;
	float *d_y = kc_dev_alloc((ny + Y_GUARD) * sizeof(float));
	const int n_scales = w.scale ? (int)w.m.n_scale : 0;

	/* The same inputs through every rows-per-CTA variant (4 = k_gemv's own
	 * choice, through k_gemv itself). */
	static const int rows_list[] = {4, 2, 8};
	for (int v = 0; v < 3; v++) {
		const int rows = rows_list[v];
		kc_ok(k_cuda_memset_async(NULL, d_y, POISON_U8, (ny + Y_GUARD) * sizeof(float)),
		      "poison y");
		if (accumulate)
			kc_ok(k_cuda_memcpy_h2d(d_y, y0, ny * sizeof(float)), "upload y0");
		if (rows == 4)
			kc_ok(k_gemv(NULL, d_w, w.w_dt, d_s, n_scales, d_q8d, n, k, d_x, x_dt, t,
			             d_y, accumulate),
			      "k_gemv");
		else
			kc_ok(k_gemv_rows(NULL, d_w, w.w_dt, d_s, n_scales, d_q8d, n, k, d_x, x_dt,
			                  t, d_y, accumulate, rows),
			      "k_gemv_rows");
		kc_sync("k_gemv");
		kc_download(got, d_y, (ny + Y_GUARD) * sizeof(float));
		const uint8_t *guard = (const uint8_t *)(got + ny);
		for (size_t i = 0; i < Y_GUARD * sizeof(float); i++)
			if (guard[i] != POISON_U8)
				kc_fail("k_gemv %s N=%d K=%d T=%d rows=%d wrote past Y (byte %zu)",
				        wkind_name[kind], n, k, t, rows, i);
		for (size_t i = 0; i < ny; i++)
			got[i] /= norm[i];
		char what[160];
		snprintf(what, sizeof what,
		         "gemv %s N=%d K=%d T=%d x=%s acc=%d rows=%d (/ sum|w||x|)",
		         wkind_name[kind], n, k, t, dtype_name(x_dt), accumulate, rows);
		kc_compare(what, got, ref, ny, GEMV_TOL, 0.0f);
		g_cases++;
	}

	kc_dev_free(d_x);
	kc_dev_free(d_w);
	kc_dev_free(d_s);
	kc_dev_free(d_q8d);
	kc_dev_free(d_y);
	free(xp);
	free(x);
	free(xa);
	free(y0);
	free(ref);
	free(sabs);
	free(got);
	free(norm);
	free_weights(&w);
}

static void test_gemv(struct kc_rng *r)
{
	static const int ts[] = {1, 2, 3, 4, 5, 6, 7, 8, 11};
	const int n_t = (int)(sizeof ts / sizeof ts[0]);
	unsigned combo = 0;
	for (int kind = 0; kind < W__COUNT; kind++) {
		const int g = granularity((enum wkind)kind);
		/* (N, K): the minimum K, an odd multiple, and the Llama widths. */
		const int shapes[][2] = {
		    {1, g}, {5, 37 * g}, {1003, 1024}, {37, 4096}, {67, 14336}};
		for (int s = 0; s < 5; s++) {
			for (int ti = 0; ti < n_t; ti++) {
				const int t = ts[ti];
				/* X dtype and accumulate rotate across the cases. */
				const enum dtype x_dt = (combo & 1) ? DT_BF16 : DT_F16;
				const int acc = (combo >> 1) & 1;
				combo++;
				gemv_case(r, (enum wkind)kind, shapes[s][0], shapes[s][1], t, x_dt,
				          acc);
			}
		}
	}
	printf("ok gemv: %zu cases\n", g_cases);
}

static void expect(int got, int want, const char *what)
{
	if (got != want)
		kc_fail("%s: %d, want %d", what, got, want);
}

static void test_errors(void)
{
	char *d = kc_dev_alloc(8192);
	const float *s = (const float *)d;
	float *y = (float *)d;
	expect(k_gemv(NULL, d, DT_BF16, NULL, 0, NULL, 4, 12, d, DT_BF16, 1, y, 0), ERR_UNSUPPORTED,
	       "16-bit W with K % 8 != 0");
	expect(k_gemv(NULL, d, DT_I8, s, 1, NULL, 4, 24, d, DT_F16, 1, y, 0), ERR_UNSUPPORTED,
	       "I8 W with K % 16 != 0");
	expect(k_gemv(NULL, d, DT_Q8_0, NULL, 0, d, 4, 48, d, DT_F16, 1, y, 0), ERR_UNSUPPORTED,
	       "Q8_0 with K % 32 != 0");
	expect(k_gemv(NULL, d, DT_Q8_0, NULL, 0, NULL, 4, 64, d, DT_F16, 1, y, 0), ERR_INVAL,
	       "Q8_0 without scales");
	expect(k_gemv(NULL, d, DT_Q8_0, NULL, 0, d + 1, 4, 64, d, DT_F16, 1, y, 0), ERR_UNSUPPORTED,
	       "Q8_0 with odd scale pointer");
	expect(k_gemv(NULL, d, DT_I8, s, 3, NULL, 4, 32, d, DT_F16, 1, y, 0), ERR_INVAL,
	       "3 scales for 4 rows");
	expect(k_gemv(NULL, d, DT_F32, NULL, 0, NULL, 4, 32, d, DT_F16, 1, y, 0), ERR_UNSUPPORTED,
	       "F32 W");
	expect(k_gemv(NULL, d, DT_BF16, NULL, 0, NULL, 4, 32, d, DT_F32, 1, y, 0), ERR_UNSUPPORTED,
	       "F32 X");
	expect(k_gemv(NULL, d, DT_BF16, NULL, 0, NULL, 4, 32, d, DT__COUNT, 1, y, 0), ERR_INVAL,
	       "X dtype out of range");
	expect(k_gemv(NULL, d + 8, DT_BF16, NULL, 0, NULL, 4, 32, d, DT_BF16, 1, y, 0),
	       ERR_UNSUPPORTED, "W not 16-byte aligned");
	expect(k_gemv(NULL, d, DT_BF16, NULL, 0, NULL, 4, 32, d + 8, DT_BF16, 1, y, 0),
	       ERR_UNSUPPORTED, "X not 16-byte aligned");
	expect(k_gemv(NULL, d, DT_BF16, NULL, 0, NULL, 0, 32, d, DT_BF16, 1, y, 0), ERR_INVAL,
	       "N 0");
	expect(k_gemv(NULL, d, DT_BF16, NULL, 0, NULL, 4, 32, d, DT_BF16, 0, y, 0), ERR_INVAL,
	       "T 0");
	expect(k_gemv(NULL, NULL, DT_BF16, NULL, 0, NULL, 4, 32, d, DT_BF16, 1, y, 0), ERR_INVAL,
	       "NULL W");
	expect(k_gemv_rows(NULL, d, DT_BF16, NULL, 0, NULL, 4, 32, d, DT_BF16, 1, y, 0, 3),
	       ERR_INVAL, "3 rows per CTA");
	kc_dev_free(d);
	printf("ok gemv argument errors\n");
}

/* ---- k_gemv_epi ------------------------------------------------------------------ */

static size_t out_size(enum dtype dt)
{
	return dt == DT_F32 ? 4 : 2;
}

/* Download n_out outputs of dt (+ a guard) and check the guard's poison. */
static void *fetch_out(const void *d_out, size_t n_out, enum dtype dt, const char *what)
{
	const size_t bytes = n_out * out_size(dt);
	uint8_t *h = xmalloc(bytes + Y_GUARD);
	kc_download(h, d_out, bytes + Y_GUARD);
	for (size_t i = 0; i < Y_GUARD; i++)
		if (h[bytes + i] != POISON_U8)
			kc_fail("%s wrote past its output (byte %zu)", what, i);
	return h;
}

static void epi_case(struct kc_rng *r, enum wkind kind, int n, int k, int t, enum dtype x_dt,
                     enum dtype out_dt, enum k_gemv_epi_kind ek)
{
	struct wmat w;
	make_weights(r, kind, n, k, &w);
	const size_t nx = (size_t)t * k, ny = (size_t)t * n;
	const bool silu = ek == K_GEMV_EPI_SILU_MUL;
	const size_t n_out = silu ? ny / 2 : ny;
	float *x = xmalloc(nx * sizeof(float)), *y0 = xmalloc(ny * sizeof(float));
	float *nw = xmalloc((size_t)n * sizeof(float));
	kc_fill(r, x, nx, -1.0f, 1.0f);
	kc_round(x, nx, x_dt);
	/* a residual stream large against the product, as in a layer */
	kc_fill(r, y0, ny, -4.0f, 4.0f);
	kc_fill(r, nw, (size_t)n, 0.5f, 1.5f);
	void *xp = kc_pack(x, nx, x_dt);
	void *d_x = kc_upload(xp, nx * 2);
	void *d_w = kc_upload(w.dev, w.dev_bytes);
	float *d_s = w.scale ? kc_upload(w.scale, (size_t)w.m.n_scale * sizeof(float)) : NULL;
	void *d_q8d = w.q8_d ? kc_upload(w.q8_d, (size_t)n * (k / 32) * 2) : NULL;
	const int n_scales = w.scale ? (int)w.m.n_scale : 0;
	float *d_nw = kc_upload(nw, (size_t)n * sizeof(float));
	float *d_y = kc_dev_alloc(ny * sizeof(float));
	const size_t ob = n_out * out_size(out_dt);
	void *d_ref = kc_dev_alloc(ob + Y_GUARD), *d_out = kc_dev_alloc(ob + Y_GUARD);
	const int n_cnt = (t + 7) / 8;
	unsigned *d_cnt = kc_dev_alloc(16 * sizeof(unsigned));
	const float eps = 1e-5f;
	char what[160];
	snprintf(what, sizeof what, "gemv_epi %s %s N=%d K=%d T=%d x=%s out=%s",
	         silu ? "silu" : "norm", wkind_name[kind], n, k, t, dtype_name(x_dt),
	         dtype_name(out_dt));

	/* unfused */
	kc_ok(k_cuda_memset_async(NULL, d_ref, POISON_U8, ob + Y_GUARD), "poison ref");
	kc_ok(k_cuda_memcpy_h2d(d_y, y0, ny * sizeof(float)), "upload y0");
	kc_ok(k_gemv(NULL, d_w, w.w_dt, d_s, n_scales, d_q8d, n, k, d_x, x_dt, t, d_y, !silu),
	      "k_gemv");
	if (silu)
		kc_ok(k_silu_mul(NULL, d_y, t, n / 2, d_ref, out_dt), "k_silu_mul");
	else
		kc_ok(k_add_rmsnorm(NULL, d_y, NULL, d_nw, t, n, eps, d_ref, out_dt),
		      "k_add_rmsnorm");
	kc_sync(what);
	void *ref = fetch_out(d_ref, n_out, out_dt, "unfused");
	float *y_ref = xmalloc(ny * sizeof(float)), *y_got = xmalloc(ny * sizeof(float));
	kc_download(y_ref, d_y, ny * sizeof(float));

	const struct k_gemv_epi e = {
	    .kind = ek, .out = d_out, .out_dt = out_dt, .norm_w = d_nw, .eps = eps,
	    .counters = d_cnt,
	};
	for (int rep = 0; rep < 2; rep++) { /* twice: the counters must be reset */
		kc_ok(k_cuda_memset_async(NULL, d_out, POISON_U8, ob + Y_GUARD), "poison out");
		kc_ok(k_cuda_memcpy_h2d(d_y, y0, ny * sizeof(float)), "upload y0");
		kc_ok(k_gemv_epi(NULL, d_w, w.w_dt, d_s, n_scales, d_q8d, n, k, d_x, x_dt, t,
		                 silu ? NULL : d_y, 1, &e),
		      what);
		kc_sync(what);
		void *got = fetch_out(d_out, n_out, out_dt, what);
		if (memcmp(got, ref, ob) != 0) {
			size_t i = 0;
			const size_t es = out_size(out_dt);
			while (memcmp((char *)got + i * es, (char *)ref + i * es, es) == 0)
				i++;
			kc_fail("%s (launch %d): output %zu differs from the unfused steps' bits", what,
			        rep + 1, i);
		}
		free(got);
		if (!silu) {
			kc_download(y_got, d_y, ny * sizeof(float));
			if (memcmp(y_got, y_ref, ny * sizeof(float)) != 0)
				kc_fail("%s: Y differs from k_gemv's", what);
		}
		unsigned cnt[16];
		kc_download(cnt, d_cnt, sizeof cnt);
		for (int i = 0; i < 16; i++)
			if (cnt[i] != 0)
				kc_fail("%s: counter %d is %u after the launch (%d in use)", what, i, cnt[i],
				        n_cnt);
	}
	g_cases++;

	kc_dev_free(d_x);
	kc_dev_free(d_w);
	kc_dev_free(d_s);
	kc_dev_free(d_q8d);
	kc_dev_free(d_nw);
	kc_dev_free(d_y);
	kc_dev_free(d_ref);
	kc_dev_free(d_out);
	kc_dev_free(d_cnt);
	free(ref);
	free(y_ref);
	free(y_got);
	free(xp);
	free(x);
	free(y0);
	free(nw);
	free_weights(&w);
}

static void test_epi(struct kc_rng *r)
{
	static const int ts[] = {1, 2, 3, 4, 8, 11};
	static const enum dtype outs[] = {DT_F16, DT_BF16, DT_F32};
	const size_t before = g_cases;
	unsigned combo = 0;
	for (int kind = 0; kind < W__COUNT; kind++) {
		const int g = granularity((enum wkind)kind);
		/* SwiGLU: 2 ffn rows, ffn 1 (one half-used CTA), 37, 1003; RMSNorm:
		 * N = 4, 1004 (251 CTAs, the last part-filled), 4096 (the Llama
		 * width: a 512-thread norm played by fewer threads) */
		const int shapes[][3] = {{K_GEMV_EPI_SILU_MUL, 2, g},
		                         {K_GEMV_EPI_SILU_MUL, 74, 5 * g},
		                         {K_GEMV_EPI_SILU_MUL, 2006, 256},
		                         {K_GEMV_EPI_RMSNORM, 4, g},
		                         {K_GEMV_EPI_RMSNORM, 1004, 3 * g},
		                         {K_GEMV_EPI_RMSNORM, 4096, 256}};
		for (int s = 0; s < 6; s++)
			for (int ti = 0; ti < 6; ti++, combo++)
				epi_case(r, (enum wkind)kind, shapes[s][1], shapes[s][2], ts[ti],
				         (combo & 1) ? DT_BF16 : DT_F16, outs[combo % 3],
				         (enum k_gemv_epi_kind)shapes[s][0]);
	}
	printf("ok gemv epilogues: %zu cases, the unfused steps' bits\n", g_cases - before);

	char *d = kc_dev_alloc(65536);
	unsigned *cnt = (unsigned *)(d + 32768);
	struct k_gemv_epi e = {
	    .kind = K_GEMV_EPI_SILU_MUL, .out = d + 16384, .out_dt = DT_F16,
	    .norm_w = (const float *)(d + 49152), .eps = 1e-5f, .counters = cnt,
	};
	expect(k_gemv_epi(NULL, d, DT_F16, NULL, 0, NULL, 5, 32, d, DT_F16, 1, NULL, 0, &e),
	       ERR_INVAL, "SwiGLU over an odd N");
	expect(k_gemv_epi(NULL, d, DT_F16, NULL, 0, NULL, 4, 32, d, DT_F16, 1, NULL, 0, NULL),
	       ERR_INVAL, "no epilogue");
	e.out_dt = DT_I8;
	expect(k_gemv_epi(NULL, d, DT_F16, NULL, 0, NULL, 4, 32, d, DT_F16, 1, NULL, 0, &e),
	       ERR_UNSUPPORTED, "I8 output");
	e.out_dt = DT_F16;
	e.kind = K_GEMV_EPI_RMSNORM;
	float *y = (float *)(d + 8192);
	expect(k_gemv_epi(NULL, d, DT_F16, NULL, 0, NULL, 4, 32, d, DT_F16, 1, NULL, 1, &e),
	       ERR_INVAL, "RMSNorm without Y");
	expect(k_gemv_epi(NULL, d, DT_F16, NULL, 0, NULL, 6, 32, d, DT_F16, 1, y, 1, &e),
	       ERR_UNSUPPORTED, "RMSNorm over N % 4 != 0");
	expect(k_gemv_epi(NULL, d, DT_F16, NULL, 0, NULL, 4, 32, d, DT_F16, 1, y + 1, 1, &e),
	       ERR_UNSUPPORTED, "RMSNorm with Y not 16-byte aligned");
	e.counters = NULL;
	expect(k_gemv_epi(NULL, d, DT_F16, NULL, 0, NULL, 4, 32, d, DT_F16, 1, y, 1, &e),
	       ERR_INVAL, "RMSNorm without counters");
	e.counters = cnt;
	e.kind = (enum k_gemv_epi_kind)7;
	expect(k_gemv_epi(NULL, d, DT_F16, NULL, 0, NULL, 4, 32, d, DT_F16, 1, y, 1, &e),
	       ERR_INVAL, "unknown epilogue");
	kc_dev_free(d);
	printf("ok gemv epilogue argument errors\n");
}

int main(void)
{
	kc_require_gpu("test_cuda_gemv");
	struct kc_rng r;
	kc_seed(&r, 20261130);
	test_gemv(&r);
	test_errors();
	test_epi(&r);
	return kc_finish();
}
