/* kernels/cpu/pack.c — the repacked weight layouts (see matmul.h,
 * kcpu_pack; constants in matmul_impl.h) for Q8_0 and I8 (gemm_q8p /
 * gemm_i8p) and F16, BF16, F8_E4M3 (gemm_fp): built once at load by the CPU
 * backend, read by matmul_avx512.c. Plain C: it runs once per matrix.
 * Tested in tests/kernels/test_matmul.c (every case of these dtypes runs
 * packed and unpacked; batched bits across m).
 */
#include <stdbool.h>
#include <string.h>

#include "common/checked.h"
#include "common/err.h"
#include "matmul.h"
#include "matmul_impl.h"

int kcpu_pack_wanted(const struct kmat *w)
{
	if (!w || kcpu_isa_best() != KCPU_ISA_AVX512)
		return 0;
	const struct mm_kernels *k = mm_kernels_avx512();
	if (!k)
		return 0;
	/* Q8_0 on AMX machines: the tile path reads the blocks in place */
	switch (w->dtype) {
	case DT_Q8_0:
		return k->gemm_q8p && !(k->amx_ok && k->amx_ok());
	case DT_I8:
		return k->gemm_i8p && w->cols <= MM_I8P_MAX_K;
	case DT_F16:
	case DT_BF16:
	case DT_F8_E4M3:
		return k->gemm_fp != NULL;
	default:
		return 0;
	}
}

/* Panels and their bytes; ERR_INVAL for what has no packed layout. */
static int shape(const struct kmat *w, int64_t *n_panels, size_t *panel_bytes)
{
	if (!w || w->rows <= 0 || w->cols <= 0 || w->rows > INT32_MAX)
		return ERR_INVAL;
	if (w->dtype == DT_Q8_0 && w->cols % Q8_0_BLOCK == 0)
		*panel_bytes = (size_t)((w->cols / Q8_0_BLOCK + 1) / 2) * MM_Q8P_PAIR_BYTES;
	else if (w->dtype == DT_I8 && w->cols <= MM_I8P_MAX_K)
		*panel_bytes = (size_t)((w->cols + Q8_0_BLOCK - 1) / Q8_0_BLOCK) * MM_I8P_BLOCK_BYTES;
	else if (w->dtype == DT_F16 || w->dtype == DT_BF16)
		*panel_bytes = (size_t)w->cols * MM_Q8P_ROWS * 2;
	else if (w->dtype == DT_F8_E4M3)
		*panel_bytes = (size_t)w->cols * MM_Q8P_ROWS;
	else
		return ERR_INVAL;
	*n_panels = (w->rows + MM_Q8P_ROWS - 1) / MM_Q8P_ROWS;
	return 0;
}

int kcpu_pack_bytes(const struct kmat *w, size_t *out)
{
	int64_t np;
	size_t pb;
	int rc = shape(w, &np, &pb);
	return rc ? rc : ck_mul((size_t)np, pb, out);
}

/* 32 k of rows r0 .. r0+15 from k0 into the 4-k-per-lane order, + 128:
 * line g holds k0+4g .. k0+4g+3 of the 16 rows. Rows past the matrix and k
 * past the row are zero weights (0x80). */
static void pack_codes(const struct kmat *w, int64_t r0, int64_t k0, uint8_t *codes)
{
	memset(codes, 0x80, 8 * 64);
	if (k0 >= w->cols)
		return;
	const int64_t nb = w->cols / Q8_0_BLOCK;
	for (int c = 0; c < MM_Q8P_ROWS && r0 + c < w->rows; c++) {
		const int64_t r = r0 + c;
		const int8_t *src;
		int64_t n = Q8_0_BLOCK;
		if (w->dtype == DT_Q8_0) {
			src = ((const struct q8_0_block *)w->data)[r * nb + k0 / Q8_0_BLOCK].qs;
		} else {
			src = (const int8_t *)w->data + r * w->cols + k0;
			n = w->cols - k0 < Q8_0_BLOCK ? w->cols - k0 : Q8_0_BLOCK;
		}
		for (int g = 0; g < Q8_0_BLOCK / 4 && 4 * g < n; g++) {
			uint8_t v[4] = { 0, 0, 0, 0 };
			memcpy(v, src + 4 * g, (size_t)(n - 4 * g < 4 ? n - 4 * g : 4));
			uint32_t u;
			memcpy(&u, v, 4);
			u ^= 0x80808080u; /* four quants + 128 */
			memcpy(codes + g * 64 + c * 4, &u, 4);
		}
	}
}

