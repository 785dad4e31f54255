/* tests/bench/bench_attn.c — benchmark of the CPU paged attention
 * (kops_attn_group, kernels/cpu/ops.h), not a test.
 *
 * One layer's attention of a Llama-shaped model (32 query / 8 KV heads,
 * head_dim 64, blocks of 16) over the pool's threads, two ways:
 *   - "rows": one kops_attn_group call per (row, kv head) item, the split
 *     engine/backend/cpu_forward.c used before row tiles;
 *   - "tiles": kops_attn_rows on (tile of rows, kv head) items, planned as
 *     forward.c's plan_attention / job_attention do now;
 * on
 *   - prefill: one sequence of N rows at positions 0..N-1 (causal);
 *   - decode: B sequences of one row each, attending over C positions.
 * Reports ms per layer, GFLOP/s (4 * ctx * head_dim flops per query head and
 * row: QK and PV) and the fraction of the FMA peak of a register-only loop.
 * Usage: bench_attn [-t threads] [-r reps] [-d head_dim] [-p prompt] [-c decode_ctx]
 *                   [-m rows|tiles (default both)]
 * Timings are the median of the repetitions (and the best one's GFLOP/s in
 * parentheses); the machine is shared, so run
 * it when the load is low and repeat.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/probe.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
}

static const char *only_mode; /* -m: time one of the two ways only */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* ---- the attention job --------------------------------------------------------- */

enum { N_HEADS = 32, N_KV = 8, BS = 16 };

struct job {
	enum kops_isa isa;
	enum dtype kv_dtype;
	int hd;
	const void *k, *v;
	const float *q; /* [n_rows][N_HEADS * hd] */
	float *out;
	float *scratch;
	size_t scratch_per_thread;
	const int32_t *tables; /* [n_seqs][mb] */
	int mb;
	int n_rows, rows_per_seq;
	const int32_t *row_seq; /* [n_rows] */
	const int32_t *row_pos; /* [n_rows] */
};

/* job_attention's split: (row, kv head) items round-robin, or one item per
 * query head when there are fewer items than threads */
static void job_rows(void *p, int ith, int nth)
{
	const struct job *j = p;
	const int group = N_HEADS / N_KV, q_dim = N_HEADS * j->hd;
	struct kops_attn_args a = {
	    .scratch = j->scratch + (size_t)ith * j->scratch_per_thread,
	    .k_cache = j->k,
	    .v_cache = j->v,
	    .kv_dtype = j->kv_dtype,
	    .block_size = BS,
	    .n_kv_heads = N_KV,
	    .head_dim = j->hd,
	    .scale = 1.0f / sqrtf((float)j->hd),
	};
	const int per_item = (long)j->n_rows * N_KV < nth ? 1 : group;
	const int items_per_row = N_HEADS / per_item;
	const long n_items = (long)j->n_rows * items_per_row;
	for (long it = ith; it < n_items; it += nth) {
		long r = it / items_per_row;
		int h0 = (int)(it % items_per_row) * per_item;
		size_t off = r * (size_t)q_dim + (size_t)h0 * j->hd;
		a.q = j->q + off;
		a.out = j->out + off;
		a.block_table = j->tables + (size_t)j->row_seq[r] * j->mb;
		a.n_ctx = j->row_pos[r] + 1;
		a.kv_head = h0 / group;
		kops_attn_group(j->isa, &a, per_item);
	}
}

/* forward.c's plan_attention and job_attention, on n_rows / rows_per_seq
 * sequences of rows_per_seq rows each */
static long tile_items(const struct job *j, int tile, int per_tile)
{
	return (long)(j->n_rows / j->rows_per_seq) * ((j->rows_per_seq + tile - 1) / tile) *
	       per_tile;
}

