/* tests/batching/bench_sched.c — scheduler benchmark (not a test).
 *
 * 1. Time per step of the scheduler alone (sched_schedule + sched_commit +
 *    appending the sampled tokens; no engine) with 256 running decodes and
 *    1,000 waiting requests. Goal: < 100 us.
 * 2. KV memory waste under a mixed workload (random prompt and output
 *    lengths, shared prefixes, arrivals): (allocated - used token slots) /
 *    allocated, averaged over steps. Goal: < 4%.
 * Usage: bench_sched [steps]   (prints one line per figure)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batching/kv_blocks.h"
#include "batching/scheduler.h"
#include "batching/sequence.h"
#include "common/clock.h"

static uint64_t rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ULL;
	uint64_t z = *s;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static int rng_int(uint64_t *s, int lo, int hi)
{
	return lo + (int)(rng_next(s) % (uint64_t)(hi - lo + 1));
}

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if ((x) != 0) {                                                                    \
			fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #x);             \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

/* Append a made-up token to every sequence that got logits; finish those at
 * max_tokens. Returns how many finished. */
static int postprocess(struct sched *s, const struct sched_step *st, uint64_t *rng)
{
	int n_done = 0;
	for (int i = 0; i < st->n_logits; i++) {
		struct seq *q = st->seqs[st->logits_seq[i]];
		sched_append_token(s, q, (int32_t)(rng_next(rng) % 32000));
		if (seq_n_generated(q) >= q->max_tokens) {
			sched_finish(s, q, FINISH_LENGTH);
			seq_destroy(q);
			n_done++;
		}
	}
	return n_done;
}

/* CPU time of this thread: unlike wall time, not inflated when the machine
 * is shared and the process is descheduled mid-step. */
static uint64_t cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void bench_step_time(int steps, int max_len)
{
	enum { RUNNING = 256, WAITING = 1000, BS = 16 };
	const int MAX_LEN = max_len;
	/* Enough blocks that the 256 never preempt: prompts <= 1024 + steps + 64. */
	struct kv_opts ko = {.n_blocks = RUNNING * ((1024 + steps + 64) / BS + 2),
	                     .block_size = BS,
	                     .prefix_caching = true};
	struct kv_pool *pool;
	struct sched *s;
	CHECK(kv_pool_create(&ko, &pool, NULL));
	struct sched_opts so = {
	    .max_num_seqs = RUNNING, .max_num_batched_tokens = 8192, .max_model_len = MAX_LEN};
	CHECK(sched_create(pool, &so, &s, NULL));
	uint64_t rng = 1;
	int32_t *prompt = malloc((size_t)MAX_LEN * sizeof(int32_t));
	uint64_t id = 1;
	for (int i = 0; i < RUNNING + WAITING; i++) {
		int n = rng_int(&rng, 64, 1024);
		for (int j = 0; j < n; j++)
			prompt[j] = (int32_t)(rng_next(&rng) % 32000);
		struct seq *q;
		CHECK(seq_create(pool, id++, prompt, n, steps + 64, &q));
		CHECK(sched_add(s, q));
		if (i == RUNNING - 1) {
			/* Prefill the first 256 untimed, until all are decoding. */
			const struct sched_step *st;
			do {
				CHECK(sched_schedule(s, &st));
				sched_commit(s);
				postprocess(s, st, &rng);
			} while (st->n_tokens > st->n_seqs);
		}
	}
	struct sched_stats ss;
	sched_get_stats(s, &ss);
	if (ss.n_running != RUNNING || ss.n_waiting != WAITING) {
		fprintf(stderr, "setup: %d running, %d waiting\n", ss.n_running, ss.n_waiting);
		exit(1);
	}
	uint64_t *dts = malloc((size_t)steps * sizeof(uint64_t));
	uint64_t t0 = clock_now_ns(), c0 = cpu_ns();
	for (int k = 0; k < steps; k++) {
		uint64_t a = clock_now_ns();
		const struct sched_step *st;
		CHECK(sched_schedule(s, &st));
		sched_commit(s);
		postprocess(s, st, &rng);
		dts[k] = clock_now_ns() - a;
		if (st->n_seqs != RUNNING) {
			fprintf(stderr, "step %d scheduled %d seqs\n", k, st->n_seqs);
			exit(1);
		}
	}
	double us = (double)(clock_now_ns() - t0) / 1e3 / steps;
	double cpu_us = (double)(cpu_ns() - c0) / 1e3 / steps;
	qsort(dts, (size_t)steps, sizeof(*dts), cmp_u64);
	printf("sched_step_us running=%d waiting=%d max_model_len=%d steps=%d cpu_mean=%.1f "
	       "wall_mean=%.1f wall_p50=%.1f wall_p99=%.1f (goal < 100)\n",
	       RUNNING, WAITING, MAX_LEN, steps, cpu_us, us, (double)dts[steps / 2] / 1e3,
	       (double)dts[steps * 99 / 100] / 1e3);
	free(dts);
	free(prompt);
	sched_destroy(s);
	kv_pool_destroy(pool);
}

