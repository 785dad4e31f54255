/* engine/model/model_gen.c — the test-model generator (see model_gen.h for the
 * contract: same options + seed = same model function in GGUF and HF form).
 *
 * Each tensor is drawn from its own stream, seeded by (seed, HF name), in HF
 * layout (Linear weights (out, in), Q/K rows in rotate_half order), rounded
 * once to the 16-bit storage type, then written: GGUF llama/mistral get their
 * Q/K rows permuted into llama.cpp's interleaved order. Tensor names come from
 * the loader's own tables (model_names.c).
 * Tests: tests/models/test_model.c (generate -> load, GGUF vs HF equality).
 */
#include "engine/model/model_gen.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/buf.h"
#include "common/mapfile.h"
#include "common/checked.h"
#include "engine/model/gguf.h"
#include "engine/model/model_internal.h"
#include "engine/model/safetensors.h"

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

static const char *const gen_merges[][2] = {
	{ "\xc4\xa0", "t" }, { "h", "e" }, { "i", "n" }, { "\xc4\xa0", "a" },
	{ "e", "r" }, { "o", "n" }, { "\xc4\xa0t", "he" }, { "a", "n" },
};
#define N_GEN_MERGES 8
static const char *const gen_specials[] = { "<|begin_of_text|>", "<|end_of_text|>",
					    "<|im_start|>", "<|im_end|>" };
static const char gen_chat_template[] =
	"{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
	"message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
	"{{ '<|im_start|>assistant\\n' }}{% endif %}";

struct vocab {
	int n;
	char **tok;
	int32_t *type;
};

static void vocab_free(struct vocab *v)
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

static int vocab_build(struct vocab *v, int n_total)
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
	for (int i = 0; i < N_GEN_MERGES; i++) {
		snprintf(buf, sizeof buf, "%s%s", gen_merges[i][0], gen_merges[i][1]);
		v->type[v->n] = 1;
		if (!(v->tok[v->n++] = strdup(buf)))
			return ERR_NOMEM;
	}
	for (int i = 0; i < 4; i++) {
		v->type[v->n] = 3;
		if (!(v->tok[v->n++] = strdup(gen_specials[i])))
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

static int resolve_config(const struct model_gen_opts *o, int tok_vocab, struct model_config *c,
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
static float *gen_values(const struct model_config *c, const struct model_tensor_name *e,
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

/* Owned buffers kept alive until the writer has written them. */
struct keep {
	void **p;
	int n, cap;
};

static int keep_add(struct keep *k, void *p)
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

static void keep_free(struct keep *k)
{
	for (int i = 0; i < k->n; i++)
		free(k->p[i]);
	free(k->p);
}

/* Convert floats to a storage dtype in a new buffer. */
static void *encode(const float *v, uint64_t n, enum dtype t, uint64_t *bytes)
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
		     const struct vocab *v)
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
	const char *merges[N_GEN_MERGES];
	char mbuf[N_GEN_MERGES][32];
	for (int i = 0; i < N_GEN_MERGES; i++) {
		snprintf(mbuf[i], sizeof mbuf[i], "%s %s", gen_merges[i][0], gen_merges[i][1]);
		merges[i] = mbuf[i];
	}
	rc = rc ? rc : gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
	rc = rc ? rc : gguf_writer_set_str(w, "tokenizer.ggml.pre", "default");
	rc = rc ? rc : gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, NULL, (uint64_t)v->n);
	rc = rc ? rc : gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->type, (uint64_t)v->n);
	rc = rc ? rc : gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, N_GEN_MERGES);
	rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", MODEL_GEN_BOS);
	rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", MODEL_GEN_EOS);
	rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.eot_token_id", MODEL_GEN_IM_END);
	rc = rc ? rc : gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
	rc = rc ? rc : gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
	rc = rc ? rc : gguf_writer_set_str(w, "tokenizer.chat_template", gen_chat_template);
	return rc;
}

