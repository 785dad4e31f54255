/* tests/kernels/test_cuda_sample.c — k_sample (kernels/sample.h)
 * against k_sample_ref (kernels/cpu/sample_ref.h) on the same inputs.
 *
 * Batches of several hundred rows (more than K_SAMPLE_MAX_CTAS, so CTAs loop
 * over rows) with vocab 1001 (a ragged last 64-token block), 32000 and
 * 152064; each row gets its own parameters (greedy, temperature, min_p, top_k
 * on the heap and histogram paths, top_p small / head / bucket paths,
 * penalties, bias with repeated ids, bans, 0..20 logprobs) and its own logit
 * shape (spread, peaked, ties, flat, all equal, -inf / NaN / +inf / huge
 * values, one row all -inf).
 *
 * Checks, per row:
 *   processed logits: the kernel does the reference's float operations one by
 *     one (no FMA contraction), so they should be bit-identical; the check
 *     allows 1e-6 relative so one stray ulp is reported but does not fail;
 *   token: identical, except when the reference's u * mass lies within 1e-5
 *     of the mass from a cumulative boundary (the kernel sums doubles in
 *     another order, ~1e-16 relative, and its per-token walk is the CPU's);
 *     then either neighbour in the draw order is accepted and counted;
 *   logprob of the token, rank, top ids (exact; the order is total: logprob
 *     desc, id asc) and top logprobs within 1e-4 (both sides compute
 *     logit - (max + log(sum)) in double from the same float logits; only
 *     the summation order and libm's log differ, ~1e-12).
 * Also: argument errors. Prints the kernel's time per batch. Exit 77 without
 * a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "kernels/cpu/sample_ref.h"
#include "kernels/cuda/kcuda.h"
#include "kernels/sample.h"
#include "tests/kernels/kcheck.h"

#define BOUNDARY_TOL 1e-5 /* relative mass within which a neighbour is accepted */
#define LP_TOL 1e-4f

static void *xmalloc(size_t bytes)
{
	void *p = calloc(1, bytes ? bytes : 1);
	if (!p)
		kc_fail("out of memory (%zu bytes)", bytes);
	return p;
}

/* 53-bit u like rng_uniform. */
static double unif53(struct kc_rng *r)
{
	uint64_t hi = kc_below(r, 1u << 26), lo = kc_below(r, 1u << 27);
	return (double)((hi << 27) | lo) * 0x1.0p-53;
}

static void fill_logits(struct kc_rng *r, float *l, int vocab, int kind)
{
	float scale = kc_uniform(r, 0.5f, 8.5f);
	for (int i = 0; i < vocab; i++) {
		float x = (kc_uniform(r, 0, 1) + kc_uniform(r, 0, 1) + kc_uniform(r, 0, 1) - 1.5f) *
			  scale;
		switch (kind) {
		case 1:
			if (kc_below(r, 200) == 0)
				x += 12.0f;
			break;
		case 2:
			x = roundf(x * 2.0f) / 2.0f;
			break;
		case 3:
			x = kc_uniform(r, 0.0f, 0.05f);
			break;
		case 4:
			x = 1.0f;
			break;
		case 6:
			x = -INFINITY;
			break;
		default:
			break;
		}
		l[i] = x;
	}
	if (kind == 6)
		return;
	if (kc_below(r, 3) == 0) {
		int n = 1 + (int)kc_below(r, (uint32_t)vocab / 10);
		for (int k = 0; k < n; k++)
			l[kc_below(r, (uint32_t)vocab)] = -INFINITY;
	}
	if (kc_below(r, 8) == 0) {
		l[kc_below(r, (uint32_t)vocab)] = NAN;
		l[kc_below(r, (uint32_t)vocab)] = 1e30f;
		l[kc_below(r, (uint32_t)vocab)] = -1e30f;
	}
	if (kc_below(r, 16) == 0)
		l[kc_below(r, (uint32_t)vocab)] = INFINITY;
}

struct lists {
	struct k_sample_pen *pen;
	struct k_sample_bias *bias;
	int32_t *ban;
	int n_pen, n_bias, n_ban;
};

