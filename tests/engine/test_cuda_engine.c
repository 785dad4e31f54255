/* tests/engine/test_cuda_engine.c — the CUDA backend against the CPU engine,
 * on generated models (tests/engine/tmodel.h). Exit 77 without a GPU.
 *
 *  1. logits: the same mixed steps (prefill chunks that cross block
 *     boundaries, chunks attending to cached blocks, single decode rows) on
 *     the CPU engine (F32 activations, F32 KV) and the CUDA engine (16-bit
 *     activations and KV): every logits row agrees within a bound derived
 *     from the arithmetic (rel_sigma, below), the rms error is under the
 *     predicted spread, and top-1 agrees on every row but near-ties, for models with GQA, QKV bias, Q/K norm, both RoPE layouts, llama3
 *     scaling, head_dim 64 and 128, F16 and BF16 weights;
 *  2. greedy batch invariance on the GPU: 8 sequences generate the same
 *     tokens alone and together (a divergence is accepted only at a near-tie
 *     of the solo run's logits, and ends the comparison of that sequence);
 *  3. CUDA graphs vs eager decode: same logits to accumulation-order tolerance;
 *  4. copy_blocks, invalid batches (ERR_INVAL, engine still usable), and the
 *     KV pool sized from gpu_memory_utilization;
 *  5. (issue 10) FP8 KV cache (scale 1, the checkpoint's per-layer k/v
 *     scales and per-KV-head ones, each of which must change the logits), Q8_0 / INT8 / FP8 weights and
 *     --quantization int8|fp8, against the CPU engine on the same quantized
 *     weights;
 *  6. engine_forward_sample (k_sample on the device, graph and eager steps)
 *     against k_sample_ref over engine_forward's logits of the same step;
 *  7. fusion (the norms and the SwiGLU in the GEMV epilogues, the decode
 *     split merge in the attention kernel) and programmatic dependent launch
 *     against AORTA_CUDA_FUSION=0 AORTA_CUDA_PDL=0: the same logits bits
 *     over a prefill of 6 sequences and decode at 6, 2 and 1 rows, graphs and
 *     eager, 16-bit and 8-bit weights (on a GPU this is where a read before
 *     its PDL wait would show); the norms and SwiGLU before a W8A8
 *     projection (8-bit weights past 4 rows: the prefill and the 6-row
 *     decode) writing per-token codes (k_rmsnorm_quant, k_silu_mul_quant)
 *     for FP8 and INT8, and, under
 *     the emulator, the same when cuBLASLt refuses and the 16-bit rows are
 *     made after all.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "kernels/cpu/sample_ref.h"
#include "kernels/sample.h"
#include "tests/engine/tmodel.h"

#define BS 16	 /* block size */
#define MAXB 32	 /* blocks per sequence: 512 positions */
#define MAXS 8	 /* sequences */

static int g_fail;

#define CHECK(cond, ...)                                           \
	do {                                                       \
		if (!(cond)) {                                     \
			printf("FAIL %s:%d: ", __FILE__, __LINE__); \
			printf(__VA_ARGS__);                       \
			printf("\n");                              \
			g_fail++;                                  \
		}                                                  \
	} while (0)

struct seq {
	int32_t toks[512];
	int n_toks, ctx;
	int32_t table[MAXB];
};

/* Each sequence s of a test owns blocks [s * MAXB, (s + 1) * MAXB) in an
 * interleaved order, so tables are not contiguous. */
static void seq_init(struct seq *q, int s, int n_prompt, int vocab)
{
	memset(q, 0, sizeof *q);
	for (int i = 0; i < n_prompt; i++)
		q->toks[i] = (int32_t)((i * 37 + s * 101 + 7) % vocab);
	q->n_toks = n_prompt;
	for (int j = 0; j < MAXB; j++)
		q->table[j] = (int32_t)(((j * 7) % MAXB) * MAXS + s);
}

/* The arrays of one step's batch. */
struct bbuf {
	int32_t tok[512], pos[512], slot[512], start[MAXS + 1], ctx[MAXS], tables[MAXS * MAXB],
		rows[MAXS];
};

/* The batch of one step: sequence i feeds n_new[i] tokens; rows ending at a
 * sequence's last known token need logits. */
static struct engine_batch make_batch(struct bbuf *w, struct seq **sq, const int *n_new, int n)
{
	int T = 0, nl = 0;
	for (int i = 0; i < n; i++) {
		struct seq *q = sq[i];
		w->start[i] = T;
		for (int j = 0; j < n_new[i]; j++) {
			int t = q->ctx + j;
			w->tok[T] = q->toks[t];
			w->pos[T] = t;
			w->slot[T] = q->table[t / BS] * BS + t % BS;
			T++;
		}
		w->ctx[i] = q->ctx + n_new[i];
		memcpy(w->tables + i * MAXB, q->table, sizeof q->table);
		if (w->ctx[i] == q->n_toks)
			w->rows[nl++] = T - 1;
	}
	w->start[n] = T;
	return (struct engine_batch){ .n_tokens = T, .tokens = w->tok, .positions = w->pos,
				      .slot_mapping = w->slot, .n_seqs = n, .seq_start = w->start,
				      .context_len = w->ctx, .block_tables = w->tables,
				      .max_blocks_per_seq = MAXB, .n_logits = nl,
				      .logits_rows = w->rows };
}

/* One step (make_batch) through engine_forward: logits in row order.
 * Returns the engine's code; *n_logits the rows. The caller appends tokens. */
static int step(struct engine *e, struct seq **sq, const int *n_new, int n, float *logits,
		int *n_logits)
{
	struct bbuf w;
	struct engine_batch b = make_batch(&w, sq, n_new, n);
	int rc = engine_forward(e, &b, logits);
	if (!rc)
		for (int i = 0; i < n; i++)
			sq[i]->ctx = w.ctx[i];
	*n_logits = b.n_logits;
	return rc;
}

