/* kernels/cpu/matmul.c — the fast Y = X·Wᵀ (see matmul.h).
 * For now: the reference row loop, threaded over output rows. The SIMD,
 * integer-dot and cache-blocked paths replace this body. */
#include <stdlib.h>

#include "matmul.h"

struct mm_ctx {
	const struct kmat *w;
	const float *x;
	int m;
	float *y;
};

static void mm_worker(void *p, int ith, int nth)
{
	struct mm_ctx *c = p;
	long r0, r1;
	kpool_split((long)c->w->rows, ith, nth, &r0, &r1);
	if (r0 >= r1)
		return;
	float *row = malloc((size_t)c->w->cols * sizeof(float));
	if (!row)
		return;
	for (long r = r0; r < r1; r++) {
		kcpu_dequant_row(c->w, r, row);
		for (int i = 0; i < c->m; i++) {
			const float *xi = c->x + (int64_t)i * c->w->cols;
			float acc = 0.0f;
			for (int64_t k = 0; k < c->w->cols; k++)
				acc += row[k] * xi[k];
			c->y[(int64_t)i * c->w->rows + r] = acc;
		}
	}
	free(row);
}

void kcpu_matmul(struct kpool *pool, const struct kmat *w, const float *x, int m, float *y)
{
	struct mm_ctx c = { w, x, m, y };
	kpool_run(pool, mm_worker, &c);
}
