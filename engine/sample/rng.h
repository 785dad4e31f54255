/* engine/sample/rng.h — the per-request random stream used by the sampler.
 *
 * Generator: xoshiro256** (Blackman & Vigna, 2018; 256-bit state, period
 * 2^256 - 1), seeded by running splitmix64 from a 64-bit seed to fill the four
 * state words (the seeding the authors recommend; splitmix64 never yields an
 * all-zero state in practice and we guard against it anyway).
 *
 * Seed of a request: its own `seed` when the request has one, otherwise
 * server_seed ^ request_id, so runs are reproducible for a fixed server seed
 * and request order. Each sequence owns one `struct rng` (inside its
 * sampler_state) and the sampler draws exactly one uniform per sampled token,
 * so a sequence's stream never depends on what else is in the batch.
 *
 * Plain value type; no allocation, no globals; one owner thread at a time.
 * Tested in tests/sampling/test_sampler.c (known-answer vectors).
 */
#ifndef AORTA_ENGINE_SAMPLE_RNG_H
#define AORTA_ENGINE_SAMPLE_RNG_H

#include <stdbool.h>
#include <stdint.h>

struct rng {
	uint64_t s[4];
};

/* One splitmix64 step: advances *x and returns the next output. */
static inline uint64_t rng_splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static inline void rng_seed(struct rng *r, uint64_t seed)
{
	uint64_t x = seed;
	for (int i = 0; i < 4; i++)
		r->s[i] = rng_splitmix64(&x);
	if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0)
		r->s[0] = 1; /* xoshiro's one forbidden state */
}

/* The seed a request's stream starts from (see the header comment). */
static inline uint64_t rng_request_seed(bool has_seed, uint64_t seed, uint64_t server_seed,
					uint64_t request_id)
{
	return has_seed ? seed : (server_seed ^ request_id);
}

static inline uint64_t rng__rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

/* xoshiro256**: next 64 random bits. */
static inline uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = rng__rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rng__rotl(s[3], 45);
	return result;
}

/* Uniform double in [0, 1) with 53 random bits. */
static inline double rng_uniform(struct rng *r)
{
	return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

#endif
