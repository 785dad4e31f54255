/* kernels/sample_seq.h — the one copy of the sampling chain's rules, for the
 * CPU sampler (engine/sample/sampler.c), its reference of the GPU chain
 * (kernels/cpu/sample_ref.c) and the CUDA kernel (kernels/cuda/k_sample.cu):
 * the order of candidates, the logit processing (bias, penalties, temperature,
 * sanitizing, argmax), the exp approximation and the 64-token block sums, the
 * logit buckets and where top_k / top_p cross them, the heap and quickselect
 * (their layouts decide the order of the final draw), the logprob rank and
 * top list, and the sequential chain itself (min_p -> top_k -> top_p -> draw)
 * that sampler.c and sample_ref.c run. The kernel runs the same steps in
 * parallel, calling these pieces where its result must match bit for bit.
 *
 * Host and device inline functions (KS_HD). In device code every float
 * operation goes through a _rn intrinsic so nvcc cannot contract a*b+c into an
 * FMA the CPU does not do (sampler.c is C11 without -mfma: no contraction).
 * The exp steps and the lane sums are macros over their operand type, so
 * sampler.c's 4-lane SIMD pass runs the same operations as the scalar form.
 * Tests: tests/sampling/test_sample_device.c (sample_ref vs sampler_sample),
 * tests/kernels/test_cuda_sample.c (k_sample vs sample_ref).
 */
#ifndef AORTA_KERNELS_SAMPLE_SEQ_H
#define AORTA_KERNELS_SAMPLE_SEQ_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define KS_HD __host__ __device__
#else
#define KS_HD
#endif

/* The heap, partition, gather and the logprob rank loop on the host: out of
 * line, as sampler.c had the first four (inlined into the chain's loops they
 * cost bench_sampler's top_k 50 about 10%; the rank loop inlined lost its
 * branch layout). The kernel keeps them inline. */
#if defined(__CUDACC__) || !defined(__GNUC__)
#define KS_OUTLINE KS_HD static inline
#else
#define KS_OUTLINE static __attribute__((noinline, unused))
#endif

#ifdef __CUDA_ARCH__
#define KS_FMUL(a, b) __fmul_rn((a), (b))
#define KS_FADD(a, b) __fadd_rn((a), (b))
#define KS_FSUB(a, b) __fsub_rn((a), (b))
#define KS_FDIV(a, b) __fdiv_rn((a), (b))
#define KS_DADD(a, b) __dadd_rn((a), (b))
#define KS_DMUL(a, b) __dmul_rn((a), (b))
#else
#define KS_FMUL(a, b) ((a) * (b))
#define KS_FADD(a, b) ((a) + (b))
#define KS_FSUB(a, b) ((a) - (b))
#define KS_FDIV(a, b) ((a) / (b))
#define KS_DADD(a, b) ((a) + (b))
#define KS_DMUL(a, b) ((a) * (b))
#endif

/* engine/sample/sampler.h sizes its scratch with SAMPLER__NB / SAMPLER__BLOCK
 * and reports SAMPLER_LOGIT_BIAS_MAX / SAMPLER_LOGPROB_MIN; sampler.c asserts
 * they equal these. */
#define KS_NB 2048	/* logit buckets */
#define KS_NATS 32.0f	/* spanning [max - 32, max] */
#define KS_BLOCK 64	/* tokens per block sum of the untruncated draw */
#define KS_HEAP_K 1024	/* top_k up to this: heap; above: buckets + quickselect */
#define KS_TOP_P_SMALL 256 /* top_p over at most this many: sort them all */
#define KS_TOP_P_HEAD 64   /* otherwise first look for the nucleus in the top 64 */
#define KS_BIAS_MAX 100.0f
#define KS_LOGPROB_MIN -9999.0f

/* ---- ordering: logit descending, then id ascending (a strict total order,
 * since ids are distinct; NaN has been replaced by -inf before any compare) -- */

KS_HD static inline bool ks_before(const float *l, int32_t a, int32_t b)
{
	/* a < b first: the cheap test that is usually false (the rank loop
	 * compares ids in increasing order against an earlier one) */
	return l[a] > l[b] || (a < b && l[a] == l[b]);
}

