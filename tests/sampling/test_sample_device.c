/* tests/sampling/test_sample_device.c — the device sampling path on the CPU:
 * sampler_device_row + k_sample_ref (the GPU kernel's reference) +
 * sampler_device_finish must give, step after step, exactly the tokens,
 * logprobs, ranks and top logprobs of sampler_sample on an identically seeded
 * sequence, and the same processed logits. Many sequences are batched into
 * one k_sample_ref call per step (CSR offsets across rows). Inputs: random
 * logit rows (vocab 1000, 32000) with ties, -inf, NaN, +inf and huge values;
 * random parameter sets covering greedy, every truncation path of sampler.c
 * (min_p list, top_k heap and histogram, top_p small / head / histogram, no
 * truncation), all penalties with prompt and generated history, logit_bias
 * (with repeated ids) and min_tokens bans.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sample/rng.h"
#include "engine/sample/sampler.h"
#include "kernels/cpu/sample_ref.h"

/* ---- inputs --------------------------------------------------------------- */

static uint64_t trng_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1DULL;
}

static double trng_unif(uint64_t *s)
{
	return (double)(trng_next(s) >> 11) * 0x1.0p-53;
}

static int trng_below(uint64_t *s, int n)
{
	return (int)(trng_next(s) % (uint64_t)n);
}

/* Logit rows of several shapes: spread, peaked, quantized (ties), flat,
 * with a sprinkling of -inf, NaN, +inf and huge values. */
static void fill_logits(uint64_t *s, float *l, int vocab)
{
	int kind = trng_below(s, 6);
	float scale = (float)(0.5 + 8.0 * trng_unif(s));
	for (int i = 0; i < vocab; i++) {
		double g = trng_unif(s) + trng_unif(s) + trng_unif(s) - 1.5; /* ~ bell */
		float x = (float)(g * scale);
		switch (kind) {
		case 1: /* peaked: a few large logits */
			if (trng_below(s, 200) == 0)
				x += 12.0f;
			break;
		case 2: /* quantized: many exact ties */
			x = roundf(x * 2.0f) / 2.0f;
			break;
		case 3: /* nearly flat: large nucleus, histogram paths */
			x = (float)(trng_unif(s) * 0.05);
			break;
		case 4: /* all equal */
			x = 1.0f;
			break;
		default:
			break;
		}
		l[i] = x;
	}
	if (trng_below(s, 3) == 0) {
		int n = 1 + trng_below(s, vocab / 10);
		for (int k = 0; k < n; k++)
			l[trng_below(s, vocab)] = -INFINITY;
	}
	if (trng_below(s, 8) == 0) {
		l[trng_below(s, vocab)] = NAN;
		l[trng_below(s, vocab)] = 1e30f;
		l[trng_below(s, vocab)] = -1e30f;
	}
	if (trng_below(s, 16) == 0)
		l[trng_below(s, vocab)] = INFINITY;
}

struct seq {
	struct sampling_params p;
	struct sampler_logit_bias bias[12];
	int32_t stop_ids[3];
	int32_t prompt[64];
	int n_prompt;
	struct sampler_state cpu, dev;
};

