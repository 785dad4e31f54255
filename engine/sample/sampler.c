/* engine/sample/sampler.c — the sampler chain described in sampler.h.
 *
 * Hot path for a large vocabulary: one pass to scale and find the max, one
 * SIMD pass of exp (skipped when top_k bounds the set and no logprobs are
 * asked), then truncation without sorting the vocabulary: a k-heap for small
 * top_k, a logit histogram for large top_k and for top_p (only the bucket
 * where the kept prefix ends is selected or sorted), and block sums for the
 * final inverse-CDF draw. Penalties touch only the tokens in the sparse table.
 * Test: tests/sampling/test_sampler.c (chi-square against exact
 * distributions, hand-computed penalties, seeds, logprobs).
 */
#include "engine/sample/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "common/utf8.h"

void sampling_params_init(struct sampling_params *p)
{
	memset(p, 0, sizeof(*p));
	p->temperature = 1.0f;
	p->top_p = 1.0f;
	p->top_k = -1;
	p->min_p = 0.0f;
	p->repetition_penalty = 1.0f;
	p->max_tokens = -1;
	p->logprobs = -1;
}

/* ---- validation ---------------------------------------------------------- */

static bool in_range(float x, float lo, float hi)
{
	return x >= lo && x <= hi; /* false for NaN */
}

int sampling_params_validate(const struct sampling_params *p, int vocab, struct diag *d)
{
	if (!in_range(p->temperature, 0.0f, 2.0f))
		return diag_set(d, ERR_RANGE, "temperature must be in [0, 2]");
	if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
		return diag_set(d, ERR_RANGE, "top_p must be in (0, 1]");
	if (p->top_k < -1)
		return diag_set(d, ERR_RANGE, "top_k must be -1 or 0 (disabled) or >= 1");
	if (!in_range(p->min_p, 0.0f, 1.0f))
		return diag_set(d, ERR_RANGE, "min_p must be in [0, 1]");
	/* vLLM takes any repetition_penalty > 0; the API caps it at 1e6 */
	if (!(p->repetition_penalty > 0.0f && p->repetition_penalty <= 1e6f))
		return diag_set(d, ERR_RANGE, "repetition_penalty must be in (0, 1e6]");
	if (!in_range(p->presence_penalty, -2.0f, 2.0f))
		return diag_set(d, ERR_RANGE, "presence_penalty must be in [-2, 2]");
	if (!in_range(p->frequency_penalty, -2.0f, 2.0f))
		return diag_set(d, ERR_RANGE, "frequency_penalty must be in [-2, 2]");
	if (p->logprobs < -1 || p->logprobs > SAMPLER_MAX_LOGPROBS)
		return diag_set(d, ERR_RANGE, "logprobs must be in [0, %d]", SAMPLER_MAX_LOGPROBS);
	if (p->min_tokens < 0)
		return diag_set(d, ERR_RANGE, "min_tokens must be >= 0");
	if (p->max_tokens != -1 && p->max_tokens < 1)
		return diag_set(d, ERR_RANGE, "max_tokens must be >= 1");
	if (p->max_tokens != -1 && p->min_tokens > p->max_tokens)
		return diag_set(d, ERR_RANGE, "min_tokens (%d) must be <= max_tokens (%d)",
				p->min_tokens, p->max_tokens);
	if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
		return diag_set(d, ERR_RANGE, "logit_bias: bad count");
	for (int i = 0; i < p->n_logit_bias; i++) {
		const struct sampler_logit_bias *b = &p->logit_bias[i];
		if (b->token < 0 || (vocab > 0 && b->token >= vocab))
			return diag_set(d, ERR_RANGE, "logit_bias: token id %d out of range",
					(int)b->token);
		if (isnan(b->bias))
			return diag_set(d, ERR_RANGE, "logit_bias: bias for token %d is NaN",
					(int)b->token);
	}
	if (p->n_stop_token_ids < 0 || (p->n_stop_token_ids > 0 && !p->stop_token_ids))
		return diag_set(d, ERR_RANGE, "stop_token_ids: bad count");
	for (int i = 0; i < p->n_stop_token_ids; i++) {
		int32_t t = p->stop_token_ids[i];
		if (t < 0 || (vocab > 0 && t >= vocab))
			return diag_set(d, ERR_RANGE, "stop_token_ids: token id %d out of range",
					(int)t);
	}
	if (p->n_stop < 0 || p->n_stop > SAMPLER_MAX_STOP || (p->n_stop > 0 && !p->stop))
		return diag_set(d, ERR_RANGE, "stop: at most %d strings", SAMPLER_MAX_STOP);
	for (int i = 0; i < p->n_stop; i++) {
		const char *s = p->stop[i];
		if (!s || !s[0])
			return diag_set(d, ERR_RANGE, "stop: string %d is empty", i);
		if (strlen(s) > SAMPLER_MAX_STOP_BYTES)
			return diag_set(d, ERR_RANGE, "stop: string %d is longer than %d bytes", i,
					SAMPLER_MAX_STOP_BYTES);
		if (!utf8_valid(s, strlen(s)))
			return diag_set(d, ERR_RANGE, "stop: string %d is not valid UTF-8", i);
	}
	return 0;
}

