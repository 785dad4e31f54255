/* engine/model/model_config.c — struct model_config from a GGUF file's keys or from
 * an HF directory's config.json (+ generation_config.json,
 * tokenizer_config.json, tokenizer.json for special-token ids).
 *
 * Model differences are data: architecture name -> defaults (RoPE style,
 * biases, q/k norm), then the file's own values; model_config_validate()
 * bounds every dimension before the loader trusts it for shape checks.
 * Tests: tests/models/test_model.c (both formats, the tokenizer fixtures).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/mapfile.h"
#include "engine/model/gguf.h"
#include "engine/model/model_internal.h"

static const struct {
	const char *name;
	enum model_arch arch;
} arch_names[] = {
	{ "llama", ARCH_LLAMA },
	{ "mistral", ARCH_MISTRAL },
	{ "qwen2", ARCH_QWEN2 },
	{ "qwen3", ARCH_QWEN3 },
};

static int arch_parse(const char *s, size_t n, enum model_arch *out)
{
	for (size_t i = 0; i < sizeof arch_names / sizeof arch_names[0]; i++)
		if (strlen(arch_names[i].name) == n && !memcmp(s, arch_names[i].name, n)) {
			*out = arch_names[i].arch;
			return 0;
		}
	return ERR_UNSUPPORTED;
}

static void config_defaults(struct model_config *c)
{
	memset(c, 0, sizeof *c);
	c->rope_theta = 10000.0f;
	c->rms_eps = 1e-5f;
	c->max_ctx = 2048;
	c->bos_id = -1;
	c->eos_id = -1;
	c->rope_scaling.type = ROPE_SCALING_NONE;
	c->rope_scaling.factor = 1.0f;
}

static void add_eos(struct model_config *c, int id)
{
	if (id < 0)
		return;
	for (int i = 0; i < c->n_eos_ids; i++)
		if (c->eos_ids[i] == id)
			return;
	if (c->n_eos_ids < MODEL_MAX_EOS)
		c->eos_ids[c->n_eos_ids++] = id;
	if (c->eos_id < 0)
		c->eos_id = id;
}

int model_config_validate(const struct model_config *c, struct diag *d)
{
#define BOUND(v, lo, hi)                                                                        \
	if ((v) < (lo) || (v) > (hi))                                                           \
		return diag_set(d, ERR_FORMAT, "model config: %s = %lld is out of range [%lld, %lld]", \
				#v, (long long)(v), (long long)(lo), (long long)(hi));
	BOUND(c->n_layers, 1, 1024);
	BOUND(c->hidden, 1, 1 << 17);
	BOUND(c->n_heads, 1, 1024);
	BOUND(c->n_kv_heads, 1, c->n_heads);
	BOUND(c->head_dim, 2, 1024);
	BOUND(c->ffn, 1, 1 << 20);
	BOUND(c->vocab, 1, 1 << 24);
	BOUND(c->max_ctx, 1, 1 << 24);
#undef BOUND
	if (c->n_heads % c->n_kv_heads)
		return diag_set(d, ERR_FORMAT, "model config: %d heads are not a multiple of %d KV heads",
				c->n_heads, c->n_kv_heads);
	if (c->head_dim % 2)
		return diag_set(d, ERR_FORMAT, "model config: head_dim %d is odd (RoPE pairs dimensions)",
				c->head_dim);
	if (!(c->rms_eps > 0.0f) || !isfinite(c->rms_eps) || !(c->rope_theta > 0.0f) ||
	    !isfinite(c->rope_theta))
		return diag_set(d, ERR_FORMAT, "model config: rms_eps and rope_theta must be positive");
	if (c->rope_scaling.type != ROPE_SCALING_NONE &&
	    (!(c->rope_scaling.factor > 0.0f) || !isfinite(c->rope_scaling.factor)))
		return diag_set(d, ERR_FORMAT, "model config: rope scaling factor must be positive");
	if (c->rope_scaling.type == ROPE_SCALING_LLAMA3 &&
	    (c->rope_scaling.original_max_pos <= 0 || !(c->rope_scaling.low_freq_factor > 0.0f) ||
	     !(c->rope_scaling.high_freq_factor > c->rope_scaling.low_freq_factor)))
		return diag_set(d, ERR_FORMAT, "model config: llama3 rope scaling needs original_max_position_embeddings > 0 and high_freq_factor > low_freq_factor > 0");
	for (int i = 0; i < c->n_eos_ids; i++)
		if (c->eos_ids[i] >= c->vocab)
			return diag_set(d, ERR_FORMAT, "model config: eos id %d is outside the vocabulary (%d)",
					c->eos_ids[i], c->vocab);
	if (c->bos_id >= c->vocab)
		return diag_set(d, ERR_FORMAT, "model config: bos id %d is outside the vocabulary (%d)",
				c->bos_id, c->vocab);
	return 0;
}

/* ---- GGUF ------------------------------------------------------------------ */