static void job_tiles(void *p, int ith, int nth)
{
	const struct job *j = p;
	const int group = N_HEADS / N_KV, q_dim = N_HEADS * j->hd;
	int per_item = group, tile = kops_attn_tile_rows(group);
	if (tile_items(j, tile, N_KV) < nth) {
		per_item = 1;
		tile = kops_attn_tile_rows(1);
	}
	while (tile > 1 && tile_items(j, tile, N_HEADS / per_item) < nth)
		tile /= 2;
	const int per_tile = N_HEADS / per_item, rps = j->rows_per_seq;
	struct kops_attn_args a = {
	    .scratch = j->scratch + (size_t)ith * j->scratch_per_thread,
	    .k_cache = j->k,
	    .v_cache = j->v,
	    .kv_dtype = j->kv_dtype,
	    .block_size = BS,
	    .n_kv_heads = N_KV,
	    .head_dim = j->hd,
	    .scale = 1.0f / sqrtf((float)j->hd),
	};
	long first = 0;
	for (int s = 0; s < j->n_rows / rps; s++) {
		const int r0 = s * rps, r1 = r0 + rps;
		const long n = (long)((rps + tile - 1) / tile) * per_tile;
		a.block_table = j->tables + (size_t)s * j->mb;
		for (long k = ((ith - first) % nth + nth) % nth; k < n; k += nth) {
			const int r = r0 + (int)(k / per_tile) * tile;
			const int h0 = (int)(k % per_tile) * per_item;
			const size_t off = r * (size_t)q_dim + (size_t)h0 * j->hd;
			a.q = j->q + off;
			a.out = j->out + off;
			a.n_ctx = j->row_pos[r] + 1;
			a.kv_head = h0 / group;
			kops_attn_rows(j->isa, &a, per_item, r1 - r < tile ? r1 - r : tile, q_dim,
			               q_dim);
		}
		first += n;
	}
}

struct pools {
	void *k, *v;
	int n_blocks;
};