/* ---- logit processing (steps 1-5 of sampler.h's chain) ---------------------- */

/* logit_bias: the bias clamped to [-100, 100], added; a NaN bias is skipped
 * (sampling_params_validate rejects it). */
KS_HD static inline float ks_biased(float x, float b)
{
	if (isnan(b))
		return x;
	b = b > KS_BIAS_MAX ? KS_BIAS_MAX : b < -KS_BIAS_MAX ? -KS_BIAS_MAX : b;
	return KS_FADD(x, b);
}

/* The repetition penalty (a token of the prompt or generated: positive
 * logits divided, others multiplied), then frequency and presence
 * (generated tokens only). */
KS_HD static inline float ks_penalized(float x, float rep, float freq, float pres,
				       bool in_prompt, uint32_t n_gen)
{
	if (rep != 1.0f && (in_prompt || n_gen > 0))
		x = x > 0.0f ? KS_FDIV(x, rep) : KS_FMUL(x, rep);
	if (n_gen > 0)
		x = KS_FSUB(x, KS_FADD(KS_FMUL(freq, (float)n_gen), pres));
	return x;
}

/* NaN -> -inf and +inf -> FLT_MAX (so exp(l - max) stays finite). */
KS_HD static inline float ks_clean(float x)
{
	return isnan(x) ? -INFINITY : x > FLT_MAX ? FLT_MAX : x;
}

/* A logit after temperature (inv_t = 1 when greedy), cleaned. */
KS_HD static inline float ks_scaled(float x, float inv_t)
{
	return ks_clean(KS_FMUL(x, inv_t));
}

/* The argmax: the lowest index holding the max mx. */
KS_HD static inline int32_t ks_first_max(const float *l, int n, float mx)
{
	int32_t best = 0;
	while (best < n - 1 && l[best] != mx)
		best++;
	return best;
}

/* min_p keeps l >= this (prob / max_prob = exp(l - mx) >= min_p); log_min_p
 * is logf(min_p) taken on the host. */
KS_HD static inline float ks_min_p_thr(float mx, float log_min_p)
{
	return KS_FADD(mx, log_min_p);
}

/* ---- exp and mass ------------------------------------------------------------
 * exp(x) for x <= 0 with relative error below 3e-7, exactly 0 below -87 (so
 * a -inf logit has weight 0): x = k ln2 + r with |r| <= ln2/2, exp(r) by its
 * degree-6 Taylor polynomial (remainder |r|^7/7! < 1.3e-7), 2^k assembled in
 * the exponent bits. The steps are macros over the operand type (float, or
 * on the host GCC's 4-lane vectors): the caller clamps x to >= KS_EXP_MIN,
 * assembles p * 2^k and zeroes what was below. */
#define KS_EXP_MIN -87.0f
/* k = round(xc / ln2), by adding and removing 1.5 * 2^23 */
#define KS_EXP_ROUND(xc) KS_FSUB(KS_FADD(KS_FMUL((xc), 1.44269504f), 12582912.0f), 12582912.0f)
/* r = xc - k ln2, ln2 split hi + lo */
#define KS_EXP_REDUCE(xc, kf) \
	KS_FSUB(KS_FSUB((xc), KS_FMUL((kf), 0.693145752f)), KS_FMUL((kf), 1.42860677e-6f))
#define KS_EXP_POLY(r)                                                                    \
	KS_FADD(1.0f, KS_FMUL((r), KS_FADD(1.0f, KS_FMUL((r), KS_FADD(0.5f, KS_FMUL((r), \
		KS_FADD(1.0f / 6, KS_FMUL((r), KS_FADD(1.0f / 24, KS_FMUL((r),           \
		KS_FADD(1.0f / 120, KS_FMUL((r), 1.0f / 720))))))))))))
/* the bits of 2^k from the integer k (-126 <= k <= 0) */
#define KS_EXP_BITS(ki) (((ki) + 127) << 23)

static inline KS_HD float ks_bits_to_float(int32_t b)
{
	union {
		int32_t i;
		float f;
	} u;
	u.i = b;
	return u.f;
}

