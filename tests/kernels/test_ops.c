/* tests/kernels/test_ops.c — every fast op in kernels/cpu/ops_fast.c (and the
 * AVX-512 attention in ops_attn_avx512.c) against its reference in
 * ops_ref.c, for every ISA this CPU has, on ragged sizes (tails of every
 * vector width), with |got-ref| <= atol + rtol*|ref|; attention also for
 * bit-identical results across tilings (batch invariance).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/ops.h"

static uint64_t rng_state = 12345;
static float urand(void)
{
	rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
	return (float)((rng_state >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}

static void fill(float *x, int n, float scale)
{
	for (int i = 0; i < n; i++)
		x[i] = scale * urand();
}

/* first mismatch printed, count returned */
static int compare(const char *what, enum kops_isa isa, const float *got, const float *ref, int n,
		   float atol, float rtol)
{
	int bad = 0;
	for (int i = 0; i < n; i++) {
		if (!(fabsf(got[i] - ref[i]) <= atol + rtol * fabsf(ref[i]))) {
			if (!bad)
				fprintf(stderr, "%s [%s] n=%d: [%d] got %.8g ref %.8g\n", what,
					kops_isa_name(isa), n, i, got[i], ref[i]);
			bad++;
		}
	}
	return bad;
}

static const int sizes[] = { 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 200, 4099 };
#define N_SIZES (int)(sizeof sizes / sizeof sizes[0])

START_TEST(test_rowops)
{
	enum kops_isa best = kops_isa_detect();
	for (int isa = 0; isa <= (int)best; isa++) {
		for (int si = 0; si < N_SIZES; si++) {
			int n = sizes[si];
			float *x = malloc(n * 4), *w = malloc(n * 4), *y = malloc(n * 4);
			float *a = malloc(n * 4), *b = malloc(n * 4);
			fill(x, n, 3.0f);
			fill(w, n, 1.0f);
			fill(y, n, 2.0f);
			kops_rmsnorm_ref(a, x, w, n, 1e-5f);
			kops_rmsnorm(isa, b, x, w, n, 1e-5f);
			ck_assert_int_eq(compare("rmsnorm", isa, b, a, n, 1e-6f, 1e-5f), 0);
			memcpy(b, x, n * 4); /* in place */
			kops_rmsnorm(isa, b, b, w, n, 1e-5f);
			ck_assert_int_eq(compare("rmsnorm-inplace", isa, b, a, n, 1e-6f, 1e-5f), 0);

			memcpy(a, x, n * 4);
			memcpy(b, x, n * 4);
			kops_add_ref(a, y, n);
			kops_add(isa, b, y, n);
			ck_assert_int_eq(compare("add", isa, b, a, n, 0, 0), 0);

			kops_silu_mul_ref(a, x, y, n);
			kops_silu_mul(isa, b, x, y, n);
			ck_assert_int_eq(compare("silu_mul", isa, b, a, n, 1e-6f, 1e-5f), 0);
			fill(w, n, 120.0f); /* gates far into both tails */
			kops_silu_mul_ref(a, w, y, n);
			kops_silu_mul(isa, b, w, y, n);
			ck_assert_int_eq(compare("silu_mul-wide", isa, b, a, n, 1e-6f, 1e-5f), 0);
			free(x), free(w), free(y), free(a), free(b);
		}
	}
}
END_TEST