/* ---- sparse token table -------------------------------------------------- */

static uint32_t tok_hash(int32_t t)
{
	return (uint32_t)t * 0x9E3779B1u;
}

static struct sampler__count *table_find_slot(struct sampler__count *slots, uint32_t cap,
					      int32_t token)
{
	uint32_t mask = cap - 1;
	uint32_t i = tok_hash(token) & mask;
	while (slots[i].token != -1 && slots[i].token != token)
		i = (i + 1) & mask;
	return &slots[i];
}

static int table_grow(struct sampler_state *s)
{
	uint32_t ncap = s->cap ? s->cap * 2 : 64;
	if (ncap < s->cap)
		return ERR_OVERFLOW;
	struct sampler__count *ns = malloc((size_t)ncap * sizeof(*ns));
	if (!ns)
		return ERR_NOMEM;
	for (uint32_t i = 0; i < ncap; i++)
		ns[i] = (struct sampler__count){ .token = -1 };
	for (uint32_t i = 0; i < s->cap; i++)
		if (s->slots[i].token != -1)
			*table_find_slot(ns, ncap, s->slots[i].token) = s->slots[i];
	free(s->slots);
	s->slots = ns;
	s->cap = ncap;
	return 0;
}

/* The entry for token, inserted if missing. Load factor stays <= 1/2. */
static int table_get(struct sampler_state *s, int32_t token, struct sampler__count **out)
{
	if ((s->n_used + 1) * 2 > s->cap) {
		int rc = table_grow(s);
		if (rc)
			return rc;
	}
	struct sampler__count *c = table_find_slot(s->slots, s->cap, token);
	if (c->token == -1) {
		c->token = token;
		s->n_used++;
	}
	*out = c;
	return 0;
}

int sampler_state_init(struct sampler_state *s, const struct sampling_params *p,
		       uint64_t server_seed, uint64_t request_id, const int32_t *prompt,
		       int n_prompt, const int32_t *eos_ids, int n_eos)
{
	memset(s, 0, sizeof(*s));
	if (n_eos < 0 || n_eos > SAMPLER_MAX_EOS || n_prompt < 0)
		return ERR_RANGE;
	rng_seed(&s->rng, rng_request_seed(p->has_seed, p->seed, server_seed, request_id));
	s->n_eos = n_eos;
	for (int i = 0; i < n_eos; i++)
		s->eos_ids[i] = eos_ids[i];
	bool rep = p->repetition_penalty != 1.0f;
	s->track = rep || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
	if (rep) {
		for (int i = 0; i < n_prompt; i++) {
			struct sampler__count *c;
			int rc = table_get(s, prompt[i], &c);
			if (rc) {
				sampler_state_deinit(s);
				return rc;
			}
			c->in_prompt = true;
		}
	}
	return 0;
}

void sampler_state_deinit(struct sampler_state *s)
{
	free(s->slots);
	s->slots = NULL;
	s->cap = s->n_used = 0;
}

int sampler_accept(struct sampler_state *s, int32_t token)
{
	if (s->track) {
		struct sampler__count *c;
		int rc = table_get(s, token, &c);
		if (rc)
			return rc;
		c->n_gen++;
	}
	s->n_generated++;
	return 0;
}

int sampler_scratch_init(struct sampler_scratch *sc, int vocab)
{
	memset(sc, 0, sizeof(*sc));
	if (vocab <= 0)
		return ERR_INVAL;
	sc->prob = malloc((size_t)vocab * sizeof(*sc->prob));
	sc->idx = malloc((size_t)vocab * sizeof(*sc->idx));
	sc->tmp = malloc((size_t)vocab * sizeof(*sc->tmp));
	sc->hist_n = malloc(SAMPLER__NB * sizeof(*sc->hist_n));
	sc->hist_mass = malloc(SAMPLER__NB * sizeof(*sc->hist_mass));
	sc->block_mass = malloc(((size_t)vocab / SAMPLER__BLOCK + 1) * sizeof(*sc->block_mass));
	if (!sc->prob || !sc->idx || !sc->tmp || !sc->hist_n || !sc->hist_mass ||
	    !sc->block_mass) {
		sampler_scratch_deinit(sc);
		return ERR_NOMEM;
	}
	sc->vocab = vocab;
	return 0;
}