/* One lane of the exp approximation (sampler.c runs four at once). */
KS_HD static inline float ks_exp_nonpos(float x)
{
	bool small = x < KS_EXP_MIN;
	float xc = small ? KS_EXP_MIN : x;
	float kf = KS_EXP_ROUND(xc);
	float r = KS_EXP_REDUCE(xc, kf);
	float p = KS_EXP_POLY(r);
	float e = KS_FMUL(p, ks_bits_to_float(KS_EXP_BITS((int32_t)kf)));
	return small ? 0.0f : e;
}

/* prob of token t: exp(l[t] - mx). */
KS_HD static inline float ks_prob(const float *l, int32_t t, float mx)
{
	return ks_exp_nonpos(KS_FSUB(l[t], mx));
}

/* A block's eight float lanes (a0 over tokens 8j..8j+3, a1 over 8j+4..8j+7)
 * added pairwise in double; subscripted, so it takes float[4] and the host's
 * 4-lane vectors alike. */
#define KS_LANES_SUM(a0, a1)                                                          \
	KS_DADD(KS_DADD(KS_DADD((double)(a0)[0], (double)(a0)[1]),                    \
			KS_DADD((double)(a0)[2], (double)(a0)[3])),                   \
		KS_DADD(KS_DADD((double)(a1)[0], (double)(a1)[1]),                    \
			KS_DADD((double)(a1)[2], (double)(a1)[3])))

/* The mass of tokens [b0, end) (end - b0 <= KS_BLOCK): eight float lanes over
 * runs of 8, the tail in double, then the lanes (KS_LANES_SUM). prob: where
 * to store each exp, or NULL. */
KS_HD static inline double ks_block_sum(const float *l, float mx, int b0, int end, float *prob)
{
	float a0[4] = { 0, 0, 0, 0 }, a1[4] = { 0, 0, 0, 0 };
	int i = b0;
	for (; i + 8 <= end; i += 8)
		for (int k = 0; k < 4; k++) {
			float e0 = ks_prob(l, i + k, mx), e1 = ks_prob(l, i + 4 + k, mx);
			if (prob) {
				prob[i + k] = e0;
				prob[i + 4 + k] = e1;
			}
			a0[k] = KS_FADD(a0[k], e0);
			a1[k] = KS_FADD(a1[k], e1);
		}
	double bs = 0.0;
	for (; i < end; i++) {
		float e = ks_prob(l, i, mx);
		if (prob)
			prob[i] = e;
		bs = KS_DADD(bs, (double)e);
	}
	return KS_DADD(bs, KS_LANES_SUM(a0, a1));
}

/* prob[i] = exp(l[i] - mx); block_mass[b] = sum of block b. Returns the
 * total: the block sums added in index order. (sampler.c's exp_pass is the
 * same in 4-lane SIMD.) */
KS_HD static inline double ks_exp_pass(float *prob, const float *l, int vocab, float mx,
				       double *block_mass)
{
	double total = 0.0;
	for (int b0 = 0, blk = 0; b0 < vocab; b0 += KS_BLOCK, blk++) {
		double bs = ks_block_sum(l, mx, b0, vocab - b0 < KS_BLOCK ? vocab : b0 + KS_BLOCK,
					 prob);
		block_mass[blk] = bs;
		total = KS_DADD(total, bs);
	}
	return total;
}

/* a fraction of a mass: top_p's target, and u's point in the draw */
KS_HD static inline double ks_target(double frac, double mass)
{
	return KS_DMUL(frac, mass);
}

/* log of the softmax denominator: the logprobs are l - logz. A plain add:
 * device log() differs from the host's anyway (sample.h's tolerance), and
 * this is the add the kernel always did. */
KS_HD static inline double ks_logz(float mx, double total)
{
	return (double)mx + log(total);
}

/* JSON has no -inf: report at least KS_LOGPROB_MIN, as vLLM does. */
KS_HD static inline float ks_lp_clamp(double lp)
{
	return lp > (double)KS_LOGPROB_MIN ? (float)lp : KS_LOGPROB_MIN;
}

/* ---- buckets -----------------------------------------------------------------
 * top_k and top_p both ask for a most-likely prefix of the candidates. Rather
 * than sorting, bucket each candidate by (max - logit): buckets are monotone in
 * the order, so every bucket before the one where the prefix ends is kept
 * whole and only that one bucket needs selecting or sorting. */

