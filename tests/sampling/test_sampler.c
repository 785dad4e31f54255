/* tests/sampling/test_sampler.c — engine/sample/sampler.h and engine/sample/rng.h.
 *
 * Distribution tests draw many tokens from a fixed logit vector with a fixed
 * seed and compare the counts with the exact expected distribution (computed
 * here by a plain full-sort reference) by a chi-square test at alpha = 0.001;
 * tokens outside the truncated set must never be drawn. Penalties, bias and
 * min_tokens are checked against hand-computed processed logits.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sample/rng.h"
#include "engine/sample/sampler.h"

/* ---- rng ---------------------------------------------------------------- */

START_TEST(test_rng_known_answers)
{
	/* Values from an independent Python implementation of splitmix64 and
	 * xoshiro256**; splitmix64 from 0 starts 0xe220a8397b1dcdaf, the
	 * published first output. */
	struct rng r;
	rng_seed(&r, 0);
	ck_assert_uint_eq(r.s[0], 0xe220a8397b1dcdafULL);
	ck_assert_uint_eq(r.s[3], 0xf88bb8a8724c81ecULL);
	ck_assert_uint_eq(rng_next(&r), 0x99ec5f36cb75f2b4ULL);
	ck_assert_uint_eq(rng_next(&r), 0xbf6e1f784956452aULL);
	ck_assert_uint_eq(rng_next(&r), 0x1a5f849d4933e6e0ULL);
	rng_seed(&r, 42);
	ck_assert_uint_eq(rng_next(&r), 0x15780b2e0c2ec716ULL);
	ck_assert_uint_eq(rng_next(&r), 0x6104d9866d113a7eULL);
	ck_assert_uint_eq(rng_next(&r), 0xae17533239e499a1ULL);
	for (int i = 0; i < 1000; i++) {
		double u = rng_uniform(&r);
		ck_assert(u >= 0.0 && u < 1.0);
	}
	ck_assert_uint_eq(rng_request_seed(true, 5, 100, 7), 5);
	ck_assert_uint_eq(rng_request_seed(false, 5, 100, 7), 100 ^ 7);
}
END_TEST

/* ---- reference distribution ---------------------------------------------- */

static const float *g_sort_l;
static int cmp_desc(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	if (g_sort_l[x] != g_sort_l[y])
		return g_sort_l[x] > g_sort_l[y] ? -1 : 1;
	return x - y;
}

/* Exact distribution after temperature, min_p, top_k, top_p (no penalties). */
static void ref_probs(const float *logits, int n, float t, float min_p, int top_k, float top_p,
		      double *out)
{
	float *l = malloc(sizeof(float) * (size_t)n);
	int *ord = malloc(sizeof(int) * (size_t)n);
	double mx = -INFINITY, sum = 0;
	for (int i = 0; i < n; i++) {
		l[i] = logits[i] / t;
		if (l[i] > mx)
			mx = l[i];
	}
	for (int i = 0; i < n; i++) {
		out[i] = exp((double)l[i] - mx);
		sum += out[i];
	}
	for (int i = 0; i < n; i++)
		out[i] /= sum; /* full distribution */
	double pmax = 0;
	for (int i = 0; i < n; i++)
		pmax = out[i] > pmax ? out[i] : pmax;
	if (min_p > 0)
		for (int i = 0; i < n; i++)
			if (out[i] < min_p * pmax)
				out[i] = 0;
	for (int i = 0; i < n; i++)
		ord[i] = i;
	g_sort_l = l;
	qsort(ord, (size_t)n, sizeof(int), cmp_desc);
	int kept = 0;
	for (int i = 0; i < n; i++) {
		if (out[ord[i]] == 0)
			continue;
		kept++;
		if (top_k > 0 && kept > top_k)
			out[ord[i]] = 0;
	}
	sum = 0;
	for (int i = 0; i < n; i++)
		sum += out[i];
	if (top_p < 1) {
		double cum = 0;
		bool reached = false;
		for (int i = 0; i < n; i++) {
			int t2 = ord[i];
			if (out[t2] == 0)
				continue;
			if (reached) {
				out[t2] = 0;
				continue;
			}
			cum += out[t2] / sum;
			if (cum >= top_p)
				reached = true;
		}
	}
	sum = 0;
	for (int i = 0; i < n; i++)
		sum += out[i];
	for (int i = 0; i < n; i++)
		out[i] /= sum;
	free(l);
	free(ord);
}

/* chi-square critical values at alpha = 0.001, df = 1..30 */
static const double chi2_crit[] = {
	10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124, 27.877, 29.588,
	31.264, 32.909, 34.528, 36.123, 37.697, 39.252, 40.790, 42.312, 43.820, 45.315,
	46.797, 48.268, 49.728, 51.179, 52.620, 54.052, 55.476, 56.892, 58.301, 59.703,
};

/* Draw n_draws tokens and chi-square them against ref_probs; tokens with
 * expected probability 0 must never appear. Categories with expected count
 * < 5 are pooled into one. */
