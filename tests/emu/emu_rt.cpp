// tests/emu/emu_rt.cpp — the CUDA runtime API subset kernels/cuda/*.cu call,
// on host memory, for the emulated tests (see README). One emulated device:
// an sm_90 "H200" with FP8 whose memory is a budget of host RAM
// (EMU_DEVICE_MEM_MB, default 4096). Streams run their work at once, in
// order; a capturing stream records it instead, and a graph replays the
// records. What the device would reject is rejected with the same kind of
// error (launch limits, dynamic shared memory over 48 KB without the
// attribute, copies outside a device allocation, calls that break a
// capture); fresh device memory and dynamic shared memory are 0xff bytes
// (NaN floats), so reading what nobody wrote shows.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "emu_cuda.h"
#include "emu_rt.h"

void emu_run_grid(dim3 grid, dim3 block, size_t smem, const char *name,
		  const std::function<void()> &body);

namespace {

struct stream {
	bool capturing = false, invalidated = false;
	std::vector<std::function<void()>> rec;
};
struct graph {
	std::vector<std::function<void()>> nodes;
};
struct event {
	bool recorded = false;
	double t = 0;
};

std::mutex g_mu; // guards everything below
std::map<uintptr_t, size_t> g_dev;  // device allocations: start -> bytes
std::set<void *> g_host;	    // cudaHostAlloc'ed
std::set<stream *> g_streams;
std::set<graph *> g_graphs;
std::set<event *> g_events;
std::map<const void *, int> g_max_dyn_smem; // cudaFuncAttributeMaxDynamicSharedMemorySize
size_t g_used, g_budget;
thread_local cudaError_t t_last; // cudaGetLastError
thread_local stream *t_capture;	 // the stream this thread captures, if any

const int SMEM_DEFAULT = 48 * 1024, SMEM_OPTIN = 232448; // sm_90 per block

size_t budget()
{
	if (!g_budget) {
		const char *e = getenv("EMU_DEVICE_MEM_MB");
		g_budget = (size_t)(e && atol(e) > 0 ? atol(e) : 4096) << 20;
	}
	return g_budget;
}

cudaError_t err(cudaError_t e)
{
	if (e != cudaSuccess)
		t_last = e;
	return e;
}

double now_ms()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

bool in_dev_locked(const void *p, size_t bytes)
{
	auto it = g_dev.upper_bound((uintptr_t)p);
	if (it == g_dev.begin())
		return false;
	--it;
	const uintptr_t a = (uintptr_t)p;
	return a >= it->first && a - it->first <= it->second && bytes <= it->second - (a - it->first);
}

// nullptr: the legacy default stream. false: not a stream we made.
bool lookup(cudaStream_t s, stream **out)
{
	*out = nullptr;
	if (!s || s == cudaStreamLegacy || s == cudaStreamPerThread)
		return true;
	std::lock_guard<std::mutex> l(g_mu);
	if (!g_streams.count((stream *)s))
		return false;
	*out = (stream *)s;
	return true;
}

} // namespace

bool emu_after_verdict; // emu_verdict.cpp: skip launches after kc_finish

// ---- emu_rt.h ----------------------------------------------------------------

void emu_fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fflush(stdout);
	fputs("emu: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	abort();
}

bool emu_is_device(const void *p, size_t bytes)
{
	std::lock_guard<std::mutex> l(g_mu);
	return in_dev_locked(p, bytes);
}

cudaError_t emu_stream_submit(cudaStream_t s, std::function<void()> fn)
{
	stream *st;
	if (!lookup(s, &st))
		return cudaErrorInvalidResourceHandle;
	if (st && st->capturing) {
		if (t_capture != st)
			return cudaErrorStreamCaptureWrongThread;
		st->rec.push_back(std::move(fn));
		return cudaSuccess;
	}
	fn();
	return cudaSuccess;
}

bool emu_stream_capturing(cudaStream_t s)
{
	stream *st;
	return lookup(s, &st) && st && st->capturing;
}

bool emu_capture_violation(const char *what)
{
	if (!t_capture)
		return false;
	fprintf(stderr, "emu: %s during a stream capture (invalidates the capture)\n", what);
	t_capture->invalidated = true;
	return true;
}

