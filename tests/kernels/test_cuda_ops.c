/* tests/kernels/test_cuda_ops.c — the launchers of kernels/cuda/kcuda_ops.h
 * against the CPU references (kernels/cpu/ops_ref.c, and engine/backend/cpu_forward.c's
 * job_qkv_post order for the Q/K/V step) on the same random inputs.
 *
 * embed (F32/F16/BF16 tables); add_rmsnorm with and without the residual
 * add, hidden 64..5120 including odd sizes (scalar rows and float4 rows with
 * tails), 1/7/300 rows, F32/F16/BF16 out; rmsnorm_rows on a scattered row
 * list; qkv_rope_store over head_dim 64/96/128, GQA 32/8, 8/8, 12/2, both
 * RoPE styles, with/without bias and q/k norm, 21 to 2100 rows (a CTA per 8
 * heads, and past QKV_ROW_CTAS a CTA per row), positions 0, 15, 16, 4095,
 * 100000 and random, F32/F16/BF16 pools, block sizes 16/32, scattered slots
 * and negative slots (the pools are filled with a sentinel and compared
 * whole); silu_mul; rmsnorm_quant and silu_mul_quant against k_add_rmsnorm /
 * k_silu_mul followed by k_quant_rows (the same codes and scales, compared
 * byte for byte); cast; argument errors
 * (checked before the GPU test, so they run without a GPU too). Exit 77
 * without a GPU.
 */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/cuda/kcuda_ops.h"
#include "kernels/cuda/kcuda_quant.h"
#include "tests/kernels/kcheck.h"

static const enum dtype dts[3] = {DT_F32, DT_F16, DT_BF16};

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

/* Relative size of one unit in the last place of a 16-bit result (at most
 * 2^-10 of |x| for F16 normals, 2^-7 for BF16): an F32 result within 1e-6
 * of the CPU's may round to the neighbouring 16-bit value, never further. */
static float ulp_rel(enum dtype dt)
{
	/* FP8 E4M3: 3 mantissa bits; an input within the F32 tolerance of a
	 * rounding boundary may round either way: one ulp, 2^-3 relative */
	return dt == DT_F16 ? 1.0f / 1024 : dt == DT_BF16 ? 1.0f / 128 : dt == DT_F8_E4M3 ? 0.125f : 0.0f;
}

/* Download n values of dt and unpack them to floats (malloc'ed). */
static float *fetch(const void *d, size_t n, enum dtype dt)
{
	void *raw = xmalloc(n * esize(dt));
	float *out = xmalloc(n * sizeof(float));
	kc_download(raw, d, n * esize(dt));
	kc_unpack(raw, n, dt, out);
	free(raw);
	return out;
}

/* ---- argument errors (no GPU needed: launchers check before any CUDA call) -- */

static void expect_rc(const char *what, int got, int want)
{
	if (got != want)
		kc_fail("%s: returned %d, expected %d", what, got, want);
}

