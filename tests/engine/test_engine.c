/* tests/engine/test_engine.c — the engine seam on random in-memory models
 * (tmodel.h): batch validation, batch invariance (a sequence's greedy tokens
 * alone == inside a batch of 8 mixing prefill chunks and decodes == with its
 * prompt prefilled in several chunks; its logits within 1e-5, and the same
 * bits where the weights are repacked), GGUF (NORM, permuted Q/K) vs HF (NEOX)
 * layouts, F16 vs F32 KV, copy_blocks, and the KV block size formula.
 * Logits against an independent numpy model: tests/reference/.
 */
#include <check.h>
#include <stdbool.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "kernels/cpu/matmul.h"
#include "tmodel.h"

#define MAXT 128 /* tokens per test sequence */
#define MAXB 32	 /* blocks per test sequence */
#define MAXGEN 8 /* generated tokens whose logits a test sequence keeps */

/* ---- a tiny scheduler: sequences, a shuffled block free list, steps -------- */

struct tseq {
	int32_t toks[MAXT];
	int n_toks, n_prompt, ctx;
	int32_t table[MAXB];
	int n_blocks;
	float *gen_logits; /* [MAXGEN][vocab]: logits that produced generated token g, or NULL */
};

struct tpool {
	int32_t free_ids[4096];
	int n_free;
	int block_size;
};

static void tpool_init(struct tpool *p, int n_blocks, int block_size, uint64_t seed)
{
	p->n_free = n_blocks;
	p->block_size = block_size;
	for (int i = 0; i < n_blocks; i++)
		p->free_ids[i] = i;
	for (int i = n_blocks - 1; i > 0; i--) { /* shuffle: tables are not in order */
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		int j = (int)((seed >> 33) % (uint64_t)(i + 1));
		int32_t t = p->free_ids[i];
		p->free_ids[i] = p->free_ids[j];
		p->free_ids[j] = t;
	}
}

static void tseq_init(struct tseq *s, const int32_t *prompt, int n, int vocab, int seed)
{
	memset(s, 0, sizeof *s);
	for (int i = 0; i < n; i++)
		s->toks[i] = prompt ? prompt[i] : (int32_t)((i * 37 + seed * 101 + 7) % vocab);
	s->n_toks = s->n_prompt = n;
}

struct tstep {
	struct tseq *seq[16];
	int n_new[16];
	int n;
};

/* Build and run one step; every sequence whose chunk reaches its last known
 * token gets logits and a greedy token appended. */
static int run_step(struct engine *e, struct tpool *p, const struct tstep *st, int vocab)
{
	int32_t tokens[512], pos[512], slots[512], seq_start[17], ctx[16], tables[16 * MAXB];
	int32_t lrows[16];
	int T = 0, n_logits = 0;
	for (int i = 0; i < st->n; i++) {
		struct tseq *s = st->seq[i];
		seq_start[i] = T;
		for (int j = 0; j < st->n_new[i]; j++) {
			int t = s->ctx + j;
			while (t / p->block_size >= s->n_blocks) {
				ck_assert_int_gt(p->n_free, 0);
				s->table[s->n_blocks++] = p->free_ids[--p->n_free];
			}
			tokens[T] = s->toks[t];
			pos[T] = t;
			slots[T] = s->table[t / p->block_size] * p->block_size + t % p->block_size;
			T++;
		}
		ctx[i] = s->ctx + st->n_new[i];
		memcpy(tables + i * MAXB, s->table, sizeof s->table);
		if (ctx[i] == s->n_toks)
			lrows[n_logits++] = T - 1;
	}
	seq_start[st->n] = T;
	struct engine_batch b = {
		.n_tokens = T, .tokens = tokens, .positions = pos, .slot_mapping = slots,
		.n_seqs = st->n, .seq_start = seq_start, .context_len = ctx,
		.block_tables = tables, .max_blocks_per_seq = MAXB,
		.n_logits = n_logits, .logits_rows = lrows,
	};
	float *logits = malloc((size_t)(n_logits ? n_logits : 1) * vocab * sizeof(float));
	int rc = engine_forward(e, &b, logits);
	if (rc == 0) {
		int32_t next[16];
		ck_assert_int_eq(engine_sample_greedy(e, logits, n_logits, next), 0);
		int k = 0;
		for (int i = 0; i < st->n; i++) {
			struct tseq *s = st->seq[i];
			s->ctx = ctx[i];
			if (ctx[i] != s->n_toks)
				continue;
			int g = s->n_toks - s->n_prompt;
			if (s->gen_logits && g < MAXGEN)
				memcpy(s->gen_logits + (size_t)g * vocab, logits + (size_t)k * vocab,
				       vocab * sizeof(float));
			ck_assert_int_lt(s->n_toks, MAXT);
			s->toks[s->n_toks++] = next[k++];
		}
	}
	free(logits);
	return rc;
}

