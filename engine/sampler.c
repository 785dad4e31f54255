/* engine/sampler.c — the sampler chain described in sampler.h.
 *
 * Hot path for a large vocabulary: one pass to scale and find the max, one
 * pass of expf, then truncation by partial selection (quickselect for top_k,
 * growing quickselect + sort of only the head for top_p) instead of sorting
 * the whole vocabulary. Penalties touch only the tokens in the sparse table.
 * Test: tests/sampling/test_sampler.c (chi-square against exact
 * distributions, hand-computed penalties, seeds, logprobs).
 */
#include "engine/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"

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

/* Strict UTF-8: no overlongs, no surrogates, nothing above U+10FFFF. */
static bool utf8_valid(const unsigned char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		unsigned c = s[i];
		size_t len;
		unsigned lo = 0x80, hi = 0xBF;
		if (c < 0x80) {
			i++;
			continue;
		} else if (c >= 0xC2 && c <= 0xDF) {
			len = 2;
		} else if (c >= 0xE0 && c <= 0xEF) {
			len = 3;
			if (c == 0xE0)
				lo = 0xA0;
			if (c == 0xED)
				hi = 0x9F;
		} else if (c >= 0xF0 && c <= 0xF4) {
			len = 4;
			if (c == 0xF0)
				lo = 0x90;
			if (c == 0xF4)
				hi = 0x8F;
		} else {
			return false;
		}
		if (n - i < len)
			return false;
		if (s[i + 1] < lo || s[i + 1] > hi)
			return false;
		for (size_t k = 2; k < len; k++)
			if ((s[i + k] & 0xC0) != 0x80)
				return false;
		i += len;
	}
	return true;
}

int sampling_params_validate(const struct sampling_params *p, int vocab, struct diag *d)
{
	if (!in_range(p->temperature, 0.0f, 2.0f))
		return diag_set(d, ERR_RANGE, "temperature must be in [0, 2]");
	if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
		return diag_set(d, ERR_RANGE, "top_p must be in (0, 1]");
	if (p->top_k < -1)
		return diag_set(d, ERR_RANGE, "top_k must be -1 (disabled) or >= 1");
	if (!in_range(p->min_p, 0.0f, 1.0f))
		return diag_set(d, ERR_RANGE, "min_p must be in [0, 1]");
	if (!(p->repetition_penalty > 0.0f && p->repetition_penalty <= 2.0f))
		return diag_set(d, ERR_RANGE, "repetition_penalty must be in (0, 2]");
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
	if (p->n_stop < 0 || (p->n_stop > 0 && !p->stop))
		return diag_set(d, ERR_RANGE, "stop: bad count");
	for (int i = 0; i < p->n_stop; i++) {
		const char *s = p->stop[i];
		if (!s || !s[0])
			return diag_set(d, ERR_RANGE, "stop: string %d is empty", i);
		if (!utf8_valid((const unsigned char *)s, strlen(s)))
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
	if (!sc->prob || !sc->idx) {
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

/* Replace NaN with -inf and +inf with FLT_MAX (so exp(l - max) stays finite),
 * optionally scale by inv_t, and return the max. */
static float scale_and_max(float *logits, int vocab, float inv_t)
{
	float mx = -INFINITY;
	for (int i = 0; i < vocab; i++) {
		float x = logits[i] * inv_t;
		if (isnan(x))
			x = -INFINITY;
		else if (x > FLT_MAX)
			x = FLT_MAX;
		logits[i] = x;
		if (x > mx)
			mx = x;
	}
	return mx;
}

static double log_partition(const float *logits, int vocab, float mx)
{
	double sum = 0.0;
	for (int i = 0; i < vocab; i++)
		sum += (double)expf(logits[i] - mx);
	return (double)mx + log(sum);
}

static void fill_logprobs(const struct sampling_params *p, const float *logits, int vocab,
			  double logz, struct sample_result *out)
{
	int32_t tok = out->token;
	float lt = logits[tok];
	out->logprob = (float)((double)lt - logz);
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
		out->top[i].logprob = (float)((double)logits[top[i]] - logz);
	}
}

/* Steps 6-9 of the chain: truncate and draw. prob[i] = exp(l[i] - max),
 * total = sum of prob[] in index order. */
static int32_t sample_truncated(const struct sampling_params *p, const float *l, int vocab,
				struct sampler_scratch *sc, double total, double u)
{
	float *prob = sc->prob;
	int32_t *idx = sc->idx;
	int n = vocab;
	bool all = true; /* candidates are 0..vocab-1, not idx[] */

	if (p->min_p > 0.0f) {
		/* prob[i] / max_prob = exp(l[i] - max) = prob[i] here */
		n = 0;
		for (int i = 0; i < vocab; i++)
			if (prob[i] >= p->min_p)
				idx[n++] = i;
		all = false;
	}
	int k = p->top_k;
	if (k > 0 && k < n) {
		if (all) {
			for (int i = 0; i < vocab; i++)
				idx[i] = i;
			all = false;
		}
		select_top(idx, n, k, l);
		n = k;
	}
	double mass = 0.0;
	if (all)
		mass = total;
	else
		for (int i = 0; i < n; i++)
			mass += (double)prob[idx[i]];

	if (p->top_p < 1.0f) {
		if (all) {
			for (int i = 0; i < vocab; i++)
				idx[i] = i;
			all = false;
		}
		double target = (double)p->top_p * mass;
		/* Sort only a growing head: the nucleus is usually tiny. */
		int m = n < 64 ? n : 64;
		int keep = n;
		for (;;) {
			if (m < n)
				select_top(idx, n, m, l);
			sort_desc(idx, m, l);
			double cum = 0.0;
			int j = 0;
			for (; j < m; j++) {
				cum += (double)prob[idx[j]];
				if (cum >= target)
					break;
			}
			if (j < m) {
				keep = j + 1;
				break;
			}
			if (m == n)
				break; /* rounding: the whole set is the nucleus */
			m = (n / 4 < m) ? n : m * 4;
		}
		n = keep;
		mass = 0.0;
		for (int i = 0; i < n; i++)
			mass += (double)prob[idx[i]];
	}

	double target = u * mass;
	double cum = 0.0;
	int32_t last = -1;
	for (int i = 0; i < n; i++) {
		int32_t t = all ? i : idx[i];
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
	float mx = scale_and_max(logits, vocab, greedy ? 1.0f : 1.0f / p->temperature);
	if (mx == -INFINITY)
		return ERR_RANGE;

	int32_t tok;
	double logz = 0.0;
	if (greedy) {
		tok = 0;
		for (int i = 1; i < vocab; i++)
			if (logits[i] > logits[tok])
				tok = i;
		if (p->logprobs >= 0)
			logz = log_partition(logits, vocab, mx);
	} else {
		double sum = 0.0;
		for (int i = 0; i < vocab; i++) {
			sc->prob[i] = expf(logits[i] - mx);
			sum += (double)sc->prob[i];
		}
		logz = (double)mx + log(sum);
		tok = sample_truncated(p, logits, vocab, sc, sum, u);
		if (tok < 0)
			return ERR_INTERNAL; /* max has prob 1, so some weight is > 0 */
	}

	memset(out, 0, sizeof(*out));
	out->token = tok;
	if (p->logprobs >= 0)
		fill_logprobs(p, logits, vocab, logz, out);
	return sampler_accept(s, tok);
}
