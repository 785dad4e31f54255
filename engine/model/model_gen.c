/* engine/model/model_gen.c — the test-model generator (see model_gen.h for the
 * contract: same options + seed = same model function in GGUF and HF form).
 *
 * Each tensor is drawn from its own stream, seeded by (seed, HF name), in HF
 * layout (Linear weights (out, in), Q/K rows in rotate_half order), rounded
 * once to the 16-bit storage type, then written: GGUF llama/mistral get their
 * Q/K rows permuted into llama.cpp's interleaved order. Tensor names come from
 * the loader's own tables (model_names.c).
 * This file holds the options, the built-in vocabulary, the config, the
 * weights and the GGUF writer; model_gen_hf.c the HF directory writer.
 * Tests: tests/models/test_model.c (generate -> load, GGUF vs HF equality).
 */
#include "engine/model/model_gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/checked.h"
#include "engine/model/gguf.h"
#include "engine/model/model_gen_internal.h"
#include "engine/model/model_internal.h"

void model_gen_default_opts(struct model_gen_opts *o)
{
	memset(o, 0, sizeof *o);
	struct model_config *c = &o->cfg;
	c->arch = ARCH_LLAMA;
	c->n_layers = 4;
	c->hidden = 256;
	c->n_heads = 8;
	c->n_kv_heads = 4;
	c->head_dim = 32;
	c->ffn = 768;
	c->vocab = 0;
	c->rope_theta = 10000.0f;
	c->rms_eps = 1e-5f;
	c->max_ctx = 2048;
	snprintf(c->name, sizeof c->name, "aorta-demo");
	o->dtype = DT_F16;
	o->seed = 42;
	o->gguf_version = 3;
	o->n_shards = 1;
}

/* ---- the built-in byte-level vocabulary ------------------------------------ */

const char *const gen__merges[GEN__N_MERGES][2] = {
	{ "\xc4\xa0", "t" }, { "h", "e" }, { "i", "n" }, { "\xc4\xa0", "a" },
	{ "e", "r" }, { "o", "n" }, { "\xc4\xa0t", "he" }, { "a", "n" },
};
const char *const gen__specials[GEN__N_SPECIALS] = { "<|begin_of_text|>", "<|end_of_text|>",
					    "<|im_start|>", "<|im_end|>" };
const char gen__chat_template[] =
	"{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
	"message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
	"{{ '<|im_start|>assistant\\n' }}{% endif %}";

void gen__vocab_free(struct gen__vocab *v)
{
	for (int i = 0; i < v->n; i++)
		free(v->tok[i]);
	free(v->tok);
	free(v->type);
}

/* GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to
 * U+0100 onwards in byte order. Writes the UTF-8 of byte b's piece. */
static void byte_piece(int b, char out[4])
{
	static const int printable_lo[3] = { 33, 161, 174 }, printable_hi[3] = { 126, 172, 255 };
	unsigned cp = 0;
	bool printable = false;
	for (int r = 0; r < 3; r++)
		printable |= b >= printable_lo[r] && b <= printable_hi[r];
	if (printable) {
		cp = (unsigned)b;
	} else {
		int k = 0;
		for (int x = 0; x < b; x++) {
			bool px = false;
			for (int r = 0; r < 3; r++)
				px |= x >= printable_lo[r] && x <= printable_hi[r];
			k += !px;
		}
		cp = 256u + (unsigned)k;
	}
	if (cp < 0x80) {
		out[0] = (char)cp;
		out[1] = 0;
	} else {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
		out[2] = 0;
	}
}

int gen__vocab_build(struct gen__vocab *v, int n_total)
{
	if (n_total < MODEL_GEN_N_VOCAB)
		n_total = MODEL_GEN_N_VOCAB;
	v->n = 0;
	v->tok = calloc((size_t)n_total, sizeof *v->tok);
	v->type = calloc((size_t)n_total, sizeof *v->type);
	if (!v->tok || !v->type)
		return ERR_NOMEM;
	char piece[4], buf[64];
	for (int b = 0; b < 256; b++) {
		byte_piece(b, piece);
		v->type[v->n] = 1;
		if (!(v->tok[v->n++] = strdup(piece)))
			return ERR_NOMEM;
	}
	for (int i = 0; i < GEN__N_MERGES; i++) {
		snprintf(buf, sizeof buf, "%s%s", gen__merges[i][0], gen__merges[i][1]);
		v->type[v->n] = 1;
		if (!(v->tok[v->n++] = strdup(buf)))
			return ERR_NOMEM;
	}
	for (int i = 0; i < 4; i++) {
		v->type[v->n] = 3;
		if (!(v->tok[v->n++] = strdup(gen__specials[i])))
			return ERR_NOMEM;
	}
	for (int i = 0; v->n < n_total; i++) {
		snprintf(buf, sizeof buf, "<|reserved_%d|>", i);
		v->type[v->n] = 3;
		if (!(v->tok[v->n++] = strdup(buf)))
			return ERR_NOMEM;
	}
	return 0;
}

