/* tests/kernels/kcheck.h — shared harness of the CUDA kernel tests: skip
 * without a GPU, seeded random inputs, 16-bit rounding, device upload and
 * download, and the tolerance check every test uses,
 *   |got - ref| <= atol + rtol * |ref|,
 * which prints the first mismatches. Tests abort the run through kc_fail
 * (exit 1); a missing GPU is exit 77 (meson: skipped).
 */
#ifndef AORTA_TESTS_KERNELS_KCHECK_H
#define AORTA_TESTS_KERNELS_KCHECK_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/dtype.h"

/* Exit 77 with a message when no CUDA device is visible; else select device 0. */
void kc_require_gpu(const char *test_name);

/* xorshift64* stream: uniform floats in [lo, hi), ints in [0, n). */
struct kc_rng {
	uint64_t s;
};
void kc_seed(struct kc_rng *r, uint64_t seed);
float kc_uniform(struct kc_rng *r, float lo, float hi);
uint32_t kc_below(struct kc_rng *r, uint32_t n);
void kc_fill(struct kc_rng *r, float *x, size_t n, float lo, float hi);

/* Round x[i] through dt (DT_F16 / DT_BF16 / DT_F32) in place, and pack it
 * into a dt buffer (returned malloc'ed; 2 or 4 bytes per value). */
void kc_round(float *x, size_t n, enum dtype dt);
void *kc_pack(const float *x, size_t n, enum dtype dt);
/* Unpack n values of dt into floats. */
void kc_unpack(const void *src, size_t n, enum dtype dt, float *out);

/* Device buffers; abort the test on failure. */
void *kc_dev_alloc(size_t bytes);	       /* zeroed */
void *kc_upload(const void *host, size_t bytes); /* alloc + copy */
void kc_download(void *host, const void *dev, size_t bytes);
void kc_dev_free(void *dev);
/* Synchronize the device; fail the test on a kernel error. */
void kc_sync(const char *what);
/* Fail unless rc == 0 (prints k_cuda_last_error). */
void kc_ok(int rc, const char *what);

/* Compare got to ref; prints up to 8 mismatches with their index and returns
 * the number of mismatches (0 = pass). Counted in the totals below. */
size_t kc_compare(const char *what, const float *got, const float *ref, size_t n, float atol,
		  float rtol);
/* Print "N checks, M failed" and return the exit status (0 or 1). */
int kc_finish(void);
/* Print a failure and exit 1. */
void kc_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
