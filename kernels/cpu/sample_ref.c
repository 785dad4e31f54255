/* kernels/cpu/sample_ref.c — the reference of k_sample (kernels/sample.h): one
 * row at a time, sequentially, in the order engine/sample/sampler.c works. The
 * pieces whose layout or rounding decides the token are in sample_seq.h,
 * shared with the kernel. Tests: tests/sampling/test_sample_device.c,
 * tests/kernels/test_cuda_sample.c.
 */
#include "kernels/cpu/sample_ref.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/sample_seq.h"

struct ref_scratch {
	int32_t *buf[2]; /* [vocab] each: candidate lists */
	uint32_t hn[KS_NB];
	double hm[KS_NB];
};

/* A candidate list: ids[0..n), or 0..n-1 when ids is NULL. */
struct cands {
	int32_t *ids;
	int n;
};

static inline int32_t cand_at(const struct cands *c, int i)
{
	return c->ids ? c->ids[i] : i;
}

/* The buffer c does not use. */
static int32_t *other_buf(struct ref_scratch *sc, const struct cands *c)
{
	return c->ids == sc->buf[0] ? sc->buf[1] : sc->buf[0];
}

/* ---- processing: bans, bias, penalties, temperature, sanitize -------------- */

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
		float b = a->bias[i].bias;
		if (t < 0 || t >= vocab || isnan(b))
			continue;
		b = b > KS_BIAS_MAX ? KS_BIAS_MAX : b < -KS_BIAS_MAX ? -KS_BIAS_MAX : b;
		l[t] += b;
	}
	float r = rw->repetition_penalty;
	for (int32_t i = rw->pen_begin; i < rw->pen_end; i++) {
		const struct k_sample_pen *e = &a->pen[i];
		if (e->token < 0 || e->token >= vocab)
			continue;
		float x = l[e->token];
		if (r != 1.0f && (e->in_prompt || e->n_gen > 0))
			x = x > 0.0f ? x / r : x * r;
		if (e->n_gen > 0)
			x -= rw->frequency_penalty * (float)e->n_gen + rw->presence_penalty;
		l[e->token] = x;
	}
	float inv_t = rw->greedy ? 1.0f : rw->inv_temperature;
	float mx = -INFINITY;
	for (int i = 0; i < vocab; i++) {
		float x = l[i] * inv_t;
		if (isnan(x))
			x = -INFINITY;
		else if (x > FLT_MAX)
			x = FLT_MAX;
		l[i] = x;
		mx = x > mx ? x : mx;
	}
	int32_t best = 0;
	while (best < vocab - 1 && l[best] != mx)
		best++;
	*argmax = best;
	return mx;
}

/* ---- truncation (sampler.c's sample_truncated) ------------------------------ */

static void sort_desc(int32_t *v, int n, const float *l)
{
	/* heapsort: the root is the last in the order, moved to the end */
	ks_heapify(v, n, l);
	for (int end = n - 1; end > 0; end--) {
		int32_t t = v[0];
		v[0] = v[end];
		v[end] = t;
		ks_heap_sift(v, end, 0, l);
	}
}

static void top_k_heap(struct cands *c, int k, const float *l, int32_t *dst)
{
	for (int i = 0; i < k; i++)
		dst[i] = cand_at(c, i);
	ks_heapify(dst, k, l);
	for (int i = k; i < c->n; i++) {
		int32_t t = cand_at(c, i);
		if (ks_before(l, t, dst[0])) {
			dst[0] = t;
			ks_heap_sift(dst, k, 0, l);
		}
	}
	c->ids = dst;
	c->n = k;
}

/* Candidates in buckets < B to dst[0..), bucket B to dst[n_before..). */
static int gather(const struct cands *c, const float *l, float mx, int B, int32_t *dst,
		  int n_before)
{
	int lo = 0, eq = n_before;
	for (int i = 0; i < c->n; i++) {
		int32_t t = cand_at(c, i);
		int b = ks_bucket(mx, l[t]);
		if (b < B)
			dst[lo++] = t;
		else if (b == B)
			dst[eq++] = t;
	}
	return eq - n_before;
}

static void top_k_hist(struct cands *c, int k, const float *l, float mx, struct ref_scratch *sc,
		       int32_t *dst)
{
	memset(sc->hn, 0, sizeof(sc->hn));
	for (int i = 0; i < c->n; i++)
		sc->hn[ks_bucket(mx, l[cand_at(c, i)])]++;
	int B = 0, n_before = 0;
	while (B < KS_NB - 1 && n_before + (int)sc->hn[B] < k)
		n_before += (int)sc->hn[B++];
	int n_eq = gather(c, l, mx, B, dst, n_before);
	ks_select_top(dst + n_before, n_eq, k - n_before, l);
	c->ids = dst;
	c->n = k;
}