// ---- launches (emu_cuda.h) ---------------------------------------------------

void emu_submit(dim3 grid, dim3 block, size_t smem, cudaStream_t s, const char *name,
		const void *func, int max_threads, std::function<void()> body)
{
	const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
	if (!threads || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
	    !grid.x || !grid.y || !grid.z || grid.x > 2147483647u || grid.y > 65535 ||
	    grid.z > 65535) {
		fprintf(stderr, "emu: %s: invalid launch grid (%u,%u,%u) block (%u,%u,%u)\n", name,
			grid.x, grid.y, grid.z, block.x, block.y, block.z);
		err(cudaErrorInvalidConfiguration);
		return;
	}
	if (max_threads > 0 && threads > (unsigned long long)max_threads) {
		fprintf(stderr, "emu: %s: %llu threads over __launch_bounds__(%d)\n", name, threads,
			max_threads);
		err(cudaErrorLaunchOutOfResources);
		return;
	}
	if (smem > (size_t)SMEM_DEFAULT) {
		int allowed = 0;
		{
			std::lock_guard<std::mutex> l(g_mu);
			auto it = g_max_dyn_smem.find(func);
			allowed = it == g_max_dyn_smem.end() ? 0 : it->second;
		}
		if (smem > (size_t)allowed) {
			fprintf(stderr,
				"emu: %s: %zu bytes of dynamic shared memory, over 48 KB and the "
				"%d the kernel's attribute allows\n",
				name, smem, allowed);
			err(cudaErrorInvalidValue);
			return;
		}
	}
	if (emu_after_verdict)
		return;
	cudaError_t e = emu_stream_submit(s, [grid, block, smem, name, body]() {
		emu_run_grid(grid, block, smem, name, body);
	});
	if (e)
		err(e);
}

// ---- the runtime API -----------------------------------------------------------

extern "C" {

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = t_last;
	t_last = cudaSuccess;
	return e;
}

cudaError_t cudaPeekAtLastError(void)
{
	return t_last;
}

const char *cudaGetErrorName(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return "cudaSuccess";
	case cudaErrorInvalidValue:
		return "cudaErrorInvalidValue";
	case cudaErrorMemoryAllocation:
		return "cudaErrorMemoryAllocation";
	case cudaErrorInvalidConfiguration:
		return "cudaErrorInvalidConfiguration";
	case cudaErrorLaunchOutOfResources:
		return "cudaErrorLaunchOutOfResources";
	case cudaErrorInvalidResourceHandle:
		return "cudaErrorInvalidResourceHandle";
	case cudaErrorInvalidDevice:
		return "cudaErrorInvalidDevice";
	case cudaErrorNotSupported:
		return "cudaErrorNotSupported";
	case cudaErrorStreamCaptureUnsupported:
		return "cudaErrorStreamCaptureUnsupported";
	case cudaErrorStreamCaptureInvalidated:
		return "cudaErrorStreamCaptureInvalidated";
	case cudaErrorStreamCaptureWrongThread:
		return "cudaErrorStreamCaptureWrongThread";
	case cudaErrorIllegalState:
		return "cudaErrorIllegalState";
	default:
		return "cudaError (emulated)";
	}
}

const char *cudaGetErrorString(cudaError_t e)
{
	return cudaGetErrorName(e);
}

