/* server/load.c — what `aorta serve` serves, built in order: the
 * --chat-template file (read and checked at start-up), then, on a libuv
 * worker, model -> tokenizer -> engine (with the KV pool sized from the
 * flags), then, back on the loop thread, chat template -> batcher. Owns the
 * flag-to-engine decisions (dtypes, KV blocks); server/srv.c owns when each
 * step runs and what a failure does. Tested end to end in tests/e2e/.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batching/engine_thread.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/mapfile.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/tok/tokenizer.h"
#include "srv.h"

/* --kv-cache-dtype: auto is F32 on the CPU and the compute dtype on CUDA. */
static enum dtype kv_dtype_for(const char *name, bool cuda, enum dtype compute)
{
	if (!strcmp(name, "f16"))
		return DT_F16;
	if (!strcmp(name, "bf16"))
		return DT_BF16;
	if (!strcmp(name, "f32"))
		return DT_F32;
	return cuda ? compute : DT_F32; /* auto (fp8 is refused or warned about before) */
}

/* --dtype for CUDA: half/float16 F16, bfloat16 BF16, auto as vLLM (BF16
 * models stay BF16, everything else runs in F16). */
static enum dtype compute_dtype_for(const char *name, const struct model *m)
{
	if (!strcmp(name, "bfloat16"))
		return DT_BF16;
	if (!strcmp(name, "half") || !strcmp(name, "float16"))
		return DT_F16;
	return m->cfg.n_layers > 0 && m->w.layers[0].wq.dtype == DT_BF16 ? DT_BF16 : DT_F16;
}

void load_engine(struct srv *s)
{
	struct diag d = { 0 };
	int rc;
	double t0 = clock_now_s();
	if ((rc = model_load(s->cfg.model, &s->model, &d))) {
		snprintf(s->load_error, sizeof s->load_error, "cannot load model %s: %s",
			 s->cfg.model, d.msg[0] ? d.msg : err_str(rc));
		return;
	}
	if ((rc = tok_load_for_model(s->model, &s->tok, &d))) {
		snprintf(s->load_error, sizeof s->load_error, "cannot load the tokenizer: %s",
			 d.msg[0] ? d.msg : err_str(rc));
		return;
	}
	const struct model_config *c = &s->model->cfg;
	s->max_model_len = s->cfg.max_model_len > 0 ? s->cfg.max_model_len : c->max_ctx;
	if (s->max_model_len <= 0)
		s->max_model_len = 2048;
	if (c->max_ctx > 0 && s->max_model_len > c->max_ctx)
		log_warn("serve", "--max-model-len %d is over the model's context %d", s->max_model_len,
			 c->max_ctx);
	const bool cuda = !strcmp(s->cfg.device, "cuda") ||
			  (!strcmp(s->cfg.device, "auto") && engine_cuda_available());
	const enum dtype gdt = compute_dtype_for(s->cfg.dtype, s->model);
	enum dtype kvt = kv_dtype_for(s->cfg.kv_cache_dtype, cuda, gdt);
	if (!strcmp(s->cfg.kv_cache_dtype, "fp8")) {
		if (cuda)
			kvt = DT_F8_E4M3; /* E4M3, scale 1 (vLLM's default without calibration) */
		else
			log_warn("serve", "--kv-cache-dtype fp8 is a CUDA option; the CPU KV cache "
					  "uses f32");
	}
	int n_blocks = s->cfg.num_kv_blocks;
	if (n_blocks <= 0 && !cuda) {
		size_t per = engine_kv_block_bytes(c, s->cfg.block_size, kvt);
		uint64_t nb = per ? s->cfg.kv_cache_memory / per : 0;
		n_blocks = nb > 1000000 ? 1000000 : (int)nb;
	}
	int blocks_per_seq = (s->max_model_len + s->cfg.block_size - 1) / s->cfg.block_size;
	if (!cuda && n_blocks < blocks_per_seq) {
		snprintf(s->load_error, sizeof s->load_error,
			 "the KV cache (%d blocks of %d tokens) cannot hold one sequence of "
			 "--max-model-len %d; raise --kv-cache-memory or lower --max-model-len",
			 n_blocks, s->cfg.block_size, s->max_model_len);
		return;
	}
	struct engine_opts eo = {
		.n_threads = s->cfg.threads,
		.block_size = s->cfg.block_size,
		.n_kv_blocks = n_blocks, /* 0 on CUDA: what --gpu-memory-utilization leaves */
		.kv_dtype = kvt,
		.quantization = !strcmp(s->cfg.quantization, "int8")  ? DT_I8
				: !strcmp(s->cfg.quantization, "fp8") ? DT_F8_E4M3
								      : DT_F32,
		.max_batch_tokens = s->cfg.max_num_batched_tokens,
		.max_seqs = s->cfg.max_num_seqs,
		.max_blocks_per_seq = blocks_per_seq,
		.device = cuda ? ENGINE_DEVICE_CUDA : ENGINE_DEVICE_CPU,
		.gpu_dtype = gdt,
		.gpu_memory_utilization = s->cfg.gpu_memory_utilization,
		.enforce_eager = s->cfg.enforce_eager,
	};
	if ((rc = engine_create(s->model, &eo, &s->engine, &d))) {
		snprintf(s->load_error, sizeof s->load_error, "cannot start the engine: %s",
			 d.msg[0] ? d.msg : err_str(rc));
		return;
	}
	n_blocks = engine_n_kv_blocks(s->engine);
	s->n_kv_blocks = n_blocks;
	log_info("serve", "model %s loaded in %.1f s on the %s engine: %s, %d layers, hidden %d, "
			  "vocab %d; KV cache %d blocks x %d tokens (%s); max model len %d",
		 s->cfg.model, clock_now_s() - t0, engine_backend_name(s->engine),
		 model_arch_name(c->arch), c->n_layers, c->hidden, c->vocab, n_blocks,
		 s->cfg.block_size, dtype_name(kvt), s->max_model_len);
}