static void top_p(struct cands *c, float p, double mass, const float *l, float mx,
		  struct ref_scratch *sc, int32_t *dst)
{
	double target = (double)p * mass, cum = 0.0;
	int n_before = 0, n_eq;
	int32_t *seg = dst;
	if (c->n <= KS_TOP_P_SMALL) {
		for (int i = 0; i < c->n; i++)
			dst[i] = cand_at(c, i);
		n_eq = c->n;
	} else {
		/* the nucleus among the 64 most likely? */
		struct cands head = *c;
		top_k_heap(&head, KS_TOP_P_HEAD, l, dst);
		sort_desc(dst, KS_TOP_P_HEAD, l);
		double hc = 0.0;
		for (int j = 0; j < KS_TOP_P_HEAD; j++) {
			hc += (double)ks_prob(l, dst[j], mx);
			if (hc >= target) {
				c->ids = dst;
				c->n = j + 1;
				return;
			}
		}
		memset(sc->hn, 0, sizeof(sc->hn));
		memset(sc->hm, 0, sizeof(sc->hm));
		for (int i = 0; i < c->n; i++) {
			int32_t t = cand_at(c, i);
			int b = ks_bucket(mx, l[t]);
			sc->hn[b]++;
			sc->hm[b] += (double)ks_prob(l, t, mx);
		}
		int B = 0;
		while (B < KS_NB && cum + sc->hm[B] < target) {
			cum += sc->hm[B];
			n_before += (int)sc->hn[B++];
		}
		if (B == KS_NB)
			return; /* rounding: the whole set is the nucleus */
		n_eq = gather(c, l, mx, B, dst, n_before);
		seg = dst + n_before;
	}
	sort_desc(seg, n_eq, l);
	int keep = n_before + n_eq;
	for (int j = 0; j < n_eq; j++) {
		cum += (double)ks_prob(l, seg[j], mx);
		if (cum >= target) {
			keep = n_before + j + 1;
			break;
		}
	}
	c->ids = dst;
	c->n = keep;
}

/* ---- the draw -------------------------------------------------------------- */

static void set_info(struct k_sample_ref_info *info, double margin, double mass, int32_t prev,
		     int32_t next)
{
	if (!info)
		return;
	info->margin = mass > 0.0 ? margin / mass : 0.0;
	info->prev = prev;
	info->next = next;
}

static double dmin(double a, double b)
{
	return a < b ? a : b;
}

/* Neighbours with weight in index order. */
static int32_t prev_pos(const float *l, float mx, int32_t t)
{
	for (int32_t i = t - 1; i >= 0; i--)
		if (ks_prob(l, i, mx) > 0.0f)
			return i;
	return -1;
}

static int32_t next_pos(const float *l, float mx, int vocab, int32_t t)
{
	for (int32_t i = t + 1; i < vocab; i++)
		if (ks_prob(l, i, mx) > 0.0f)
			return i;
	return -1;
}

/* sampler.c's draw_all: blocks of 64 by their lane sums, then the tokens. */
static int32_t draw_all(const float *l, int vocab, float mx, double target, double mass,
			struct k_sample_ref_info *info)
{
	double cum = 0.0;
	int last_b0 = -1;
	for (int b0 = 0; b0 < vocab; b0 += KS_BLOCK) {
		int end = vocab - b0 < KS_BLOCK ? vocab : b0 + KS_BLOCK;
		double bs = ks_block_sum(l, mx, b0, end);
		if (bs <= 0.0)
			continue;
		last_b0 = b0;
		if (cum + bs > target) {
			double c = cum;
			for (int i = b0; i < end; i++) {
				double w = (double)ks_prob(l, i, mx);
				if (w <= 0.0)
					continue;
				double before = c;
				c += w;
				if (c > target) {
					double m = dmin(target - before, c - target);
					m = dmin(m, dmin(fabs(target - cum), fabs(cum + bs - target)));
					set_info(info, m, mass, prev_pos(l, mx, i),
						 next_pos(l, mx, vocab, i));
					return i;
				}
			}
		}
		cum += bs;
	}
	if (last_b0 < 0)
		return -1;
	int end = vocab - last_b0 < KS_BLOCK ? vocab : last_b0 + KS_BLOCK;
	for (int i = end - 1; i >= last_b0; i--)
		if (ks_prob(l, i, mx) > 0.0f) {
			set_info(info, 0.0, mass, prev_pos(l, mx, i), -1);
			return i;
		}
	return -1;
}

static int32_t draw_list(const struct cands *c, const float *l, float mx, double target,
			 double mass, struct k_sample_ref_info *info)
{
	double cum = 0.0;
	int last = -1;
	for (int i = 0; i < c->n; i++) {
		double w = (double)ks_prob(l, cand_at(c, i), mx);
		if (w <= 0.0)
			continue;
		double before = cum;
		cum += w;
		if (cum > target) {
			int32_t prev = last >= 0 ? cand_at(c, last) : -1, next = -1;
			for (int j = i + 1; j < c->n && next < 0; j++)
				if (ks_prob(l, cand_at(c, j), mx) > 0.0f)
					next = cand_at(c, j);
			set_info(info, dmin(target - before, cum - target), mass, prev, next);
			return cand_at(c, i);
		}
		last = i;
	}
	if (last < 0)
		return -1;
	int32_t prev = -1;
	for (int j = last - 1; j >= 0 && prev < 0; j--)
		if (ks_prob(l, cand_at(c, j), mx) > 0.0f)
			prev = cand_at(c, j);
	set_info(info, 0.0, mass, prev, -1);
	return cand_at(c, last); /* u * mass rounded up to the total */
}