static void check_distribution(const float *logits, int n, struct sampling_params *p,
			       int n_draws)
{
	double *want = malloc(sizeof(double) * (size_t)n);
	long *got = calloc((size_t)n, sizeof(long));
	float *work = malloc(sizeof(float) * (size_t)n);
	ref_probs(logits, n, p->temperature, p->min_p, p->top_k, p->top_p, want);

	struct sampler_state s;
	struct sampler_scratch sc;
	ck_assert_int_eq(sampler_scratch_init(&sc, n), 0);
	ck_assert_int_eq(sampler_state_init(&s, p, 0, 0, NULL, 0, NULL, 0), 0);
	for (int d = 0; d < n_draws; d++) {
		memcpy(work, logits, sizeof(float) * (size_t)n);
		struct sample_result r;
		ck_assert_int_eq(sampler_sample(p, &s, &sc, work, n, &r), 0);
		ck_assert(r.token >= 0 && r.token < n);
		got[r.token]++;
	}
	double chi2 = 0, pool_e = 0, pool_o = 0;
	int cats = 0;
	for (int i = 0; i < n; i++) {
		if (want[i] == 0) {
			ck_assert_msg(got[i] == 0, "token %d drawn %ld times but truncated", i,
				      got[i]);
			continue;
		}
		double e = want[i] * n_draws;
		if (e < 5) {
			pool_e += e;
			pool_o += (double)got[i];
			continue;
		}
		chi2 += ((double)got[i] - e) * ((double)got[i] - e) / e;
		cats++;
	}
	if (pool_e > 0) {
		chi2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
		cats++;
	}
	if (cats > 1) {
		int df = cats - 1;
		ck_assert_int_le(df, 30);
		ck_assert_msg(chi2 < chi2_crit[df - 1], "chi2 %.2f >= %.3f (df %d)", chi2,
			      chi2_crit[df - 1], df);
	} else {
		ck_assert_int_eq(cats, 1); /* a single certain token */
	}
	sampler_state_deinit(&s);
	sampler_scratch_deinit(&sc);
	free(want);
	free(got);
	free(work);
}

static const float k_logits[10] = { 1.0f, 2.5f, -0.5f, 0.3f, 2.0f, -3.0f, 1.7f, 0.0f, 0.9f, -1.2f };

START_TEST(test_dist_temperature)
{
	struct sampling_params p;
	sampling_params_init(&p);
	p.has_seed = true;
	p.seed = 1234;
	check_distribution(k_logits, 10, &p, 40000);
	p.temperature = 0.6f;
	check_distribution(k_logits, 10, &p, 40000);
	p.temperature = 1.7f;
	check_distribution(k_logits, 10, &p, 40000);
}
END_TEST

START_TEST(test_dist_top_k)
{
	struct sampling_params p;
	sampling_params_init(&p);
	p.has_seed = true;
	p.seed = 99;
	p.top_k = 3;
	check_distribution(k_logits, 10, &p, 30000);
	p.top_k = 1; /* always the argmax */
	check_distribution(k_logits, 10, &p, 2000);
	p.top_k = 10;
	p.temperature = 0.8f;
	check_distribution(k_logits, 10, &p, 30000);
}
END_TEST

START_TEST(test_dist_top_p)
{
	struct sampling_params p;
	sampling_params_init(&p);
	p.has_seed = true;
	p.seed = 7;
	p.top_p = 0.8f;
	check_distribution(k_logits, 10, &p, 30000);
	p.top_p = 0.3f;
	p.temperature = 1.3f;
	check_distribution(k_logits, 10, &p, 30000);
}
END_TEST

START_TEST(test_dist_min_p_and_chain)
{
	struct sampling_params p;
	sampling_params_init(&p);
	p.has_seed = true;
	p.seed = 5;
	p.min_p = 0.2f;
	check_distribution(k_logits, 10, &p, 30000);
	p.min_p = 0.15f; /* keeps the token at ratio 0.11 out, 0.20 in */
	check_distribution(k_logits, 10, &p, 30000);
	p.min_p = 0.05f;
	p.top_k = 5;
	p.top_p = 0.9f;
	p.temperature = 0.7f;
	check_distribution(k_logits, 10, &p, 30000);
}
END_TEST

/* A 2000-token vocabulary where the kept set holds hundreds of tokens, so the
 * histogram paths of top_k (k > 1024) and top_p (sets > 256) are taken.
 * Chi-square over 20 groups of tokens of equal expected mass. */