void sampler_scratch_deinit(struct sampler_scratch *sc)
{
	free(sc->prob);
	free(sc->idx);
	free(sc->tmp);
	free(sc->hist_n);
	free(sc->hist_mass);
	free(sc->block_mass);
	memset(sc, 0, sizeof(*sc));
}

/* ---- ordering: logit descending, then id ascending (a strict total order,
 * since ids are distinct; NaN has been replaced by -inf before any compare) -- */

static inline bool before(const float *l, int32_t a, int32_t b)
{
	return l[a] > l[b] || (l[a] == l[b] && a < b);
}

static void insertion_sort(int32_t *v, int n, const float *l)
{
	for (int i = 1; i < n; i++) {
		int32_t x = v[i];
		int j = i;
		while (j > 0 && before(l, x, v[j - 1])) {
			v[j] = v[j - 1];
			j--;
		}
		v[j] = x;
	}
}

/* Lomuto partition of v[0..n) around a pivot chosen by a fixed local xorshift
 * (deterministic, and not the request's stream). Returns the pivot's index. */
static int partition(int32_t *v, int n, const float *l, uint32_t *pr)
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
		if (before(l, v[i], pivot)) {
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
 * any order). Expected O(n). */
static void select_top(int32_t *v, int n, int k, const float *l)
{
	uint32_t pr = 0x9E3779B9u;
	while (n > 16 && k > 0 && k < n) {
		int m = partition(v, n, l, &pr);
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
		insertion_sort(v, n, l);
}

static void sort_desc(int32_t *v, int n, const float *l)
{
	uint32_t pr = 0x85EBCA6Bu;
	while (n > 16) {
		int m = partition(v, n, l, &pr);
		/* recurse into the smaller side, loop on the larger: O(log n) stack */
		if (m < n - m - 1) {
			sort_desc(v, m, l);
			v += m + 1;
			n -= m + 1;
		} else {
			sort_desc(v + m + 1, n - m - 1, l);
			n = m;
		}
	}
	insertion_sort(v, n, l);
}

/* ---- the chain ----------------------------------------------------------- */

static void apply_min_tokens(const struct sampling_params *p, const struct sampler_state *s,
			     float *logits, int vocab)
{
	if (s->n_generated >= p->min_tokens)
		return;
	if (!p->ignore_eos)
		for (int i = 0; i < s->n_eos; i++)
			if (s->eos_ids[i] >= 0 && s->eos_ids[i] < vocab)
				logits[s->eos_ids[i]] = -INFINITY;
	for (int i = 0; i < p->n_stop_token_ids; i++) {
		int32_t t = p->stop_token_ids[i];
		if (t >= 0 && t < vocab)
			logits[t] = -INFINITY;
	}
}

static void apply_logit_bias(const struct sampling_params *p, float *logits, int vocab)
{
	for (int i = 0; i < p->n_logit_bias; i++) {
		int32_t t = p->logit_bias[i].token;
		float b = p->logit_bias[i].bias;
		if (t < 0 || t >= vocab || isnan(b))
			continue; /* validate() rejects these; never write out of range */
		if (b > SAMPLER_LOGIT_BIAS_MAX)
			b = SAMPLER_LOGIT_BIAS_MAX;
		if (b < -SAMPLER_LOGIT_BIAS_MAX)
			b = -SAMPLER_LOGIT_BIAS_MAX;
		logits[t] += b;
	}
}

static void apply_penalties(const struct sampling_params *p, const struct sampler_state *s,
			    float *logits, int vocab)
{
	if (!s->track)
		return;
	float r = p->repetition_penalty;
	for (uint32_t i = 0; i < s->cap; i++) {
		const struct sampler__count *c = &s->slots[i];
		if (c->token < 0 || c->token >= vocab)
			continue;
		float x = logits[c->token];
		if (r != 1.0f && (c->in_prompt || c->n_gen > 0))
			x = x > 0.0f ? x / r : x * r;
		if (c->n_gen > 0)
			x -= p->frequency_penalty * (float)c->n_gen + p->presence_penalty;
		logits[c->token] = x;
	}
}

/* Replace NaN with -inf and +inf with FLT_MAX (so exp(l - max) stays finite). */
static void sanitize(float *logits, int vocab)
{
	for (int i = 0; i < vocab; i++) {
		float x = logits[i];
		if (isnan(x))
			logits[i] = -INFINITY;
		else if (x > FLT_MAX)
			logits[i] = FLT_MAX;
	}
}

/* 4-lane GCC/Clang vector types for the passes over the whole vocabulary: at
 * -O2 the compiler does not vectorize these loops by itself. */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f v4f_splat(float x)
{
	return (v4f){ x, x, x, x };
}

/* Scale by inv_t (sanitized) and return the max and its lowest index. One
 * vector pass plus a short scan for the index in the common all-finite case. */
static float scale_and_argmax(float *logits, int vocab, float inv_t, int32_t *arg)
{
	v4f vinv = v4f_splat(inv_t), vmx = v4f_splat(-INFINITY), vbig = v4f_splat(FLT_MAX);
	v4i vbad = { 0, 0, 0, 0 };
	int i = 0;
	for (; i + 4 <= vocab; i += 4) {
		v4f x;
		memcpy(&x, logits + i, sizeof(x));
		x *= vinv;
		memcpy(logits + i, &x, sizeof(x));
		vbad |= (x != x) | (x > vbig);
		v4i gt = x > vmx;
		vmx = (v4f)(((v4i)x & gt) | ((v4i)vmx & ~gt));
	}
	float mx = -INFINITY;
	int bad = 0;
	for (int k = 0; k < 4; k++) {
		mx = vmx[k] > mx ? vmx[k] : mx;
		bad |= vbad[k];
	}
	for (; i < vocab; i++) {
		float x = logits[i] * inv_t;
		logits[i] = x;
		bad |= (x != x) | (x > FLT_MAX);
		mx = x > mx ? x : mx;
	}
	if (bad) {
		sanitize(logits, vocab);
		mx = -INFINITY;
		for (i = 0; i < vocab; i++)
			mx = logits[i] > mx ? logits[i] : mx;
	}
	int32_t best = 0;
	while (best < vocab - 1 && logits[best] != mx)
		best++;
	*arg = best;
	return mx;
}

/* exp(x) for x <= 0 with relative error below 3e-7, exactly 0 below -87 (so
 * a -inf logit has weight 0): x = k ln2 + r with |r| <= ln2/2, exp(r) by its
 * degree-6 Taylor polynomial (remainder |r|^7/7! < 1.3e-7), 2^k assembled in
 * the exponent bits. Vectorized by hand because a libm call per token neither
 * inlines nor vectorizes and the exp pass is the largest cost of sampling a
 * 150k vocabulary. */
static inline v4f exp_nonpos4(v4f x)
{
	v4i small = x < v4f_splat(-87.0f); /* -1 where the result is 0 */
	v4f xc = (v4f)(((v4i)x & ~small) | ((v4i)v4f_splat(-87.0f) & small));
	v4f kf = xc * 1.44269504f + 12582912.0f; /* 1.5 * 2^23: round to nearest */
	kf -= 12582912.0f;
	v4f r = xc - kf * 0.693145752f - kf * 1.42860677e-6f; /* ln2 split hi + lo */
	v4f p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 +
		r * (1.0f / 120 + r * (1.0f / 720))))));
	v4i bits = (__builtin_convertvector(kf, v4i) + 127) << 23;
	return (v4f)((v4i)(p * (v4f)bits) & ~small);
}

