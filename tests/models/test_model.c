/* tests/models/test_model.c — model_load() over generated models: every
 * architecture and dtype in both formats, configs from GGUF keys and
 * config.json, the GGUF-vs-HF equivalence the generator promises (same seed =
 * same weights, Q/K rows permuted for GGUF llama), rope scaling, sharded HF
 * directories, FP8 scales, and load errors that must name what is wrong.
 * The HF tokenizer fixtures are in test_model_fixtures.c (skips when absent).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/model/gguf.h"
#include "engine/model/model.h"
#include "engine/model/model_gen.h"

static char tmp[64];

static void setup(void)
{
	snprintf(tmp, sizeof tmp, "/tmp/aorta_model_XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmp));
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
	ck_assert_int_eq(system(cmd), 0);
}

static struct model *load_ok(const char *path)
{
	struct model *m = NULL;
	struct diag d = { 0 };
	int rc = model_load(path, &m, &d);
	ck_assert_msg(rc == 0, "model_load(%s): %d %s", path, rc, d.msg);
	return m;
}

static void small_opts(struct model_gen_opts *o, enum model_arch arch, enum dtype dt)
{
	model_gen_default_opts(o);
	o->cfg.arch = arch;
	o->cfg.n_layers = 2;
	o->cfg.hidden = 64;
	o->cfg.n_heads = 4;
	o->cfg.n_kv_heads = 2;
	o->cfg.head_dim = 16;
	o->cfg.ffn = 96;
	o->cfg.qkv_bias = arch == ARCH_QWEN2;
	o->cfg.qk_norm = arch == ARCH_QWEN3;
	if (arch == ARCH_QWEN3)
		o->cfg.head_dim = 32; /* head_dim * heads != hidden, as in real Qwen3 */
	o->dtype = dt;
	o->seed = 7;
}

/* Element i of a tensor as float (not Q8_0). */
static float elem(const struct tensor *t, int64_t i)
{
	uint16_t h;
	switch (t->dtype) {
	case DT_F32: {
		float f;
		memcpy(&f, (const char *)t->data + 4 * i, 4);
		return f;
	}
	case DT_F16: memcpy(&h, (const char *)t->data + 2 * i, 2); return f16_to_f32(h);
	case DT_BF16: memcpy(&h, (const char *)t->data + 2 * i, 2); return bf16_to_f32(h);
	case DT_F8_E4M3: {
		int64_t cols = t->n_dims == 2 ? t->shape[1] : 1;
		float s = t->n_scale == 1 ? t->scale[0] : t->scale[i / cols];
		return f8e4m3_to_f32(((const uint8_t *)t->data)[i]) * s;
	}
	default: ck_abort_msg("elem: dtype %s", dtype_name(t->dtype));
	}
	return 0;
}

static void check_layer_shapes(const struct model *m)
{
	const struct model_config *c = &m->cfg;
	for (int il = 0; il < c->n_layers; il++) {
		const struct layer_weights *l = &m->w.layers[il];
		ck_assert_int_eq(l->wq.shape[0], c->n_heads * c->head_dim);
		ck_assert_int_eq(l->wq.shape[1], c->hidden);
		ck_assert_int_eq(l->wk.shape[0], c->n_kv_heads * c->head_dim);
		ck_assert_int_eq(l->wo.shape[0], c->hidden);
		ck_assert_int_eq(l->wo.shape[1], c->n_heads * c->head_dim);
		ck_assert_int_eq(l->w_down.shape[1], c->ffn);
		ck_assert(tensor_present(&l->attn_norm) && tensor_present(&l->ffn_norm));
		ck_assert(tensor_present(&l->w_gate) && tensor_present(&l->w_up));
		ck_assert_int_eq(tensor_present(&l->bq), c->qkv_bias);
		ck_assert_int_eq(tensor_present(&l->bv), c->qkv_bias);
		ck_assert_int_eq(tensor_present(&l->q_norm), c->qk_norm);
		ck_assert_int_eq(tensor_present(&l->k_norm), c->qk_norm);
	}
	ck_assert_int_eq(m->w.tok_embd.shape[0], c->vocab);
	ck_assert(tensor_present(&m->w.lm_head));
	if (c->tied_embeddings)
		ck_assert_ptr_eq(m->w.lm_head.data, m->w.tok_embd.data);
	else
		ck_assert_ptr_ne(m->w.lm_head.data, m->w.tok_embd.data);
}