static void check_large(const struct sampling_params *p, int min_kept, bool peaked)
{
	enum { N = 2000, DRAWS = 15000, GROUPS = 20 };
	float *l = malloc(sizeof(float) * N), *work = malloc(sizeof(float) * N);
	double *want = malloc(sizeof(double) * N);
	int *group = malloc(sizeof(int) * N);
	struct rng g;
	rng_seed(&g, 2024);
	for (int i = 0; i < N; i++)
		l[i] = (float)(rng_uniform(&g) * 4.0 - 2.0);
	if (peaked) /* a few strong tokens hold most of the mass */
		for (int i = 0; i < 12; i++)
			l[(i * 157 + 11) % N] = 7.0f + 0.2f * (float)i;
	ref_probs(l, N, p->temperature, p->min_p, p->top_k, p->top_p, want);
	int n_kept = 0;
	double cum = 0;
	for (int i = 0; i < N; i++) {
		n_kept += want[i] > 0;
		group[i] = -1;
		if (want[i] > 0) {
			int gi = (int)(cum * GROUPS);
			group[i] = gi >= GROUPS ? GROUPS - 1 : gi;
			cum += want[i];
		}
	}
	ck_assert_int_gt(n_kept, min_kept);
	double gwant[GROUPS] = { 0 };
	long ggot[GROUPS] = { 0 };
	for (int i = 0; i < N; i++)
		if (group[i] >= 0)
			gwant[group[i]] += want[i];

	struct sampler_state s;
	struct sampler_scratch sc;
	ck_assert_int_eq(sampler_scratch_init(&sc, N), 0);
	ck_assert_int_eq(sampler_state_init(&s, p, 0, 0, NULL, 0, NULL, 0), 0);
	for (int d = 0; d < DRAWS; d++) {
		memcpy(work, l, sizeof(float) * N);
		struct sample_result r;
		ck_assert_int_eq(sampler_sample(p, &s, &sc, work, N, &r), 0);
		ck_assert_msg(group[r.token] >= 0, "token %d outside the kept set", r.token);
		ggot[group[r.token]]++;
	}
	/* groups can be empty when a few tokens hold the mass */
	double chi2 = 0;
	int cats = 0;
	for (int i = 0; i < GROUPS; i++) {
		double e = gwant[i] * DRAWS;
		if (e == 0) {
			ck_assert_int_eq(ggot[i], 0);
			continue;
		}
		ck_assert(e > 5);
		chi2 += (ggot[i] - e) * (ggot[i] - e) / e;
		cats++;
	}
	ck_assert_int_ge(cats, 2);
	ck_assert_msg(chi2 < chi2_crit[cats - 2], "chi2 %.2f", chi2);
	sampler_state_deinit(&s);
	sampler_scratch_deinit(&sc);
	free(l);
	free(work);
	free(want);
	free(group);
}

START_TEST(test_dist_large_vocab)
{
	struct sampling_params p;
	sampling_params_init(&p);
	p.has_seed = true;
	p.seed = 11;
	p.top_p = 0.7f; /* histogram top_k, then histogram top_p */
	p.temperature = 0.9f;
	p.top_k = 1500;
	check_large(&p, 256, false);
	p.top_k = -1; /* top_p over the whole vocabulary */
	p.top_p = 0.5f;
	check_large(&p, 256, false);
}
END_TEST

START_TEST(test_dist_large_vocab_min_p_heap_peaked)
{
	struct sampling_params p;
	sampling_params_init(&p);
	p.has_seed = true;
	p.seed = 12;
	p.temperature = 0.9f;
	/* min_p alone */
	p.min_p = 0.3f;
	check_large(&p, 500, false);
	/* min_p, then heap top_k */
	p.min_p = 0.1f;
	p.top_k = 700;
	check_large(&p, 600, false);
	p.top_k = -1; /* peaked: top_p finds the nucleus among the top 64 */
	p.min_p = 0.0f;
	p.top_p = 0.9f;
	check_large(&p, 4, true);
	p.top_p = 1.0f;
	/* no truncation: block-sum draw over everything */
	p.min_p = 0.0f;
	check_large(&p, 1999, false);
}
END_TEST

/* Random parameters, sizes and logits (ties, -inf, NaN, a vocabulary of 1):
 * every draw must succeed, land in the reference's kept set, and report
 * consistent logprobs. Runs under ASan/UBSan in CI. */
