/* tests/sampling/bench_sampler.c — time sampler_sample on a Qwen-sized
 * vocabulary (151936) for a few parameter sets. Not a test; prints one line
 * per configuration: microseconds of thread CPU time per sampled token.
 *   usage: bench_sampler [iterations]   (default 200)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/sample/rng.h"
#include "engine/sample/sampler.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time: the build machine is shared */
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	enum { V = 151936 };
	int iters = argc > 1 ? atoi(argv[1]) : 200;
	if (iters <= 0)
		iters = 1;
	float *orig = malloc(sizeof(float) * V), *l = malloc(sizeof(float) * V);
	if (!orig || !l)
		return 1;
	struct rng g;
	rng_seed(&g, 1);
	/* roughly model-like: a broad Gaussian-ish mass with a few strong tokens */
	for (int i = 0; i < V; i++) {
		double u = rng_uniform(&g) + rng_uniform(&g) + rng_uniform(&g) - 1.5;
		orig[i] = (float)(u * 4.0);
	}
	for (int i = 0; i < 20; i++)
		orig[rng_next(&g) % V] = 12.0f + (float)i * 0.1f;

	struct {
		const char *name;
		float t, top_p, min_p, rep;
		int top_k, logprobs;
	} cfg[] = {
		{ "greedy", 0.0f, 1.0f, 0.0f, 1.0f, -1, -1 },
		{ "temperature 0.8", 0.8f, 1.0f, 0.0f, 1.0f, -1, -1 },
		{ "top_k 50", 0.8f, 1.0f, 0.0f, 1.0f, 50, -1 },
		{ "top_p 0.9", 0.8f, 0.9f, 0.0f, 1.0f, -1, -1 },
		{ "top_p 0.95 flat (t=2)", 2.0f, 0.95f, 0.0f, 1.0f, -1, -1 },
		{ "top_k 50 top_p 0.9 min_p 0.05 rep 1.1 logprobs 5", 0.8f, 0.9f, 0.05f, 1.1f, 50, 5 },
	};
	struct sampler_scratch sc;
	if (sampler_scratch_init(&sc, V))
		return 1;
	int32_t prompt[512];
	for (int i = 0; i < 512; i++)
		prompt[i] = (int32_t)(rng_next(&g) % V);
	for (size_t c = 0; c < sizeof(cfg) / sizeof(cfg[0]); c++) {
		struct sampling_params p;
		sampling_params_init(&p);
		p.temperature = cfg[c].t;
		p.top_p = cfg[c].top_p;
		p.min_p = cfg[c].min_p;
		p.top_k = cfg[c].top_k;
		p.repetition_penalty = cfg[c].rep;
		p.logprobs = cfg[c].logprobs;
		p.has_seed = true;
		p.seed = 1;
		struct sampler_state s;
		if (sampler_state_init(&s, &p, 0, 0, prompt, 512, NULL, 0))
			return 1;
		double t0 = now_s(), copy = 0;
		for (int i = 0; i < iters; i++) {
			double c0 = now_s();
			memcpy(l, orig, sizeof(float) * V);
			copy += now_s() - c0;
			struct sample_result r;
			if (sampler_sample(&p, &s, &sc, l, V, &r))
				return 1;
		}
		double us = (now_s() - t0 - copy) / iters * 1e6;
		printf("vocab %d  %-50s %8.1f us/token\n", V, cfg[c].name, us);
		sampler_state_deinit(&s);
	}
	sampler_scratch_deinit(&sc);
	free(orig);
	free(l);
	return 0;
}