START_TEST(test_demo_gguf)
{
	struct model_gen_opts o;
	model_gen_default_opts(&o);
	char path[128];
	snprintf(path, sizeof path, "%s/demo.gguf", tmp);
	struct diag d = { 0 };
	ck_assert_int_eq(model_gen_write_gguf(&o, path, &d), 0);
	struct model *m = load_ok(path);
	const struct model_config *c = &m->cfg;
	ck_assert_int_eq(m->format, MODEL_FORMAT_GGUF);
	ck_assert_ptr_nonnull(m->gguf);
	ck_assert_int_eq(c->arch, ARCH_LLAMA);
	ck_assert_int_eq(c->n_layers, 4);
	ck_assert_int_eq(c->hidden, 256);
	ck_assert_int_eq(c->n_heads, 8);
	ck_assert_int_eq(c->n_kv_heads, 4);
	ck_assert_int_eq(c->head_dim, 32);
	ck_assert_int_eq(c->ffn, 768);
	ck_assert_int_eq(c->vocab, MODEL_GEN_N_VOCAB);
	ck_assert_int_eq(c->max_ctx, 2048);
	ck_assert_int_eq(c->rope_style, ROPE_STYLE_NORM);
	ck_assert_int_eq(c->rope_scaling.type, ROPE_SCALING_NONE);
	ck_assert_float_eq(c->rope_theta, 10000.0f);
	ck_assert_float_eq(c->rms_eps, 1e-5f);
	ck_assert_int_eq(c->bos_id, MODEL_GEN_BOS);
	ck_assert_int_eq(c->eos_id, MODEL_GEN_EOS);
	ck_assert_int_eq(c->n_eos_ids, 2);
	ck_assert_int_eq(c->eos_ids[1], MODEL_GEN_IM_END);
	ck_assert(c->add_bos);
	ck_assert(!c->tied_embeddings && !c->qkv_bias && !c->qk_norm);
	ck_assert_ptr_nonnull(c->chat_template);
	ck_assert(strstr(c->chat_template, "<|im_start|>"));
	ck_assert_str_eq(c->name, "aorta-demo");
	ck_assert_int_eq(m->n_tensors, 3 + 9 * 4);
	ck_assert_int_eq(m->w.tok_embd.dtype, DT_F16);
	ck_assert_int_eq(m->w.out_norm.dtype, DT_F32);
	check_layer_shapes(m);
	/* a few MB, as the demo model should be */
	uint64_t bytes = model_weight_bytes(m);
	ck_assert_uint_gt(bytes, 4u << 20);
	ck_assert_uint_lt(bytes, 16u << 20);
	/* the tokenizer keys in llama.cpp's form */
	const char *s;
	size_t len;
	ck_assert_int_eq(gguf_get_str(m->gguf, "tokenizer.ggml.model", &s, &len), 0);
	ck_assert_int_eq(memcmp(s, "gpt2", 4), 0);
	ck_assert_int_eq(gguf_arr_str(m->gguf, "tokenizer.ggml.tokens", ' ', &s, &len), 0);
	ck_assert_int_eq(memcmp(s, "\xc4\xa0", 2), 0); /* the space byte is 'Ġ' */
	ck_assert_int_eq(gguf_arr_str(m->gguf, "tokenizer.ggml.tokens", 'A', &s, &len), 0);
	ck_assert_int_eq(memcmp(s, "A", 1), 0);
	ck_assert_int_eq(gguf_arr_str(m->gguf, "tokenizer.ggml.tokens", MODEL_GEN_BOS, &s, &len), 0);
	ck_assert_int_eq(memcmp(s, "<|begin_of_text|>", len), 0);
	int32_t types[MODEL_GEN_N_VOCAB];
	ck_assert_int_eq(gguf_arr_read_i32(m->gguf, "tokenizer.ggml.token_type", types, MODEL_GEN_N_VOCAB), 0);
	ck_assert_int_eq(types[0], 1);
	ck_assert_int_eq(types[MODEL_GEN_EOS], 3);
	model_destroy(m);

	/* deterministic: the same options give the same bytes */
	char path2[128];
	snprintf(path2, sizeof path2, "%s/demo2.gguf", tmp);
	ck_assert_int_eq(model_gen_write_gguf(&o, path2, &d), 0);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", path, path2);
	ck_assert_int_eq(system(cmd), 0);
	o.seed = 43;
	ck_assert_int_eq(model_gen_write_gguf(&o, path2, &d), 0);
	ck_assert_int_ne(system(cmd), 0);
}
END_TEST

