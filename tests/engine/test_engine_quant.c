/* tests/engine/test_engine_quant.c — quantized weight paths against F32 on a random
 * model with realistic weight scales (1/sqrt(fan_in), LM head sharpened so
 * logits spread like a trained model's): top-1 agreement and mean
 * KL(p_f32 || p_quant) of the next-token distribution over every position of
 * 16 prompts of 128 tokens (2048 next-token predictions: one flip is 0.05%,
 * the binomial spread of a 98% figure about 0.3%), for Q8_0, INT8 and FP8 (per-row scales, quantized by the
 * test from the same F32 master weights; the LM head of the INT8/FP8 models
 * stays F16 as in such checkpoints), F16/BF16 as a sanity floor, and
 * --quantization int8|fp8 at load when the conversion is built.
 * For Q8_0/INT8/FP8 files it also runs the dequantized weights with float
 * activations, separating weight rounding from what the integer-dot matmul
 * path adds by quantizing activations.
 * Prints the figures against the goals (>= 99% top-1 for the 8-bit integer
 * paths, >= 97% for FP8; met / NOT met, not asserted) and asserts regression
 * floors (see the table: fitted to past measurements, not derived).
 *
 * With AORTA_TEST_DEVICE=cuda (meson test test_engine_quant_cuda, suite gpu;
 * exit 77 without a GPU) the same models run on the CUDA engine against the
 * same CPU F32 reference: the GPU's quality per path (16-bit activations and
 * KV, the weight-only GEMV / W8A8 / dequantizing GEMMs), plus an FP8 KV cache.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "kernels/cpu/matmul.h"
#include "tmodel.h"

#define N_SEQ 16
#define N_POS 128
#define BS 16
#define NBLK (N_POS / BS) /* KV blocks per sequence */

/* the engine under test (the reference always runs on the CPU in F32) */
static enum engine_device g_dev = ENGINE_DEVICE_CPU;

static void config(struct model_config *c)
{
	tmodel_config_small(c);
	c->n_layers = 4;
	c->hidden = 256;
	c->n_heads = 8;
	c->n_kv_heads = 2;
	c->head_dim = 32;
	if (g_dev == ENGINE_DEVICE_CUDA) { /* the CUDA attention's smallest head_dim */
		c->n_heads = 4;
		c->head_dim = 64;
	}
	c->ffn = 768;
	c->vocab = 2048;
}

/* Logits [N_SEQ * N_POS, vocab] of N_SEQ prompts prefilled in one batch. */
static int all_logits(const struct model *m, enum dtype quant, enum engine_device dev,
		      enum dtype kv, float *out, struct diag *d)
{
	struct engine_opts o = { .n_threads = 2, .block_size = BS, .n_kv_blocks = N_SEQ * NBLK,
				 .kv_dtype = kv, .quantization = quant,
				 .max_batch_tokens = N_SEQ * N_POS, .max_seqs = N_SEQ,
				 .max_blocks_per_seq = NBLK, .device = dev };
	struct engine *e;
	int rc = engine_create(m, &o, &e, d);
	if (rc)
		return rc;
	enum { T = N_SEQ * N_POS };
	int32_t tok[T], pos[T], slots[T], rows[T], start[N_SEQ + 1], ctx[N_SEQ], table[N_SEQ * NBLK];
	for (int s = 0; s < N_SEQ; s++) {
		start[s] = s * N_POS;
		ctx[s] = N_POS;
		for (int j = 0; j < NBLK; j++)
			table[s * NBLK + j] = s * NBLK + j;
		for (int i = 0; i < N_POS; i++) {
			int r = s * N_POS + i;
			tok[r] = (int32_t)((r * 2654435761u) % (unsigned)m->cfg.vocab);
			pos[r] = i;
			slots[r] = table[s * NBLK + i / BS] * BS + i % BS;
			rows[r] = r;
		}
	}
	start[N_SEQ] = T;
	struct engine_batch b = { .n_tokens = T, .tokens = tok, .positions = pos,
				  .slot_mapping = slots, .n_seqs = N_SEQ, .seq_start = start,
				  .context_len = ctx, .block_tables = table, .max_blocks_per_seq = NBLK,
				  .n_logits = T, .logits_rows = rows };
	rc = engine_forward(e, &b, out);
	engine_destroy(e);
	return rc;
}

