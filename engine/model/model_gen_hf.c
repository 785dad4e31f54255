/* engine/model/model_gen_hf.c — the test-model generator's Hugging Face
 * directory writer: config.json, tokenizer.json / tokenizer_config.json (the
 * built-in vocabulary, or a given tokenizer directory copied), and the
 * safetensors shards, from the same tensor streams as the GGUF writer
 * (model_gen.c), so the two forms hold the same model function.
 * Tests: tests/models/test_model.c (generate -> load, GGUF vs HF equality).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/mapfile.h"
#include "engine/model/model_gen_internal.h"
#include "engine/model/safetensors.h"

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
static int write_builtin_tokenizer(const char *dir, const struct gen__vocab *v, struct diag *d)
{
	cJSON *j = cJSON_CreateObject();
	cJSON_AddStringToObject(j, "version", "1.0");
	cJSON_AddNullToObject(j, "truncation");
	cJSON_AddNullToObject(j, "padding");
	cJSON *added = cJSON_AddArrayToObject(j, "added_tokens");
	for (int i = 256 + GEN__N_MERGES; i < v->n; i++) {
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
	cJSON_AddStringToObject(stv, "id", gen__specials[0]);
	cJSON_AddNumberToObject(stv, "type_id", 0);
	cJSON *sqv = cJSON_AddObjectToObject(sq, "Sequence");
	cJSON_AddStringToObject(sqv, "id", "A");
	cJSON_AddNumberToObject(sqv, "type_id", 0);
	cJSON_AddItemToArray(single, st);
	cJSON_AddItemToArray(single, sq);
	cJSON_AddItemToObject(post, "pair", cJSON_Duplicate(single, 1));
	cJSON *sp = cJSON_AddObjectToObject(post, "special_tokens");
	cJSON *bos = cJSON_AddObjectToObject(sp, gen__specials[0]);
	cJSON_AddStringToObject(bos, "id", gen__specials[0]);
	cJSON_AddItemToObject(bos, "ids", cJSON_CreateArray());
	cJSON_AddItemToArray(cJSON_GetObjectItem(bos, "ids"), cJSON_CreateNumber(MODEL_GEN_BOS));
	cJSON_AddItemToObject(bos, "tokens", cJSON_CreateArray());
	cJSON_AddItemToArray(cJSON_GetObjectItem(bos, "tokens"), cJSON_CreateString(gen__specials[0]));
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
	for (int i = 0; i < 256 + GEN__N_MERGES; i++)
		cJSON_AddNumberToObject(vocab, v->tok[i], i);
	cJSON *merges = cJSON_AddArrayToObject(model, "merges");
	for (int i = 0; i < GEN__N_MERGES; i++) {
		char m[32];
		snprintf(m, sizeof m, "%s %s", gen__merges[i][0], gen__merges[i][1]);
		cJSON_AddItemToArray(merges, cJSON_CreateString(m));
	}
	int rc = write_json(dir, "tokenizer.json", j, d);
	if (rc)
		return rc;
	cJSON *tc = cJSON_CreateObject();
	cJSON_AddBoolToObject(tc, "add_bos_token", true);
	cJSON_AddBoolToObject(tc, "add_eos_token", false);
	cJSON_AddStringToObject(tc, "bos_token", gen__specials[0]);
	cJSON_AddStringToObject(tc, "eos_token", gen__specials[1]);
	cJSON_AddBoolToObject(tc, "clean_up_tokenization_spaces", false);
	cJSON_AddNumberToObject(tc, "model_max_length", 1000000);
	cJSON_AddStringToObject(tc, "tokenizer_class", "PreTrainedTokenizerFast");
	cJSON_AddStringToObject(tc, "chat_template", gen__chat_template);
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

static int hf_add(struct st_writer *w, struct gen__keep *k, const struct model_config *c,
		  const struct model_gen_opts *o, const struct model_tensor_name *e, int il)
{
	char hf[160];
	model_tensor_name(e, MODEL_FORMAT_HF, il, hf, sizeof hf);
	bool fp8 = o->dtype == DT_F8_E4M3;
	enum dtype store = fp8 ? DT_BF16 : o->dtype;
	uint64_t n, nb;
	float *v = gen__values(c, e, hf, o->seed, store, &n);
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
		if ((rc = gen__keep_add(k, q)) || (rc = gen__keep_add(k, scale)))
			return rc;
		if ((rc = st_writer_add(w, hf, DT_F8_E4M3, 2, shape, q, n)))
			return rc;
		char sname[200];
		snprintf(sname, sizeof sname, "%s_scale", hf);
		int64_t sshape[2] = { rows, 1 };
		return st_writer_add(w, sname, DT_F32, 2, sshape, scale, (uint64_t)rows * 4);
	}
	void *data = gen__encode(v, n, store, &nb);
	free(v);
	if ((rc = gen__keep_add(k, data)))
		return rc;
	return st_writer_add(w, hf, store, e->n_dims, shape, data, nb);
}

/* Layer il's self_attn.k_scale and v_scale (o->kv_scale). */
static int hf_add_kv_scales(struct st_writer *w, struct gen__keep *k, const struct model_config *c,
			    const struct model_gen_opts *o, int il)
{
	const int n = o->kv_scale_per_head ? c->n_kv_heads : 1;
	if (o->kv_scale_legacy) { /* AutoFP8's older single scale */
		float *v = malloc(sizeof *v);
		int rc = gen__keep_add(k, v);
		if (rc)
			return rc;
		*v = o->kv_scale * (float)(il + 1);
		char name[160];
		snprintf(name, sizeof name, "model.layers.%d.self_attn.kv_scale", il);
		return st_writer_add(w, name, DT_F32, 0, NULL, v, 4);
	}
	for (int kv = 0; kv < 2; kv++) {
		float *v = malloc((size_t)n * sizeof *v);
		int rc = gen__keep_add(k, v);
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
	if ((rc = gen__resolve_config(o, tok_vocab, &c, d)))
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
	struct gen__keep k = { 0 };
	struct gen__vocab v = { 0 };
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
	gen__keep_free(&k);
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
		rc = gen__vocab_build(&v, c.vocab);
		if (!rc)
			rc = write_builtin_tokenizer(dir, &v, d);
		else
			rc = diag_set(d, rc, "out of memory");
	}
	gen__vocab_free(&v);
	return rc;
}