static int g_int(const struct gguf_file *g, const char *arch, const char *suffix, int *out,
		 bool required, struct diag *d)
{
	char key[160];
	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	uint32_t v;
	int rc = gguf_get_u32(g, key, &v);
	if (rc == ERR_NOTFOUND && !required)
		return 0;
	if (rc == ERR_NOTFOUND)
		return diag_set(d, ERR_FORMAT, "gguf: missing key %s", key);
	if (rc || v > INT32_MAX)
		return diag_set(d, ERR_FORMAT, "gguf: key %s is not a 32-bit count", key);
	*out = (int)v;
	return 0;
}

static int g_f32(const struct gguf_file *g, const char *arch, const char *suffix, float *out,
		 struct diag *d)
{
	char key[160];
	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	int rc = gguf_get_f32(g, key, out);
	if (rc == ERR_NOTFOUND)
		return 0;
	return rc ? diag_set(d, ERR_FORMAT, "gguf: key %s is not a float", key) : 0;
}

static int g_token_id(const struct gguf_file *g, const char *key, int *out, struct diag *d)
{
	int32_t v;
	int rc = gguf_get_i32(g, key, &v);
	if (rc == ERR_NOTFOUND)
		return 0;
	if (rc || v < 0)
		return diag_set(d, ERR_FORMAT, "gguf: key %s is not a token id", key);
	*out = v;
	return 0;
}

int model_config_from_gguf(const struct gguf_file *g, struct model_config *c, struct diag *d)
{
	config_defaults(c);
	const char *as;
	size_t alen;
	if (gguf_get_str(g, "general.architecture", &as, &alen))
		return diag_set(d, ERR_FORMAT, "gguf: missing general.architecture");
	char arch[64];
	snprintf(arch, sizeof arch, "%.*s", (int)(alen < 63 ? alen : 63), as);
	if (arch_parse(as, alen, &c->arch) || strlen(arch) != alen)
		return diag_set(d, ERR_UNSUPPORTED, "gguf: architecture '%s' is not supported (llama, mistral, qwen2, qwen3)",
				arch);
	int rc;
	if ((rc = g_int(g, arch, "block_count", &c->n_layers, true, d)) ||
	    (rc = g_int(g, arch, "embedding_length", &c->hidden, true, d)) ||
	    (rc = g_int(g, arch, "feed_forward_length", &c->ffn, true, d)) ||
	    (rc = g_int(g, arch, "attention.head_count", &c->n_heads, true, d)))
		return rc;
	c->n_kv_heads = c->n_heads;
	c->head_dim = c->n_heads > 0 ? c->hidden / c->n_heads : 0;
	if ((rc = g_int(g, arch, "attention.head_count_kv", &c->n_kv_heads, false, d)) ||
	    (rc = g_int(g, arch, "attention.key_length", &c->head_dim, false, d)) ||
	    (rc = g_int(g, arch, "context_length", &c->max_ctx, false, d)) ||
	    (rc = g_f32(g, arch, "rope.freq_base", &c->rope_theta, d)) ||
	    (rc = g_f32(g, arch, "attention.layer_norm_rms_epsilon", &c->rms_eps, d)))
		return rc;
	/* Rope scaling: llama.cpp's "linear"; "llama3" with its factors is an
	 * aorta extension (llama.cpp stores a rope_freqs tensor instead, which
	 * the loader also accepts: struct model_weights.rope_freqs). */
	char key[160];
	snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
	const char *st;
	size_t stl;
	if (!gguf_get_str(g, key, &st, &stl)) {
		if (stl == 6 && !memcmp(st, "linear", 6))
			c->rope_scaling.type = ROPE_SCALING_LINEAR;
		else if (stl == 6 && !memcmp(st, "llama3", 6))
			c->rope_scaling.type = ROPE_SCALING_LLAMA3;
		else if (!(stl == 4 && !memcmp(st, "none", 4)))
			return diag_set(d, ERR_UNSUPPORTED, "gguf: rope scaling type '%.*s' is not supported",
					(int)(stl < 32 ? stl : 32), st);
		if ((rc = g_f32(g, arch, "rope.scaling.factor", &c->rope_scaling.factor, d)) ||
		    (rc = g_f32(g, arch, "rope.scaling.low_freq_factor", &c->rope_scaling.low_freq_factor, d)) ||
		    (rc = g_f32(g, arch, "rope.scaling.high_freq_factor", &c->rope_scaling.high_freq_factor, d)) ||
		    (rc = g_int(g, arch, "rope.scaling.original_context_length",
				&c->rope_scaling.original_max_pos, false, d)))
			return rc;
	}
	c->rope_style = (c->arch == ARCH_LLAMA || c->arch == ARCH_MISTRAL) ? ROPE_STYLE_NORM
									   : ROPE_STYLE_NEOX;
	/* Presence-derived: the tensors say whether biases / q-k norms / a
	 * separate output matrix exist. */
	c->qkv_bias = gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
	c->qk_norm = gguf_find_tensor(g, "blk.0.attn_q_norm.weight") != NULL;
	c->tied_embeddings = gguf_find_tensor(g, "output.weight") == NULL;
	const struct gguf_tensor_info *emb = gguf_find_tensor(g, "token_embd.weight");
	if (!emb || emb->n_dims != 2)
		return diag_set(d, ERR_FORMAT, "gguf: missing or malformed token_embd.weight");
	if (emb->shape[0] > INT32_MAX)
		return diag_set(d, ERR_FORMAT, "gguf: vocabulary of %lld rows", (long long)emb->shape[0]);
	c->vocab = (int)emb->shape[0];

	if ((rc = g_token_id(g, "tokenizer.ggml.bos_token_id", &c->bos_id, d)))
		return rc;
	int id = -1;
	if ((rc = g_token_id(g, "tokenizer.ggml.eos_token_id", &id, d)))
		return rc;
	add_eos(c, id);
	id = -1;
	if ((rc = g_token_id(g, "tokenizer.ggml.eot_token_id", &id, d)))
		return rc;
	add_eos(c, id);
	id = -1;
	if ((rc = g_token_id(g, "tokenizer.ggml.eom_token_id", &id, d)))
		return rc;
	add_eos(c, id);
	/* llama.cpp's default: SentencePiece-style vocabularies add BOS. */
	const char *tm;
	size_t tml;
	c->add_bos = !gguf_get_str(g, "tokenizer.ggml.model", &tm, &tml) && tml == 5 &&
		     !memcmp(tm, "llama", 5);
	bool ab;
	if (!gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &ab))
		c->add_bos = ab;
	if (c->bos_id < 0)
		c->add_bos = false;
	const char *name;
	size_t nlen;
	if (!gguf_get_str(g, "general.name", &name, &nlen))
		snprintf(c->name, sizeof c->name, "%.*s", (int)(nlen < sizeof c->name ? nlen : sizeof c->name - 1), name);
	const char *tpl;
	size_t tlen;
	if (!gguf_get_str(g, "tokenizer.chat_template", &tpl, &tlen)) {
		c->chat_template = strndup(tpl, tlen);
		if (!c->chat_template)
			return diag_set(d, ERR_NOMEM, "out of memory");
	}
	return 0;
}

