/* tests/kernels/test_cuda_gemm.c — k_gemm (kernels/cuda/kcuda_gemm.h)
 * against a double-precision product of the same 16-bit inputs.
 *
 * For F16 and BF16, on ragged shapes (T, N, K): X, W uniform in [-1, 1]
 * rounded to the dtype, Y = X · W^T with accumulate 0 (Y pre-filled with NaN:
 * beta 0 must not read it) and accumulate 1 (Y pre-filled with random
 * values); one GEMM captured in a CUDA graph and replayed with new X
 * contents; argument errors; the accessors. Exit 77 without a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_gemm.h"
#include "tests/kernels/kcheck.h"

struct shape {
	int t, n, k;
};

/* Decode GEMV, non-multiples of the tile sizes in every dimension, a big T
 * with tiny N and K, and an odd K (rows not 16-byte aligned). */
static const struct shape shapes[] = {
	{1, 4096, 4096}, {3, 1000, 384},  {16, 257, 1024}, {17, 64, 72},
	{300, 512, 256}, {2048, 128, 64}, {5, 33, 37},
};

/* Tolerance, |got - ref| <= atol + rtol * |ref|, with |x|, |w| <= 1:
 * a product of two F16 (11-bit) or BF16 (8-bit significand) values is exact in
 * F32, so the only error is F32 accumulation in cuBLAS's order (tensor-core
 * accumulators, split-K partial sums): about u * K * |partial sums| with
 * u = 6e-8 and partial sums ~ sqrt(K)/3, i.e. ~1e-4 at K = 4096 even when the
 * tensor cores truncate instead of rounding. atol = 1e-4 * sqrt(K) (6.4e-3 at
 * K = 4096) and rtol = 1e-3 leave a 10x margin over that, yet one product
 * term dropped or doubled (|x w| ~ 0.25 on average), 16-bit accumulation
 * (error ~ 5e-4 |y| per add), a transposed W, a wrong dtype or a lost beta
 * exceed it on most outputs. */
static float atol_for(int k)
{
	const float x_scale = 1.0f, w_scale = 1.0f; /* max |x|, max |w| */
	return 1e-4f * sqrtf((float)k) * x_scale * w_scale;
}
static const float rtol = 1e-3f;

static void *xmalloc(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);
	if (!p)
		kc_fail("out of memory (%zu bytes)", bytes);
	return p;
}

static size_t esize(enum dtype dt)
{
	return dt == DT_F32 ? 4 : 2;
}

/* ref[t, n] = sum_k x[t, k] * w[n, k] in double (exact products, ~exact sums). */
static void ref_gemm(const float *x, const float *w, int t, int n, int k, double *ref)
{
	for (int i = 0; i < t; i++) {
		const float *xr = x + (size_t)i * k;
		for (int j = 0; j < n; j++) {
			const float *wr = w + (size_t)j * k;
			double s = 0;
			for (int l = 0; l < k; l++)
				s += (double)xr[l] * (double)wr[l];
			ref[(size_t)i * n + j] = s;
		}
	}
}

/* Run k_gemm on the handle's stream and bring Y back. */
static void gemm_and_download(struct k_blas *h, void *stream, const void *d_w, enum dtype dt,
			      int n, int k, const void *d_x, int t, float *d_y, int acc, float *y)
{
	kc_ok(k_gemm(h, d_w, dt, n, k, d_x, t, d_y, acc), "k_gemm");
	kc_ok(k_cuda_stream_sync(stream), "k_cuda_stream_sync");
	kc_download(y, d_y, (size_t)t * n * sizeof(float));
}