static inline float exp_nonpos(float x)
{
	return exp_nonpos4(v4f_splat(x))[0];
}

/* prob[i] = exp(l[i] - mx); block_mass[b] = sum of block b (SAMPLER__BLOCK
 * tokens, a multiple of 8). Returns the total in double. */
static double exp_pass(float *prob, const float *l, int vocab, float mx, double *block_mass)
{
	double total = 0.0;
	v4f vmx = v4f_splat(mx);
	for (int b0 = 0, blk = 0; b0 < vocab; b0 += SAMPLER__BLOCK, blk++) {
		int end = vocab - b0 < SAMPLER__BLOCK ? vocab : b0 + SAMPLER__BLOCK;
		v4f acc0 = v4f_splat(0.0f), acc1 = acc0;
		int i = b0;
		for (; i + 8 <= end; i += 8) {
			v4f x0, x1;
			memcpy(&x0, l + i, sizeof(x0));
			memcpy(&x1, l + i + 4, sizeof(x1));
			v4f e0 = exp_nonpos4(x0 - vmx), e1 = exp_nonpos4(x1 - vmx);
			memcpy(prob + i, &e0, sizeof(e0));
			memcpy(prob + i + 4, &e1, sizeof(e1));
			acc0 += e0;
			acc1 += e1;
		}
		double bs = 0.0;
		for (; i < end; i++) {
			prob[i] = exp_nonpos(l[i] - mx);
			bs += (double)prob[i];
		}
		bs += ((double)acc0[0] + acc0[1]) + ((double)acc0[2] + acc0[3]) +
		      (((double)acc1[0] + acc1[1]) + ((double)acc1[2] + acc1[3]));
		block_mass[blk] = bs;
		total += bs;
	}
	return total;
}

/* Inverse CDF over the whole vocabulary using the block sums: find the block
 * where the running mass passes target, then the token inside it. */