/* (mx - x) * 64, the last bucket for -inf and the tail (mx >= x, both
 * sanitized; x = -inf gives +inf). */
KS_HD static inline int ks_bucket(float mx, float x)
{
	float b = KS_FMUL(KS_FSUB(mx, x), (float)KS_NB / KS_NATS);
	return b < (float)(KS_NB - 1) ? (int)b : KS_NB - 1;
}

/* top_k's boundary bucket: the first B whose count brings the buckets before
 * it to k or more (at most the last); *n_before = candidates in buckets < B. */
KS_HD static inline int ks_top_k_bucket(const uint32_t *hn, int k, int *n_before)
{
	int B = 0, nb = 0;
	while (B < KS_NB - 1 && nb + (int)hn[B] < k)
		nb += (int)hn[B++];
	*n_before = nb;
	return B;
}

/* top_p's boundary bucket: buckets are taken whole while their running mass
 * (*cum, from 0) stays below target. KS_NB when every bucket was (rounding:
 * the whole set is the nucleus). */
KS_HD static inline int ks_top_p_bucket(const uint32_t *hn, const double *hm, double target,
					double *cum, int *n_before)
{
	double c = 0.0;
	int B = 0, nb = 0;
	while (B < KS_NB && KS_DADD(c, hm[B]) < target) {
		c = KS_DADD(c, hm[B]);
		nb += (int)hn[B++];
	}
	*cum = c;
	*n_before = nb;
	return B;
}

/* ---- heap, quickselect, sort -------------------------------------------------- */

/* Heap of ids whose root is the last of them in the order. */
KS_OUTLINE void ks_heap_sift(int32_t *h, int n, int i, const float *l)
{
	for (;;) {
		int w = i, a = 2 * i + 1, b = a + 1;
		if (a < n && ks_before(l, h[w], h[a]))
			w = a;
		if (b < n && ks_before(l, h[w], h[b]))
			w = b;
		if (w == i)
			return;
		int32_t t = h[i];
		h[i] = h[w];
		h[w] = t;
		i = w;
	}
}

KS_HD static inline void ks_heapify(int32_t *h, int n, const float *l)
{
	for (int i = n / 2 - 1; i >= 0; i--)
		ks_heap_sift(h, n, i, l);
}

KS_OUTLINE void ks_insertion_sort(int32_t *v, int n, const float *l)
{
	for (int i = 1; i < n; i++) {
		int32_t x = v[i];
		int j = i;
		while (j > 0 && ks_before(l, x, v[j - 1])) {
			v[j] = v[j - 1];
			j--;
		}
		v[j] = x;
	}
}

/* Lomuto partition of v[0..n) around a pivot chosen by a fixed local xorshift
 * (deterministic, and not the request's stream). Returns the pivot's index. */
KS_OUTLINE int ks_partition(int32_t *v, int n, const float *l, uint32_t *pr)
{
	*pr ^= *pr << 13;
	*pr ^= *pr >> 17;
	*pr ^= *pr << 5;
	int pi = (int)(*pr % (uint32_t)n);
	int32_t pivot = v[pi];
	v[pi] = v[n - 1];
	v[n - 1] = pivot;
	int store = 0;
	for (int i = 0; i < n - 1; i++) {
		if (ks_before(l, v[i], pivot)) {
			int32_t t = v[i];
			v[i] = v[store];
			v[store] = t;
			store++;
		}
	}
	v[n - 1] = v[store];
	v[store] = pivot;
	return store;
}

/* Rearrange v[0..n) so v[0..k) holds the k first elements of the order (in
 * this layout). Expected O(n). */
KS_HD static inline void ks_select_top(int32_t *v, int n, int k, const float *l)
{
	uint32_t pr = 0x9E3779B9u;
	while (n > 16 && k > 0 && k < n) {
		int m = ks_partition(v, n, l, &pr);
		if (m == k || m + 1 == k)
			return;
		if (m > k) {
			n = m;
		} else {
			v += m + 1;
			n -= m + 1;
			k -= m + 1;
		}
	}
	if (k > 0 && k < n)
		ks_insertion_sort(v, n, l);
}

/* v[0..n) in the order (any correct sort gives this result: the order is
 * total). It recurses: the kernel rank-sorts instead. */