START_TEST(test_random_params)
{
	struct rng g;
	rng_seed(&g, 4242);
	enum { MAXV = 3000 };
	float *l = malloc(sizeof(float) * MAXV), *work = malloc(sizeof(float) * MAXV);
	double *want = malloc(sizeof(double) * MAXV);
	struct sampler_scratch sc;
	ck_assert_int_eq(sampler_scratch_init(&sc, MAXV), 0);
	for (int it = 0; it < 300; it++) {
		int v = 1 + (int)(rng_next(&g) % (it % 3 == 0 ? 20 : MAXV));
		bool quant = rng_next(&g) % 2; /* many exact ties */
		for (int i = 0; i < v; i++) {
			double x = rng_uniform(&g) * 16.0 - 8.0;
			l[i] = quant ? (float)(floor(x) * 0.5) : (float)x;
			if (rng_next(&g) % 50 == 0)
				l[i] = -INFINITY;
		}
		l[rng_next(&g) % v] = 3.0f; /* at least one finite */
		struct sampling_params p;
		sampling_params_init(&p);
		p.has_seed = true;
		p.seed = rng_next(&g);
		p.temperature = (float)(0.05 + rng_uniform(&g) * 1.95);
		p.top_p = rng_next(&g) % 2 ? (float)(0.01 + rng_uniform(&g) * 0.99) : 1.0f;
		p.top_k = rng_next(&g) % 2 ? 1 + (int)(rng_next(&g) % (v + 5)) : -1;
		p.min_p = rng_next(&g) % 3 == 0 ? (float)rng_uniform(&g) : 0.0f;
		p.logprobs = (int)(rng_next(&g) % 22) - 1;
		ck_assert_int_eq(sampling_params_validate(&p, v, NULL), 0);
		ref_probs(l, v, p.temperature, p.min_p, p.top_k, p.top_p, want);
		struct sampler_state s;
		ck_assert_int_eq(sampler_state_init(&s, &p, 0, 0, NULL, 0, NULL, 0), 0);
		for (int d = 0; d < 5; d++) {
			memcpy(work, l, sizeof(float) * (size_t)v);
			if (d == 4 && v > 1)
				work[0] = NAN; /* treated as -inf: make the reference agree */
			struct sample_result r;
			ck_assert_int_eq(sampler_sample(&p, &s, &sc, work, v, &r), 0);
			ck_assert(r.token >= 0 && r.token < v);
			if (d < 4)
				ck_assert_msg(want[r.token] > 0, "it %d: token %d not in the kept set",
					      it, r.token);
			if (p.logprobs >= 0) {
				ck_assert(r.logprob <= 1e-6f && r.logprob >= SAMPLER_LOGPROB_MIN);
				ck_assert_int_eq(r.n_top, p.logprobs < v ? p.logprobs : v);
				for (int j = 1; j < r.n_top; j++)
					ck_assert(r.top[j].logprob <= r.top[j - 1].logprob);
				if (r.rank <= r.n_top)
					ck_assert_float_eq(r.top[r.rank - 1].logprob, r.logprob);
				else
					ck_assert(r.n_top == 0 || r.logprob <= r.top[r.n_top - 1].logprob);
			}
		}
		sampler_state_deinit(&s);
	}
	sampler_scratch_deinit(&sc);
	free(l);
	free(work);
	free(want);
}
END_TEST

/* ---- penalties, bias, min_tokens, greedy ---------------------------------- */

START_TEST(test_penalties_and_bias)
{
	float l[5] = { 1.0f, -1.0f, 2.0f, 0.5f, -0.5f };
	struct sampler_logit_bias bias[2] = { { 4, 1.0f }, { 0, 200.0f } };
	int32_t prompt[3] = { 0, 1, 0 };
	struct sampling_params p;
	sampling_params_init(&p);
	p.temperature = 0; /* greedy: processed logits are left unscaled */
	p.repetition_penalty = 1.5f;
	p.frequency_penalty = 0.5f;
	p.presence_penalty = 0.25f;
	p.logit_bias = bias;
	p.n_logit_bias = 2;
	p.logprobs = 5;
	struct sampler_state s;
	struct sampler_scratch sc;
	ck_assert_int_eq(sampler_scratch_init(&sc, 5), 0);
	ck_assert_int_eq(sampler_state_init(&s, &p, 0, 0, prompt, 3, NULL, 0), 0);
	ck_assert_int_eq(sampler_accept(&s, 2), 0);
	ck_assert_int_eq(sampler_accept(&s, 3), 0);
	ck_assert_int_eq(sampler_accept(&s, 2), 0);
	struct sample_result r;
	ck_assert_int_eq(sampler_sample(&p, &s, &sc, l, 5, &r), 0);
	/* bias (clamped to 100) first, then repetition over prompt + generated,
	 * then frequency * count + presence over generated */
	const float want[5] = {
		101.0f / 1.5f,			 /* prompt */
		-1.0f * 1.5f,			 /* prompt, negative: multiplied */
		2.0f / 1.5f - 0.5f * 2 - 0.25f,	 /* generated twice */
		0.5f / 1.5f - 0.5f * 1 - 0.25f,	 /* generated once */
		-0.5f + 1.0f,			 /* bias only */
	};
	for (int i = 0; i < 5; i++)
		ck_assert_float_eq_tol(l[i], want[i], 1e-5);
	ck_assert_int_eq(r.token, 0);
	ck_assert_int_eq(s.n_generated, 4);
	/* the sampled token was recorded: a second step penalizes it too */
	float l2[5] = { 1.0f, -1.0f, 2.0f, 0.5f, -0.5f };
	ck_assert_int_eq(sampler_sample(&p, &s, &sc, l2, 5, &r), 0);
	ck_assert_float_eq_tol(l2[0], 101.0f / 1.5f - 0.5f - 0.25f, 1e-4);
	sampler_state_deinit(&s);
	sampler_scratch_deinit(&sc);
}
END_TEST