static void test_shape(struct k_blas *h, void *stream, enum dtype dt, struct shape s,
		       uint64_t seed)
{
	const int t = s.t, n = s.n, k = s.k;
	const size_t nx = (size_t)t * k, nw = (size_t)n * k, ny = (size_t)t * n;
	struct kc_rng rng;
	kc_seed(&rng, seed);

	float *x = xmalloc(nx * sizeof *x), *w = xmalloc(nw * sizeof *w);
	float *y0 = xmalloc(ny * sizeof *y0), *y = xmalloc(ny * sizeof *y);
	float *ref = xmalloc(ny * sizeof *ref);
	double *prod = xmalloc(ny * sizeof *prod);
	kc_fill(&rng, x, nx, -1.0f, 1.0f);
	kc_fill(&rng, w, nw, -1.0f, 1.0f);
	kc_fill(&rng, y0, ny, -1.0f, 1.0f);
	kc_round(x, nx, dt);
	kc_round(w, nw, dt);
	ref_gemm(x, w, t, n, k, prod);

	void *px = kc_pack(x, nx, dt), *pw = kc_pack(w, nw, dt);
	void *d_x = kc_upload(px, nx * esize(dt));
	void *d_w = kc_upload(pw, nw * esize(dt));
	float *d_y = kc_dev_alloc(ny * sizeof(float));
	kc_sync("upload"); /* pageable copies may still be in flight for other streams */

	char what[96];
	/* accumulate = 0 over NaN: beta 0 must overwrite Y without reading it. */
	kc_ok(k_cuda_memset_async(stream, d_y, 0xFF, ny * sizeof(float)), "memset NaN");
	gemm_and_download(h, stream, d_w, dt, n, k, d_x, t, d_y, 0, y);
	for (size_t i = 0; i < ny; i++)
		ref[i] = (float)prod[i];
	snprintf(what, sizeof what, "%s t=%d n=%d k=%d acc=0", dtype_name(dt), t, n, k);
	kc_compare(what, y, ref, ny, atol_for(k), rtol);

	/* accumulate = 1 onto random Y: the residual add. */
	kc_ok(k_cuda_memcpy_h2d(d_y, y0, ny * sizeof(float)), "upload y0");
	kc_sync("upload y0");
	gemm_and_download(h, stream, d_w, dt, n, k, d_x, t, d_y, 1, y);
	for (size_t i = 0; i < ny; i++)
		ref[i] = (float)(prod[i] + (double)y0[i]);
	snprintf(what, sizeof what, "%s t=%d n=%d k=%d acc=1", dtype_name(dt), t, n, k);
	kc_compare(what, y, ref, ny, atol_for(k), rtol);

	kc_dev_free(d_x);
	kc_dev_free(d_w);
	kc_dev_free(d_y);
	free(px);
	free(pw);
	free(x);
	free(w);
	free(y0);
	free(y);
	free(ref);
	free(prod);
}

/* One GEMM captured in a graph, replayed twice; X changes between the
 * replays and the second replay must see the new values. */
static void test_graph(struct k_blas *h, void *stream, enum dtype dt)
{
	const int t = 16, n = 257, k = 1024;
	const size_t nx = (size_t)t * k, nw = (size_t)n * k, ny = (size_t)t * n;
	struct kc_rng rng;
	kc_seed(&rng, 777);
	float *x1 = xmalloc(nx * sizeof(float)), *x2 = xmalloc(nx * sizeof(float));
	float *w = xmalloc(nw * sizeof(float)), *y = xmalloc(ny * sizeof(float));
	float *ref = xmalloc(ny * sizeof(float));
	double *prod = xmalloc(ny * sizeof(double));
	kc_fill(&rng, x1, nx, -1.0f, 1.0f);
	kc_fill(&rng, x2, nx, -1.0f, 1.0f);
	kc_fill(&rng, w, nw, -1.0f, 1.0f);
	kc_round(x1, nx, dt);
	kc_round(x2, nx, dt);
	kc_round(w, nw, dt);
	void *px1 = kc_pack(x1, nx, dt), *px2 = kc_pack(x2, nx, dt), *pw = kc_pack(w, nw, dt);
	void *d_x = kc_upload(px1, nx * esize(dt));
	void *d_w = kc_upload(pw, nw * esize(dt));
	float *d_y = kc_dev_alloc(ny * sizeof(float));
	kc_sync("upload");

	/* Warm-up outside the capture (first use of this shape loads kernels). */
	kc_ok(k_gemm(h, d_w, dt, n, k, d_x, t, d_y, 0), "k_gemm warm-up");
	kc_ok(k_cuda_stream_sync(stream), "warm-up sync");

	void *graph = NULL;
	kc_ok(k_cuda_graph_begin(stream), "k_cuda_graph_begin");
	int rc = k_gemm(h, d_w, dt, n, k, d_x, t, d_y, 0);
	int rc_end = k_cuda_graph_end(stream, &graph); /* end the capture in any case */
	kc_ok(rc, "k_gemm under capture");
	kc_ok(rc_end, "k_cuda_graph_end");

	char what[96];
	for (int rep = 0; rep < 2; rep++) {
		const float *xr = rep ? x2 : x1;
		if (rep)
			kc_ok(k_cuda_memcpy_h2d_async(stream, d_x, px2, nx * esize(dt)),
			      "upload x2");
		kc_ok(k_cuda_memset_async(stream, d_y, 0xFF, ny * sizeof(float)), "memset NaN");
		kc_ok(k_cuda_graph_launch(graph, stream), "k_cuda_graph_launch");
		kc_ok(k_cuda_stream_sync(stream), "graph sync");
		kc_download(y, d_y, ny * sizeof(float));
		ref_gemm(xr, w, t, n, k, prod);
		for (size_t i = 0; i < ny; i++)
			ref[i] = (float)prod[i];
		snprintf(what, sizeof what, "%s graph replay %d (x%d)", dtype_name(dt), rep + 1,
			 rep + 1);
		kc_compare(what, y, ref, ny, atol_for(k), rtol);
	}

	k_cuda_graph_destroy(graph);
	kc_dev_free(d_x);
	kc_dev_free(d_w);
	kc_dev_free(d_y);
	free(px1);
	free(px2);
	free(pw);
	free(x1);
	free(x2);
	free(w);
	free(y);
	free(ref);
	free(prod);
}

