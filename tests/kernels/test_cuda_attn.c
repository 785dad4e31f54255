/* tests/kernels/test_cuda_attn.c — k_attn_decode and k_attn_prefill
 * (kernels/cuda/kcuda_attn.h) against kops_attn_group_ref (kernels/cpu/ops.h).
 *
 * Each case builds random K/V pools larger than used, hands every sequence a
 * random set of blocks (table entries past the context hold a poison id far
 * outside the pool, so reading them faults), random Q, and runs both kernels
 * on the same rows (decode treats every row alone; prefill needs chunks of
 * consecutive positions). The CPU reference runs on the F32 values the pool
 * holds (dequantized for BF16 / FP8; FP8 scaled per tensor, and in two cases
 * per KV head through k_head_scale / v_head_scale). Decodes run a second time with the
 * split merge fused into the decode kernel (split_counters): the same bytes
 * as the merge kernel's, and the counters zero again. Outputs and the decode workspace are
 * pre-filled with NaN so an unwritten value fails. Decode is rerun with the
 * same grid (max_ctx) on shorter contexts and a padding row (position -1,
 * output 0), as a replayed CUDA graph would. Prefill of F16, BF16 and FP8
 * caches runs on tensor cores and is held to a reference with Q rounded as
 * the kernel rounds it (tol_tc); the smaller cases rerun it with the last
 * row a padding row (output 0) and, for BF16 and FP8, run the SIMT kernel
 * (k_attn_prefill_simt) too; F32 caches run only SIMT. Argument errors are checked
 * first and need no GPU; the rest exits 77 without one. Without a GPU the
 * suite 'emu' (tests/emu) runs this file against the host emulation of the
 * kernels.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_attn.h"
#include "tests/kernels/kcheck.h"

#define POISON_BLOCK 0x3fffffff
#define MAX_SEQS 8
/* The second prefill runs (a padding row; the SIMT kernel on BF16 / FP8)
 * only on cases of at most this many outputs: the emulated suite's time. */
#define RERUN_MAX_OUT 250000

/* One sequence of a batch: `rows` query rows at consecutive positions
 * first_pos .. first_pos + rows - 1 (the cache holds all of them). */
struct seq_spec {
	int rows, first_pos;
};

struct tcase {
	const char *name;
	int n_heads, n_kv_heads, head_dim, block_size;
	enum dtype kv_dt, out_dt;
	int max_ctx_extra; /* decode max_ctx = longest context + this */
	int n_seqs;
	struct seq_spec seqs[MAX_SEQS];
	int per_head; /* FP8: KV head h's scales are the fp8_*_scale below * (h + 1) / 2 */
};

/* Decode batches (one row per sequence: contexts 1, 15, 16, 17, 255, 1000,
 * 4097, a single split (max_ctx 16: every context in one CTA) and max_ctx far
 * above the contexts; otherwise few rows give 32 splits), then prefill
 * batches (chunks of 1, 7, 64, 200 rows from position 0 or deep into the
 * context, mixed with one-row sequences). GQA 1, 3, 4, 8, 64; every head_dim,
 * block size, KV dtype and output dtype appears. */