START_TEST(test_min_tokens_masks_eos)
{
	int32_t eos[2] = { 4, 3 };
	int32_t stop_ids[1] = { 1 };
	struct sampling_params p;
	sampling_params_init(&p);
	p.temperature = 0;
	p.min_tokens = 2;
	p.stop_token_ids = stop_ids;
	p.n_stop_token_ids = 1;
	struct sampler_state s;
	struct sampler_scratch sc;
	ck_assert_int_eq(sampler_scratch_init(&sc, 6), 0);
	ck_assert_int_eq(sampler_state_init(&s, &p, 0, 0, NULL, 0, eos, 2), 0);
	for (int step = 0; step < 3; step++) {
		float l[6] = { 0.0f, 9.0f, 0.5f, 8.0f, 10.0f, -1.0f };
		struct sample_result r;
		ck_assert_int_eq(sampler_sample(&p, &s, &sc, l, 6, &r), 0);
		if (step < 2) {
			ck_assert(isinf(l[4]) && l[4] < 0);
			ck_assert(isinf(l[3]) && l[3] < 0);
			ck_assert(isinf(l[1]) && l[1] < 0);
			ck_assert_int_eq(r.token, 2);
		} else {
			ck_assert_int_eq(r.token, 4); /* min_tokens reached: EOS allowed */
		}
	}
	sampler_state_deinit(&s);
	/* ignore_eos: EOS is not masked (it is not a stop), stop ids still are */
	p.ignore_eos = true;
	ck_assert_int_eq(sampler_state_init(&s, &p, 0, 0, NULL, 0, eos, 2), 0);
	float l[6] = { 0.0f, 9.0f, 0.5f, 8.0f, 10.0f, -1.0f };
	struct sample_result r;
	ck_assert_int_eq(sampler_sample(&p, &s, &sc, l, 6, &r), 0);
	ck_assert_int_eq(r.token, 4);
	ck_assert(isinf(l[1]));
	sampler_state_deinit(&s);
	sampler_scratch_deinit(&sc);
}
END_TEST

START_TEST(test_greedy_and_edge_cases)
{
	struct sampling_params p;
	sampling_params_init(&p);
	p.temperature = 0;
	struct sampler_state s;
	struct sampler_scratch sc;
	ck_assert_int_eq(sampler_scratch_init(&sc, 8), 0);
	ck_assert_int_eq(sampler_state_init(&s, &p, 0, 0, NULL, 0, NULL, 0), 0);
	float l[8] = { 1, 3, 2, 3, NAN, -INFINITY, 0, 3 };
	struct sample_result r;
	ck_assert_int_eq(sampler_sample(&p, &s, &sc, l, 8, &r), 0);
	ck_assert_int_eq(r.token, 1); /* ties: lowest id */
	ck_assert(isinf(l[4]) && l[4] < 0); /* NaN treated as -inf */
	/* all finite (the vector path), ties spread over lanes and the tail */
	float t2[11] = { 0, 5, 1, 5, 2, 5, 0, 0, 5, 1, 5 };
	ck_assert_int_eq(sampler_sample(&p, &s, &sc, t2, 8, &r), 0);
	ck_assert_int_eq(r.token, 1);
	float t3[7] = { 0, 1, 2, 3, 4, 5, 9 }; /* max in the scalar tail */
	ck_assert_int_eq(sampler_sample(&p, &s, &sc, t3, 7, &r), 0);
	ck_assert_int_eq(r.token, 6);
	float t4[6] = { 0, 1, 2, 3, 4, INFINITY }; /* +inf is the max, kept finite */
	ck_assert_int_eq(sampler_sample(&p, &s, &sc, t4, 6, &r), 0);
	ck_assert_int_eq(r.token, 5);
	ck_assert(!isinf(t4[5]));
	float dead[3] = { -INFINITY, NAN, -INFINITY };
	ck_assert_int_eq(sampler_sample(&p, &s, &sc, dead, 3, &r), ERR_RANGE);
	ck_assert_int_eq(sampler_sample(&p, &s, &sc, l, 9, &r), ERR_INVAL); /* > scratch */
	ck_assert_int_eq(sampler_sample(&p, &s, &sc, l, 0, &r), ERR_INVAL);
	/* non-greedy with -inf everywhere but one token: always that token */
	p.temperature = 1;
	for (int i = 0; i < 50; i++) {
		float one[4] = { -INFINITY, -INFINITY, 0.5f, -INFINITY };
		ck_assert_int_eq(sampler_sample(&p, &s, &sc, one, 4, &r), 0);
		ck_assert_int_eq(r.token, 2);
	}
	sampler_state_deinit(&s);
	sampler_scratch_deinit(&sc);
}
END_TEST

/* ---- seeds ---------------------------------------------------------------- */

/* Deterministic per-step logits for a sequence: depends only on (salt, step). */
static void seq_logits(float *l, int n, uint64_t salt, int step)
{
	struct rng g;
	rng_seed(&g, salt * 1000003u + (uint64_t)step);
	for (int i = 0; i < n; i++)
		l[i] = (float)(rng_uniform(&g) * 6.0 - 3.0);
}

