/* kernels/cpu/k_smoke.c — reference axpy; see k_smoke.h. */
#include "k_smoke.h"

void kcpu_axpy_f32(size_t n, float a, const float *x, float *y)
{
	for (size_t i = 0; i < n; i++)
		y[i] += a * x[i];
}
