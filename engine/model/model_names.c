/* engine/model/model_names.c — the tensor-name tables: which tensor in a GGUF file
 * or an HF checkpoint fills which field of struct model_weights, when it is
 * present, and its expected shape. One table serves all supported
 * architectures (differences are the conditions); the loader (model.c) and the
 * generator (model_gen.c) both read it, so files we write are files we read.
 * Tests: tests/models/test_model.c.
 */
#include <stddef.h>
#include <stdio.h>

#include "engine/model/model_internal.h"

#define L(f) offsetof(struct layer_weights, f)
#define G(f) offsetof(struct model_weights, f)

const struct model_tensor_name model_layer_names[] = {
	{ L(attn_norm), "blk.%d.attn_norm.weight", "model.layers.%d.input_layernorm.weight",
	  MC_ALWAYS, 1, { MD_HIDDEN }, false, false },
	{ L(wq), "blk.%d.attn_q.weight", "model.layers.%d.self_attn.q_proj.weight", MC_ALWAYS, 2,
	  { MD_Q, MD_HIDDEN }, true, true },
	{ L(wk), "blk.%d.attn_k.weight", "model.layers.%d.self_attn.k_proj.weight", MC_ALWAYS, 2,
	  { MD_KV, MD_HIDDEN }, true, true },
	{ L(wv), "blk.%d.attn_v.weight", "model.layers.%d.self_attn.v_proj.weight", MC_ALWAYS, 2,
	  { MD_KV, MD_HIDDEN }, false, true },
	{ L(bq), "blk.%d.attn_q.bias", "model.layers.%d.self_attn.q_proj.bias", MC_QKV_BIAS, 1,
	  { MD_Q }, true, false },
	{ L(bk), "blk.%d.attn_k.bias", "model.layers.%d.self_attn.k_proj.bias", MC_QKV_BIAS, 1,
	  { MD_KV }, true, false },
	{ L(bv), "blk.%d.attn_v.bias", "model.layers.%d.self_attn.v_proj.bias", MC_QKV_BIAS, 1,
	  { MD_KV }, false, false },
	{ L(q_norm), "blk.%d.attn_q_norm.weight", "model.layers.%d.self_attn.q_norm.weight",
	  MC_QK_NORM, 1, { MD_HEAD }, false, false },
	{ L(k_norm), "blk.%d.attn_k_norm.weight", "model.layers.%d.self_attn.k_norm.weight",
	  MC_QK_NORM, 1, { MD_HEAD }, false, false },
	{ L(wo), "blk.%d.attn_output.weight", "model.layers.%d.self_attn.o_proj.weight", MC_ALWAYS,
	  2, { MD_HIDDEN, MD_Q }, false, true },
	{ L(ffn_norm), "blk.%d.ffn_norm.weight", "model.layers.%d.post_attention_layernorm.weight",
	  MC_ALWAYS, 1, { MD_HIDDEN }, false, false },
	{ L(w_gate), "blk.%d.ffn_gate.weight", "model.layers.%d.mlp.gate_proj.weight", MC_ALWAYS, 2,
	  { MD_FFN, MD_HIDDEN }, false, true },
	{ L(w_up), "blk.%d.ffn_up.weight", "model.layers.%d.mlp.up_proj.weight", MC_ALWAYS, 2,
	  { MD_FFN, MD_HIDDEN }, false, true },
	{ L(w_down), "blk.%d.ffn_down.weight", "model.layers.%d.mlp.down_proj.weight", MC_ALWAYS, 2,
	  { MD_HIDDEN, MD_FFN }, false, true },
};
const int model_n_layer_names = (int)(sizeof model_layer_names / sizeof model_layer_names[0]);

/* Embeddings and the LM head are not "matrices" for FP8: real FP8
 * checkpoints keep them in BF16 (is_matrix only steers the generator's FP8
 * output; GGUF Q8_0 files quantize every 2-D tensor, as llama.cpp does). */
const struct model_tensor_name model_global_names[] = {
	{ G(tok_embd), "token_embd.weight", "model.embed_tokens.weight", MC_ALWAYS, 2,
	  { MD_VOCAB, MD_HIDDEN }, false, false },
	{ G(out_norm), "output_norm.weight", "model.norm.weight", MC_ALWAYS, 1, { MD_HIDDEN }, false,
	  false },
	{ G(lm_head), "output.weight", "lm_head.weight", MC_UNTIED, 2, { MD_VOCAB, MD_HIDDEN },
	  false, false },
};
const int model_n_global_names = (int)(sizeof model_global_names / sizeof model_global_names[0]);

bool model_tensor_wanted(const struct model_config *c, enum mcond cond)
{
	switch (cond) {
	case MC_ALWAYS: return true;
	case MC_QKV_BIAS: return c->qkv_bias;
	case MC_QK_NORM: return c->qk_norm;
	case MC_UNTIED: return !c->tied_embeddings;
	}
	return false;
}

int64_t model_dim(const struct model_config *c, enum mdim d)
{
	switch (d) {
	case MD_HIDDEN: return c->hidden;
	case MD_Q: return (int64_t)c->n_heads * c->head_dim;
	case MD_KV: return (int64_t)c->n_kv_heads * c->head_dim;
	case MD_FFN: return c->ffn;
	case MD_VOCAB: return c->vocab;
	case MD_HEAD: return c->head_dim;
	case MD_NONE: break;
	}
	return 0;
}

void model_tensor_name(const struct model_tensor_name *n, enum model_format fmt, int il, char *out,
		       size_t cap)
{
	snprintf(out, cap, fmt == MODEL_FORMAT_GGUF ? n->gguf : n->hf, il);
}