static void run_alone(const struct sampling_params *p, uint64_t server_seed, uint64_t req,
		      int32_t *toks, int n_steps, int vocab)
{
	struct sampler_state s;
	struct sampler_scratch sc;
	float *l = malloc(sizeof(float) * (size_t)vocab);
	ck_assert_int_eq(sampler_scratch_init(&sc, vocab), 0);
	ck_assert_int_eq(sampler_state_init(&s, p, server_seed, req, NULL, 0, NULL, 0), 0);
	for (int t = 0; t < n_steps; t++) {
		struct sample_result r;
		seq_logits(l, vocab, 1, t);
		ck_assert_int_eq(sampler_sample(p, &s, &sc, l, vocab, &r), 0);
		toks[t] = r.token;
	}
	sampler_state_deinit(&s);
	sampler_scratch_deinit(&sc);
	free(l);
}

START_TEST(test_seed_determinism)
{
	enum { V = 300, T = 64 };
	struct sampling_params a;
	sampling_params_init(&a);
	a.has_seed = true;
	a.seed = 42;
	a.top_p = 0.95f;
	a.presence_penalty = 0.5f;
	int32_t t1[T], t2[T], t3[T];
	run_alone(&a, 0, 1, t1, T, V);
	run_alone(&a, 999, 77, t2, T, V); /* request seed: server seed and id don't matter */
	ck_assert_mem_eq(t1, t2, sizeof(t1));
	a.seed = 43;
	run_alone(&a, 0, 1, t3, T, V);
	ck_assert(memcmp(t1, t3, sizeof(t1)) != 0);
	/* no request seed: server_seed ^ request_id */
	a.has_seed = false;
	run_alone(&a, 5, 10, t1, T, V);
	run_alone(&a, 5, 10, t2, T, V);
	ck_assert_mem_eq(t1, t2, sizeof(t1));
	run_alone(&a, 5, 11, t3, T, V);
	ck_assert(memcmp(t1, t3, sizeof(t1)) != 0);
}
END_TEST

/* Sequence A sampled alone equals A sampled inside a batch with B (another
 * seed, greedy at some steps) and C (no seed), sharing one scratch buffer,
 * with B and C joining and leaving mid-way. */
START_TEST(test_seed_in_mixed_batch)
{
	enum { V = 300, T = 64 };
	struct sampling_params pa, pb, pc;
	sampling_params_init(&pa);
	pa.has_seed = true;
	pa.seed = 42;
	pa.top_k = 40;
	pa.temperature = 0.9f;
	sampling_params_init(&pb);
	pb.has_seed = true;
	pb.seed = 7;
	pb.top_p = 0.5f;
	pb.frequency_penalty = 1.0f;
	sampling_params_init(&pc);
	pc.min_p = 0.1f;
	int32_t alone[T], batched[T];
	run_alone(&pa, 0, 1, alone, T, V);

	struct sampler_scratch sc;
	struct sampler_state sa, sb, scs;
	float *l = malloc(sizeof(float) * V);
	ck_assert_int_eq(sampler_scratch_init(&sc, V), 0);
	ck_assert_int_eq(sampler_state_init(&sa, &pa, 0, 1, NULL, 0, NULL, 0), 0);
	ck_assert_int_eq(sampler_state_init(&sb, &pb, 0, 2, NULL, 0, NULL, 0), 0);
	ck_assert_int_eq(sampler_state_init(&scs, &pc, 0, 3, NULL, 0, NULL, 0), 0);
	struct sample_result r;
	for (int t = 0; t < T; t++) {
		if (t % 3 == 0 && t < 40) { /* B runs before A in some steps */
			seq_logits(l, V, 2, t);
			ck_assert_int_eq(sampler_sample(&pb, &sb, &sc, l, V, &r), 0);
		}
		seq_logits(l, V, 1, t);
		ck_assert_int_eq(sampler_sample(&pa, &sa, &sc, l, V, &r), 0);
		batched[t] = r.token;
		if (t >= 10) { /* C joins late */
			seq_logits(l, V, 3, t);
			ck_assert_int_eq(sampler_sample(&pc, &scs, &sc, l, V, &r), 0);
		}
	}
	ck_assert_mem_eq(alone, batched, sizeof(alone));
	sampler_state_deinit(&sa);
	sampler_state_deinit(&sb);
	sampler_state_deinit(&scs);
	sampler_scratch_deinit(&sc);
	free(l);
}
END_TEST

/* ---- logprobs ------------------------------------------------------------- */

