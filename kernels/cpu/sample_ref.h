/* kernels/cpu/sample_ref.h — plain C reference of the GPU sampling chain
 * (kernels/sample.h): the same flat rows, CSR entries and
 * outputs, run through kernels/sample_seq.h's sequential chain, the one
 * engine/sample/sampler.c's sampler_sample runs, so it gives sampler_sample's
 * token for the same u.
 *
 * Tests: tests/sampling/test_sample_device.c (against sampler_sample, runs in
 * CI) and tests/kernels/test_cuda_sample.c (the kernel against this).
 */
#ifndef AORTA_KERNELS_CPU_SAMPLE_REF_H
#define AORTA_KERNELS_CPU_SAMPLE_REF_H

#include <stdint.h>

#include "kernels/sample.h"

/* Where the draw landed, for tests that accept the neighbour when the sums
 * of another summation order could cross the boundary the other way. */
struct k_sample_ref_info {
	double margin; /* distance of u * mass to the nearest cumulative boundary of
			  the chosen token, relative to the mass (0 for greedy) */
	int32_t prev, next; /* kept tokens before / after it in the draw order, -1 if none */
};

/* Host pointers throughout; a->logits is modified as k_sample modifies it.
 * info: [n_rows] or NULL. ERR_INVAL for bad sizes or pointers, ERR_NOMEM. */
int k_sample_ref(const struct k_sample_args *a, struct k_sample_ref_info *info);

#endif
