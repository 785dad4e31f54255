/* batching/generation.c — finish decisions and stop-string release per
 * sequence (see generation.h). Test: tests/batching/test_generation.c.
 */
#include "batching/generation.h"

#include <string.h>

int generation_init(struct generation *g, const struct sampling_params *p, int n_prompt,
		    int max_model_len, const int32_t *eos_ids, int n_eos)
{
	memset(g, 0, sizeof(*g));
	g->stop_string = -1;
	g->stop_token = -1;
	if (n_eos < 0 || n_eos > SAMPLER_MAX_EOS || n_prompt < 0)
		return ERR_RANGE;
	int rc = stop_matcher_init(&g->stop, p->stop, p->n_stop);
	if (rc)
		return rc;
	g->p = p;
	g->n_prompt = n_prompt;
	g->max_model_len = max_model_len;
	g->n_eos = n_eos;
	for (int i = 0; i < n_eos; i++)
		g->eos_ids[i] = eos_ids[i];
	return 0;
}

void generation_deinit(struct generation *g)
{
	stop_matcher_deinit(&g->stop);
}

static bool is_stop_token(const struct generation *g, int32_t t)
{
	if (!g->p->ignore_eos)
		for (int i = 0; i < g->n_eos; i++)
			if (g->eos_ids[i] == t)
				return true;
	for (int i = 0; i < g->p->n_stop_token_ids; i++)
		if (g->p->stop_token_ids[i] == t)
			return true;
	return false;
}

static bool at_length(const struct generation *g)
{
	if (g->p->max_tokens > 0 && g->n_generated >= g->p->max_tokens)
		return true;
	if (g->max_model_len > 0 && (long)g->n_prompt + g->n_generated >= g->max_model_len)
		return true;
	return false;
}

int generation_step(struct generation *g, int32_t token, const char *text, size_t len,
		    struct buf *out)
{
	if (g->finish != FINISH_NONE)
		return ERR_STATE;
	g->n_generated++;
	bool armed = g->n_generated >= g->p->min_tokens;
	int rc;

	if (armed && is_stop_token(g, token)) {
		g->stop_token = token;
		g->finish = FINISH_STOP;
		return stop_matcher_flush(&g->stop, out);
	}
	int which = -1;
	rc = stop_matcher_feed(&g->stop, text, len, armed, out, &which);
	if (rc)
		return rc;
	if (which >= 0) {
		g->stop_string = which;
		g->finish = FINISH_STOP;
		return 0;
	}
	if (at_length(g)) {
		g->finish = FINISH_LENGTH;
		return stop_matcher_flush(&g->stop, out);
	}
	return 0;
}

int generation_abort(struct generation *g, enum finish_reason why)
{
	if (why != FINISH_ABORT && why != FINISH_ERROR)
		return ERR_INVAL;
	if (g->finish != FINISH_NONE)
		return 0;
	g->finish = why;
	buf_clear(&g->stop.held);
	g->stop.done = true;
	return 0;
}
