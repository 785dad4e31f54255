/* tests/engine/test_ops.c — every fast op in kernels/cpu/ops_fast.c against
 * its reference in ops_ref.c, for every ISA this CPU has, on ragged sizes
 * (tails of every vector width), with |got-ref| <= atol + rtol*|ref|.
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
			float qg[6 * 128], og[6 * 128], rg[6 * 128], sg[6 * 12 * 16];
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
	tcase_add_test(tc, test_argmax);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	fprintf(stderr, "ops: best ISA here is %s\n", kops_isa_name(kops_isa_detect()));
	return failed ? 1 : 0;
}