static void check_args(void)
{
	/* Host pointers stand in for device ones: nothing is launched. */
	float f[8] = {0};
	int32_t t[8] = {0};
	char out[64];

	expect_rc("embed hidden 0", k_embed(NULL, f, DT_F32, 0, t, 1, f), ERR_INVAL);
	expect_rc("embed rows -1", k_embed(NULL, f, DT_F32, 4, t, -1, f), ERR_INVAL);
	expect_rc("embed NULL table", k_embed(NULL, NULL, DT_F32, 4, t, 1, f), ERR_INVAL);
	expect_rc("embed NULL x", k_embed(NULL, f, DT_F16, 4, t, 1, NULL), ERR_INVAL);
	expect_rc("embed q8_0", k_embed(NULL, f, DT_Q8_0, 4, t, 1, f), ERR_UNSUPPORTED);
	expect_rc("embed dt 99", k_embed(NULL, f, (enum dtype)99, 4, t, 1, f), ERR_INVAL);
	expect_rc("embed 0 rows", k_embed(NULL, f, DT_F32, 4, t, 0, f), 0);

	expect_rc("add_rmsnorm NULL x", k_add_rmsnorm(NULL, NULL, f, f, 1, 4, 1e-6f, out, DT_F32),
		  ERR_INVAL);
	expect_rc("add_rmsnorm NULL w", k_add_rmsnorm(NULL, f, f, NULL, 1, 4, 1e-6f, out, DT_F32),
		  ERR_INVAL);
	expect_rc("add_rmsnorm NULL out", k_add_rmsnorm(NULL, f, f, f, 1, 4, 1e-6f, NULL, DT_F16),
		  ERR_INVAL);
	expect_rc("add_rmsnorm hidden -1", k_add_rmsnorm(NULL, f, f, f, 1, -1, 1e-6f, out, DT_F32),
		  ERR_INVAL);
	expect_rc("add_rmsnorm rows -1", k_add_rmsnorm(NULL, f, f, f, -1, 4, 1e-6f, out, DT_F32),
		  ERR_INVAL);
	expect_rc("add_rmsnorm eps -1", k_add_rmsnorm(NULL, f, f, f, 1, 4, -1.0f, out, DT_F32),
		  ERR_INVAL);
	expect_rc("add_rmsnorm eps NaN", k_add_rmsnorm(NULL, f, f, f, 1, 4, NAN, out, DT_F32),
		  ERR_INVAL);
	expect_rc("add_rmsnorm i32 out", k_add_rmsnorm(NULL, f, f, f, 1, 4, 1e-6f, out, DT_I32),
		  ERR_UNSUPPORTED);

	expect_rc("rmsnorm_rows NULL rows",
		  k_rmsnorm_rows(NULL, f, NULL, 1, f, 4, 1e-6f, out, DT_BF16), ERR_INVAL);
	expect_rc("rmsnorm_rows n_out -1", k_rmsnorm_rows(NULL, f, t, -1, f, 4, 1e-6f, out, DT_F32),
		  ERR_INVAL);
	expect_rc("rmsnorm_rows f8 out",
		  k_rmsnorm_rows(NULL, f, t, 1, f, 4, 1e-6f, out, DT_F8_E4M3), ERR_UNSUPPORTED);

	expect_rc("rmsnorm_quant NULL xq",
		  k_rmsnorm_quant(NULL, f, f, 1, 4, 1e-6f, DT_BF16, DT_F8_E4M3, NULL, f), ERR_INVAL);
	expect_rc("rmsnorm_quant NULL scale",
		  k_rmsnorm_quant(NULL, f, f, 1, 4, 1e-6f, DT_BF16, DT_I8, out, NULL), ERR_INVAL);
	expect_rc("rmsnorm_quant eps -1",
		  k_rmsnorm_quant(NULL, f, f, 1, 4, -1.0f, DT_BF16, DT_I8, out, f), ERR_INVAL);
	expect_rc("rmsnorm_quant to f16",
		  k_rmsnorm_quant(NULL, f, f, 1, 4, 1e-6f, DT_BF16, DT_F16, out, f), ERR_UNSUPPORTED);
	expect_rc("rmsnorm_quant q dt 99",
		  k_rmsnorm_quant(NULL, f, f, 1, 4, 1e-6f, DT_BF16, (enum dtype)99, out, f),
		  ERR_INVAL);
	expect_rc("rmsnorm_quant i32 rows",
		  k_rmsnorm_quant(NULL, f, f, 1, 4, 1e-6f, DT_I32, DT_I8, out, f), ERR_UNSUPPORTED);
	expect_rc("rmsnorm_quant 0 rows",
		  k_rmsnorm_quant(NULL, NULL, NULL, 0, 4, 1e-6f, DT_BF16, DT_I8, NULL, NULL), 0);
	expect_rc("silu_mul_quant NULL gu",
		  k_silu_mul_quant(NULL, NULL, 1, 4, DT_F16, DT_F8_E4M3, out, f), ERR_INVAL);
	expect_rc("silu_mul_quant ffn 0",
		  k_silu_mul_quant(NULL, f, 1, 0, DT_F16, DT_F8_E4M3, out, f), ERR_INVAL);
	expect_rc("silu_mul_quant to bf16",
		  k_silu_mul_quant(NULL, f, 1, 4, DT_F16, DT_BF16, out, f), ERR_UNSUPPORTED);
	expect_rc("silu_mul_quant row past shared memory",
		  k_silu_mul_quant(NULL, f, 1, 81921, DT_BF16, DT_I8, out, f), ERR_UNSUPPORTED);
	expect_rc("silu_mul_quant f32 row past shared memory",
		  k_silu_mul_quant(NULL, f, 1, 40961, DT_F32, DT_I8, out, f), ERR_UNSUPPORTED);

	const struct k_qkv_args good = {
		.qkv = f, .inv_freq = f, .positions = t, .slots = t, .n_rows = 1, .n_heads = 2,
		.n_kv_heads = 1, .head_dim = 4, .block_size = 16, .q = f, .k_cache = out,
		.v_cache = out, .kv_dt = DT_F16, .eps = 1e-6f,
	};
	struct k_qkv_args a;
	expect_rc("qkv NULL args", k_qkv_rope_store(NULL, NULL), ERR_INVAL);
	a = good, a.head_dim = 5;
	expect_rc("qkv odd head_dim", k_qkv_rope_store(NULL, &a), ERR_INVAL);
	a = good, a.head_dim = 0;
	expect_rc("qkv head_dim 0", k_qkv_rope_store(NULL, &a), ERR_INVAL);
	a = good, a.head_dim = 2048;
	expect_rc("qkv head_dim 2048", k_qkv_rope_store(NULL, &a), ERR_UNSUPPORTED);
	a = good, a.n_kv_heads = 0;
	expect_rc("qkv 0 kv heads", k_qkv_rope_store(NULL, &a), ERR_INVAL);
	a = good, a.n_rows = -1;
	expect_rc("qkv rows -1", k_qkv_rope_store(NULL, &a), ERR_INVAL);
	a = good, a.block_size = 0;
	expect_rc("qkv block_size 0", k_qkv_rope_store(NULL, &a), ERR_INVAL);
	a = good, a.rope_style = 2;
	expect_rc("qkv rope_style 2", k_qkv_rope_store(NULL, &a), ERR_INVAL);
	a = good, a.q_norm = f;
	expect_rc("qkv q_norm without k_norm", k_qkv_rope_store(NULL, &a), ERR_INVAL);
	a = good, a.q_norm = f, a.k_norm = f, a.eps = -1.0f;
	expect_rc("qkv eps -1", k_qkv_rope_store(NULL, &a), ERR_INVAL);
	a = good, a.k_cache = NULL;
	expect_rc("qkv NULL k_cache", k_qkv_rope_store(NULL, &a), ERR_INVAL);
	a = good, a.slots = NULL;
	expect_rc("qkv NULL slots", k_qkv_rope_store(NULL, &a), ERR_INVAL);
	a = good, a.kv_dt = DT_Q8_0;
	expect_rc("qkv q8_0 pool", k_qkv_rope_store(NULL, &a), ERR_UNSUPPORTED);
	a = good, a.kv_dt = DT_F8_E4M3, a.k_scale = 1.0f, a.v_scale = 0.0f;
	expect_rc("qkv fp8 pool without a v scale", k_qkv_rope_store(NULL, &a), ERR_INVAL);
	a = good, a.n_heads = 1 << 20, a.head_dim = 4096;
	expect_rc("qkv row too wide", k_qkv_rope_store(NULL, &a), ERR_INVAL);
	a = good, a.n_rows = 0;
	expect_rc("qkv 0 rows", k_qkv_rope_store(NULL, &a), 0);

	expect_rc("silu ffn 0", k_silu_mul(NULL, f, 1, 0, out, DT_F32), ERR_INVAL);
	expect_rc("silu NULL out", k_silu_mul(NULL, f, 1, 4, NULL, DT_F32), ERR_INVAL);
	expect_rc("silu NULL in", k_silu_mul(NULL, NULL, 1, 4, out, DT_F32), ERR_INVAL);
	expect_rc("silu rows -1", k_silu_mul(NULL, f, -1, 4, out, DT_F32), ERR_INVAL);
	expect_rc("silu i8 out", k_silu_mul(NULL, f, 1, 4, out, DT_I8), ERR_UNSUPPORTED);

	expect_rc("cast NULL in", k_cast_f32(NULL, NULL, 4, out, DT_F16), ERR_INVAL);
	expect_rc("cast NULL out", k_cast_f32(NULL, f, 4, NULL, DT_F16), ERR_INVAL);
	expect_rc("cast q8_0", k_cast_f32(NULL, f, 4, out, DT_Q8_0), ERR_UNSUPPORTED);
	expect_rc("cast n 0", k_cast_f32(NULL, f, 0, out, DT_F16), 0);
	printf("ok argument errors\n");
}

