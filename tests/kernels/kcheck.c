/* tests/kernels/kcheck.c — see kcheck.h. */
#include "tests/kernels/kcheck.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/kcuda.h"

static size_t g_checks, g_failed;

void kc_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("FAIL: ", stdout);
	vprintf(fmt, ap);
	fputc('\n', stdout);
	va_end(ap);
	fflush(stdout);
	exit(1);
}

void kc_require_gpu(const char *test_name)
{
	int n = 0;
	k_cuda_device_count(&n);
	if (n <= 0) {
		printf("%s: SKIP: no CUDA device visible\n", test_name);
		exit(77);
	}
	kc_ok(k_cuda_set_device(0), "k_cuda_set_device");
}

void kc_seed(struct kc_rng *r, uint64_t seed)
{
	r->s = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
	if (!r->s)
		r->s = 1;
}

static uint64_t next64(struct kc_rng *r)
{
	r->s ^= r->s >> 12;
	r->s ^= r->s << 25;
	r->s ^= r->s >> 27;
	return r->s * 0x2545F4914F6CDD1Dull;
}

float kc_uniform(struct kc_rng *r, float lo, float hi)
{
	return lo + (hi - lo) * (float)((next64(r) >> 40) * (1.0 / 16777216.0));
}

uint32_t kc_below(struct kc_rng *r, uint32_t n)
{
	return n ? (uint32_t)((next64(r) >> 32) % n) : 0;
}

void kc_fill(struct kc_rng *r, float *x, size_t n, float lo, float hi)
{
	for (size_t i = 0; i < n; i++)
		x[i] = kc_uniform(r, lo, hi);
}

static size_t esize(enum dtype dt)
{
	return dt == DT_F32 ? 4 : dt == DT_F8_E4M3 || dt == DT_I8 ? 1 : 2;
}

void kc_round(float *x, size_t n, enum dtype dt)
{
	for (size_t i = 0; i < n; i++) {
		if (dt == DT_F16)
			x[i] = f16_to_f32(f32_to_f16(x[i]));
		else if (dt == DT_BF16)
			x[i] = bf16_to_f32(f32_to_bf16(x[i]));
		else if (dt == DT_F8_E4M3)
			x[i] = f8e4m3_to_f32(f32_to_f8e4m3(x[i]));
	}
}

void *kc_pack(const float *x, size_t n, enum dtype dt)
{
	void *p = malloc(n * esize(dt) + 1);
	if (!p)
		kc_fail("out of memory");
	for (size_t i = 0; i < n; i++) {
		if (dt == DT_F32)
			((float *)p)[i] = x[i];
		else if (dt == DT_F16)
			((uint16_t *)p)[i] = f32_to_f16(x[i]);
		else if (dt == DT_BF16)
			((uint16_t *)p)[i] = f32_to_bf16(x[i]);
		else if (dt == DT_F8_E4M3)
			((uint8_t *)p)[i] = f32_to_f8e4m3(x[i]);
		else
			kc_fail("kc_pack: dtype %s", dtype_name(dt));
	}
	return p;
}

void kc_unpack(const void *src, size_t n, enum dtype dt, float *out)
{
	for (size_t i = 0; i < n; i++) {
		if (dt == DT_F32)
			out[i] = ((const float *)src)[i];
		else if (dt == DT_F16)
			out[i] = f16_to_f32(((const uint16_t *)src)[i]);
		else if (dt == DT_BF16)
			out[i] = bf16_to_f32(((const uint16_t *)src)[i]);
		else if (dt == DT_F8_E4M3)
			out[i] = f8e4m3_to_f32(((const uint8_t *)src)[i]);
		else
			kc_fail("kc_unpack: dtype %s", dtype_name(dt));
	}
}

void kc_ok(int rc, const char *what)
{
	if (rc != 0)
		kc_fail("%s returned %d (%s)", what, rc, k_cuda_last_error());
}

void *kc_dev_alloc(size_t bytes)
{
	void *d = NULL;
	kc_ok(k_cuda_malloc(&d, bytes ? bytes : 1), "k_cuda_malloc");
	kc_ok(k_cuda_memset_async(NULL, d, 0, bytes ? bytes : 1), "k_cuda_memset_async");
	kc_sync("memset");
	return d;
}

void *kc_upload(const void *host, size_t bytes)
{
	void *d = kc_dev_alloc(bytes);
	if (bytes)
		kc_ok(k_cuda_memcpy_h2d(d, host, bytes), "k_cuda_memcpy_h2d");
	return d;
}

void kc_download(void *host, const void *dev, size_t bytes)
{
	if (bytes)
		kc_ok(k_cuda_memcpy_d2h(host, dev, bytes), "k_cuda_memcpy_d2h");
}

void kc_dev_free(void *dev)
{
	k_cuda_free(dev);
}

void kc_sync(const char *what)
{
	kc_ok(k_cuda_sync(), what);
}

size_t kc_compare(const char *what, const float *got, const float *ref, size_t n, float atol,
		  float rtol)
{
	size_t bad = 0;
	double worst = 0;
	for (size_t i = 0; i < n; i++) {
		double err = fabs((double)got[i] - (double)ref[i]);
		double lim = atol + rtol * fabs((double)ref[i]);
		bool ok = err <= lim && !isnan(got[i]) == !isnan(ref[i]);
		if (err > worst && !isnan(err))
			worst = err;
		if (!ok) {
			if (bad < 8)
				printf("  %s: [%zu] got %.7g ref %.7g (|diff| %.3g > %.3g)\n", what, i,
				       got[i], ref[i], err, lim);
			bad++;
		}
	}
	g_checks++;
	if (bad) {
		g_failed++;
		printf("MISMATCH %s: %zu of %zu values (atol %g rtol %g, max |diff| %.3g)\n", what,
		       bad, n, atol, rtol, worst);
	} else {
		printf("ok %s: %zu values, max |diff| %.3g\n", what, n, worst);
	}
	return bad;
}

int kc_finish(void)
{
	printf("%zu checks, %zu failed\n", g_checks, g_failed);
	return g_failed ? 1 : 0;
}