static int32_t draw_all(const float *prob, int vocab, const double *block_mass, double target)
{
	double cum = 0.0;
	int last_blk = -1;
	for (int b0 = 0, blk = 0; b0 < vocab; b0 += SAMPLER__BLOCK, blk++) {
		double bs = block_mass[blk];
		if (bs <= 0.0)
			continue;
		last_blk = blk;
		if (cum + bs > target) {
			int end = vocab - b0 < SAMPLER__BLOCK ? vocab : b0 + SAMPLER__BLOCK;
			double c = cum;
			for (int i = b0; i < end; i++) {
				if (prob[i] <= 0.0f)
					continue;
				c += (double)prob[i];
				if (c > target)
					return i;
			}
			/* the block's rounded sum overshot its exact walk: go on */
		}
		cum += bs;
	}
	/* target rounded up to the total: the last token with weight */
	if (last_blk < 0)
		return -1;
	int b0 = last_blk * SAMPLER__BLOCK;
	int end = vocab - b0 < SAMPLER__BLOCK ? vocab : b0 + SAMPLER__BLOCK;
	for (int i = end - 1; i >= b0; i--)
		if (prob[i] > 0.0f)
			return i;
	return -1;
}

/* JSON has no -inf: report at least SAMPLER_LOGPROB_MIN, as vLLM does. */
static float lp_clamp(double lp)
{
	return lp > (double)SAMPLER_LOGPROB_MIN ? (float)lp : SAMPLER_LOGPROB_MIN;
}

static void fill_logprobs(const struct sampling_params *p, const float *logits, int vocab,
			  double logz, struct sample_result *out)
{
	int32_t tok = out->token;
	float lt = logits[tok];
	out->logprob = lp_clamp((double)lt - logz);
	int rank = 1;
	int n = p->logprobs;
	int have = 0;
	int32_t top[SAMPLER_MAX_LOGPROBS];
	for (int i = 0; i < vocab; i++) {
		if (logits[i] > lt)
			rank++;
		if (n == 0)
			continue;
		if (have == n && !before(logits, i, top[n - 1]))
			continue;
		int j = have < n ? have++ : n - 1;
		while (j > 0 && before(logits, i, top[j - 1])) {
			top[j] = top[j - 1];
			j--;
		}
		top[j] = i;
	}
	out->rank = rank;
	out->n_top = have;
	for (int i = 0; i < have; i++) {
		out->top[i].token = top[i];
		out->top[i].logprob = lp_clamp((double)logits[top[i]] - logz);
	}
}

/* ---- truncation by logit histogram --------------------------------------
 * top_k and top_p both ask for a most-likely prefix of the candidates. Rather
 * than sorting, bucket each candidate by (max - logit): buckets are monotone in
 * the order, so every bucket before the one where the prefix ends is kept
 * whole and only that one bucket needs selecting or sorting. */

#define SAMPLER__HEAP_K 1024 /* top_k up to this uses a heap, above it the histogram */

static inline int bucket_of(float mx, float x)
{
	/* mx >= x, both sanitized; x = -inf gives +inf, i.e. the last bucket */
	float b = (mx - x) * ((float)SAMPLER__NB / SAMPLER__NATS);
	return b < (float)(SAMPLER__NB - 1) ? (int)b : SAMPLER__NB - 1;
}

/* A candidate list: ids[0..n), or all of 0..n-1 when ids is NULL. */
struct cands {
	int32_t *ids;
	int n;
};

static inline int32_t cand_at(const struct cands *c, int i)
{
	return c->ids ? c->ids[i] : i;
}

/* Copy the candidates in buckets < B to dst[0..), those in bucket B to
 * dst[n_before..); returns how many are in B. */
static int gather(const struct cands *c, const float *l, float mx, int B, int32_t *dst,
		  int n_before)
{
	int lo = 0, eq = n_before;
	for (int i = 0; i < c->n; i++) {
		int32_t t = cand_at(c, i);
		int b = bucket_of(mx, l[t]);
		if (b < B)
			dst[lo++] = t;
		else if (b == B)
			dst[eq++] = t;
	}
	return eq - n_before;
}

/* Heap of ids whose root is the last of them in the order. */
static void heap_sift_down(int32_t *h, int n, int i, const float *l)
{
	for (;;) {
		int w = i, a = 2 * i + 1, b = a + 1;
		if (a < n && before(l, h[w], h[a]))
			w = a;
		if (b < n && before(l, h[w], h[b]))
			w = b;
		if (w == i)
			return;
		int32_t t = h[i];
		h[i] = h[w];
		h[w] = t;
		i = w;
	}
}

/* top_k for small k: one pass that mostly compares against the heap root;
 * for model logits only O(k log(n/k)) tokens ever enter the heap. */