/* Generate, permute (GGUF llama), encode and add one tensor. */
static int gguf_add(struct gguf_writer *w, struct keep *k, const struct model_config *c,
		    const struct model_gen_opts *o, const struct model_tensor_name *e, int il)
{
	char hf[160], gg[160];
	model_tensor_name(e, MODEL_FORMAT_HF, il, hf, sizeof hf);
	model_tensor_name(e, MODEL_FORMAT_GGUF, il, gg, sizeof gg);
	enum dtype store = e->n_dims == 1 ? DT_F32 : o->dtype;
	/* Round once to the 16-bit type of the matching HF file so both agree. */
	enum dtype round = o->dtype == DT_Q8_0 ? DT_F16 : o->dtype;
	uint64_t n, nb;
	float *v = gen_values(c, e, hf, o->seed, round, &n);
	if (!v)
		return ERR_NOMEM;
	int64_t rows = model_dim(c, e->dims[0]), cols = e->n_dims == 2 ? model_dim(c, e->dims[1]) : 1;
	int rc = 0;
	if (e->is_qk && (c->arch == ARCH_LLAMA || c->arch == ARCH_MISTRAL)) {
		bool is_q = e->off == offsetof(struct layer_weights, wq) ||
			    e->off == offsetof(struct layer_weights, bq);
		rc = permute_qk(v, rows, cols, is_q ? c->n_heads : c->n_kv_heads);
	}
	void *data = rc ? NULL : encode(v, n, store, &nb);
	free(v);
	if (rc || (rc = keep_add(k, data)))
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
	int rc = resolve_config(o, MODEL_GEN_N_VOCAB, &c, d);
	if (rc)
		return rc;
	if (o->dtype == DT_Q8_0 && (c.hidden % Q8_0_BLOCK || c.ffn % Q8_0_BLOCK ||
				    (c.n_heads * c.head_dim) % Q8_0_BLOCK))
		return diag_set(d, ERR_INVAL, "model_gen: Q8_0 needs hidden, ffn and n_heads*head_dim divisible by 32");
	struct vocab v = { 0 };
	struct gguf_writer *w = NULL;
	struct keep k = { 0 };
	rc = vocab_build(&v, c.vocab);
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
	keep_free(&k);
	vocab_free(&v);
	return rc;
}

/* ---- HF directory ---------------------------------------------------------- */

static int write_text(const char *dir, const char *file, const char *text, struct diag *d)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, file);
	FILE *fp = fopen(path, "wb");
	if (!fp)
		return diag_set(d, ERR_IO, "%s: cannot create", path);
	size_t n = strlen(text);
	bool ok = fwrite(text, 1, n, fp) == n;
	ok = !fclose(fp) && ok;
	return ok ? 0 : diag_set(d, ERR_IO, "%s: write failed", path);
}

static int write_json(const char *dir, const char *file, cJSON *j, struct diag *d)
{
	char *s = j ? cJSON_Print(j) : NULL;
	cJSON_Delete(j);
	if (!s)
		return diag_set(d, ERR_NOMEM, "out of memory");
	int rc = write_text(dir, file, s, d);
	free(s);
	return rc;
}

static int copy_file(const char *src_dir, const char *dst_dir, const char *file, struct diag *d)
{
	char src[4096];
	snprintf(src, sizeof src, "%s/%s", src_dir, file);
	char *text;
	size_t len;
	int rc = mapfile_read(src, 512u << 20, &text, &len, d);
	if (rc)
		return rc;
	char dst[4096];
	snprintf(dst, sizeof dst, "%s/%s", dst_dir, file);
	FILE *fp = fopen(dst, "wb");
	bool ok = fp && fwrite(text, 1, len, fp) == len;
	if (fp)
		ok = !fclose(fp) && ok;
	free(text);
	return ok ? 0 : diag_set(d, ERR_IO, "%s: write failed", dst);
}