/* ---- embed ---------------------------------------------------------------- */

static void test_embed(struct kc_rng *rng)
{
	const int vocab = 1000, hidden = 1001, rows = 37;
	float *table = xmalloc((size_t)vocab * hidden * sizeof(float));
	int32_t tok[37];
	for (int r = 0; r < rows; r++)
		tok[r] = r == 0 ? 0 : r == 1 ? vocab - 1 : (int32_t)kc_below(rng, vocab);
	float *ref = xmalloc((size_t)rows * hidden * sizeof(float));
	for (int d = 0; d < 3; d++) {
		kc_fill(rng, table, (size_t)vocab * hidden, -2.0f, 2.0f);
		kc_round(table, (size_t)vocab * hidden, dts[d]);
		void *packed = kc_pack(table, (size_t)vocab * hidden, dts[d]);
		void *d_table = kc_upload(packed, (size_t)vocab * hidden * esize(dts[d]));
		int32_t *d_tok = kc_upload(tok, sizeof tok);
		float *d_x = kc_dev_alloc((size_t)rows * hidden * sizeof(float));
		kc_ok(k_embed(NULL, d_table, dts[d], hidden, d_tok, rows, d_x), "k_embed");
		kc_sync("k_embed");
		for (int r = 0; r < rows; r++)
			memcpy(ref + (size_t)r * hidden, table + (size_t)tok[r] * hidden,
			       hidden * sizeof(float));
		float *got = fetch(d_x, (size_t)rows * hidden, DT_F32);
		char what[64];
		snprintf(what, sizeof what, "embed %s", dtype_name(dts[d]));
		kc_compare(what, got, ref, (size_t)rows * hidden, 0.0f, 0.0f); /* exact */
		free(got);
		free(packed);
		kc_dev_free(d_table);
		kc_dev_free(d_tok);
		kc_dev_free(d_x);
	}
	free(table);
	free(ref);
}

/* ---- RMSNorm -------------------------------------------------------------- */

/* The GPU sums squares in F32 (per-thread runs, then a tree), the CPU in
 * double: the relative error of inv_rms is ~1e-6 at hidden 5120, so F32
 * outputs get rtol 1e-5 and 16-bit outputs one unit in the last place more.
 * A wrong element, weight, row or a missing add is off by O(1). */
static const float norm_atol = 1e-6f, norm_rtol = 1e-5f;

static void run_add_rmsnorm(struct kc_rng *rng, int hidden, int rows, int use_add, enum dtype dt)
{
	const float eps = 1e-5f;
	const size_t n = (size_t)rows * hidden;
	float *x = xmalloc(n * sizeof(float)), *add = xmalloc(n * sizeof(float));
	float *w = xmalloc(hidden * sizeof(float)), *ref = xmalloc(n * sizeof(float));
	kc_fill(rng, x, n, -3.0f, 3.0f);
	kc_fill(rng, add, n, -1.0f, 1.0f);
	kc_fill(rng, w, hidden, 0.5f, 1.5f);
	if (rows > 3) { /* an all-zero row: only eps keeps it finite (output 0) */
		memset(x + 3 * (size_t)hidden, 0, hidden * sizeof(float));
		memset(add + 3 * (size_t)hidden, 0, hidden * sizeof(float));
	}
	float *d_x = kc_upload(x, n * sizeof(float));
	float *d_add = kc_upload(add, n * sizeof(float));
	float *d_w = kc_upload(w, hidden * sizeof(float));
	void *d_out = kc_dev_alloc(n * esize(dt));
	kc_ok(k_add_rmsnorm(NULL, d_x, use_add ? d_add : NULL, d_w, rows, hidden, eps, d_out, dt),
	      "k_add_rmsnorm");
	kc_sync("k_add_rmsnorm");
	for (size_t r = 0; r < (size_t)rows; r++) {
		if (use_add)
			kops_add_ref(x + r * hidden, add + r * hidden, hidden);
		kops_rmsnorm_ref(ref + r * hidden, x + r * hidden, w, hidden, eps);
	}
	kc_round(ref, n, dt);
	char what[96];
	float *gx = fetch(d_x, n, DT_F32);
	snprintf(what, sizeof what, "add_rmsnorm x h%d r%d add%d", hidden, rows, use_add);
	kc_compare(what, gx, x, n, 0.0f, 0.0f); /* x + add is one F32 add: exact */
	float *got = fetch(d_out, n, dt);
	snprintf(what, sizeof what, "add_rmsnorm out h%d r%d add%d %s", hidden, rows, use_add,
		 dtype_name(dt));
	kc_compare(what, got, ref, n, norm_atol, norm_rtol + ulp_rel(dt));
	free(gx);
	free(got);
	free(x);
	free(add);
	free(w);
	free(ref);
	kc_dev_free(d_x);
	kc_dev_free(d_add);
	kc_dev_free(d_w);
	kc_dev_free(d_out);
}

/* Odd hiddens give rows of both alignments: scalar rows, and float4 rows
 * with a scalar tail. */
static void test_add_rmsnorm(struct kc_rng *rng)
{
	static const int hiddens[] = {64, 67, 1000, 1001, 4096, 5120};
	static const int rowss[] = {1, 7, 300};
	for (size_t hi = 0; hi < sizeof hiddens / sizeof *hiddens; hi++)
		for (int ri = 0; ri < 3; ri++)
			for (int use_add = 0; use_add < 2; use_add++)
				for (int d = 0; d < 3; d++)
					run_add_rmsnorm(rng, hiddens[hi], rowss[ri], use_add, dts[d]);
}

