/* tests/reference/dump_ref.c — writes one random test model (tmodel.h) for
 * the numpy reference forward pass (ref_forward.py): config.json, every
 * tensor as an F32 .npy in Hugging Face row order, the token ids, and the
 * engine's logits for every position.
 *
 * The engine runs the prompt the way a server would: a prefill chunk, a
 * second chunk crossing KV block boundaries, then single-token decode steps
 * (teacher-forced), with a block table that is not in order. For the
 * "llama3_norm" variant the engine's model is the GGUF-permuted (rope NORM)
 * twin of the dumped HF weights, so the comparison also proves the two
 * layouts compute the same function.
 *
 * Usage: dump_ref VARIANT OUTDIR
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/engine.h"
#include "tests/engine/tmodel.h"

#define N_TOK 40
#define BLOCK 16

static int write_npy(const char *dir, const char *name, const char *descr, const void *data,
		     size_t elem, int n_dims, const int64_t *shape)
{
	char path[1024], hdr[256], shp[128] = "";
	snprintf(path, sizeof path, "%s/%s.npy", dir, name);
	size_t n = 1;
	for (int i = 0; i < n_dims; i++) {
		char t[32];
		snprintf(t, sizeof t, "%lld,", (long long)shape[i]);
		strcat(shp, t);
		n *= (size_t)shape[i];
	}
	int len = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
			   descr, shp);
	/* magic(6) + version(2) + hlen(2) + header, padded with spaces to 64, '\n' last */
	int total = 10 + len + 1;
	int pad = (64 - total % 64) % 64;
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	unsigned short hlen = (unsigned short)(len + pad + 1);
	fwrite("\x93NUMPY\x01\x00", 1, 8, f);
	fputc(hlen & 0xff, f);
	fputc(hlen >> 8, f);
	fwrite(hdr, 1, (size_t)len, f);
	for (int i = 0; i < pad; i++)
		fputc(' ', f);
	fputc('\n', f);
	fwrite(data, elem, n, f);
	return fclose(f) ? -1 : 0;
}

static int dump_tensor(const char *dir, const struct tensor *t)
{
	if (!tensor_present(t))
		return 0;
	if (t->dtype != DT_F32) {
		fprintf(stderr, "%s: dump expects F32\n", t->name);
		return -1;
	}
	return write_npy(dir, t->name, "<f4", t->data, 4, t->n_dims, t->shape);
}

static int set_variant(const char *v, struct model_config *c, enum rope_style *engine_layout)
{
	tmodel_config_small(c);
	*engine_layout = ROPE_STYLE_NEOX;
	if (!strcmp(v, "llama_gqa")) {
		c->n_layers = 3;
	} else if (!strcmp(v, "qwen2")) {
		c->arch = ARCH_QWEN2;
		c->qkv_bias = true;
		c->tied_embeddings = true;
		c->n_kv_heads = 1;
		c->rope_theta = 1000000.0f;
	} else if (!strcmp(v, "qwen3")) {
		c->arch = ARCH_QWEN3;
		c->qk_norm = true;
		c->head_dim = 32;
		c->tied_embeddings = true;
		c->rms_eps = 1e-6f;
	} else if (!strcmp(v, "llama3_norm")) {
		c->n_heads = 2;
		c->n_kv_heads = 1;
		c->head_dim = 32;
		c->rope_theta = 500000.0f;
		c->rope_scaling.type = ROPE_SCALING_LLAMA3;
		c->rope_scaling.factor = 8.0f;
		c->rope_scaling.low_freq_factor = 1.0f;
		c->rope_scaling.high_freq_factor = 4.0f;
		c->rope_scaling.original_max_pos = 16;
		*engine_layout = ROPE_STYLE_NORM;
	} else if (!strcmp(v, "hd128")) {
		/* head_dim 128: the AVX-512 group-attention path (multiples of 64) */
		c->head_dim = 128;
		c->n_heads = 4;
		c->n_kv_heads = 1;
	} else if (!strcmp(v, "linear")) {
		c->rope_scaling.type = ROPE_SCALING_LINEAR;
		c->rope_scaling.factor = 4.0f;
		c->n_kv_heads = 4;
	} else {
		return -1;
	}
	return 0;
}

