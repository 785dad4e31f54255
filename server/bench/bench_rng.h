/* server/bench/bench_rng.h — the benchmark's seeded random numbers (private to the
 * bench_* files): splitmix64, so a --seed reproduces the same prompts and the
 * same arrival times on every platform. Caller-owned state; no globals. */
#ifndef AORTA_SERVER_BENCH_BENCH_RNG_H
#define AORTA_SERVER_BENCH_BENCH_RNG_H

#include <math.h>
#include <stdint.h>

struct bench_rng {
	uint64_t s;
};

static inline uint64_t bench_rng_u64(struct bench_rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double bench_rng_unit(struct bench_rng *r)
{
	return (double)(bench_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Exponential with the given rate (mean 1/rate): Poisson inter-arrival gaps. */
static inline double bench_rng_exp(struct bench_rng *r, double rate)
{
	return -log1p(-bench_rng_unit(r)) / rate;
}

/* Standard normal (Box-Muller; one of the pair is discarded for simplicity). */
static inline double bench_rng_normal(struct bench_rng *r)
{
	double u1 = 1.0 - bench_rng_unit(r); /* (0, 1] so log() is finite */
	double u2 = bench_rng_unit(r);
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Gamma with the given shape and mean (Marsaglia-Tsang; shape < 1 through
 * Gamma(shape + 1) * U^(1/shape)). Shape 1 is the exponential. */
static inline double bench_rng_gamma(struct bench_rng *r, double shape, double mean)
{
	double scale = mean / shape, boost = 1.0, k = shape;
	if (k < 1.0) {
		boost = pow(1.0 - bench_rng_unit(r), 1.0 / k); /* U in (0, 1] */
		k += 1.0;
	}
	double d = k - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
	for (;;) {
		double x = bench_rng_normal(r), v = 1.0 + c * x;
		if (v <= 0)
			continue;
		v = v * v * v;
		double u = 1.0 - bench_rng_unit(r);
		if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
			return d * v * boost * scale;
	}
}

#endif