START_TEST(test_all_archs_and_dtypes)
{
	const enum dtype gguf_types[] = { DT_F32, DT_F16, DT_BF16, DT_Q8_0 };
	const enum dtype hf_types[] = { DT_F32, DT_F16, DT_BF16, DT_F8_E4M3 };
	for (int arch = 0; arch < ARCH__COUNT; arch++) {
		for (int k = 0; k < 4; k++) {
			for (int fmt = 0; fmt < 2; fmt++) {
				struct model_gen_opts o;
				enum dtype dt = fmt ? hf_types[k] : gguf_types[k];
				small_opts(&o, (enum model_arch)arch, dt);
				o.cfg.tied_embeddings = k == 1;
				char path[128];
				snprintf(path, sizeof path, "%s/m_%d_%d_%d%s", tmp, arch, k, fmt, fmt ? "" : ".gguf");
				struct diag d = { 0 };
				int rc = fmt ? model_gen_write_hf_dir(&o, path, &d) : model_gen_write_gguf(&o, path, &d);
				ck_assert_msg(rc == 0, "%s: %s", path, d.msg);
				struct model *m = load_ok(path);
				const struct model_config *c = &m->cfg;
				/* GGUF writes mistral as llama, as llama.cpp does */
				ck_assert_int_eq(c->arch, (!fmt && arch == ARCH_MISTRAL) ? ARCH_LLAMA : arch);
				ck_assert_int_eq(c->n_layers, 2);
				ck_assert_int_eq(c->head_dim, arch == ARCH_QWEN3 ? 32 : 16);
				ck_assert_int_eq(c->qkv_bias, arch == ARCH_QWEN2);
				ck_assert_int_eq(c->qk_norm, arch == ARCH_QWEN3);
				ck_assert_int_eq(c->tied_embeddings, k == 1);
				ck_assert_int_eq(c->rope_style, (!fmt && arch <= ARCH_MISTRAL) ? ROPE_STYLE_NORM
												: ROPE_STYLE_NEOX);
				ck_assert_int_eq(c->bos_id, MODEL_GEN_BOS);
				ck_assert_int_eq(c->n_eos_ids, 2);
				ck_assert(c->add_bos);
				ck_assert_ptr_nonnull(c->chat_template);
				check_layer_shapes(m);
				const struct tensor *wq = &m->w.layers[1].wq;
				ck_assert_int_eq(wq->dtype, dt);
				if (dt == DT_F8_E4M3) {
					ck_assert_ptr_nonnull(wq->scale);
					ck_assert_int_eq(wq->n_scale, wq->shape[0]);
					ck_assert_int_eq(m->w.tok_embd.dtype, DT_BF16);
				}
				if (fmt) {
					ck_assert_ptr_nonnull(m->tokenizer_json_path);
					ck_assert_ptr_nonnull(m->tokenizer_config_path);
				}
				model_destroy(m);
			}
		}
	}
}
END_TEST

/* HF row r of a GGUF llama Q/K matrix: inverse of the converter's permute. */
static int64_t gguf_row_of(int64_t hf_row, int64_t D)
{
	int64_t h = hf_row / D, r = hf_row % D, a = r / (D / 2), b = r % (D / 2);
	return h * D + 2 * b + a;
}