static void random_params(uint64_t *s, struct seq *q, int vocab)
{
	struct sampling_params *p = &q->p;
	sampling_params_init(p);
	if (trng_below(s, 5) == 0)
		p->temperature = 0.0f;
	else
		p->temperature = (float)(0.1 + 1.9 * trng_unif(s));
	switch (trng_below(s, 6)) {
	case 0: p->top_k = -1; break;
	case 1: p->top_k = 1 + trng_below(s, 50); break;
	case 2: p->top_k = 100 + trng_below(s, 300); break; /* top_p over <= 256 or head */
	case 3: p->top_k = 1025 + trng_below(s, vocab); break; /* histogram top_k */
	case 4: p->top_k = 0; break;
	default: p->top_k = vocab - 1; break;
	}
	if (trng_below(s, 2))
		p->top_p = (float)(0.05 + 0.94 * trng_unif(s));
	if (trng_below(s, 3) == 0)
		p->min_p = (float)(trng_unif(s) * 0.3);
	if (trng_below(s, 2))
		p->repetition_penalty = (float)(0.5 + 1.5 * trng_unif(s));
	if (trng_below(s, 2))
		p->frequency_penalty = (float)(4.0 * trng_unif(s) - 2.0);
	if (trng_below(s, 2))
		p->presence_penalty = (float)(4.0 * trng_unif(s) - 2.0);
	if (trng_below(s, 3) == 0) {
		p->n_logit_bias = 1 + trng_below(s, 12);
		for (int i = 0; i < p->n_logit_bias; i++) {
			/* repeated ids: the bias adds in order */
			q->bias[i].token = i > 0 && trng_below(s, 4) == 0 ? q->bias[i - 1].token
									    : trng_below(s, vocab);
			q->bias[i].bias = (float)(300.0 * trng_unif(s) - 150.0);
		}
		p->logit_bias = q->bias;
	}
	if (trng_below(s, 3) == 0) {
		p->min_tokens = 1 + trng_below(s, 6);
		p->n_stop_token_ids = trng_below(s, 4);
		for (int i = 0; i < p->n_stop_token_ids; i++)
			q->stop_ids[i] = trng_below(s, vocab);
		p->stop_token_ids = q->stop_ids;
		p->ignore_eos = trng_below(s, 4) == 0;
	}
	p->logprobs = trng_below(s, 23) - 1; /* -1 .. 21, clipped below */
	if (p->logprobs > SAMPLER_MAX_LOGPROBS)
		p->logprobs = SAMPLER_MAX_LOGPROBS;
	p->has_seed = true;
	p->seed = trng_next(s);
	q->n_prompt = 1 + trng_below(s, 64);
	for (int i = 0; i < q->n_prompt; i++)
		q->prompt[i] = trng_below(s, i > 0 && trng_below(s, 3) == 0 ? 40 : vocab);
	ck_assert_int_eq(sampling_params_validate(p, vocab, NULL), 0);
}

static void seq_init(struct seq *q, uint64_t request_id, int vocab)
{
	int32_t eos[2] = { (int32_t)(request_id % (uint64_t)vocab), 2 };
	ck_assert_int_eq(sampler_state_init(&q->cpu, &q->p, 7, request_id, q->prompt, q->n_prompt,
					    eos, 2), 0);
	ck_assert_int_eq(sampler_state_init(&q->dev, &q->p, 7, request_id, q->prompt, q->n_prompt,
					    eos, 2), 0);
}

/* ---- the comparison -------------------------------------------------------- */

struct batch {
	int n, vocab;
	float *logits_cpu, *logits_dev;
	struct k_sample_row *rows;
	int32_t *token, *rank, *top_ids;
	float *logprob, *top_lp;
	struct sampler_device_lists lists;
};

static void batch_init(struct batch *b, int n, int vocab)
{
	b->n = n;
	b->vocab = vocab;
	b->logits_cpu = malloc((size_t)n * vocab * sizeof(float));
	b->logits_dev = malloc((size_t)n * vocab * sizeof(float));
	b->rows = malloc((size_t)n * sizeof(*b->rows));
	b->token = malloc((size_t)n * sizeof(int32_t));
	b->rank = malloc((size_t)n * sizeof(int32_t));
	b->logprob = malloc((size_t)n * sizeof(float));
	b->top_ids = malloc((size_t)n * K_SAMPLE_MAX_TOP * sizeof(int32_t));
	b->top_lp = malloc((size_t)n * K_SAMPLE_MAX_TOP * sizeof(float));
	ck_assert(b->logits_cpu && b->logits_dev && b->rows && b->token && b->rank &&
		  b->logprob && b->top_ids && b->top_lp);
	sampler_device_lists_init(&b->lists);
}

static void batch_deinit(struct batch *b)
{
	free(b->logits_cpu);
	free(b->logits_dev);
	free(b->rows);
	free(b->token);
	free(b->rank);
	free(b->logprob);
	free(b->top_ids);
	free(b->top_lp);
	sampler_device_lists_deinit(&b->lists);
}