static void test_rmsnorm_rows(struct kc_rng *rng)
{
	static const int hiddens[] = {64, 1001, 4096, 5120};
	const int n_x = 300, n_out = 41;
	const float eps = 1e-6f;
	for (size_t hi = 0; hi < sizeof hiddens / sizeof *hiddens; hi++)
		for (int d = 0; d < 3; d++) {
			const int hidden = hiddens[hi];
			const enum dtype dt = dts[d];
			float *x = xmalloc((size_t)n_x * hidden * sizeof(float));
			float *w = xmalloc(hidden * sizeof(float));
			float *ref = xmalloc((size_t)n_out * hidden * sizeof(float));
			int32_t rows[41];
			kc_fill(rng, x, (size_t)n_x * hidden, -2.0f, 2.0f);
			kc_fill(rng, w, hidden, 0.5f, 1.5f);
			for (int i = 0; i < n_out; i++) /* scattered, last row, repeats */
				rows[i] = i == 0   ? n_x - 1
					  : i == 1 ? 0
					  : i == 2 ? rows[0]
						   : (int32_t)kc_below(rng, n_x);
			float *d_x = kc_upload(x, (size_t)n_x * hidden * sizeof(float));
			float *d_w = kc_upload(w, hidden * sizeof(float));
			int32_t *d_rows = kc_upload(rows, sizeof rows);
			void *d_out = kc_dev_alloc((size_t)n_out * hidden * esize(dt));
			kc_ok(k_rmsnorm_rows(NULL, d_x, d_rows, n_out, d_w, hidden, eps, d_out, dt),
			      "k_rmsnorm_rows");
			kc_sync("k_rmsnorm_rows");
			for (int i = 0; i < n_out; i++)
				kops_rmsnorm_ref(ref + (size_t)i * hidden, x + (size_t)rows[i] * hidden,
						 w, hidden, eps);
			kc_round(ref, (size_t)n_out * hidden, dt);
			float *got = fetch(d_out, (size_t)n_out * hidden, dt);
			float *gx = fetch(d_x, (size_t)n_x * hidden, DT_F32);
			char what[96];
			snprintf(what, sizeof what, "rmsnorm_rows h%d %s", hidden, dtype_name(dt));
			kc_compare(what, got, ref, (size_t)n_out * hidden, norm_atol,
				   norm_rtol + ulp_rel(dt));
			snprintf(what, sizeof what, "rmsnorm_rows x untouched h%d", hidden);
			kc_compare(what, gx, x, (size_t)n_x * hidden, 0.0f, 0.0f);
			free(got);
			free(gx);
			free(x);
			free(w);
			free(ref);
			kc_dev_free(d_x);
			kc_dev_free(d_w);
			kc_dev_free(d_rows);
			kc_dev_free(d_out);
		}
}

/* ---- Q/K/V: bias, q/k norm, RoPE, paged KV store --------------------------- */

/* Tolerance of q and the pools (values up to ~3 after bias and norm): the
 * GPU's cos/sin come from an F32 angle reduced in double, within ~2.1e-7 of
 * the CPU's (float)cos(double); a rotated value |a c - b s| then differs by
 * <= (|a| + |b|) * 4.5e-7 <= ~3e-6 with the F32 products' rounding; the
 * norm's F32 sum of squares adds ~1e-6 relative. atol 8e-6, rtol 1e-5 (plus
 * one 16-bit ulp for the pools). An F32 angle product is off by 2.4e-4 rad at
 * position 4095 and 4e-3 at 100000; a swapped pair, a wrong head, slot or
 * block offset is off by O(1). */
static const float qkv_atol = 8e-6f, qkv_rtol = 1e-5f;
static const uint8_t sentinel_byte = 0x5A; /* F32 1.5e16, F16 203.25, BF16 1.5e16 */

struct qkv_case {
	int head_dim, n_heads, n_kv_heads, style, bias, norm, block_size, n_rows;
	enum dtype kv_dt;
	float k_scale, v_scale; /* FP8 pools only */
	int per_head;		/* FP8: KV head h's scales are k_scale, v_scale * (h + 1) / 2 */
};

/* The FP8 scale of KV head h (k: which == 0) of a case. */
static float head_scale(const struct qkv_case *c, int which, int h)
{
	const float s = which ? c->v_scale : c->k_scale;
	return c->per_head ? s * (float)(h + 1) / 2.0f : s;
}