static int argmax(const float *x, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

static double row_err(const float *got, const float *ref, int n, double *scale_out)
{
	double scale = 0, err = 0;
	for (int i = 0; i < n; i++) {
		scale = fmax(scale, fabs(ref[i]));
		double d = fabs((double)got[i] - ref[i]);
		err = isnan(d) ? INFINITY : fmax(err, d);
	}
	*scale_out = scale;
	return err;
}

static struct engine_opts opts(enum engine_device dev, enum dtype kv)
{
	struct engine_opts o = { .n_threads = 2, .block_size = BS, .n_kv_blocks = MAXS * MAXB,
				 .kv_dtype = kv, .quantization = DT_F32, .max_batch_tokens = 512,
				 .max_seqs = MAXS, .max_blocks_per_seq = MAXB, .device = dev };
	return o;
}

/* ---- 1. logits vs the CPU engine --------------------------------------------- */

struct plan {
	int n_seqs;
	int prompt[4];
	int steps[6][4]; /* tokens per sequence per step (0: not in the step) */
	int n_steps;
};

/* Prefill in chunks that cross block boundaries and attend to cached
 * blocks, mixed with decode rows, then pure decode. */
static const struct plan g_plan = {
	.n_seqs = 4,
	.prompt = { 40, 100, 1, 17 },
	.steps = { { 40, 16, 1, 0 },	/* A whole; B first chunk; C one token */
		   { 1, 33, 1, 17 },	/* A decodes; B chunk from 16 to 49; D whole */
		   { 1, 51, 1, 1 },	/* B finishes its prompt (to 100) */
		   { 1, 1, 1, 1 },	/* pure decode */
		   { 1, 1, 1, 1 },
		   { 1, 1, 1, 1 } },
	.n_steps = 6,
};

static void run_plan(struct engine *e, struct seq *sq, float *logits, float *all, int vocab,
		     const char *what)
{
	int off = 0;
	for (int st = 0; st < g_plan.n_steps; st++) {
		struct seq *ptr[4];
		int n_new[4], n = 0;
		for (int i = 0; i < g_plan.n_seqs; i++) {
			int k = g_plan.steps[st][i];
			if (!k)
				continue;
			/* a decode step feeds the token appended by the last one */
			if (sq[i].ctx + k > sq[i].n_toks)
				k = sq[i].n_toks - sq[i].ctx;
			if (k <= 0)
				continue;
			ptr[n] = &sq[i];
			n_new[n++] = k;
		}
		int nl = 0;
		int rc = step(e, ptr, n_new, n, logits, &nl);
		CHECK(rc == 0, "%s: step %d failed: %d", what, st, rc);
		if (rc)
			return;
		for (int i = 0, k = 0; i < n; i++) {
			if (ptr[i]->ctx != ptr[i]->n_toks)
				continue;
			memcpy(all + (size_t)off * vocab, logits + (size_t)k * vocab,
			       (size_t)vocab * sizeof(float));
			off++;
			k++;
		}
		/* append a fixed, model-independent next token so both engines see
		 * the same sequences whatever their logits */
		for (int i = 0; i < n; i++) {
			struct seq *q = ptr[i];
			if (q->ctx == q->n_toks) {
				q->toks[q->n_toks] = (q->n_toks * 13 + 5) % vocab;
				q->n_toks++;
			}
		}
	}
}

/* The bound on |GPU logit - CPU logit|, from the arithmetic, not from a
 * measurement. The CPU engine runs in F32 (its roundoff, 2^-24, is nil
 * here); the GPU rounds to a dtype of unit roundoff u (2^-11 F16, 2^-8
 * BF16, 2^-4 FP8 E4M3; INT8 per-token codes: step amax / 127 with amax <= 4
 * rms — the largest of <= 4096 near-Gaussian values — so a half step is
 * <= 4/254 ~ 2^-6 of the rms). One rounding of a vector x is a relative
 * error of spread u / sqrt(3) (uniform in [-u, u]) per element; through a
 * matmul with random weights it is an error of that relative spread of the
 * output's rms (E sum_j W_ij^2 x_j^2 = E y_i^2), and the residual stream
 * (F32 here), the norms and the 1/sqrt(fan_in) weights carry it to the
 * logits with a gain of about 1. Independent roundings add in variance, so
 * the logits' error has spread
 *   sigma = rms(logits) * sqrt(sum_k u_k^2 / 3)
 * over the roundings k on the residual path (their number, n, grows with
 * depth: the error as sqrt(n)). Counted (cuda_forward.c, run_layers), per
 * layer: the attention norm's output, Q and P (the attention's tensor-core
 * operands), the attention output, the FFN norm's output and the SwiGLU
 * output in 16 bits (6), K and V in the cache (2, at the cache's u); the
 * final norm's output (1); with 8-bit weights, the input of every
 * projection (4 a layer and the LM head) quantized per token where W8A8
 * runs — the GPU for INT8 / FP8 past the GEMV rows, the CPU for Q8_0 / INT8 —
 * and rounded to 16 bits by a dequantizing GEMM. Every count is an upper
 * one (a branch's error is counted at the residual's full scale, the
 * averaging over attended positions is ignored), so the measured rms error
 * must be under sigma, and no logit may be more than Z = 6 sigma off: the
 * chance of one Gaussian draw past 6 sigma is 2e-9, of one among the
 * 64 rows * 1000 logits of a model 1.3e-4 — a failure is a defect, not bad
 * luck. Top-1 can only change where the CPU's top-2 gap is under twice that
 * bound (a near-tie); everywhere else it must agree. */
#define Z_MAX 6.0

static double unit_roundoff(enum dtype dt)
{
	switch (dt) {
	case DT_F16: return 0x1p-11;
	case DT_BF16: return 0x1p-8;
	case DT_F8_E4M3: return 0x1p-4;
	case DT_I8: return 4.0 / 254; /* per-token codes, amax <= 4 rms */
	default: return 0; /* F32 */
	}
}

/* What the GPU rounds to, against the CPU's F32 (DT_F32: nothing). */
struct arith {
	enum dtype act;	   /* the GPU's 16-bit activations */
	enum dtype kv;	   /* its KV cache */
	enum dtype gpu_a8; /* its W8A8 per-token activation codes */
	enum dtype cpu_a8; /* the CPU's W8A8 activation codes */
	/* A regression bound on top of the derived one, as a fraction of the
	 * row's max |logit| (0: none). The derivation over-counts (the measured
	 * rms error is about sigma / 5), which leaves the 8-bit and FP8-KV
	 * bounds too wide to catch some defects the old fitted bounds caught
	 * (a K scale of the wrong KV head, 2x off, gives 0.086 of max |logit|
	 * with checkpoint scales). Those cases keep their old bound, named for
	 * what it is: what the path has met since it landed, not arithmetic. */
	double regress;
};

/* sigma / rms(logits) of the comment above, for a model of L layers. */
static double rel_sigma(const struct model_config *c, struct arith a)
{
	const int L = c->n_layers, n_a8 = a.gpu_a8 || a.cpu_a8 ? 4 * L + 1 : 0;
	const double u16 = unit_roundoff(a.act), ukv = unit_roundoff(a.kv);
	const double ug = unit_roundoff(a.gpu_a8), uc = unit_roundoff(a.cpu_a8);
	double v = (6 * L + 1 + n_a8) * u16 * u16 + 2 * L * ukv * ukv +
		   n_a8 * (ug * ug + uc * uc);
	return sqrt(v / 3);
}

static double row_rms(const float *x, int n)
{
	double s = 0;
	for (int i = 0; i < n; i++)
		s += (double)x[i] * x[i];
	return sqrt(s / n);
}

/* The largest and second-largest of x. */
static double top2_gap(const float *x, int n)
{
	double a = -INFINITY, b = -INFINITY;
	for (int i = 0; i < n; i++) {
		if (x[i] > a) {
			b = a;
			a = x[i];
		} else if (x[i] > b) {
			b = x[i];
		}
	}
	return a - b;
}

/* kv_scale: tmodel_opts's (the FP8 KV cache's checkpoint scales); keep: if
 * not NULL, gets the CUDA engine's logits rows (64 * vocab). */
static void compare_model_s(const char *name, const struct model_config *c, enum dtype wdt,
			    enum rope_style lay, enum dtype kv, enum dtype quant, struct arith ar,
			    float kv_scale, bool per_head, float *keep)
{
	struct tmodel_opts to = { .wdtype = wdt, .seed = 7, .layout = lay, .kv_scale = kv_scale,
				  .kv_scale_per_head = per_head };
	struct model *m = NULL;
	if (tmodel_create(c, &to, &m)) {
		CHECK(0, "%s: tmodel_create", name);
		return;
	}
	const int V = c->vocab, max_rows = 64;
	float *logits = malloc((size_t)MAXS * V * sizeof(float));
	float *ref = calloc((size_t)max_rows * V, sizeof(float));
	float *got = calloc((size_t)max_rows * V, sizeof(float));
	struct engine *cpu = NULL, *gpu = NULL;
	struct diag d = { 0 };
	struct engine_opts oc = opts(ENGINE_DEVICE_CPU, DT_F32), og = opts(ENGINE_DEVICE_CUDA, kv);
	oc.quantization = og.quantization = quant;
	int rc = engine_create(m, &oc, &cpu, &d);
	CHECK(rc == 0, "%s: CPU engine: %s", name, d.msg);
	rc = rc ? rc : engine_create(m, &og, &gpu, &d);
	CHECK(rc == 0, "%s: CUDA engine: %s", name, d.msg);
	if (!rc) {
		struct seq a[4], b[4];
		for (int i = 0; i < 4; i++) {
			seq_init(&a[i], i, g_plan.prompt[i], V);
			seq_init(&b[i], i, g_plan.prompt[i], V);
		}
		run_plan(cpu, a, logits, ref, V, name);
		run_plan(gpu, b, logits, got, V, name);
		const double sig = rel_sigma(c, ar);
		double worst = 0, worst_max = 0, se = 0, sr = 0;
		int rows = 0, top1 = 0, ties = 0;
		for (int r = 0; r < max_rows; r++) {
			const float *g = got + (size_t)r * V, *f = ref + (size_t)r * V;
			double scale, err = row_err(g, f, V, &scale);
			if (scale == 0)
				continue; /* past the rows the plan produced */
			const double rms = row_rms(f, V), bound = Z_MAX * sig * rms;
			for (int i = 0; i < V; i++)
				se += ((double)g[i] - f[i]) * ((double)g[i] - f[i]);
			sr += rms * rms * V;
			rows++;
			worst = fmax(worst, err / rms);
			CHECK(err <= bound, "%s: logits row %d: max |diff| %.4g > bound %.4g "
			      "(%.0f sigma, rms %.4g)", name, r, err, bound, Z_MAX, rms);
			CHECK(!ar.regress || err <= ar.regress * scale,
			      "%s: logits row %d: max |diff| %.4g > regression bound %.2g * max "
			      "|logit| %.4g", name, r, err, ar.regress, scale);
			worst_max = fmax(worst_max, err / scale);
			const bool same = argmax(g, V) == argmax(f, V);
			top1 += same;
			if (top2_gap(f, V) < 2 * bound)
				ties++;
			else
				CHECK(same, "%s: logits row %d: top-1 %d, CPU %d, top-2 gap %.4g > 2 * "
				      "bound %.4g", name, r, argmax(g, V), argmax(f, V),
				      top2_gap(f, V), bound);
		}
		const double rel_rms = rows ? sqrt(se / sr) : 0;
		printf("%s: %d rows: max |diff| / rms(logits) %.3g (bound %.3g = %.0f sigma), "
		       "rms error %.3g (sigma %.3g); top-1 %d/%d, %d near-ties\n", name, rows, worst,
		       Z_MAX * sig, Z_MAX, rel_rms, sig, top1, rows, ties);
		if (ar.regress)
			printf("%s: max |diff| / max |logit| %.3g (regression bound %.2g)\n", name,
			       worst_max, ar.regress);
		CHECK(rel_rms <= sig, "%s: rms error %.3g of rms(logits) over sigma %.3g", name,
		      rel_rms, sig);
		CHECK(rows >= 10, "%s: only %d logits rows compared", name, rows);
		if (keep)
			memcpy(keep, got, (size_t)max_rows * V * sizeof(float));
	}
	engine_destroy(gpu);
	engine_destroy(cpu);
	free(logits);
	free(ref);
	free(got);
	tmodel_destroy(m);
}

static void compare_model_q(const char *name, const struct model_config *c, enum dtype wdt,
			    enum rope_style lay, enum dtype kv, enum dtype quant, struct arith ar)
{
	compare_model_s(name, c, wdt, lay, kv, quant, ar, 0.0f, false, NULL);
}

/* 16-bit weights: the GPU computes in their dtype. */
static void compare_model(const char *name, const struct model_config *c, enum dtype wdt,
			  enum rope_style lay, enum dtype kv)
{
	compare_model_q(name, c, wdt, lay, kv, DT_F32, (struct arith){ .act = wdt, .kv = kv });
}

/* ---- 2. greedy batch invariance ------------------------------------------------ */

#define GEN 12

static void generate(struct engine *e, struct seq **sq, int n, int vocab, float *logits,
		     float *gen_logits /* [n][GEN][vocab] or NULL */)
{
	int n_new[MAXS];
	for (int i = 0; i < n; i++)
		n_new[i] = sq[i]->n_toks - sq[i]->ctx;
	for (int g = 0; g < GEN; g++) {
		int nl = 0;
		int rc = step(e, sq, n_new, n, logits, &nl);
		CHECK(rc == 0 && nl == n, "generate: step %d rc %d rows %d", g, rc, nl);
		if (rc || nl != n)
			return;
		for (int i = 0; i < n; i++) {
			const float *row = logits + (size_t)i * vocab;
			if (gen_logits)
				memcpy(gen_logits + ((size_t)i * GEN + g) * vocab, row,
				       (size_t)vocab * sizeof(float));
			sq[i]->toks[sq[i]->n_toks++] = argmax(row, vocab);
			n_new[i] = 1;
		}
	}
}

static void batch_invariance(const struct model *m, bool eager)
{
	const int V = m->cfg.vocab, N = 8;
	struct engine *e = NULL;
	struct diag d = { 0 };
	struct engine_opts o = opts(ENGINE_DEVICE_CUDA, DT_F16);
	o.enforce_eager = eager;
	if (engine_create(m, &o, &e, &d)) {
		CHECK(0, "CUDA engine: %s", d.msg);
		return;
	}
	float *logits = malloc((size_t)MAXS * V * sizeof(float));
	float *solo_logits = malloc((size_t)N * GEN * V * sizeof(float));
	static struct seq solo[8], batch[8];
	static const int prompts[8] = { 1, 5, 16, 17, 33, 64, 100, 150 };
	for (int i = 0; i < N; i++) {
		seq_init(&solo[i], i, prompts[i], V);
		struct seq *p = &solo[i];
		generate(e, &p, 1, V, logits, solo_logits + (size_t)i * GEN * V);
	}
	struct seq *ptr[8];
	for (int i = 0; i < N; i++) {
		seq_init(&batch[i], i, prompts[i], V);
		ptr[i] = &batch[i];
	}
	generate(e, ptr, N, V, logits, NULL);
	int same = 0, ties = 0;
	for (int i = 0; i < N; i++) {
		for (int g = 0; g < GEN; g++) {
			int t = prompts[i] + g;
			if (solo[i].toks[t] == batch[i].toks[t]) {
				same++;
				continue;
			}
			const float *row = solo_logits + ((size_t)i * GEN + g) * V;
			double scale = 0;
			for (int k = 0; k < V; k++)
				scale = fmax(scale, fabs(row[k]));
			double gap = row[solo[i].toks[t]] - row[batch[i].toks[t]];
			CHECK(gap <= 1e-2 * scale, "seq %d token %d: solo %d batch %d, gap %.4g is no "
			      "near-tie (max |logit| %.4g)", i, g, solo[i].toks[t], batch[i].toks[t],
			      gap, scale);
			ties++;
			break; /* the sequences differ from here on */
		}
	}
	printf("batch invariance (%s): %d tokens identical, %d near-tie divergences\n",
	       eager ? "eager" : "graphs", same, ties);
	free(logits);
	free(solo_logits);
	engine_destroy(e);
}

/* ---- 3. graphs vs eager ----------------------------------------------------------- */

static void graphs_vs_eager(const struct model *m)
{
	const int V = m->cfg.vocab;
	struct engine *e[2] = { NULL, NULL };
	struct diag d = { 0 };
	for (int k = 0; k < 2; k++) {
		struct engine_opts o = opts(ENGINE_DEVICE_CUDA, DT_F16);
		o.enforce_eager = k == 1;
		if (engine_create(m, &o, &e[k], &d)) {
			CHECK(0, "CUDA engine: %s", d.msg);
			engine_destroy(e[0]);
			return;
		}
	}
	float *l[2] = { malloc((size_t)MAXS * V * sizeof(float)),
			malloc((size_t)MAXS * V * sizeof(float)) };
	static struct seq s[2][5];
	double worst = 0;
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < 5; i++)
			seq_init(&s[k][i], i, 20 + 9 * i, V);
	/* prefill all five, then decode batches of 5 (padded to 8), 3 and 1 */
	for (int k = 0; k < 2; k++) {
		struct seq *p[5] = { &s[k][0], &s[k][1], &s[k][2], &s[k][3], &s[k][4] };
		int n_new[5], nl;
		for (int i = 0; i < 5; i++)
			n_new[i] = s[k][i].n_toks;
		CHECK(step(e[k], p, n_new, 5, l[k], &nl) == 0, "prefill");
		for (int i = 0; i < 5; i++)
			s[k][i].toks[s[k][i].n_toks++] = (int32_t)(i + 3);
	}
	const int sizes[] = { 5, 3, 1, 5, 2 };
	for (int it = 0; it < 5; it++) {
		const int n = sizes[it];
		for (int k = 0; k < 2; k++) {
			struct seq *p[5];
			int n_new[5], nl;
			for (int i = 0; i < n; i++) {
				p[i] = &s[k][i];
				n_new[i] = 1;
			}
			CHECK(step(e[k], p, n_new, n, l[k], &nl) == 0 && nl == n, "decode");
			for (int i = 0; i < n; i++)
				s[k][i].toks[s[k][i].n_toks++] = (int32_t)((it * 7 + i) % V);
		}
		for (int i = 0; i < n; i++) {
			double scale, err = row_err(l[0] + (size_t)i * V, l[1] + (size_t)i * V, V,
						    &scale);
			worst = fmax(worst, err / scale);
			CHECK(err <= 2e-3 * scale, "graph vs eager: decode %d row %d: %.4g of %.4g", it,
			      i, err, scale);
		}
	}
	/* one row per sequence but not every row wants logits: sequence 1 feeds
	 * the first of two new tokens (a one-token prefill chunk), so the graph
	 * (padded to 8) must return rows 0, 2, 3, 4 in that order */
	double err_mid = 0;
	for (int k = 0; k < 2; k++) {
		struct seq *p[5];
		int n_new[5] = { 1, 1, 1, 1, 1 }, nl = 0;
		for (int i = 0; i < 5; i++)
			p[i] = &s[k][i];
		s[k][1].toks[s[k][1].n_toks++] = 11;
		CHECK(step(e[k], p, n_new, 5, l[k], &nl) == 0 && nl == 4, "decode, 4 logits rows of 5");
	}
	for (int i = 0; i < 4; i++) {
		double scale, err = row_err(l[0] + (size_t)i * V, l[1] + (size_t)i * V, V, &scale);
		worst = fmax(worst, err / scale);
		CHECK(err <= 2e-3 * scale, "graph vs eager: logits row %d of 4: %.4g of %.4g", i, err,
		      scale);
		/* and not a copy of its neighbour: consecutive rows differ */
		if (i > 0)
			err_mid = fmax(err_mid, row_err(l[0] + (size_t)i * V,
							l[0] + (size_t)(i - 1) * V, V, &scale));
	}
	CHECK(err_mid > 0, "graph: logits rows are all equal");
	printf("graphs vs eager: max |diff| / max |logit| = %.3g\n", worst);
	free(l[0]);
	free(l[1]);
	engine_destroy(e[0]);
	engine_destroy(e[1]);
}