static bool close_lp(float a, float b)
{
	return fabsf(a - b) <= 1e-5f + 1e-5f * fabsf(b);
}

static int same_bits(const float *a, const float *b, size_t n)
{
	return memcmp(a, b, n * sizeof(float)) == 0;
}

/* One step for every sequence: the CPU one by one, the device path batched.
 * Returns how many sequences produced a token. */
static int step(struct batch *b, struct seq *qs, struct sampler_scratch *sc, uint64_t *rs,
		int step_i)
{
	int vocab = b->vocab;
	sampler_device_lists_reset(&b->lists);
	for (int r = 0; r < b->n; r++) {
		float *lc = b->logits_cpu + (size_t)r * vocab;
		fill_logits(rs, lc, vocab);
		memcpy(b->logits_dev + (size_t)r * vocab, lc, (size_t)vocab * sizeof(float));
		ck_assert_int_eq(sampler_device_row(&qs[r].p, &qs[r].dev, vocab, &b->rows[r],
						    &b->lists), 0);
	}
	struct k_sample_args a = {
		.logits = b->logits_dev, .n_rows = b->n, .vocab = vocab, .rows = b->rows,
		.pen = b->lists.pen, .bias = b->lists.bias, .ban = b->lists.ban,
		.token = b->token, .logprob = b->logprob, .rank = b->rank,
		.top_ids = b->top_ids, .top_logprobs = b->top_lp,
	};
	ck_assert_int_eq(k_sample_ref(&a, NULL), 0);

	int produced = 0;
	for (int r = 0; r < b->n; r++) {
		struct seq *q = &qs[r];
		struct sample_result rc, rd;
		float *lc = b->logits_cpu + (size_t)r * vocab;
		int ec = sampler_sample(&q->p, &q->cpu, sc, lc, vocab, &rc);
		int ed = sampler_device_finish(&q->p, &q->dev, b->token[r], b->logprob[r],
					       b->rank[r], b->top_ids + (size_t)r * K_SAMPLE_MAX_TOP,
					       b->top_lp + (size_t)r * K_SAMPLE_MAX_TOP, &rd);
		ck_assert_msg(ec == ed, "step %d row %d: rc %d vs %d", step_i, r, ec, ed);
		ck_assert_msg(same_bits(lc, b->logits_dev + (size_t)r * vocab, (size_t)vocab),
			      "step %d row %d: processed logits differ", step_i, r);
		if (ec)
			continue;
		produced++;
		ck_assert_msg(rc.token == rd.token,
			      "step %d row %d: token %d (cpu) vs %d (device), T %g k %d p %g "
			      "min_p %g", step_i, r, rc.token, rd.token, q->p.temperature,
			      q->p.top_k, q->p.top_p, q->p.min_p);
		if (q->p.logprobs < 0)
			continue;
		ck_assert_msg(close_lp(rd.logprob, rc.logprob), "logprob %g vs %g", rd.logprob,
			      rc.logprob);
		ck_assert_int_eq(rd.rank, rc.rank);
		ck_assert_int_eq(rd.n_top, rc.n_top);
		for (int i = 0; i < rc.n_top; i++) {
			ck_assert_int_eq(rd.top[i].token, rc.top[i].token);
			ck_assert(close_lp(rd.top[i].logprob, rc.top[i].logprob));
		}
	}
	/* the streams stay in step */
	for (int r = 0; r < b->n; r++) {
		ck_assert(memcmp(&qs[r].cpu.rng, &qs[r].dev.rng, sizeof(struct rng)) == 0);
		ck_assert_int_eq(qs[r].cpu.n_generated, qs[r].dev.n_generated);
	}
	return produced;
}