START_TEST(test_gguf_hf_same_function)
{
	for (int arch = 0; arch < ARCH__COUNT; arch++) {
		for (int k = 0; k < 2; k++) {
			enum dtype dt = k ? DT_BF16 : DT_F16;
			struct model_gen_opts o;
			small_opts(&o, (enum model_arch)arch, dt);
			char gp[128], hp[128];
			snprintf(gp, sizeof gp, "%s/same_%d_%d.gguf", tmp, arch, k);
			snprintf(hp, sizeof hp, "%s/same_%d_%d", tmp, arch, k);
			o.n_shards = 2;
			struct diag d = { 0 };
			ck_assert_int_eq(model_gen_write_gguf(&o, gp, &d), 0);
			ck_assert_int_eq(model_gen_write_hf_dir(&o, hp, &d), 0);
			struct model *g = load_ok(gp), *h = load_ok(hp);
			ck_assert_int_eq(g->cfg.vocab, h->cfg.vocab);
			ck_assert_int_eq(g->cfg.eos_ids[1], h->cfg.eos_ids[1]);
			bool permuted = arch == ARCH_LLAMA || arch == ARCH_MISTRAL;
			for (int il = 0; il < 2; il++) {
				const struct layer_weights *gl = &g->w.layers[il], *hl = &h->w.layers[il];
				const struct tensor *pairs[][2] = {
					{ &gl->wq, &hl->wq }, { &gl->wk, &hl->wk }, { &gl->wv, &hl->wv },
					{ &gl->wo, &hl->wo }, { &gl->w_down, &hl->w_down },
					{ &gl->attn_norm, &hl->attn_norm }, { &gl->ffn_norm, &hl->ffn_norm },
					{ &gl->bq, &hl->bq }, { &gl->q_norm, &hl->q_norm },
				};
				for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
					const struct tensor *a = pairs[p][0], *b = pairs[p][1];
					ck_assert_int_eq(tensor_present(a), tensor_present(b));
					if (!tensor_present(a))
						continue;
					bool qk = permuted && (p == 0 || p == 1 || p == 7);
					int64_t rows = b->shape[0], cols = b->n_dims == 2 ? b->shape[1] : 1;
					int64_t D = g->cfg.head_dim;
					for (int64_t r = 0; r < rows; r++)
						for (int64_t c = 0; c < cols; c++) {
							int64_t gr = qk ? gguf_row_of(r, D) : r;
							float x = elem(a, gr * cols + c), y = elem(b, r * cols + c);
							ck_assert_msg(x == y, "arch %d %s[%lld,%lld]: gguf %g hf %g", arch,
								      b->name, (long long)r, (long long)c, (double)x, (double)y);
						}
				}
			}
			/* and the permutation is not the identity */
			if (permuted)
				ck_assert(elem(&g->w.layers[0].wq, 1 * 64) != elem(&h->w.layers[0].wq, 1 * 64));
			model_destroy(g);
			model_destroy(h);
		}
	}
}
END_TEST

START_TEST(test_rope_scaling)
{
	for (int fmt = 0; fmt < 2; fmt++) {
		for (int type = ROPE_SCALING_LINEAR; type <= ROPE_SCALING_LLAMA3; type++) {
			struct model_gen_opts o;
			small_opts(&o, ARCH_LLAMA, DT_F32);
			o.cfg.rope_theta = 500000.0f;
			o.cfg.rms_eps = 1e-6f;
			o.cfg.max_ctx = 131072;
			o.cfg.rope_scaling.type = (enum rope_scaling_type)type;
			o.cfg.rope_scaling.factor = 8.0f;
			o.cfg.rope_scaling.low_freq_factor = 1.0f;
			o.cfg.rope_scaling.high_freq_factor = 4.0f;
			o.cfg.rope_scaling.original_max_pos = 8192;
			char path[128];
			snprintf(path, sizeof path, "%s/rope_%d_%d%s", tmp, fmt, type, fmt ? "" : ".gguf");
			struct diag d = { 0 };
			ck_assert_int_eq(fmt ? model_gen_write_hf_dir(&o, path, &d) : model_gen_write_gguf(&o, path, &d), 0);
			struct model *m = load_ok(path);
			ck_assert_int_eq(m->cfg.rope_scaling.type, type);
			ck_assert_float_eq(m->cfg.rope_scaling.factor, 8.0f);
			ck_assert_float_eq(m->cfg.rope_theta, 500000.0f);
			ck_assert_float_eq_tol(m->cfg.rms_eps, 1e-6f, 1e-12f);
			ck_assert_int_eq(m->cfg.max_ctx, 131072);
			if (type == ROPE_SCALING_LLAMA3) {
				ck_assert_float_eq(m->cfg.rope_scaling.low_freq_factor, 1.0f);
				ck_assert_float_eq(m->cfg.rope_scaling.high_freq_factor, 4.0f);
				ck_assert_int_eq(m->cfg.rope_scaling.original_max_pos, 8192);
			}
			model_destroy(m);
		}
	}
}
END_TEST

