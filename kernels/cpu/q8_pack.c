/* kernels/cpu/q8_pack.c — the repacked Q8_0 layout (see matmul.h,
 * kcpu_q8_pack; constants in matmul_impl.h): built once at load by the CPU
 * backend, read by gemm_q8p in matmul_avx512.c. Plain C: it runs once per
 * matrix, at memory speed. Tested in tests/engine/test_matmul.c (every
 * Q8_0 case runs packed and unpacked; batched bits against the unpacked
 * GEMM).
 */
#include <string.h>

#include "common/checked.h"
#include "common/err.h"
#include "matmul.h"
#include "matmul_impl.h"

int kcpu_q8_pack_wanted(void)
{
	if (kcpu_isa_best() != KCPU_ISA_AVX512)
		return 0;
	const struct mm_kernels *k = mm_kernels_avx512();
	return k && k->gemm_q8p && !(k->amx_ok && k->amx_ok());
}

static int shape(const struct kmat *w, int64_t *n_panels, int64_t *n_pairs)
{
	if (!w || w->dtype != DT_Q8_0 || w->rows <= 0 || w->cols <= 0 || w->cols % Q8_0_BLOCK ||
	    w->rows > INT32_MAX || w->cols > INT32_MAX)
		return ERR_INVAL;
	*n_panels = (w->rows + MM_Q8P_ROWS - 1) / MM_Q8P_ROWS;
	*n_pairs = (w->cols / Q8_0_BLOCK + 1) / 2;
	return 0;
}

int kcpu_q8_pack_bytes(const struct kmat *w, size_t *out)
{
	int64_t np, nq;
	int rc = shape(w, &np, &nq);
	if (rc)
		return rc;
	size_t n;
	rc = ck_mul((size_t)np, (size_t)nq, &n);
	return rc ? rc : ck_mul(n, MM_Q8P_PAIR_BYTES, out);
}

struct pack_job {
	const struct kmat *w;
	uint8_t *out;
	int64_t n_panels, n_pairs;
};

/* Block b of rows r0 .. r0+15 into its half of a pair: quants + 128 in the
 * 4-k-per-lane order, F16 scales; rows past the matrix and blocks past the
 * row are zero weights (quant 0 -> 0x80, scale 0). */
static void pack_block(const struct kmat *w, int64_t r0, int64_t b, uint8_t *codes,
		       uint16_t *scales)
{
	const int64_t nb = w->cols / Q8_0_BLOCK;
	const struct q8_0_block *blocks = w->data;
	memset(codes, 0x80, 8 * 64);
	for (int c = 0; c < MM_Q8P_ROWS; c++) {
		const int64_t r = r0 + c;
		if (r >= w->rows || b >= nb) {
			scales[c] = 0;
			continue;
		}
		const struct q8_0_block *blk = blocks + r * nb + b;
		scales[c] = blk->d;
		for (int g = 0; g < Q8_0_BLOCK / 4; g++)
			for (int t = 0; t < 4; t++)
				codes[g * 64 + c * 4 + t] = (uint8_t)blk->qs[4 * g + t] ^ 0x80u;
	}
}

static void pack_worker(void *p, int ith, int nth)
{
	const struct pack_job *j = p;
	long p0, p1;
	kpool_split((long)j->n_panels, ith, nth, &p0, &p1);
	for (long pi = p0; pi < p1; pi++)
		for (int64_t q = 0; q < j->n_pairs; q++) {
			uint8_t *pair = j->out + ((size_t)pi * (size_t)j->n_pairs + (size_t)q) *
							 MM_Q8P_PAIR_BYTES;
			uint16_t *sc = (uint16_t *)(void *)(pair + 2 * 8 * 64);
			for (int h = 0; h < 2; h++)
				pack_block(j->w, (int64_t)pi * MM_Q8P_ROWS, 2 * q + h, pair + h * 8 * 64,
					   sc + h * MM_Q8P_ROWS);
		}
}

int kcpu_q8_pack(struct kpool *pool, const struct kmat *w, void *out)
{
	struct pack_job j = { .w = w, .out = out };
	int rc = shape(w, &j.n_panels, &j.n_pairs);
	if (rc)
		return rc;
	if (!out || !w->data)
		return ERR_INVAL;
	kpool_run(pool, pack_worker, &j);
	return 0;
}