/* Like bench_step_time, but sequences finish (max_tokens 16..256) and new
 * ones keep the waiting queue at 1,000, so steps mix decodes, prefill chunks
 * (2,048-token budget), admissions with prefix lookups, and frees. Creating
 * the new requests is not timed. */
static void bench_churn(int steps)
{
	enum { RUNNING = 256, WAITING = 1000, BS = 16, MAX_LEN = 4096 };
	struct kv_opts ko = {.n_blocks = RUNNING * (1024 + 256) / BS + 1024,
	                     .block_size = BS,
	                     .prefix_caching = true};
	struct kv_pool *pool;
	struct sched *s;
	CHECK(kv_pool_create(&ko, &pool, NULL));
	struct sched_opts so = {
	    .max_num_seqs = RUNNING, .max_num_batched_tokens = 2048, .max_model_len = MAX_LEN};
	CHECK(sched_create(pool, &so, &s, NULL));
	uint64_t rng = 3, id = 1;
	int32_t sys[512];
	for (int j = 0; j < 512; j++)
		sys[j] = (int32_t)(rng_next(&rng) % 32000);
	int32_t *prompt = malloc((size_t)MAX_LEN * sizeof(int32_t));
	uint64_t *dts = malloc((size_t)steps * sizeof(uint64_t));
	uint64_t rows = 0, cpu = 0;
	for (int k = -steps; k < steps; k++) { /* the first half warms up */
		while (sched_n_waiting(s) < WAITING || sched_n_running(s) < RUNNING / 2) {
			int sl = rng_int(&rng, 0, 1) ? 512 : 0;
			int n = sl + rng_int(&rng, 16, 512);
			memcpy(prompt, sys, (size_t)sl * sizeof(int32_t));
			for (int j = sl; j < n; j++)
				prompt[j] = (int32_t)(rng_next(&rng) % 32000);
			struct seq *q;
			CHECK(seq_create(pool, id++, prompt, n, rng_int(&rng, 16, 256), &q));
			CHECK(sched_add(s, q));
			if (sched_n_waiting(s) >= WAITING)
				break;
		}
		uint64_t a = clock_now_ns(), ca = cpu_ns();
		const struct sched_step *st;
		CHECK(sched_schedule(s, &st));
		sched_commit(s);
		postprocess(s, st, &rng);
		if (k >= 0) {
			dts[k] = clock_now_ns() - a;
			cpu += cpu_ns() - ca;
			rows += (uint64_t)st->n_tokens;
		}
	}
	qsort(dts, (size_t)steps, sizeof(*dts), cmp_u64);
	struct sched_stats ss;
	sched_get_stats(s, &ss);
	printf("sched_step_us churn running<=%d waiting=%d steps=%d rows/step=%.0f cpu_mean=%.1f "
	       "wall_p50=%.1f wall_p99=%.1f preemptions=%llu (goal < 100)\n",
	       RUNNING, WAITING, steps, (double)rows / steps, (double)cpu / 1e3 / steps,
	       (double)dts[steps / 2] / 1e3, (double)dts[steps * 99 / 100] / 1e3,
	       (unsigned long long)ss.preemptions);
	free(dts);
	free(prompt);
	sched_destroy(s);
	kv_pool_destroy(pool);
}

