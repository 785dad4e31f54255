/* kernels/sample.h — the sampling chain on the GPU: processed
 * logits -> one token per row, its logprob, rank and the top logprobs, so
 * only those cross to the host.
 *
 * Semantics are engine/sample/sampler.c's sampler_sample, bit for bit where the CPU
 * is deterministic: the same chain (bans -> logit_bias -> repetition ->
 * frequency/presence -> temperature or greedy -> min_p -> top_k -> top_p ->
 * inverse CDF at u), the same exp approximation, the same bucketing, the same
 * candidate orders (top_k keeps the CPU heap's layout, top_p keeps the CPU
 * bucket order), so the same u gives the same token. What may differ is the
 * rounding of double sums taken in another order (about 1e-16 relative), i.e.
 * a different token only when u * mass lies that close to a cumulative
 * boundary. Every rule of the chain has one copy, kernels/sample_seq.h, that
 * sampler.c, the reference and the kernel all call. The plain C reference is
 * k_sample_ref (kernels/cpu/sample_ref.h, sample_seq.h's sequential chain
 * over these rows); the host side that fills the rows is
 * engine/sample/sampler.h (sampler_device_row);
 * tests: tests/sampling/test_sample_device.c (reference vs sampler_sample)
 * and tests/kernels/test_cuda_sample.c (k_sample vs k_sample_ref).
 *
 * Plain C, no CUDA header. One CTA per row (at most K_SAMPLE_MAX_CTAS CTAs;
 * each loops over rows), never synchronizes, so it can be graph-captured.
 * No full sort: thresholds come from logit buckets and a radix select. Cost
 * per row is a few passes over the vocabulary, except where sampler.c is
 * itself sequential and the kernel replays it on one thread: top_k's heap
 * (only candidates that beat the heap's root reach that thread: about
 * k ln(vocab / k) for model logits, every one for logits sorted ascending)
 * and, for top_k > 1024, the quickselect of the boundary bucket (the whole
 * vocabulary when every logit is equal).
 */
#ifndef AORTA_KERNELS_SAMPLE_H
#define AORTA_KERNELS_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define K_SAMPLE_MAX_TOP 20    /* top logprobs per row (OpenAI's limit) */
#define K_SAMPLE_MAX_CTAS 256  /* CTAs of one launch; the workspace is per CTA */

/* Per-row parameters. All fields are set by sampler_device_row. */
struct k_sample_row {
	double u;		  /* uniform in [0, 1): the sequence's draw for this token */
	float inv_temperature;	  /* 1.0f / temperature, rounded on the host; unused if greedy */
	float top_p;		  /* (0, 1]; >= 1 = off */
	float min_p;		  /* [0, 1]; 0 = off */
	float log_min_p;	  /* logf(min_p) on the host when min_p > 0 (same threshold
				     on CPU and GPU: device logf may differ by an ulp) */
	float repetition_penalty; /* 1 = off */
	float frequency_penalty;
	float presence_penalty;
	int32_t top_k;		  /* <= 0 or >= vocab = off */
	int32_t n_logprobs;	  /* -1 none; 0 the chosen token's; 1..20 also the top n */
	int32_t greedy;		  /* nonzero: argmax, lowest id on ties; logprobs at T = 1 */
	/* CSR ranges [begin, end) into the arrays of struct k_sample_args: */
	int32_t pen_begin, pen_end;   /* penalty entries; distinct tokens within a row */
	int32_t bias_begin, bias_end; /* logit_bias entries, applied in order */
	int32_t ban_begin, ban_end;   /* ids set to -inf first (min_tokens) */
};

/* A token of the sequence's history, for the penalties. */
struct k_sample_pen {
	int32_t token;
	uint32_t n_gen;	   /* times generated (frequency / presence / repetition) */
	int32_t in_prompt; /* nonzero: in the prompt (repetition only) */
};

struct k_sample_bias {
	int32_t token;
	float bias; /* clamped to [-100, 100] when applied */
};

/* Every pointer is a device pointer for k_sample and a host pointer for
 * k_sample_ref. Ids outside [0, vocab) in pen / bias / ban are skipped. */
struct k_sample_args {
	float *logits;		  /* F32 [n_rows, vocab]; holds the processed logits after
				     the call (bans, bias, penalties, 1/T, NaN -> -inf,
				     +inf -> FLT_MAX), like sampler_sample */
	int n_rows, vocab;
	const struct k_sample_row *rows;  /* [n_rows] */
	const struct k_sample_pen *pen;	  /* CSR payloads; NULL when empty */
	const struct k_sample_bias *bias;
	const int32_t *ban;
	void *workspace;	  /* k_sample_workspace_bytes(n_rows, vocab); unused by the ref */
	size_t workspace_bytes;
	/* Outputs, [n_rows] each unless said: */
	int32_t *token;		  /* -1: every logit was -inf or NaN (sampler_sample: ERR_RANGE) */
	float *logprob;		  /* of token, processed, >= -9999; 0 when n_logprobs < 0 */
	int32_t *rank;		  /* 1 + #tokens with a strictly larger logprob; 0 if none asked */
	int32_t *top_ids;	  /* [n_rows, K_SAMPLE_MAX_TOP]: the top n_logprobs ids by
				     (logprob desc, id asc); -1 past n */
	float *top_logprobs;	  /* [n_rows, K_SAMPLE_MAX_TOP] */
};

/* Bytes of device workspace for a launch over n_rows rows of vocab logits
 * (two id lists of vocab int32 per CTA, CTAs = min(n_rows, K_SAMPLE_MAX_CTAS)).
 * 0 for bad sizes. */
size_t k_sample_workspace_bytes(int n_rows, int vocab);

/* Sample every row on `stream` (NULL = default stream). ERR_INVAL for bad
 * sizes, NULL pointers or a short workspace; ERR_DEVICE if the launch fails.
 * Does not synchronize. */
int k_sample(void *stream, const struct k_sample_args *a);

#ifdef __cplusplus
}
#endif

#endif