/* ---- Hugging Face ---------------------------------------------------------- */

static int read_json(const char *dir, const char *file, size_t max, cJSON **out, bool required,
		     struct diag *d)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, file);
	char *text;
	size_t len;
	*out = NULL;
	int rc = mapfile_read(path, max, &text, &len, d);
	if (rc == ERR_NOTFOUND && !required)
		return 0;
	if (rc)
		return rc;
	*out = cJSON_ParseWithLength(text, len);
	free(text);
	if (!cJSON_IsObject(*out)) {
		cJSON_Delete(*out);
		*out = NULL;
		return diag_set(d, ERR_FORMAT, "%s: not a JSON object", path);
	}
	return 0;
}

static int j_int(const cJSON *o, const char *key, int *out, bool required, struct diag *d)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v)) {
		if (required)
			return diag_set(d, ERR_FORMAT, "config.json: missing %s", key);
		return 0;
	}
	if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < -1 ||
	    v->valuedouble > INT32_MAX)
		return diag_set(d, ERR_FORMAT, "config.json: %s is not an integer", key);
	*out = (int)v->valuedouble;
	return 0;
}

static int j_f32(const cJSON *o, const char *key, float *out, struct diag *d)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsNumber(v))
		return diag_set(d, ERR_FORMAT, "config.json: %s is not a number", key);
	*out = (float)v->valuedouble;
	return 0;
}

static void j_bool(const cJSON *o, const char *key, bool *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (cJSON_IsBool(v))
		*out = cJSON_IsTrue(v);
}