static void run_sequences(int vocab, int n_seq, int n_steps, uint64_t seed)
{
	uint64_t rs = seed;
	struct seq *qs = calloc((size_t)n_seq, sizeof(*qs));
	ck_assert_ptr_nonnull(qs);
	for (int r = 0; r < n_seq; r++) {
		random_params(&rs, &qs[r], vocab);
		seq_init(&qs[r], seed * 1000 + (uint64_t)r, vocab);
	}
	struct sampler_scratch sc;
	ck_assert_int_eq(sampler_scratch_init(&sc, vocab), 0);
	struct batch b;
	batch_init(&b, n_seq, vocab);
	int produced = 0;
	for (int t = 0; t < n_steps; t++)
		produced += step(&b, qs, &sc, &rs, t);
	ck_assert_int_gt(produced, n_seq * n_steps / 2);
	batch_deinit(&b);
	sampler_scratch_deinit(&sc);
	for (int r = 0; r < n_seq; r++) {
		sampler_state_deinit(&qs[r].cpu);
		sampler_state_deinit(&qs[r].dev);
	}
	free(qs);
}

START_TEST(test_random_vocab_1000)
{
	for (uint64_t seed = 1; seed <= 40; seed++)
		run_sequences(1000, 24, 12, seed);
}
END_TEST

START_TEST(test_random_vocab_32000)
{
	for (uint64_t seed = 101; seed <= 106; seed++)
		run_sequences(32000, 24, 6, seed);
}
END_TEST

/* One parameter set per truncation path of sampler.c, on peaked and flat rows,
 * so each path is exercised whatever the random mix above does. */
START_TEST(test_each_path)
{
	const int vocab = 32000;
	struct {
		float t, top_p, min_p;
		int top_k;
	} cases[] = {
		{ 1.0f, 1.0f, 0.0f, -1 },      /* no truncation: block-sum draw */
		{ 0.8f, 1.0f, 0.05f, -1 },     /* min_p list only */
		{ 0.8f, 1.0f, 0.0f, 40 },      /* top_k heap */
		{ 0.8f, 1.0f, 0.0f, 5000 },    /* top_k buckets + quickselect */
		{ 0.8f, 0.9f, 0.0f, 200 },     /* top_p, small set: full sort */
		{ 0.8f, 0.5f, 0.0f, -1 },      /* top_p head or buckets */
		{ 1.5f, 0.99f, 0.0f, 3000 },   /* top_p after histogram top_k */
		{ 1.5f, 0.95f, 0.0f, 900 },    /* top_p after heap top_k (> 256) */
		{ 1.0f, 0.7f, 0.001f, 20000 }, /* everything */
		{ 0.0f, 0.5f, 0.1f, 5 },       /* greedy ignores truncation */
	};
	uint64_t rs = 77;
	struct sampler_scratch sc;
	ck_assert_int_eq(sampler_scratch_init(&sc, vocab), 0);
	int n = (int)(sizeof(cases) / sizeof(cases[0]));
	struct seq *qs = calloc((size_t)n, sizeof(*qs));
	ck_assert_ptr_nonnull(qs);
	for (int r = 0; r < n; r++) {
		struct sampling_params *p = &qs[r].p;
		sampling_params_init(p);
		p->temperature = cases[r].t;
		p->top_p = cases[r].top_p;
		p->min_p = cases[r].min_p;
		p->top_k = cases[r].top_k;
		p->logprobs = 5;
		p->has_seed = true;
		p->seed = 1000 + (uint64_t)r;
		qs[r].n_prompt = 3;
		qs[r].prompt[0] = 1;
		qs[r].prompt[1] = 2;
		qs[r].prompt[2] = 3;
		seq_init(&qs[r], (uint64_t)r, vocab);
	}
	struct batch b;
	batch_init(&b, n, vocab);
	for (int t = 0; t < 30; t++)
		ck_assert_int_eq(step(&b, qs, &sc, &rs, t), n);
	batch_deinit(&b);
	for (int r = 0; r < n; r++) {
		sampler_state_deinit(&qs[r].cpu);
		sampler_state_deinit(&qs[r].dev);
	}
	free(qs);
	sampler_scratch_deinit(&sc);
}
END_TEST

/* All logits -inf: both paths fail with ERR_RANGE, record nothing, and still
 * consume the draw, so the next token agrees again. */