static const struct tcase cases[] = {
	{"dec mha hd64 bs16 f16->f32 one split (max_ctx 16)", 8, 8, 64, 16, DT_F16, DT_F32, 0, 5,
	 {{1, 0}, {1, 7}, {1, 14}, {1, 15}, {1, 11}}},
	{"dec mha hd64 bs16 f16->f32", 8, 8, 64, 16, DT_F16, DT_F32, 0, 6,
	 {{1, 0}, {1, 14}, {1, 15}, {1, 16}, {1, 254}, {1, 999}}},
	{"dec gqa4 hd128 bs32 bf16->bf16", 32, 8, 128, 32, DT_BF16, DT_BF16, 0, 5,
	 {{1, 0}, {1, 16}, {1, 4096}, {1, 255}, {1, 256}}},
	{"dec gqa8 hd256 bs16 f32->f16 max_ctx>>ctx", 64, 8, 256, 16, DT_F32, DT_F16, 20000, 3,
	 {{1, 14}, {1, 999}, {1, 4096}}},
	{"dec gqa8 hd64 bs32 f16->f16 max_ctx 100000", 64, 8, 64, 32, DT_F16, DT_F16, 96000, 3,
	 {{1, 254}, {1, 4096}, {1, 31}}},
	{"dec gqa4 hd128 bs16 fp8->f32", 32, 8, 128, 16, DT_F8_E4M3, DT_F32, 0, 4,
	 {{1, 0}, {1, 15}, {1, 999}, {1, 4096}}},
	{"dec mha hd256 bs32 fp8->bf16", 8, 8, 256, 32, DT_F8_E4M3, DT_BF16, 3000, 3,
	 {{1, 16}, {1, 1000}, {1, 300}}},
	{"dec mqa64 hd128 bs16 bf16->f32", 64, 1, 128, 16, DT_BF16, DT_F32, 0, 2,
	 {{1, 700}, {1, 3}}},
	{"dec gqa3 hd64 bs16 f32->f32 several rows/seq", 12, 4, 64, 16, DT_F32, DT_F32, 500, 2,
	 {{3, 270}, {2, 0}}},

	{"pre mha hd64 bs16 f16->f32", 8, 8, 64, 16, DT_F16, DT_F32, 0, 6,
	 {{1, 0}, {7, 0}, {64, 0}, {200, 0}, {1, 500}, {64, 1000}}},
	{"pre gqa4 hd128 bs32 bf16->bf16", 32, 8, 128, 32, DT_BF16, DT_BF16, 0, 4,
	 {{7, 33}, {64, 2000}, {1, 4096}, {200, 0}}},
	{"pre gqa8 hd256 bs16 f32->f16", 64, 8, 256, 16, DT_F32, DT_F16, 0, 4,
	 {{64, 0}, {7, 900}, {1, 17}, {200, 100}}},
	{"pre gqa4 hd128 bs16 fp8->f32", 32, 8, 128, 16, DT_F8_E4M3, DT_F32, 0, 4,
	 {{64, 0}, {200, 777}, {1, 1}, {7, 4090}}},
	{"pre gqa8 hd64 bs32 fp8->f16", 64, 8, 64, 32, DT_F8_E4M3, DT_F16, 0, 3,
	 {{200, 0}, {1, 63}, {64, 129}}},
	{"pre mqa64 hd256 bs16 f16->f32", 64, 1, 256, 16, DT_F16, DT_F32, 0, 3,
	 {{7, 50}, {64, 0}, {1, 300}}},
	{"pre gqa3 hd64 bs32 f16->bf16", 12, 4, 64, 32, DT_F16, DT_BF16, 0, 4,
	 {{200, 0}, {1, 3}, {7, 15}, {22, 40}}},
	/* FP8 scales per KV head (k_head_scale, v_head_scale) */
	{"dec gqa4 hd128 bs16 fp8->f32 per-head scales", 32, 8, 128, 16, DT_F8_E4M3, DT_F32, 0, 3,
	 {{1, 15}, {1, 999}, {1, 300}}, 1},
	{"pre gqa8 hd64 bs32 fp8->f16 per-head scales", 64, 8, 64, 32, DT_F8_E4M3, DT_F16, 0, 2,
	 {{64, 129}, {7, 40}}, 1},
};

/* FP8 pools store value / scale; a power-of-two K scale and a V scale that
 * is not one, so both multiplications are exercised. */
static const float fp8_k_scale = 1.0f / 128.0f, fp8_v_scale = 0.01f;
#define MAX_KV_HEADS 64

/* Tolerance, |got - ref| <= atol + rtol * |ref|. Both sides start from the
 * same values (the reference reads the pool's exact F32 values) and
 * accumulate in F32; |out| <= max |v| = 1. What differs: the order of the F32
 * sums (dots over head_dim, softmax sums and P·V over up to 4097 positions)
 * and expf's last bits (CUDA's expf is within 2 ulp): a few 1e-7 (the CPU
 * emulation of these kernels measured at most 5.4e-7 over all cases).
 * atol = 2e-5 keeps a ~40x margin over that, yet one position dropped or
 * counted twice at context 4097 moves outputs by ~p * |v - out| ~ 1e-4 ..
 * 1e-3, far more at shorter contexts. A 16-bit output adds its own rounding,
 * at most half an ulp: 2^-11 |x| for F16, 2^-8 |x| for BF16 (so truncation,
 * a full ulp, fails). */
static void tol_for(enum dtype out_dt, float *atol, float *rtol)
{
	*atol = 2e-5f;
	*rtol = out_dt == DT_F16 ? 1.01f / 2048.0f : out_dt == DT_BF16 ? 1.01f / 256.0f : 1e-5f;
}

/* k_attn_prefill runs F16, BF16 and FP8 caches on tensor cores: Q and P
 * rounded to 16 bits (BF16 for BF16, F16 otherwise), F32 accumulation. */
static bool prefill_tc(enum dtype kv_dt)
{
	return kv_dt != DT_F32;
}

static enum dtype tc_type(enum dtype kv_dt)
{
	return kv_dt == DT_BF16 ? DT_BF16 : DT_F16;
}

/* Tensor-core prefill tolerance. The reference gets the same rounded Q, so
 * the scores agree to F32 noise and what remains is P's rounding before
 * P·V: out = sum_i p_i (1 + e_i) v_i / sum_i p_i with |e_i| <= u (half an
 * ulp: 2^-9 BF16, 2^-12 F16; l sums the unrounded p), so
 * |out - ref| <= u max|v|. F16 also flushes p < 2^-14 to subnormals, an
 * absolute error <= 2^-25 per position, at most n_ctx 2^-25 max|v| / l with
 * l >= 1. Plus the F32 allowance of tol_for and the output's rounding. A
 * bound, not an estimate: the errors are random and mostly far smaller,
 * which tc_mean_max holds. The kernel is one template for F16 and BF16, so
 * the F16 cases (8x tighter) hold its indexing and masking; BF16 adds only
 * its conversions. */
static void tol_tc(enum dtype kv_dt, enum dtype out_dt, float vmax, int longest, float *atol,
		   float *rtol)
{
	tol_for(out_dt, atol, rtol);
	const float u = kv_dt == DT_BF16 ? 1.0f / 512.0f : 1.0f / 4096.0f;
	const float sub = kv_dt == DT_BF16 ? 0.0f : (float)longest / 33554432.0f;
	*atol += vmax * (u + sub);
}

