/* tests/kernels/test_cuda_mma.c — the per-lane layouts of kernels/cuda/kcuda_mma.h
 * (mma.sync m16n8k16 with F32 accumulators, ldmatrix x4 with and without
 * .trans, cp.async) that the tensor-core prefill in k_attn.cu relies on,
 * checked against plain 16 x 16 matrix products in double on random BF16
 * and F16 inputs through k_mma_selftest (k_attn.cu, one warp):
 *   out[0] = C + A Bt^T   A and Bt read by ldmatrix,
 *   out[1] = C + A V      V read by ldmatrix.trans,
 *   out[2] = C + A Bt^T   fragments read element by element (mma alone).
 * Products of 16-bit values are exact in F32 and the sums have 17 terms of
 * magnitude <= 4, so atol 1e-4 covers F32 rounding in any order; a wrong
 * lane or register mapping moves terms by O(1). On the GPU this checks the
 * documented layout against the hardware; under tests/emu it checks the
 * emulator's implementation of the same layout (which the attention test then
 * runs on). Exits 77 without a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_attn.h"
#include "tests/kernels/kcheck.h"

static void check(void *stream, enum dtype dt, uint64_t seed)
{
	struct kc_rng rng;
	kc_seed(&rng, seed);
	float a[256], bt[256], v[256], c[256], got[768], ref[768];
	kc_fill(&rng, a, 256, -2.0f, 2.0f);
	kc_fill(&rng, bt, 256, -2.0f, 2.0f);
	kc_fill(&rng, v, 256, -2.0f, 2.0f);
	kc_fill(&rng, c, 256, -1.0f, 1.0f);
	kc_round(a, 256, dt);
	kc_round(bt, 256, dt);
	kc_round(v, 256, dt);
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 16; j++) {
			double s0 = c[i * 16 + j], s1 = c[i * 16 + j];
			for (int k = 0; k < 16; k++) {
				s0 += (double)a[i * 16 + k] * bt[j * 16 + k];
				s1 += (double)a[i * 16 + k] * v[k * 16 + j];
			}
			ref[i * 16 + j] = ref[512 + i * 16 + j] = (float)s0;
			ref[256 + i * 16 + j] = (float)s1;
		}
	void *pa = kc_pack(a, 256, dt), *pb = kc_pack(bt, 256, dt), *pv = kc_pack(v, 256, dt);
	void *d_a = kc_upload(pa, 512), *d_b = kc_upload(pb, 512), *d_v = kc_upload(pv, 512);
	void *d_c = kc_upload(c, sizeof c), *d_o = kc_dev_alloc(sizeof got);
	kc_ok(k_cuda_memset_async(stream, d_o, 0xff, sizeof got), "memset out");
	kc_ok(k_mma_selftest(stream, dt == DT_BF16, d_a, d_b, d_v, d_c, d_o), "k_mma_selftest");
	kc_sync("k_mma_selftest");
	kc_download(got, d_o, sizeof got);
	const char *name = dt == DT_BF16 ? "bf16" : "f16";
	char label[64];
	snprintf(label, sizeof label, "%s ldmatrix + mma: C + A Bt^T", name);
	kc_compare(label, got, ref, 256, 1e-4f, 1e-5f);
	snprintf(label, sizeof label, "%s ldmatrix.trans + mma: C + A V", name);
	kc_compare(label, got + 256, ref + 256, 256, 1e-4f, 1e-5f);
	snprintf(label, sizeof label, "%s mma, fragments by hand: C + A Bt^T", name);
	kc_compare(label, got + 512, ref + 512, 256, 1e-4f, 1e-5f);
	kc_dev_free(d_a);
	kc_dev_free(d_b);
	kc_dev_free(d_v);
	kc_dev_free(d_c);
	kc_dev_free(d_o);
	free(pa);
	free(pb);
	free(pv);
}

int main(void)
{
	kc_require_gpu("test_cuda_mma");
	void *stream = NULL;
	kc_ok(k_cuda_stream_create(&stream), "k_cuda_stream_create");
	for (uint64_t seed = 1; seed <= 3; seed++) {
		check(stream, DT_BF16, seed);
		check(stream, DT_F16, 100 + seed);
	}
	const int rc = kc_finish();
	k_cuda_stream_destroy(stream);
	return rc;
}
