/* kernels/cpu/pool.h — a persistent worker pool for the CPU backend.
 *
 * kpool_run(pool, fn, ctx) calls fn(ctx, i, n) once for every i in [0, n)
 * (n = kpool_size(pool)), on n threads (the caller's thread is worker 0), and
 * returns when all calls have returned. Work is split by the callee from
 * (i, n). Only one thread may call kpool_run at a time on a given pool (the
 * engine thread); fn must not call kpool_run on the same pool.
 * Created and destroyed by the engine; threads sleep between runs.
 */
#ifndef AORTA_KERNELS_CPU_POOL_H
#define AORTA_KERNELS_CPU_POOL_H

struct kpool;

typedef void (*kpool_fn)(void *ctx, int ith, int nth);

/* n_threads 0 = one per online CPU. Returns 0 or ERR_NOMEM/ERR_INVAL. */
int kpool_create(int n_threads, struct kpool **out);
void kpool_destroy(struct kpool *pool);
int kpool_size(const struct kpool *pool);
/* pool may be NULL: then fn(ctx, 0, 1) runs on the caller. */
void kpool_run(struct kpool *pool, kpool_fn fn, void *ctx);

/* Split [0, total) into nth nearly equal parts; part ith is [*begin, *end). */
static inline void kpool_split(long total, int ith, int nth, long *begin, long *end)
{
	long base = total / nth, rem = total % nth;
	*begin = ith * base + (ith < rem ? ith : rem);
	*end = *begin + base + (ith < rem ? 1 : 0);
}

#endif