/* Mean |got - ref| allowed on the tensor-core path: u max|v| / 4, plus the
 * output's rounding (rtol * mean |ref|, added in check_out_tol). The
 * rounding errors e_i are zero-mean and partly cancel: with F32 outputs
 * the emulation measured means of u max|v| / 13 (one-row sequences at
 * short contexts, where a few p dominate) to / 33. A systematic error (a
 * position dropped or counted twice in every row at context n shifts rows
 * by ~0.3 / n) fails this for n up to ~5000 (F16) / ~700 (BF16) even where
 * it stays under the element bound. */
static float tc_mean_max(enum dtype kv_dt, float vmax)
{
	return vmax * (kv_dt == DT_BF16 ? 1.0f / 512.0f : 1.0f / 4096.0f) / 4.0f;
}

static void *xmalloc(size_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);
	if (!p)
		kc_fail("out of memory (%zu bytes)", bytes);
	return p;
}

static size_t esize(enum dtype dt)
{
	return dt == DT_F32 ? 4 : dt == DT_F8_E4M3 ? 1 : 2;
}

/* ---- argument checks (no GPU needed: launchers reject before any CUDA call) -- */

static void expect_rc(int got, int want, const char *what)
{
	if (got != want)
		kc_fail("%s: returned %d, expected %d", what, got, want);
}

static void test_errors(void)
{
	/* plausible aligned non-NULL pointers: only rejected calls are made */
	static float fake[64] __attribute__((aligned(16)));
	static int32_t ifake[64];
	const struct k_attn_args ok = {
		.q = fake, .out = fake, .out_dt = DT_F16, .k_cache = fake, .v_cache = fake,
		.kv_dt = DT_F16, .k_scale = 1, .v_scale = 1, .block_tables = ifake,
		.max_blocks_per_seq = 4, .positions = ifake, .row_seq = ifake, .seq_start = ifake,
		.n_rows = 2, .n_seqs = 2, .max_rows_per_seq = 1, .max_ctx = 64, .block_size = 16,
		.n_heads = 8, .n_kv_heads = 2, .head_dim = 128, .scale = 0.1f, .workspace = NULL,
		.workspace_bytes = 0,
	};
	struct k_attn_args a;
#define BOTH(field_set, want, what)                                                        \
	do {                                                                               \
		a = ok;                                                                    \
		field_set;                                                                 \
		expect_rc(k_attn_decode(NULL, &a), want, "decode: " what);                 \
		expect_rc(k_attn_prefill(NULL, &a), want, "prefill: " what);               \
	} while (0)
	BOTH(a.head_dim = 96, ERR_UNSUPPORTED, "head_dim 96");
	BOTH(a.head_dim = 32, ERR_UNSUPPORTED, "head_dim 32");
	BOTH(a.kv_dt = DT_Q8_0, ERR_UNSUPPORTED, "kv Q8_0");
	BOTH(a.out_dt = DT_I8, ERR_UNSUPPORTED, "out I8");
	BOTH(a.n_heads = 9, ERR_INVAL, "n_heads % n_kv_heads");
	BOTH(a.n_kv_heads = 0, ERR_INVAL, "n_kv_heads 0");
	BOTH(a.block_size = 0, ERR_INVAL, "block_size 0");
	BOTH(a.max_blocks_per_seq = 0, ERR_INVAL, "max_blocks_per_seq 0");
	BOTH(a.n_rows = -1, ERR_INVAL, "n_rows -1");
	BOTH(a.q = NULL, ERR_INVAL, "q NULL");
	BOTH(a.out = NULL, ERR_INVAL, "out NULL");
	BOTH(a.v_cache = NULL, ERR_INVAL, "v_cache NULL");
	BOTH(a.block_tables = NULL, ERR_INVAL, "block_tables NULL");
	BOTH(a.positions = NULL, ERR_INVAL, "positions NULL");
	BOTH(a.k_cache = (const char *)fake + 2, ERR_INVAL, "k_cache misaligned");
	BOTH((a.kv_dt = DT_F8_E4M3, a.k_scale = 0), ERR_INVAL, "fp8 k_scale 0");
	BOTH((a.kv_dt = DT_F8_E4M3, a.v_scale = NAN), ERR_INVAL, "fp8 v_scale NaN");
	BOTH(a.scale = INFINITY, ERR_INVAL, "scale inf");
	expect_rc(k_attn_decode(NULL, NULL), ERR_INVAL, "decode NULL args");
	expect_rc(k_attn_prefill(NULL, NULL), ERR_INVAL, "prefill NULL args");
	/* nothing to do: accepted without a launch */
	BOTH((a.n_rows = 0, a.q = NULL), 0, "n_rows 0");

	a = ok;
	a.row_seq = NULL;
	expect_rc(k_attn_decode(NULL, &a), ERR_INVAL, "decode: row_seq NULL");
	a = ok;
	a.max_ctx = 0;
	expect_rc(k_attn_decode(NULL, &a), ERR_INVAL, "decode: max_ctx 0");
	a = ok;
	a.max_ctx = 4097;
	a.workspace = fake;
	a.workspace_bytes = k_attn_workspace_bytes(2, 8, 128, 4097) - 1;
	expect_rc(k_attn_decode(NULL, &a), ERR_INVAL, "decode: workspace too small");
	a.workspace = NULL;
	a.workspace_bytes = 1u << 30;
	expect_rc(k_attn_decode(NULL, &a), ERR_INVAL, "decode: workspace NULL");
	a = ok;
	a.seq_start = NULL;
	expect_rc(k_attn_prefill(NULL, &a), ERR_INVAL, "prefill: seq_start NULL");
	a = ok;
	a.max_rows_per_seq = 0;
	expect_rc(k_attn_prefill(NULL, &a), ERR_INVAL, "prefill: max_rows_per_seq 0");
#undef BOTH

	/* workspace: none for one split, enough for the splits, never shrinking
	 * as max_ctx or the rows grow (a buffer sized once serves smaller launches) */
	if (k_attn_workspace_bytes(4, 8, 64, 32) != 0)
		kc_fail("workspace for max_ctx 32 should be 0 (one split)");
	if (k_attn_workspace_bytes(4, 8, 64, 33) < (size_t)4 * 8 * 2 * 66 * 4)
		kc_fail("workspace for 2 splits too small");
	if (k_attn_workspace_bytes(4, 32, 128, 4097) < (size_t)4 * 32 * 32 * 130 * 4)
		kc_fail("workspace for 32 splits too small");
	if (k_attn_workspace_bytes(0, 8, 64, 4096) != 0 || k_attn_workspace_bytes(4, 8, 64, 0) != 0)
		kc_fail("workspace for nothing should be 0");
	size_t prev = 0;
	for (int mc = 1; mc < 300000; mc += 97) {
		size_t w = k_attn_workspace_bytes(3, 8, 128, mc);
		if (w < prev)
			kc_fail("workspace shrinks at max_ctx %d", mc);
		if (k_attn_workspace_bytes(4, 8, 128, mc) < w)
			kc_fail("workspace shrinks with more rows at max_ctx %d", mc);
		prev = w;
	}
	printf("ok argument errors and workspace sizes\n");
}

