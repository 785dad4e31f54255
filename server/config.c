/* server/config.c — serve defaults and validation. Tested in tests/unit/test_cli.c. */
#include "config.h"

#include <string.h>

void srv_config_defaults(struct srv_config *c)
{
	memset(c, 0, sizeof *c);
	c->host = "127.0.0.1";
	c->port = 8080;
	c->device = "auto";
	c->max_num_seqs = 64;
	c->max_num_batched_tokens = 2048;
	c->block_size = 16;
	c->kv_cache_memory = 1ull << 30;
	c->gpu_memory_utilization = 0.9;
	c->enable_prefix_caching = true;
	c->kv_cache_dtype = "auto";
	c->dtype = "auto";
	c->quantization = "none";
	c->max_queued_requests = 1024;
	c->max_request_bytes = 4ull << 20;
	c->max_connections = 1024;
	c->connection_timeout = 60;
	c->shutdown_timeout = 30;
	c->log_level = "info";
	c->log_format = "text";
}

static bool one_of(const char *v, const char *const *allowed)
{
	for (; *allowed; allowed++)
		if (!strcmp(v, *allowed))
			return true;
	return false;
}

int srv_config_validate(const struct srv_config *c, FILE *err)
{
	int bad = 0;
#define CHECK(cond, ...)                                        \
	do {                                                    \
		if (!(cond)) {                                  \
			fprintf(err, "aorta serve: " __VA_ARGS__); \
			fputc('\n', err);                       \
			bad = 1;                                \
		}                                               \
	} while (0)
	static const char *const devices[] = { "auto", "cpu", "cuda", NULL };
	static const char *const kv_dtypes[] = { "auto", "f32", "f16", "bf16", "fp8", NULL };
	static const char *const dtypes[] = { "auto", "half", "float16", "bfloat16", NULL };
	static const char *const quants[] = { "none", "int8", "fp8", NULL };
	static const char *const formats[] = { "text", "json", NULL };
	static const char *const levels[] = { "debug", "info", "warn", "warning", "error", "off",
					      NULL };
	CHECK(c->model && *c->model, "--model PATH is required (a GGUF file or a Hugging Face "
				     "model directory)");
	CHECK(c->port >= 0 && c->port <= 65535, "--port must be 0..65535 (got %d)", c->port);
	CHECK(one_of(c->device, devices), "--device must be auto, cpu or cuda (got '%s')",
	      c->device);
	CHECK(c->threads >= 0 && c->threads <= 1024, "--threads must be 0..1024 (got %d)",
	      c->threads);
	CHECK(c->max_model_len >= 0, "--max-model-len must be >= 0 (got %d)", c->max_model_len);
	CHECK(c->max_num_seqs >= 1 && c->max_num_seqs <= 4096,
	      "--max-num-seqs must be 1..4096 (got %d)", c->max_num_seqs);
	CHECK(c->max_num_batched_tokens >= 1 && c->max_num_batched_tokens <= 1 << 20,
	      "--max-num-batched-tokens must be 1..1048576 (got %d)", c->max_num_batched_tokens);
	CHECK(c->block_size >= 1 && c->block_size <= 256 && !(c->block_size & (c->block_size - 1)),
	      "--block-size must be a power of two in 1..256 (got %d)", c->block_size);
	CHECK(c->num_kv_blocks >= 0, "--num-kv-blocks must be >= 0 (got %d)", c->num_kv_blocks);
	CHECK(c->gpu_memory_utilization > 0 && c->gpu_memory_utilization <= 1,
	      "--gpu-memory-utilization must be in (0, 1] (got %g)", c->gpu_memory_utilization);
	CHECK(one_of(c->kv_cache_dtype, kv_dtypes),
	      "--kv-cache-dtype must be auto, f32, f16, bf16 or fp8 (got '%s')", c->kv_cache_dtype);
	CHECK(one_of(c->dtype, dtypes), "--dtype must be auto, half, float16 or bfloat16 (got '%s')",
	      c->dtype);
	CHECK(one_of(c->quantization, quants), "--quantization must be none, int8 or fp8 (got '%s')",
	      c->quantization);
	CHECK(c->max_queued_requests >= 0, "--max-queued-requests must be >= 0 (got %d)",
	      c->max_queued_requests);
	CHECK(c->max_request_bytes >= 1024, "--max-request-bytes must be at least 1024");
	CHECK(c->max_connections >= 1, "--max-connections must be >= 1 (got %d)",
	      c->max_connections);
	CHECK(c->max_connections_per_ip >= 0, "--max-connections-per-ip must be >= 0 (got %d)",
	      c->max_connections_per_ip);
	CHECK(c->connection_timeout >= 1, "--connection-timeout must be >= 1 second (got %d)",
	      c->connection_timeout);
	CHECK(c->shutdown_timeout >= 0, "--shutdown-timeout must be >= 0 (got %d)",
	      c->shutdown_timeout);
	CHECK(one_of(c->log_format, formats), "--log-format must be text or json (got '%s')",
	      c->log_format);
	CHECK(one_of(c->log_level, levels),
	      "--log-level must be debug, info, warn, error or off (got '%s')", c->log_level);
#undef CHECK
	return bad ? -1 : 0;
}