static void truncate_top_k_heap(struct cands *c, int k, const float *l, int32_t *spare)
{
	for (int i = 0; i < k; i++)
		spare[i] = cand_at(c, i);
	for (int i = k / 2 - 1; i >= 0; i--)
		heap_sift_down(spare, k, i, l);
	for (int i = k; i < c->n; i++) {
		int32_t t = cand_at(c, i);
		if (before(l, t, spare[0])) {
			spare[0] = t;
			heap_sift_down(spare, k, 0, l);
		}
	}
	c->ids = spare;
	c->n = k;
}

/* top_k for large k: keep the k first candidates in the order (0 < k < c->n).
 * The result goes to `spare`, which must not alias c->ids. */
static void truncate_top_k(struct cands *c, int k, const float *l, float mx,
			   struct sampler_scratch *sc, int32_t *spare)
{
	uint32_t *hn = sc->hist_n;
	memset(hn, 0, sizeof(*hn) * SAMPLER__NB);
	for (int i = 0; i < c->n; i++)
		hn[bucket_of(mx, l[cand_at(c, i)])]++;
	int B = 0, n_before = 0;
	while (B < SAMPLER__NB - 1 && n_before + (int)hn[B] < k)
		n_before += (int)hn[B++];
	int n_eq = gather(c, l, mx, B, spare, n_before);
	select_top(spare + n_before, n_eq, k - n_before, l);
	c->ids = spare;
	c->n = k;
}

/* Peaked distributions (the usual case) have a tiny nucleus: look for it
 * among the 64 most likely candidates first (one cheap heap pass). True when
 * found; then c is the nucleus, in spare. */
static bool top_p_head(struct cands *c, double target, const float *l,
		       const struct sampler_scratch *sc, int32_t *spare)
{
	enum { HEAD = 64 };
	struct cands head = *c;
	truncate_top_k_heap(&head, HEAD, l, spare);
	sort_desc(spare, HEAD, l);
	double cum = 0.0;
	for (int j = 0; j < HEAD; j++) {
		cum += (double)sc->prob[spare[j]];
		if (cum >= target) {
			c->ids = spare;
			c->n = j + 1;
			return true;
		}
	}
	return false;
}

/* Keep the smallest most-likely prefix whose mass reaches top_p * mass. */
static void truncate_top_p(struct cands *c, float top_p, double mass, const float *l, float mx,
			   struct sampler_scratch *sc, int32_t *spare)
{
	double target = (double)top_p * mass, cum = 0.0;
	int n_before = 0, n_eq;
	int32_t *seg = spare;
	if (c->n <= 256) {
		/* small set (after top_k, say): sorting it all is cheapest */
		for (int i = 0; i < c->n; i++)
			spare[i] = cand_at(c, i);
		n_eq = c->n;
	} else {
		if (top_p_head(c, target, l, sc, spare))
			return;
		uint32_t *hn = sc->hist_n;
		double *hm = sc->hist_mass;
		memset(hn, 0, sizeof(*hn) * SAMPLER__NB);
		memset(hm, 0, sizeof(*hm) * SAMPLER__NB);
		for (int i = 0; i < c->n; i++) {
			int32_t t = cand_at(c, i);
			int b = bucket_of(mx, l[t]);
			hn[b]++;
			hm[b] += (double)sc->prob[t];
		}
		int B = 0;
		while (B < SAMPLER__NB && cum + hm[B] < target) {
			cum += hm[B];
			n_before += (int)hn[B++];
		}
		if (B == SAMPLER__NB)
			return; /* rounding: the whole set is the nucleus */
		n_eq = gather(c, l, mx, B, spare, n_before);
		seg = spare + n_before;
	}
	sort_desc(seg, n_eq, l);
	int keep = n_before + n_eq;
	for (int j = 0; j < n_eq; j++) {
		cum += (double)sc->prob[seg[j]];
		if (cum >= target) {
			keep = n_before + j + 1;
			break;
		}
	}
	c->ids = spare;
	c->n = keep;
}

/* Steps 6-9 of the chain: truncate and draw. Needs sc->prob[t] = exp(l[t] -
 * mx) for every t when have_all_probs, else computes it for the survivors of
 * min_p and top_k. total = sum of prob[] in index order when have_all_probs. */
