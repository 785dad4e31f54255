/* engine/sample/sampler.h — logits -> one token per sequence, the OpenAI/vLLM way.
 *
 * Owns: the per-request sampling parameters and their validation, the
 * per-sequence sampler state (random stream, counts of generated tokens for
 * the penalties, the prompt's token set for the repetition penalty), and the
 * sampler chain. Threads: a sampler_state and a sampler_scratch each have one
 * user at a time (normally the engine thread); there is no shared state, so
 * a large batch may be sampled on several threads with one scratch per
 * thread, and each sequence still gets the same tokens. sampling_params are
 * immutable once validated and may be read from any thread. Pointers inside
 * sampling_params are borrowed: the request that owns them must outlive every
 * sampler_state built from them.
 *
 * The chain, in order (vLLM v1's order; the penalty formulas are HF's and
 * OpenAI's):
 *   1. min_tokens: while fewer than min_tokens tokens were generated, EOS ids
 *      (unless ignore_eos) and stop_token_ids get -inf.
 *   2. logit_bias: logit[t] += clamp(bias, -100, 100).
 *   3. repetition_penalty r over prompt + generated tokens (HF/vLLM,
 *      multiplicative): logit > 0 ? logit / r : logit * r.
 *   4. frequency f and presence p over generated tokens only (OpenAI, additive):
 *      logit[t] -= f * count[t] + p * (count[t] > 0).
 *   5. temperature < SAMPLER_GREEDY_EPS: greedy argmax (lowest id on ties);
 *      otherwise logit /= temperature.
 *   6. min_p: keep t with prob[t] >= min_p * max_prob (full distribution).
 *   7. top_k: keep the k most likely of what is left (ties: lower id first).
 *   8. top_p: over what is left, renormalized, keep the smallest most-likely
 *      prefix whose mass reaches top_p (the token that crosses it is kept).
 *   9. draw one uniform u in [0, 1) from the sequence's stream and pick the
 *      token where the cumulative kept mass first exceeds u * total.
 * Exactly one draw per sampled token (greedy too), so a stream depends only
 * on its own seed and its own tokens, never on the batch.
 *
 * Log-probabilities are those of the distribution after steps 1-5 (bias,
 * penalties, temperature) and before truncation (6-8): log_softmax of the
 * processed logits. This is what vLLM's V0 sampler reported and what vLLM v1
 * calls logprobs_mode=processed_logprobs (v1's default, raw_logprobs, uses the
 * model's logits before any processing). For greedy requests temperature is not
 * applied, i.e. logprobs are of the processed logits at temperature 1.
 * Reported values are clamped to >= SAMPLER_LOGPROB_MIN (-9999, vLLM's
 * convention), so a token masked to -inf reports -9999, never -inf (JSON has
 * no -inf).
 *
 * Tested in tests/sampling/test_sampler.c; the device path (end of this
 * header) in tests/sampling/test_sample_device.c.
 */
#ifndef AORTA_ENGINE_SAMPLE_SAMPLER_H
#define AORTA_ENGINE_SAMPLE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "engine/sample/rng.h"
#include "kernels/sample.h"

#define SAMPLER_MAX_LOGPROBS 20	  /* OpenAI's top_logprobs limit */
#define SAMPLER_MAX_EOS 8	  /* same as MODEL_MAX_EOS */
#define SAMPLER_GREEDY_EPS 1e-5f  /* vLLM's _SAMPLING_EPS */
#define SAMPLER_LOGIT_BIAS_MAX 100.0f
#define SAMPLER_LOGPROB_MIN -9999.0f /* reported logprobs are >= this */
/* Stop strings: OpenAI allows 4, vLLM any number. The matcher's cost per
 * delta grows with count * length^2 in the worst case, so both are bounded. */
#define SAMPLER_MAX_STOP 32
#define SAMPLER_MAX_STOP_BYTES 256

struct sampler_logit_bias {
	int32_t token;
	float bias; /* clamped to [-100, 100] when applied */
};

