/* server/cmd_serve.c — `aorta serve`: parse and validate the serving flags,
 * set up logging, then run the server (server/srv.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "engine/engine.h"
#include "srv.h"

#include "cli.h"
#include "commands.h"
#include "config.h"

int cmd_serve(int argc, char **argv)
{
	struct srv_config c;
	srv_config_defaults(&c);
	const char *env_key = getenv("AORTA_API_KEY");
	if (env_key && *env_key)
		c.api_key = env_key;
	const struct cli_opt opts[] = {
		{ "model", CLI_STR, &c.model, "PATH", "GGUF file or Hugging Face model directory" },
		{ "served-model-name", CLI_STR, &c.served_model_name, "NAME",
		  "model name in the API (default: the model's name)" },
		{ "host", CLI_STR, &c.host, "ADDR",
		  "address or host name to listen on (default 127.0.0.1)" },
		{ "port", CLI_INT, &c.port, "N", "port to listen on (default 8080)" },
		{ "api-key", CLI_STR, &c.api_key, "KEY",
		  "require 'Authorization: Bearer KEY' (also $AORTA_API_KEY)" },
		{ "device", CLI_STR, &c.device, "auto|cpu|cuda",
		  "where the engine runs (default auto: CUDA when a GPU is visible)" },
		{ "dtype", CLI_STR, &c.dtype, "auto|half|float16|bfloat16",
		  "CUDA weights and activations (default auto: bf16 models bf16, else f16)" },
		{ "enforce-eager", CLI_BOOL, &c.enforce_eager, NULL,
		  "CUDA: run decode steps eagerly, without CUDA graphs" },
		{ "threads", CLI_INT, &c.threads, "N", "CPU worker threads (default: all cores)" },
		{ "max-model-len", CLI_INT, &c.max_model_len, "N",
		  "context length limit (default: the model's)" },
		{ "max-num-seqs", CLI_INT, &c.max_num_seqs, "N", "most sequences per step (default 64)" },
		{ "max-num-batched-tokens", CLI_INT, &c.max_num_batched_tokens, "N",
		  "token budget per step (default 2048)" },
		{ "block-size", CLI_INT, &c.block_size, "N", "tokens per KV block (default 16)" },
		{ "num-kv-blocks", CLI_INT, &c.num_kv_blocks, "N",
		  "KV blocks in the pool (default: from --kv-cache-memory)" },
		{ "kv-cache-memory", CLI_BYTES, &c.kv_cache_memory, "BYTES",
		  "KV pool size on CPU, e.g. 2G (default 1G)" },
		{ "gpu-memory-utilization", CLI_DOUBLE, &c.gpu_memory_utilization, "F",
		  "fraction of GPU memory to use (default 0.9)" },
		{ "enable-prefix-caching", CLI_BOOL, &c.enable_prefix_caching, NULL,
		  "reuse KV blocks of shared prefixes (default on)" },
		{ "kv-cache-dtype", CLI_STR, &c.kv_cache_dtype, "auto|f32|f16|bf16|fp8",
		  "KV cache element type (default auto: f32 on CPU, the compute dtype on CUDA; "
		  "fp8: E4M3 on CUDA, scale 1)" },
		{ "quantization", CLI_STR, &c.quantization, "none|int8|fp8",
		  "convert 16-bit weights at load (default none)" },
		{ "chat-template", CLI_STR, &c.chat_template, "FILE",
		  "chat template to use instead of the model's: a template of a family "
		  "aorta renders (llama3, llama2, mistral, gemma, gemma2, qwen3, chatml; "
		  "no Jinja interpreter), else start-up fails" },
		{ "max-queued-requests", CLI_INT, &c.max_queued_requests, "N",
		  "waiting requests before 429 (default 1024)" },
		{ "max-request-bytes", CLI_BYTES, &c.max_request_bytes, "BYTES",
		  "largest request body (default 4M)" },
		{ "max-connections", CLI_INT, &c.max_connections, "N",
		  "most open connections (default 1024)" },
		{ "max-connections-per-ip", CLI_INT, &c.max_connections_per_ip, "N",
		  "most open connections from one client address (default 0 = no limit)" },
		{ "connection-timeout", CLI_INT, &c.connection_timeout, "SECONDS",
		  "idle connection timeout (default 60)" },
		{ "shutdown-timeout", CLI_INT, &c.shutdown_timeout, "SECONDS",
		  "on SIGTERM, how long in-flight requests may finish (default 30)" },
		{ "allowed-origins", CLI_STR, &c.allowed_origins, "ORIGINS",
		  "comma-separated CORS origins, or * (default: CORS off)" },
		{ "log-level", CLI_STR, &c.log_level, "LEVEL", "debug|info|warn|error (default info)" },
		{ "log-format", CLI_STR, &c.log_format, "text|json", "log line format (default text)" },
		{ "seed", CLI_I64, &c.seed, "N", "server seed for requests without one (default 0)" },
	};
	const struct cli_cmd cmd = {
		.name = "serve",
		.summary = "Serve a model over an OpenAI-compatible HTTP API.",
		.usage = "aorta serve --model PATH [options]",
		.opts = opts,
		.n_opts = (int)(sizeof opts / sizeof opts[0]),
	};
	const char *pos[1];
	int n_pos;
	int rc = cli_parse(&cmd, argc, argv, pos, &n_pos, stdout, stderr);
	if (rc == CLI_HELP)
		return 0;
	if (rc)
		return 2;
	if (srv_config_validate(&c, stderr))
		return 2;
	if (strcmp(c.device, "cuda") == 0 && !engine_cuda_available()) {
		fprintf(stderr, "aorta serve: --device cuda: %s; use --device cpu (or auto)\n",
			AORTA_HAVE_CUDA ? "no CUDA device is visible"
					: "this build has no CUDA backend (nvcc was not found)");
		return 2;
	}
	enum log_level lvl = LOG_INFO;
	log_level_parse(c.log_level, &lvl);
	log_configure(lvl, strcmp(c.log_format, "json") == 0);
	return srv_run(&c);
}