static int write_config(const char *dir, const struct model_config *c)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/config.json", dir);
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	const char *scaling = c->rope_scaling.type == ROPE_SCALING_LLAMA3   ? "llama3"
			      : c->rope_scaling.type == ROPE_SCALING_LINEAR ? "linear"
									    : "none";
	fprintf(f,
		"{\"n_layers\": %d, \"hidden\": %d, \"n_heads\": %d, \"n_kv_heads\": %d, "
		"\"head_dim\": %d, \"ffn\": %d, \"vocab\": %d, \"rope_theta\": %.9g, "
		"\"rms_eps\": %.9g, \"tied\": %s, \"qkv_bias\": %s, \"qk_norm\": %s, "
		"\"rope_scaling\": {\"type\": \"%s\", \"factor\": %.9g, \"low_freq_factor\": %.9g, "
		"\"high_freq_factor\": %.9g, \"original_max_pos\": %d}}\n",
		c->n_layers, c->hidden, c->n_heads, c->n_kv_heads, c->head_dim, c->ffn, c->vocab,
		(double)c->rope_theta, (double)c->rms_eps, c->tied_embeddings ? "true" : "false",
		c->qkv_bias ? "true" : "false", c->qk_norm ? "true" : "false", scaling,
		(double)c->rope_scaling.factor, (double)c->rope_scaling.low_freq_factor,
		(double)c->rope_scaling.high_freq_factor, c->rope_scaling.original_max_pos);
	return fclose(f) ? -1 : 0;
}

/* Run the prompt through the engine in steps [0,19) [19,37) [37] [38] [39]. */
static int engine_logits(const struct model *m, const int32_t *tok, float *logits)
{
	struct engine_opts o = { .n_threads = 2, .block_size = BLOCK, .n_kv_blocks = 16,
				 .kv_dtype = DT_F32, .quantization = DT_F32,
				 .max_batch_tokens = N_TOK, .max_seqs = 1, .max_blocks_per_seq = 4 };
	struct engine *e;
	struct diag d = { 0 };
	int rc = engine_create(m, &o, &e, &d);
	if (rc) {
		fprintf(stderr, "engine_create: %s\n", d.msg);
		return rc;
	}
	int32_t table[4] = { 9, 3, 14, 0 };
	const int cuts[] = { 0, 19, 37, 38, 39, N_TOK };
	for (int c = 0; c + 1 < (int)(sizeof cuts / sizeof cuts[0]); c++) {
		int a = cuts[c], n = cuts[c + 1] - a;
		if ((rc = tmodel_forward_span(e, tok, a, n, table, 4, BLOCK,
					      logits + (size_t)a * m->cfg.vocab))) {
			fprintf(stderr, "engine_forward: %s\n", err_str(rc));
			break;
		}
	}
	engine_destroy(e);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: dump_ref VARIANT OUTDIR\n");
		return 2;
	}
	struct model_config c;
	enum rope_style layout;
	if (set_variant(argv[1], &c, &layout)) {
		fprintf(stderr, "unknown variant %s\n", argv[1]);
		return 2;
	}
	const char *dir = argv[2];
	if (mkdir(dir, 0755) && errno != EEXIST) {
		perror(dir);
		return 1;
	}
	struct tmodel_opts hf = { .wdtype = DT_F32, .seed = 1234, .layout = ROPE_STYLE_NEOX };
	struct tmodel_opts eo = hf;
	eo.layout = layout;
	struct model *m_hf = NULL, *m_eng = NULL;
	if (tmodel_create(&c, &hf, &m_hf) || tmodel_create(&c, &eo, &m_eng)) {
		fprintf(stderr, "tmodel_create failed\n");
		return 1;
	}
	int32_t tok[N_TOK];
	for (int i = 0; i < N_TOK; i++)
		tok[i] = (int32_t)((i * 97 + 11) % c.vocab);
	float *logits = malloc((size_t)N_TOK * c.vocab * sizeof(float));
	int rc = logits ? engine_logits(m_eng, tok, logits) : ERR_NOMEM;
	int64_t shp[2] = { N_TOK, c.vocab };
	if (!rc)
		rc = write_config(dir, &c) || write_npy(dir, "tokens", "<i4", tok, 4, 1, shp) ||
		     write_npy(dir, "engine_logits", "<f4", logits, 4, 2, shp);
	const struct model_weights *w = &m_hf->w;
	rc = rc || dump_tensor(dir, &w->tok_embd) || dump_tensor(dir, &w->out_norm) ||
	     (!c.tied_embeddings && dump_tensor(dir, &w->lm_head));
	for (int l = 0; l < c.n_layers && !rc; l++) {
		const struct layer_weights *L = &w->layers[l];
		const struct tensor *all[] = { &L->attn_norm, &L->wq, &L->wk, &L->wv, &L->bq,
					       &L->bk, &L->bv, &L->q_norm, &L->k_norm, &L->wo,
					       &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down };
		for (size_t i = 0; i < sizeof all / sizeof all[0] && !rc; i++)
			rc = dump_tensor(dir, all[i]);
	}
	free(logits);
	tmodel_destroy(m_hf);
	tmodel_destroy(m_eng);
	if (rc) {
		fprintf(stderr, "dump_ref %s failed\n", argv[1]);
		return 1;
	}
	return 0;
}