int load_template_file(struct srv *s)
{
	const struct srv_config *cfg = &s->cfg;
	if (!cfg->chat_template)
		return 0;
	struct diag d = { 0 };
	if (mapfile_read(cfg->chat_template, 16u << 20, &s->template_text, NULL, &d)) {
		fprintf(stderr, "aorta serve: cannot read --chat-template: %s\n", d.msg);
		return -1;
	}
	/* asked for by name: serve it or say why not, never a silent
	 * stand-in (the family comes from the text alone) */
	struct api_chat_template t;
	const bool empty = !s->template_text[strspn(s->template_text, " \t\r\n")];
	if (empty || api_chat_template_init(&t, s->template_text, NULL, NULL, NULL) ||
	    t.is_fallback) {
		fprintf(stderr,
			"aorta serve: --chat-template %s: %s; aorta renders the llama3, "
			"llama2, mistral, gemma, gemma2, qwen3 and chatml families (it "
			"has no Jinja interpreter)\n",
			cfg->chat_template,
			empty ? "empty"
			      : "not a template of a family aorta renders");
		return -1;
	}
	return 0;
}

/* The chat template for the loaded model (--chat-template's text, else the
 * model's own), with the tokenizer's BOS/EOS texts. */
static void load_template(struct srv *s)
{
	const struct model_config *c = &s->model->cfg;
	const char *tmpl_text = s->template_text ? s->template_text : c->chat_template;
	size_t bl = 0, el = 0;
	const char *bos = tok_bos(s->tok) >= 0 ? tok_token_text(s->tok, tok_bos(s->tok), &bl) : NULL;
	const char *eos = tok_eos(s->tok) >= 0 ? tok_token_text(s->tok, tok_eos(s->tok), &el) : NULL;
	char bos_s[64] = "", eos_s[64] = "";
	if (bos && bl < sizeof bos_s)
		memcpy(bos_s, bos, bl);
	if (eos && el < sizeof eos_s)
		memcpy(eos_s, eos, el);
	if (api_chat_template_init(&s->tmpl, tmpl_text, model_arch_name(c->arch),
				   bos_s[0] ? bos_s : NULL, eos_s[0] ? eos_s : NULL)) {
		api_chat_template_init(&s->tmpl, tmpl_text, model_arch_name(c->arch), NULL, NULL);
	}
	if (s->tmpl.is_fallback)
		log_warn("serve", "chat template not recognised; using ChatML");
	else
		log_info("serve", "chat template: %s", api_chat_family_name(s->tmpl.family));
	s->limits.n_vocab = c->vocab;
}

int load_finish(struct srv *s)
{
	load_template(s);
	const struct model_config *c = &s->model->cfg;
	struct bat_model bm;
	bat_model_engine(&bm, s->engine, engine_vocab(s->engine));
	int32_t eos_ids[MODEL_MAX_EOS];
	int n_eos = 0;
	for (int i = 0; i < c->n_eos_ids && i < MODEL_MAX_EOS; i++)
		eos_ids[n_eos++] = c->eos_ids[i];
	if (n_eos == 0 && tok_eos(s->tok) >= 0)
		eos_ids[n_eos++] = tok_eos(s->tok);
	struct bat_opts bo = {
		.block_size = s->cfg.block_size,
		.n_kv_blocks = s->n_kv_blocks,
		.prefix_caching = s->cfg.enable_prefix_caching,
		.max_num_seqs = s->cfg.max_num_seqs,
		.max_num_batched_tokens = s->cfg.max_num_batched_tokens,
		.max_model_len = s->max_model_len,
		.max_queued_requests = s->cfg.max_queued_requests,
		.server_seed = (uint64_t)s->cfg.seed,
		.eos_ids = eos_ids,
		.n_eos = n_eos,
		.tok = s->tok,
	};
	session_wake_opts(s, &bo); /* the engine thread wakes the loop where events are drained */
	struct diag d = { 0 };
	int rc = bat_create(&bo, &bm, &s->bat, &d);
	if (rc)
		log_error("serve", "cannot start the batcher: %s", d.msg[0] ? d.msg : err_str(rc));
	return rc;
}