cudaError_t cudaGetDeviceCount(int *n)
{
	*n = getenv("EMU_NO_DEVICE") ? 0 : 1;
	return *n ? cudaSuccess : err(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int d)
{
	return d == 0 ? cudaSuccess : err(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDevice(int *d)
{
	*d = 0;
	return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
	if (d != 0)
		return err(cudaErrorInvalidDevice);
	memset(p, 0, sizeof *p);
	snprintf(p->name, sizeof p->name, "NVIDIA H200 (aorta host emulator)");
	p->major = 9;
	p->minor = 0;
	p->multiProcessorCount = 132;
	p->totalGlobalMem = budget();
	p->sharedMemPerBlock = SMEM_DEFAULT;
	p->sharedMemPerBlockOptin = SMEM_OPTIN;
	p->sharedMemPerMultiprocessor = 233472;
	p->regsPerBlock = 65536;
	p->regsPerMultiprocessor = 65536;
	p->warpSize = 32;
	p->maxThreadsPerBlock = 1024;
	p->maxThreadsPerMultiProcessor = 2048;
	p->maxThreadsDim[0] = 1024;
	p->maxThreadsDim[1] = 1024;
	p->maxThreadsDim[2] = 64;
	p->maxGridSize[0] = 2147483647;
	p->maxGridSize[1] = 65535;
	p->maxGridSize[2] = 65535;
	p->l2CacheSize = 50 << 20;
	p->memoryBusWidth = 6144;
	p->totalConstMem = 65536;
	p->unifiedAddressing = 1;
	p->concurrentKernels = 1;
	return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d)
{
	if (d != 0)
		return err(cudaErrorInvalidDevice);
	switch (a) {
	case cudaDevAttrComputeCapabilityMajor:
		*v = 9;
		return cudaSuccess;
	case cudaDevAttrComputeCapabilityMinor:
		*v = 0;
		return cudaSuccess;
	case cudaDevAttrMultiProcessorCount:
		*v = 132;
		return cudaSuccess;
	case cudaDevAttrMaxSharedMemoryPerBlockOptin:
		*v = SMEM_OPTIN;
		return cudaSuccess;
	case cudaDevAttrMaxThreadsPerBlock:
		*v = 1024;
		return cudaSuccess;
	default:
		return err(cudaErrorNotSupported);
	}
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
	std::lock_guard<std::mutex> l(g_mu);
	*total_b = budget();
	*free_b = budget() - g_used;
	return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
	if (emu_capture_violation("cudaDeviceSynchronize"))
		return err(cudaErrorStreamCaptureUnsupported);
	return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
	*p = nullptr;
	if (emu_capture_violation("cudaMalloc"))
		return err(cudaErrorStreamCaptureUnsupported);
	const size_t rounded = (bytes + 255) / 256 * 256;
	std::lock_guard<std::mutex> l(g_mu);
	if (rounded > budget() - g_used)
		return err(cudaErrorMemoryAllocation);
	void *q = aligned_alloc(256, rounded ? rounded : 256);
	if (!q)
		return err(cudaErrorMemoryAllocation);
	// What a kernel reads before anybody wrote it is NaN (big pools stay as
	// the allocator leaves them: filling gigabytes costs more than it shows).
	if (rounded <= ((size_t)256 << 20))
		memset(q, 0xff, rounded);
	g_dev[(uintptr_t)q] = bytes;
	g_used += rounded;
	*p = q;
	return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
	if (!p)
		return cudaSuccess;
	if (emu_capture_violation("cudaFree"))
		return err(cudaErrorStreamCaptureUnsupported);
	std::lock_guard<std::mutex> l(g_mu);
	auto it = g_dev.find((uintptr_t)p);
	if (it == g_dev.end()) {
		fprintf(stderr, "emu: cudaFree(%p): not a device allocation\n", p);
		return err(cudaErrorInvalidValue);
	}
	g_used -= (it->second + 255) / 256 * 256;
	g_dev.erase(it);
	free(p);
	return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags)
{
	(void)flags;
	*p = nullptr;
	if (emu_capture_violation("cudaHostAlloc"))
		return err(cudaErrorStreamCaptureUnsupported);
	void *q = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096 + 4096);
	if (!q)
		return err(cudaErrorMemoryAllocation);
	std::lock_guard<std::mutex> l(g_mu);
	g_host.insert(q);
	*p = q;
	return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
	return cudaHostAlloc(p, bytes, 0);
}

cudaError_t cudaFreeHost(void *p)
{
	if (!p)
		return cudaSuccess;
	if (emu_capture_violation("cudaFreeHost"))
		return err(cudaErrorStreamCaptureUnsupported);
	std::lock_guard<std::mutex> l(g_mu);
	if (!g_host.erase(p)) {
		fprintf(stderr, "emu: cudaFreeHost(%p): not from cudaHostAlloc\n", p);
		return err(cudaErrorInvalidValue);
	}
	free(p);
	return cudaSuccess;
}

} // extern "C"

// The device side of a copy must lie in one allocation; the host side of a
// host<->device copy must not be device memory (swapped arguments).
static cudaError_t check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
			      const char *what)
{
	std::lock_guard<std::mutex> l(g_mu);
	const bool dst_dev = in_dev_locked(dst, n), src_dev = in_dev_locked(src, n);
	const bool dst_in = in_dev_locked(dst, 1), src_in = in_dev_locked(src, 1);
	bool ok = true;
	switch (kind) {
	case cudaMemcpyHostToDevice:
		ok = dst_dev && !src_in;
		break;
	case cudaMemcpyDeviceToHost:
		ok = src_dev && !dst_in;
		break;
	case cudaMemcpyDeviceToDevice:
		ok = dst_dev && src_dev;
		break;
	case cudaMemcpyHostToHost:
		ok = !dst_in && !src_in;
		break;
	default: // cudaMemcpyDefault: each side whole wherever it starts
		ok = (!dst_in || dst_dev) && (!src_in || src_dev);
		break;
	}
	if (!ok) {
		fprintf(stderr, "emu: %s(%p <- %p, %zu bytes, kind %d): outside device memory\n",
			what, dst, src, n, (int)kind);
		return cudaErrorInvalidValue;
	}
	return cudaSuccess;
}

