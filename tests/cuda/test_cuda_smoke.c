/* tests/cuda/test_cuda_smoke.c — the CUDA build smoke kernel (k_axpy_f32)
 * against its CPU counterpart (kcpu_axpy_f32) at several sizes, llm.c
 * kernel-lab style: |got-ref| <= atol + rtol*|ref|, first mismatches printed.
 * Exits 77 (skipped) where no GPU is visible. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cpu/k_smoke.h"
#include "kernels/cuda/kcuda.h"

static int check_size(size_t n)
{
	float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *ref = malloc(n * sizeof *ref),
	      *got = malloc(n * sizeof *got);
	unsigned s = 1234567u + (unsigned)n;
	for (size_t i = 0; i < n; i++) {
		s = s * 1664525u + 1013904223u;
		x[i] = (float)(s >> 8) / (float)(1 << 24) - 0.5f;
		s = s * 1664525u + 1013904223u;
		y[i] = (float)(s >> 8) / (float)(1 << 24) - 0.5f;
		ref[i] = y[i];
	}
	kcpu_axpy_f32(n, 1.75f, x, ref);
	void *dx = NULL, *dy = NULL;
	int bad = 0;
	if (k_cuda_malloc(&dx, n * 4) || k_cuda_malloc(&dy, n * 4) ||
	    k_cuda_memcpy_h2d(dx, x, n * 4) || k_cuda_memcpy_h2d(dy, y, n * 4) ||
	    k_axpy_f32(NULL, n, 1.75f, dx, dy) || k_cuda_sync() ||
	    k_cuda_memcpy_d2h(got, dy, n * 4)) {
		fprintf(stderr, "n=%zu: CUDA call failed: %s\n", n, k_cuda_last_error());
		bad = 1;
	}
	for (size_t i = 0; !bad && i < n; i++) {
		if (fabsf(got[i] - ref[i]) > 1e-6f + 1e-6f * fabsf(ref[i])) {
			fprintf(stderr, "n=%zu i=%zu: got %g want %g\n", n, i, got[i], ref[i]);
			if (++bad > 5)
				break;
		}
	}
	k_cuda_free(dx);
	k_cuda_free(dy);
	free(x);
	free(y);
	free(ref);
	free(got);
	return bad;
}

int main(void)
{
	int n_dev = 0;
	k_cuda_device_count(&n_dev);
	if (n_dev == 0) {
		printf("SKIP: no CUDA device visible\n");
		return 77;
	}
	/* a launch with a NULL pointer must be refused, not crash */
	if (k_axpy_f32(NULL, 10, 1.0f, NULL, NULL) == 0) {
		fprintf(stderr, "NULL pointers were not refused\n");
		return 1;
	}
	const size_t sizes[] = { 1, 255, 256, 257, 100000, 65535u * 256u + 17u };
	int bad = 0;
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
		bad |= check_size(sizes[i]);
	printf("%s\n", bad ? "FAIL" : "ok: k_axpy_f32 matches kcpu_axpy_f32");
	return bad ? 1 : 0;
}
