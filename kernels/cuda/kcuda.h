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

/* ---- runtime (kernels/cuda/k_runtime.cu) ------------------------------------ */

struct k_cuda_props {
	char name[128];
	int cc_major, cc_minor; /* compute capability */
	int n_sms;
	size_t total_mem;	/* bytes */
	int has_fp8;		/* FP8 tensor cores: cc >= 8.9 */
};
int k_cuda_set_device(int device);
/* Programmatic dependent launch for the decode step's kernels (GEMV, norms,
 * RoPE + KV store, SwiGLU, decode attention): each may start while the one
 * before it finishes, loading its weights meanwhile (kcuda_internal.h).
 * Process-wide; off until set; for sm_90+ only (the caller checks). */
void k_cuda_set_pdl(int on);
int k_cuda_pdl(void); /* 1 when on */
int k_cuda_props(int device, struct k_cuda_props *out);
/* Free and total bytes of the current device (cudaMemGetInfo). */
int k_cuda_mem_info(size_t *free_bytes, size_t *total_bytes);

/* Streams are opaque (cudaStream_t); NULL is the legacy default stream. */
int k_cuda_stream_create(void **stream);
void k_cuda_stream_destroy(void *stream);
int k_cuda_stream_sync(void *stream);
int k_cuda_memcpy_h2d_async(void *stream, void *d_dst, const void *src, size_t bytes);
int k_cuda_memcpy_d2h_async(void *stream, void *dst, const void *d_src, size_t bytes);
int k_cuda_memcpy_d2d_async(void *stream, void *d_dst, const void *d_src, size_t bytes);
int k_cuda_memset_async(void *stream, void *d_dst, int byte, size_t bytes);
/* Page-locked host memory (async copies need it to overlap). */
int k_cuda_host_alloc(void **ptr, size_t bytes);
void k_cuda_host_free(void *ptr);

/* CUDA graphs: everything launched on stream between begin and end is
 * captured (not run) into an executable graph; launch replays it. Capture
 * mode is thread-local, so other threads' CUDA calls are not disturbed. */
int k_cuda_graph_begin(void *stream);
int k_cuda_graph_end(void *stream, void **graph_exec);
int k_cuda_graph_launch(void *graph_exec, void *stream);
void k_cuda_graph_destroy(void *graph_exec);

/* Events, for timing on the device (benchmarks). */
int k_cuda_event_create(void **event);
void k_cuda_event_destroy(void *event);
int k_cuda_event_record(void *event, void *stream);
/* Milliseconds between two recorded events (waits for end). */
int k_cuda_event_elapsed_ms(void *start, void *end, float *ms);

/* d_y[i] += a * d_x[i] — the build smoke kernel (CPU counterpart: kcpu_axpy_f32). */
int k_axpy_f32(void *stream, size_t n, float a, const float *d_x, float *d_y);

#ifdef __cplusplus
}
#endif

#endif