START_TEST(test_rope)
{
	enum kops_isa best = kops_isa_detect();
	const int dims[] = { 2, 6, 16, 64, 80, 128 };
	for (int isa = 0; isa <= (int)best; isa++) {
		for (int di = 0; di < 6; di++) {
			int hd = dims[di], half = hd / 2, nh = 3;
			float inv[64], c[64], s[64];
			for (int i = 0; i < half; i++)
				inv[i] = powf(10000.0f, -2.0f * i / hd);
			for (int style = 0; style < 2; style++) {
				for (int pos = 0; pos < 5000; pos += 1237) {
					float x[3 * 128], a[3 * 128], b[3 * 128];
					fill(x, nh * hd, 1.0f);
					kops_rope_angles(pos, inv, half, c, s);
					memcpy(a, x, (size_t)nh * hd * 4);
					memcpy(b, x, (size_t)nh * hd * 4);
					kops_rope_ref(a, nh, hd, c, s, style);
					kops_rope(isa, b, nh, hd, c, s, style);
					ck_assert_int_eq(compare("rope", isa, b, a, nh * hd, 1e-6f, 1e-5f), 0);
					/* a rotation keeps each pair's norm */
					for (int i = 0; i < nh * hd; i += 2) {
						int i0 = style == KOPS_ROPE_NORM ? i : (i / hd) * hd + (i % hd) / 2;
						int i1 = style == KOPS_ROPE_NORM ? i + 1 : i0 + half;
						float n0 = x[i0] * x[i0] + x[i1] * x[i1];
						float n1 = a[i0] * a[i0] + a[i1] * a[i1];
						ck_assert_float_eq_tol(n0, n1, 1e-5f);
					}
				}
			}
		}
	}
	/* pos 0 is the identity */
	float inv[4] = { 1, 0.1f, 0.01f, 0.001f }, c[4], s[4];
	kops_rope_angles(0, inv, 4, c, s);
	for (int i = 0; i < 4; i++) {
		ck_assert_float_eq(c[i], 1.0f);
		ck_assert_float_eq(s[i], 0.0f);
	}
}
END_TEST

/* Paged attention on a shuffled block table, F32 and F16 KV, ragged head
 * dims and context lengths that end mid-block. */
START_TEST(test_attention)
{
	enum kops_isa best = kops_isa_detect();
	const int bs = 16, n_blocks = 12, n_kv = 3;
	const int hds[] = { 8, 20, 32, 64, 96, 128 };
	const int ctxs[] = { 1, 5, 16, 17, 100, 12 * 16 };
	int32_t table[12];
	for (int i = 0; i < n_blocks; i++)
		table[i] = (i * 7 + 3) % n_blocks; /* a permutation: not in order */
	for (int hi = 0; hi < 6; hi++) {
		int hd = hds[hi];
		size_t n_vals = (size_t)n_blocks * bs * n_kv * hd;
		float *kf = malloc(n_vals * 4), *vf = malloc(n_vals * 4);
		uint16_t *kh = malloc(n_vals * 2), *vh = malloc(n_vals * 2);
		fill(kf, (int)n_vals, 2.0f);
		fill(vf, (int)n_vals, 1.0f);
		kops_store_row(DT_F16, kh, kf, (int)n_vals);
		kops_store_row(DT_F16, vh, vf, (int)n_vals);
		float q[128], ref[128], got[128], scratch[12 * 16];
		fill(q, hd, 1.0f);
		for (int kvd = 0; kvd < 2; kvd++) {
			for (int ci = 0; ci < 6; ci++) {
				for (int kvh = 0; kvh < n_kv; kvh++) {
					struct kops_attn_args a = {
						.q = q, .out = ref, .scratch = scratch,
						.k_cache = kvd ? (void *)kh : (void *)kf,
						.v_cache = kvd ? (void *)vh : (void *)vf,
						.kv_dtype = kvd ? DT_F16 : DT_F32,
						.block_table = table, .block_size = bs,
						.n_ctx = ctxs[ci], .kv_head = kvh, .n_kv_heads = n_kv,
						.head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
					};
					kops_attn_head_ref(&a);
					for (int isa = 0; isa <= (int)best; isa++) {
						a.out = got;
						kops_attn_head(isa, &a);
						ck_assert_int_eq(compare("attention", isa, got, ref, hd, 1e-6f, 1e-4f), 0);
						a.out = ref;
					}
				}
			}
		}
		/* GQA group: all query heads of kv head 1 in one pass == per head,
		 * for group sizes 1..6 (the AVX-512 path takes heads four at a time) */
		for (int NQ = 1; NQ <= 6; NQ++) {
			float qg[6 * 128], og[6 * 128], rg[6 * 128];
			float *sg =
			    malloc(kops_attn_scratch_floats(NQ, 12 * 16, hd) * sizeof(float));
			fill(qg, NQ * hd, 1.0f);
			for (int kvd = 0; kvd < 2; kvd++) {
				for (int ci = 0; ci < 6; ci++) {
					struct kops_attn_args a = {
						.q = qg, .out = rg, .scratch = sg,
						.k_cache = kvd ? (void *)kh : (void *)kf,
						.v_cache = kvd ? (void *)vh : (void *)vf,
						.kv_dtype = kvd ? DT_F16 : DT_F32,
						.block_table = table, .block_size = bs,
						.n_ctx = ctxs[ci], .kv_head = 1, .n_kv_heads = n_kv,
						.head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
					};
					kops_attn_group_ref(&a, NQ);
					for (int isa = 0; isa <= (int)best; isa++) {
						a.out = og;
						kops_attn_group(isa, &a, NQ);
						ck_assert_int_eq(compare("attn-group", isa, og, rg, NQ * hd, 1e-6f, 1e-4f), 0);
						a.out = rg;
					}
				}
			}
			free(sg);
		}
		/* ctx 1: the output is exactly V of position 0 */
		struct kops_attn_args a = { .q = q, .out = got, .scratch = scratch, .k_cache = kf,
					    .v_cache = vf, .kv_dtype = DT_F32, .block_table = table,
					    .block_size = bs, .n_ctx = 1, .kv_head = 1,
					    .n_kv_heads = n_kv, .head_dim = hd, .scale = 0.5f };
		kops_attn_head(best, &a);
		const float *v0 = vf + kops_kv_offset(table[0], 0, 1, n_kv, bs, hd);
		ck_assert_int_eq(compare("attention-ctx1", best, got, v0, hd, 0, 1e-6f), 0);
		free(kf), free(vf), free(kh), free(vh);
	}
}
END_TEST