/* ---- 7. fusion on and off: the same bits -------------------------------------- */

static void fusion_bits(const char *name, const struct model_config *c, enum dtype wdt,
			enum dtype quant, bool lt_refuses)
{
	struct tmodel_opts to = { .wdtype = wdt, .seed = 5, .layout = ROPE_STYLE_NEOX };
	struct model *m = NULL;
	if (tmodel_create(c, &to, &m)) {
		CHECK(0, "%s: tmodel_create", name);
		return;
	}
	if (lt_refuses) /* the emulator's cuBLASLt finds no algorithm (tests/emu) */
		setenv("EMU_LT_NO_ALGO", "1", 1);
	/* per run: the prefill's 6 logits rows, then decode at 6 rows (past
	 * W8_GEMV_MAX_T: 8-bit weights run W8A8 there too), 2 rows and 1 */
	enum { NS = 6 };
	const int V = c->vocab;
	const size_t per = (size_t)(NS + NS * GEN + 2 * GEN + GEN) * V;
	float *logits = malloc((size_t)MAXS * V * sizeof(float));
	float *out[2] = { calloc(per, sizeof(float)), calloc(per, sizeof(float)) };
	for (int eager = 0; eager < 2; eager++) {
		for (int k = 0; k < 2; k++) { /* k = 0: fusion off */
			struct engine_opts o = opts(ENGINE_DEVICE_CUDA, DT_F16);
			o.quantization = quant;
			o.enforce_eager = eager;
			if (k == 0) { /* and no programmatic dependent launch either */
				setenv("AORTA_CUDA_FUSION", "0", 1);
				setenv("AORTA_CUDA_PDL", "0", 1);
			}
			struct engine *e = NULL;
			struct diag d = { 0 };
			int rc = engine_create(m, &o, &e, &d);
			unsetenv("AORTA_CUDA_FUSION");
			unsetenv("AORTA_CUDA_PDL");
			CHECK(rc == 0, "%s: CUDA engine: %s", name, d.msg);
			if (rc)
				continue;
			static struct seq sq[NS];
			static const int prompt[NS] = { 45, 70, 3, 33, 12, 20 }; /* > 32: decode splits */
			struct seq *p[NS];
			int n_new[NS], nl = 0;
			for (int i = 0; i < NS; i++) {
				seq_init(&sq[i], i, prompt[i], V);
				p[i] = &sq[i];
				n_new[i] = prompt[i];
			}
			CHECK(step(e, p, n_new, NS, logits, &nl) == 0 && nl == NS, "%s: prefill", name);
			memcpy(out[k], logits, (size_t)NS * V * sizeof(float));
			for (int i = 0; i < NS; i++)
				sq[i].toks[sq[i].n_toks++] = 3 + i;
			float *o6 = out[k] + (size_t)NS * V;
			generate(e, p, NS, V, logits, o6);			    /* 6 rows a step */
			generate(e, p, 2, V, logits, o6 + (size_t)NS * GEN * V);     /* 2 rows */
			generate(e, p, 1, V, logits, o6 + (size_t)(NS + 2) * GEN * V); /* 1 row */
			engine_destroy(e);
		}
		size_t diff = 0;
		while (diff < per && memcmp(&out[0][diff], &out[1][diff], sizeof(float)) == 0)
			diff++;
		CHECK(diff == per, "%s (%s): fused logits differ from unfused at value %zu "
		      "(%.9g vs %.9g)", name, eager ? "eager" : "graphs", diff,
		      diff < per ? out[1][diff] : 0.0, diff < per ? out[0][diff] : 0.0);
		if (diff == per)
			printf("%s (%s): fusion and PDL on and off give the same logits bits (%zu values)\n",
			       name, eager ? "eager" : "graphs", per);
	}
	unsetenv("EMU_LT_NO_ALGO");
	free(logits);
	free(out[0]);
	free(out[1]);
	tmodel_destroy(m);
}