/* Run one sequence alone: its prompt in chunks of `chunk` (0 = all at once),
 * then n_gen decode steps. */
static void run_alone(struct engine *e, struct tpool *p, struct tseq *s, int chunk, int n_gen,
		      int vocab)
{
	while (s->ctx < s->n_prompt) {
		int n = s->n_prompt - s->ctx;
		if (chunk > 0 && n > chunk)
			n = chunk;
		struct tstep st = { .seq = { s }, .n_new = { n }, .n = 1 };
		ck_assert_int_eq(run_step(e, p, &st, vocab), 0);
	}
	while (s->n_toks < s->n_prompt + n_gen) {
		struct tstep st = { .seq = { s }, .n_new = { 1 }, .n = 1 };
		ck_assert_int_eq(run_step(e, p, &st, vocab), 0);
	}
}

static struct engine_opts default_opts(void)
{
	struct engine_opts o = {
		.n_threads = 2, .block_size = 8, .n_kv_blocks = 512, .kv_dtype = DT_F32,
		.quantization = DT_F32, .max_batch_tokens = 256, .max_seqs = 16,
		.max_blocks_per_seq = MAXB,
	};
	return o;
}

static struct model *make_model(const struct model_config *c, enum dtype wdt, enum rope_style lay)
{
	struct tmodel_opts to = { .wdtype = wdt, .seed = 42, .layout = lay };
	struct model *m = NULL;
	ck_assert_int_eq(tmodel_create(c, &to, &m), 0);
	return m;
}

static float max_rel_diff(const float *a, const float *b, int n)
{
	float mx = 0, d = 0;
	for (int i = 0; i < n; i++) {
		mx = fmaxf(mx, fabsf(b[i]));
		d = fmaxf(d, fabsf(a[i] - b[i]));
	}
	return mx > 0 ? d / mx : d;
}

/* ---- tests ------------------------------------------------------------------- */

/* Weight dtypes the invariance test runs with: F32 (float matmul), Q8_0
 * (the integer-dot path), F16 with an F16 KV cache, and F32 again with
 * head_dim 64 (the SIMD attention kernels) on 3 workers, where a lone decode
 * row splits attention per query head and larger steps per GQA group. */
static const enum dtype inv_dtypes[] = { DT_F32, DT_Q8_0, DT_F16, DT_F32 };

