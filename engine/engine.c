/* engine/engine.c — the engine seam (engine.h): checks options and every
 * batch, then hands validated work to the backend (engine/backend/backend.h). All the
 * batch rules live here, once, so no backend reads an index it was not
 * promised. Tests: tests/engine/test_engine.c (validation, batch invariance,
 * chunked prefill, copy_blocks) and tests/reference/ (logits vs numpy).
 */
#include <stdlib.h>

#include "common/checked.h"
#include "engine/backend/backend.h"
#include "engine/engine.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/sample_ref.h"
#include "kernels/sample.h"

struct engine {
	const struct model *m;
	struct engine_opts opts; /* n_kv_blocks as created, device resolved */
	struct backend *be;
	float *logits; /* host logits for engine_forward_sample without a device */
	size_t logits_cap;
};

static int check_opts(const struct engine_opts *o, struct diag *d)
{
	if (o->n_threads < 0 || o->n_threads > 1024)
		return diag_set(d, ERR_INVAL, "n_threads %d out of range", o->n_threads);
	if (o->block_size <= 0 || o->block_size > 4096)
		return diag_set(d, ERR_INVAL, "block_size %d out of range", o->block_size);
	const bool cuda = o->device == ENGINE_DEVICE_CUDA;
	if (o->n_kv_blocks < (cuda ? 0 : 1) || (int64_t)o->n_kv_blocks * o->block_size > INT32_MAX)
		return diag_set(d, ERR_INVAL, "n_kv_blocks %d out of range", o->n_kv_blocks);
	if (!cuda && o->kv_dtype != DT_F32 && o->kv_dtype != DT_F16)
		return diag_set(d, ERR_UNSUPPORTED, "KV dtype %s: the CPU backend has f32 and f16",
				dtype_name(o->kv_dtype));
	if (o->gpu_memory_utilization < 0 || o->gpu_memory_utilization > 1)
		return diag_set(d, ERR_INVAL, "gpu_memory_utilization %g is not in [0, 1]",
				o->gpu_memory_utilization);
	if (o->max_batch_tokens <= 0 || o->max_seqs <= 0 || o->max_blocks_per_seq <= 0)
		return diag_set(d, ERR_INVAL, "max_batch_tokens, max_seqs and max_blocks_per_seq "
				"must be positive");
	if ((int64_t)o->max_blocks_per_seq * o->block_size > INT32_MAX)
		return diag_set(d, ERR_INVAL, "max_blocks_per_seq * block_size too large");
	return 0;
}

int engine_create(const struct model *m, const struct engine_opts *opts, struct engine **out,
		  struct diag *d)
{
	if (!out)
		return diag_set(d, ERR_INVAL, "no output pointer");
	*out = NULL;
	if (!m || !opts)
		return diag_set(d, ERR_INVAL, "no model or options");
	struct engine_opts o = *opts;
	if (o.device == ENGINE_DEVICE_AUTO)
		o.device = backend_cuda_available() ? ENGINE_DEVICE_CUDA : ENGINE_DEVICE_CPU;
	int rc = check_opts(&o, d);
	if (rc)
		return rc;
	struct engine *e = calloc(1, sizeof *e);
	if (!e)
		return diag_set(d, ERR_NOMEM, "out of memory");
	e->m = m;
	if (o.device == ENGINE_DEVICE_CUDA) {
		int n_blocks = 0;
		rc = backend_cuda_create(m, &o, &e->be, &n_blocks, d);
		o.n_kv_blocks = n_blocks;
	} else {
		rc = backend_cpu_create(m, &o, &e->be, d);
	}
	if (rc) {
		free(e);
		return rc;
	}
	e->opts = o;
	*out = e;
	return 0;
}

int engine_n_kv_blocks(const struct engine *e)
{
	return e->opts.n_kv_blocks;
}

const char *engine_backend_name(const struct engine *e)
{
	return e->be->ops->name;
}

bool engine_cuda_available(void)
{
	return backend_cuda_available();
}

void engine_destroy(struct engine *e)
{
	if (!e)
		return;
	if (e->be)
		e->be->ops->free(e->be);
	free(e->logits);
	free(e);
}

int engine_vocab(const struct engine *e)
{
	return e->m->cfg.vocab;
}