static cJSON *hf_config_json(const struct model_config *c, enum dtype dt)
{
	static const char *const model_types[] = { "llama", "mistral", "qwen2", "qwen3" };
	static const char *const archs[] = { "LlamaForCausalLM", "MistralForCausalLM",
					     "Qwen2ForCausalLM", "Qwen3ForCausalLM" };
	cJSON *j = cJSON_CreateObject();
	cJSON *a = cJSON_AddArrayToObject(j, "architectures");
	cJSON_AddItemToArray(a, cJSON_CreateString(archs[c->arch]));
	cJSON_AddStringToObject(j, "model_type", model_types[c->arch]);
	cJSON_AddNumberToObject(j, "hidden_size", c->hidden);
	cJSON_AddNumberToObject(j, "intermediate_size", c->ffn);
	cJSON_AddNumberToObject(j, "num_hidden_layers", c->n_layers);
	cJSON_AddNumberToObject(j, "num_attention_heads", c->n_heads);
	cJSON_AddNumberToObject(j, "num_key_value_heads", c->n_kv_heads);
	cJSON_AddNumberToObject(j, "head_dim", c->head_dim);
	cJSON_AddNumberToObject(j, "max_position_embeddings", c->max_ctx);
	cJSON_AddNumberToObject(j, "rms_norm_eps", c->rms_eps);
	cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
	cJSON_AddNumberToObject(j, "vocab_size", c->vocab);
	cJSON_AddStringToObject(j, "hidden_act", "silu");
	cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tied_embeddings);
	cJSON_AddBoolToObject(j, "attention_bias", c->qkv_bias);
	if (c->bos_id >= 0)
		cJSON_AddNumberToObject(j, "bos_token_id", c->bos_id);
	if (c->eos_id >= 0)
		cJSON_AddNumberToObject(j, "eos_token_id", c->eos_id);
	if (c->rope_scaling.type == ROPE_SCALING_NONE) {
		cJSON_AddNullToObject(j, "rope_scaling");
	} else {
		cJSON *rs = cJSON_AddObjectToObject(j, "rope_scaling");
		bool l3 = c->rope_scaling.type == ROPE_SCALING_LLAMA3;
		cJSON_AddStringToObject(rs, "rope_type", l3 ? "llama3" : "linear");
		cJSON_AddNumberToObject(rs, "factor", c->rope_scaling.factor);
		if (l3) {
			cJSON_AddNumberToObject(rs, "low_freq_factor", c->rope_scaling.low_freq_factor);
			cJSON_AddNumberToObject(rs, "high_freq_factor", c->rope_scaling.high_freq_factor);
			cJSON_AddNumberToObject(rs, "original_max_position_embeddings",
						c->rope_scaling.original_max_pos);
		}
	}
	if (c->arch == ARCH_MISTRAL)
		cJSON_AddNullToObject(j, "sliding_window");
	const char *td = dt == DT_F32 ? "float32" : dt == DT_F16 ? "float16" : "bfloat16";
	cJSON_AddStringToObject(j, "torch_dtype", td);
	if (dt == DT_F8_E4M3) {
		cJSON *q = cJSON_AddObjectToObject(j, "quantization_config");
		cJSON_AddStringToObject(q, "quant_method", "fp8");
		cJSON_AddStringToObject(q, "activation_scheme", "dynamic");
	}
	cJSON_AddStringToObject(j, "transformers_version", "4.51.0");
	return j;
}