START_TEST(test_batch_invariance)
{
	struct model_config c;
	tmodel_config_small(&c);
	if (_i == 3)
		c.head_dim = 64;
	struct model *m = make_model(&c, inv_dtypes[_i], ROPE_STYLE_NEOX);
	struct engine_opts o = default_opts();
	if (inv_dtypes[_i] == DT_F16)
		o.kv_dtype = DT_F16;
	if (_i == 3)
		o.n_threads = 3;
	struct engine *e;
	struct diag d = { 0 };
	ck_assert_msg(engine_create(m, &o, &e, &d) == 0, "%s", d.msg);
	const struct kmat probe = { .dtype = inv_dtypes[_i], .rows = 16, .cols = 32 };
	const bool bitwise = kcpu_pack_wanted(&probe);
	struct tpool p;
	tpool_init(&p, o.n_kv_blocks, o.block_size, 7);
	enum { NS = 8, NGEN = 6 };
	const int plen[NS] = { 5, 17, 40, 1, 23, 8, 33, 12 };
	static struct tseq alone[NS], chunked[NS], batched[NS];
	const size_t per_seq = (size_t)MAXGEN * c.vocab;
	float *la = calloc(NS * per_seq, 4), *lb = calloc(NS * per_seq, 4),
	      *lc = calloc(NS * per_seq, 4);
	for (int i = 0; i < NS; i++) {
		tseq_init(&alone[i], NULL, plen[i], c.vocab, i);
		alone[i].gen_logits = la + i * per_seq;
		run_alone(e, &p, &alone[i], 0, NGEN, c.vocab);
		tseq_init(&chunked[i], NULL, plen[i], c.vocab, i);
		chunked[i].gen_logits = lc + i * per_seq;
		run_alone(e, &p, &chunked[i], 7, NGEN, c.vocab);
		tseq_init(&batched[i], NULL, plen[i], c.vocab, i);
		batched[i].gen_logits = lb + i * per_seq;
	}
	/* Mixed steps: sequence i joins at step i, the budget is 24 tokens, so
	 * prompts are split and prefill chunks share steps with decodes. */
	for (int step = 0; step < 200; step++) {
		struct tstep st = { .n = 0 };
		int budget = 24;
		for (int i = 0; i < NS && i <= step && budget > 0; i++) {
			struct tseq *s = &batched[i];
			if (s->n_toks >= s->n_prompt + NGEN && s->ctx == s->n_toks - 0)
				continue;
			if (s->n_toks >= s->n_prompt + NGEN)
				continue;
			int n = s->n_toks - s->ctx;
			if (n > budget)
				n = budget;
			st.seq[st.n] = s;
			st.n_new[st.n++] = n;
			budget -= n;
		}
		if (st.n == 0)
			break;
		ck_assert_int_eq(run_step(e, &p, &st, c.vocab), 0);
	}
	for (int i = 0; i < NS; i++) {
		ck_assert_int_eq(batched[i].n_toks, plen[i] + NGEN);
		for (int t = 0; t < plen[i] + NGEN; t++) {
			ck_assert_msg(alone[i].toks[t] == batched[i].toks[t],
				      "seq %d token %d: alone %d batched %d", i, t, alone[i].toks[t],
				      batched[i].toks[t]);
			ck_assert_msg(alone[i].toks[t] == chunked[i].toks[t],
				      "seq %d token %d: one chunk %d chunked %d", i, t,
				      alone[i].toks[t], chunked[i].toks[t]);
		}
		/* the logits behind every generated token, not just the tokens;
		 * where the matmuls run on repacked weights (kcpu_pack: the same
		 * F32 operations at every m) nothing in the step depends on the
		 * batch, so they must be the same bits */
		for (int g = 0; g < NGEN; g++) {
			const float *ra = la + i * per_seq + (size_t)g * c.vocab;
			const float *gb = lb + i * per_seq + (size_t)g * c.vocab;
			const float *gc = lc + i * per_seq + (size_t)g * c.vocab;
			float rb = max_rel_diff(gb, ra, c.vocab);
			float rc = max_rel_diff(gc, ra, c.vocab);
			ck_assert_msg(rb <= 1e-5f && rc <= 1e-5f,
				      "%s: seq %d token %d logits: batched differ by %g, chunked by %g",
				      dtype_name(inv_dtypes[_i]), i, g, rb, rc);
			if (bitwise)
				ck_assert_msg(!memcmp(gb, ra, (size_t)c.vocab * sizeof(float)) &&
						      !memcmp(gc, ra, (size_t)c.vocab * sizeof(float)),
					      "%s: seq %d token %d logits: not the same bits "
					      "(batched %g, chunked %g)",
					      dtype_name(inv_dtypes[_i]), i, g, rb, rc);
		}
	}
	free(la);
	free(lb);
	free(lc);
	engine_destroy(e);
	tmodel_destroy(m);
}
END_TEST

/* Logits of every prompt position of one sequence (prefilled at once). */
static void prompt_logits(const struct model *m, const struct engine_opts *o, int n,
			  float *out)
{
	struct engine *e;
	struct diag d = { 0 };
	ck_assert_msg(engine_create(m, o, &e, &d) == 0, "%s", d.msg);
	int32_t tok[64], pos[64], slots[64], start[2] = { 0, n }, ctx = n, table[MAXB], rows[64];
	for (int j = 0; j < MAXB; j++)
		table[j] = MAXB - 1 - j;
	for (int i = 0; i < n; i++) {
		tok[i] = (i * 13 + 5) % m->cfg.vocab;
		pos[i] = i;
		slots[i] = table[i / o->block_size] * o->block_size + i % o->block_size;
		rows[i] = i;
	}
	struct engine_batch b = { .n_tokens = n, .tokens = tok, .positions = pos,
				  .slot_mapping = slots, .n_seqs = 1, .seq_start = start,
				  .context_len = &ctx, .block_tables = table,
				  .max_blocks_per_seq = MAXB, .n_logits = n, .logits_rows = rows };
	ck_assert_int_eq(engine_forward(e, &b, out), 0);
	engine_destroy(e);
}