/* ---- config ---------------------------------------------------------------- */

int gen__resolve_config(const struct model_gen_opts *o, int tok_vocab, struct model_config *c,
			struct diag *d)
{
	*c = o->cfg;
	c->chat_template = NULL;
	if (c->n_kv_heads <= 0)
		c->n_kv_heads = c->n_heads;
	if (c->head_dim <= 0 && c->n_heads > 0)
		c->head_dim = c->hidden / c->n_heads;
	if (c->rope_theta <= 0.0f)
		c->rope_theta = 10000.0f;
	if (c->rms_eps <= 0.0f)
		c->rms_eps = 1e-5f;
	if (c->max_ctx <= 0)
		c->max_ctx = 2048;
	if (c->vocab < tok_vocab)
		c->vocab = tok_vocab;
	if (c->rope_scaling.type == ROPE_SCALING_NONE)
		c->rope_scaling.factor = 1.0f;
	if (!c->name[0])
		snprintf(c->name, sizeof c->name, "aorta-test-%s", model_arch_name(c->arch));
	c->rope_style = ROPE_STYLE_NEOX;
	c->bos_id = MODEL_GEN_BOS;
	c->eos_id = MODEL_GEN_EOS;
	c->n_eos_ids = 2;
	c->eos_ids[0] = MODEL_GEN_EOS;
	c->eos_ids[1] = MODEL_GEN_IM_END;
	c->add_bos = true;
	if ((unsigned)c->arch >= ARCH__COUNT)
		return diag_set(d, ERR_INVAL, "model_gen: unknown architecture %d", (int)c->arch);
	return model_config_validate(c, d);
}

/* ---- weights --------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t name_seed(uint64_t seed, const char *name)
{
	uint64_t h = 0xcbf29ce484222325ull ^ seed;
	for (const char *p = name; *p; p++)
		h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
	return h;
}

/* Uniform in [-1, 1). */
static float unif(uint64_t *s)
{
	return (float)((double)(splitmix(s) >> 40) * (1.0 / 8388608.0) - 1.0);
}

static float round_to(enum dtype t, float x)
{
	if (t == DT_F16)
		return f16_to_f32(f32_to_f16(x));
	if (t == DT_BF16)
		return bf16_to_f32(f32_to_bf16(x));
	return x;
}

/* The values of one tensor in HF layout, rounded to `round`'s precision. */
float *gen__values(const struct model_config *c, const struct model_tensor_name *e,
		   const char *hf_name, uint64_t seed, enum dtype round, uint64_t *n_out)
{
	int64_t rows = model_dim(c, e->dims[0]);
	int64_t cols = e->n_dims == 2 ? model_dim(c, e->dims[1]) : 1;
	uint64_t n = (uint64_t)rows * (uint64_t)cols;
	float *v = malloc((size_t)n * sizeof *v);
	if (!v)
		return NULL;
	uint64_t s = name_seed(seed, hf_name);
	/* std of U(-a, a) is a/sqrt(3). */
	float a;
	float bias = 0.0f;
	if (e->n_dims == 1 && (e->off == offsetof(struct layer_weights, bq) ||
			       e->off == offsetof(struct layer_weights, bk) ||
			       e->off == offsetof(struct layer_weights, bv)) &&
	    strstr(hf_name, ".bias")) {
		a = 0.1f;
	} else if (e->n_dims == 1) {
		a = 0.1f;
		bias = 1.0f; /* norms: 1 +- 0.1 */
	} else if (e->dims[0] == MD_VOCAB) {
		a = 4.0f * sqrtf(3.0f / (float)c->hidden);
	} else {
		a = sqrtf(3.0f / (float)cols);
		if (e->dims[0] == MD_HIDDEN) /* wo, w_down: keep the residual stream tame */
			a *= 0.5f;
	}
	for (uint64_t i = 0; i < n; i++)
		v[i] = round_to(round, bias + a * unif(&s));
	*n_out = n;
	return v;
}

/* llama.cpp's permute() for GGUF llama Q/K: within each head of D rows, row
 * a*D/2 + b (HF rotate_half order) moves to 2b + a (interleaved pairs). */