static void run_qkv(struct kc_rng *rng, const struct qkv_case *c)
{
	static const int32_t special_pos[] = {0, 15, 16, 4095, 100000};
	const int hd = c->head_dim, half = hd / 2, rows = c->n_rows;
	const int q_dim = c->n_heads * hd, kv_dim = c->n_kv_heads * hd;
	const int width = q_dim + 2 * kv_dim;
	const int bs = c->block_size;
	const int n_blocks = 2 * ((rows + bs - 1) / bs) + 1;
	const size_t pool_n = (size_t)n_blocks * c->n_kv_heads * bs * hd;
	const enum dtype kt = c->kv_dt;

	float *qkv = xmalloc((size_t)rows * width * sizeof(float));
	float *bias = xmalloc(width * sizeof(float));
	float *qn = xmalloc(hd * sizeof(float)), *kn = xmalloc(hd * sizeof(float));
	float *inv_freq = xmalloc(half * sizeof(float));
	int32_t *pos = xmalloc(rows * sizeof(int32_t)), *slots = xmalloc(rows * sizeof(int32_t));
	kc_fill(rng, qkv, (size_t)rows * width, -2.0f, 2.0f);
	kc_fill(rng, bias, width, -0.5f, 0.5f);
	kc_fill(rng, qn, hd, 0.5f, 1.5f);
	kc_fill(rng, kn, hd, 0.5f, 1.5f);
	for (int i = 0; i < half; i++)
		inv_freq[i] = (float)pow(10000.0, -2.0 * i / hd);
	for (int r = 0; r < rows; r++)
		pos[r] = r < 5 ? special_pos[r] : (int32_t)kc_below(rng, 131072);
	/* Distinct slots drawn from a shuffled pool of twice the rows (scattered
	 * over blocks); every fifth row from the fourth is padding (slot -1). */
	const int n_slots = n_blocks * bs;
	int32_t *perm = xmalloc(n_slots * sizeof(int32_t));
	for (int i = 0; i < n_slots; i++)
		perm[i] = i;
	for (int i = n_slots - 1; i > 0; i--) {
		int j = (int)kc_below(rng, (uint32_t)i + 1);
		int32_t t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	for (int r = 0; r < rows; r++)
		slots[r] = r % 5 == 3 ? -1 : perm[r];

	/* Reference, in job_qkv_post's order. */
	float *q_ref = xmalloc((size_t)rows * q_dim * sizeof(float));
	float *k_pool = xmalloc(pool_n * sizeof(float)), *v_pool = xmalloc(pool_n * sizeof(float));
	uint8_t *sent = xmalloc(pool_n * esize(kt));
	memset(sent, sentinel_byte, pool_n * esize(kt));
	kc_unpack(sent, pool_n, kt, k_pool);
	kc_unpack(sent, pool_n, kt, v_pool);
	float *row = xmalloc(width * sizeof(float));
	float *cos_t = xmalloc(half * sizeof(float)), *sin_t = xmalloc(half * sizeof(float));
	for (int r = 0; r < rows; r++) {
		memcpy(row, qkv + (size_t)r * width, width * sizeof(float));
		float *q = row, *k = row + q_dim, *v = row + q_dim + kv_dim;
		if (c->bias)
			kops_add_ref(row, bias, width);
		if (c->norm) {
			for (int h = 0; h < c->n_heads; h++)
				kops_rmsnorm_ref(q + h * hd, q + h * hd, qn, hd, 1e-6f);
			for (int h = 0; h < c->n_kv_heads; h++)
				kops_rmsnorm_ref(k + h * hd, k + h * hd, kn, hd, 1e-6f);
		}
		kops_rope_angles(pos[r], inv_freq, half, cos_t, sin_t);
		kops_rope_ref(q, c->n_heads, hd, cos_t, sin_t, (enum kops_rope_style)c->style);
		kops_rope_ref(k, c->n_kv_heads, hd, cos_t, sin_t, (enum kops_rope_style)c->style);
		memcpy(q_ref + (size_t)r * q_dim, q, q_dim * sizeof(float));
		if (slots[r] < 0)
			continue;
		if (kt == DT_F8_E4M3) { /* the pool holds value / scale in FP8 */
			for (int i = 0; i < kv_dim; i++) {
				k[i] /= head_scale(c, 0, i / hd);
				v[i] /= head_scale(c, 1, i / hd);
			}
		}
		kc_round(k, kv_dim, kt);
		kc_round(v, kv_dim, kt);
		for (int h = 0; h < c->n_kv_heads; h++) {
			long off = kops_kv_offset(slots[r] / bs, slots[r] % bs, h, c->n_kv_heads, bs, hd);
			memcpy(k_pool + off, k + h * hd, hd * sizeof(float));
			memcpy(v_pool + off, v + h * hd, hd * sizeof(float));
		}
	}

	float *d_qkv = kc_upload(qkv, (size_t)rows * width * sizeof(float));
	float *d_bias = kc_upload(bias, width * sizeof(float));
	float *d_qn = kc_upload(qn, hd * sizeof(float)), *d_kn = kc_upload(kn, hd * sizeof(float));
	float *d_inv = kc_upload(inv_freq, half * sizeof(float));
	int32_t *d_pos = kc_upload(pos, rows * sizeof(int32_t));
	int32_t *d_slots = kc_upload(slots, rows * sizeof(int32_t));
	float *d_q = kc_dev_alloc((size_t)rows * q_dim * sizeof(float));
	void *d_k = kc_upload(sent, pool_n * esize(kt)), *d_v = kc_upload(sent, pool_n * esize(kt));
	float hk[64], hv[64];
	for (int h = 0; h < c->n_kv_heads && h < 64; h++) {
		hk[h] = head_scale(c, 0, h);
		hv[h] = head_scale(c, 1, h);
	}
	float *d_hk = kc_upload(hk, sizeof hk), *d_hv = kc_upload(hv, sizeof hv);
	struct k_qkv_args a = {
		.qkv = d_qkv,
		.bias = c->bias ? d_bias : NULL,
		.q_norm = c->norm ? d_qn : NULL,
		.k_norm = c->norm ? d_kn : NULL,
		.eps = 1e-6f,
		.inv_freq = d_inv,
		.rope_style = c->style,
		.positions = d_pos,
		.slots = d_slots,
		.n_rows = rows,
		.n_heads = c->n_heads,
		.n_kv_heads = c->n_kv_heads,
		.head_dim = hd,
		.block_size = bs,
		.q = d_q,
		.k_cache = d_k,
		.v_cache = d_v,
		.kv_dt = kt,
		.k_scale = c->k_scale,
		.v_scale = c->v_scale,
		.k_head_scale = c->per_head ? d_hk : NULL,
		.v_head_scale = c->per_head ? d_hv : NULL,
	};
	kc_ok(k_qkv_rope_store(NULL, &a), "k_qkv_rope_store");
	kc_sync("k_qkv_rope_store");

	char tag[96], what[128];
	snprintf(tag, sizeof tag, "hd%d %d/%d %s%s%s %s%s bs%d r%d", hd, c->n_heads,
		 c->n_kv_heads, c->style ? "norm" : "neox", c->bias ? " bias" : "",
		 c->norm ? " qknorm" : "", dtype_name(kt), c->per_head ? " per-head" : "", bs, rows);
	float *got = fetch(d_q, (size_t)rows * q_dim, DT_F32);
	snprintf(what, sizeof what, "qkv q %s", tag);
	kc_compare(what, got, q_ref, (size_t)rows * q_dim, qkv_atol, qkv_rtol);
	free(got);
	/* one unit in the last place either way; below E4M3's smallest normal
	 * (2^-6) that unit is the subnormal step 2^-9, more than 1/8 of the value */
	const float pool_atol = qkv_atol + (kt == DT_F8_E4M3 ? 1.0f / 512 : 0.0f);
	got = fetch(d_k, pool_n, kt);
	snprintf(what, sizeof what, "qkv k pool %s", tag);
	kc_compare(what, got, k_pool, pool_n, pool_atol, qkv_rtol + ulp_rel(kt));
	free(got);
	got = fetch(d_v, pool_n, kt);
	snprintf(what, sizeof what, "qkv v pool %s", tag);
	kc_compare(what, got, v_pool, pool_n, pool_atol, qkv_rtol + ulp_rel(kt));
	free(got);

	kc_dev_free(d_qkv);
	kc_dev_free(d_bias);
	kc_dev_free(d_qn);
	kc_dev_free(d_kn);
	kc_dev_free(d_inv);
	kc_dev_free(d_pos);
	kc_dev_free(d_slots);
	kc_dev_free(d_q);
	kc_dev_free(d_k);
	kc_dev_free(d_v);
	kc_dev_free(d_hk);
	kc_dev_free(d_hv);
	free(qkv);
	free(bias);
	free(qn);
	free(kn);
	free(inv_freq);
	free(pos);
	free(slots);
	free(perm);
	free(q_ref);
	free(k_pool);
	free(v_pool);
	free(sent);
	free(row);
	free(cos_t);
	free(sin_t);
}

static void test_qkv(struct kc_rng *rng)
{
	static const int hds[] = {64, 96, 128};
	static const int heads[][2] = {{32, 8}, {8, 8}, {12, 2}};
	static const int bss[] = {16, 32};
	/* Every combination on 21 rows (the special positions, padding rows)... */
	for (int hi = 0; hi < 3; hi++)
		for (int g = 0; g < 3; g++)
			for (int style = 0; style < 2; style++)
				for (int flags = 0; flags < 4; flags++)
					for (int d = 0; d < 3; d++)
						for (int b = 0; b < 2; b++) {
							struct qkv_case c = {
								hds[hi], heads[g][0], heads[g][1],
								style, flags & 1, flags >> 1,
								bss[b], 21, dts[d]};
							run_qkv(rng, &c);
						}
	/* ...and a few prefill-sized ones (300 rows, many blocks), and head_dim 256. */
	static const struct qkv_case big[] = {
		{128, 32, 8, 0, 1, 1, 16, 300, DT_BF16},
		{128, 8, 8, 1, 0, 1, 32, 300, DT_F16},
		{64, 12, 2, 0, 1, 0, 16, 300, DT_F32},
		{96, 12, 2, 1, 1, 1, 32, 300, DT_BF16},
		{256, 8, 2, 0, 1, 1, 16, 37, DT_F16},
		/* FP8 KV (issue 10): scales below and above 1, values past 448 saturate */
		{128, 32, 8, 0, 1, 1, 16, 40, DT_F8_E4M3, 0.5f, 2.0f},
		{64, 12, 2, 1, 0, 0, 32, 21, DT_F8_E4M3, 0.004f, 1.0f},
		/* more than QKV_ROW_CTAS CTAs of 8 heads: one CTA per row (18 heads:
		 * not a multiple of the 8 warps) */
		{64, 14, 2, 0, 1, 1, 16, 1400, DT_F16},
		{128, 32, 8, 0, 1, 1, 16, 700, DT_BF16},
		{64, 12, 2, 1, 1, 0, 32, 2100, DT_F16},
		{128, 32, 8, 1, 0, 1, 16, 700, DT_F8_E4M3, 0.5f, 2.0f},
		/* FP8 per KV head: scales 0.25..2 and 0.5..4 over 8 heads */
		{128, 32, 8, 0, 1, 1, 16, 40, DT_F8_E4M3, 0.5f, 1.0f, 1},
		{64, 12, 2, 1, 1, 0, 32, 700, DT_F8_E4M3, 0.01f, 0.02f, 1},
	};
	for (size_t i = 0; i < sizeof big / sizeof *big; i++)
		run_qkv(rng, &big[i]);
}

/* ---- SiLU·mul --------------------------------------------------------------- */

/* expf on the GPU is within 2 ulp (glibc's within 1), then one add, one
 * divide and one multiply, each rounded: <= ~6 ulp of F32 relative. */
static void test_silu_mul(struct kc_rng *rng)
{
	static const int ffns[] = {64, 1001, 4098, 11008};
	static const int rowss[] = {1, 7, 300};
	static const float extremes[] = {-100.0f, 100.0f, -88.0f, 88.0f, 0.0f, -0.0f, 20.0f, -20.0f};
	for (int fi = 0; fi < 4; fi++)
		for (int ri = 0; ri < 3; ri++)
			for (int d = 0; d < 3; d++) {
				const int ffn = ffns[fi], rows = rowss[ri];
				const enum dtype dt = dts[d];
				const size_t n = (size_t)rows * ffn;
				float *gu = xmalloc(2 * n * sizeof(float));
				float *ref = xmalloc(n * sizeof(float));
				for (int r = 0; r < rows; r++) {
					kc_fill(rng, gu + (size_t)r * 2 * ffn, ffn, -10.0f, 10.0f);
					kc_fill(rng, gu + (size_t)r * 2 * ffn + ffn, ffn, -2.0f, 2.0f);
				}
				for (int i = 0; i < 8; i++)
					gu[i] = extremes[i];
				for (int r = 0; r < rows; r++)
					kops_silu_mul_ref(ref + (size_t)r * ffn, gu + (size_t)r * 2 * ffn,
							  gu + (size_t)r * 2 * ffn + ffn, ffn);
				kc_round(ref, n, dt);
				float *d_gu = kc_upload(gu, 2 * n * sizeof(float));
				void *d_out = kc_dev_alloc(n * esize(dt));
				kc_ok(k_silu_mul(NULL, d_gu, rows, ffn, d_out, dt), "k_silu_mul");
				kc_sync("k_silu_mul");
				float *got = fetch(d_out, n, dt);
				char what[64];
				snprintf(what, sizeof what, "silu_mul ffn%d r%d %s", ffn, rows,
					 dtype_name(dt));
				kc_compare(what, got, ref, n, 1e-12f, 2e-6f + ulp_rel(dt));
				free(got);
				free(gu);
				free(ref);
				kc_dev_free(d_gu);
				kc_dev_free(d_out);
			}
}

/* ---- norm and SwiGLU straight to per-token codes ----------------------------- */

/* The unfused path's codes and scales: rows (out_dt, written by the 16-bit
 * kernel into an aligned buffer) then k_quant_rows; the fused kernel's into
 * guarded buffers; both compared byte for byte, and the guards checked. */
struct qpair {
	uint8_t *q, *q_ref;
	float *s, *s_ref;
};

static void quant_ref(const void *d_rows, enum dtype out_dt, int rows, int n, enum dtype q_dt,
		      struct qpair *p)
{
	const size_t nq = (size_t)rows * n;
	void *d_q = kc_dev_alloc(nq);
	float *d_s = kc_dev_alloc((size_t)rows * sizeof(float));
	kc_ok(k_quant_rows(NULL, d_rows, out_dt, rows, n, q_dt, d_q, d_s), "k_quant_rows");
	kc_sync("k_quant_rows");
	p->q_ref = xmalloc(nq);
	p->s_ref = xmalloc((size_t)rows * sizeof(float));
	kc_download(p->q_ref, d_q, nq);
	kc_download(p->s_ref, d_s, (size_t)rows * sizeof(float));
	kc_dev_free(d_q);
	kc_dev_free(d_s);
}

#define QGUARD 64

static void quant_check(const char *what, const uint8_t *d_q, const float *d_s, int rows, int n,
			struct qpair *p)
{
	const size_t nq = (size_t)rows * n;
	uint8_t *q = xmalloc(nq + 2 * QGUARD);
	float *s = xmalloc(((size_t)rows + 2) * sizeof(float));
	kc_download(q, d_q - QGUARD, nq + 2 * QGUARD);
	kc_download(s, d_s - 1, ((size_t)rows + 2) * sizeof(float));
	for (size_t i = 0; i < QGUARD; i++)
		if (q[i] != 0xA5 || q[QGUARD + nq + i] != 0xA5)
			kc_fail("%s: a code written outside the rows (guard byte %zu)", what, i);
	if (memcmp(&s[0], &(float){ -7.0f }, 4) || memcmp(&s[rows + 1], &(float){ -7.0f }, 4))
		kc_fail("%s: a scale written outside the rows", what);
	size_t bad = 0;
	while (bad < nq && q[QGUARD + bad] == p->q_ref[bad])
		bad++;
	if (bad < nq)
		kc_fail("%s: code %zu (row %zu) is 0x%02x, k_quant_rows gives 0x%02x", what, bad,
			bad / (size_t)n, q[QGUARD + bad], p->q_ref[bad]);
	if (memcmp(s + 1, p->s_ref, (size_t)rows * sizeof(float)))
		kc_fail("%s: the row scales differ from k_quant_rows'", what);
	free(q);
	free(s);
	free(p->q_ref);
	free(p->s_ref);
}

/* Device buffers for the fused codes and scales, with guards on both sides;
 * the codes start off bytes past a 4-byte boundary (off 1: the kernels'
 * byte stores instead of 4-code words). */
static void guarded(int rows, int n, int off, uint8_t **d_q, float **d_s, void **base_q,
		    void **base_s)
{
	const size_t nq = (size_t)rows * n, nb = nq + 2 * QGUARD + (size_t)off;
	uint8_t *g = xmalloc(nb);
	memset(g, 0xA5, nb);
	float *gs = xmalloc(((size_t)rows + 2) * sizeof(float));
	for (int i = 0; i < rows + 2; i++)
		gs[i] = -7.0f;
	*base_q = kc_upload(g, nb);
	*base_s = kc_upload(gs, ((size_t)rows + 2) * sizeof(float));
	*d_q = (uint8_t *)*base_q + QGUARD + off;
	*d_s = (float *)*base_s + 1;
	free(g);
	free(gs);
}

static const enum dtype qdts[2] = {DT_F8_E4M3, DT_I8};

/* One fused case: the reference codes of d_rows (out_dt rows of n values)
 * and guarded buffers for the fused kernel's codes (off: see guarded). */
struct fused_run {
	struct qpair p;
	uint8_t *d_q;
	float *d_s;
	void *bq, *bs;
};

static void fused_setup(const void *d_rows, enum dtype dt, int rows, int n, enum dtype q_dt,
			int off, struct fused_run *f)
{
	quant_ref(d_rows, dt, rows, n, q_dt, &f->p);
	guarded(rows, n, off, &f->d_q, &f->d_s, &f->bq, &f->bs);
}

/* Checks the fused codes (quant_check) and frees the buffers. */
static void fused_finish(const char *what, int rows, int n, struct fused_run *f)
{
	quant_check(what, f->d_q, f->d_s, rows, n, &f->p);
	kc_dev_free(f->bq);
	kc_dev_free(f->bs);
}

/* Rows: random, an all-zero row (scale 0), a NaN row (every value NaN:
 * amax 0), outliers; with F16 rows a weight big enough to overflow to inf. */
static void run_rmsnorm_quant(struct kc_rng *rng, int hidden, int rows, enum dtype dt,
			      enum dtype q_dt, int off)
{
	const float eps = 1e-5f;
	const size_t n = (size_t)rows * hidden;
	float *x = xmalloc(n * sizeof(float)), *w = xmalloc(hidden * sizeof(float));
	kc_fill(rng, x, n, -3.0f, 3.0f);
	kc_fill(rng, w, hidden, 0.5f, 1.5f);
	if (rows > 3) {
		memset(x + 2 * (size_t)hidden, 0, hidden * sizeof(float));
		x[3 * (size_t)hidden + 1] = NAN;
	}
	for (int r = 4; r < rows; r += 3)
		x[(size_t)r * hidden + kc_below(rng, (uint32_t)hidden)] = 40.0f;
	if (dt == DT_F16)
		w[hidden / 2] = 3e5f;
	float *d_x = kc_upload(x, n * sizeof(float)), *d_w = kc_upload(w, hidden * sizeof(float));
	void *d_rows = kc_dev_alloc(n * esize(dt));
	kc_ok(k_add_rmsnorm(NULL, d_x, NULL, d_w, rows, hidden, eps, d_rows, dt), "k_add_rmsnorm");
	struct fused_run f;
	fused_setup(d_rows, dt, rows, hidden, q_dt, off, &f);
	kc_ok(k_rmsnorm_quant(NULL, d_x, d_w, rows, hidden, eps, dt, q_dt, f.d_q, f.d_s),
	      "k_rmsnorm_quant");
	kc_sync("k_rmsnorm_quant");
	char what[96];
	snprintf(what, sizeof what, "rmsnorm_quant h%d r%d %s -> %s +%d", hidden, rows,
		 dtype_name(dt), dtype_name(q_dt), off);
	fused_finish(what, rows, hidden, &f);
	float *gx = fetch(d_x, n, DT_F32); /* x is only read */
	if (memcmp(gx, x, n * sizeof(float)))
		kc_fail("%s: x changed", what);
	free(gx);
	free(x);
	free(w);
	kc_dev_free(d_x);
	kc_dev_free(d_w);
	kc_dev_free(d_rows);
}

static void run_silu_quant(struct kc_rng *rng, int ffn, int rows, enum dtype dt, enum dtype q_dt,
			   int off)
{
	static const float extremes[] = {-100.0f, 100.0f, -88.0f, 88.0f, 0.0f, -0.0f, 20.0f, -20.0f};
	const size_t n = (size_t)rows * ffn;
	float *gu = xmalloc(2 * n * sizeof(float));
	for (int r = 0; r < rows; r++) {
		kc_fill(rng, gu + (size_t)r * 2 * ffn, ffn, -10.0f, 10.0f);
		kc_fill(rng, gu + (size_t)r * 2 * ffn + ffn, ffn, -2.0f, 2.0f);
	}
	for (int i = 0; i < 8 && i < ffn; i++)
		gu[i] = extremes[i];
	if (rows > 2) /* an all-zero row: u = 0 */
		memset(gu + (size_t)2 * 2 * ffn + ffn, 0, ffn * sizeof(float));
	if (rows > 3) /* a NaN in the row, and an overflow of F16 */
		gu[(size_t)3 * 2 * ffn + 1] = NAN;
	if (rows > 4)
		gu[(size_t)4 * 2 * ffn + ffn + 2] = 1e4f, gu[(size_t)4 * 2 * ffn + 2] = 50.0f;
	float *d_gu = kc_upload(gu, 2 * n * sizeof(float));
	void *d_rows = kc_dev_alloc(n * esize(dt));
	kc_ok(k_silu_mul(NULL, d_gu, rows, ffn, d_rows, dt), "k_silu_mul");
	struct fused_run f;
	fused_setup(d_rows, dt, rows, ffn, q_dt, off, &f);
	kc_ok(k_silu_mul_quant(NULL, d_gu, rows, ffn, dt, q_dt, f.d_q, f.d_s), "k_silu_mul_quant");
	kc_sync("k_silu_mul_quant");
	char what[96];
	snprintf(what, sizeof what, "silu_mul_quant ffn%d r%d %s -> %s +%d", ffn, rows,
		 dtype_name(dt), dtype_name(q_dt), off);
	fused_finish(what, rows, ffn, &f);
	free(gu);
	kc_dev_free(d_gu);
	kc_dev_free(d_rows);
}

/* Odd widths give rows of both alignments (float4 steps with tails, and
 * scalar rows); ffn 28672 in 16 bits is past 48 KB of shared memory. */
static void test_quant_fused(struct kc_rng *rng)
{
	static const int hiddens[] = {64, 67, 1001, 4096};
	static const int ffns[] = {64, 1001, 4098, 28672};
	static const int rowss[] = {1, 9};
	for (int q = 0; q < 2; q++)
		for (int d = 0; d < 3; d++)
			for (int ri = 0; ri < 2; ri++)
				for (int i = 0; i < 4; i++) {
					/* codes at an odd address in a quarter of the cases */
					const int off = (i + ri + d) % 4 == 1;
					run_rmsnorm_quant(rng, hiddens[i], rowss[ri], dts[d], qdts[q], off);
					run_silu_quant(rng, ffns[i], rowss[ri], dts[d], qdts[q], off);
				}
	printf("ok rmsnorm_quant and silu_mul_quant: 48 cases each, codes and scales as k_quant_rows'\n");
}

/* ---- cast ----------------------------------------------------------------------- */

/* kc_compare treats NaN and inf as mismatches; compare a finite view instead:
 * NaN -> 12345, +-inf -> +-FLT_MAX, so a NaN or an overflow must match. */
static void finite_view(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (isnan(x[i]))
			x[i] = 12345.0f;
		else if (isinf(x[i]))
			x[i] = x[i] > 0 ? FLT_MAX : -FLT_MAX;
	}
}