KS_HD static inline void ks_sort_desc(int32_t *v, int n, const float *l)
{
	uint32_t pr = 0x85EBCA6Bu;
	while (n > 16) {
		int m = ks_partition(v, n, l, &pr);
		/* recurse into the smaller side, loop on the larger: O(log n) stack */
		if (m < n - m - 1) {
			ks_sort_desc(v, m, l);
			v += m + 1;
			n -= m + 1;
		} else {
			ks_sort_desc(v + m + 1, n - m - 1, l);
			n = m;
		}
	}
	ks_insertion_sort(v, n, l);
}

/* ---- the sequential chain: min_p -> top_k -> top_p -> draw --------------------
 * sampler.c's and sample_ref.c's; the kernel replays it in parallel. */

/* A candidate list: ids[0..n), or all of 0..n-1 when ids is NULL. */
struct ks_cands {
	int32_t *ids;
	int n;
};

KS_HD static inline int32_t ks_cand_at(const struct ks_cands *c, int i)
{
	return c->ids ? c->ids[i] : i;
}

/* Work memory of one row. */
struct ks_work {
	float *prob;	    /* [vocab] exp(l - mx): every entry when the caller ran the
			       exp pass, else the chain fills its candidates' */
	double *block_mass; /* [vocab / KS_BLOCK + 1] the exp pass's block sums */
	int32_t *buf[2];    /* [vocab] each: candidate lists */
	uint32_t *hn;	    /* [KS_NB] */
	double *hm;	    /* [KS_NB] */
};

struct ks_trunc {
	float min_p, log_min_p; /* min_p > 0: on; log_min_p = logf(min_p) */
	int32_t top_k;		/* <= 0 or >= vocab: off */
	float top_p;		/* >= 1: off */
};

/* What the draw saw, for the reference's tests. */
struct ks_drawn {
	struct ks_cands c; /* the kept candidates in draw order */
	double mass;	   /* their mass */
	double margin;	   /* distance of u * mass to the nearest cumulative boundary
			      of the chosen token (0 when it rounded up to the total) */
};

/* Copy the candidates in buckets < B to dst[0..), those in bucket B to
 * dst[n_before..); returns how many are in B. */
KS_OUTLINE int ks_gather(const struct ks_cands *c, const float *l, float mx, int B,
				  int32_t *dst, int n_before)
{
	int lo = 0, eq = n_before;
	for (int i = 0; i < c->n; i++) {
		int32_t t = ks_cand_at(c, i);
		int b = ks_bucket(mx, l[t]);
		if (b < B)
			dst[lo++] = t;
		else if (b == B)
			dst[eq++] = t;
	}
	return eq - n_before;
}

/* top_k for small k: one pass that mostly compares against the heap root;
 * for model logits only O(k log(n/k)) tokens ever enter the heap. */
KS_OUTLINE void ks_top_k_heap(struct ks_cands *c, int k, const float *l, int32_t *dst)
{
	for (int i = 0; i < k; i++)
		dst[i] = ks_cand_at(c, i);
	ks_heapify(dst, k, l);
	for (int i = k; i < c->n; i++) {
		int32_t t = ks_cand_at(c, i);
		if (ks_before(l, t, dst[0])) {
			dst[0] = t;
			ks_heap_sift(dst, k, 0, l);
		}
	}
	c->ids = dst;
	c->n = k;
}

/* top_k for large k: keep the k first candidates in the order (0 < k < c->n):
 * whole buckets, then the quickselect of the boundary bucket. dst must not
 * alias c->ids. */
KS_HD static inline void ks_top_k_hist(struct ks_cands *c, int k, const float *l, float mx,
				       uint32_t *hn, int32_t *dst)
{
	memset(hn, 0, sizeof(*hn) * KS_NB);
	for (int i = 0; i < c->n; i++)
		hn[ks_bucket(mx, l[ks_cand_at(c, i)])]++;
	int n_before;
	int B = ks_top_k_bucket(hn, k, &n_before);
	int n_eq = ks_gather(c, l, mx, B, dst, n_before);
	ks_select_top(dst + n_before, n_eq, k - n_before, l);
	c->ids = dst;
	c->n = k;
}

