/* tests/engine/tmodel.c — random in-memory models (see tmodel.h). Test code:
 * it quantizes its own F32 master weights to the storage dtypes with the
 * plain textbook formulas (Q8_0: per-32 absmax/127; I8: per-row absmax/127;
 * FP8: per-row absmax/448), independent of the kernels under test.
 */
#include "tmodel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

struct tm_priv {
	void **ptrs;
	int n, cap;
};

static void *keep(struct model *m, void *p)
{
	struct tm_priv *pv = m->priv;
	if (!p)
		return NULL;
	if (pv->n == pv->cap) {
		int cap = pv->cap ? pv->cap * 2 : 128;
		void **n = realloc(pv->ptrs, (size_t)cap * sizeof *n);
		if (!n) {
			free(p);
			return NULL;
		}
		pv->ptrs = n;
		pv->cap = cap;
	}
	pv->ptrs[pv->n++] = p;
	return p;
}

static uint64_t rng_next(uint64_t *s) /* splitmix64 */
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static float rng_uniform(uint64_t *s) /* [-1, 1) */
{
	return (float)((rng_next(s) >> 40) * (1.0 / (1ull << 24))) * 2.0f - 1.0f;
}

/* GGUF llama layout: within each head, new row 2i+j = HF row j*half+i. */
static void permute_rows(float *w, int n_heads, int head_dim, int64_t cols)
{
	const int half = head_dim / 2;
	float *tmp = malloc((size_t)head_dim * (size_t)cols * sizeof(float));
	if (!tmp)
		return;
	for (int h = 0; h < n_heads; h++) {
		float *hw = w + (size_t)h * head_dim * cols;
		for (int i = 0; i < half; i++)
			for (int j = 0; j < 2; j++)
				memcpy(tmp + (size_t)(2 * i + j) * cols, hw + (size_t)(j * half + i) * cols,
				       (size_t)cols * sizeof(float));
		memcpy(hw, tmp, (size_t)head_dim * cols * sizeof(float));
	}
	free(tmp);
}

static int encode(struct model *m, struct tensor *t, const float *src, enum dtype dt)
{
	const int64_t rows = t->n_dims == 2 ? t->shape[0] : 1;
	const int64_t cols = t->n_dims == 2 ? t->shape[1] : t->shape[0];
	const size_t n = (size_t)(rows * cols);
	if (dt == DT_Q8_0 && cols % Q8_0_BLOCK)
		dt = DT_F32; /* cannot block this one: keep it exact */
	t->dtype = dt;
	switch (dt) {
	case DT_F32: {
		float *p = keep(m, malloc(n * 4));
		if (!p)
			return ERR_NOMEM;
		memcpy(p, src, n * 4);
		t->data = p;
		t->n_bytes = n * 4;
		return 0;
	}
	case DT_F16:
	case DT_BF16: {
		uint16_t *p = keep(m, malloc(n * 2));
		if (!p)
			return ERR_NOMEM;
		for (size_t i = 0; i < n; i++)
			p[i] = dt == DT_F16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
		t->data = p;
		t->n_bytes = n * 2;
		return 0;
	}
	case DT_Q8_0: {
		size_t nb = n / Q8_0_BLOCK;
		struct q8_0_block *b = keep(m, malloc(nb * sizeof *b));
		if (!b)
			return ERR_NOMEM;
		for (size_t j = 0; j < nb; j++) {
			float amax = 0;
			for (int k = 0; k < Q8_0_BLOCK; k++)
				amax = fmaxf(amax, fabsf(src[j * Q8_0_BLOCK + k]));
			float dd = amax / 127.0f, id = dd ? 1.0f / dd : 0.0f;
			b[j].d = f32_to_f16(dd);
			for (int k = 0; k < Q8_0_BLOCK; k++)
				b[j].qs[k] = (int8_t)lrintf(src[j * Q8_0_BLOCK + k] * id);
		}
		t->data = b;
		t->n_bytes = nb * sizeof *b;
		return 0;
	}
	case DT_I8:
	case DT_F8_E4M3: {
		uint8_t *p = keep(m, malloc(n));
		float *sc = keep(m, malloc((size_t)rows * sizeof(float)));
		if (!p || !sc)
			return ERR_NOMEM;
		for (int64_t r = 0; r < rows; r++) {
			const float *x = src + r * cols;
			float amax = 0;
			for (int64_t k = 0; k < cols; k++)
				amax = fmaxf(amax, fabsf(x[k]));
			float s = amax / (dt == DT_I8 ? 127.0f : 448.0f);
			sc[r] = s;
			for (int64_t k = 0; k < cols; k++) {
				float v = s ? x[k] / s : 0.0f;
				p[r * cols + k] = dt == DT_I8 ? (uint8_t)(int8_t)lrintf(v) : f32_to_f8e4m3(v);
			}
		}
		t->data = p;
		t->n_bytes = n;
		t->scale = sc;
		t->n_scale = rows;
		return 0;
	}
	default:
		return ERR_INVAL;
	}
}