static void write_text(const char *path, const char *text)
{
	FILE *fp = fopen(path, "w");
	ck_assert_ptr_nonnull(fp);
	fputs(text, fp);
	fclose(fp);
}

static void expect_load_error(const char *path, int want, const char *msg_part)
{
	struct model *m = NULL;
	struct diag d = { 0 };
	int rc = model_load(path, &m, &d);
	ck_assert_msg(rc == want, "%s: rc %d want %d (%s)", path, rc, want, d.msg);
	ck_assert_ptr_null(m);
	ck_assert_msg(strstr(d.msg, msg_part), "message '%s' lacks '%s'", d.msg, msg_part);
}

START_TEST(test_hf_config_errors)
{
	struct model_gen_opts o;
	small_opts(&o, ARCH_LLAMA, DT_F16);
	char dir[128], cfg[160], buf[160];
	snprintf(dir, sizeof dir, "%s/hf", tmp);
	snprintf(cfg, sizeof cfg, "%s/config.json", dir);
	struct diag d = { 0 };
	ck_assert_int_eq(model_gen_write_hf_dir(&o, dir, &d), 0);
	write_text(cfg, "{\"model_type\":\"gpt2\"}");
	expect_load_error(dir, ERR_UNSUPPORTED, "model_type 'gpt2' is not supported");
	write_text(cfg, "{\"model_type\":\"llama\",\"hidden_size\":64}");
	expect_load_error(dir, ERR_FORMAT, "missing num_hidden_layers");
	write_text(cfg, "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":2,"
			"\"intermediate_size\":96,\"num_attention_heads\":4,\"num_key_value_heads\":3,"
			"\"vocab_size\":268}");
	expect_load_error(dir, ERR_FORMAT, "not a multiple");
	/* the config says 3 layers; the checkpoint has 2 */
	write_text(cfg, "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":3,"
			"\"intermediate_size\":96,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
			"\"head_dim\":16,\"vocab_size\":268}");
	expect_load_error(dir, ERR_FORMAT, "missing tensor model.layers.2.input_layernorm.weight");
	/* wrong ffn: a shape mismatch names the tensor */
	write_text(cfg, "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":2,"
			"\"intermediate_size\":100,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
			"\"vocab_size\":268}");
	expect_load_error(dir, ERR_FORMAT, "model.layers.0.mlp.gate_proj.weight: shape (96, 64) but the config needs (100, 64)");
	write_text(cfg, "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":2,"
			"\"intermediate_size\":96,\"num_attention_heads\":4,\"vocab_size\":268,"
			"\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}}");
	expect_load_error(dir, ERR_UNSUPPORTED, "rope_scaling type 'yarn'");
	/* a sliding window caps the context (Mistral v0.1); Qwen2 only with use_sliding_window */
	write_text(cfg, "{\"model_type\":\"mistral\",\"hidden_size\":64,\"num_hidden_layers\":2,"
			"\"intermediate_size\":96,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
			"\"vocab_size\":268,\"max_position_embeddings\":4096,\"sliding_window\":1024}");
	struct model *m = NULL;
	ck_assert_int_eq(model_load(dir, &m, &d), 0);
	ck_assert_int_eq(m->cfg.max_ctx, 1024);
	ck_assert_int_eq(m->cfg.arch, ARCH_MISTRAL);
	model_destroy(m);
	write_text(cfg, "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":2,"
			"\"intermediate_size\":96,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
			"\"vocab_size\":268,\"max_position_embeddings\":4096,\"sliding_window\":1024,"
			"\"use_sliding_window\":false}");
	ck_assert_int_eq(model_load(dir, &m, &d), 0);
	ck_assert_int_eq(m->cfg.max_ctx, 4096);
	model_destroy(m);
	write_text(cfg, "not json");
	expect_load_error(dir, ERR_FORMAT, "not a JSON object");
	snprintf(buf, sizeof buf, "%s/nope", tmp);
	expect_load_error(buf, ERR_NOTFOUND, "nope");
	/* no config.json at all */
	remove(cfg);
	expect_load_error(dir, ERR_NOTFOUND, "config.json");
}
END_TEST