/* kops_attn_rows runs a prefill chunk's rows in tiles that share each K/V
 * load, yet every (row, head) must come out bit for bit as with the row
 * alone (kops_attn_group), each head alone (n_q 1) and the chunk split at
 * another row (batch invariance), and close to the reference. Ragged
 * contexts (ctx 1, ends mid-block, many blocks crossed), F32 and F16 caches,
 * head dims the AVX-512 kernel takes (multiples of 16) and ones it does not
 * (20 goes to the plain path), group sizes 1..8, block sizes 16 and 32
 * (whole blocks per 16-key panel) and 8 and 24 (panels across blocks), and
 * contexts long enough for the kernel to cut tiles short. Row strides leave
 * gaps that must stay untouched; outputs start as NaN. Scratch is malloc'd
 * at exactly kops_attn_scratch_floats, so the ASan build catches an overrun.
 * Lower ISAs take one row at a time and get a smaller grid. */
struct rb_cache {
	int hd, bs, n_kv;
	int32_t *table;    /* a permutation of the blocks */
	float *kf, *vf;    /* F32 cache */
	uint16_t *kh, *vh; /* F16 cache */
	float *khf, *vhf;  /* the F16 cache's values, for the reference */
};

static void rb_cache_init(struct rb_cache *c, int hd, int bs, int max_ctx)
{
	const int n_blocks = (max_ctx + bs - 1) / bs;
	const size_t n = (size_t)n_blocks * bs * 2 * hd;
	*c = (struct rb_cache){.hd = hd, .bs = bs, .n_kv = 2};
	c->table = malloc(n_blocks * sizeof(int32_t));
	for (int i = 0; i < n_blocks; i++) /* n_blocks is never a multiple of 7 here */
		c->table[i] = (int32_t)((i * 7L + 3) % n_blocks);
	c->kf = malloc(n * 4), c->vf = malloc(n * 4), c->khf = malloc(n * 4),
	c->vhf = malloc(n * 4);
	c->kh = malloc(n * 2), c->vh = malloc(n * 2);
	fill(c->kf, (int)n, 2.0f);
	fill(c->vf, (int)n, 1.0f);
	kops_store_row(DT_F16, c->kh, c->kf, (int)n);
	kops_store_row(DT_F16, c->vh, c->vf, (int)n);
	for (size_t i = 0; i < n; i++) {
		c->khf[i] = f16_to_f32(c->kh[i]);
		c->vhf[i] = f16_to_f32(c->vh[i]);
	}
}

static void rb_cache_free(struct rb_cache *c)
{
	free(c->table), free(c->kf), free(c->vf), free(c->kh), free(c->vh), free(c->khf);
	free(c->vhf);
}

static void rb_fill_nan(float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = NAN;
}

/* out rows [r0, r0 + n) of the chunk, heads [h0, h0 + nq) */
static void rb_run(enum kops_isa isa, const struct kops_attn_args *base, const float *q, float *out,
                   long stride, int r0, int n, int h0, int nq)
{
	struct kops_attn_args a = *base;
	a.q = q + r0 * stride + (long)h0 * base->head_dim;
	a.out = out + r0 * stride + (long)h0 * base->head_dim;
	a.n_ctx = base->n_ctx + r0;
	kops_attn_rows(isa, &a, nq, n, stride, stride);
}

