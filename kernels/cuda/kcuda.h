/* kernels/cuda/kcuda.h — plain C entry points to the CUDA kernels.
 *
 * This is the only header through which code outside kernels/cuda reaches the
 * GPU; it includes no CUDA header. Every launcher takes a stream (NULL = the
 * default stream), checks its preconditions, launches, and checks the launch;
 * it returns 0 or a negative ERR_* (ERR_DEVICE for CUDA failures) and never
 * aborts. Pointers named d_* are device pointers.
 */
#ifndef AORTA_KERNELS_CUDA_KCUDA_H
#define AORTA_KERNELS_CUDA_KCUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of visible CUDA devices; 0 (and returns 0) when there is no driver or GPU. */
int k_cuda_device_count(int *n_out);
/* One line describing device 0 and the last error, for logs. */
const char *k_cuda_last_error(void);

int k_cuda_malloc(void **d_ptr, size_t bytes);
void k_cuda_free(void *d_ptr);
int k_cuda_memcpy_h2d(void *d_dst, const void *src, size_t bytes);
int k_cuda_memcpy_d2h(void *dst, const void *d_src, size_t bytes);
int k_cuda_sync(void);

/* d_y[i] += a * d_x[i] — the build smoke kernel (CPU counterpart: kcpu_axpy_f32). */
int k_axpy_f32(void *stream, size_t n, float a, const float *d_x, float *d_y);

#ifdef __cplusplus
}
#endif

#endif