/* Rewrite a GGUF file through the reader and writer, dropping one tensor or
 * overriding one u32 key: builds the broken files the loader must refuse. */
static void rewrite_gguf(const char *src, const char *dst, const char *drop_tensor,
			 const char *key, uint32_t value)
{
	struct gguf_file *f;
	struct diag d = { 0 };
	ck_assert_int_eq(gguf_open(src, &f, &d), 0);
	struct gguf_writer *w;
	ck_assert_int_eq(gguf_writer_create(3, &w), 0);
	for (int64_t i = 0; i < gguf_n_kv(f); i++) {
		const char *k = gguf_kv_key(f, i);
		const char *s;
		size_t len;
		uint32_t u;
		float fl;
		bool b;
		enum gguf_type et;
		uint64_t n;
		if (key && !strcmp(k, key))
			ck_assert_int_eq(gguf_writer_set_u32(w, k, value), 0);
		else if (!gguf_get_str(f, k, &s, &len))
			ck_assert_int_eq(gguf_writer_set_strn(w, k, s, len), 0);
		else if (!gguf_get_bool(f, k, &b))
			ck_assert_int_eq(gguf_writer_set_bool(w, k, b), 0);
		else if (gguf_kv_type(f, i) == GGUF_TYPE_FLOAT32 && !gguf_get_f32(f, k, &fl))
			ck_assert_int_eq(gguf_writer_set_f32(w, k, fl), 0);
		else if (!gguf_get_u32(f, k, &u))
			ck_assert_int_eq(gguf_writer_set_u32(w, k, u), 0);
		else if (!gguf_get_arr(f, k, &et, &n) && et == GGUF_TYPE_STRING) {
			const char **strs = calloc(n, sizeof *strs);
			size_t *lens = calloc(n, sizeof *lens);
			for (uint64_t j = 0; j < n; j++)
				ck_assert_int_eq(gguf_arr_str(f, k, j, &strs[j], &lens[j]), 0);
			ck_assert_int_eq(gguf_writer_set_arr_str(w, k, strs, lens, n), 0);
			free(strs);
			free(lens);
		} else if (!gguf_get_arr(f, k, &et, &n)) {
			int32_t *v = calloc(n, sizeof *v);
			ck_assert_int_eq(gguf_arr_read_i32(f, k, v, n), 0);
			ck_assert_int_eq(gguf_writer_set_arr(w, k, GGUF_TYPE_INT32, v, n), 0);
			free(v);
		} else {
			ck_abort_msg("rewrite_gguf: key %s", k);
		}
	}
	for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
		const struct gguf_tensor_info *t = gguf_tensor(f, i);
		if (drop_tensor && !strcmp(t->name, drop_tensor))
			continue;
		ck_assert_int_eq(gguf_writer_add_tensor(w, t->name, t->dtype, t->n_dims, t->shape, t->data, t->n_bytes), 0);
	}
	ck_assert_int_eq(gguf_writer_write(w, dst, &d), 0);
	gguf_writer_destroy(w);
	gguf_close(f);
}