struct gen {
	struct model *m;
	const struct tmodel_opts *o;
	uint64_t rng;
	int rc;
};

/* Draw a tensor: values = center + scale * U(-1,1); matrices in o->wdtype,
 * vectors in F32. perm_heads > 0 permutes rows into the GGUF layout. */
static void draw(struct gen *g, struct tensor *t, const char *name, int64_t rows, int64_t cols,
		 float center, float scale, int perm_heads, int head_dim)
{
	if (g->rc)
		return;
	size_t n = (size_t)(rows * (cols ? cols : 1));
	float *v = malloc(n * sizeof(float));
	if (!v) {
		g->rc = ERR_NOMEM;
		return;
	}
	for (size_t i = 0; i < n; i++)
		v[i] = center + scale * rng_uniform(&g->rng);
	if (perm_heads > 0 && g->o->layout == ROPE_STYLE_NORM)
		permute_rows(v, perm_heads, head_dim, cols ? cols : 1);
	t->name = keep(g->m, strdup(name));
	if (cols) {
		t->n_dims = 2;
		t->shape[0] = rows;
		t->shape[1] = cols;
	} else {
		t->n_dims = 1;
		t->shape[0] = rows;
	}
	enum dtype dt = cols ? g->o->wdtype : DT_F32;
	if (t == &g->m->w.lm_head && g->o->head_dtype != DT_F32)
		dt = g->o->head_dtype;
	g->rc = encode(g->m, t, v, dt);
	free(v);
}

int tmodel_create(const struct model_config *cfg, const struct tmodel_opts *o, struct model **out)
{
	*out = NULL;
	struct model *m = calloc(1, sizeof *m);
	struct tm_priv *pv = calloc(1, sizeof *pv);
	if (!m || !pv) {
		free(m);
		free(pv);
		return ERR_NOMEM;
	}
	m->priv = pv;
	m->cfg = *cfg;
	m->cfg.rope_style = o->layout;
	m->cfg.chat_template = NULL;
	m->w.layers = keep(m, calloc((size_t)cfg->n_layers, sizeof *m->w.layers));
	struct gen g = { .m = m, .o = o, .rng = o->seed * 0x2545f4914f6cdd1dull + 1 };
	if (!m->w.layers)
		g.rc = ERR_NOMEM;
	const int H = cfg->hidden, hd = cfg->head_dim;
	const int64_t q_dim = (int64_t)cfg->n_heads * hd, kv_dim = (int64_t)cfg->n_kv_heads * hd;
	const float sh = 1.0f / sqrtf((float)H), sf = 1.0f / sqrtf((float)cfg->ffn),
		    sq = 1.0f / sqrtf((float)q_dim);
	char nm[96];
	draw(&g, &m->w.tok_embd, "token_embd.weight", cfg->vocab, H, 0, o->embd_scale > 0 ? o->embd_scale : 1.0f, 0, 0);
	for (int l = 0; l < cfg->n_layers && !g.rc; l++) {
		struct layer_weights *w = &m->w.layers[l];
#define NM(s) (snprintf(nm, sizeof nm, "blk.%d.%s", l, s), nm)
		draw(&g, &w->attn_norm, NM("attn_norm.weight"), H, 0, 1.0f, 0.1f, 0, 0);
		draw(&g, &w->wq, NM("attn_q.weight"), q_dim, H, 0, sh, cfg->n_heads, hd);
		draw(&g, &w->wk, NM("attn_k.weight"), kv_dim, H, 0, sh, cfg->n_kv_heads, hd);
		draw(&g, &w->wv, NM("attn_v.weight"), kv_dim, H, 0, sh, 0, 0);
		if (cfg->qkv_bias) {
			draw(&g, &w->bq, NM("attn_q.bias"), q_dim, 0, 0, 0.1f, cfg->n_heads, hd);
			draw(&g, &w->bk, NM("attn_k.bias"), kv_dim, 0, 0, 0.1f, cfg->n_kv_heads, hd);
			draw(&g, &w->bv, NM("attn_v.bias"), kv_dim, 0, 0, 0.1f, 0, 0);
		}
		if (cfg->qk_norm) {
			/* one head's worth: permute as a single "head" */
			draw(&g, &w->q_norm, NM("attn_q_norm.weight"), hd, 0, 1.0f, 0.2f, 1, hd);
			draw(&g, &w->k_norm, NM("attn_k_norm.weight"), hd, 0, 1.0f, 0.2f, 1, hd);
		}
		draw(&g, &w->wo, NM("attn_output.weight"), H, q_dim, 0, sq, 0, 0);
		draw(&g, &w->ffn_norm, NM("ffn_norm.weight"), H, 0, 1.0f, 0.1f, 0, 0);
		draw(&g, &w->w_gate, NM("ffn_gate.weight"), cfg->ffn, H, 0, sh, 0, 0);
		draw(&g, &w->w_up, NM("ffn_up.weight"), cfg->ffn, H, 0, sh, 0, 0);
		draw(&g, &w->w_down, NM("ffn_down.weight"), H, cfg->ffn, 0, sf, 0, 0);
		if (o->kv_scale > 0) { /* as a checkpoint's self_attn.k_scale / v_scale */
			w->k_scale = o->kv_scale * (1.0f + 0.25f * (float)l);
			w->v_scale = 1.5f * o->kv_scale * (1.0f + 0.25f * (float)l);
		}
		if (o->kv_scale > 0 && o->kv_scale_per_head) { /* head h: (h + 1) / n_kv of it */
			const int n = cfg->n_kv_heads;
			float *hk = keep(m, malloc((size_t)n * sizeof(float)));
			float *hv = keep(m, malloc((size_t)n * sizeof(float)));
			if (!hk || !hv) {
				g.rc = ERR_NOMEM;
				break;
			}
			for (int h = 0; h < n; h++) {
				hk[h] = w->k_scale * (float)(h + 1) / (float)n;
				hv[h] = w->v_scale * (float)(h + 1) / (float)n;
			}
			w->k_head_scale = hk;
			w->v_head_scale = hv;
		}
#undef NM
	}
	draw(&g, &m->w.out_norm, "output_norm.weight", H, 0, 1.0f, 0.1f, 0, 0);
	if (!cfg->tied_embeddings)
		draw(&g, &m->w.lm_head, "output.weight", cfg->vocab, H, 0,
		     sh * (o->head_gain > 0 ? o->head_gain : 1.0f), 0, 0);
	if (g.rc) {
		tmodel_destroy(m);
		return g.rc;
	}
	*out = m;
	return 0;
}