/* ---- 4. copy_blocks, bad batches, memory sizing ---------------------------------- */

static void misc(const struct model *m)
{
	const int V = m->cfg.vocab;
	struct engine *e = NULL;
	struct diag d = { 0 };
	struct engine_opts o = opts(ENGINE_DEVICE_CUDA, DT_F16);
	if (engine_create(m, &o, &e, &d)) {
		CHECK(0, "CUDA engine: %s", d.msg);
		return;
	}
	float *l1 = malloc((size_t)MAXS * V * sizeof(float)), *l2 = malloc((size_t)MAXS * V * 4);
	/* copy_blocks: a sequence whose first block is a copy computes what the
	 * original does */
	struct seq a, b;
	seq_init(&a, 0, 16, V);
	struct seq *p = &a;
	int n_new = 16, nl;
	CHECK(step(e, &p, &n_new, 1, l1, &nl) == 0, "prefill a");
	seq_init(&b, 1, 16, V);
	memcpy(b.toks, a.toks, sizeof a.toks);
	int32_t src = a.table[0], dst = b.table[0];
	CHECK(engine_copy_blocks(e, &src, &dst, 1) == 0, "copy_blocks");
	a.toks[a.n_toks++] = 9;
	b.toks[b.n_toks++] = 9;
	b.ctx = 16; /* the copied block holds positions 0..15 */
	n_new = 1;
	p = &a;
	CHECK(step(e, &p, &n_new, 1, l1, &nl) == 0, "decode a");
	p = &b;
	CHECK(step(e, &p, &n_new, 1, l2, &nl) == 0, "decode b");
	double scale, err = row_err(l2, l1, V, &scale);
	CHECK(err <= 1e-5 * scale + 1e-6, "copy_blocks: %.4g", err);
	/* a bad batch is refused and changes nothing */
	int32_t tok = V + 5, pos = 0, slot = 0, start[2] = { 0, 1 }, ctx = 1, table[MAXB] = { 0 },
		row = 0;
	struct engine_batch bad = { .n_tokens = 1, .tokens = &tok, .positions = &pos,
				    .slot_mapping = &slot, .n_seqs = 1, .seq_start = start,
				    .context_len = &ctx, .block_tables = table,
				    .max_blocks_per_seq = MAXB, .n_logits = 1, .logits_rows = &row };
	CHECK(engine_forward(e, &bad, l1) == ERR_INVAL, "token out of range accepted");
	engine_destroy(e);
	/* the pool sized from memory */
	o.n_kv_blocks = 0;
	o.gpu_memory_utilization = 0.5;
	e = NULL;
	int rc = engine_create(m, &o, &e, &d);
	CHECK(rc == 0 && engine_n_kv_blocks(e) >= MAXB, "sized pool: rc %d (%s)", rc, d.msg);
	if (!rc)
		printf("KV pool from gpu_memory_utilization 0.5: %d blocks\n", engine_n_kv_blocks(e));
	engine_destroy(e);
	free(l1);
	free(l2);
}