extern "C" {

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
	if (emu_capture_violation("cudaMemcpy"))
		return err(cudaErrorStreamCaptureUnsupported);
	if (!n)
		return cudaSuccess;
	cudaError_t e = check_copy(dst, src, n, kind, "cudaMemcpy");
	if (e)
		return err(e);
	memmove(dst, src, n);
	return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
			    cudaStream_t s)
{
	if (!n)
		return cudaSuccess;
	cudaError_t e = check_copy(dst, src, n, kind, "cudaMemcpyAsync");
	if (e)
		return err(e);
	return err(emu_stream_submit(s, [dst, src, n]() { memmove(dst, src, n); }));
}

cudaError_t cudaMemset(void *p, int v, size_t n)
{
	if (emu_capture_violation("cudaMemset"))
		return err(cudaErrorStreamCaptureUnsupported);
	if (!n)
		return cudaSuccess;
	if (!emu_is_device(p, n)) {
		fprintf(stderr, "emu: cudaMemset(%p, %zu bytes): outside device memory\n", p, n);
		return err(cudaErrorInvalidValue);
	}
	memset(p, v, n);
	return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
	if (!n)
		return cudaSuccess;
	if (!emu_is_device(p, n)) {
		fprintf(stderr, "emu: cudaMemsetAsync(%p, %zu bytes): outside device memory\n", p,
			n);
		return err(cudaErrorInvalidValue);
	}
	return err(emu_stream_submit(s, [p, v, n]() { memset(p, v, n); }));
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int v)
{
	if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
		return cudaSuccess;
	if (v < 0 || v > SMEM_OPTIN)
		return err(cudaErrorInvalidValue);
	std::lock_guard<std::mutex> l(g_mu);
	g_max_dyn_smem[func] = v;
	return cudaSuccess;
}

