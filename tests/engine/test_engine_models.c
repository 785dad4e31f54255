/* tests/engine/test_engine_models.c — the engine on real model files from
 * the generator (engine/model/model_gen.h) through the loaders (model_load): a GGUF
 * file and a Hugging Face directory of the same options and seed must give
 * the same logits (GGUF llama Q/K rows are permuted and use rope NORM; HF is
 * NEOX — the same function), for llama (GQA), qwen2 (QKV bias, tied) and
 * qwen3 (Q/K norm); and an FP8 HF directory must agree with F16 within the
 * spread FP8 weight rounding predicts, top-1 equal but at near-ties.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/model/model_gen.h"

#define N_TOK 37
#define BS 16

/* Logits of every position of a fixed prompt, run as two chunks. */
static void logits_of(const struct model *m, float *out)
{
	struct engine_opts o = { .n_threads = 2, .block_size = BS, .n_kv_blocks = 8,
				 .kv_dtype = DT_F32, .quantization = DT_F32,
				 .max_batch_tokens = N_TOK, .max_seqs = 1, .max_blocks_per_seq = 4 };
	struct engine *e;
	struct diag d = { 0 };
	ck_assert_msg(engine_create(m, &o, &e, &d) == 0, "%s", d.msg);
	int32_t tok[N_TOK], table[4] = { 6, 1, 3, 0 };
	for (int i = 0; i < N_TOK; i++)
		tok[i] = (i * 53 + 17) % m->cfg.vocab;
	const int cuts[] = { 0, 21, N_TOK };
	for (int c = 0; c < 2; c++) {
		int a = cuts[c], n = cuts[c + 1] - a;
		int32_t pos[N_TOK], slots[N_TOK], rows[N_TOK], start[2] = { 0, n }, ctx = a + n;
		for (int i = 0; i < n; i++) {
			pos[i] = a + i;
			slots[i] = table[(a + i) / BS] * BS + (a + i) % BS;
			rows[i] = i;
		}
		struct engine_batch b = { .n_tokens = n, .tokens = tok + a, .positions = pos,
					  .slot_mapping = slots, .n_seqs = 1, .seq_start = start,
					  .context_len = &ctx, .block_tables = table,
					  .max_blocks_per_seq = 4, .n_logits = n, .logits_rows = rows };
		ck_assert_int_eq(engine_forward(e, &b, out + (size_t)a * m->cfg.vocab), 0);
	}
	engine_destroy(e);
}

static void gen_opts(struct model_gen_opts *g, enum model_arch arch)
{
	model_gen_default_opts(g);
	g->cfg.arch = arch;
	g->cfg.n_layers = 2;
	g->cfg.hidden = 128;
	g->cfg.n_heads = 4;
	g->cfg.n_kv_heads = 2;
	g->cfg.head_dim = 32;
	g->cfg.ffn = 256;
	g->cfg.qkv_bias = arch == ARCH_QWEN2;
	g->cfg.tied_embeddings = arch == ARCH_QWEN2;
	g->cfg.qk_norm = arch == ARCH_QWEN3;
	g->dtype = DT_F16;
	g->seed = 7;
}

static float *load_and_run(const char *path, int *vocab)
{
	struct model *m;
	struct diag d = { 0 };
	ck_assert_msg(model_load(path, &m, &d) == 0, "%s: %s", path, d.msg);
	*vocab = m->cfg.vocab;
	float *l = malloc((size_t)N_TOK * m->cfg.vocab * sizeof(float));
	logits_of(m, l);
	model_destroy(m);
	return l;
}

static void compare_formats(enum model_arch arch)
{
	char dir[] = "/tmp/aorta-engine-models-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char gguf[512], hf[512];
	snprintf(gguf, sizeof gguf, "%s/m.gguf", dir);
	snprintf(hf, sizeof hf, "%s/hf", dir);
	struct model_gen_opts g;
	gen_opts(&g, arch);
	struct diag d = { 0 };
	ck_assert_msg(model_gen_write_gguf(&g, gguf, &d) == 0, "%s", d.msg);
	ck_assert_msg(model_gen_write_hf_dir(&g, hf, &d) == 0, "%s", d.msg);
	int va, vb;
	float *a = load_and_run(gguf, &va), *b = load_and_run(hf, &vb);
	ck_assert_int_eq(va, vb);
	float mx = 0, err = 0;
	int same_top1 = 0;
	for (int r = 0; r < N_TOK; r++) {
		int ia = 0, ib = 0;
		for (int v = 0; v < va; v++) {
			size_t k = (size_t)r * va + v;
			mx = fmaxf(mx, fabsf(b[k]));
			err = fmaxf(err, fabsf(a[k] - b[k]));
			ia = a[k] > a[(size_t)r * va + ia] ? v : ia;
			ib = b[k] > b[(size_t)r * va + ib] ? v : ib;
		}
		same_top1 += ia == ib;
	}
	printf("models: %s GGUF vs HF: max|diff| %.2e of max|logit| %.2e; top-1 same %d/%d\n",
	       model_arch_name(arch), err, mx, same_top1, N_TOK);
	ck_assert_msg(err <= 1e-4f * mx, "%s: GGUF vs HF logits differ by %g (max %g)",
		      model_arch_name(arch), err, mx);
	ck_assert_int_eq(same_top1, N_TOK);
	free(a), free(b);
	unlink(gguf);
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}

