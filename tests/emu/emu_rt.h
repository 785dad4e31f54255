// tests/emu/emu_rt.h — what emu_rt.cpp (the emulated CUDA runtime) offers the
// other emulator parts (emu_blas.cpp): stream work, device-pointer checks,
// the capture state, and a fatal "emu:" report.
#ifndef AORTA_TESTS_EMU_EMU_RT_H
#define AORTA_TESTS_EMU_EMU_RT_H

#include <cuda_runtime.h>
#include <stddef.h>

#include <functional>

// Runs fn now, or appends it to the graph being captured on stream.
// cudaErrorInvalidResourceHandle for an unknown stream.
cudaError_t emu_stream_submit(cudaStream_t stream, std::function<void()> fn);
// True when stream is being captured.
bool emu_stream_capturing(cudaStream_t stream);
// An operation that may not run during a capture was called while this
// thread captures: invalidates that capture (as CUDA does), returns true.
bool emu_capture_violation(const char *what);
// True when [p, p + bytes) lies inside one cudaMalloc allocation.
bool emu_is_device(const void *p, size_t bytes);
// Set by emu_verdict.cpp once the test printed its verdict: kernel and
// cuBLAS launches are skipped from then on (timing loops).
extern bool emu_after_verdict;
// Print "emu: <message>" and abort: the emulated program did something
// undefined that the device would not report (a deadlock, a bad collective).
[[noreturn]] void emu_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
