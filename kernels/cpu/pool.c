/* kernels/cpu/pool.c — persistent worker pool (see pool.h): a generation
 * counter under a mutex wakes the workers; a countdown of pending workers
 * tells the caller when the run is over. Tested in tests/engine/test_pool.c. */
#include "pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/err.h"

struct kpool {
	int n;
	pthread_t *threads;
	pthread_mutex_t mu;
	pthread_cond_t work_cv; /* workers wait for a new generation */
	pthread_cond_t done_cv; /* the caller waits for pending == 0 */
	unsigned long generation;
	int pending;
	bool stop;
	kpool_fn fn;
	void *ctx;
};

struct worker_arg {
	struct kpool *pool;
	int ith;
};

static void *worker_main(void *p)
{
	struct worker_arg *arg = p;
	struct kpool *pool = arg->pool;
	int ith = arg->ith;
	free(arg);
	unsigned long seen = 0;
	for (;;) {
		pthread_mutex_lock(&pool->mu);
		while (!pool->stop && pool->generation == seen)
			pthread_cond_wait(&pool->work_cv, &pool->mu);
		if (pool->stop) {
			pthread_mutex_unlock(&pool->mu);
			return NULL;
		}
		seen = pool->generation;
		kpool_fn fn = pool->fn;
		void *ctx = pool->ctx;
		pthread_mutex_unlock(&pool->mu);

		fn(ctx, ith, pool->n);

		pthread_mutex_lock(&pool->mu);
		if (--pool->pending == 0)
			pthread_cond_signal(&pool->done_cv);
		pthread_mutex_unlock(&pool->mu);
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
	pool->n = n_threads;
	pthread_mutex_init(&pool->mu, NULL);
	pthread_cond_init(&pool->work_cv, NULL);
	pthread_cond_init(&pool->done_cv, NULL);
	pool->threads = calloc((size_t)n_threads, sizeof *pool->threads);
	if (!pool->threads) {
		kpool_destroy(pool);
		return ERR_NOMEM;
	}
	for (int i = 1; i < n_threads; i++) {
		struct worker_arg *arg = malloc(sizeof *arg);
		if (!arg || pthread_create(&pool->threads[i], NULL, worker_main,
					   (arg->pool = pool, arg->ith = i, arg))) {
			free(arg);
			pool->n = i; /* only the started workers are joined */
			kpool_destroy(pool);
			return ERR_NOMEM;
		}
	}
	*out = pool;
	return 0;
}

void kpool_destroy(struct kpool *pool)
{
	if (!pool)
		return;
	pthread_mutex_lock(&pool->mu);
	pool->stop = true;
	pthread_cond_broadcast(&pool->work_cv);
	pthread_mutex_unlock(&pool->mu);
	for (int i = 1; pool->threads && i < pool->n; i++)
		pthread_join(pool->threads[i], NULL);
	pthread_mutex_destroy(&pool->mu);
	pthread_cond_destroy(&pool->work_cv);
	pthread_cond_destroy(&pool->done_cv);
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
	pthread_mutex_lock(&pool->mu);
	pool->fn = fn;
	pool->ctx = ctx;
	pool->pending = pool->n - 1;
	pool->generation++;
	pthread_cond_broadcast(&pool->work_cv);
	pthread_mutex_unlock(&pool->mu);

	fn(ctx, 0, pool->n);

	pthread_mutex_lock(&pool->mu);
	while (pool->pending > 0)
		pthread_cond_wait(&pool->done_cv, &pool->mu);
	pthread_mutex_unlock(&pool->mu);
}
