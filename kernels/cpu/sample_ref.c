/* kernels/cpu/sample_ref.c — the reference of k_sample (kernels/sample.h): a
 * thin driver that runs, one row at a time, the sequential chain of
 * kernels/sample_seq.h that engine/sample/sampler.c runs too. What is its own:
 * reading the flat rows and CSR entries (bans, bias, penalties), the scalar
 * exp pass (sampler.c's is SIMD), and the draw's neighbours for the tests
 * (k_sample_ref_info). Every rule that decides a token or a value is
 * sample_seq.h's. Tests: tests/sampling/test_sample_device.c (against
 * sampler_sample), tests/kernels/test_cuda_sample.c (the kernel against this).
 */
#include "kernels/cpu/sample_ref.h"

#include <math.h>
#include <stdlib.h>

#include "common/err.h"
#include "kernels/sample_seq.h"

/* Bans, bias, penalties, temperature, sanitize; returns the max, *argmax its
 * lowest index. */
static float process_row(const struct k_sample_args *a, const struct k_sample_row *rw,
			 float *l, int32_t *argmax)
{
	int vocab = a->vocab;
	for (int32_t i = rw->ban_begin; i < rw->ban_end; i++) {
		int32_t t = a->ban[i];
		if (t >= 0 && t < vocab)
			l[t] = -INFINITY;
	}
	for (int32_t i = rw->bias_begin; i < rw->bias_end; i++) {
		int32_t t = a->bias[i].token;
		if (t >= 0 && t < vocab)
			l[t] = ks_biased(l[t], a->bias[i].bias);
	}
	for (int32_t i = rw->pen_begin; i < rw->pen_end; i++) {
		const struct k_sample_pen *e = &a->pen[i];
		if (e->token >= 0 && e->token < vocab)
			l[e->token] = ks_penalized(l[e->token], rw->repetition_penalty,
						   rw->frequency_penalty, rw->presence_penalty,
						   e->in_prompt != 0, e->n_gen);
	}
	float inv_t = rw->greedy ? 1.0f : rw->inv_temperature;
	float mx = -INFINITY;
	for (int i = 0; i < vocab; i++) {
		l[i] = ks_scaled(l[i], inv_t);
		mx = l[i] > mx ? l[i] : mx;
	}
	*argmax = ks_first_max(l, vocab, mx);
	return mx;
}

/* The kept tokens with weight before / after position i of the draw. */
static void set_neighbours(struct k_sample_ref_info *info, const struct ks_cands *c,
			   const float *prob, int i)
{
	info->prev = info->next = -1;
	for (int j = i - 1; j >= 0 && info->prev < 0; j--)
		if (prob[ks_cand_at(c, j)] > 0.0f)
			info->prev = ks_cand_at(c, j);
	for (int j = i + 1; j < c->n && info->next < 0; j++)
		if (prob[ks_cand_at(c, j)] > 0.0f)
			info->next = ks_cand_at(c, j);
}

static void set_info(struct k_sample_ref_info *info, const struct ks_drawn *d, const float *prob,
		     int32_t tok)
{
	info->margin = d->mass > 0.0 ? d->margin / d->mass : 0.0;
	for (int i = 0; i < d->c.n; i++)
		if (ks_cand_at(&d->c, i) == tok) {
			set_neighbours(info, &d->c, prob, i);
			return;
		}
}

static void fill_logprobs(const struct k_sample_args *a, int r, const float *l, double logz)
{
	int32_t top[K_SAMPLE_MAX_TOP];
	int have;
	int32_t tok = a->token[r];
	a->logprob[r] = ks_lp_clamp((double)l[tok] - logz);
	a->rank[r] = ks_rank_top(l, a->vocab, tok, a->rows[r].n_logprobs, top, &have);
	for (int i = 0; i < have; i++) {
		a->top_ids[(size_t)r * K_SAMPLE_MAX_TOP + i] = top[i];
		a->top_logprobs[(size_t)r * K_SAMPLE_MAX_TOP + i] = ks_lp_clamp((double)l[top[i]] - logz);
	}
}