static double list_mass(const struct cands *c, const float *l, float mx)
{
	double m = 0.0;
	for (int i = 0; i < c->n; i++)
		m += (double)ks_prob(l, cand_at(c, i), mx);
	return m;
}

static int32_t sample_truncated(const struct k_sample_row *rw, const float *l, int vocab,
				float mx, double total, struct ref_scratch *sc,
				struct k_sample_ref_info *info)
{
	struct cands c = { NULL, vocab };
	if (rw->min_p > 0.0f) {
		float thr = mx + rw->log_min_p;
		int n = 0;
		for (int i = 0; i < vocab; i++)
			if (l[i] >= thr)
				sc->buf[0][n++] = i;
		c.ids = sc->buf[0];
		c.n = n;
	}
	if (rw->top_k > 0 && rw->top_k < c.n) {
		int32_t *dst = other_buf(sc, &c);
		if (rw->top_k <= KS_HEAP_K)
			top_k_heap(&c, rw->top_k, l, dst);
		else
			top_k_hist(&c, rw->top_k, l, mx, sc, dst);
	}
	double mass = c.ids ? list_mass(&c, l, mx) : total;
	if (rw->top_p < 1.0f && c.n > 1) {
		top_p(&c, rw->top_p, mass, l, mx, sc, other_buf(sc, &c));
		mass = list_mass(&c, l, mx);
	}
	double target = rw->u * mass;
	if (!c.ids)
		return draw_all(l, vocab, mx, target, mass, info);
	return draw_list(&c, l, mx, target, mass, info);
}

/* ---- logprobs (sampler.c's fill_logprobs) ----------------------------------- */

static void fill_logprobs(const struct k_sample_args *a, int r, const float *l, double logz)
{
	int vocab = a->vocab;
	int n = a->rows[r].n_logprobs;
	int32_t tok = a->token[r];
	float lt = l[tok];
	a->logprob[r] = ks_lp_clamp((double)lt - logz);
	int rank = 1, have = 0;
	int32_t top[K_SAMPLE_MAX_TOP];
	for (int i = 0; i < vocab; i++) {
		if (l[i] > lt)
			rank++;
		if (n == 0)
			continue;
		if (have == n && !ks_before(l, i, top[n - 1]))
			continue;
		int j = have < n ? have++ : n - 1;
		while (j > 0 && ks_before(l, i, top[j - 1])) {
			top[j] = top[j - 1];
			j--;
		}
		top[j] = i;
	}
	a->rank[r] = rank;
	for (int i = 0; i < have; i++) {
		a->top_ids[(size_t)r * K_SAMPLE_MAX_TOP + i] = top[i];
		a->top_logprobs[(size_t)r * K_SAMPLE_MAX_TOP + i] = ks_lp_clamp((double)l[top[i]] - logz);
	}
}

static void sample_row(const struct k_sample_args *a, int r, struct ref_scratch *sc,
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
	set_info(info, 0.0, 0.0, -1, -1);

	int32_t tok;
	float mx = process_row(a, rw, l, &tok);
	if (mx == -INFINITY)
		return;
	double total = 0.0;
	for (int b0 = 0; b0 < vocab; b0 += KS_BLOCK)
		total += ks_block_sum(l, mx, b0, vocab - b0 < KS_BLOCK ? vocab : b0 + KS_BLOCK);
	if (!rw->greedy)
		tok = sample_truncated(rw, l, vocab, mx, total, sc, info);
	a->token[r] = tok;
	if (tok >= 0 && rw->n_logprobs >= 0)
		fill_logprobs(a, r, l, (double)mx + log(total));
}

int k_sample_ref(const struct k_sample_args *a, struct k_sample_ref_info *info)
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
	struct ref_scratch *sc = malloc(sizeof(*sc));
	if (!sc)
		return ERR_NOMEM;
	sc->buf[0] = malloc((size_t)a->vocab * sizeof(int32_t));
	sc->buf[1] = malloc((size_t)a->vocab * sizeof(int32_t));
	int rc = 0;
	if (!sc->buf[0] || !sc->buf[1]) {
		rc = ERR_NOMEM;
	} else {
		for (int r = 0; r < a->n_rows; r++)
			sample_row(a, r, sc, info ? &info[r] : NULL);
	}
	free(sc->buf[0]);
	free(sc->buf[1]);
	free(sc);
	return rc;
}