/* eos_token_id may be an int or a list of ints. */
static void j_eos(const cJSON *o, struct model_config *c)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "eos_token_id");
	if (cJSON_IsNumber(v)) {
		add_eos(c, (int)v->valuedouble);
	} else if (cJSON_IsArray(v)) {
		const cJSON *e;
		cJSON_ArrayForEach(e, v) if (cJSON_IsNumber(e) && e->valuedouble >= 0 &&
					     e->valuedouble < INT32_MAX) add_eos(c, (int)e->valuedouble);
	}
}

int model_hf_token_id(const cJSON *tj, const char *content)
{
	const cJSON *added = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens");
	const cJSON *e;
	cJSON_ArrayForEach(e, added)
	{
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
		if (cJSON_IsString(c) && cJSON_IsNumber(id) && !strcmp(c->valuestring, content))
			return (int)id->valuedouble;
	}
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
	const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
	const cJSON *id = cJSON_IsObject(vocab) ? cJSON_GetObjectItemCaseSensitive(vocab, content) : NULL;
	return cJSON_IsNumber(id) ? (int)id->valuedouble : -1;
}

/* A special token in tokenizer_config.json: a string or {"content": ...}. */
static const char *tc_token(const cJSON *tc, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(tc, key);
	if (cJSON_IsObject(v))
		v = cJSON_GetObjectItemCaseSensitive(v, "content");
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Does tokenizer.json's post-processor prepend a special token? */
static bool post_adds_bos(const cJSON *pp)
{
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(pp, "type");
	if (!cJSON_IsString(type))
		return false;
	if (!strcmp(type->valuestring, "Sequence")) {
		const cJSON *e;
		cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pp, "processors")) if (post_adds_bos(e)) return true;
		return false;
	}
	if (!strcmp(type->valuestring, "TemplateProcessing")) {
		const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single");
		const cJSON *first = cJSON_GetArrayItem(single, 0);
		return cJSON_GetObjectItemCaseSensitive(first, "SpecialToken") != NULL;
	}
	return false;
}

static int hf_tokenizer_fields(const char *dir, struct model_config *c, struct diag *d)
{
	cJSON *tc = NULL, *tj = NULL;
	int rc = read_json(dir, "tokenizer_config.json", 64u << 20, &tc, false, d);
	if (rc)
		return rc;
	const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(tc, "chat_template");
	if (cJSON_IsArray(tpl)) { /* [{"name": "default", "template": ...}, ...] */
		const cJSON *e, *pick = NULL;
		cJSON_ArrayForEach(e, tpl)
		{
			const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
			if (!pick || (cJSON_IsString(n) && !strcmp(n->valuestring, "default")))
				pick = e;
		}
		tpl = cJSON_GetObjectItemCaseSensitive(pick, "template");
	}
	if (cJSON_IsString(tpl) && !c->chat_template && !(c->chat_template = strdup(tpl->valuestring)))
		rc = diag_set(d, ERR_NOMEM, "out of memory");
	const char *bos = tc_token(tc, "bos_token"), *eos = tc_token(tc, "eos_token");
	const cJSON *ab = cJSON_GetObjectItemCaseSensitive(tc, "add_bos_token");
	bool need_tj = (bos && c->bos_id < 0) || (eos && c->eos_id < 0) || !cJSON_IsBool(ab);
	if (!rc && need_tj)
		rc = read_json(dir, "tokenizer.json", 256u << 20, &tj, false, d);
	if (!rc && tj) {
		if (bos && c->bos_id < 0)
			c->bos_id = model_hf_token_id(tj, bos);
		if (eos && c->eos_id < 0)
			add_eos(c, model_hf_token_id(tj, eos));
	}
	if (cJSON_IsBool(ab))
		c->add_bos = cJSON_IsTrue(ab);
	else if (tj)
		c->add_bos = post_adds_bos(cJSON_GetObjectItemCaseSensitive(tj, "post_processor"));
	if (c->bos_id < 0)
		c->add_bos = false;
	cJSON_Delete(tc);
	cJSON_Delete(tj);
	return rc;
}

static int hf_rope_scaling(const cJSON *cfg, struct model_config *c, struct diag *d)
{
	const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
	if (!rs || cJSON_IsNull(rs))
		return 0;
	if (!cJSON_IsObject(rs))
		return diag_set(d, ERR_FORMAT, "config.json: rope_scaling is not an object");
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
	if (!cJSON_IsString(t))
		t = cJSON_GetObjectItemCaseSensitive(rs, "type");
	const char *type = cJSON_IsString(t) ? t->valuestring : "";
	if (!strcmp(type, "linear"))
		c->rope_scaling.type = ROPE_SCALING_LINEAR;
	else if (!strcmp(type, "llama3"))
		c->rope_scaling.type = ROPE_SCALING_LLAMA3;
	else if (!strcmp(type, "default"))
		return 0;
	else
		return diag_set(d, ERR_UNSUPPORTED, "config.json: rope_scaling type '%.40s' is not supported",
				type);
	int rc;
	if ((rc = j_f32(rs, "factor", &c->rope_scaling.factor, d)) ||
	    (rc = j_f32(rs, "low_freq_factor", &c->rope_scaling.low_freq_factor, d)) ||
	    (rc = j_f32(rs, "high_freq_factor", &c->rope_scaling.high_freq_factor, d)) ||
	    (rc = j_int(rs, "original_max_position_embeddings", &c->rope_scaling.original_max_pos,
			false, d)))
		return rc;
	return 0;
}