START_TEST(test_gguf_load_errors)
{
	struct model_gen_opts o;
	small_opts(&o, ARCH_QWEN2, DT_Q8_0);
	char src[128], dst[128];
	snprintf(src, sizeof src, "%s/q.gguf", tmp);
	snprintf(dst, sizeof dst, "%s/bad.gguf", tmp);
	struct diag d = { 0 };
	ck_assert_int_eq(model_gen_write_gguf(&o, src, &d), 0);
	rewrite_gguf(src, dst, NULL, NULL, 0); /* an unmodified copy loads */
	model_destroy(load_ok(dst));
	rewrite_gguf(src, dst, "blk.1.ffn_up.weight", NULL, 0);
	expect_load_error(dst, ERR_FORMAT, "missing tensor blk.1.ffn_up.weight");
	/* one bias dropped: the first layer says biases exist, so layer 1's is required */
	rewrite_gguf(src, dst, "blk.1.attn_v.bias", NULL, 0);
	expect_load_error(dst, ERR_FORMAT, "missing tensor blk.1.attn_v.bias");
	rewrite_gguf(src, dst, NULL, "qwen2.embedding_length", 128);
	expect_load_error(dst, ERR_FORMAT, "shape");
	rewrite_gguf(src, dst, NULL, "qwen2.attention.head_count_kv", 3);
	expect_load_error(dst, ERR_FORMAT, "not a multiple");
	rewrite_gguf(src, dst, NULL, "qwen2.block_count", 0);
	expect_load_error(dst, ERR_FORMAT, "n_layers");
	rewrite_gguf(src, dst, NULL, "tokenizer.ggml.eos_token_id", 100000);
	expect_load_error(dst, ERR_FORMAT, "eos id 100000");
	rewrite_gguf(src, dst, NULL, "general.architecture", 7); /* a u32 where a string belongs */
	expect_load_error(dst, ERR_FORMAT, "general.architecture");
	/* a file that is not GGUF at all */
	write_text(dst, "definitely not a model file, but long enough");
	expect_load_error(dst, ERR_FORMAT, "bad magic");
	/* Q8_0 needs whole blocks */
	o.cfg.hidden = 48;
	o.cfg.head_dim = 12;
	ck_assert_int_eq(model_gen_write_gguf(&o, dst, &d), ERR_INVAL);
	ck_assert(strstr(d.msg, "divisible by 32"));
	/* HF output refuses Q8_0, GGUF refuses FP8 */
	small_opts(&o, ARCH_LLAMA, DT_Q8_0);
	snprintf(dst, sizeof dst, "%s/hfq", tmp);
	ck_assert_int_eq(model_gen_write_hf_dir(&o, dst, &d), ERR_UNSUPPORTED);
	o.dtype = DT_F8_E4M3;
	snprintf(dst, sizeof dst, "%s/x.gguf", tmp);
	ck_assert_int_eq(model_gen_write_gguf(&o, dst, &d), ERR_UNSUPPORTED);
}
END_TEST

START_TEST(test_vocab_padding_and_hf_sharded)
{
	struct model_gen_opts o;
	small_opts(&o, ARCH_QWEN3, DT_BF16);
	o.cfg.vocab = 300;
	o.n_shards = 3;
	o.cfg.n_layers = 3;
	char dir[128], gp[128];
	snprintf(dir, sizeof dir, "%s/sharded", tmp);
	snprintf(gp, sizeof gp, "%s/pad.gguf", tmp);
	struct diag d = { 0 };
	ck_assert_int_eq(model_gen_write_hf_dir(&o, dir, &d), 0);
	ck_assert_int_eq(model_gen_write_gguf(&o, gp, &d), 0);
	char p[200];
	snprintf(p, sizeof p, "%s/model-00003-of-00003.safetensors", dir);
	ck_assert_int_eq(access(p, R_OK), 0);
	snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
	ck_assert_int_eq(access(p, R_OK), 0);
	struct model *m = load_ok(dir), *g = load_ok(gp);
	ck_assert_int_eq(m->cfg.vocab, 300);
	ck_assert_int_eq(g->cfg.vocab, 300);
	ck_assert_int_eq(m->cfg.n_layers, 3);
	check_layer_shapes(m);
	ck_assert_uint_gt(model_weight_bytes(m), 0);
	const char *s;
	size_t len;
	ck_assert_int_eq(gguf_arr_str(g->gguf, "tokenizer.ggml.tokens", 299, &s, &len), 0);
	ck_assert(len > 10 && !memcmp(s, "<|reserved_", 11));
	model_destroy(m);
	model_destroy(g);
}
END_TEST