/* 1 when got and want hold the same bits, else prints the first difference */
static int rb_same(const char *what, const struct kops_attn_args *a, enum kops_isa isa,
                   const float *got, const float *want, size_t n, int nq)
{
	for (size_t i = 0; i < n; i++) {
		if (memcmp(&got[i], &want[i], sizeof(float))) {
			fprintf(stderr,
			        "%s [%s] hd %d n_q %d bs %d %s first ctx %d: float %zu got %.9g "
			        "want %.9g\n",
			        what, kops_isa_name(isa), a->head_dim, nq, a->block_size,
			        a->kv_dtype == DT_F16 ? "f16" : "f32", a->n_ctx, i, got[i],
			        want[i]);
			return 0;
		}
	}
	return 1;
}

/* Buffers of one chunk: rows of stride floats. */
struct rb_io {
	long stride;
	size_t n;
	float *q, *ref, *got, *alt;
};

/* The chunk of `rows` rows from position p0, nq heads, on one ISA: the tiled
 * call against the reference, then bit for bit against each row alone, each
 * head alone and the chunk split at rows / 3. */
static void rb_case(const struct rb_cache *c, int kv16, enum kops_isa isa, int nq, int p0, int rows,
                    const struct rb_io *io)
{
	const long stride = io->stride;
	const size_t n = (size_t)rows * stride;
	float *scratch = malloc(kops_attn_scratch_floats(nq, p0 + rows, c->hd) * sizeof(float));
	struct kops_attn_args a = {
	    .scratch = scratch,
	    .k_cache = kv16 ? (void *)c->khf : (void *)c->kf,
	    .v_cache = kv16 ? (void *)c->vhf : (void *)c->vf,
	    .kv_dtype = DT_F32,
	    .block_table = c->table,
	    .block_size = c->bs,
	    .n_ctx = p0 + 1,
	    .kv_head = 1,
	    .n_kv_heads = c->n_kv,
	    .head_dim = c->hd,
	    .scale = 1.0f / sqrtf((float)c->hd),
	};
	rb_fill_nan(io->ref, n);
	for (int r = 0; r < rows; r++) {
		struct kops_attn_args h = a;
		h.q = io->q + r * stride;
		h.out = io->ref + r * stride;
		h.n_ctx = p0 + 1 + r;
		kops_attn_group_ref(&h, nq);
	}
	if (kv16) {
		a.k_cache = c->kh;
		a.v_cache = c->vh;
		a.kv_dtype = DT_F16;
	}
	rb_fill_nan(io->got, n);
	rb_run(isa, &a, io->q, io->got, stride, 0, rows, 0, nq);
	int bad = 0; /* one ck_assert per case: each one writes to a pipe */
	for (int r = 0; r < rows; r++) {
		bad += compare("attn-rows", isa, io->got + r * stride, io->ref + r * stride,
		               nq * c->hd, 1e-6f, 1e-4f);
		for (long i = (long)nq * c->hd; i < stride && r + 1 < rows; i++)
			bad += !isnan(io->got[r * stride + i]);
	}
	ck_assert_int_eq(bad, 0);
	rb_fill_nan(io->alt, n); /* each row alone */
	for (int r = 0; r < rows; r++) {
		struct kops_attn_args h = a;
		h.q = io->q + r * stride;
		h.out = io->alt + r * stride;
		h.n_ctx = p0 + 1 + r;
		kops_attn_group(isa, &h, nq);
	}
	ck_assert(rb_same("rows vs one row", &a, isa, io->got, io->alt, n, nq));
	rb_fill_nan(io->alt, n); /* each head alone */
	for (int g = 0; g < nq; g++)
		rb_run(isa, &a, io->q, io->alt, stride, 0, rows, g, 1);
	ck_assert(rb_same("rows vs one head", &a, isa, io->got, io->alt, n, nq));
	rb_fill_nan(io->alt, n); /* the chunk split at rows / 3 */
	rb_run(isa, &a, io->q, io->alt, stride, 0, rows / 3, 0, nq);
	rb_run(isa, &a, io->q, io->alt, stride, rows / 3, rows - rows / 3, 0, nq);
	ck_assert(rb_same("rows vs split chunk", &a, isa, io->got, io->alt, n, nq));
	free(scratch);
}