static void random_row(struct kc_rng *r, struct k_sample_row *rw, int vocab, struct lists *ls)
{
	memset(rw, 0, sizeof(*rw));
	rw->u = unif53(r);
	rw->greedy = kc_below(r, 6) == 0;
	float temp = kc_uniform(r, 0.1f, 2.0f);
	rw->inv_temperature = rw->greedy ? 1.0f : 1.0f / temp;
	rw->top_p = kc_below(r, 2) ? kc_uniform(r, 0.05f, 0.99f) : 1.0f;
	if (kc_below(r, 3) == 0) {
		rw->min_p = kc_uniform(r, 0.0005f, 0.3f);
		rw->log_min_p = logf(rw->min_p);
	}
	switch (kc_below(r, 6)) {
	case 0: rw->top_k = -1; break;
	case 1: rw->top_k = 1 + (int)kc_below(r, 50); break;
	case 2: rw->top_k = 100 + (int)kc_below(r, 900); break;
	case 3: rw->top_k = 1025 + (int)kc_below(r, (uint32_t)vocab); break;
	case 4: rw->top_k = 0; break;
	default: rw->top_k = vocab - 1; break;
	}
	rw->repetition_penalty = kc_below(r, 2) ? kc_uniform(r, 0.5f, 2.0f) : 1.0f;
	rw->frequency_penalty = kc_below(r, 2) ? kc_uniform(r, -2.0f, 2.0f) : 0.0f;
	rw->presence_penalty = kc_below(r, 2) ? kc_uniform(r, -2.0f, 2.0f) : 0.0f;
	rw->n_logprobs = (int)kc_below(r, 22) - 1;

	/* penalty entries: distinct tokens (7919 is prime to every vocab used) */
	rw->pen_begin = ls->n_pen;
	int n_pen = kc_below(r, 2) ? (int)kc_below(r, 300) : 0;
	int start = (int)kc_below(r, (uint32_t)vocab);
	for (int j = 0; j < n_pen; j++) {
		struct k_sample_pen *e = &ls->pen[ls->n_pen++];
		e->token = (int32_t)(((int64_t)start + (int64_t)j * 7919) % vocab);
		e->n_gen = kc_below(r, 3) ? kc_below(r, 5) : 0;
		e->in_prompt = kc_below(r, 2);
	}
	rw->pen_end = ls->n_pen;
	rw->bias_begin = ls->n_bias;
	int n_bias = kc_below(r, 3) == 0 ? 1 + (int)kc_below(r, 12) : 0;
	for (int j = 0; j < n_bias; j++) {
		struct k_sample_bias *b = &ls->bias[ls->n_bias++];
		b->token = j > 0 && kc_below(r, 4) == 0 ? b[-1].token
							 : (int32_t)kc_below(r, (uint32_t)vocab);
		b->bias = kc_uniform(r, -150.0f, 150.0f);
	}
	rw->bias_end = ls->n_bias;
	rw->ban_begin = ls->n_ban;
	int n_ban = kc_below(r, 4) == 0 ? 1 + (int)kc_below(r, 5) : 0;
	for (int j = 0; j < n_ban; j++)
		ls->ban[ls->n_ban++] = (int32_t)kc_below(r, (uint32_t)vocab);
	rw->ban_end = ls->n_ban;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void run_batch(int vocab, int n_rows, uint64_t seed)
{
	struct kc_rng r;
	kc_seed(&r, seed);
	size_t nl = (size_t)n_rows * (size_t)vocab;
	float *logits = xmalloc(nl * sizeof(float));
	float *ref_l = xmalloc(nl * sizeof(float));
	float *got_l = xmalloc(nl * sizeof(float));
	struct k_sample_row *rows = xmalloc((size_t)n_rows * sizeof(*rows));
	struct lists ls = {
		.pen = xmalloc((size_t)n_rows * 300 * sizeof(struct k_sample_pen)),
		.bias = xmalloc((size_t)n_rows * 12 * sizeof(struct k_sample_bias)),
		.ban = xmalloc((size_t)n_rows * 5 * sizeof(int32_t)),
	};
	for (int i = 0; i < n_rows; i++) {
		int kind = i == 7 ? 6 : (int)kc_below(&r, 6);
		fill_logits(&r, logits + (size_t)i * vocab, vocab, kind);
		random_row(&r, &rows[i], vocab, &ls);
	}
	memcpy(ref_l, logits, nl * sizeof(float));

	/* reference */
	int32_t *ref_tok = xmalloc((size_t)n_rows * 4), *ref_rank = xmalloc((size_t)n_rows * 4);
	float *ref_lp = xmalloc((size_t)n_rows * 4);
	int32_t *ref_top = xmalloc((size_t)n_rows * K_SAMPLE_MAX_TOP * 4);
	float *ref_toplp = xmalloc((size_t)n_rows * K_SAMPLE_MAX_TOP * 4);
	struct k_sample_ref_info *info = xmalloc((size_t)n_rows * sizeof(*info));
	struct k_sample_args ha = {
		.logits = ref_l, .n_rows = n_rows, .vocab = vocab, .rows = rows,
		.pen = ls.pen, .bias = ls.bias, .ban = ls.ban,
		.token = ref_tok, .logprob = ref_lp, .rank = ref_rank,
		.top_ids = ref_top, .top_logprobs = ref_toplp,
	};
	kc_ok(k_sample_ref(&ha, info), "k_sample_ref");

	/* device */
	size_t ws_bytes = k_sample_workspace_bytes(n_rows, vocab);
	struct k_sample_args da = {
		.logits = kc_upload(logits, nl * sizeof(float)),
		.n_rows = n_rows, .vocab = vocab,
		.rows = kc_upload(rows, (size_t)n_rows * sizeof(*rows)),
		.pen = kc_upload(ls.pen, (size_t)(ls.n_pen ? ls.n_pen : 1) * sizeof(*ls.pen)),
		.bias = kc_upload(ls.bias, (size_t)(ls.n_bias ? ls.n_bias : 1) * sizeof(*ls.bias)),
		.ban = kc_upload(ls.ban, (size_t)(ls.n_ban ? ls.n_ban : 1) * sizeof(*ls.ban)),
		.workspace = kc_dev_alloc(ws_bytes), .workspace_bytes = ws_bytes,
		.token = kc_dev_alloc((size_t)n_rows * 4),
		.logprob = kc_dev_alloc((size_t)n_rows * 4),
		.rank = kc_dev_alloc((size_t)n_rows * 4),
		.top_ids = kc_dev_alloc((size_t)n_rows * K_SAMPLE_MAX_TOP * 4),
		.top_logprobs = kc_dev_alloc((size_t)n_rows * K_SAMPLE_MAX_TOP * 4),
	};
	kc_ok(k_sample(NULL, &da), "k_sample");
	kc_sync("k_sample");
	int32_t *tok = xmalloc((size_t)n_rows * 4), *rank = xmalloc((size_t)n_rows * 4);
	float *lp = xmalloc((size_t)n_rows * 4);
	int32_t *top = xmalloc((size_t)n_rows * K_SAMPLE_MAX_TOP * 4);
	float *toplp = xmalloc((size_t)n_rows * K_SAMPLE_MAX_TOP * 4);
	kc_download(got_l, da.logits, nl * sizeof(float));
	kc_download(tok, da.token, (size_t)n_rows * 4);
	kc_download(rank, da.rank, (size_t)n_rows * 4);
	kc_download(lp, da.logprob, (size_t)n_rows * 4);
	kc_download(top, da.top_ids, (size_t)n_rows * K_SAMPLE_MAX_TOP * 4);
	kc_download(toplp, da.top_logprobs, (size_t)n_rows * K_SAMPLE_MAX_TOP * 4);

	/* timing: the same batch again from the original logits */
	kc_ok(k_cuda_memcpy_h2d((void *)da.logits, logits, nl * sizeof(float)), "h2d");
	kc_sync("h2d");
	double t0 = now_ms();
	kc_ok(k_sample(NULL, &da), "k_sample (timed)");
	kc_sync("k_sample (timed)");
	double ms = now_ms() - t0;

	/* processed logits: -inf and FLT_MAX compare by equality first */
	size_t bits_diff = 0, bad_l = 0;
	for (size_t i = 0; i < nl; i++) {
		if (memcmp(&got_l[i], &ref_l[i], 4) == 0)
			continue;
		bits_diff++;
		if (!(fabsf(got_l[i] - ref_l[i]) <= 1e-6f * fabsf(ref_l[i]))) {
			if (bad_l < 8)
				printf("  logits[%zu] (row %zu): got %.9g ref %.9g\n", i,
				       i / (size_t)vocab, got_l[i], ref_l[i]);
			bad_l++;
		}
	}
	float z = 0.0f;
	kc_compare("processed logits beyond 1e-6 relative", (float[]){ (float)bad_l }, &z, 1, 0, 0);

	/* tokens and logprobs */
	int boundary = 0, bad_tok = 0, bad_lp = 0;
	for (int i = 0; i < n_rows; i++) {
		const struct k_sample_row *rw = &rows[i];
		bool same = tok[i] == ref_tok[i];
		if (!same) {
			bool near = info[i].margin < BOUNDARY_TOL &&
				    (tok[i] == info[i].prev || tok[i] == info[i].next);
			if (near) {
				boundary++;
			} else {
				if (bad_tok < 8)
					printf("  row %d: token %d, ref %d (margin %.3g, "
					       "neighbours %d %d) greedy %d k %d p %g min_p %g\n",
					       i, tok[i], ref_tok[i], info[i].margin, info[i].prev,
					       info[i].next, rw->greedy, rw->top_k, rw->top_p,
					       rw->min_p);
				bad_tok++;
			}
			continue;
		}
		if (ref_tok[i] < 0 || rw->n_logprobs < 0)
			continue;
		bool ok = fabsf(lp[i] - ref_lp[i]) <= LP_TOL && rank[i] == ref_rank[i];
		for (int j = 0; j < K_SAMPLE_MAX_TOP; j++) {
			size_t o = (size_t)i * K_SAMPLE_MAX_TOP + (size_t)j;
			ok = ok && top[o] == ref_top[o] && fabsf(toplp[o] - ref_toplp[o]) <= LP_TOL;
		}
		if (!ok) {
			if (bad_lp < 8)
				printf("  row %d: logprob %g ref %g, rank %d ref %d, top[0] %d ref %d\n",
				       i, lp[i], ref_lp[i], rank[i], ref_rank[i],
				       top[(size_t)i * K_SAMPLE_MAX_TOP],
				       ref_top[(size_t)i * K_SAMPLE_MAX_TOP]);
			bad_lp++;
		}
	}
	if (n_rows > 7 && (ref_tok[7] != -1 || tok[7] != -1))
		kc_fail("row 7 (all -inf) should give token -1 (ref %d, got %d)", ref_tok[7], tok[7]);
	kc_compare("tokens", (float[]){ (float)bad_tok }, &z, 1, 0, 0);
	kc_compare("logprobs, ranks, top logprobs", (float[]){ (float)bad_lp }, &z, 1, 0, 0);
	printf("vocab %6d rows %4d: %.3f ms per batch (incl. launch), %d tokens at a boundary, "
	       "%zu logits differ in bits\n", vocab, n_rows, ms, boundary, bits_diff);

	kc_dev_free(da.logits);
	kc_dev_free((void *)da.rows);
	kc_dev_free((void *)da.pen);
	kc_dev_free((void *)da.bias);
	kc_dev_free((void *)da.ban);
	kc_dev_free(da.workspace);
	kc_dev_free(da.token);
	kc_dev_free(da.logprob);
	kc_dev_free(da.rank);
	kc_dev_free(da.top_ids);
	kc_dev_free(da.top_logprobs);
	free(logits), free(ref_l), free(got_l), free(rows);
	free(ls.pen), free(ls.bias), free(ls.ban);
	free(ref_tok), free(ref_rank), free(ref_lp), free(ref_top), free(ref_toplp), free(info);
	free(tok), free(rank), free(lp), free(top), free(toplp);
}

static void check_errors(void)
{
	struct k_sample_args a = { 0 };
	if (k_sample(NULL, NULL) != ERR_INVAL)
		kc_fail("k_sample(NULL) should be ERR_INVAL");
	a.vocab = 0;
	a.n_rows = 1;
	if (k_sample(NULL, &a) != ERR_INVAL)
		kc_fail("vocab 0 should be ERR_INVAL");
	a.vocab = 100;
	a.n_rows = 0;
	if (k_sample(NULL, &a) != 0)
		kc_fail("an empty batch should be a no-op");
	a.n_rows = 1;
	if (k_sample(NULL, &a) != ERR_INVAL)
		kc_fail("NULL buffers should be ERR_INVAL");
	if (k_sample_workspace_bytes(0, 10) != 0 || k_sample_workspace_bytes(1000, 10) !=
	    k_sample_workspace_bytes(K_SAMPLE_MAX_CTAS, 10))
		kc_fail("k_sample_workspace_bytes");
}

int main(void)
{
	kc_require_gpu("test_cuda_sample");
	check_errors();
	run_batch(1001, 300, 1);
	run_batch(32000, 300, 2);
	run_batch(152064, 200, 3);
	return kc_finish();
}