static int make_pools(struct pools *pl, enum dtype dt, int n_blocks, int hd)
{
	size_t n = (size_t)n_blocks * N_KV * BS * hd, es = dt == DT_F16 ? 2 : 4;
	float *tmp = calloc(n, sizeof(float)); /* calloc: GCC cannot see that n > 0 */
	pl->k = malloc(n * es);
	pl->v = malloc(n * es);
	pl->n_blocks = n_blocks;
	if (!tmp || !pl->k || !pl->v) {
		free(tmp);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		tmp[i] = frand();
	kops_store_row(dt, pl->k, tmp, (int)n);
	for (size_t i = 0; i < n; i++)
		tmp[i] = frand();
	kops_store_row(dt, pl->v, tmp, (int)n);
	free(tmp);
	return 0;
}

/* Runs the job reps times; returns the median seconds, the fastest in *best. */
static double time_job(struct kpool *pool, kpool_fn fn, struct job *j, int reps, double *best)
{
	double *t = malloc(sizeof(double) * (size_t)reps), med;
	kpool_run(pool, fn, j); /* warm up */
	for (int r = 0; r < reps; r++) {
		double t0 = now_s();
		kpool_run(pool, fn, j);
		t[r] = now_s() - t0;
	}
	qsort(t, (size_t)reps, sizeof(double), cmp_double);
	med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
	*best = t[0];
	free(t);
	return med;
}

/* n_seqs sequences of rows_per_seq rows, the last at position ctx - 1;
 * sequence s owns blocks [s * mb, s * mb + mb) in a shuffled order. */
static int run_case(struct kpool *pool, const char *name, enum dtype dt, int hd, int n_seqs,
                    int rows_per_seq, int ctx, int reps, double peak)
{
	const int mb = (ctx + BS - 1) / BS, n_rows = n_seqs * rows_per_seq;
	const size_t q_dim = (size_t)N_HEADS * hd;
	struct pools pl;
	if (make_pools(&pl, dt, n_seqs * mb, hd))
		return -1;
	int32_t *tables = malloc(sizeof(int32_t) * (size_t)n_seqs * mb);
	int32_t *row_seq = malloc(sizeof(int32_t) * (size_t)n_rows);
	int32_t *row_pos = malloc(sizeof(int32_t) * (size_t)n_rows);
	float *q = malloc(sizeof(float) * q_dim * n_rows),
	      *out = malloc(sizeof(float) * q_dim * n_rows);
	const size_t per_thread = kops_attn_scratch_floats(N_HEADS / N_KV, ctx, hd);
	float *scratch = malloc(sizeof(float) * per_thread * kpool_size(pool));
	if (!tables || !row_seq || !row_pos || !q || !out || !scratch)
		return -1;
	for (int s = 0; s < n_seqs; s++)
		for (int b = 0; b < mb; b++)
			tables[(size_t)s * mb + b] = s * mb + (b * 7 + 3) % mb;
	double flops = 0;
	for (int r = 0; r < n_rows; r++) {
		row_seq[r] = r / rows_per_seq;
		row_pos[r] = ctx - rows_per_seq + r % rows_per_seq;
		flops += 4.0 * (row_pos[r] + 1) * hd * N_HEADS;
	}
	for (size_t i = 0; i < q_dim * n_rows; i++)
		q[i] = frand();
	struct job j = {
	    .isa = kops_isa_detect(),
	    .kv_dtype = dt,
	    .hd = hd,
	    .k = pl.k,
	    .v = pl.v,
	    .q = q,
	    .out = out,
	    .scratch = scratch,
	    .scratch_per_thread = per_thread,
	    .tables = tables,
	    .mb = mb,
	    .n_rows = n_rows,
	    .rows_per_seq = rows_per_seq,
	    .row_seq = row_seq,
	    .row_pos = row_pos,
	};
	const char *modes[] = {"rows", "tiles"};
	const kpool_fn fns[] = {job_rows, job_tiles};
	for (int m = 0; m < 2; m++) {
		if (only_mode && strcmp(only_mode, modes[m]))
			continue;
		double best, t = time_job(pool, fns[m], &j, reps, &best);
		double gf = flops / t / 1e9;
		printf("%-7s %-5s %s hd %3d seqs %3d rows/seq %5d ctx %5d: %8.3f ms/layer %7.1f "
		       "GFLOP/s",
		       name, modes[m], dt == DT_F16 ? "f16" : "f32", hd, n_seqs, rows_per_seq, ctx,
		       t * 1e3, gf);
		if (peak > 0)
			printf(" %5.1f%% of peak", 100.0 * gf / peak);
		printf(" (best %.1f)", flops / best / 1e9);
		printf("\n");
		fflush(stdout);
	}
	free(pl.k), free(pl.v), free(tables), free(row_seq), free(row_pos), free(q), free(out);
	free(scratch);
	return 0;
}

int main(int argc, char **argv)
{
	int threads = 0, reps = 7, hd = 64, prompt = 512, dctx = 128, opt;
	while ((opt = getopt(argc, argv, "t:r:d:p:c:m:")) != -1) {
		switch (opt) {
		case 't':
			threads = atoi(optarg);
			break;
		case 'r':
			reps = atoi(optarg);
			break;
		case 'd':
			hd = atoi(optarg);
			break;
		case 'p':
			prompt = atoi(optarg);
			break;
		case 'c':
			dctx = atoi(optarg);
			break;
		case 'm':
			only_mode = optarg;
			break;
		default:
			fprintf(stderr, "usage: bench_attn [-t threads] [-r reps] [-d head_dim] "
			                "[-p prompt] [-c decode_ctx] [-m rows|tiles]\n");
			return 2;
		}
	}
	if (reps < 1 || hd < 1 || hd > 256 || prompt < 1 || dctx < 1) {
		fprintf(stderr, "bench_attn: bad arguments\n");
		return 2;
	}
	struct kpool *pool;
	if (kpool_create(threads, &pool))
		return 1;
	double peak = kcpu_probe_fma_gflops(pool);
	printf("bench_attn: %d threads, isa %s, FMA peak %.1f GFLOP/s; %d/%d heads, blocks of %d\n",
	       kpool_size(pool), kops_isa_name(kops_isa_detect()), peak, N_HEADS, N_KV, BS);
	const enum dtype dts[] = {DT_F16, DT_F32};
	int rc = 0;
	for (int i = 0; i < 2 && !rc; i++) {
		rc |= run_case(pool, "prefill", dts[i], hd, 1, prompt, prompt, reps, peak);
		rc |= run_case(pool, "decode", dts[i], hd, 1, 1, dctx, reps, peak);
		rc |= run_case(pool, "decode", dts[i], hd, 16, 1, dctx, reps, peak);
		rc |= run_case(pool, "decode", dts[i], hd, 64, 1, dctx, reps, peak);
	}
	kpool_destroy(pool);
	if (rc)
		fprintf(stderr, "bench_attn: out of memory\n");
	return rc ? 1 : 0;
}
