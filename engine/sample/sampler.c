/* engine/sample/sampler.c — the sampler chain described in sampler.h.
 *
 * Owns the parameters' validation, the per-sequence state (sparse token
 * table, stream), the device rows, and two SIMD passes; every rule of the
 * chain is kernels/sample_seq.h's (shared with the GPU kernel and its
 * reference). Hot path for a large vocabulary: one pass to scale and find the
 * max, one SIMD pass of exp (sample_seq.h's steps on 4 lanes; skipped when
 * top_k bounds the set and no logprobs are asked), then ks_sample_truncated:
 * a k-heap for small top_k, logit buckets for large top_k and top_p, block
 * sums for the final inverse-CDF draw. Penalties touch only the tokens in the
 * sparse table. Test: tests/sampling/test_sampler.c (chi-square against exact
 * distributions, hand-computed penalties, seeds, logprobs).
 */
#include "engine/sample/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "common/utf8.h"
#include "kernels/sample_seq.h"

_Static_assert(SAMPLER__NB == KS_NB && SAMPLER__BLOCK == KS_BLOCK, "scratch sizes differ");
_Static_assert((int)SAMPLER_LOGIT_BIAS_MAX - (int)KS_BIAS_MAX == 0 &&
		       (int)SAMPLER_LOGPROB_MIN - (int)KS_LOGPROB_MIN == 0,
	       "reported limits differ");

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
		if (t < 0 || t >= vocab)
			continue; /* validate() rejects these; never write out of range */
		logits[t] = ks_biased(logits[t], p->logit_bias[i].bias);
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
		logits[c->token] = ks_penalized(logits[c->token], r, p->frequency_penalty,
						p->presence_penalty, c->in_prompt, c->n_gen);
	}
}

static void sanitize(float *logits, int vocab)
{
	for (int i = 0; i < vocab; i++)
		logits[i] = ks_clean(logits[i]);
}

/* 4-lane GCC/Clang vector types for the passes over the whole vocabulary: at
 * -O2 the compiler does not vectorize these loops by itself. */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f v4f_splat(float x)
{
	return (v4f){ x, x, x, x };
}

/* Scale by inv_t (sanitized: ks_scaled) and return the max and its lowest
 * index. One vector pass that only detects NaN and +inf, plus a short scan
 * for the index in the common all-finite case. */
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
	*arg = ks_first_max(logits, vocab, mx);
	return mx;
}

/* sample_seq.h's exp approximation on four lanes. Vectorized by hand because
 * a libm call per token neither inlines nor vectorizes and the exp pass is the
 * largest cost of sampling a 150k vocabulary. */
static inline v4f exp_nonpos4(v4f x)
{
	v4i small = x < v4f_splat(KS_EXP_MIN); /* -1 where the result is 0 */
	v4f xc = (v4f)(((v4i)x & ~small) | ((v4i)v4f_splat(KS_EXP_MIN) & small));
	v4f kf = KS_EXP_ROUND(xc);
	v4f r = KS_EXP_REDUCE(xc, kf);
	v4f p = KS_EXP_POLY(r);
	v4i bits = KS_EXP_BITS(__builtin_convertvector(kf, v4i));
	return (v4f)((v4i)(p * (v4f)bits) & ~small);
}

/* sample_seq.h's ks_exp_pass on four lanes: prob[i] = exp(l[i] - mx);
 * block_mass[b] = sum of block b (KS_BLOCK tokens, a multiple of 8), as
 * ks_block_sum adds it. Returns the total in double. */
static double exp_pass(float *prob, const float *l, int vocab, float mx, double *block_mass)
{
	double total = 0.0;
	v4f vmx = v4f_splat(mx);
	for (int b0 = 0, blk = 0; b0 < vocab; b0 += KS_BLOCK, blk++) {
		int end = vocab - b0 < KS_BLOCK ? vocab : b0 + KS_BLOCK;
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
			prob[i] = ks_exp_nonpos(l[i] - mx);
			bs += (double)prob[i];
		}
		bs += KS_LANES_SUM(acc0, acc1);
		block_mass[blk] = bs;
		total += bs;
	}
	return total;
}

static void fill_logprobs(const struct sampling_params *p, const float *logits, int vocab,
			  double logz, struct sample_result *out)
{
	int32_t top[SAMPLER_MAX_LOGPROBS];
	out->logprob = ks_lp_clamp((double)logits[out->token] - logz);
	out->rank = ks_rank_top(logits, vocab, out->token, p->logprobs, top, &out->n_top);
	for (int i = 0; i < out->n_top; i++) {
		out->top[i].token = top[i];
		out->top[i].logprob = ks_lp_clamp((double)logits[top[i]] - logz);
	}
}

/* Steps 6-9 of the chain (sample_seq.h's ks_sample_truncated) in sc. */
static int32_t sample_truncated(const struct sampling_params *p, const float *l, int vocab,
				float mx, struct sampler_scratch *sc, bool have_all_probs,
				double total, double u)
{
	struct ks_work w = { .prob = sc->prob,
			     .block_mass = sc->block_mass,
			     .buf = { sc->idx, sc->tmp },
			     .hn = sc->hist_n,
			     .hm = sc->hist_mass };
	struct ks_trunc t = { .min_p = p->min_p,
			      .log_min_p = p->min_p > 0.0f ? logf(p->min_p) : 0.0f,
			      .top_k = p->top_k,
			      .top_p = p->top_p };
	return ks_sample_truncated(&t, l, vocab, mx, &w, have_all_probs, total, u, NULL);
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
			logz = ks_logz(mx, exp_pass(sc->prob, logits, vocab, mx, sc->block_mass));
	} else {
		/* Every exp is needed for logprobs or when no top_k bounds the set. */
		bool all = want_lp || p->top_k <= 0 || p->top_k >= vocab;
		double sum = 0.0;
		if (all) {
			sum = exp_pass(sc->prob, logits, vocab, mx, sc->block_mass);
			logz = ks_logz(mx, sum);
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
