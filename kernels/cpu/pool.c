/* kernels/cpu/pool.c — persistent worker pool (see pool.h).
 *
 * A run publishes (fn, ctx), sets `pending` to the number of helper workers
 * and bumps an atomic generation counter. Workers spin on the counter for a
 * short while after each run (a decode step launches dozens of runs of tens
 * of microseconds; a futex wake per run would cost as much as the work) and
 * then sleep on work_cv. The caller works as worker 0, then spins on
 * `pending` and finally sleeps on done_cv. Tested in tests/kernels/test_pool.c.
 */
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"

/* Spin iterations (each one pause instruction, ~10-150 cycles) before a
 * worker or the caller falls back to sleeping: tens of microseconds. */
#define KPOOL_SPIN 4000

struct scratch {
	void *p;
	size_t size;
};

struct kpool {
	int n;
	pthread_t *threads;
	pthread_mutex_t mu;
	pthread_cond_t work_cv; /* sleeping workers wait for a new generation */
	pthread_cond_t done_cv; /* a sleeping caller waits for pending == 0 */
	atomic_ulong generation;
	atomic_int pending;
	atomic_bool stop;
	/* Written by the caller before the generation bump (release), read by
	 * workers after they see it (acquire). */
	kpool_fn fn;
	void *ctx;
	struct scratch *scratch; /* n per-worker buffers */
	struct scratch shared;
};

struct worker_arg {
	struct kpool *pool;
	int ith;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Wait until the generation differs from seen (or stop); returns it. */
static unsigned long wait_generation(struct kpool *pool, unsigned long seen)
{
	for (int i = 0; i < KPOOL_SPIN; i++) {
		unsigned long g = atomic_load_explicit(&pool->generation, memory_order_acquire);
		if (g != seen || atomic_load_explicit(&pool->stop, memory_order_relaxed))
			return g;
		cpu_relax();
	}
	pthread_mutex_lock(&pool->mu);
	unsigned long g;
	while ((g = atomic_load(&pool->generation)) == seen && !atomic_load(&pool->stop))
		pthread_cond_wait(&pool->work_cv, &pool->mu);
	pthread_mutex_unlock(&pool->mu);
	return g;
}

static void *worker_main(void *p)
{
	struct worker_arg *arg = p;
	struct kpool *pool = arg->pool;
	int ith = arg->ith;
	free(arg);
	unsigned long seen = 0;
	for (;;) {
		seen = wait_generation(pool, seen);
		if (atomic_load(&pool->stop))
			return NULL;
		pool->fn(pool->ctx, ith, pool->n);
		if (atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel) == 1) {
			/* Last one out: wake the caller if it went to sleep. Signalling
			 * under the mutex pairs with the caller re-checking pending
			 * under it, so the wake-up cannot be lost. */
			pthread_mutex_lock(&pool->mu);
			pthread_cond_signal(&pool->done_cv);
			pthread_mutex_unlock(&pool->mu);
		}
	}
}

int kpool_create(int n_threads, struct kpool **out)
{
	if (n_threads < 0)
		return ERR_INVAL;
	if (n_threads == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		n_threads = n > 0 ? (int)n : 1;
	}
	struct kpool *pool = calloc(1, sizeof *pool);
	if (!pool)
		return ERR_NOMEM;
	pool->n = 1; /* only started workers are joined by kpool_destroy */
	atomic_init(&pool->generation, 0);
	atomic_init(&pool->pending, 0);
	atomic_init(&pool->stop, false);
	pthread_mutex_init(&pool->mu, NULL);
	pthread_cond_init(&pool->work_cv, NULL);
	pthread_cond_init(&pool->done_cv, NULL);
	pool->threads = calloc((size_t)n_threads, sizeof *pool->threads);
	pool->scratch = calloc((size_t)n_threads, sizeof *pool->scratch);
	if (!pool->threads || !pool->scratch) {
		kpool_destroy(pool);
		return ERR_NOMEM;
	}
	for (int i = 1; i < n_threads; i++) {
		struct worker_arg *arg = malloc(sizeof *arg);
		if (!arg) {
			kpool_destroy(pool);
			return ERR_NOMEM;
		}
		arg->pool = pool;
		arg->ith = i;
		if (pthread_create(&pool->threads[i], NULL, worker_main, arg)) {
			free(arg);
			kpool_destroy(pool);
			return ERR_NOMEM;
		}
		pool->n = i + 1;
	}
	pool->n = n_threads;
	*out = pool;
	return 0;
}

void kpool_destroy(struct kpool *pool)
{
	if (!pool)
		return;
	pthread_mutex_lock(&pool->mu);
	atomic_store(&pool->stop, true);
	pthread_cond_broadcast(&pool->work_cv);
	pthread_mutex_unlock(&pool->mu);
	for (int i = 1; pool->threads && i < pool->n; i++)
		pthread_join(pool->threads[i], NULL);
	pthread_mutex_destroy(&pool->mu);
	pthread_cond_destroy(&pool->work_cv);
	pthread_cond_destroy(&pool->done_cv);
	for (int i = 0; pool->scratch && i < pool->n; i++)
		free(pool->scratch[i].p);
	free(pool->scratch);
	free(pool->shared.p);
	free(pool->threads);
	free(pool);
}

int kpool_size(const struct kpool *pool)
{
	return pool ? pool->n : 1;
}

void kpool_run(struct kpool *pool, kpool_fn fn, void *ctx)
{
	if (!pool || pool->n == 1) {
		fn(ctx, 0, 1);
		return;
	}
	pool->fn = fn;
	pool->ctx = ctx;
	atomic_store_explicit(&pool->pending, pool->n - 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
	/* Sleeping workers check the generation under the mutex, so taking it
	 * here orders the bump before their check or our broadcast after their
	 * wait. Uncontended, it costs tens of nanoseconds. */
	pthread_mutex_lock(&pool->mu);
	pthread_cond_broadcast(&pool->work_cv);
	pthread_mutex_unlock(&pool->mu);

	fn(ctx, 0, pool->n);

	for (int i = 0; i < KPOOL_SPIN; i++) {
		if (atomic_load_explicit(&pool->pending, memory_order_acquire) == 0)
			return;
		cpu_relax();
	}
	pthread_mutex_lock(&pool->mu);
	while (atomic_load_explicit(&pool->pending, memory_order_acquire) > 0)
		pthread_cond_wait(&pool->done_cv, &pool->mu);
	pthread_mutex_unlock(&pool->mu);
}

static int grow(struct scratch *s, size_t size)
{
	if (size <= s->size)
		return 0;
	size_t rounded = (size + 63) & ~(size_t)63;
	if (rounded < size)
		return ERR_OVERFLOW;
	void *p = aligned_alloc(64, rounded);
	if (!p)
		return ERR_NOMEM;
	free(s->p);
	s->p = p;
	s->size = rounded;
	return 0;
}

int kpool_reserve(struct kpool *pool, size_t per_thread, size_t shared)
{
	if (!pool)
		return ERR_INVAL;
	for (int i = 0; i < pool->n; i++) {
		int rc = grow(&pool->scratch[i], per_thread);
		if (rc)
			return rc;
	}
	return grow(&pool->shared, shared);
}

void *kpool_scratch(struct kpool *pool, int ith)
{
	return pool->scratch[ith].p;
}

void *kpool_shared(struct kpool *pool)
{
	return pool->shared.p;
}