// ---- streams and graphs --------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	(void)flags;
	stream *st = new stream;
	std::lock_guard<std::mutex> l(g_mu);
	g_streams.insert(st);
	*s = (cudaStream_t)st;
	return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
	return cudaStreamCreateWithFlags(s, 0);
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	std::lock_guard<std::mutex> l(g_mu);
	if (!g_streams.erase((stream *)s))
		return err(cudaErrorInvalidResourceHandle);
	if (t_capture == (stream *)s)
		t_capture = nullptr;
	delete (stream *)s;
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	stream *st;
	if (!lookup(s, &st))
		return err(cudaErrorInvalidResourceHandle);
	if (st && st->capturing) {
		st->invalidated = true;
		return err(cudaErrorStreamCaptureUnsupported);
	}
	if (emu_capture_violation("cudaStreamSynchronize"))
		return err(cudaErrorStreamCaptureUnsupported);
	return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
	(void)mode;
	stream *st;
	if (!lookup(s, &st))
		return err(cudaErrorInvalidResourceHandle);
	if (!st) // the legacy stream cannot be captured
		return err(cudaErrorStreamCaptureUnsupported);
	if (st->capturing || t_capture)
		return err(cudaErrorIllegalState);
	st->capturing = true;
	st->invalidated = false;
	st->rec.clear();
	t_capture = st;
	return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
	*g = nullptr;
	stream *st;
	if (!lookup(s, &st))
		return err(cudaErrorInvalidResourceHandle);
	if (!st || !st->capturing)
		return err(cudaErrorIllegalState);
	if (t_capture != st)
		return err(cudaErrorStreamCaptureWrongThread);
	st->capturing = false;
	t_capture = nullptr;
	if (st->invalidated) {
		st->rec.clear();
		return err(cudaErrorStreamCaptureInvalidated);
	}
	graph *gr = new graph;
	gr->nodes.swap(st->rec);
	std::lock_guard<std::mutex> l(g_mu);
	g_graphs.insert(gr);
	*g = (cudaGraph_t)gr;
	return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status)
{
	stream *st;
	if (!lookup(s, &st))
		return err(cudaErrorInvalidResourceHandle);
	*status = st && st->capturing ? (st->invalidated ? cudaStreamCaptureStatusInvalidated
							  : cudaStreamCaptureStatusActive)
				      : cudaStreamCaptureStatusNone;
	return cudaSuccess;
}

// Graphs and their executable form are the same object here (a list of
// recorded operations); instantiate copies it.
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *ge, cudaGraph_t g, unsigned long long flags)
{
	(void)flags;
	std::lock_guard<std::mutex> l(g_mu);
	if (!g_graphs.count((graph *)g))
		return err(cudaErrorInvalidValue);
	graph *x = new graph(*(graph *)g);
	g_graphs.insert(x);
	*ge = (cudaGraphExec_t)x;
	return cudaSuccess;
}

static cudaError_t graph_free(void *g)
{
	std::lock_guard<std::mutex> l(g_mu);
	if (!g_graphs.erase((graph *)g))
		return err(cudaErrorInvalidValue);
	delete (graph *)g;
	return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
	return graph_free(g);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t g)
{
	return graph_free(g);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t ge, cudaStream_t s)
{
	graph *g = (graph *)ge;
	{
		std::lock_guard<std::mutex> l(g_mu);
		if (!g_graphs.count(g))
			return err(cudaErrorInvalidValue);
	}
	return err(emu_stream_submit(s, [g]() {
		for (auto &n : g->nodes)
			n();
	}));
}

// ---- events ----------------------------------------------------------------------

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
	(void)flags;
	event *ev = new event;
	std::lock_guard<std::mutex> l(g_mu);
	g_events.insert(ev);
	*e = (cudaEvent_t)ev;
	return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
	return cudaEventCreateWithFlags(e, 0);
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	std::lock_guard<std::mutex> l(g_mu);
	if (!g_events.erase((event *)e))
		return err(cudaErrorInvalidResourceHandle);
	delete (event *)e;
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	{
		std::lock_guard<std::mutex> l(g_mu);
		if (!g_events.count((event *)e))
			return err(cudaErrorInvalidResourceHandle);
	}
	event *ev = (event *)e;
	return err(emu_stream_submit(s, [ev]() {
		ev->recorded = true;
		ev->t = now_ms();
	}));
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	if (emu_capture_violation("cudaEventSynchronize"))
		return err(cudaErrorStreamCaptureUnsupported);
	std::lock_guard<std::mutex> l(g_mu);
	return g_events.count((event *)e) ? cudaSuccess : err(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	event *x = (event *)a, *y = (event *)b;
	{
		std::lock_guard<std::mutex> l(g_mu);
		if (!g_events.count(x) || !g_events.count(y))
			return err(cudaErrorInvalidResourceHandle);
	}
	if (!x->recorded || !y->recorded)
		return err(cudaErrorInvalidResourceHandle);
	*ms = (float)(y->t - x->t);
	return cudaSuccess;
}

} // extern "C"