/* tokenizer.json + tokenizer_config.json for the built-in vocabulary. */
static int write_builtin_tokenizer(const char *dir, const struct vocab *v, struct diag *d)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "version", "1.0");
	cJSON_AddNullToObject(j, "truncation");
	cJSON_AddNullToObject(j, "padding");
	cJSON *added = cJSON_AddArrayToObject(j, "added_tokens");
	for (int i = 256 + N_GEN_MERGES; i < v->n; i++) {
		cJSON *t = cJSON_CreateObject();
		cJSON_AddNumberToObject(t, "id", i);
		cJSON_AddStringToObject(t, "content", v->tok[i]);
		cJSON_AddBoolToObject(t, "single_word", false);
		cJSON_AddBoolToObject(t, "lstrip", false);
		cJSON_AddBoolToObject(t, "rstrip", false);
		cJSON_AddBoolToObject(t, "normalized", false);
		cJSON_AddBoolToObject(t, "special", true);
		cJSON_AddItemToArray(added, t);
	}
	cJSON_AddNullToObject(j, "normalizer");
	cJSON *pre = cJSON_AddObjectToObject(j, "pre_tokenizer");
	cJSON_AddStringToObject(pre, "type", "ByteLevel");
	cJSON_AddBoolToObject(pre, "add_prefix_space", false);
	cJSON_AddBoolToObject(pre, "trim_offsets", true);
	cJSON_AddBoolToObject(pre, "use_regex", true);
	cJSON *post = cJSON_AddObjectToObject(j, "post_processor");
	cJSON_AddStringToObject(post, "type", "TemplateProcessing");
	cJSON *single = cJSON_AddArrayToObject(post, "single");
	cJSON *st = cJSON_CreateObject(), *sq = cJSON_CreateObject();
	cJSON *stv = cJSON_AddObjectToObject(st, "SpecialToken");
	cJSON_AddStringToObject(stv, "id", gen_specials[0]);
	cJSON_AddNumberToObject(stv, "type_id", 0);
	cJSON *sqv = cJSON_AddObjectToObject(sq, "Sequence");
	cJSON_AddStringToObject(sqv, "id", "A");
	cJSON_AddNumberToObject(sqv, "type_id", 0);
	cJSON_AddItemToArray(single, st);
	cJSON_AddItemToArray(single, sq);
	cJSON_AddItemToObject(post, "pair", cJSON_Duplicate(single, 1));
	cJSON *sp = cJSON_AddObjectToObject(post, "special_tokens");
	cJSON *bos = cJSON_AddObjectToObject(sp, gen_specials[0]);
	cJSON_AddStringToObject(bos, "id", gen_specials[0]);
	cJSON_AddItemToObject(bos, "ids", cJSON_CreateArray());
	cJSON_AddItemToArray(cJSON_GetObjectItem(bos, "ids"), cJSON_CreateNumber(MODEL_GEN_BOS));
	cJSON_AddItemToObject(bos, "tokens", cJSON_CreateArray());
	cJSON_AddItemToArray(cJSON_GetObjectItem(bos, "tokens"), cJSON_CreateString(gen_specials[0]));
	cJSON *dec = cJSON_AddObjectToObject(j, "decoder");
	cJSON_AddStringToObject(dec, "type", "ByteLevel");
	cJSON_AddBoolToObject(dec, "add_prefix_space", true);
	cJSON_AddBoolToObject(dec, "trim_offsets", true);
	cJSON_AddBoolToObject(dec, "use_regex", true);
	cJSON *model = cJSON_AddObjectToObject(j, "model");
	cJSON_AddStringToObject(model, "type", "BPE");
	cJSON_AddNullToObject(model, "dropout");
	cJSON_AddNullToObject(model, "unk_token");
	cJSON_AddNullToObject(model, "continuing_subword_prefix");
	cJSON_AddNullToObject(model, "end_of_word_suffix");
	cJSON_AddBoolToObject(model, "fuse_unk", false);
	cJSON_AddBoolToObject(model, "byte_fallback", false);
	cJSON_AddBoolToObject(model, "ignore_merges", false);
	cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
	for (int i = 0; i < 256 + N_GEN_MERGES; i++)
		cJSON_AddNumberToObject(vocab, v->tok[i], i);
	cJSON *merges = cJSON_AddArrayToObject(model, "merges");
	for (int i = 0; i < N_GEN_MERGES; i++) {
		char m[32];
		snprintf(m, sizeof m, "%s %s", gen_merges[i][0], gen_merges[i][1]);
		cJSON_AddItemToArray(merges, cJSON_CreateString(m));
	}
	int rc = write_json(dir, "tokenizer.json", j, d);
	if (rc)
		return rc;
	cJSON *tc = cJSON_CreateObject();
	cJSON_AddBoolToObject(tc, "add_bos_token", true);
	cJSON_AddBoolToObject(tc, "add_eos_token", false);
	cJSON_AddStringToObject(tc, "bos_token", gen_specials[0]);
	cJSON_AddStringToObject(tc, "eos_token", gen_specials[1]);
	cJSON_AddBoolToObject(tc, "clean_up_tokenization_spaces", false);
	cJSON_AddNumberToObject(tc, "model_max_length", 1000000);
	cJSON_AddStringToObject(tc, "tokenizer_class", "PreTrainedTokenizerFast");
	cJSON_AddStringToObject(tc, "chat_template", gen_chat_template);
	return write_json(dir, "tokenizer_config.json", tc, d);
}

