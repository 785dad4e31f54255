/* server/cmd_inspect.c — `aorta inspect MODEL`: load a GGUF file or an HF
 * directory through model_load() (so every check the server would make is
 * made) and print the config, the tensor table (name, dtype, shape, bytes)
 * and totals; --keys also lists a GGUF file's metadata.
 * Tested end to end in tests/models/test_cli_models.sh.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "engine/model/gguf.h"
#include "engine/model/model.h"

static void print_config(const struct model *m)
{
	const struct model_config *c = &m->cfg;
	static const char *const scaling[] = { "none", "linear", "llama3" };
	printf("model:        %s\n", c->name);
	printf("format:       %s\n", m->format == MODEL_FORMAT_GGUF ? "gguf" : "hf");
	printf("architecture: %s\n", model_arch_name(c->arch));
	printf("layers:       %d\n", c->n_layers);
	printf("hidden:       %d\n", c->hidden);
	printf("heads:        %d (kv %d, head_dim %d)\n", c->n_heads, c->n_kv_heads, c->head_dim);
	printf("ffn:          %d\n", c->ffn);
	printf("vocab:        %d\n", c->vocab);
	printf("max context:  %d\n", c->max_ctx);
	printf("rope:         theta %g, style %s, scaling %s", (double)c->rope_theta,
	       c->rope_style == ROPE_STYLE_NORM ? "norm" : "neox",
	       scaling[c->rope_scaling.type <= ROPE_SCALING_LLAMA3 ? c->rope_scaling.type : 0]);
	if (c->rope_scaling.type == ROPE_SCALING_LINEAR)
		printf(" (factor %g)", (double)c->rope_scaling.factor);
	if (c->rope_scaling.type == ROPE_SCALING_LLAMA3)
		printf(" (factor %g, low %g, high %g, original %d)", (double)c->rope_scaling.factor,
		       (double)c->rope_scaling.low_freq_factor, (double)c->rope_scaling.high_freq_factor,
		       c->rope_scaling.original_max_pos);
	printf("%s\n", tensor_present(&m->w.rope_freqs) ? " + rope_freqs tensor" : "");
	printf("rms eps:      %g\n", (double)c->rms_eps);
	printf("tied embd:    %s\n", c->tied_embeddings ? "yes" : "no");
	printf("qkv bias:     %s\n", c->qkv_bias ? "yes" : "no");
	printf("q/k norm:     %s\n", c->qk_norm ? "yes" : "no");
	printf("bos:          %d (add_bos %s)\n", c->bos_id, c->add_bos ? "yes" : "no");
	printf("eos:          ");
	for (int i = 0; i < c->n_eos_ids; i++)
		printf("%s%d", i ? ", " : "", c->eos_ids[i]);
	printf("%s\n", c->n_eos_ids ? "" : "none");
	printf("chat template: %s\n", c->chat_template ? "yes" : "no");
	if (m->tokenizer_json_path)
		printf("tokenizer:    %s\n", m->tokenizer_json_path);
}

static void print_keys(const struct gguf_file *g)
{
	printf("\nGGUF v%u, alignment %zu, %" PRId64 " keys:\n", gguf_version(g), gguf_alignment(g),
	       gguf_n_kv(g));
	for (int64_t i = 0; i < gguf_n_kv(g); i++) {
		const char *k = gguf_kv_key(g, i);
		enum gguf_type t = gguf_kv_type(g, i);
		printf("  %-48s %-7s ", k, gguf_type_name(t));
		const char *s;
		size_t len;
		uint64_t u;
		float f;
		bool b;
		enum gguf_type et;
		uint64_t n;
		if (!gguf_get_str(g, k, &s, &len))
			printf("\"%.*s\"%s", (int)(len > 60 ? 60 : len), s, len > 60 ? "..." : "");
		else if (!gguf_get_arr(g, k, &et, &n))
			printf("[%s x %" PRIu64 "]", gguf_type_name(et), n);
		else if (!gguf_get_bool(g, k, &b))
			printf("%s", b ? "true" : "false");
		else if (!gguf_get_f32(g, k, &f))
			printf("%g", (double)f);
		else if (!gguf_get_u64(g, k, &u))
			printf("%" PRIu64, u);
		else {
			int32_t v;
			if (!gguf_get_i32(g, k, &v))
				printf("%d", v);
		}
		printf("\n");
	}
}

int cmd_inspect(int argc, char **argv)
{
	bool keys = false;
	const struct cli_opt opts[] = {
		{ "keys", CLI_BOOL, &keys, NULL, "also list a GGUF file's metadata keys" },
	};
	const struct cli_cmd cmd = {
		.name = "inspect",
		.summary = "Print a model's config, tensor table and totals.",
		.usage = "aorta inspect MODEL   (a .gguf file or a Hugging Face model directory)",
		.opts = opts,
		.n_opts = 1,
		.min_positional = 1,
		.max_positional = 1,
	};
	const char *pos[1];
	int n_pos;
	int rc = cli_parse(&cmd, argc, argv, pos, &n_pos, stdout, stderr);
	if (rc == CLI_HELP)
		return 0;
	if (rc)
		return 2;
	struct model *m;
	struct diag d = { 0 };
	if ((rc = model_load(pos[0], &m, &d))) {
		fprintf(stderr, "aorta inspect: %s\n", d.msg[0] ? d.msg : err_str(rc));
		return 1;
	}
	print_config(m);
	printf("\n%-48s %-8s %-22s %12s\n", "tensor", "dtype", "shape", "bytes");
	uint64_t n_params = 0;
	for (int i = 0; i < m->n_tensors; i++) {
		const struct tensor *t = &m->tensors[i];
		char shape[64] = "(";
		uint64_t elems = 1;
		for (int k = 0; k < t->n_dims; k++) {
			char dim[24];
			snprintf(dim, sizeof dim, "%s%" PRId64, k ? ", " : "", t->shape[k]);
			strncat(shape, dim, sizeof shape - strlen(shape) - 2);
			elems *= (uint64_t)t->shape[k];
		}
		strcat(shape, ")");
		n_params += elems;
		printf("%-48s %-8s %-22s %12" PRIu64 "\n", t->name, dtype_name(t->dtype), shape, t->n_bytes);
	}
	uint64_t bytes = model_weight_bytes(m);
	printf("\n%d tensors, %" PRIu64 " parameters (%.2f M), %" PRIu64 " bytes (%.2f MiB)\n",
	       m->n_tensors, n_params, (double)n_params / 1e6, bytes, (double)bytes / (1 << 20));
	if (keys && m->gguf)
		print_keys(m->gguf);
	model_destroy(m);
	return 0;
}