START_TEST(test_logprobs)
{
	enum { V = 1000 };
	float *l = malloc(sizeof(float) * V), *orig = malloc(sizeof(float) * V);
	struct sampling_params p;
	sampling_params_init(&p);
	p.has_seed = true;
	p.seed = 3;
	p.temperature = 0.7f;
	p.top_k = 1; /* truncation must not change the reported logprobs */
	p.logprobs = 20;
	struct sampler_state s;
	struct sampler_scratch sc;
	ck_assert_int_eq(sampler_scratch_init(&sc, V), 0);
	ck_assert_int_eq(sampler_state_init(&s, &p, 0, 0, NULL, 0, NULL, 0), 0);
	for (int step = 0; step < 20; step++) {
		seq_logits(orig, V, 9, step);
		memcpy(l, orig, sizeof(float) * V);
		struct sample_result r;
		ck_assert_int_eq(sampler_sample(&p, &s, &sc, l, V, &r), 0);
		/* full distribution from the unprocessed logits / T, in double */
		double mx = -INFINITY, sum = 0;
		for (int i = 0; i < V; i++)
			mx = fmax(mx, (double)orig[i] / 0.7);
		for (int i = 0; i < V; i++)
			sum += exp((double)orig[i] / 0.7 - mx);
		double logz = mx + log(sum), total = 0;
		for (int i = 0; i < V; i++)
			total += exp((double)l[i] - logz);
		ck_assert_double_eq_tol(total, 1.0, 1e-5);
		ck_assert_float_eq_tol(r.logprob, (double)orig[r.token] / 0.7 - logz, 1e-4);
		ck_assert_int_eq(r.n_top, 20);
		ck_assert_int_eq(r.rank, 1); /* top_k 1 picks the argmax */
		ck_assert_int_eq(r.top[0].token, r.token);
		ck_assert_float_eq_tol(r.top[0].logprob, r.logprob, 1e-6);
		int above = 0;
		for (int i = 0; i < 20; i++) {
			if (i > 0)
				ck_assert(r.top[i].logprob <= r.top[i - 1].logprob);
			ck_assert_float_eq_tol(r.top[i].logprob,
					       (double)orig[r.top[i].token] / 0.7 - logz, 1e-4);
		}
		/* nothing outside the top 20 beats the 20th */
		for (int i = 0; i < V; i++) {
			bool in_top = false;
			for (int j = 0; j < 20; j++)
				in_top |= r.top[j].token == i;
			if (!in_top && l[i] > l[r.top[19].token])
				above++;
		}
		ck_assert_int_eq(above, 0);
	}
	sampler_state_deinit(&s);
	sampler_scratch_deinit(&sc);
	free(l);
	free(orig);
}
END_TEST

START_TEST(test_logprobs_full_small_vocab)
{
	struct sampling_params p;
	sampling_params_init(&p);
	p.has_seed = true;
	p.seed = 8;
	p.temperature = 1.3f;
	p.top_p = 0.5f;
	p.logprobs = 10;
	struct sampler_state s;
	struct sampler_scratch sc;
	ck_assert_int_eq(sampler_scratch_init(&sc, 10), 0);
	ck_assert_int_eq(sampler_state_init(&s, &p, 0, 0, NULL, 0, NULL, 0), 0);
	for (int step = 0; step < 50; step++) {
		float l[10];
		memcpy(l, k_logits, sizeof(l));
		struct sample_result r;
		ck_assert_int_eq(sampler_sample(&p, &s, &sc, l, 10, &r), 0);
		double total = 0;
		bool found = false;
		for (int i = 0; i < r.n_top; i++) {
			total += exp(r.top[i].logprob);
			if (r.top[i].token == r.token) {
				found = true;
				ck_assert_int_eq(r.rank, i + 1);
				ck_assert_float_eq(r.top[i].logprob, r.logprob);
			}
		}
		ck_assert(found);
		ck_assert_double_eq_tol(total, 1.0, 1e-5);
	}
	/* a masked token reports the clamped -9999, not -inf */
	{
		struct sampling_params q;
		sampling_params_init(&q);
		q.temperature = 0;
		q.logprobs = 3;
		q.min_tokens = 1;
		int32_t eos = 0;
		struct sampler_state s2;
		ck_assert_int_eq(sampler_state_init(&s2, &q, 0, 0, NULL, 0, &eos, 1), 0);
		float m3[3] = { 5.0f, 1.0f, 0.0f };
		struct sample_result r2;
		ck_assert_int_eq(sampler_sample(&q, &s2, &sc, m3, 3, &r2), 0);
		ck_assert_int_eq(r2.token, 1);
		ck_assert_int_eq(r2.n_top, 3);
		ck_assert_int_eq(r2.top[2].token, 0);
		ck_assert_float_eq(r2.top[2].logprob, SAMPLER_LOGPROB_MIN);
		sampler_state_deinit(&s2);
	}
	/* logprobs = 0: only the chosen token */
	p.logprobs = 0;
	float l[10];
	memcpy(l, k_logits, sizeof(l));
	struct sample_result r;
	ck_assert_int_eq(sampler_sample(&p, &s, &sc, l, 10, &r), 0);
	ck_assert_int_eq(r.n_top, 0);
	ck_assert(r.logprob < 0 && r.rank >= 1);
	sampler_state_deinit(&s);
	sampler_scratch_deinit(&sc);
}
END_TEST

/* ---- validation ----------------------------------------------------------- */

static void expect_range(const struct sampling_params *p, const char *field)
{
	struct diag d = { 0 };
	ck_assert_int_eq(sampling_params_validate(p, 100, &d), ERR_RANGE);
	ck_assert_msg(strstr(d.msg, field) != NULL, "diag '%s' lacks '%s'", d.msg, field);
}