/* Used slots of the held blocks / allocated, over the running sequences. */
static void kv_waste_sample(struct sched *s, int bs, int n_blocks, int *fill, uint64_t *alloc,
                            uint64_t *used)
{
	memset(fill, 0, (size_t)n_blocks * sizeof(int));
	for (int i = 0; i < sched_n_running(s); i++) {
		struct seq *q = sched_running(s, i);
		for (int j = 0; j < q->kv.n_ids; j++) {
			int f = q->n_computed - j * bs;
			f = f < 0 ? 0 : f > bs ? bs : f;
			int id = q->kv.ids[j];
			if (f > fill[id])
				fill[id] = f;
			fill[id] |= 1 << 30; /* held */
		}
	}
	for (int b = 0; b < n_blocks; b++)
		if (fill[b]) {
			*alloc += (uint64_t)bs;
			*used += (uint64_t)(fill[b] & ~(1 << 30));
		}
}

static void bench_kv_waste(int n_reqs)
{
	enum { BS = 16, MAX_LEN = 4096, N_BLOCKS = 4096 };
	struct kv_opts ko = {.n_blocks = N_BLOCKS, .block_size = BS, .prefix_caching = true};
	struct kv_pool *pool;
	struct sched *s;
	CHECK(kv_pool_create(&ko, &pool, NULL));
	struct sched_opts so = {
	    .max_num_seqs = 128, .max_num_batched_tokens = 2048, .max_model_len = MAX_LEN};
	CHECK(sched_create(pool, &so, &s, NULL));
	int *fill = malloc(N_BLOCKS * sizeof(int));
	int32_t sys[3][600];
	uint64_t rng = 7;
	for (int k = 0; k < 3; k++)
		for (int j = 0; j < 600; j++)
			sys[k][j] = (int32_t)(rng_next(&rng) % 32000);
	int32_t *prompt = malloc(MAX_LEN * sizeof(int32_t));
	int submitted = 0, done = 0;
	uint64_t alloc = 0, used = 0, id = 1, steps = 0;
	while (done < submitted || submitted < n_reqs) {
		/* A few arrivals per step keep the queue non-empty. */
		for (int a = rng_int(&rng, 0, 3); a > 0 && submitted < n_reqs; a--) {
			int k = rng_int(&rng, 0, 3), sl = k < 3 ? rng_int(&rng, 100, 600) : 0;
			int n = sl + rng_int(&rng, 10, 1500);
			if (k < 3)
				memcpy(prompt, sys[k], (size_t)sl * sizeof(int32_t));
			for (int j = sl; j < n; j++)
				prompt[j] = (int32_t)(rng_next(&rng) % 32000);
			int max_tokens = rng_int(&rng, 8, 600);
			struct seq *q;
			CHECK(seq_create(pool, id++, prompt, n, max_tokens, &q));
			CHECK(sched_add(s, q));
			submitted++;
		}
		const struct sched_step *st;
		CHECK(sched_schedule(s, &st));
		sched_commit(s);
		kv_waste_sample(s, BS, N_BLOCKS, fill, &alloc, &used);
		done += postprocess(s, st, &rng);
		steps++;
	}
	struct sched_stats ss;
	sched_get_stats(s, &ss);
	printf("kv_waste requests=%d steps=%llu waste=%.2f%% (goal < 4%%) preemptions=%llu "
	       "prefix_hit_rate=%.1f%%\n",
	       n_reqs, (unsigned long long)steps, 100.0 * (double)(alloc - used) / (double)alloc,
	       (unsigned long long)ss.preemptions,
	       100.0 * (double)ss.prefix_hits /
	           (double)(ss.prefix_queries ? ss.prefix_queries : 1));
	free(fill);
	free(prompt);
	sched_destroy(s);
	kv_pool_destroy(pool);
}

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 2000;
	if (steps < 1 || steps > 3000)
		steps = 2000; /* prompts up to 1024 + steps + 64 must fit max_model_len 4096 */
	bench_step_time(steps, 4096);
	bench_step_time(steps, 32768);
	bench_churn(steps);
	bench_kv_waste(steps / 2 > 100 ? steps / 2 : 100);
	return 0;
}