/* Per-request parameters. sampling_params_init() sets the defaults shown. */
struct sampling_params {
	float temperature;	  /* 1.0; [0, 2] (OpenAI's range; vLLM allows more). 0 = greedy */
	float top_p;		  /* 1.0; (0, 1] */
	int top_k;		  /* -1 (off); -1, 0 (off, as vLLM) or >= 1 */
	float min_p;		  /* 0.0 (off); [0, 1] */
	float repetition_penalty; /* 1.0 (off); (0, 2] */
	float presence_penalty;	  /* 0.0; [-2, 2] */
	float frequency_penalty;  /* 0.0; [-2, 2] */
	const struct sampler_logit_bias *logit_bias; /* [n_logit_bias], borrowed */
	int n_logit_bias;
	int min_tokens;		  /* 0; EOS/stop ids masked until this many were generated */
	int max_tokens;		  /* >= 1; -1 (the init default) = unset: the API resolves
				     it against the context (api_resolve_max_tokens)
				     before bat_submit, which refuses -1 */
	bool ignore_eos;	  /* false; keep generating past EOS (benchmarks) */
	const int32_t *stop_token_ids; /* [n_stop_token_ids], borrowed; end with "stop" */
	int n_stop_token_ids;
	const char *const *stop;  /* [n_stop] stop strings, borrowed; non-empty UTF-8,
				     at most SAMPLER_MAX_STOP of SAMPLER_MAX_STOP_BYTES */
	int n_stop;
	bool has_seed;		  /* false: seed from server_seed ^ request_id */
	uint64_t seed;
	int logprobs;		  /* -1 = none; 0 = the chosen token's only; N <= 20: + top N */
};

void sampling_params_init(struct sampling_params *p);

/* ERR_RANGE (with the field named in d) for any value outside the ranges
 * above, a token id outside [0, vocab), an empty, too long or non-UTF-8 stop
 * string, too many stop strings,
 * min_tokens > max_tokens, or a NaN. vocab <= 0 skips the token-id checks. */
int sampling_params_validate(const struct sampling_params *p, int vocab, struct diag *d);

/* One slot of the sparse token table (internal; in the header for sizeof). */
struct sampler__count {
	int32_t token;	  /* -1 = empty slot */
	uint32_t n_gen;	  /* times generated */
	bool in_prompt;	  /* occurs in the prompt */
};

/* Per-sequence state. Caller-allocated; init/deinit. */
struct sampler_state {
	struct rng rng;
	int n_generated;
	bool track;			/* any penalty on: keep the token table */
	struct sampler__count *slots;	/* open addressing, power-of-two capacity */
	uint32_t cap, n_used;
	int n_eos;
	int32_t eos_ids[SAMPLER_MAX_EOS];
};

/* p is borrowed for the sequence's life. prompt (borrowed for the call) feeds
 * the repetition penalty. eos_ids: the model's end ids (at most
 * SAMPLER_MAX_EOS; extra ones are ERR_RANGE). The stream is seeded from
 * rng_request_seed(p->has_seed, p->seed, server_seed, request_id). */
int sampler_state_init(struct sampler_state *s, const struct sampling_params *p,
		       uint64_t server_seed, uint64_t request_id, const int32_t *prompt,
		       int n_prompt, const int32_t *eos_ids, int n_eos);
void sampler_state_deinit(struct sampler_state *s);

/* Record a generated token chosen outside sampler_sample (e.g. sampled on the
 * device). sampler_sample records its own token; do not call both. */
int sampler_accept(struct sampler_state *s, int32_t token);

/* Reusable work memory for one vocabulary size, owned by the engine thread,
 * shared by every sequence it samples so a step never mallocs. */
#define SAMPLER__NB 2048	/* histogram buckets for top_k / top_p (KS_NB) */
#define SAMPLER__BLOCK 64	/* tokens per block_mass entry (KS_BLOCK) */