/* ---- one case ------------------------------------------------------------------ */

struct batch {
	int n_rows, n_seqs, mbps, max_rows, longest;
	size_t pool_elems;
	int32_t *tables, *positions, *row_seq, *seq_start;
	float *q, *k_ref, *v_ref; /* the pools' values as F32 */
	void *k_pool, *v_pool;	  /* packed in kv_dt */
};

/* The FP8 scale of KV head h (v: V, else K) of case c. */
static float head_scale(const struct tcase *c, int v, int h)
{
	const float s = v ? fp8_v_scale : fp8_k_scale;
	return c->per_head ? s * (float)(h + 1) / 2.0f : s;
}

static void fill_pool(struct kc_rng *rng, const struct tcase *c, int v, size_t n, float **ref,
		      void **packed)
{
	const enum dtype dt = c->kv_dt;
	float *x = xmalloc(n * sizeof(float));
	kc_fill(rng, x, n, -1.0f, 1.0f);
	if (dt == DT_F8_E4M3) {
		uint8_t *b = xmalloc(n);
		const size_t per_head = (size_t)c->block_size * c->head_dim; /* kops_kv_offset */
		for (size_t i = 0; i < n; i++) {
			const float scale = head_scale(c, v, (int)(i / per_head % c->n_kv_heads));
			b[i] = f32_to_f8e4m3(x[i] / scale);
			x[i] = f8e4m3_to_f32(b[i]) * scale;
		}
		*packed = b;
	} else {
		kc_round(x, n, dt);
		*packed = kc_pack(x, n, dt);
	}
	*ref = x;
}