static void rb_io_init(struct rb_io *io, int max_nq, int hd, int max_rows)
{
	io->stride = (long)max_nq * hd + 5; /* gaps between output rows */
	io->n = (size_t)max_rows * io->stride;
	io->q = malloc(io->n * 4), io->ref = malloc(io->n * 4);
	io->got = malloc(io->n * 4), io->alt = malloc(io->n * 4);
	fill(io->q, (int)io->n, 1.0f);
}

static void rb_io_free(struct rb_io *io)
{
	free(io->q), free(io->ref), free(io->got), free(io->alt);
}

START_TEST(test_attn_rows_bits)
{
	const enum kops_isa best = kops_isa_detect();
	const int hds[] = {16, 32, 48, 64, 80, 96, 128, 20};
	const int bss[] = {16, 32, 8, 24};
	/* (first position, rows) of a chunk; contexts p0 + 1 .. p0 + rows */
	const int chunks[][2] = {{0, 1}, {0, 37}, {5, 1}, {13, 21}, {40, 26}, {150, 9}};
	for (int hi = 0; hi < (int)(sizeof hds / sizeof *hds); hi++) {
		struct rb_io io;
		rb_io_init(&io, 8, hds[hi], 37);
		for (int bi = 0; bi < 4; bi++) {
			struct rb_cache c;
			rb_cache_init(&c, hds[hi], bss[bi], 192);
			for (int kv16 = 0; kv16 < 2; kv16++)
				for (int nq = 1; nq <= 8; nq++)
					for (int ci = 0; ci < 6; ci++)
						for (int isa = 0; isa <= (int)best; isa++)
							if (isa == (int)best ||
							    (bss[bi] == 16 &&
							     (nq == 1 || nq == 4 || nq == 7)))
								rb_case(&c, kv16, isa, nq,
								        chunks[ci][0],
								        chunks[ci][1], &io);
			rb_cache_free(&c);
		}
		rb_io_free(&io);
	}
}
END_TEST

/* Contexts past 2048: the AVX-512 kernel cuts tiles short to bound its
 * scores, so tiles of every size meet in one chunk. */
START_TEST(test_attn_rows_long)
{
	const enum kops_isa best = kops_isa_detect();
	const int nqs[] = {1, 4, 8};
	struct rb_io io;
	rb_io_init(&io, 8, 64, 70);
	struct rb_cache c;
	rb_cache_init(&c, 64, 16, 2100);
	for (int kv16 = 0; kv16 < 2; kv16++)
		for (int i = 0; i < 3; i++)
			rb_case(&c, kv16, best, nqs[i], 2029, 70, &io);
	rb_cache_free(&c);
	rb_io_free(&io);
}
END_TEST

START_TEST(test_argmax)
{
	float x[5] = { 1, 3, 3, -1, 2 };
	ck_assert_int_eq(kops_argmax(x, 5), 1);
	ck_assert_int_eq(kops_argmax(x, 1), 0);
	ck_assert_int_eq(kops_argmax(x, 0), -1);
	ck_assert_str_eq(kops_isa_name(KOPS_ISA_SCALAR), "scalar");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ops");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_rowops);
	tcase_add_test(tc, test_rope);
	tcase_add_test(tc, test_attention);
	tcase_add_test(tc, test_attn_rows_bits);
	tcase_add_test(tc, test_attn_rows_long);
	tcase_add_test(tc, test_argmax);
	tcase_set_timeout(tc, 100); /* the attention grids, under the sanitizers */
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	/* every row-op, RoPE and attention test loops over the paths up to the
	 * best one (kops_isa_detect): say which those were, for the summary */
	static const char *const names[KOPS_ISA__COUNT] = { "scalar", "avx2", "avx512" };
	static const char *const lack[KOPS_ISA__COUNT] = {
		"", "this CPU has no AVX2 + FMA + F16C (or the build cannot emit it)",
		"this CPU has no AVX-512F (or the build cannot emit it)"
	};
	const enum kops_isa best = kops_isa_detect();
	for (int isa = 0; isa < KOPS_ISA__COUNT; isa++)
		if (isa <= (int)best)
			printf("ISA %s: ran (ops)\n", names[isa]);
		else
			printf("ISA %s: not run: %s\n", names[isa], lack[isa]);
	return failed ? 1 : 0;
}
