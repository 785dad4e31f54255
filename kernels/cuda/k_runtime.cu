// kernels/cuda/k_runtime.cu — device, stream, copy, pinned-memory, graph and
// event helpers of kcuda.h (the runtime part). Errors become ERR_DEVICE with
// the CUDA message in k_cuda_last_error().
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include <mutex>

#include "common/err.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_internal.h"

static bool g_pdl; // k_cuda_set_pdl

bool kcu_pdl_on(void)
{
	return g_pdl;
}

extern "C" void k_cuda_set_pdl(int on)
{
	g_pdl = on != 0;
}

extern "C" int k_cuda_pdl(void)
{
	return g_pdl ? 1 : 0;
}

// The dynamic shared memory each kernel was opted in to, per device: a
// launch that needs no more than that asks the driver nothing.
#define SMEM_OPTIN_SLOTS 64
static struct {
	const void *func;
	int device, bytes;
} g_optin[SMEM_OPTIN_SLOTS];
static int g_n_optin;
static std::mutex g_optin_mu;

cudaError_t kcu_smem_optin(const void *func, size_t bytes)
{
	if (bytes <= (48u << 10))
		return cudaSuccess;
	int dev = 0;
	cudaError_t e = cudaGetDevice(&dev);
	if (e != cudaSuccess)
		return e;
	std::lock_guard<std::mutex> l(g_optin_mu);
	int i = 0;
	while (i < g_n_optin && !(g_optin[i].func == func && g_optin[i].device == dev))
		i++;
	if (i < g_n_optin && (size_t)g_optin[i].bytes >= bytes)
		return cudaSuccess;
	e = cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
	if (e != cudaSuccess)
		return e;
	if (i == g_n_optin && g_n_optin < SMEM_OPTIN_SLOTS) // full: ask every time
		g_optin[g_n_optin++] = {func, dev, 0};
	if (i < g_n_optin)
		g_optin[i].bytes = (int)bytes;
	return cudaSuccess;
}

extern "C" int k_cuda_set_device(int device)
{
	return kcu_check(cudaSetDevice(device), "cudaSetDevice");
}

extern "C" int k_cuda_props(int device, struct k_cuda_props *out)
{
	cudaDeviceProp p;
	int rc = kcu_check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
	if (rc)
		return rc;
	memset(out, 0, sizeof *out);
	size_t n = strnlen(p.name, sizeof out->name - 1); // device names are short
	memcpy(out->name, p.name, n);
	out->name[n] = 0;
	out->cc_major = p.major;
	out->cc_minor = p.minor;
	out->n_sms = p.multiProcessorCount;
	out->total_mem = p.totalGlobalMem;
	out->has_fp8 = p.major > 8 || (p.major == 8 && p.minor >= 9);
	return 0;
}

extern "C" int k_cuda_mem_info(size_t *free_bytes, size_t *total_bytes)
{
	return kcu_check(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
}

extern "C" int k_cuda_stream_create(void **stream)
{
	cudaStream_t s = NULL;
	int rc = kcu_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
			   "cudaStreamCreate");
	*stream = rc ? NULL : (void *)s;
	return rc;
}

extern "C" void k_cuda_stream_destroy(void *stream)
{
	if (stream)
		cudaStreamDestroy((cudaStream_t)stream);
}

extern "C" int k_cuda_stream_sync(void *stream)
{
	return kcu_check(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
}

extern "C" int k_cuda_memcpy_h2d_async(void *stream, void *d_dst, const void *src, size_t bytes)
{
	if (!bytes)
		return 0;
	return kcu_check(cudaMemcpyAsync(d_dst, src, bytes, cudaMemcpyHostToDevice,
					 (cudaStream_t)stream),
			 "memcpy h2d async");
}

extern "C" int k_cuda_memcpy_d2h_async(void *stream, void *dst, const void *d_src, size_t bytes)
{
	if (!bytes)
		return 0;
	return kcu_check(cudaMemcpyAsync(dst, d_src, bytes, cudaMemcpyDeviceToHost,
					 (cudaStream_t)stream),
			 "memcpy d2h async");
}

extern "C" int k_cuda_memcpy_d2d_async(void *stream, void *d_dst, const void *d_src, size_t bytes)
{
	if (!bytes)
		return 0;
	return kcu_check(cudaMemcpyAsync(d_dst, d_src, bytes, cudaMemcpyDeviceToDevice,
					 (cudaStream_t)stream),
			 "memcpy d2d async");
}

extern "C" int k_cuda_memset_async(void *stream, void *d_dst, int byte, size_t bytes)
{
	if (!bytes)
		return 0;
	return kcu_check(cudaMemsetAsync(d_dst, byte, bytes, (cudaStream_t)stream), "memset async");
}

extern "C" int k_cuda_host_alloc(void **ptr, size_t bytes)
{
	return kcu_check(cudaHostAlloc(ptr, bytes ? bytes : 1, cudaHostAllocDefault),
			 "cudaHostAlloc");
}

extern "C" void k_cuda_host_free(void *ptr)
{
	if (ptr)
		cudaFreeHost(ptr);
}

extern "C" int k_cuda_graph_begin(void *stream)
{
	return kcu_check(cudaStreamBeginCapture((cudaStream_t)stream,
						cudaStreamCaptureModeThreadLocal),
			 "cudaStreamBeginCapture");
}

extern "C" int k_cuda_graph_end(void *stream, void **graph_exec)
{
	cudaGraph_t g = NULL;
	*graph_exec = NULL;
	int rc = kcu_check(cudaStreamEndCapture((cudaStream_t)stream, &g), "cudaStreamEndCapture");
	if (rc)
		return rc;
	cudaGraphExec_t ge = NULL;
	rc = kcu_check(cudaGraphInstantiate(&ge, g, 0), "cudaGraphInstantiate");
	cudaGraphDestroy(g);
	if (!rc)
		*graph_exec = (void *)ge;
	return rc;
}

extern "C" int k_cuda_graph_launch(void *graph_exec, void *stream)
{
	return kcu_check(cudaGraphLaunch((cudaGraphExec_t)graph_exec, (cudaStream_t)stream),
			 "cudaGraphLaunch");
}

extern "C" void k_cuda_graph_destroy(void *graph_exec)
{
	if (graph_exec)
		cudaGraphExecDestroy((cudaGraphExec_t)graph_exec);
}

extern "C" int k_cuda_event_create(void **event)
{
	cudaEvent_t e = NULL;
	int rc = kcu_check(cudaEventCreate(&e), "cudaEventCreate");
	*event = rc ? NULL : (void *)e;
	return rc;
}

extern "C" void k_cuda_event_destroy(void *event)
{
	if (event)
		cudaEventDestroy((cudaEvent_t)event);
}

extern "C" int k_cuda_event_record(void *event, void *stream)
{
	return kcu_check(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream),
			 "cudaEventRecord");
}

extern "C" int k_cuda_event_elapsed_ms(void *start, void *end, float *ms)
{
	int rc = kcu_check(cudaEventSynchronize((cudaEvent_t)end), "cudaEventSynchronize");
	if (rc)
		return rc;
	return kcu_check(cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end),
			 "cudaEventElapsedTime");
}