START_TEST(test_layouts_and_kv_dtype)
{
	struct model_config c;
	tmodel_config_small(&c);
	c.arch = ARCH_QWEN3;
	c.qkv_bias = true; /* both on: the permutation must carry biases and norms */
	c.qk_norm = true;
	c.head_dim = 32; /* != hidden / n_heads */
	c.tied_embeddings = true;
	c.rope_scaling.type = ROPE_SCALING_LLAMA3;
	c.rope_scaling.factor = 8;
	c.rope_scaling.low_freq_factor = 1;
	c.rope_scaling.high_freq_factor = 4;
	c.rope_scaling.original_max_pos = 32;
	const int n = 40;
	struct model *neox = make_model(&c, DT_F32, ROPE_STYLE_NEOX);
	struct model *norm = make_model(&c, DT_F32, ROPE_STYLE_NORM);
	struct engine_opts o = default_opts();
	size_t sz = (size_t)n * c.vocab * sizeof(float);
	float *a = malloc(sz), *b = malloc(sz), *h = malloc(sz);
	prompt_logits(neox, &o, n, a);
	prompt_logits(norm, &o, n, b);
	float rd = max_rel_diff(b, a, n * c.vocab);
	ck_assert_msg(rd <= 1e-5f, "NORM vs NEOX layout: rel diff %g", rd);
	o.kv_dtype = DT_F16;
	prompt_logits(neox, &o, n, h);
	rd = max_rel_diff(h, a, n * c.vocab);
	ck_assert_msg(rd > 0 && rd <= 2e-3f, "F16 KV vs F32 KV: rel diff %g", rd);
	/* one thread gives the same logits */
	o.kv_dtype = DT_F32;
	o.n_threads = 1;
	prompt_logits(neox, &o, n, b);
	rd = max_rel_diff(b, a, n * c.vocab);
	ck_assert_msg(rd <= 1e-6f, "1 vs 2 threads: rel diff %g", rd);
	free(a), free(b), free(h);
	tmodel_destroy(neox);
	tmodel_destroy(norm);
}
END_TEST

/* A GGUF rope_freqs tensor (llama.cpp's freq factors, computed as its HF
 * converter does) gives the same model function as llama3 scaling in the
 * config. */
START_TEST(test_rope_freq_factors)
{
	struct model_config c;
	tmodel_config_small(&c);
	c.head_dim = 32;
	const int half = 16;
	c.rope_scaling.type = ROPE_SCALING_LLAMA3;
	c.rope_scaling.factor = 8;
	c.rope_scaling.low_freq_factor = 1;
	c.rope_scaling.high_freq_factor = 4;
	c.rope_scaling.original_max_pos = 32;
	const int n = 40;
	struct model *scaled = make_model(&c, DT_F32, ROPE_STYLE_NEOX);
	static float factors[16];
	double lo_wl = 32.0 / 1.0, hi_wl = 32.0 / 4.0;
	for (int i = 0; i < half; i++) {
		double wl = 2.0 * M_PI / pow((double)c.rope_theta, -2.0 * i / (double)c.head_dim);
		if (wl < hi_wl)
			factors[i] = 1.0f;
		else if (wl > lo_wl)
			factors[i] = 8.0f;
		else {
			double smooth = (32.0 / wl - 1.0) / (4.0 - 1.0);
			factors[i] = (float)(1.0 / ((1.0 - smooth) / 8.0 + smooth));
		}
	}
	c.rope_scaling.type = ROPE_SCALING_NONE;
	struct model *ff = make_model(&c, DT_F32, ROPE_STYLE_NEOX);
	struct model *plain = make_model(&c, DT_F32, ROPE_STYLE_NEOX);
	ff->w.rope_freqs = (struct tensor){ .name = "rope_freqs.weight", .dtype = DT_F32,
					    .n_dims = 1, .shape = { half }, .data = factors,
					    .n_bytes = sizeof factors };
	struct engine_opts o = default_opts();
	size_t sz = (size_t)n * c.vocab * sizeof(float);
	float *a = malloc(sz), *b = malloc(sz), *p = malloc(sz);
	prompt_logits(scaled, &o, n, a);
	prompt_logits(ff, &o, n, b);
	prompt_logits(plain, &o, n, p);
	float rd = max_rel_diff(b, a, n * c.vocab);
	ck_assert_msg(rd <= 1e-5f, "rope_freqs vs llama3 config scaling: rel diff %g", rd);
	rd = max_rel_diff(p, a, n * c.vocab);
	ck_assert_msg(rd > 1e-3f, "scaling made no difference (%g): the test is not testing", rd);
	free(a), free(b), free(p);
	ff->w.rope_freqs = (struct tensor){ 0 };
	tmodel_destroy(scaled);
	tmodel_destroy(ff);
	tmodel_destroy(plain);
}
END_TEST

