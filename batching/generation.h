/* batching/generation.h — per-sequence "is it done, and what may the user see".
 *
 * Owns: a sequence's stop matcher, its generated-token count and its finish
 * reason. The engine thread calls generation_step() once per generated token
 * with that token's text delta from the incremental detokenizer (complete
 * UTF-8; empty while the detokenizer is waiting for more bytes). It does not
 * know the tokenizer: text comes in, text goes out.
 *
 * Rules, in the order they are checked for each token (vLLM's, with stop
 * reasons taking precedence over length when both hold on the same token):
 *   - before min_tokens tokens were generated nothing stops the sequence
 *     except length (the sampler already masks EOS and stop ids then);
 *   - an EOS id (unless ignore_eos) or a stop_token_ids id: finish "stop"; the
 *     token's own text is not shown, held text is released;
 *   - a stop string completing in the text: finish "stop"; text before it is
 *     released, the stop string and anything after are not;
 *   - max_tokens generated, or prompt + generated reaching max_model_len:
 *     finish "length"; held text is released.
 * generation_abort() ends a sequence as "abort" or "error"; held text is
 * dropped (nobody is reading it, or it is not trustworthy).
 *
 * The sampling_params are borrowed for the sequence's life. Tested in
 * tests/batching/test_generation.c.
 *
 * Per sequence, on the engine thread (one sampler_scratch for all of them):
 *   admit:  sampling_params_validate(p, vocab, &d);
 *           sampler_state_init(&ss, p, server_seed, request_id, prompt, n_prompt,
 *                              cfg->eos_ids, cfg->n_eos_ids);
 *           generation_init(&g, p, n_prompt, max_model_len, cfg->eos_ids, cfg->n_eos_ids);
 *   step:   sampler_sample(p, &ss, &scratch, logits_row, vocab, &res);
 *           text = detokenizer delta for res.token (may be empty);
 *           generation_step(&g, res.token, text, text_len, &out);
 *           emit out (and res.logprob / res.top when asked); if g.finish, emit
 *           finish_reason_str(g.finish) and release the sequence.
 *   cancel: generation_abort(&g, FINISH_ABORT).
 *   free:   generation_deinit(&g); sampler_state_deinit(&ss).
 */
#ifndef AORTA_BATCHING_GENERATION_H
#define AORTA_BATCHING_GENERATION_H

#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"
#include "batching/finish.h"
#include "engine/sample/sampler.h"
#include "batching/stop.h"

struct generation {
	const struct sampling_params *p; /* borrowed */
	struct stop_matcher stop;
	int n_prompt;
	int max_model_len;     /* <= 0: no context limit */
	int n_generated;
	int n_eos;
	int32_t eos_ids[SAMPLER_MAX_EOS];
	enum finish_reason finish; /* FINISH_NONE while running */
	int stop_string;       /* index into p->stop that matched, -1 */
	int32_t stop_token;    /* EOS / stop id that ended it, -1 */
};

/* ERR_RANGE for more than SAMPLER_MAX_EOS ids or a negative prompt length;
 * ERR_INVAL for a bad stop string (validate the params first). */
int generation_init(struct generation *g, const struct sampling_params *p, int n_prompt,
		    int max_model_len, const int32_t *eos_ids, int n_eos);
void generation_deinit(struct generation *g);

/* One generated token and its text delta (borrowed). Appends the text the user
 * may see now to out; sets g->finish when this token ends the sequence (then
 * out has received everything that will ever be released). ERR_STATE once
 * finished. */
int generation_step(struct generation *g, int32_t token, const char *text, size_t len,
		    struct buf *out);

/* End a running sequence with FINISH_ABORT or FINISH_ERROR (ERR_INVAL for any
 * other reason). A no-op returning 0 when it has already finished. */
int generation_abort(struct generation *g, enum finish_reason why);

#endif