static int32_t sample_truncated(const struct sampling_params *p, const float *l, int vocab,
				float mx, struct sampler_scratch *sc, bool have_all_probs,
				double total, double u)
{
	float *prob = sc->prob;
	int32_t *bufs[2] = { sc->idx, sc->tmp };
	int cur = 0;
	struct cands c = { NULL, vocab };

	if (p->min_p > 0.0f) {
		/* prob / max_prob = exp(l - mx) >= min_p */
		float thr = mx + logf(p->min_p);
		int n = 0;
		for (int i = 0; i < vocab; i++)
			if (l[i] >= thr)
				bufs[cur][n++] = i;
		c.ids = bufs[cur];
		c.n = n;
	}
	if (p->top_k > 0 && p->top_k < c.n) {
		cur ^= c.ids != NULL; /* write into the buffer c does not use */
		if (p->top_k <= SAMPLER__HEAP_K)
			truncate_top_k_heap(&c, p->top_k, l, bufs[cur]);
		else
			truncate_top_k(&c, p->top_k, l, mx, sc, bufs[cur]);
	}
	if (!have_all_probs)
		for (int i = 0; i < c.n; i++) {
			int32_t t = cand_at(&c, i);
			prob[t] = exp_nonpos(l[t] - mx);
		}
	double mass = 0.0;
	if (!c.ids && have_all_probs)
		mass = total;
	else
		for (int i = 0; i < c.n; i++)
			mass += (double)prob[cand_at(&c, i)];
	if (p->top_p < 1.0f && c.n > 1) {
		cur ^= c.ids != NULL;
		truncate_top_p(&c, p->top_p, mass, l, mx, sc, bufs[cur]);
		mass = 0.0;
		for (int i = 0; i < c.n; i++)
			mass += (double)prob[cand_at(&c, i)];
	}

	double target = u * mass, cum = 0.0;
	if (!c.ids)
		return draw_all(prob, vocab, sc->block_mass, target);
	int32_t last = -1;
	for (int i = 0; i < c.n; i++) {
		int32_t t = cand_at(&c, i);
		double w = (double)prob[t];
		if (w <= 0.0)
			continue;
		cum += w;
		last = t;
		if (cum > target)
			return t;
	}
	return last; /* u * mass rounded up to the total */
}

int sampler_sample(const struct sampling_params *p, struct sampler_state *s,
		   struct sampler_scratch *sc, float *logits, int vocab, struct sample_result *out)
{
	if (vocab <= 0 || vocab > sc->vocab)
		return ERR_INVAL;
	/* Always one draw, so the stream position equals the token index. */
	double u = rng_uniform(&s->rng);

	apply_min_tokens(p, s, logits, vocab);
	apply_logit_bias(p, logits, vocab);
	apply_penalties(p, s, logits, vocab);

	bool greedy = !(p->temperature >= SAMPLER_GREEDY_EPS);
	int32_t tok;
	float mx = scale_and_argmax(logits, vocab, greedy ? 1.0f : 1.0f / p->temperature, &tok);
	if (mx == -INFINITY)
		return ERR_RANGE;

	double logz = 0.0;
	bool want_lp = p->logprobs >= 0;
	if (greedy) {
		if (want_lp)
			logz = (double)mx + log(exp_pass(sc->prob, logits, vocab, mx, sc->block_mass));
	} else {
		/* Every exp is needed for logprobs or when no top_k bounds the set. */
		bool all = want_lp || p->top_k <= 0 || p->top_k >= vocab;
		double sum = 0.0;
		if (all) {
			sum = exp_pass(sc->prob, logits, vocab, mx, sc->block_mass);
			logz = (double)mx + log(sum);
		}
		tok = sample_truncated(p, logits, vocab, mx, sc, all, sum, u);
		if (tok < 0)
			return ERR_INTERNAL; /* the max has weight 1 and is always kept */
	}

	memset(out, 0, sizeof(*out));
	out->token = tok;
	if (want_lp)
		fill_logprobs(p, logits, vocab, logz, out);
	return sampler_accept(s, tok);
}

/* ---- sampling on the device ------------------------------------------------ */

_Static_assert(K_SAMPLE_MAX_TOP == SAMPLER_MAX_LOGPROBS, "top logprobs limits differ");

void sampler_device_lists_init(struct sampler_device_lists *l)
{
	memset(l, 0, sizeof(*l));
}

void sampler_device_lists_reset(struct sampler_device_lists *l)
{
	l->n_pen = l->n_bias = l->n_ban = 0;
}

void sampler_device_lists_deinit(struct sampler_device_lists *l)
{
	free(l->pen);
	free(l->bias);
	free(l->ban);
	memset(l, 0, sizeof(*l));
}

/* Make room for `more` elements of `size` bytes after n in *arr of *cap. */
static int grow(void **arr, int *cap, int n, int more, size_t size)
{
	if (more <= *cap - n)
		return 0;
	if (more > INT32_MAX - n)
		return ERR_OVERFLOW;
	size_t want = (size_t)n + (size_t)more, ncap = *cap ? (size_t)*cap : 64;
	while (ncap < want)
		ncap *= 2;
	if (ncap > INT32_MAX)
		ncap = INT32_MAX;
	void *p = realloc(*arr, ncap * size);
	if (!p)
		return ERR_NOMEM;
	*arr = p;
	*cap = (int)ncap;
	return 0;
}