int model_config_from_hf(const char *dir, struct model_config *c, struct diag *d)
{
	config_defaults(c);
	c->rms_eps = 1e-6f;
	cJSON *cfg;
	int rc = read_json(dir, "config.json", 16u << 20, &cfg, true, d);
	if (rc)
		return rc;
	const cJSON *mt = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
	if (!cJSON_IsString(mt) || arch_parse(mt->valuestring, strlen(mt->valuestring), &c->arch)) {
		rc = diag_set(d, ERR_UNSUPPORTED, "config.json: model_type '%.40s' is not supported (llama, mistral, qwen2, qwen3)",
			      cJSON_IsString(mt) ? mt->valuestring : "(missing)");
		goto out;
	}
	if ((rc = j_int(cfg, "num_hidden_layers", &c->n_layers, true, d)) ||
	    (rc = j_int(cfg, "hidden_size", &c->hidden, true, d)) ||
	    (rc = j_int(cfg, "intermediate_size", &c->ffn, true, d)) ||
	    (rc = j_int(cfg, "num_attention_heads", &c->n_heads, true, d)) ||
	    (rc = j_int(cfg, "vocab_size", &c->vocab, true, d)))
		goto out;
	c->n_kv_heads = c->n_heads;
	c->head_dim = c->n_heads > 0 ? c->hidden / c->n_heads : 0;
	if ((rc = j_int(cfg, "num_key_value_heads", &c->n_kv_heads, false, d)) ||
	    (rc = j_int(cfg, "head_dim", &c->head_dim, false, d)) ||
	    (rc = j_int(cfg, "max_position_embeddings", &c->max_ctx, false, d)) ||
	    (rc = j_f32(cfg, "rope_theta", &c->rope_theta, d)) ||
	    (rc = j_f32(cfg, "rms_norm_eps", &c->rms_eps, d)) || (rc = hf_rope_scaling(cfg, c, d)))
		goto out;
	/* Sliding-window attention (Mistral v0.1; Qwen2 with use_sliding_window)
	 * is not implemented: within the window it equals full attention, so cap
	 * the context at the window and the model computes the same function. */
	int window = 0;
	bool use_window = c->arch == ARCH_MISTRAL;
	j_bool(cfg, "use_sliding_window", &use_window);
	if ((rc = j_int(cfg, "sliding_window", &window, false, d)))
		goto out;
	if (use_window && window > 0 && window < c->max_ctx)
		c->max_ctx = window;
	c->rope_style = ROPE_STYLE_NEOX;
	c->qkv_bias = c->arch == ARCH_QWEN2;
	j_bool(cfg, "attention_bias", &c->qkv_bias);
	c->qk_norm = c->arch == ARCH_QWEN3;
	c->tied_embeddings = false;
	j_bool(cfg, "tie_word_embeddings", &c->tied_embeddings);
	if ((rc = j_int(cfg, "bos_token_id", &c->bos_id, false, d)))
		goto out;
	j_eos(cfg, c);
	cJSON *gen = NULL;
	if ((rc = read_json(dir, "generation_config.json", 1u << 20, &gen, false, d)))
		goto out;
	if (gen) {
		/* generation_config.json is what generate() uses: its EOS list wins. */
		const cJSON *ge = cJSON_GetObjectItemCaseSensitive(gen, "eos_token_id");
		if (ge && !cJSON_IsNull(ge)) {
			c->n_eos_ids = 0;
			c->eos_id = -1;
			j_eos(gen, c);
		}
		j_int(gen, "bos_token_id", &c->bos_id, false, NULL);
		cJSON_Delete(gen);
	}
	if ((rc = hf_tokenizer_fields(dir, c, d)))
		goto out;
	const char *base = strrchr(dir, '/');
	base = base && base[1] ? base + 1 : dir;
	snprintf(c->name, sizeof c->name, "%s", base);
out:
	cJSON_Delete(cfg);
	return rc;
}