START_TEST(test_all_masked_keeps_stream)
{
	const int vocab = 1000;
	struct seq q;
	memset(&q, 0, sizeof(q));
	sampling_params_init(&q.p);
	q.p.has_seed = true;
	q.p.seed = 5;
	q.n_prompt = 1;
	seq_init(&q, 1, vocab);
	struct sampler_scratch sc;
	ck_assert_int_eq(sampler_scratch_init(&sc, vocab), 0);
	struct batch b;
	batch_init(&b, 1, vocab);
	for (int i = 0; i < vocab; i++)
		b.logits_cpu[i] = b.logits_dev[i] = -INFINITY;
	struct sample_result rc, rd;
	ck_assert_int_eq(sampler_sample(&q.p, &q.cpu, &sc, b.logits_cpu, vocab, &rc), ERR_RANGE);
	sampler_device_lists_reset(&b.lists);
	ck_assert_int_eq(sampler_device_row(&q.p, &q.dev, vocab, &b.rows[0], &b.lists), 0);
	struct k_sample_args a = {
		.logits = b.logits_dev, .n_rows = 1, .vocab = vocab, .rows = b.rows,
		.token = b.token, .logprob = b.logprob, .rank = b.rank,
		.top_ids = b.top_ids, .top_logprobs = b.top_lp,
	};
	ck_assert_int_eq(k_sample_ref(&a, NULL), 0);
	ck_assert_int_eq(b.token[0], -1);
	ck_assert_int_eq(sampler_device_finish(&q.p, &q.dev, b.token[0], 0, 0, b.top_ids,
					       b.top_lp, &rd), ERR_RANGE);
	ck_assert_int_eq(q.cpu.n_generated, 0);
	ck_assert_int_eq(q.dev.n_generated, 0);
	uint64_t rs = 3;
	for (int t = 0; t < 5; t++)
		ck_assert_int_eq(step(&b, &q, &sc, &rs, t), 1);
	batch_deinit(&b);
	sampler_scratch_deinit(&sc);
	sampler_state_deinit(&q.cpu);
	sampler_state_deinit(&q.dev);
}
END_TEST

/* The comparison can fail: the reference's token depends on u (a shifted u
 * changes many tokens). */
START_TEST(test_comparison_is_sensitive)
{
	const int vocab = 1000, n = 64;
	uint64_t rs = 11;
	struct batch b;
	batch_init(&b, n, vocab);
	for (int r = 0; r < n; r++) {
		fill_logits(&rs, b.logits_cpu + (size_t)r * vocab, vocab);
		b.rows[r] = (struct k_sample_row){ .u = trng_unif(&rs), .inv_temperature = 1.0f,
						   .top_p = 1.0f, .repetition_penalty = 1.0f,
						   .n_logprobs = -1 };
	}
	memcpy(b.logits_dev, b.logits_cpu, (size_t)n * vocab * sizeof(float));
	struct k_sample_args a = {
		.logits = b.logits_dev, .n_rows = n, .vocab = vocab, .rows = b.rows,
		.token = b.token, .logprob = b.logprob, .rank = b.rank,
		.top_ids = b.top_ids, .top_logprobs = b.top_lp,
	};
	ck_assert_int_eq(k_sample_ref(&a, NULL), 0);
	int32_t first[64];
	memcpy(first, b.token, sizeof(first));
	for (int r = 0; r < n; r++)
		b.rows[r].u = fmod(b.rows[r].u + 0.37, 1.0);
	memcpy(b.logits_dev, b.logits_cpu, (size_t)n * vocab * sizeof(float));
	ck_assert_int_eq(k_sample_ref(&a, NULL), 0);
	int differ = 0;
	for (int r = 0; r < n; r++)
		differ += first[r] != b.token[r];
	ck_assert_int_gt(differ, n / 4);
	batch_deinit(&b);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("sample_device");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_random_vocab_1000);
	tcase_add_test(tc, test_random_vocab_32000);
	tcase_add_test(tc, test_each_path);
	tcase_add_test(tc, test_all_masked_keeps_stream);
	tcase_add_test(tc, test_comparison_is_sensitive);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