/* Peaked distributions (the usual case) have a tiny nucleus: look for it
 * among the 64 most likely candidates first (one cheap heap pass). True when
 * found; then c is the nucleus, in dst. */
KS_HD static inline bool ks_top_p_head(struct ks_cands *c, double target, const float *l,
				       const float *prob, int32_t *dst)
{
	struct ks_cands head = *c;
	ks_top_k_heap(&head, KS_TOP_P_HEAD, l, dst);
	ks_sort_desc(dst, KS_TOP_P_HEAD, l);
	double cum = 0.0;
	for (int j = 0; j < KS_TOP_P_HEAD; j++) {
		cum = KS_DADD(cum, (double)prob[dst[j]]);
		if (cum >= target) {
			c->ids = dst;
			c->n = j + 1;
			return true;
		}
	}
	return false;
}

/* Keep the smallest most-likely prefix whose mass reaches top_p * mass. */
KS_HD static inline void ks_top_p(struct ks_cands *c, float top_p, double mass, const float *l,
				  float mx, const struct ks_work *w, int32_t *dst)
{
	double target = ks_target((double)top_p, mass), cum = 0.0;
	int n_before = 0, n_eq;
	int32_t *seg = dst;
	if (c->n <= KS_TOP_P_SMALL) {
		/* small set (after top_k, say): sorting it all is cheapest */
		for (int i = 0; i < c->n; i++)
			dst[i] = ks_cand_at(c, i);
		n_eq = c->n;
	} else {
		if (ks_top_p_head(c, target, l, w->prob, dst))
			return;
		uint32_t *hn = w->hn;
		double *hm = w->hm;
		memset(hn, 0, sizeof(*hn) * KS_NB);
		memset(hm, 0, sizeof(*hm) * KS_NB);
		for (int i = 0; i < c->n; i++) {
			int32_t t = ks_cand_at(c, i);
			int b = ks_bucket(mx, l[t]);
			hn[b]++;
			hm[b] = KS_DADD(hm[b], (double)w->prob[t]);
		}
		int B = ks_top_p_bucket(hn, hm, target, &cum, &n_before);
		if (B == KS_NB)
			return; /* rounding: the whole set is the nucleus */
		n_eq = ks_gather(c, l, mx, B, dst, n_before);
		seg = dst + n_before;
	}
	ks_sort_desc(seg, n_eq, l);
	int keep = n_before + n_eq;
	for (int j = 0; j < n_eq; j++) {
		cum = KS_DADD(cum, (double)w->prob[seg[j]]);
		if (cum >= target) {
			keep = n_before + j + 1;
			break;
		}
	}
	c->ids = dst;
	c->n = keep;
}

KS_HD static inline double ks_dmin(double a, double b)
{
	return a < b ? a : b;
}

/* Inverse CDF over the whole vocabulary using the block sums: find the block
 * where the running mass passes target, then the token inside it. */
KS_HD static inline int32_t ks_draw_all(const float *prob, int vocab, const double *block_mass,
					double target, double *margin)
{
	double cum = 0.0;
	int last_blk = -1;
	for (int b0 = 0, blk = 0; b0 < vocab; b0 += KS_BLOCK, blk++) {
		double bs = block_mass[blk];
		if (bs <= 0.0)
			continue;
		last_blk = blk;
		if (KS_DADD(cum, bs) > target) {
			int end = vocab - b0 < KS_BLOCK ? vocab : b0 + KS_BLOCK;
			double c = cum;
			for (int i = b0; i < end; i++) {
				if (prob[i] <= 0.0f)
					continue;
				double before = c;
				c = KS_DADD(c, (double)prob[i]);
				if (c > target) {
					if (margin)
						*margin = ks_dmin(
							ks_dmin(target - before, c - target),
							ks_dmin(fabs(target - cum),
								fabs(cum + bs - target)));
					return i;
				}
			}
			/* the block's rounded sum overshot its exact walk: go on */
		}
		cum = KS_DADD(cum, bs);
	}
	/* target rounded up to the total: the last token with weight */
	if (last_blk < 0)
		return -1;
	int b0 = last_blk * KS_BLOCK;
	int end = vocab - b0 < KS_BLOCK ? vocab : b0 + KS_BLOCK;
	for (int i = end - 1; i >= b0; i--)
		if (prob[i] > 0.0f)
			return i;
	return -1;
}