/* A well-formed 2-sequence batch that test_validation breaks one field at a time. */
struct vb {
	/* capacities are the engine's limits in test_validation*: a corrupted
	 * count may claim up to these, never more (the engine cannot check the
	 * length of an array it is handed) */
	int32_t tok[6], pos[6], slots[6], start[3], ctx[2], table[2 * 4], rows[6];
	struct engine_batch b;
};

static void vb_init(struct vb *v)
{
	/* seq 0: 4 prompt tokens at positions 0..3 in block 5 (block_size 8);
	 * seq 1: 2 tokens at positions 8, 9 (context 10) in blocks 2, 7 */
	const int32_t tok[6] = { 1, 2, 3, 4, 9, 10 }, pos[6] = { 0, 1, 2, 3, 8, 9 };
	memcpy(v->tok, tok, sizeof tok);
	memcpy(v->pos, pos, sizeof pos);
	const int32_t table[8] = { 5, 0, 0, 0, 2, 7, 0, 0 };
	memcpy(v->table, table, sizeof table);
	for (int i = 0; i < 4; i++)
		v->slots[i] = 5 * 8 + i;
	v->slots[4] = 7 * 8 + 0;
	v->slots[5] = 7 * 8 + 1;
	v->start[0] = 0, v->start[1] = 4, v->start[2] = 6;
	v->ctx[0] = 4, v->ctx[1] = 10;
	v->rows[0] = 3, v->rows[1] = 5;
	v->b = (struct engine_batch){ .n_tokens = 6, .tokens = v->tok, .positions = v->pos,
				      .slot_mapping = v->slots, .n_seqs = 2,
				      .seq_start = v->start, .context_len = v->ctx,
				      .block_tables = v->table, .max_blocks_per_seq = 4,
				      .n_logits = 2, .logits_rows = v->rows };
}