static int permute_qk(float *v, int64_t rows, int64_t cols, int n_head)
{
	int64_t D = rows / n_head;
	float *tmp = malloc((size_t)(rows * cols) * sizeof *tmp);
	if (!tmp)
		return ERR_NOMEM;
	for (int64_t h = 0; h < n_head; h++)
		for (int64_t a = 0; a < 2; a++)
			for (int64_t b = 0; b < D / 2; b++)
				memcpy(tmp + (h * D + 2 * b + a) * cols, v + (h * D + a * D / 2 + b) * cols,
				       (size_t)cols * sizeof *v);
	memcpy(v, tmp, (size_t)(rows * cols) * sizeof *v);
	free(tmp);
	return 0;
}

int gen__keep_add(struct gen__keep *k, void *p)
{
	if (!p)
		return ERR_NOMEM;
	if (k->n == k->cap) {
		int cap = k->cap ? k->cap * 2 : 64;
		void **np = realloc(k->p, (size_t)cap * sizeof *np);
		if (!np) {
			free(p);
			return ERR_NOMEM;
		}
		k->p = np;
		k->cap = cap;
	}
	k->p[k->n++] = p;
	return 0;
}

void gen__keep_free(struct gen__keep *k)
{
	for (int i = 0; i < k->n; i++)
		free(k->p[i]);
	free(k->p);
}

/* Convert floats to a storage dtype in a new buffer. */
void *gen__encode(const float *v, uint64_t n, enum dtype t, uint64_t *bytes)
{
	size_t es = t == DT_F32 ? 4 : t == DT_Q8_0 ? 0 : t == DT_F8_E4M3 ? 1 : 2;
	uint64_t nb = t == DT_Q8_0 ? n / Q8_0_BLOCK * sizeof(struct q8_0_block) : n * es;
	uint8_t *out = malloc((size_t)(nb ? nb : 1));
	if (!out)
		return NULL;
	if (t == DT_F32) {
		memcpy(out, v, (size_t)nb);
	} else if (t == DT_Q8_0) {
		gguf_quantize_q8_0(v, n, (struct q8_0_block *)out);
	} else {
		for (uint64_t i = 0; i < n; i++) {
			uint16_t h = t == DT_F16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
			memcpy(out + 2 * i, &h, 2);
		}
	}
	*bytes = nb;
	return out;
}

/* ---- GGUF ------------------------------------------------------------------ */

static int gguf_keys(struct gguf_writer *w, const struct model_config *c, enum dtype dt,
		     const struct gen__vocab *v)
{
	const char *arch = c->arch == ARCH_QWEN2 ? "qwen2" : c->arch == ARCH_QWEN3 ? "qwen3" : "llama";
	char k[128];
	int rc = 0;
#define KEY(suffix) (snprintf(k, sizeof k, "%s.%s", arch, suffix), k)
	uint32_t ftype = dt == DT_F32 ? 0 : dt == DT_F16 ? 1 : dt == DT_Q8_0 ? 7 : 32;
	rc = rc ? rc : gguf_writer_set_str(w, "general.architecture", arch);
	rc = rc ? rc : gguf_writer_set_str(w, "general.name", c->name);
	rc = rc ? rc : gguf_writer_set_u32(w, "general.alignment", GGUF_DEFAULT_ALIGNMENT);
	rc = rc ? rc : gguf_writer_set_u32(w, "general.file_type", ftype);
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)c->n_layers);
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)c->max_ctx);
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)c->hidden);
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)c->ffn);
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)c->n_heads);
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->n_kv_heads);
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)c->head_dim);
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)c->head_dim);
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)c->head_dim);
	rc = rc ? rc : gguf_writer_set_f32(w, KEY("rope.freq_base"), c->rope_theta);
	rc = rc ? rc : gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), c->rms_eps);
	rc = rc ? rc : gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)c->vocab);
	if (c->rope_scaling.type != ROPE_SCALING_NONE) {
		bool l3 = c->rope_scaling.type == ROPE_SCALING_LLAMA3;
		rc = rc ? rc : gguf_writer_set_str(w, KEY("rope.scaling.type"), l3 ? "llama3" : "linear");
		rc = rc ? rc : gguf_writer_set_f32(w, KEY("rope.scaling.factor"), c->rope_scaling.factor);
		if (l3) {
			rc = rc ? rc : gguf_writer_set_f32(w, KEY("rope.scaling.low_freq_factor"), c->rope_scaling.low_freq_factor);
			rc = rc ? rc : gguf_writer_set_f32(w, KEY("rope.scaling.high_freq_factor"), c->rope_scaling.high_freq_factor);
			rc = rc ? rc : gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"),
							   (uint32_t)c->rope_scaling.original_max_pos);
		}
	}