static void build_batch(const struct tcase *c, struct kc_rng *rng, struct batch *b)
{
	memset(b, 0, sizeof *b);
	b->n_seqs = c->n_seqs;
	int n_need = 0;
	for (int s = 0; s < c->n_seqs; s++) {
		const int ctx = c->seqs[s].first_pos + c->seqs[s].rows;
		const int nb = (ctx + c->block_size - 1) / c->block_size;
		n_need += nb;
		b->mbps = nb > b->mbps ? nb : b->mbps;
		b->longest = ctx > b->longest ? ctx : b->longest;
		b->max_rows = c->seqs[s].rows > b->max_rows ? c->seqs[s].rows : b->max_rows;
		b->n_rows += c->seqs[s].rows;
	}
	b->mbps += 3;
	const int n_blocks = n_need + 5 + (int)kc_below(rng, 8);
	int *perm = xmalloc((size_t)n_blocks * sizeof(int));
	for (int i = 0; i < n_blocks; i++)
		perm[i] = i;
	for (int i = n_blocks - 1; i > 0; i--) {
		int j = (int)kc_below(rng, (uint32_t)i + 1), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	b->tables = xmalloc((size_t)c->n_seqs * b->mbps * sizeof(int32_t));
	b->positions = xmalloc((size_t)b->n_rows * sizeof(int32_t));
	b->row_seq = xmalloc((size_t)b->n_rows * sizeof(int32_t));
	b->seq_start = xmalloc((size_t)(c->n_seqs + 1) * sizeof(int32_t));
	int next = 0, r = 0;
	for (int s = 0; s < c->n_seqs; s++) {
		const int ctx = c->seqs[s].first_pos + c->seqs[s].rows;
		const int nb = (ctx + c->block_size - 1) / c->block_size;
		for (int i = 0; i < b->mbps; i++)
			b->tables[(size_t)s * b->mbps + i] = i < nb ? perm[next++] : POISON_BLOCK;
		b->seq_start[s] = r;
		for (int i = 0; i < c->seqs[s].rows; i++, r++) {
			b->positions[r] = c->seqs[s].first_pos + i;
			b->row_seq[r] = s;
		}
	}
	b->seq_start[c->n_seqs] = r;
	free(perm);

	b->pool_elems = (size_t)n_blocks * c->n_kv_heads * c->block_size * c->head_dim;
	fill_pool(rng, c, 0, b->pool_elems, &b->k_ref, &b->k_pool);
	fill_pool(rng, c, 1, b->pool_elems, &b->v_ref, &b->v_pool);
	const size_t qn = (size_t)b->n_rows * c->n_heads * c->head_dim;
	b->q = xmalloc(qn * sizeof(float));
	kc_fill(rng, b->q, qn, -2.0f, 2.0f); /* scores up to a few units: a peaked softmax */
}

static void free_batch(struct batch *b)
{
	free(b->tables);
	free(b->positions);
	free(b->row_seq);
	free(b->seq_start);
	free(b->q);
	free(b->k_ref);
	free(b->v_ref);
	free(b->k_pool);
	free(b->v_pool);
}

static void reference(const struct tcase *c, const struct batch *b, const float *q,
		      const int32_t *positions, float *out)
{
	const int hd = c->head_dim, group = c->n_heads / c->n_kv_heads;
	float *scratch = xmalloc((size_t)(b->longest + 1) * sizeof(float));
	for (int r = 0; r < b->n_rows; r++) {
		for (int kvh = 0; kvh < c->n_kv_heads; kvh++) {
			const size_t off = ((size_t)r * c->n_heads + (size_t)kvh * group) * hd;
			struct kops_attn_args a = {
				.q = q + off, .out = out + off, .scratch = scratch,
				.k_cache = b->k_ref, .v_cache = b->v_ref, .kv_dtype = DT_F32,
				.block_table = b->tables + (size_t)b->row_seq[r] * b->mbps,
				.block_size = c->block_size,
				.n_ctx = positions[r] < 0 ? 0 : positions[r] + 1, .kv_head = kvh,
				.n_kv_heads = c->n_kv_heads, .head_dim = hd,
				.scale = 1.0f / sqrtf((float)hd),
			};
			kops_attn_group_ref(&a, group);
		}
	}
	free(scratch);
}

/* Compares d_out to ref element-wise (atol, rtol) and, when mean_max > 0,
 * the mean |got - ref| against mean_max + rtol * mean |ref|. */
static void check_out_tol(const char *what, const struct tcase *c, void *d_out, size_t n,
			  const float *ref, float atol, float rtol, float mean_max)
{
	void *h = xmalloc(n * esize(c->out_dt));
	float *got = xmalloc(n * sizeof(float));
	kc_download(h, d_out, n * esize(c->out_dt));
	kc_unpack(h, n, c->out_dt, got);
	char label[256];
	snprintf(label, sizeof label, "%s: %s", c->name, what);
	kc_compare(label, got, ref, n, atol, rtol);
	if (mean_max > 0.0f) {
		/* counted as one more check: the mean error against 0 */
		double sum = 0.0, sum_ref = 0.0;
		for (size_t i = 0; i < n; i++) {
			sum += fabs((double)got[i] - (double)ref[i]);
			sum_ref += fabs((double)ref[i]);
		}
		const double nn = (double)(n ? n : 1);
		const float mean = (float)(sum / nn), zero = 0.0f;
		snprintf(label, sizeof label, "%s: %s, mean |diff|", c->name, what);
		kc_compare(label, &mean, &zero, 1, mean_max + rtol * (float)(sum_ref / nn), 0.0f);
	}
	free(h);
	free(got);
}

static void check_out(const char *what, const struct tcase *c, void *d_out, size_t n,
		      const float *ref)
{
	float atol, rtol;
	tol_for(c->out_dt, &atol, &rtol);
	check_out_tol(what, c, d_out, n, ref, atol, rtol, 0.0f);
}

/* The decode just run (its output in d_out) again with the split merge fused
 * into the decode kernel (split_counters): the same bytes, and the counters
 * zero again afterwards. */
static void check_fused_merge(void *stream, const struct k_attn_args *a0, void *d_out,
			      size_t out_bytes, const char *what)
{
	const size_t n_cnt = (size_t)a0->n_rows * a0->n_heads;
	unsigned *d_cnt = kc_dev_alloc(n_cnt * sizeof(unsigned));
	uint8_t *want = xmalloc(out_bytes), *got = xmalloc(out_bytes);
	unsigned *cnt = xmalloc(n_cnt * sizeof(unsigned));
	kc_download(want, d_out, out_bytes);
	struct k_attn_args a = *a0;
	a.split_counters = d_cnt;
	{
		kc_ok(k_cuda_memset_async(stream, d_out, 0xff, out_bytes), "memset out");
		kc_ok(k_attn_decode(stream, &a), "k_attn_decode (merge fused)");
		kc_sync("k_attn_decode (merge fused)");
		kc_download(got, d_out, out_bytes);
		if (memcmp(got, want, out_bytes) != 0) {
			size_t i = 0;
			while (got[i] == want[i])
				i++;
			kc_fail("%s, merge fused: byte %zu differs from the merge kernel's", what, i);
		}
		kc_download(cnt, d_cnt, n_cnt * sizeof(unsigned));
		for (size_t i = 0; i < n_cnt; i++)
			if (cnt[i])
				kc_fail("%s, merge fused: counter %zu is %u afterwards", what, i, cnt[i]);
	}
	kc_dev_free(d_cnt);
	free(want);
	free(got);
	free(cnt);
}

static void test_case(const struct tcase *c, uint64_t seed, void *stream)
{
	struct kc_rng rng;
	kc_seed(&rng, seed);
	struct batch b;
	build_batch(c, &rng, &b);
	const size_t n_out = (size_t)b.n_rows * c->n_heads * c->head_dim;
	const size_t kvb = b.pool_elems * esize(c->kv_dt);
	float *ref = xmalloc(n_out * sizeof(float));
	reference(c, &b, b.q, b.positions, ref);
	/* the tensor-core prefill's reference: Q rounded as the kernel rounds it */
	float *ref_tc = NULL, vmax = 0.0f;
	if (prefill_tc(c->kv_dt)) {
		float *q16 = xmalloc(n_out * sizeof(float));
		memcpy(q16, b.q, n_out * sizeof(float));
		kc_round(q16, n_out, tc_type(c->kv_dt));
		ref_tc = xmalloc(n_out * sizeof(float));
		reference(c, &b, q16, b.positions, ref_tc);
		free(q16);
		for (size_t i = 0; i < b.pool_elems; i++)
			vmax = fabsf(b.v_ref[i]) > vmax ? fabsf(b.v_ref[i]) : vmax;
	}

	const bool fp8 = c->kv_dt == DT_F8_E4M3;
	const int max_ctx = b.longest + c->max_ctx_extra;
	const size_t ws_bytes = k_attn_workspace_bytes(b.n_rows, c->n_heads, c->head_dim, max_ctx);
	void *d_q = kc_upload(b.q, n_out * sizeof(float));
	void *d_k = kc_upload(b.k_pool, kvb), *d_v = kc_upload(b.v_pool, kvb);
	void *d_tab = kc_upload(b.tables, (size_t)c->n_seqs * b.mbps * sizeof(int32_t));
	void *d_pos = kc_upload(b.positions, (size_t)b.n_rows * sizeof(int32_t));
	void *d_rs = kc_upload(b.row_seq, (size_t)b.n_rows * sizeof(int32_t));
	void *d_ss = kc_upload(b.seq_start, (size_t)(c->n_seqs + 1) * sizeof(int32_t));
	void *d_out = kc_dev_alloc(n_out * esize(c->out_dt));
	void *d_ws = ws_bytes ? kc_dev_alloc(ws_bytes) : NULL;
	float hs[2][MAX_KV_HEADS] = { { 0 } };
	for (int h = 0; h < c->n_kv_heads && h < MAX_KV_HEADS; h++)
		hs[0][h] = head_scale(c, 0, h), hs[1][h] = head_scale(c, 1, h);
	float *d_hs = kc_upload(hs, sizeof hs);
	struct k_attn_args a = {
		.q = d_q, .out = d_out, .out_dt = c->out_dt, .k_cache = d_k, .v_cache = d_v,
		.kv_dt = c->kv_dt, .k_scale = fp8 ? fp8_k_scale : 0.0f,
		.v_scale = fp8 ? fp8_v_scale : 0.0f, /* ignored unless FP8 */
		.k_head_scale = c->per_head ? d_hs : NULL,
		.v_head_scale = c->per_head ? d_hs + MAX_KV_HEADS : NULL,
		.block_tables = d_tab, .max_blocks_per_seq = b.mbps, .positions = d_pos,
		.row_seq = d_rs, .seq_start = d_ss, .n_rows = b.n_rows, .n_seqs = c->n_seqs,
		.max_rows_per_seq = b.max_rows, .max_ctx = max_ctx, .block_size = c->block_size,
		.n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim,
		.scale = 1.0f / sqrtf((float)c->head_dim), .workspace = d_ws,
		.workspace_bytes = ws_bytes,
	};
	const size_t out_bytes = n_out * esize(c->out_dt);

	/* prefill (every sequence's rows are consecutive positions) */
	kc_ok(k_cuda_memset_async(stream, d_out, 0xff, out_bytes), "memset out");
	kc_ok(k_attn_prefill(stream, &a), "k_attn_prefill");
	kc_sync("k_attn_prefill");
	if (ref_tc) {
		float atol, rtol;
		tol_tc(c->kv_dt, c->out_dt, vmax, b.longest, &atol, &rtol);
		check_out_tol("prefill (tensor cores)", c, d_out, n_out, ref_tc, atol, rtol,
			      tc_mean_max(c->kv_dt, vmax));
	}
	if (ref_tc && n_out <= RERUN_MAX_OUT) {
		float atol, rtol;
		tol_tc(c->kv_dt, c->out_dt, vmax, b.longest, &atol, &rtol);
		/* the last row a padding row (position -1): its output 0, the others unchanged */
		const int pr = b.n_rows - 1;
		const int32_t pad = -1;
		const size_t row_elems = (size_t)c->n_heads * c->head_dim;
		kc_ok(k_cuda_memcpy_h2d((int32_t *)d_pos + pr, &pad, sizeof pad), "pad row");
		memset(ref_tc + (size_t)pr * row_elems, 0, row_elems * sizeof(float));
		kc_ok(k_cuda_memset_async(stream, d_out, 0xff, out_bytes), "memset out");
		kc_ok(k_attn_prefill(stream, &a), "k_attn_prefill (padding row)");
		kc_sync("k_attn_prefill (padding row)");
		check_out_tol("prefill (tensor cores), last row padding", c, d_out, n_out, ref_tc,
			      atol, rtol, 0.0f);
		kc_ok(k_cuda_memcpy_h2d((int32_t *)d_pos + pr, &b.positions[pr], sizeof pad),
		      "unpad row");
	}
	/* the SIMT kernel on the same cache (F32 math, F32 tolerance): F32 caches
	 * always, BF16 and FP8 through k_attn_prefill_simt on the small cases
	 * (its F16 loads are the decode kernel's; left out for time) */
	if ((c->kv_dt == DT_BF16 || c->kv_dt == DT_F8_E4M3) && n_out <= RERUN_MAX_OUT) {
		kc_ok(k_cuda_memset_async(stream, d_out, 0xff, out_bytes), "memset out");
		kc_ok(k_attn_prefill_simt(stream, &a), "k_attn_prefill_simt");
		kc_sync("k_attn_prefill_simt");
		check_out("prefill (SIMT)", c, d_out, n_out, ref);
	} else if (!ref_tc) {
		check_out("prefill (SIMT)", c, d_out, n_out, ref);
	}

	/* decode on the same rows */
	kc_ok(k_cuda_memset_async(stream, d_out, 0xff, out_bytes), "memset out");
	if (d_ws)
		kc_ok(k_cuda_memset_async(stream, d_ws, 0xff, ws_bytes), "memset ws");
	kc_ok(k_attn_decode(stream, &a), "k_attn_decode");
	kc_sync("k_attn_decode");
	check_out("decode", c, d_out, n_out, ref);
	if (n_out <= RERUN_MAX_OUT) /* the larger cases: the rerun below only (time) */
		check_fused_merge(stream, &a, d_out, out_bytes, "decode");

	/* decode again with the same max_ctx (the same grid) on shorter
	 * contexts, the first row a padding row (position -1: output 0) */
	int32_t *pos2 = xmalloc((size_t)b.n_rows * sizeof(int32_t));
	for (int r = 0; r < b.n_rows; r++)
		pos2[r] = (int32_t)kc_below(&rng, (uint32_t)b.positions[r] + 1);
	pos2[0] = -1;
	reference(c, &b, b.q, pos2, ref);
	kc_ok(k_cuda_memcpy_h2d(d_pos, pos2, (size_t)b.n_rows * sizeof(int32_t)), "upload pos2");
	kc_ok(k_cuda_memset_async(stream, d_out, 0xff, out_bytes), "memset out");
	kc_ok(k_attn_decode(stream, &a), "k_attn_decode (shorter contexts)");
	kc_sync("k_attn_decode (shorter contexts)");
	check_out("decode, shorter contexts + padding row", c, d_out, n_out, ref);
	check_fused_merge(stream, &a, d_out, out_bytes, "decode, shorter contexts + padding row");

	free(pos2);
	free(ref_tc);
	kc_dev_free(d_hs);
	kc_dev_free(d_q);
	kc_dev_free(d_k);
	kc_dev_free(d_v);
	kc_dev_free(d_tab);
	kc_dev_free(d_pos);
	kc_dev_free(d_rs);
	kc_dev_free(d_ss);
	kc_dev_free(d_out);
	kc_dev_free(d_ws);
	free(ref);
	free_batch(&b);
}

/* ---- timing (informative, not a check) ---------------------------------------- */

static float time_ms(void *stream, int (*fn)(void *, const struct k_attn_args *),
		     const struct k_attn_args *a, int iters)
{
	void *e0, *e1;
	float ms = 0;
	kc_ok(fn(stream, a), "warm-up");
	kc_ok(k_cuda_event_create(&e0), "event");
	kc_ok(k_cuda_event_create(&e1), "event");
	kc_ok(k_cuda_event_record(e0, stream), "record");
	for (int i = 0; i < iters; i++)
		kc_ok(fn(stream, a), "timed launch");
	kc_ok(k_cuda_event_record(e1, stream), "record");
	kc_ok(k_cuda_event_elapsed_ms(e0, e1, &ms), "elapsed");
	k_cuda_event_destroy(e0);
	k_cuda_event_destroy(e1);
	return ms / iters;
}

/* 32/8 heads, head_dim 128, BF16 KV, block 16 (Llama-3-8B): decode of 64
 * sequences at context 4096, prefill of one 2048-row chunk from position 0
 * on tensor cores and on the SIMT kernel. The buffers hold zeros (timing
 * only; the emulator skips these launches). */
static void bench(void *stream)
{
	const int hd = 128, nh = 32, nkv = 8, bs = 16, ctx = 4096, n_dec = 64, n_pre = 2048;
	const int mbps = ctx / bs, n_blocks = n_dec * mbps;
	const size_t pool = (size_t)n_blocks * nkv * bs * hd * 2;
	int32_t *tab = xmalloc((size_t)n_blocks * sizeof(int32_t));
	int32_t *pos = xmalloc((size_t)n_pre * sizeof(int32_t));
	int32_t *rs = xmalloc((size_t)n_pre * sizeof(int32_t));
	for (int i = 0; i < n_blocks; i++)
		tab[i] = (int32_t)(((long)i * 7919) % n_blocks);
	for (int r = 0; r < n_pre; r++) {
		pos[r] = r; /* prefill positions: 0 .. n_pre - 1 */
		rs[r] = r < n_dec ? r : 0;
	}
	int32_t ss_pre[2] = {0, n_pre};
	void *d_k = kc_dev_alloc(pool), *d_v = kc_dev_alloc(pool);
	void *d_q = kc_dev_alloc((size_t)n_pre * nh * hd * 4), *d_o = kc_dev_alloc((size_t)n_pre * nh * hd * 2);
	void *d_tab = kc_upload(tab, (size_t)n_blocks * 4), *d_rs = kc_upload(rs, (size_t)n_pre * 4);
	void *d_ss = kc_upload(ss_pre, sizeof ss_pre);
	const size_t ws = k_attn_workspace_bytes(n_dec, nh, hd, ctx);
	void *d_ws = kc_dev_alloc(ws);
	int32_t *pos_dec = xmalloc((size_t)n_dec * sizeof(int32_t));
	for (int r = 0; r < n_dec; r++)
		pos_dec[r] = ctx - 1;
	void *d_pos_dec = kc_upload(pos_dec, (size_t)n_dec * 4), *d_pos = kc_upload(pos, (size_t)n_pre * 4);
	struct k_attn_args a = {
		.q = d_q, .out = d_o, .out_dt = DT_BF16, .k_cache = d_k, .v_cache = d_v,
		.kv_dt = DT_BF16, .block_tables = d_tab, .max_blocks_per_seq = mbps,
		.positions = d_pos_dec, .row_seq = d_rs, .seq_start = d_ss, .n_rows = n_dec,
		.n_seqs = n_dec, .max_rows_per_seq = 1, .max_ctx = ctx, .block_size = bs,
		.n_heads = nh, .n_kv_heads = nkv, .head_dim = hd, .scale = 0.088f,
		.workspace = d_ws, .workspace_bytes = ws,
	};
	float ms = time_ms(stream, k_attn_decode, &a, 20);
	double bytes = 2.0 * n_dec * ctx * nkv * hd * 2;
	printf("bench decode: %d seqs x ctx %d, 32/8 heads, hd 128, bf16 KV: %.3f ms, %.0f GB/s of KV\n",
	       n_dec, ctx, ms, bytes / (ms * 1e6));
	a.positions = d_pos;
	a.n_rows = n_pre;
	a.n_seqs = 1;
	a.max_rows_per_seq = n_pre;
	/* causal FLOPs: 4 hd n_heads sum over rows of (pos + 1) */
	const double flops = 4.0 * nh * hd * ((double)n_pre * (n_pre + 1) / 2);
	const float ms_tc = time_ms(stream, k_attn_prefill, &a, 10);
	const float ms_simt = time_ms(stream, k_attn_prefill_simt, &a, 3);
	printf("bench prefill: %d rows from 0, 32/8 heads, hd 128, bf16 KV, block %d: "
	       "tensor cores %.3f ms (%.1f TFLOP/s, x32 layers %.1f ms), "
	       "SIMT %.3f ms (%.1f TFLOP/s, x32 layers %.1f ms)\n",
	       n_pre, bs, ms_tc, flops / (ms_tc * 1e9), 32.0 * ms_tc, ms_simt,
	       flops / (ms_simt * 1e9), 32.0 * ms_simt);
	kc_sync("bench");
	kc_dev_free(d_k);
	kc_dev_free(d_v);
	kc_dev_free(d_q);
	kc_dev_free(d_o);
	kc_dev_free(d_tab);
	kc_dev_free(d_rs);
	kc_dev_free(d_ss);
	kc_dev_free(d_ws);
	kc_dev_free(d_pos);
	kc_dev_free(d_pos_dec);
	free(tab);
	free(pos);
	free(rs);
	free(pos_dec);
}

int main(void)
{
	test_errors();
	kc_require_gpu("test_cuda_attn");
	void *stream = NULL;
	kc_ok(k_cuda_stream_create(&stream), "k_cuda_stream_create");
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		test_case(&cases[i], 77 + i, stream);
	int rc = kc_finish();
	if (rc == 0)
		bench(stream);
	k_cuda_stream_destroy(stream);
	return rc;
}