/* Inverse CDF over a list in its order. */
KS_HD static inline int32_t ks_draw_list(const struct ks_cands *c, const float *prob,
					 double target, double *margin)
{
	double cum = 0.0;
	int32_t last = -1;
	for (int i = 0; i < c->n; i++) {
		int32_t t = ks_cand_at(c, i);
		double w = (double)prob[t];
		if (w <= 0.0)
			continue;
		double before = cum;
		cum = KS_DADD(cum, w);
		last = t;
		if (cum > target) {
			if (margin)
				*margin = ks_dmin(target - before, cum - target);
			return t;
		}
	}
	return last; /* u * mass rounded up to the total */
}

KS_HD static inline double ks_list_mass(const struct ks_cands *c, const float *prob)
{
	double m = 0.0;
	for (int i = 0; i < c->n; i++)
		m = KS_DADD(m, (double)prob[ks_cand_at(c, i)]);
	return m;
}

/* Steps 6-9 of the chain: truncate and draw at u. Needs w->prob[t] = exp(l[t] -
 * mx) for every t when have_all_probs (total = ks_exp_pass's), else computes
 * it for the survivors of min_p and top_k. -1 if no token has weight.
 * drawn: NULL, or what the draw saw. */
KS_HD static inline int32_t ks_sample_truncated(const struct ks_trunc *p, const float *l,
						int vocab, float mx, struct ks_work *w,
						bool have_all_probs, double total, double u,
						struct ks_drawn *drawn)
{
	float *prob = w->prob;
	int cur = 0;
	struct ks_cands c = { NULL, vocab };

	if (p->min_p > 0.0f) {
		float thr = ks_min_p_thr(mx, p->log_min_p);
		int32_t *dst = w->buf[cur];
		int n = 0;
		for (int i = 0; i < vocab; i++)
			if (l[i] >= thr)
				dst[n++] = i;
		c.ids = dst;
		c.n = n;
	}
	if (p->top_k > 0 && p->top_k < c.n) {
		cur ^= c.ids != NULL; /* write into the buffer c does not use */
		if (p->top_k <= KS_HEAP_K)
			ks_top_k_heap(&c, p->top_k, l, w->buf[cur]);
		else
			ks_top_k_hist(&c, p->top_k, l, mx, w->hn, w->buf[cur]);
	}
	if (!have_all_probs)
		for (int i = 0; i < c.n; i++) {
			int32_t t = ks_cand_at(&c, i);
			prob[t] = ks_prob(l, t, mx);
		}
	double mass = !c.ids && have_all_probs ? total : ks_list_mass(&c, prob);
	if (p->top_p < 1.0f && c.n > 1) {
		cur ^= c.ids != NULL;
		ks_top_p(&c, p->top_p, mass, l, mx, w, w->buf[cur]);
		mass = ks_list_mass(&c, prob);
	}

	double target = ks_target(u, mass);
	double *margin = drawn ? &drawn->margin : NULL;
	if (drawn) {
		drawn->c = c;
		drawn->mass = mass;
		drawn->margin = 0.0;
	}
	if (!c.ids)
		return ks_draw_all(prob, vocab, w->block_mass, target, margin);
	return ks_draw_list(&c, prob, target, margin);
}

/* ---- logprobs -------------------------------------------------------------------- */

/* The rank of tok (1 + the number of strictly larger logits) and the n first
 * ids of the order in top[0..*have). */
KS_OUTLINE int ks_rank_top(const float *l, int vocab, int32_t tok, int n, int32_t *top,
				    int *have)
{
	float lt = l[tok];
	int rank = 1, h = 0;
	for (int i = 0; i < vocab; i++) {
		if (l[i] > lt)
			rank++;
		if (n == 0)
			continue;
		if (h == n && !ks_before(l, i, top[n - 1]))
			continue;
		int j = h < n ? h++ : n - 1;
		while (j > 0 && ks_before(l, i, top[j - 1])) {
			top[j] = top[j - 1];
			j--;
		}
		top[j] = i;
	}
	*have = h;
	return rank;
}

#endif
