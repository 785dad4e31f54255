/* kernels/cpu/k_smoke.h — the smallest CPU kernel, y += a*x, kept as the CPU
 * counterpart of the CUDA build smoke kernel (kernels/cuda/k_smoke.cu) so that
 * the CUDA toolchain, the launch checks and the GPU test harness are exercised
 * on every build. Stateless; any thread. */
#ifndef AORTA_KERNELS_CPU_K_SMOKE_H
#define AORTA_KERNELS_CPU_K_SMOKE_H

#include <stddef.h>

/* y[i] += a * x[i] for i < n. */
void kcpu_axpy_f32(size_t n, float a, const float *x, float *y);

#endif