/* From a given tokenizer: its vocabulary size and special-token ids. */
static int given_tokenizer(const char *tdir, int *n_vocab, struct model_config *ids,
			   struct diag *d)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/tokenizer.json", tdir);
	char *text;
	size_t len;
	int rc = mapfile_read(path, 512u << 20, &text, &len, d);
	if (rc)
		return rc;
	cJSON *tj = cJSON_ParseWithLength(text, len);
	free(text);
	if (!tj)
		return diag_set(d, ERR_FORMAT, "%s: not valid JSON", path);
	int max_id = -1;
	const cJSON *e;
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(cJSON_GetObjectItem(tj, "model"), "vocab"))
		if (cJSON_IsNumber(e) && e->valuedouble > max_id)
			max_id = (int)e->valuedouble;
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(tj, "added_tokens"))
	{
		const cJSON *id = cJSON_GetObjectItem(e, "id");
		if (cJSON_IsNumber(id) && id->valuedouble > max_id)
			max_id = (int)id->valuedouble;
	}
	/* SentencePiece-style vocabularies are arrays of [piece, score]. */
	const cJSON *vocab = cJSON_GetObjectItem(cJSON_GetObjectItem(tj, "model"), "vocab");
	if (cJSON_IsArray(vocab) && cJSON_GetArraySize(vocab) - 1 > max_id)
		max_id = cJSON_GetArraySize(vocab) - 1;
	*n_vocab = max_id + 1;
	snprintf(path, sizeof path, "%s/tokenizer_config.json", tdir);
	rc = mapfile_read(path, 64u << 20, &text, &len, d);
	cJSON *tc = rc ? NULL : cJSON_ParseWithLength(text, len);
	if (!rc)
		free(text);
	ids->bos_id = ids->eos_id = -1;
	ids->n_eos_ids = 0;
	for (int k = 0; tc && k < 2; k++) {
		const cJSON *v = cJSON_GetObjectItem(tc, k ? "eos_token" : "bos_token");
		if (cJSON_IsObject(v))
			v = cJSON_GetObjectItem(v, "content");
		int id = cJSON_IsString(v) ? model_hf_token_id(tj, v->valuestring) : -1;
		if (k)
			ids->eos_id = id;
		else
			ids->bos_id = id;
	}
	cJSON_Delete(tc);
	cJSON_Delete(tj);
	if (*n_vocab <= 0)
		return diag_set(d, ERR_FORMAT, "%s/tokenizer.json: no vocabulary", tdir);
	return rc;
}

struct hf_shard {
	struct st_writer *w;
	uint64_t bytes;
};

static int hf_add(struct st_writer *w, struct keep *k, const struct model_config *c,
		  const struct model_gen_opts *o, const struct model_tensor_name *e, int il)
{
	char hf[160];
	model_tensor_name(e, MODEL_FORMAT_HF, il, hf, sizeof hf);
	bool fp8 = o->dtype == DT_F8_E4M3;
	enum dtype store = fp8 ? DT_BF16 : o->dtype;
	uint64_t n, nb;
	float *v = gen_values(c, e, hf, o->seed, store, &n);
	if (!v)
		return ERR_NOMEM;
	int64_t rows = model_dim(c, e->dims[0]), cols = e->n_dims == 2 ? model_dim(c, e->dims[1]) : 1;
	int64_t shape[2] = { rows, cols };
	int rc;
	if (fp8 && e->is_matrix) {
		/* Per-row scale = max|x| / 448 (E4M3's largest finite value). */
		uint8_t *q = malloc((size_t)n);
		float *scale = malloc((size_t)rows * sizeof *scale);
		if (!q || !scale) {
			free(q);
			free(scale);
			free(v);
			return ERR_NOMEM;
		}
		for (int64_t r = 0; r < rows; r++) {
			float amax = 0.0f;
			for (int64_t j = 0; j < cols; j++)
				amax = fmaxf(amax, fabsf(v[r * cols + j]));
			scale[r] = amax > 0.0f ? amax / 448.0f : 1.0f;
			for (int64_t j = 0; j < cols; j++)
				q[r * cols + j] = f32_to_f8e4m3(v[r * cols + j] / scale[r]);
		}
		free(v);
		if ((rc = keep_add(k, q)) || (rc = keep_add(k, scale)))
			return rc;
		if ((rc = st_writer_add(w, hf, DT_F8_E4M3, 2, shape, q, n)))
			return rc;
		char sname[200];
		snprintf(sname, sizeof sname, "%s_scale", hf);
		int64_t sshape[2] = { rows, 1 };
		return st_writer_add(w, sname, DT_F32, 2, sshape, scale, (uint64_t)rows * 4);
	}
	void *data = encode(v, n, store, &nb);
	free(v);
	if ((rc = keep_add(k, data)))
		return rc;
	return st_writer_add(w, hf, store, e->n_dims, shape, data, nb);
}