struct sampler_scratch {
	int vocab;
	float *prob;	    /* [vocab] exp(logit - max) */
	int32_t *idx, *tmp; /* [vocab] each: candidate ids */
	uint32_t *hist_n;   /* [SAMPLER__NB] */
	double *hist_mass;  /* [SAMPLER__NB] */
	double *block_mass; /* [vocab / SAMPLER__BLOCK + 1] mass per block of tokens */
};

int sampler_scratch_init(struct sampler_scratch *sc, int vocab);
void sampler_scratch_deinit(struct sampler_scratch *sc);

struct sample_logprob {
	int32_t token;
	float logprob;
};

struct sample_result {
	int32_t token;
	/* Filled when p->logprobs >= 0: */
	float logprob; /* of the chosen token */
	int rank;      /* 1 + number of tokens with a strictly larger logprob */
	int n_top;     /* = p->logprobs; top[] sorted by logprob desc, then id asc */
	struct sample_logprob top[SAMPLER_MAX_LOGPROBS];
};

/* Sample one token for one sequence and record it in s. logits [vocab] is
 * modified in place (it holds the processed logits afterwards). vocab must be
 * <= sc->vocab. Returns ERR_RANGE when every logit is -inf or NaN (nothing can
 * be sampled), ERR_NOMEM if the token table cannot grow, ERR_INVAL for a bad
 * vocab. */
int sampler_sample(const struct sampling_params *p, struct sampler_state *s,
		   struct sampler_scratch *sc, float *logits, int vocab, struct sample_result *out);

/* ---- sampling on the device (kernels/sample.h) -----------------
 * The same chain run by k_sample (or its reference k_sample_ref) over a batch
 * of rows. Contract: a sequence's tokens are the same whichever path samples
 * them, step after step, because
 *   - sampler_device_row draws u from s's stream exactly where
 *     sampler_sample would (one draw per sampled token, before anything else),
 *     and encodes p and s (min_tokens bans, bias, penalty history) into the
 *     row, and
 *   - sampler_device_finish records the kernel's token with sampler_accept,
 *     as sampler_sample records its own.
 * Per token, call sampler_device_row once, run the kernel, then call
 * sampler_device_finish once (never sampler_sample for the same token). The
 * kernel's token may differ from the CPU's only when u * mass lies within
 * double rounding (~1e-16 relative) of a cumulative boundary; see
 * kernels/sample.h. */

/* The CSR payloads of a batch of rows, grown as rows are added. */
struct sampler_device_lists {
	struct k_sample_pen *pen;
	struct k_sample_bias *bias;
	int32_t *ban;
	int n_pen, n_bias, n_ban;
	int cap_pen, cap_bias, cap_ban;
};

void sampler_device_lists_init(struct sampler_device_lists *l);
void sampler_device_lists_reset(struct sampler_device_lists *l); /* empty, keeps memory */
void sampler_device_lists_deinit(struct sampler_device_lists *l);

/* Fill *row for the next token of the sequence (p, s) over vocab logits and
 * append its penalty / bias / ban entries to l (row's ranges index l's
 * arrays). Draws u from s->rng. ERR_NOMEM if l cannot grow (u is drawn
 * anyway), ERR_INVAL for vocab <= 0. */
int sampler_device_row(const struct sampling_params *p, struct sampler_state *s, int vocab,
		       struct k_sample_row *row, struct sampler_device_lists *l);

/* After the kernel: turn its outputs for this row into *out (as
 * sampler_sample fills it) and record the token in s. token < 0 (all logits
 * -inf or NaN) is ERR_RANGE and records nothing, as in sampler_sample.
 * top_ids / top_logprobs: the row's K_SAMPLE_MAX_TOP entries. */
int sampler_device_finish(const struct sampling_params *p, struct sampler_state *s,
			  int32_t token, float logprob, int32_t rank, const int32_t *top_ids,
			  const float *top_logprobs, struct sample_result *out);

#endif