void tmodel_destroy(struct model *m)
{
	if (!m)
		return;
	struct tm_priv *pv = m->priv;
	if (pv) {
		for (int i = 0; i < pv->n; i++)
			free(pv->ptrs[i]);
		free(pv->ptrs);
		free(pv);
	}
	free(m);
}

void tmodel_config_small(struct model_config *c)
{
	memset(c, 0, sizeof *c);
	c->arch = ARCH_LLAMA;
	c->n_layers = 2;
	c->hidden = 64;
	c->n_heads = 4;
	c->n_kv_heads = 2;
	c->head_dim = 16;
	c->ffn = 128;
	c->vocab = 256;
	c->rope_theta = 10000.0f;
	c->rope_style = ROPE_STYLE_NEOX;
	c->rms_eps = 1e-5f;
	c->max_ctx = 2048;
	c->bos_id = 1;
	c->eos_id = 2;
	c->n_eos_ids = 1;
	c->eos_ids[0] = 2;
	snprintf(c->name, sizeof c->name, "tmodel");
}

int tmodel_forward_span(struct engine *e, const int32_t *tok, int a, int n, const int32_t *table,
			int n_table, int block_size, float *logits)
{
	int32_t *pos = malloc(3 * (size_t)n * sizeof(int32_t));
	if (!pos)
		return ERR_NOMEM;
	int32_t *slots = pos + n, *rows = slots + n, start[2] = { 0, n }, ctx = a + n;
	for (int i = 0; i < n; i++) {
		pos[i] = a + i;
		slots[i] = table[(a + i) / block_size] * block_size + (a + i) % block_size;
		rows[i] = i;
	}
	struct engine_batch b = { .n_tokens = n, .tokens = tok + a, .positions = pos,
				  .slot_mapping = slots, .n_seqs = 1, .seq_start = start,
				  .context_len = &ctx, .block_tables = table,
				  .max_blocks_per_seq = n_table, .n_logits = n, .logits_rows = rows };
	int rc = engine_forward(e, &b, logits);
	free(pos);
	return rc;
}