/* Layer il's self_attn.k_scale and v_scale (o->kv_scale). */
static int hf_add_kv_scales(struct st_writer *w, struct keep *k, const struct model_config *c,
			    const struct model_gen_opts *o, int il)
{
	const int n = o->kv_scale_per_head ? c->n_kv_heads : 1;
	if (o->kv_scale_legacy) { /* AutoFP8's older single scale */
		float *v = malloc(sizeof *v);
		int rc = keep_add(k, v);
		if (rc)
			return rc;
		*v = o->kv_scale * (float)(il + 1);
		char name[160];
		snprintf(name, sizeof name, "model.layers.%d.self_attn.kv_scale", il);
		return st_writer_add(w, name, DT_F32, 0, NULL, v, 4);
	}
	for (int kv = 0; kv < 2; kv++) {
		float *v = malloc((size_t)n * sizeof *v);
		int rc = keep_add(k, v);
		if (rc)
			return rc;
		const float top = o->kv_scale * (float)(il + 1) * (kv ? 2.0f : 1.0f);
		for (int i = 0; i < n; i++) /* the last head has the largest */
			v[i] = top * (float)(i + 1) / (float)n;
		char name[160];
		snprintf(name, sizeof name, "model.layers.%d.self_attn.%s_scale", il, kv ? "v" : "k");
		const int64_t shape[1] = { n };
		if ((rc = st_writer_add(w, name, DT_F32, o->kv_scale_per_head ? 1 : 0, shape, v,
					(uint64_t)n * 4)))
			return rc;
	}
	return 0;
}

