/* server/cmd_make_model.c — `aorta make-model OUT`: write a deterministic
 * random-weight test model (engine/model/model_gen.h) as a GGUF file (OUT ends in
 * .gguf, or --format gguf) or as a Hugging Face directory. With no options it
 * writes the demo model `make run` serves.
 * Tested end to end in tests/models/test_cli_models.sh.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "engine/model/model_gen.h"

static int parse_arch(const char *s, enum model_arch *out)
{
	for (int a = 0; a < ARCH__COUNT; a++)
		if (!strcmp(s, model_arch_name((enum model_arch)a))) {
			*out = (enum model_arch)a;
			return 0;
		}
	return -1;
}

static bool flag_given(int argc, char **argv, const char *flag)
{
	size_t n = strlen(flag);
	for (int i = 0; i < argc; i++)
		if (!strncmp(argv[i], flag, n) && (argv[i][n] == '\0' || argv[i][n] == '='))
			return true;
	return false;
}

int cmd_make_model(int argc, char **argv)
{
	struct model_gen_opts o;
	model_gen_default_opts(&o);
	struct model_config *c = &o.cfg;
	const char *format = NULL, *arch = "llama", *dtype = "f16", *name = NULL, *out = NULL;
	int64_t seed = (int64_t)o.seed;
	double theta = c->rope_theta, eps = c->rms_eps;
	int gguf_version = 3;
	bool qkv_bias = false, qk_norm = false;
	const struct cli_opt opts[] = {
		{ "out", CLI_STR, &out, "PATH", "where to write (instead of the OUT argument)" },
		{ "format", CLI_STR, &format, "gguf|hf", "output format (default: gguf if OUT ends in .gguf, else hf)" },
		{ "arch", CLI_STR, &arch, "NAME", "llama|mistral|qwen2|qwen3 (default llama)" },
		{ "dtype", CLI_STR, &dtype, "TYPE", "f32|f16|bf16|q8_0 (gguf), f32|f16|bf16|f8_e4m3 (hf); default f16" },
		{ "layers", CLI_INT, &c->n_layers, "N", "transformer blocks (default 4)" },
		{ "hidden", CLI_INT, &c->hidden, "N", "model width (default 256)" },
		{ "heads", CLI_INT, &c->n_heads, "N", "query heads (default 8)" },
		{ "kv-heads", CLI_INT, &c->n_kv_heads, "N", "key/value heads (default 4)" },
		{ "head-dim", CLI_INT, &c->head_dim, "N", "per-head width (default hidden/heads)" },
		{ "ffn", CLI_INT, &c->ffn, "N", "MLP width (default 768)" },
		{ "vocab", CLI_INT, &c->vocab, "N", "pad the vocabulary to N (default: its own size)" },
		{ "max-ctx", CLI_INT, &c->max_ctx, "N", "context length (default 2048)" },
		{ "rope-theta", CLI_DOUBLE, &theta, "F", "RoPE base (default 10000)" },
		{ "rms-eps", CLI_DOUBLE, &eps, "F", "RMSNorm epsilon (default 1e-5)" },
		{ "tied", CLI_BOOL, &c->tied_embeddings, NULL, "tie the LM head to the embeddings" },
		{ "qkv-bias", CLI_BOOL, &qkv_bias, NULL, "biases on Q/K/V (default on for qwen2)" },
		{ "qk-norm", CLI_BOOL, &qk_norm, NULL, "RMSNorm on Q/K heads (default on for qwen3)" },
		{ "seed", CLI_I64, &seed, "N", "weight seed (default 42)" },
		{ "name", CLI_STR, &name, "NAME", "model name (default aorta-demo)" },
		{ "shards", CLI_INT, &o.n_shards, "N", "hf: write N safetensors shards + index" },
		{ "tokenizer", CLI_STR, &o.tokenizer_dir, "DIR",
		  "hf: copy tokenizer.json + tokenizer_config.json from DIR (vocab from it)" },
		{ "gguf-version", CLI_INT, &gguf_version, "N", "gguf: 2 or 3 (default 3)" },
	};
	const struct cli_cmd cmd = {
		.name = "make-model",
		.summary = "Write a deterministic random-weight test model (GGUF or HF directory).",
		.usage = "aorta make-model OUT [options]   (OUT, or --out: model.gguf or a directory)",
		.opts = opts,
		.n_opts = (int)(sizeof opts / sizeof opts[0]),
		.min_positional = 0,
		.max_positional = 1,
	};
	const char *pos[1];
	int n_pos;
	/* Two passes: the first finds --arch so its defaults (qwen2 biases,
	 * qwen3 q/k norm) apply unless the flags say otherwise. */
	int rc = cli_parse(&cmd, argc, argv, pos, &n_pos, stdout, stderr);
	if (rc == CLI_HELP)
		return 0;
	if (rc)
		return 2;
	if (parse_arch(arch, &c->arch)) {
		fprintf(stderr, "aorta make-model: unknown --arch '%s'\n", arch);
		return 2;
	}
	qkv_bias = c->arch == ARCH_QWEN2;
	qk_norm = c->arch == ARCH_QWEN3;
	if (cli_parse(&cmd, argc, argv, pos, &n_pos, stdout, stderr))
		return 2;
	c->qkv_bias = qkv_bias;
	c->qk_norm = qk_norm;
	c->rope_theta = (float)theta;
	c->rms_eps = (float)eps;
	o.seed = (uint64_t)seed;
	o.gguf_version = (uint32_t)gguf_version;
	if (name)
		snprintf(c->name, sizeof c->name, "%s", name);
	/* head_dim follows --hidden/--heads unless given; the default 4 KV heads
	 * become --heads when they would not divide it. */
	if (!flag_given(argc, argv, "--head-dim"))
		c->head_dim = c->n_heads > 0 ? c->hidden / c->n_heads : 0;
	if (!flag_given(argc, argv, "--kv-heads") && c->n_heads > 0 &&
	    (c->n_kv_heads > c->n_heads || c->n_heads % c->n_kv_heads))
		c->n_kv_heads = c->n_heads;
	if (n_pos == 1 && !out) {
		out = pos[0];
	} else if (n_pos == 1 || !out) {
		fprintf(stderr, "aorta make-model: give the output path once (OUT or --out)\n");
		return 2;
	}
	if (dtype_parse(dtype, &o.dtype)) {
		fprintf(stderr, "aorta make-model: unknown --dtype '%s'\n", dtype);
		return 2;
	}
	size_t len = strlen(out);
	bool gguf = format ? !strcmp(format, "gguf") : (len > 5 && !strcmp(out + len - 5, ".gguf"));
	if (format && strcmp(format, "gguf") && strcmp(format, "hf")) {
		fprintf(stderr, "aorta make-model: --format must be gguf or hf\n");
		return 2;
	}
	struct diag d = { 0 };
	rc = gguf ? model_gen_write_gguf(&o, out, &d) : model_gen_write_hf_dir(&o, out, &d);
	if (rc) {
		fprintf(stderr, "aorta make-model: %s\n", d.msg[0] ? d.msg : err_str(rc));
		return 1;
	}
	fprintf(stderr, "wrote %s (%s, %s, %d layers, hidden %d, seed %llu)\n", out,
		gguf ? "gguf" : "hf", dtype_name(o.dtype), c->n_layers, c->hidden,
		(unsigned long long)o.seed);
	return 0;
}