struct pack_job {
	const struct kmat *w;
	uint8_t *out;
	int64_t n_panels;
	size_t panel_bytes;
};

/* Float panel: for each k the 16 rows' values (zeros past the matrix). */
static void pack_float(const struct kmat *w, int64_t r0, uint8_t *panel)
{
	const size_t es = w->dtype == DT_F8_E4M3 ? 1 : 2;
	const int nv = (int)(w->rows - r0 < MM_Q8P_ROWS ? w->rows - r0 : MM_Q8P_ROWS);
	const uint8_t *src = (const uint8_t *)w->data + (size_t)r0 * (size_t)w->cols * es;
	const size_t row_bytes = (size_t)w->cols * es;
	if (nv < MM_Q8P_ROWS)
		memset(panel, 0, (size_t)w->cols * MM_Q8P_ROWS * es);
	for (int64_t k0 = 0; k0 < w->cols; k0 += 64) { /* 64 k of each row at a time */
		const int64_t kn = w->cols - k0 < 64 ? w->cols - k0 : 64;
		for (int c = 0; c < nv; c++) {
			const uint8_t *s = src + c * row_bytes + (size_t)k0 * es;
			uint8_t *d = panel + ((size_t)k0 * MM_Q8P_ROWS + (size_t)c) * es;
			if (es == 2)
				for (int64_t k = 0; k < kn; k++)
					memcpy(d + (size_t)k * MM_Q8P_ROWS * 2, s + 2 * k, 2);
			else
				for (int64_t k = 0; k < kn; k++)
					d[(size_t)k * MM_Q8P_ROWS] = s[k];
		}
	}
}

static void pack_worker(void *p, int ith, int nth)
{
	const struct pack_job *j = p;
	const struct kmat *w = j->w;
	const int64_t nb = (w->cols + Q8_0_BLOCK - 1) / Q8_0_BLOCK;
	long p0, p1;
	kpool_split((long)j->n_panels, ith, nth, &p0, &p1);
	for (long pi = p0; pi < p1; pi++) {
		const int64_t r0 = (int64_t)pi * MM_Q8P_ROWS;
		uint8_t *panel = j->out + (size_t)pi * j->panel_bytes;
		if (w->dtype != DT_Q8_0 && w->dtype != DT_I8) {
			pack_float(w, r0, panel);
			continue;
		}
		if (w->dtype == DT_I8) {
			for (int64_t b = 0; b < nb; b++)
				pack_codes(w, r0, b * Q8_0_BLOCK, panel + b * MM_I8P_BLOCK_BYTES);
			continue;
		}
		/* Q8_0: pairs of blocks, then their F16 scales (0: no weights) */
		const struct q8_0_block *blocks = w->data;
		for (int64_t b = 0; b < (nb + 1) / 2 * 2; b++) {
			uint8_t *pair = panel + (size_t)(b / 2) * MM_Q8P_PAIR_BYTES;
			uint16_t *sc = (uint16_t *)(void *)(pair + 2 * 8 * 64) + (b & 1) * MM_Q8P_ROWS;
			pack_codes(w, r0, b < nb ? b * Q8_0_BLOCK : w->cols, pair + (b & 1) * 8 * 64);
			for (int c = 0; c < MM_Q8P_ROWS; c++)
				sc[c] = b < nb && r0 + c < w->rows ? blocks[(r0 + c) * nb + b].d : 0;
		}
	}
}

int kcpu_pack(struct kpool *pool, const struct kmat *w, void *out)
{
	struct pack_job j = { .w = w, .out = out };
	int rc = shape(w, &j.n_panels, &j.panel_bytes);
	if (rc)
		return rc;
	if (!out || !w->data)
		return ERR_INVAL;
	kpool_run(pool, pack_worker, &j);
	return 0;
}