static void expect_rc(int got, int want, const char *what)
{
	if (got != want)
		kc_fail("%s: returned %d (%s), expected %d (%s)", what, got, err_str(got), want,
			err_str(want));
	printf("ok %s -> %s\n", what, err_str(want));
}

static void test_errors(struct k_blas *h, void *stream)
{
	void *d_w = kc_dev_alloc(64 * 64 * 2), *d_x = kc_dev_alloc(64 * 2);
	float *d_y = kc_dev_alloc(64 * sizeof(float));
	expect_rc(k_blas_create(stream, NULL), ERR_INVAL, "k_blas_create(out NULL)");
	expect_rc(k_gemm(NULL, d_w, DT_BF16, 64, 64, d_x, 1, d_y, 0), ERR_INVAL, "h NULL");
	expect_rc(k_gemm(h, NULL, DT_BF16, 64, 64, d_x, 1, d_y, 0), ERR_INVAL, "w NULL");
	expect_rc(k_gemm(h, d_w, DT_BF16, 64, 64, NULL, 1, d_y, 0), ERR_INVAL, "x NULL");
	expect_rc(k_gemm(h, d_w, DT_BF16, 64, 64, d_x, 1, NULL, 0), ERR_INVAL, "y NULL");
	expect_rc(k_gemm(h, d_w, DT_BF16, 0, 64, d_x, 1, d_y, 0), ERR_INVAL, "n 0");
	expect_rc(k_gemm(h, d_w, DT_BF16, 64, 0, d_x, 1, d_y, 0), ERR_INVAL, "k 0");
	expect_rc(k_gemm(h, d_w, DT_BF16, 64, 64, d_x, 0, d_y, 0), ERR_INVAL, "t 0");
	expect_rc(k_gemm(h, d_w, DT_BF16, -64, 64, d_x, 1, d_y, 0), ERR_INVAL, "n < 0");
	expect_rc(k_gemm(h, d_w, DT_F16, 64, 64, d_x, -1, d_y, 0), ERR_INVAL, "t < 0");
	expect_rc(k_gemm(h, d_w, DT__COUNT, 64, 64, d_x, 1, d_y, 0), ERR_INVAL, "dtype out of range");
	expect_rc(k_gemm(h, d_w, DT_F32, 64, 64, d_x, 1, d_y, 0), ERR_UNSUPPORTED, "dtype f32");
	expect_rc(k_gemm(h, d_w, DT_Q8_0, 64, 64, d_x, 1, d_y, 0), ERR_UNSUPPORTED, "dtype q8_0");

	size_t ws = 0;
	if (k_blas_stream(h) != stream)
		kc_fail("k_blas_stream: not the stream given at create");
	if (!k_blas_lt_handle(h))
		kc_fail("k_blas_lt_handle: NULL");
	if (!k_blas_workspace(h, &ws) || ws < ((size_t)4 << 20))
		kc_fail("k_blas_workspace: %zu bytes", ws);
	printf("ok accessors (workspace %zu MiB)\n", ws >> 20);
	kc_dev_free(d_w);
	kc_dev_free(d_x);
	kc_dev_free(d_y);
}

int main(void)
{
	kc_require_gpu("test_cuda_gemm");
	void *stream = NULL;
	struct k_blas *h = NULL;
	kc_ok(k_cuda_stream_create(&stream), "k_cuda_stream_create");
	kc_ok(k_blas_create(stream, &h), "k_blas_create");

	test_errors(h, stream);
	const enum dtype dts[] = {DT_F16, DT_BF16};
	for (size_t d = 0; d < 2; d++)
		for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
			test_shape(h, stream, dts[d], shapes[i], 1000 * (d + 1) + i);
	test_graph(h, stream, DT_BF16);
	test_graph(h, stream, DT_F16);

	k_blas_destroy(h);
	k_cuda_stream_destroy(stream);
	return kc_finish();
}