START_TEST(test_validate)
{
	struct sampling_params p, q;
	sampling_params_init(&p);
	ck_assert_int_eq(sampling_params_validate(&p, 100, NULL), 0);
	q = p; q.temperature = 2.01f; expect_range(&q, "temperature");
	q = p; q.temperature = -0.1f; expect_range(&q, "temperature");
	q = p; q.temperature = NAN; expect_range(&q, "temperature");
	q = p; q.top_p = 0; expect_range(&q, "top_p");
	q = p; q.top_p = 1.01f; expect_range(&q, "top_p");
	q = p; q.top_k = -2; expect_range(&q, "top_k");
	q = p; q.min_p = 1.5f; expect_range(&q, "min_p");
	q = p; q.repetition_penalty = 0; expect_range(&q, "repetition_penalty");
	q = p; q.repetition_penalty = 2e6f; expect_range(&q, "repetition_penalty");
	q = p; q.presence_penalty = -2.5f; expect_range(&q, "presence_penalty");
	q = p; q.frequency_penalty = 2.5f; expect_range(&q, "frequency_penalty");
	q = p; q.logprobs = 21; expect_range(&q, "logprobs");
	q = p; q.min_tokens = -1; expect_range(&q, "min_tokens");
	q = p; q.max_tokens = 0; expect_range(&q, "max_tokens");
	q = p; q.max_tokens = 5; q.min_tokens = 6; expect_range(&q, "min_tokens");
	struct sampler_logit_bias b[1] = { { 100, 1.0f } };
	q = p; q.logit_bias = b; q.n_logit_bias = 1; expect_range(&q, "logit_bias");
	b[0].token = 99;
	ck_assert_int_eq(sampling_params_validate(&q, 100, NULL), 0);
	b[0].bias = 500.0f; /* clamped when applied, not rejected */
	ck_assert_int_eq(sampling_params_validate(&q, 100, NULL), 0);
	int32_t ids[1] = { -1 };
	q = p; q.stop_token_ids = ids; q.n_stop_token_ids = 1; expect_range(&q, "stop_token_ids");
	const char *stops_empty[1] = { "" };
	q = p; q.stop = stops_empty; q.n_stop = 1; expect_range(&q, "stop");
	const char *stops_bad[1] = { "a\xC3" };
	q = p; q.stop = stops_bad; q.n_stop = 1; expect_range(&q, "stop");
	char long_stop[SAMPLER_MAX_STOP_BYTES + 2];
	memset(long_stop, 'x', sizeof(long_stop) - 1);
	long_stop[sizeof(long_stop) - 1] = 0;
	const char *stops_long[1] = { long_stop };
	q = p; q.stop = stops_long; q.n_stop = 1; expect_range(&q, "stop");
	long_stop[SAMPLER_MAX_STOP_BYTES] = 0; /* exactly the limit: fine */
	ck_assert_int_eq(sampling_params_validate(&q, 100, NULL), 0);
	const char *many[SAMPLER_MAX_STOP + 1];
	for (int i = 0; i <= SAMPLER_MAX_STOP; i++)
		many[i] = "s";
	q = p; q.stop = many; q.n_stop = SAMPLER_MAX_STOP + 1; expect_range(&q, "stop");
	q.n_stop = SAMPLER_MAX_STOP;
	ck_assert_int_eq(sampling_params_validate(&q, 100, NULL), 0);
	const char *stops_ok[2] = { "\xE6\x97\xA5", "END" };
	q = p; q.stop = stops_ok; q.n_stop = 2;
	ck_assert_int_eq(sampling_params_validate(&q, 100, NULL), 0);
	q = p; q.temperature = 0; q.top_k = 0; q.top_p = 1; q.min_p = 1; q.logprobs = 20;
	q.max_tokens = 1; q.min_tokens = 1;
	ck_assert_int_eq(sampling_params_validate(&q, 100, NULL), 0);
}
END_TEST

static Suite *sampler_suite(void)
{
	Suite *s = suite_create("sampler");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_rng_known_answers);
	tcase_add_test(tc, test_dist_temperature);
	tcase_add_test(tc, test_dist_top_k);
	tcase_add_test(tc, test_dist_top_p);
	tcase_add_test(tc, test_dist_min_p_and_chain);
	tcase_add_test(tc, test_dist_large_vocab);
	tcase_add_test(tc, test_dist_large_vocab_min_p_heap_peaked);
	tcase_add_test(tc, test_random_params);
	tcase_add_test(tc, test_penalties_and_bias);
	tcase_add_test(tc, test_min_tokens_masks_eos);
	tcase_add_test(tc, test_greedy_and_edge_cases);
	tcase_add_test(tc, test_seed_determinism);
	tcase_add_test(tc, test_seed_in_mixed_batch);
	tcase_add_test(tc, test_logprobs);
	tcase_add_test(tc, test_logprobs_full_small_vocab);
	tcase_add_test(tc, test_validate);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(sampler_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
