/* kernels/cpu/matmul_avx2.c — AVX2 + FMA + F16C inner kernels of kcpu_matmul
 * (see matmul_impl.h). Not written yet: the AVX2 path is reported as not
 * available, so such CPUs use the portable kernels. */
#include "matmul_impl.h"

const struct mm_kernels *mm_kernels_avx2(void)
{
	return NULL;
}