static void test_cast(struct kc_rng *rng)
{
	/* 17 M: more blocks than the launcher's 65535 cap (the grid-stride loop). */
	static const size_t ns[] = {1, 1001, 4096, (size_t)65535 * 256 + 1003};
	static const float specials[] = {65504.0f, 65520.0f, -70000.0f, 1e-8f, -3e-5f,
					 INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 3.0e38f};
	for (int ni = 0; ni < 4; ni++)
		for (int d = 0; d < 3; d++) {
			const size_t n = ns[ni];
			const enum dtype dt = dts[d];
			float *x = xmalloc(n * sizeof(float)), *ref = xmalloc(n * sizeof(float));
			kc_fill(rng, x, n, -100.0f, 100.0f);
			for (size_t i = 0; i < 11 && i < n; i++)
				x[n - 1 - i] = specials[i];
			memcpy(ref, x, n * sizeof(float));
			kc_round(ref, n, dt); /* round to nearest even, as the kernel */
			float *d_x = kc_upload(x, n * sizeof(float));
			void *d_out = kc_dev_alloc(n * esize(dt));
			kc_ok(k_cast_f32(NULL, d_x, n, d_out, dt), "k_cast_f32");
			kc_sync("k_cast_f32");
			float *got = fetch(d_out, n, dt);
			finite_view(got, n);
			finite_view(ref, n);
			char what[64];
			snprintf(what, sizeof what, "cast n%zu %s", n, dtype_name(dt));
			kc_compare(what, got, ref, n, 0.0f, 0.0f);
			free(got);
			free(x);
			free(ref);
			kc_dev_free(d_x);
			kc_dev_free(d_out);
		}
}

/* test_cuda_ops [NAME...]: run only the named groups (embed, add_rmsnorm,
 * rmsnorm_rows, qkv, silu_mul, quant_fused, cast); all of them by default. */
int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*run)(struct kc_rng *);
	} groups[] = {
		{"embed", test_embed},	 {"add_rmsnorm", test_add_rmsnorm},
		{"rmsnorm_rows", test_rmsnorm_rows}, {"qkv", test_qkv},
		{"silu_mul", test_silu_mul}, {"quant_fused", test_quant_fused},
		{"cast", test_cast},
	};
	check_args();
	kc_require_gpu("test_cuda_ops");
	for (size_t g = 0; g < sizeof groups / sizeof *groups; g++) {
		bool on = argc < 2;
		for (int i = 1; i < argc; i++)
			on = on || strcmp(argv[i], groups[g].name) == 0;
		if (!on)
			continue;
		struct kc_rng rng; /* one seed per group: a subset sees the same inputs */
		kc_seed(&rng, 9 + g);
		groups[g].run(&rng);
	}
	return kc_finish();
}
