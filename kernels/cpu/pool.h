/* kernels/cpu/pool.h — a persistent worker pool for the CPU backend.
 *
 * kpool_run(pool, fn, ctx) calls fn(ctx, i, n) once for every i in [0, n)
 * (n = kpool_size(pool)), on n threads (the caller's thread is worker 0), and
 * returns when all calls have returned. Work is split by the callee from
 * (i, n). Only one thread may call kpool_run at a time on a given pool (the
 * engine thread); fn must not call kpool_run on the same pool.
 * Created and destroyed by the engine. Between runs workers spin briefly
 * (decode launches many small runs back to back) and then sleep on a
 * condition variable, so an idle server costs no CPU.
 *
 * The pool also owns grow-only scratch memory for the kernels it runs, so the
 * hot path does not allocate: the caller (the thread that calls kpool_run)
 * reserves sizes with kpool_reserve before a run; during the run worker i may
 * use kpool_scratch(pool, i) and every worker may read kpool_shared(pool).
 * Pointers are owned by the pool and valid until the next kpool_reserve or
 * kpool_destroy.
 */
#ifndef AORTA_KERNELS_CPU_POOL_H
#define AORTA_KERNELS_CPU_POOL_H

#include <stddef.h>

struct kpool;

typedef void (*kpool_fn)(void *ctx, int ith, int nth);

/* n_threads 0 = one per online CPU. Returns 0 or ERR_NOMEM/ERR_INVAL. */
int kpool_create(int n_threads, struct kpool **out);
void kpool_destroy(struct kpool *pool);
int kpool_size(const struct kpool *pool);
/* pool may be NULL: then fn(ctx, 0, 1) runs on the caller. */
void kpool_run(struct kpool *pool, kpool_fn fn, void *ctx);

/* Make sure every worker has at least per_thread bytes of scratch and the
 * shared buffer at least shared bytes (64-byte aligned). Grows only, so a
 * steady state does not allocate. 0 or ERR_NOMEM (old buffers stay valid).
 * Call only from the thread that calls kpool_run, never during a run. */
int kpool_reserve(struct kpool *pool, size_t per_thread, size_t shared);
void *kpool_scratch(struct kpool *pool, int ith);
void *kpool_shared(struct kpool *pool);

/* Split [0, total) into nth nearly equal parts; part ith is [*begin, *end). */
static inline void kpool_split(long total, int ith, int nth, long *begin, long *end)
{
	long base = total / nth, rem = total % nth;
	*begin = ith * base + (ith < rem ? ith : rem);
	*end = *begin + base + (ith < rem ? 1 : 0);
}

#endif