START_TEST(test_gguf_vs_hf_llama) { compare_formats(ARCH_LLAMA); }
END_TEST
START_TEST(test_gguf_vs_hf_qwen2) { compare_formats(ARCH_QWEN2); }
END_TEST
START_TEST(test_gguf_vs_hf_qwen3) { compare_formats(ARCH_QWEN3); }
END_TEST

/* FP8 (E4M3, per-row scales) vs F16 weights, both on the CPU in F32: the
 * FP8 file rounds every matrix to a unit roundoff of u = 2^-4 (and its
 * norm weights to BF16, 2^-8). A matrix whose weights carry independent
 * relative errors of spread u / sqrt(3) (uniform in [-u, u]) errs on its
 * output by that relative spread of the output's rms (E sum_j W_ij^2 x_j^2
 * = E y_i^2); the norms and 1/sqrt(fan_in) weights carry it to the logits
 * with a gain of about 1, and independent errors add in variance:
 *   sigma = rms(logits) * sqrt((n8 u^2 + nb 2^-16) / 3),
 * n8 = 7 matrices a layer + the embeddings + the LM head, nb = 2 norms a
 * layer + the final one (upper counts: a branch's error is counted at the
 * residual's full scale). So the rms error must be under sigma, no logit
 * more than Z = 6 sigma off (one Gaussian draw past 6 sigma: 2e-9, one of
 * 37 rows * 1000-odd logits: ~1e-4), and top-1 must agree wherever the F16
 * top-2 gap exceeds twice that bound. */
START_TEST(test_fp8_hf)
{
	char dir[] = "/tmp/aorta-engine-fp8-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char f16[512], f8[512];
	snprintf(f16, sizeof f16, "%s/f16", dir);
	snprintf(f8, sizeof f8, "%s/f8", dir);
	struct model_gen_opts g;
	gen_opts(&g, ARCH_LLAMA);
	struct diag d = { 0 };
	ck_assert_msg(model_gen_write_hf_dir(&g, f16, &d) == 0, "%s", d.msg);
	g.dtype = DT_F8_E4M3;
	ck_assert_msg(model_gen_write_hf_dir(&g, f8, &d) == 0, "%s", d.msg);
	int va, vb;
	float *a = load_and_run(f16, &va), *b = load_and_run(f8, &vb);
	ck_assert_int_eq(va, vb);
	const int L = g.cfg.n_layers;
	const double u = 0x1p-4, n8 = 7 * L + 2, nb = 2 * L + 1, z = 6;
	const double sig = sqrt((n8 * u * u + nb * 0x1p-16) / 3);
	int same = 0, ties = 0, bad_max = 0, bad_top1 = 0;
	double worst = 0, se = 0, sr = 0;
	for (int r = 0; r < N_TOK; r++) {
		const float *x = a + (size_t)r * va, *y = b + (size_t)r * va;
		int ia = 0, ib = 0;
		double ss = 0, err = 0, t1 = -INFINITY, t2 = -INFINITY;
		for (int v = 0; v < va; v++) {
			ck_assert(isfinite(y[v]));
			ia = x[v] > x[ia] ? v : ia;
			ib = y[v] > y[ib] ? v : ib;
			ss += (double)x[v] * x[v];
			err = fmax(err, fabs((double)y[v] - x[v]));
			se += ((double)y[v] - x[v]) * ((double)y[v] - x[v]);
			if (x[v] > t1) {
				t2 = t1;
				t1 = x[v];
			} else if (x[v] > t2) {
				t2 = x[v];
			}
		}
		sr += ss;
		const double rms = sqrt(ss / va), bound = z * sig * rms;
		worst = fmax(worst, err / rms);
		bad_max += err > bound;
		same += ia == ib;
		if (t1 - t2 < 2 * bound)
			ties++;
		else
			bad_top1 += ia != ib;
	}
	const double rel_rms = sqrt(se / sr);
	printf("models: FP8 HF vs F16 HF: max |diff| / rms(logits) %.3g (bound %.3g = %.0f "
	       "sigma), rms error %.3g (sigma %.3g); top-1 same %d/%d, %d near-ties, %d "
	       "flips past them\n", worst, z * sig, z, rel_rms, sig, same, N_TOK, ties, bad_top1);
	ck_assert_int_eq(bad_max, 0);
	ck_assert_msg(rel_rms <= sig, "rms error %g over sigma %g", rel_rms, sig);
	ck_assert_int_eq(bad_top1, 0);
	free(a), free(b);
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("engine_models");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_gguf_vs_hf_llama);
	tcase_add_test(tc, test_gguf_vs_hf_qwen2);
	tcase_add_test(tc, test_gguf_vs_hf_qwen3);
	tcase_add_test(tc, test_fp8_hf);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