/* ---- 6. sampling on the device ---------------------------------------------------- */

/* Per-row sampling parameters; the CSR ranges index the arrays below. The
 * last of four rows has every range empty at [0, 0) (legal CSR, not in
 * append order), so a backend that sized the payloads from the last row's
 * ends would pass no payload at all. */
static const struct k_sample_pen g_pen[6] = {
	{ 3, 2, 1 }, { 17, 1, 0 }, { 999, 0, 1 }, { 42, 3, 0 }, { 17, 0, 1 }, { 500, 1, 1 },
};
static const struct k_sample_bias g_bias[3] = { { 5, 3.0f }, { 7, -100.0f }, { 9, 150.0f } };
static const int32_t g_ban[1] = { 0 };

static void sample_rows(struct k_sample_row *r, int n)
{
	const struct k_sample_row base = { .inv_temperature = 1.0f, .top_p = 1.0f,
					   .repetition_penalty = 1.0f, .n_logprobs = -1 };
	for (int i = 0; i < n; i++)
		r[i] = base;
	/* greedy with penalties and 5 logprobs */
	r[0].u = 0.37;
	r[0].greedy = 1;
	r[0].n_logprobs = 5;
	r[0].repetition_penalty = 1.3f;
	r[0].frequency_penalty = 0.5f;
	r[0].presence_penalty = 0.2f;
	r[0].pen_begin = 0;
	r[0].pen_end = 3;
	if (n > 1) { /* T 0.8, top_k, top_p, bias and a ban, 20 logprobs */
		r[1].u = 0.81;
		r[1].inv_temperature = 1.0f / 0.8f;
		r[1].top_k = 50;
		r[1].top_p = 0.9f;
		r[1].n_logprobs = 20;
		r[1].pen_begin = r[1].pen_end = 3;
		r[1].bias_end = 2;
		r[1].ban_end = 1;
	}
	if (n > 2) { /* T 1, min_p, penalties and a clamped bias, the token's logprob */
		r[2].u = 0.05;
		r[2].min_p = 0.05f;
		r[2].log_min_p = logf(0.05f);
		r[2].n_logprobs = 0;
		r[2].frequency_penalty = 0.3f;
		r[2].pen_begin = 3;
		r[2].pen_end = 6;
		r[2].bias_begin = 2;
		r[2].bias_end = 3;
		r[2].ban_begin = r[2].ban_end = 1;
	}
	if (n > 3) { /* T 1.2, top_k 5, all ranges [0, 0) */
		r[3].u = 0.66;
		r[3].inv_temperature = 1.0f / 1.2f;
		r[3].top_k = 5;
		r[3].n_logprobs = 3;
	}
}