/* The FP8 KV cache's scales of an llm-compressor checkpoint: per tensor,
 * per KV head (each kept, and their largest), none, and bad values refused. */
START_TEST(test_hf_kv_scales)
{
	struct model_gen_opts o;
	small_opts(&o, ARCH_LLAMA, DT_BF16);
	o.cfg.n_layers = 3;
	char dir[128];
	struct diag d = { 0 };
	for (int per_head = 0; per_head < 2; per_head++) {
		snprintf(dir, sizeof dir, "%s/kvs%d", tmp, per_head);
		o.kv_scale = 0.0625f;
		o.kv_scale_per_head = per_head;
		ck_assert_int_eq(model_gen_write_hf_dir(&o, dir, &d), 0);
		struct model *m = load_ok(dir);
		for (int l = 0; l < 3; l++) {
			ck_assert_float_eq(m->w.layers[l].k_scale, 0.0625f * (float)(l + 1));
			ck_assert_float_eq(m->w.layers[l].v_scale, 0.125f * (float)(l + 1));
			const float *kh = m->w.layers[l].k_head_scale, *vh = m->w.layers[l].v_head_scale;
			ck_assert(!kh == !per_head && !vh == !per_head);
			for (int h = 0; per_head && h < o.cfg.n_kv_heads; h++) {
				const float f = (float)(h + 1) / (float)o.cfg.n_kv_heads;
				ck_assert_float_eq(kh[h], 0.0625f * (float)(l + 1) * f);
				ck_assert_float_eq(vh[h], 0.125f * (float)(l + 1) * f);
			}
		}
		model_destroy(m);
	}
	o.kv_scale_per_head = false;
	o.kv_scale_legacy = true; /* one self_attn.kv_scale for both */
	snprintf(dir, sizeof dir, "%s/kvs_legacy", tmp);
	ck_assert_int_eq(model_gen_write_hf_dir(&o, dir, &d), 0);
	struct model *lm = load_ok(dir);
	ck_assert_float_eq(lm->w.layers[1].k_scale, 0.125f);
	ck_assert_float_eq(lm->w.layers[1].v_scale, 0.125f);
	ck_assert(!lm->w.layers[1].k_head_scale);
	model_destroy(lm);
	o.kv_scale_legacy = false;
	o.kv_scale = 0.0f;
	snprintf(dir, sizeof dir, "%s/kvs_none", tmp);
	ck_assert_int_eq(model_gen_write_hf_dir(&o, dir, &d), 0);
	struct model *m = load_ok(dir);
	ck_assert_float_eq(m->w.layers[0].k_scale, 0.0f);
	ck_assert_float_eq(m->w.layers[2].v_scale, 0.0f);
	model_destroy(m);
	const float bad[] = { -0.5f, NAN, INFINITY };
	for (int i = 0; i < 3; i++) {
		snprintf(dir, sizeof dir, "%s/kvs_bad%d", tmp, i);
		o.kv_scale = bad[i];
		o.kv_scale_per_head = i == 2;
		ck_assert_int_eq(model_gen_write_hf_dir(&o, dir, &d), 0);
		expect_load_error(dir, ERR_FORMAT, "model.layers.0.self_attn.k_scale: scale");
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("model");
	TCase *tc = tcase_create("model");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_demo_gguf);
	tcase_add_test(tc, test_all_archs_and_dtypes);
	tcase_add_test(tc, test_gguf_hf_same_function);
	tcase_add_test(tc, test_rope_scaling);
	tcase_add_test(tc, test_hf_config_errors);
	tcase_add_test(tc, test_gguf_load_errors);
	tcase_add_test(tc, test_vocab_padding_and_hf_sharded);
	tcase_add_test(tc, test_hf_kv_scales);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