static void sample_row(const struct k_sample_args *a, int r, struct ks_work *w,
		       struct k_sample_ref_info *info)
{
	const struct k_sample_row *rw = &a->rows[r];
	int vocab = a->vocab;
	float *l = a->logits + (size_t)r * vocab;
	a->token[r] = -1;
	a->logprob[r] = 0.0f;
	a->rank[r] = 0;
	for (int i = 0; i < K_SAMPLE_MAX_TOP; i++) {
		a->top_ids[(size_t)r * K_SAMPLE_MAX_TOP + i] = -1;
		a->top_logprobs[(size_t)r * K_SAMPLE_MAX_TOP + i] = 0.0f;
	}
	if (info)
		*info = (struct k_sample_ref_info){ .margin = 0.0, .prev = -1, .next = -1 };

	int32_t tok;
	float mx = process_row(a, rw, l, &tok);
	if (mx == -INFINITY)
		return;
	double total = ks_exp_pass(w->prob, l, vocab, mx, w->block_mass);
	if (!rw->greedy) {
		struct ks_trunc t = { .min_p = rw->min_p,
				      .log_min_p = rw->log_min_p,
				      .top_k = rw->top_k,
				      .top_p = rw->top_p };
		struct ks_drawn d;
		tok = ks_sample_truncated(&t, l, vocab, mx, w, true, total, rw->u, &d);
		if (info && tok >= 0)
			set_info(info, &d, w->prob, tok);
	}
	a->token[r] = tok;
	if (tok >= 0 && rw->n_logprobs >= 0)
		fill_logprobs(a, r, l, ks_logz(mx, total));
}

static int check_args(const struct k_sample_args *a)
{
	if (!a || a->n_rows < 0 || a->vocab <= 0 || (a->n_rows > 0 && (!a->logits || !a->rows ||
	    !a->token || !a->logprob || !a->rank || !a->top_ids || !a->top_logprobs)))
		return ERR_INVAL;
	for (int r = 0; r < a->n_rows; r++) {
		const struct k_sample_row *rw = &a->rows[r];
		if (rw->n_logprobs > K_SAMPLE_MAX_TOP || rw->pen_begin > rw->pen_end ||
		    rw->bias_begin > rw->bias_end || rw->ban_begin > rw->ban_end ||
		    rw->pen_begin < 0 || rw->bias_begin < 0 || rw->ban_begin < 0 ||
		    (rw->pen_end > rw->pen_begin && !a->pen) ||
		    (rw->bias_end > rw->bias_begin && !a->bias) ||
		    (rw->ban_end > rw->ban_begin && !a->ban))
			return ERR_INVAL;
	}
	return 0;
}

int k_sample_ref(const struct k_sample_args *a, struct k_sample_ref_info *info)
{
	int rc = check_args(a);
	if (rc)
		return rc;
	size_t v = (size_t)a->vocab;
	struct ks_work w = { .prob = malloc(v * sizeof(float)),
			     .block_mass = malloc((v / KS_BLOCK + 1) * sizeof(double)),
			     .buf = { malloc(v * sizeof(int32_t)), malloc(v * sizeof(int32_t)) },
			     .hn = malloc(KS_NB * sizeof(uint32_t)),
			     .hm = malloc(KS_NB * sizeof(double)) };
	if (!w.prob || !w.block_mass || !w.buf[0] || !w.buf[1] || !w.hn || !w.hm) {
		rc = ERR_NOMEM;
	} else {
		for (int r = 0; r < a->n_rows; r++)
			sample_row(a, r, &w, info ? &info[r] : NULL);
	}
	free(w.prob);
	free(w.block_mass);
	free(w.buf[0]);
	free(w.buf[1]);
	free(w.hn);
	free(w.hm);
	return rc;
}