START_TEST(test_validation)
{
	struct model_config c;
	tmodel_config_small(&c);
	struct model *m = make_model(&c, DT_F16, ROPE_STYLE_NEOX);
	struct engine_opts o = default_opts();
	o.n_kv_blocks = 8;
	o.max_blocks_per_seq = 4;
	o.max_batch_tokens = 6;
	o.max_seqs = 2;
	struct engine *e;
	struct diag d = { 0 };
	ck_assert_msg(engine_create(m, &o, &e, &d) == 0, "%s", d.msg);
	float logits[2 * 256];
	struct vb v;
	vb_init(&v);
	ck_assert_int_eq(engine_forward(e, &v.b, logits), 0);
	ck_assert_int_eq(engine_vocab(e), 256);
#define BAD(stmt)                                                              \
	do {                                                                   \
		vb_init(&v);                                                   \
		stmt;                                                          \
		ck_assert_msg(engine_forward(e, &v.b, logits) == ERR_INVAL, #stmt); \
	} while (0)
	BAD(v.tok[2] = 256);
	BAD(v.tok[0] = -1);
	BAD(v.pos[1] = 2);		 /* not consecutive */
	BAD(v.pos[4] = 7);		 /* not the last tokens of the context */
	BAD(v.ctx[1] = 33);		 /* beyond max_blocks_per_seq * block_size */
	BAD(v.ctx[0] = 3);		 /* fewer than the new rows */
	BAD(v.slots[4] = 7 * 8 + 1);	 /* not the table's slot */
	BAD(v.slots[0] = 64);		 /* outside the pool */
	BAD(v.table[4] = 8);		 /* block id outside the pool */
	BAD(v.table[5] = -1);
	BAD(v.start[1] = 6);		 /* empty sequence */
	BAD(v.start[1] = 7);
	BAD(v.start[2] = 5);		 /* does not end at n_tokens */
	BAD(v.start[0] = 1);
	BAD(v.b.n_tokens = 7);		 /* over max_batch_tokens */
	BAD(v.b.n_tokens = 0);
	BAD(v.b.n_seqs = 3);		 /* over max_seqs */
	BAD(v.rows[1] = 6);		 /* logits row out of range */
	BAD(v.rows[1] = 3);		 /* not ascending */
	BAD(v.b.n_logits = 7);
	BAD(v.b.tokens = NULL);
	BAD(v.b.max_blocks_per_seq = 1); /* table row too narrow for context 10 */
	BAD(v.b.max_blocks_per_seq = 5); /* wider than engine_opts.max_blocks_per_seq */
	BAD(v.b.logits_rows = NULL);
#undef BAD
	vb_init(&v);
	ck_assert_int_eq(engine_forward(e, &v.b, NULL), ERR_INVAL);
	ck_assert_int_eq(engine_forward(e, NULL, logits), ERR_INVAL);
	v.b.n_logits = 0; /* no logits wanted: NULL is fine */
	ck_assert_int_eq(engine_forward(e, &v.b, NULL), 0);

	int32_t src[2] = { 5, 2 }, dst[2] = { 1, 8 };
	ck_assert_int_eq(engine_copy_blocks(e, src, dst, 2), ERR_INVAL);
	dst[1] = 3;
	ck_assert_int_eq(engine_copy_blocks(e, src, dst, 2), 0);
	engine_destroy(e);

	/* bad options and bad models */
	o.kv_dtype = DT_Q8_0;
	ck_assert_int_eq(engine_create(m, &o, &e, &d), ERR_UNSUPPORTED);
	o = default_opts();
	o.block_size = 0;
	ck_assert_int_eq(engine_create(m, &o, &e, &d), ERR_INVAL);
	o = default_opts();
	struct tensor saved = m->w.layers[1].wk;
	m->w.layers[1].wk.shape[0] = 31;
	ck_assert_int_eq(engine_create(m, &o, &e, &d), ERR_FORMAT);
	ck_assert_ptr_nonnull(strstr(d.msg, "blk.1.attn_k.weight"));
	m->w.layers[1].wk = saved;
	m->w.layers[0].w_up.n_bytes -= 1;
	ck_assert_int_eq(engine_create(m, &o, &e, &d), ERR_FORMAT);
	m->w.layers[0].w_up.n_bytes += 1;
	m->cfg.n_kv_heads = 3;
	ck_assert_int_eq(engine_create(m, &o, &e, &d), ERR_FORMAT);
	tmodel_destroy(m);
}
END_TEST

/* Random corruption of a valid batch: every result is 0 or ERR_INVAL, and
 * (under ASan, where this suite also runs) nothing is read or written out of
 * range whatever the values. */
START_TEST(test_validation_random)
{
	struct model_config c;
	tmodel_config_small(&c);
	c.n_layers = 1;
	struct model *m = make_model(&c, DT_F32, ROPE_STYLE_NEOX);
	struct engine_opts o = default_opts();
	o.n_kv_blocks = 8;
	o.max_blocks_per_seq = 4;
	o.max_batch_tokens = 6;
	o.max_seqs = 2;
	o.n_threads = 1;
	struct engine *e;
	struct diag d = { 0 };
	ck_assert_msg(engine_create(m, &o, &e, &d) == 0, "%s", d.msg);
	float logits[6 * 256];
	const int32_t extremes[] = { 0, 1, -1, 2, 5, 6, 7, 8, 9, 10, 31, 32, 33, 63, 64, 255, 256,
				     INT32_MAX, INT32_MIN, INT32_MAX / 8 };
	uint64_t r = 1;
	int n_ok = 0;
	for (int it = 0; it < 3000; it++) {
		struct vb v;
		vb_init(&v);
		int32_t *fields[] = { v.tok, v.pos, v.slots, v.start, v.ctx, v.table, v.rows };
		const int lens[] = { 6, 6, 6, 3, 2, 8, 6 };
		for (int k = 0; k < 1 + it % 3; k++) { /* 1-3 corruptions */
			r = r * 6364136223846793005ull + 1442695040888963407ull;
			int f = (int)((r >> 33) % 8);
			int32_t val = extremes[(r >> 17) % (sizeof extremes / sizeof extremes[0])];
			if (f == 7) {
				int which = (int)((r >> 40) % 4);
				if (which == 0)
					v.b.n_tokens = val;
				else if (which == 1)
					v.b.n_seqs = val;
				else if (which == 2)
					v.b.n_logits = val;
				else
					v.b.max_blocks_per_seq = val;
			} else {
				fields[f][(r >> 45) % (uint64_t)lens[f]] = val;
			}
		}
		int rc = engine_forward(e, &v.b, logits);
		ck_assert_msg(rc == 0 || rc == ERR_INVAL, "iteration %d: rc %d", it, rc);
		n_ok += rc == 0;
	}
	ck_assert_int_lt(n_ok, 3000); /* the corruptions were mostly caught */
	engine_destroy(e);
	tmodel_destroy(m);
}
END_TEST

/* Copy-on-write: after copying a prefilled sequence's blocks elsewhere, a
 * decode step over the copies gives the same logits as over the originals. */
START_TEST(test_copy_blocks)
{
	struct model_config c;
	tmodel_config_small(&c);
	struct model *m = make_model(&c, DT_BF16, ROPE_STYLE_NEOX);
	struct engine_opts o = default_opts();
	o.kv_dtype = DT_F16;
	struct engine *e;
	struct diag d = { 0 };
	ck_assert_msg(engine_create(m, &o, &e, &d) == 0, "%s", d.msg);
	struct tpool p;
	tpool_init(&p, o.n_kv_blocks, o.block_size, 3);
	struct tseq a, b;
	tseq_init(&a, NULL, 21, c.vocab, 1);
	run_alone(e, &p, &a, 0, 0, c.vocab); /* prefill only: ctx 21, 22 known tokens */
	b = a;
	int32_t dst[MAXB];
	for (int j = 0; j < a.n_blocks; j++)
		dst[j] = p.free_ids[--p.n_free];
	ck_assert_int_eq(engine_copy_blocks(e, a.table, dst, a.n_blocks), 0);
	memcpy(b.table, dst, sizeof(int32_t) * a.n_blocks);
	float *la = malloc(c.vocab * 4), *lb = malloc(c.vocab * 4);
	a.gen_logits = NULL;
	/* decode one token on each; compare their logits */
	struct tseq *pair[2] = { &a, &b };
	float *outs[2] = { la, lb };
	for (int k = 0; k < 2; k++) {
		pair[k]->n_prompt = pair[k]->n_toks; /* the next token's logits count as "first" */
		pair[k]->gen_logits = outs[k]; /* only entry 0 is written */
		struct tstep st = { .seq = { pair[k] }, .n_new = { 1 }, .n = 1 };
		ck_assert_int_eq(run_step(e, &p, &st, c.vocab), 0);
	}
	ck_assert_float_eq(max_rel_diff(la, lb, c.vocab), 0.0f);
	ck_assert_int_eq(a.toks[a.n_toks - 1], b.toks[b.n_toks - 1]);
	free(la), free(lb);
	engine_destroy(e);
	tmodel_destroy(m);
}
END_TEST

START_TEST(test_kv_block_bytes)
{
	struct model_config c;
	tmodel_config_small(&c);
	/* 2 layers * (K+V) * 16 slots * 2 kv heads * 16 dims * 4 bytes */
	ck_assert_uint_eq(engine_kv_block_bytes(&c, 16, DT_F32), 2u * 2 * 16 * 2 * 16 * 4);
	ck_assert_uint_eq(engine_kv_block_bytes(&c, 16, DT_F16), 2u * 2 * 16 * 2 * 16 * 2);
	ck_assert_uint_eq(engine_kv_block_bytes(&c, 16, DT_Q8_0), 0);
	ck_assert_uint_eq(engine_kv_block_bytes(&c, 0, DT_F32), 0);
	c.n_layers = 1 << 30;
	c.head_dim = 1 << 30;
	ck_assert_uint_eq(engine_kv_block_bytes(&c, 1 << 30, DT_F32), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("engine");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_validation);
	tcase_add_test(tc, test_validation_random);
	tcase_add_test(tc, test_kv_block_bytes);
	tcase_add_test(tc, test_copy_blocks);
	tcase_add_test(tc, test_layouts_and_kv_dtype);
	tcase_add_test(tc, test_rope_freq_factors);
	tcase_add_loop_test(tc, test_batch_invariance, 0, 4);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