static void softmax(const float *x, int n, double *p)
{
	double mx = x[0], sum = 0;
	for (int i = 1; i < n; i++)
		mx = x[i] > mx ? x[i] : mx;
	for (int i = 0; i < n; i++)
		sum += (p[i] = exp((double)x[i] - mx));
	for (int i = 0; i < n; i++)
		p[i] /= sum;
}

struct agree {
	double top1, kl;
};

/* How peaked the reference's next-token distributions are: mean entropy
 * (nats) and mean probability of the top token. */
static void sharpness(const float *ref, int rows, int vocab, double *entropy, double *ptop)
{
	double *p = malloc(sizeof(double) * vocab);
	*entropy = *ptop = 0;
	for (int r = 0; r < rows; r++) {
		softmax(ref + (size_t)r * vocab, vocab, p);
		double h = 0, mx = 0;
		for (int i = 0; i < vocab; i++) {
			if (p[i] > 0)
				h -= p[i] * log(p[i]);
			mx = p[i] > mx ? p[i] : mx;
		}
		*entropy += h / rows;
		*ptop += mx / rows;
	}
	free(p);
}

static struct agree compare(const float *ref, const float *got, int rows, int vocab)
{
	double *p = malloc(sizeof(double) * vocab), *q = malloc(sizeof(double) * vocab);
	struct agree a = { 0, 0 };
	for (int r = 0; r < rows; r++) {
		const float *x = ref + (size_t)r * vocab, *y = got + (size_t)r * vocab;
		int bx = 0, by = 0;
		for (int i = 1; i < vocab; i++) {
			bx = x[i] > x[bx] ? i : bx;
			by = y[i] > y[by] ? i : by;
		}
		a.top1 += bx == by;
		softmax(x, vocab, p);
		softmax(y, vocab, q);
		double kl = 0;
		for (int i = 0; i < vocab; i++)
			if (p[i] > 0)
				kl += p[i] * (log(p[i]) - log(q[i] > 1e-300 ? q[i] : 1e-300));
		a.kl += kl;
	}
	a.top1 /= rows;
	a.kl /= rows;
	free(p), free(q);
	return a;
}

/* Overwrite the F32 twin f's matrices with q's dequantized values: running f
 * then measures the weight rounding alone (float activations), and the gap
 * to running q is what the integer-dot matmul path adds (it quantizes the
 * activations too). */
static void dequant_into(const struct tensor *tq, const struct tensor *tf)
{
	if (!tensor_present(tq))
		return;
	ck_assert_int_eq(tf->dtype, DT_F32);
	struct kmat k = { .dtype = tq->dtype, .rows = tq->shape[0], .cols = tq->shape[1],
			  .data = tq->data, .scale = tq->scale, .n_scale = tq->n_scale };
	for (int64_t r = 0; r < k.rows; r++)
		kcpu_dequant_row(&k, r, (float *)tf->data + r * k.cols);
}

static void dequant_model(const struct model *q, struct model *f)
{
	dequant_into(&q->w.tok_embd, &f->w.tok_embd);
	dequant_into(&q->w.lm_head, &f->w.lm_head);
	for (int l = 0; l < q->cfg.n_layers; l++) {
		const struct layer_weights *a = &q->w.layers[l];
		struct layer_weights *b = &f->w.layers[l];
		dequant_into(&a->wq, &b->wq);
		dequant_into(&a->wk, &b->wk);
		dequant_into(&a->wv, &b->wv);
		dequant_into(&a->wo, &b->wo);
		dequant_into(&a->w_gate, &b->w_gate);
		dequant_into(&a->w_up, &b->w_up);
		dequant_into(&a->w_down, &b->w_down);
	}
}