/* engine_forward_sample on the GPU (k_sample over the logits left on the
 * device) against k_sample_ref over engine_forward's logits of the same step
 * (run first; the second run rewrites the same KV values, and both take the
 * same path: eager for the prefill step, whose logits rows are not 0..n-1,
 * the graph for the decode steps unless eager), as test_cuda_sample checks
 * the kernel: tokens identical unless the draw lies within 1e-5 of a
 * cumulative boundary (then a neighbour is accepted), logprobs within 1e-4,
 * ranks and top ids exact. */
static void device_sampling(const struct model *m, bool eager)
{
	const int V = m->cfg.vocab;
	struct engine *e = NULL;
	struct diag d = { 0 };
	struct engine_opts o = opts(ENGINE_DEVICE_CUDA, DT_F16);
	o.enforce_eager = eager;
	if (engine_create(m, &o, &e, &d)) {
		CHECK(0, "CUDA engine: %s", d.msg);
		return;
	}
	CHECK(engine_samples_on_device(e), "the CUDA engine should sample on the device");
	float *logits = malloc((size_t)MAXS * V * sizeof(float));
	static struct seq s[4];
	static const int prompts[4] = { 20, 33, 1, 17 };
	struct seq *ptr[4];
	for (int i = 0; i < 4; i++) {
		seq_init(&s[i], i, prompts[i], V);
		ptr[i] = &s[i];
	}
	/* prefill all four (rows 19, 52, 53, 70), then decode 4, 3, 4, 1 */
	const int n_seqs[5] = { 4, 4, 3, 4, 1 };
	int compared = 0, boundary = 0;
	for (int st = 0; st < 5; st++) {
		const int n = n_seqs[st];
		int n_new[4];
		for (int i = 0; i < n; i++)
			n_new[i] = s[i].n_toks - s[i].ctx;
		struct bbuf w;
		struct engine_batch b = make_batch(&w, ptr, n_new, n);
		struct k_sample_row rows[4];
		sample_rows(rows, n);
		int32_t tok[4], rank[4], ref_tok[4], ref_rank[4];
		int32_t top[4 * K_SAMPLE_MAX_TOP], ref_top[4 * K_SAMPLE_MAX_TOP];
		float lp[4], ref_lp[4], top_lp[4 * K_SAMPLE_MAX_TOP], ref_top_lp[4 * K_SAMPLE_MAX_TOP];
		struct k_sample_ref_info info[4];
		struct k_sample_args a = { .n_rows = n, .vocab = V, .rows = rows, .pen = g_pen,
					   .bias = g_bias, .ban = g_ban, .token = tok, .logprob = lp,
					   .rank = rank, .top_ids = top, .top_logprobs = top_lp };
		struct k_sample_args h = a;
		h.logits = logits;
		h.token = ref_tok;
		h.logprob = ref_lp;
		h.rank = ref_rank;
		h.top_ids = ref_top;
		h.top_logprobs = ref_top_lp;
		int rc = engine_forward(e, &b, logits);
		CHECK(rc == 0 && b.n_logits == n, "sampling step %d: forward rc %d rows %d", st, rc,
		      b.n_logits);
		if (rc || b.n_logits != n)
			break;
		rc = k_sample_ref(&h, info);
		CHECK(rc == 0, "sampling step %d: k_sample_ref %d", st, rc);
		rc = rc ? rc : engine_forward_sample(e, &b, &a);
		CHECK(rc == 0, "sampling step %d: engine_forward_sample %d", st, rc);
		if (rc)
			break;
		for (int i = 0; i < n; i++) {
			if (tok[i] != ref_tok[i]) {
				bool near = info[i].margin < 1e-5 &&
					    (tok[i] == info[i].prev || tok[i] == info[i].next);
				CHECK(near, "sampling step %d row %d: token %d, reference %d (margin %.3g)",
				      st, i, tok[i], ref_tok[i], info[i].margin);
				boundary += near;
				continue;
			}
			compared++;
			if (rows[i].n_logprobs < 0)
				continue;
			bool ok = fabsf(lp[i] - ref_lp[i]) <= 1e-4f && rank[i] == ref_rank[i];
			for (int j = 0; j < K_SAMPLE_MAX_TOP; j++) {
				const int k = i * K_SAMPLE_MAX_TOP + j;
				ok = ok && top[k] == ref_top[k] && fabsf(top_lp[k] - ref_top_lp[k]) <= 1e-4f;
			}
			CHECK(ok, "sampling step %d row %d: logprob %g ref %g, rank %d ref %d, top[0] %d "
			      "ref %d", st, i, lp[i], ref_lp[i], rank[i], ref_rank[i],
			      top[i * K_SAMPLE_MAX_TOP], ref_top[i * K_SAMPLE_MAX_TOP]);
		}
		for (int i = 0; i < n; i++) {
			s[i].ctx = w.ctx[i];
			s[i].toks[s[i].n_toks] = (s[i].n_toks * 13 + 5) % V;
			s[i].n_toks++;
		}
	}
	printf("device sampling (%s): %d rows identical, %d at a draw boundary\n",
	       eager ? "eager" : "graphs", compared, boundary);
	CHECK(compared + boundary == 16, "device sampling: %d rows of 16", compared + boundary);
	free(logits);
	engine_destroy(e);
}