int model_gen_write_hf_dir(const struct model_gen_opts *o, const char *dir, struct diag *d)
{
	if (o->dtype != DT_F32 && o->dtype != DT_F16 && o->dtype != DT_BF16 && o->dtype != DT_F8_E4M3)
		return diag_set(d, ERR_UNSUPPORTED, "model_gen: HF dtype %s is not supported (f32, f16, bf16, f8_e4m3)",
				dtype_name(o->dtype));
	if (mkdir(dir, 0755) && errno != EEXIST)
		return diag_set(d, ERR_IO, "%s: cannot create directory", dir);
	int tok_vocab = MODEL_GEN_N_VOCAB;
	struct model_config ids = { 0 };
	int rc = 0;
	if (o->tokenizer_dir && (rc = given_tokenizer(o->tokenizer_dir, &tok_vocab, &ids, d)))
		return rc;
	struct model_config c;
	if ((rc = resolve_config(o, tok_vocab, &c, d)))
		return rc;
	if (o->tokenizer_dir) {
		c.bos_id = ids.bos_id;
		c.eos_id = ids.eos_id;
		c.n_eos_ids = 0;
		if (ids.eos_id >= 0)
			c.eos_ids[c.n_eos_ids++] = ids.eos_id;
	}
	int n_shards = o->n_shards > 1 ? o->n_shards : 1;
	struct st_writer **w = calloc((size_t)n_shards, sizeof *w);
	struct keep k = { 0 };
	struct vocab v = { 0 };
	if (!w)
		return diag_set(d, ERR_NOMEM, "out of memory");
	for (int s = 0; s < n_shards && !rc; s++)
		rc = st_writer_create(&w[s]);
	/* Tensors go to shards in order: globals in the first, layers spread. */
	cJSON *index = n_shards > 1 ? cJSON_CreateObject() : NULL;
	cJSON *wmap = index ? cJSON_CreateObject() : NULL;
	char shard_name[64];
	uint64_t total_bytes = 0;
	for (int i = 0; i < model_n_global_names && !rc; i++)
		if (model_tensor_wanted(&c, model_global_names[i].cond))
			rc = hf_add(w[0], &k, &c, o, &model_global_names[i], 0);
	for (int il = 0; il < c.n_layers && !rc; il++) {
		int s = (int)((int64_t)il * n_shards / c.n_layers);
		for (int i = 0; i < model_n_layer_names && !rc; i++)
			if (model_tensor_wanted(&c, model_layer_names[i].cond))
				rc = hf_add(w[s], &k, &c, o, &model_layer_names[i], il);
		if (o->kv_scale != 0.0f && !rc)
			rc = hf_add_kv_scales(w[s], &k, &c, o, il);
	}
	if (rc)
		rc = diag_set(d, rc, "model_gen: %s", err_str(rc));
	for (int s = 0; s < n_shards && !rc; s++) {
		char path[4096];
		if (n_shards > 1)
			snprintf(shard_name, sizeof shard_name, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
		else
			snprintf(shard_name, sizeof shard_name, "model.safetensors");
		snprintf(path, sizeof path, "%s/%s", dir, shard_name);
		st_writer_set_meta(w[s], "format", "pt");
		rc = st_writer_write(w[s], path, d);
		if (!rc && index) {
			/* Re-open to list what went in (the writer has no getters). */
			struct st_file *f;
			if (!(rc = st_open(path, &f, d))) {
				for (int64_t i = 0; i < st_n_tensors(f); i++) {
					cJSON_AddStringToObject(wmap, st_tensor_at(f, i)->name, shard_name);
					total_bytes += st_tensor_at(f, i)->n_bytes;
				}
				st_close(f);
			}
		}
	}
	if (!rc && index) {
		cJSON *meta = cJSON_AddObjectToObject(index, "metadata");
		cJSON_AddNumberToObject(meta, "total_size", (double)total_bytes);
		cJSON_AddItemToObject(index, "weight_map", wmap);
		wmap = NULL;
		rc = write_json(dir, "model.safetensors.index.json", index, d);
		index = NULL;
	}
	cJSON_Delete(index);
	cJSON_Delete(wmap);
	for (int s = 0; s < n_shards; s++)
		st_writer_destroy(w[s]);
	free(w);
	keep_free(&k);
	if (!rc)
		rc = write_json(dir, "config.json", hf_config_json(&c, o->dtype), d);
	if (!rc) {
		cJSON *g = cJSON_CreateObject();
		if (c.bos_id >= 0)
			cJSON_AddNumberToObject(g, "bos_token_id", c.bos_id);
		cJSON *eos = cJSON_AddArrayToObject(g, "eos_token_id");
		for (int i = 0; i < c.n_eos_ids; i++)
			cJSON_AddItemToArray(eos, cJSON_CreateNumber(c.eos_ids[i]));
		cJSON_AddBoolToObject(g, "do_sample", false);
		rc = write_json(dir, "generation_config.json", g, d);
	}
	if (!rc && o->tokenizer_dir) {
		rc = copy_file(o->tokenizer_dir, dir, "tokenizer.json", d);
		if (!rc)
			rc = copy_file(o->tokenizer_dir, dir, "tokenizer_config.json", d);
	} else if (!rc) {
		rc = vocab_build(&v, c.vocab);
		if (!rc)
			rc = write_builtin_tokenizer(dir, &v, d);
		else
			rc = diag_set(d, rc, "out of memory");
	}
	vocab_free(&v);
	return rc;
}