START_TEST(test_quantized_vs_f32)
{
	struct model_config c;
	config(&c);
	const int rows = N_SEQ * N_POS;
	size_t sz = (size_t)rows * c.vocab * sizeof(float);
	float *ref = malloc(sz), *got = malloc(sz);
	struct diag d = { 0 };
	struct tmodel_opts to = { .wdtype = DT_F32, .seed = 99, .head_gain = 6.0f };
	struct model *m;
	ck_assert_int_eq(tmodel_create(&c, &to, &m), 0);
	ck_assert_msg(all_logits(m, DT_F32, ENGINE_DEVICE_CPU, DT_F32, ref, &d) == 0, "%s", d.msg);
	const bool gpu = g_dev == ENGINE_DEVICE_CUDA;
	double sd = 0;
	for (size_t i = 0; i < (size_t)rows * c.vocab; i++)
		sd += (double)ref[i] * ref[i];
	double ent, ptop;
	sharpness(ref, rows, c.vocab, &ent, &ptop);
	printf("quant: reference F32 logits rms %.2f over %d positions, vocab %d; next-token "
	       "entropy %.2f nats, top-1 probability %.2f (means)\n",
	       sqrt(sd / ((double)rows * c.vocab)), rows, c.vocab, ent, ptop);

	/* goal: the project's target (top-1 agreement a quantized checkpoint
	 * should keep on a trained model), printed with the measured figure and
	 * met / NOT met; not asserted: on a random model the top-1 margin is the
	 * gap between the two largest of ~2048 near-Gaussian logits (about a
	 * quarter of their spread), far smaller than a trained model's, so a
	 * goal missed here says less about the path than about the model.
	 * floor_top1 / max_kl: what this test asserts — a regression bound, not a
	 * quality claim. Their values are NOT derived: they were set a little
	 * under (KL: a little over) the figures measured when each path landed,
	 * to catch a change that makes a path worse by more than that slack. A
	 * derivation would predict the flips from the reference's own top-2 gaps
	 * and the rounding's spread (as test_cuda_engine's logits bound does) and
	 * the KL as half the variance of the logit error; that is not done here,
	 * so a floor being met says "no worse than when measured", nothing more. */
	/* On the GPU activations and KV are 16-bit (the F16 row shows what that
	 * alone costs) and batches of more than 16 rows (these prefills) run
	 * INT8/FP8 weights as W8A8: activations quantized per token, which for
	 * FP8 (3 mantissa bits) doubles the KL of weight rounding alone on this
	 * model (host emulator: 94.5% top-1, KL 4.0e-3, where the CPU's
	 * weight-only FP8 gives 96.4%, 2.1e-3 on the same head_dim-64 model).
	 * The gpu floors sit under the emulator's figures. */
	const struct {
		enum dtype file; /* storage dtype the model is built in */
		enum dtype load; /* engine_opts.quantization */
		double goal_top1, floor_top1, max_kl, gpu_floor_top1, gpu_max_kl;
		enum dtype kv;	 /* DT__COUNT: F32 on the CPU, the compute dtype on CUDA */
		bool gpu_only;
	} cases[] = {
		{ DT_F16, DT_F32, 0.99, 0.99, 1e-5, 0.99, 1e-5, DT__COUNT, false },
		{ DT_BF16, DT_F32, 0.99, 0.99, 2e-4, 0.99, 2e-4, DT__COUNT, false },
		{ DT_Q8_0, DT_F32, 0.99, 0.975, 1e-3, 0.975, 1e-3, DT__COUNT, false },
		{ DT_I8, DT_F32, 0.99, 0.975, 1.5e-3, 0.975, 1.5e-3, DT__COUNT, false },
		{ DT_F8_E4M3, DT_F32, 0.97, 0.95, 5e-3, 0.92, 8e-3, DT__COUNT, false },
		{ DT_F16, DT_I8, 0.99, 0.975, 1.5e-3, 0.975, 1.5e-3, DT__COUNT, false },
		{ DT_F16, DT_F8_E4M3, 0.97, 0.95, 5e-3, 0.92, 8e-3, DT__COUNT, false },
		{ DT_F16, DT_F32, 0.97, 0, 0, 0.97, 1e-3, DT_F8_E4M3, true }, /* FP8 KV cache */
	};
	int n_bad = 0; /* print every figure before failing */
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct model *q;
		if (cases[i].gpu_only && !gpu)
			continue;
		const enum dtype kv = cases[i].kv != DT__COUNT ? cases[i].kv
				      : gpu ? (cases[i].file == DT_BF16 ? DT_BF16 : DT_F16)
					    : DT_F32;
		const double floor_top1 = gpu ? cases[i].gpu_floor_top1 : cases[i].floor_top1;
		const double max_kl = gpu ? cases[i].gpu_max_kl : cases[i].max_kl;
		to.wdtype = cases[i].file;
		/* INT8 / FP8 checkpoints (compressed-tensors, vLLM) keep the LM head
		 * in 16 bits, as --quantization does; GGUF Q8_0 quantizes it too
		 * (and its token embeddings). */
		to.head_dtype = cases[i].file == DT_I8 || cases[i].file == DT_F8_E4M3 ? DT_F16 : DT_F32;
		ck_assert_int_eq(tmodel_create(&c, &to, &q), 0);
		/* ... and their token embeddings too (an embedding row is a
		 * lookup, not a matmul input; llm-compressor leaves embed_tokens
		 * alone): share the reference's (m outlives q). */
		if (cases[i].file == DT_I8 || cases[i].file == DT_F8_E4M3)
			q->w.tok_embd = m->w.tok_embd;
		int rc = all_logits(q, cases[i].load, g_dev, kv, got, &d);
		char name[80];
		snprintf(name, sizeof name, "%s%s%s%s", dtype_name(cases[i].file),
			 cases[i].load != DT_F32 ? " -> --quantization " : "",
			 cases[i].load != DT_F32 ? dtype_name(cases[i].load) : "",
			 cases[i].gpu_only ? ", fp8 kv" : "");
		if (rc == ERR_UNSUPPORTED && cases[i].load != DT_F32) {
			/* the load-time conversion is not built: a named skipped case
			 * (tools/test-summary.py lists it; CI refuses it), not a pass */
			printf("SKIP: quant%s: %s: %s\n", gpu ? " (cuda)" : "", name, d.msg);
			tmodel_destroy(q);
			continue;
		}
		ck_assert_msg(rc == 0, "%s: %s", name, d.msg);
		struct agree a = compare(ref, got, rows, c.vocab);
		printf("quant%s: %-28s top-1 agreement %6.2f%% (goal %.0f%%: %s; regression floor "
		       "%.1f%%)  mean KL %.2e (floor %.1e)\n", gpu ? " (cuda)" : "", name,
		       100 * a.top1, 100 * cases[i].goal_top1,
		       a.top1 >= cases[i].goal_top1 ? "met" : "NOT met", 100 * floor_top1, a.kl,
		       max_kl);
		if (a.top1 < floor_top1 || a.kl > max_kl) {
			fprintf(stderr, "quant: %s under its floor (top-1 >= %.1f%%, KL <= %.1e)\n",
				name, 100 * floor_top1, max_kl);
			n_bad++;
		}
		if (!gpu && cases[i].load == DT_F32 && cases[i].file != DT_F16 &&
		    cases[i].file != DT_BF16) {
			struct tmodel_opts fo = to;
			struct model *f;
			fo.wdtype = DT_F32;
			fo.head_dtype = DT_F32;
			ck_assert_int_eq(tmodel_create(&c, &fo, &f), 0);
			dequant_model(q, f);
			ck_assert_msg(all_logits(f, DT_F32, ENGINE_DEVICE_CPU, DT_F32, got, &d) == 0,
				      "%s", d.msg);
			struct agree w = compare(ref, got, rows, c.vocab);
			printf("quant: %-28s top-1 agreement %6.2f%% with float activations "
			       "(weight rounding alone)  mean KL %.2e\n", "", 100 * w.top1, w.kl);
			tmodel_destroy(f);
		}
		tmodel_destroy(q);
	}
	ck_assert_int_eq(n_bad, 0);
	tmodel_destroy(m);
	free(ref), free(got);
}
END_TEST

int main(void)
{
	const char *dev = getenv("AORTA_TEST_DEVICE");
	if (dev && !strcmp(dev, "cuda")) {
		if (!engine_cuda_available()) {
			printf("test_engine_quant (cuda): SKIP: no CUDA device visible\n");
			return 77;
		}
		g_dev = ENGINE_DEVICE_CUDA;
	}
	Suite *s = suite_create("quant");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_quantized_vs_f32);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_NOFORK); /* keep printf order */
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