int main(void)
{
	if (!engine_cuda_available()) {
		printf("test_cuda_engine: SKIP: no CUDA device visible\n");
		return 77;
	}
	struct model_config c;
	tmodel_config_small(&c);
	c.hidden = 256;
	c.n_heads = 4;
	c.n_kv_heads = 2;
	c.head_dim = 64;
	c.ffn = 512;
	c.vocab = 1000;
	c.n_layers = 2;
	compare_model("llama gqa f16 (neox)", &c, DT_F16, ROPE_STYLE_NEOX, DT_F16);
	compare_model("llama gqa f16, f32 kv", &c, DT_F16, ROPE_STYLE_NEOX, DT_F32);
	compare_model("llama gqa bf16 (norm layout)", &c, DT_BF16, ROPE_STYLE_NORM, DT_BF16);
	struct model_config q2 = c;
	q2.arch = ARCH_QWEN2;
	q2.qkv_bias = true;
	q2.hidden = 512;
	q2.n_heads = 8;
	q2.n_kv_heads = 1;
	compare_model("qwen2 bias, gqa 8", &q2, DT_F16, ROPE_STYLE_NEOX, DT_F16);
	struct model_config q3 = c;
	q3.arch = ARCH_QWEN3;
	q3.qk_norm = true;
	q3.head_dim = 128;
	q3.n_heads = 4;
	q3.n_kv_heads = 4;
	q3.tied_embeddings = true;
	compare_model("qwen3 qk-norm hd128 tied", &q3, DT_F16, ROPE_STYLE_NEOX, DT_F16);
	struct model_config l3 = c;
	l3.rope_scaling.type = ROPE_SCALING_LLAMA3;
	l3.rope_scaling.factor = 8;
	l3.rope_scaling.low_freq_factor = 1;
	l3.rope_scaling.high_freq_factor = 4;
	l3.rope_scaling.original_max_pos = 64;
	l3.rope_theta = 500000;
	compare_model("llama3 rope scaling", &l3, DT_F16, ROPE_STYLE_NEOX, DT_F16);
	/* issue 10: FP8 KV (3 mantissa bits on every K and V: a looser bound),
	 * 8-bit weights from the file and converted at load. The CPU engine
	 * quantizes activations for Q8_0/INT8 (W8A8) where the GPU's small-batch
	 * GEMV keeps them 16-bit; its prefill runs INT8/FP8 as W8A8 (the derivation above
	 * unit_roundoff counts both). */
	/* regression bounds (struct arith): scale-1 FP8 KV 0.15, checkpoint
	 * scales 0.05 (three times the emulator's 0.017; the wrong head's K
	 * scale gives 0.086), 8-bit weights 0.06 */
	const struct arith fp8kv = { .act = DT_F16, .kv = DT_F8_E4M3, .regress = 0.15 };
	const struct arith fp8kv_ck = { .act = DT_F16, .kv = DT_F8_E4M3, .regress = 0.05 };
	const struct arith a_q8 = { .act = DT_F16, .kv = DT_F16, .cpu_a8 = DT_I8, .regress = 0.06 };
	const struct arith a_i8 = { .act = DT_F16, .kv = DT_F16, .gpu_a8 = DT_I8, .cpu_a8 = DT_I8,
				    .regress = 0.06 };
	const struct arith a_f8 = { .act = DT_F16, .kv = DT_F16, .gpu_a8 = DT_F8_E4M3,
				    .regress = 0.06 };
	{ /* checkpoint scales (not powers of 2): K/V stored as value / scale */
		const size_t nl = (size_t)64 * c.vocab;
		float *plain = calloc(nl, sizeof(float)), *scaled = calloc(nl, sizeof(float));
		float *heads = calloc(nl, sizeof(float));
		compare_model_s("fp8 kv cache", &c, DT_F16, ROPE_STYLE_NEOX, DT_F8_E4M3, DT_F32,
				fp8kv, 0.0f, false, plain);
		compare_model_s("fp8 kv cache, checkpoint k/v scales", &c, DT_F16, ROPE_STYLE_NEOX,
				DT_F8_E4M3, DT_F32, fp8kv_ck, 0.0213f, false, scaled);
		compare_model_s("fp8 kv cache, checkpoint k/v scales per kv head", &c, DT_F16,
				ROPE_STYLE_NEOX, DT_F8_E4M3, DT_F32, fp8kv_ck, 0.0213f, true, heads);
		CHECK(plain && scaled && memcmp(plain, scaled, nl * sizeof(float)) != 0,
		      "fp8 kv cache: the checkpoint's k/v scales changed no logit");
		CHECK(scaled && heads && memcmp(scaled, heads, nl * sizeof(float)) != 0,
		      "fp8 kv cache: the per-head scales changed no logit");
		free(plain);
		free(scaled);
		free(heads);
	}
	compare_model_q("q8_0 weights", &c, DT_Q8_0, ROPE_STYLE_NEOX, DT_F16, DT_F32, a_q8);
	compare_model_q("int8 weights", &c, DT_I8, ROPE_STYLE_NEOX, DT_F16, DT_F32, a_i8);
	compare_model_q("fp8 weights", &c, DT_F8_E4M3, ROPE_STYLE_NEOX, DT_F16, DT_F32, a_f8);
	compare_model_q("--quantization int8", &c, DT_F16, ROPE_STYLE_NEOX, DT_F16, DT_I8, a_i8);
	compare_model_q("--quantization fp8", &c, DT_F16, ROPE_STYLE_NEOX, DT_F16, DT_F8_E4M3,
			a_f8);

	/* the prefill (115 rows) of 8-bit weights runs W8A8: with fusion on, the
	 * norms and SwiGLU before it write codes, not 16-bit rows */
	fusion_bits("fusion, f16 weights", &c, DT_F16, DT_F32, false);
	fusion_bits("fusion, --quantization fp8", &c, DT_F16, DT_F8_E4M3, false);
	fusion_bits("fusion, --quantization int8", &c, DT_F16, DT_I8, false);
	fusion_bits("fusion, q8_0 weights", &c, DT_Q8_0, DT_F32, false);

	struct tmodel_opts to = { .wdtype = DT_F16, .seed = 11, .layout = ROPE_STYLE_NEOX,
				  .head_gain = 4 };
	struct model *m = NULL;
	if (tmodel_create(&c, &to, &m) == 0) {
		batch_invariance(m, false);
		batch_invariance(m, true);
		graphs_vs_eager(m);
		misc(m);
		device_sampling(m, false);
		device_sampling(m, true);
		tmodel_destroy(m);
	} else {
		CHECK(0, "tmodel_create");
	}
	/* Under the emulator, cuBLASLt finds no algorithm: the fused prefill,
	 * whose norm and SwiGLU wrote only codes, makes its 16-bit rows after
	 * all for the dequantizing GEMM (project). Last: k_gemm_w8a8 remembers
	 * the refusal of its FP8 scale modes for the process. On a GPU the
	 * variable means nothing and this repeats the case above. */
	fusion_bits("fusion, --quantization fp8, cuBLASLt refuses", &c, DT_F16, DT_F8_E4M3, true);
	printf("%s: %d failures\n", g_fail ? "FAIL" : "PASS", g_fail);
	return g_fail ? 1 : 0;
}