/* Every rule of struct engine_batch (engine.h), checked before any write. */
static int check_batch(const struct engine *e, const struct engine_batch *b)
{
	const struct engine_opts *o = &e->opts;
	const int bs = o->block_size;
	if (!b || b->n_tokens <= 0 || b->n_tokens > o->max_batch_tokens || b->n_seqs <= 0 ||
	    b->n_seqs > o->max_seqs || b->n_seqs > b->n_tokens)
		return ERR_INVAL;
	if (!b->tokens || !b->positions || !b->slot_mapping || !b->seq_start || !b->context_len ||
	    !b->block_tables || b->max_blocks_per_seq <= 0 ||
	    b->max_blocks_per_seq > o->max_blocks_per_seq)
		return ERR_INVAL;
	if (b->n_logits < 0 || b->n_logits > b->n_tokens || (b->n_logits > 0 && !b->logits_rows))
		return ERR_INVAL;
	if (b->seq_start[0] != 0 || b->seq_start[b->n_seqs] != b->n_tokens)
		return ERR_INVAL;
	for (int s = 0; s < b->n_seqs; s++) {
		const int32_t start = b->seq_start[s], end = b->seq_start[s + 1];
		if (end <= start || end > b->n_tokens)
			return ERR_INVAL;
		const int32_t n = end - start, ctx = b->context_len[s];
		/* the context must fit the table row, the engine's scratch and the pool */
		if (ctx < n || ctx > o->max_blocks_per_seq * bs)
			return ERR_INVAL;
		const int32_t n_blocks = (ctx + bs - 1) / bs;
		if (n_blocks > b->max_blocks_per_seq)
			return ERR_INVAL;
		const int32_t *table = b->block_tables + (size_t)s * b->max_blocks_per_seq;
		for (int j = 0; j < n_blocks; j++)
			if (table[j] < 0 || table[j] >= o->n_kv_blocks)
				return ERR_INVAL;
		for (int32_t r = start; r < end; r++) {
			const int32_t pos = b->positions[r];
			if (pos != ctx - n + (r - start))
				return ERR_INVAL;
			if (b->tokens[r] < 0 || b->tokens[r] >= e->m->cfg.vocab)
				return ERR_INVAL;
			if (b->slot_mapping[r] != table[pos / bs] * bs + pos % bs)
				return ERR_INVAL;
		}
	}
	for (int i = 0; i < b->n_logits; i++) {
		const int32_t r = b->logits_rows[i];
		if (r < 0 || r >= b->n_tokens || (i > 0 && r <= b->logits_rows[i - 1]))
			return ERR_INVAL;
	}
	return 0;
}

int engine_forward(struct engine *e, const struct engine_batch *b, float *logits)
{
	if (!e)
		return ERR_INVAL;
	int rc = check_batch(e, b);
	if (rc)
		return rc;
	if (b->n_logits > 0 && !logits)
		return ERR_INVAL;
	return e->be->ops->forward(e->be, b, logits);
}

bool engine_samples_on_device(const struct engine *e)
{
	return e && e->be->ops->forward_sample;
}

int engine_forward_sample(struct engine *e, const struct engine_batch *b,
			  struct k_sample_args *a)
{
	if (!e || !a)
		return ERR_INVAL;
	int rc = check_batch(e, b);
	if (rc)
		return rc;
	const int n = b->n_logits;
	if (a->n_rows != n || a->vocab != e->m->cfg.vocab ||
	    (n > 0 && (!a->rows || !a->token || !a->logprob || !a->rank || !a->top_ids ||
		       !a->top_logprobs)))
		return ERR_INVAL;
	/* the rows' CSR ranges, checked before the step (k_sample_ref's rules;
	 * the device kernel trusts them): a bad row must not cost the KV writes */
	for (int i = 0; i < n; i++) {
		const struct k_sample_row *r = &a->rows[i];
		if (r->n_logprobs > K_SAMPLE_MAX_TOP || r->pen_begin < 0 || r->pen_begin > r->pen_end ||
		    r->bias_begin < 0 || r->bias_begin > r->bias_end || r->ban_begin < 0 ||
		    r->ban_begin > r->ban_end || (r->pen_end > r->pen_begin && !a->pen) ||
		    (r->bias_end > r->bias_begin && !a->bias) || (r->ban_end > r->ban_begin && !a->ban))
			return ERR_INVAL;
	}
	if (e->be->ops->forward_sample)
		return e->be->ops->forward_sample(e->be, b, a);
	size_t need;
	if (ck_mul((size_t)(n > 0 ? n : 1), (size_t)a->vocab, &need))
		return ERR_OVERFLOW;
	if (need > e->logits_cap) {
		float *l = realloc(e->logits, need * sizeof(float));
		if (!l)
			return ERR_NOMEM;
		e->logits = l;
		e->logits_cap = need;
	}
	if ((rc = e->be->ops->forward(e->be, b, e->logits)) || n == 0)
		return rc;
	struct k_sample_args h = *a;
	h.logits = e->logits;
	return k_sample_ref(&h, NULL);
}

int engine_sample_greedy(struct engine *e, const float *logits, int n_rows, int32_t *tokens_out)
{
	if (!e || n_rows < 0 || (n_rows > 0 && (!logits || !tokens_out)))
		return ERR_INVAL;
	const int V = e->m->cfg.vocab;
	for (int i = 0; i < n_rows; i++) /* host logits for every backend */
		tokens_out[i] = kops_argmax(logits + (size_t)i * V, V);
	return 0;
}

int engine_copy_blocks(struct engine *e, const int32_t *src, const int32_t *dst, int n)
{
	if (!e || n < 0 || (n > 0 && (!src || !dst)))
		return ERR_INVAL;
	for (int i = 0; i < n; i++)
		if (src[i] < 0 || src[i] >= e->opts.n_kv_blocks || dst[i] < 0 ||
		    dst[i] >= e->opts.n_kv_blocks)
			return ERR_INVAL;
	return e->be->ops->copy_blocks(e->be, src, dst, n);
}