#undef KEY
	const char *merges[GEN__N_MERGES];
	char mbuf[GEN__N_MERGES][32];
	for (int i = 0; i < GEN__N_MERGES; i++) {
		snprintf(mbuf[i], sizeof mbuf[i], "%s %s", gen__merges[i][0], gen__merges[i][1]);
		merges[i] = mbuf[i];
	}
	rc = rc ? rc : gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
	rc = rc ? rc : gguf_writer_set_str(w, "tokenizer.ggml.pre", "default");
	rc = rc ? rc : gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, NULL, (uint64_t)v->n);
	rc = rc ? rc : gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->type, (uint64_t)v->n);
	rc = rc ? rc : gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, GEN__N_MERGES);
	rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", MODEL_GEN_BOS);
	rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", MODEL_GEN_EOS);
	rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", MODEL_GEN_IM_END);
	rc = rc ? rc : gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
	rc = rc ? rc : gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
	rc = rc ? rc : gguf_writer_set_str(w, "tokenizer.chat_template", gen__chat_template);
	return rc;
}

/* Generate, permute (GGUF llama), encode and add one tensor. */
static int gguf_add(struct gguf_writer *w, struct gen__keep *k, const struct model_config *c,
		    const struct model_gen_opts *o, const struct model_tensor_name *e, int il)
{
	char hf[160], gg[160];
	model_tensor_name(e, MODEL_FORMAT_HF, il, hf, sizeof hf);
	model_tensor_name(e, MODEL_FORMAT_GGUF, il, gg, sizeof gg);
	enum dtype store = e->n_dims == 1 ? DT_F32 : o->dtype;
	/* Round once to the 16-bit type of the matching HF file so both agree. */
	enum dtype round = o->dtype == DT_Q8_0 ? DT_F16 : o->dtype;
	uint64_t n, nb;
	float *v = gen__values(c, e, hf, o->seed, round, &n);
	if (!v)
		return ERR_NOMEM;
	int64_t rows = model_dim(c, e->dims[0]), cols = e->n_dims == 2 ? model_dim(c, e->dims[1]) : 1;
	int rc = 0;
	if (e->is_qk && (c->arch == ARCH_LLAMA || c->arch == ARCH_MISTRAL)) {
		bool is_q = e->off == offsetof(struct layer_weights, wq) ||
			    e->off == offsetof(struct layer_weights, bq);
		rc = permute_qk(v, rows, cols, is_q ? c->n_heads : c->n_kv_heads);
	}
	void *data = rc ? NULL : gen__encode(v, n, store, &nb);
	free(v);
	if (rc || (rc = gen__keep_add(k, data)))
		return rc ? rc : ERR_NOMEM;
	int64_t shape[2] = { rows, cols };
	return gguf_writer_add_tensor(w, gg, store, e->n_dims, shape, data, nb);
}

int model_gen_write_gguf(const struct model_gen_opts *o, const char *path, struct diag *d)
{
	if (o->dtype != DT_F32 && o->dtype != DT_F16 && o->dtype != DT_BF16 && o->dtype != DT_Q8_0)
		return diag_set(d, ERR_UNSUPPORTED, "model_gen: GGUF dtype %s is not supported (f32, f16, bf16, q8_0)",
				dtype_name(o->dtype));
	if (o->tokenizer_dir)
		return diag_set(d, ERR_UNSUPPORTED, "model_gen: GGUF output uses the built-in vocabulary only");
	struct model_config c;
	int rc = gen__resolve_config(o, MODEL_GEN_N_VOCAB, &c, d);
	if (rc)
		return rc;
	if (o->dtype == DT_Q8_0 && (c.hidden % Q8_0_BLOCK || c.ffn % Q8_0_BLOCK ||
				    (c.n_heads * c.head_dim) % Q8_0_BLOCK))
		return diag_set(d, ERR_INVAL, "model_gen: Q8_0 needs hidden, ffn and n_heads*head_dim divisible by 32");
	struct gen__vocab v = { 0 };
	struct gguf_writer *w = NULL;
	struct gen__keep k = { 0 };
	rc = gen__vocab_build(&v, c.vocab);
	if (!rc)
		rc = gguf_writer_create(o->gguf_version ? o->gguf_version : 3, &w);
	if (!rc)
		rc = gguf_keys(w, &c, o->dtype, &v);
	for (int i = 0; i < model_n_global_names && !rc; i++)
		if (model_tensor_wanted(&c, model_global_names[i].cond))
			rc = gguf_add(w, &k, &c, o, &model_global_names[i], 0);
	for (int il = 0; il < c.n_layers && !rc; il++)
		for (int i = 0; i < model_n_layer_names && !rc; i++)
			if (model_tensor_wanted(&c, model_layer_names[i].cond))
				rc = gguf_add(w, &k, &c, o, &model_layer_names[i], il);
	if (rc)
		rc = diag_set(d, rc, "model_gen: %s", err_str(rc));
	else
		rc = gguf_writer_write(w, path, d);
	gguf_writer_destroy(w);
	gen__keep_free(&k);
	gen__vocab_free(&v);
	return rc;
}