static int add_ban(struct sampler_device_lists *l, int32_t t, int vocab)
{
	if (t < 0 || t >= vocab)
		return 0;
	int rc = grow((void **)&l->ban, &l->cap_ban, l->n_ban, 1, sizeof(*l->ban));
	if (rc)
		return rc;
	l->ban[l->n_ban++] = t;
	return 0;
}

/* The ban entries: what apply_min_tokens sets to -inf. */
static int device_bans(const struct sampling_params *p, const struct sampler_state *s,
		       int vocab, struct sampler_device_lists *l)
{
	if (s->n_generated >= p->min_tokens)
		return 0;
	int rc = 0;
	if (!p->ignore_eos)
		for (int i = 0; i < s->n_eos && !rc; i++)
			rc = add_ban(l, s->eos_ids[i], vocab);
	for (int i = 0; i < p->n_stop_token_ids && !rc; i++)
		rc = add_ban(l, p->stop_token_ids[i], vocab);
	return rc;
}

/* The penalty entries: every tracked token apply_penalties would change. */
static int device_pens(const struct sampling_params *p, const struct sampler_state *s,
		       int vocab, struct sampler_device_lists *l)
{
	if (!s->track)
		return 0;
	bool rep = p->repetition_penalty != 1.0f;
	int rc = grow((void **)&l->pen, &l->cap_pen, l->n_pen, (int)s->n_used, sizeof(*l->pen));
	if (rc)
		return rc;
	for (uint32_t i = 0; i < s->cap; i++) {
		const struct sampler__count *c = &s->slots[i];
		if (c->token < 0 || c->token >= vocab || !((rep && c->in_prompt) || c->n_gen > 0))
			continue;
		l->pen[l->n_pen++] = (struct k_sample_pen){ .token = c->token,
							    .n_gen = c->n_gen,
							    .in_prompt = c->in_prompt };
	}
	return 0;
}

int sampler_device_row(const struct sampling_params *p, struct sampler_state *s, int vocab,
		       struct k_sample_row *row, struct sampler_device_lists *l)
{
	if (vocab <= 0)
		return ERR_INVAL;
	/* The draw comes first, as in sampler_sample, so the stream stays in step
	 * even when this call fails. */
	double u = rng_uniform(&s->rng);
	bool greedy = !(p->temperature >= SAMPLER_GREEDY_EPS);
	memset(row, 0, sizeof(*row));
	row->u = u;
	row->inv_temperature = greedy ? 1.0f : 1.0f / p->temperature;
	row->top_p = p->top_p;
	row->min_p = p->min_p;
	row->log_min_p = p->min_p > 0.0f ? logf(p->min_p) : 0.0f;
	row->repetition_penalty = p->repetition_penalty;
	row->frequency_penalty = p->frequency_penalty;
	row->presence_penalty = p->presence_penalty;
	row->top_k = p->top_k;
	row->n_logprobs = p->logprobs;
	row->greedy = greedy;

	row->ban_begin = l->n_ban;
	int rc = device_bans(p, s, vocab, l);
	row->ban_end = l->n_ban;
	if (rc)
		return rc;

	row->bias_begin = l->n_bias;
	if (p->n_logit_bias > 0) {
		rc = grow((void **)&l->bias, &l->cap_bias, l->n_bias, p->n_logit_bias,
			  sizeof(*l->bias));
		if (rc)
			return rc;
		for (int i = 0; i < p->n_logit_bias; i++)
			l->bias[l->n_bias++] = (struct k_sample_bias){
				.token = p->logit_bias[i].token, .bias = p->logit_bias[i].bias
			};
	}
	row->bias_end = l->n_bias;

	row->pen_begin = l->n_pen;
	rc = device_pens(p, s, vocab, l);
	row->pen_end = l->n_pen;
	return rc;
}

int sampler_device_finish(const struct sampling_params *p, struct sampler_state *s,
			  int32_t token, float logprob, int32_t rank, const int32_t *top_ids,
			  const float *top_logprobs, struct sample_result *out)
{
	if (token < 0)
		return ERR_RANGE;
	memset(out, 0, sizeof(*out));
	out->token = token;
	if (p->logprobs >= 0) {
		out->logprob = logprob;
		out->rank = rank;
		int n = p->logprobs < K_SAMPLE_MAX_TOP ? p->logprobs : K_SAMPLE_MAX_TOP;
		while (out->n_top < n && top_ids[out->n_top] >= 0) {
			out->top[out->n_top].token = top_ids[out->n_top];
			out->top[out->n_top].logprob = top_logprobs[out->n_top];
			out->n_top++;
		}
	}
	return sampler_accept(s, token);
}
