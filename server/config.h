/* server/config.h — `aorta serve` settings: defaults, flags (vLLM's names where
 * one exists), and validation. Filled once by main's thread before any other
 * thread starts; read-only afterwards. */
#ifndef AORTA_SERVER_CONFIG_H
#define AORTA_SERVER_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct srv_config {
	const char *model;		/* --model PATH (GGUF file or HF directory) */
	const char *served_model_name;	/* --served-model-name; default: the model's name */
	const char *host;		/* --host */
	int port;			/* --port */
	const char *api_key;		/* --api-key or $AORTA_API_KEY */
	const char *device;		/* --device auto|cpu|cuda */
	int threads;			/* --threads (0 = all cores) */
	int max_model_len;		/* --max-model-len (0 = the model's context) */
	int max_num_seqs;		/* --max-num-seqs */
	int max_num_batched_tokens;	/* --max-num-batched-tokens */
	int block_size;			/* --block-size */
	int num_kv_blocks;		/* --num-kv-blocks (0 = from --kv-cache-memory) */
	uint64_t kv_cache_memory;	/* --kv-cache-memory BYTES (CPU) */
	double gpu_memory_utilization;	/* --gpu-memory-utilization (CUDA) */
	bool enable_prefix_caching;	/* --enable-prefix-caching */
	const char *kv_cache_dtype;	/* --kv-cache-dtype auto|f32|f16|bf16|fp8 */
	const char *dtype;		/* --dtype auto|half|float16|bfloat16 (CUDA compute) */
	bool enforce_eager;		/* --enforce-eager: no CUDA graphs */
	const char *quantization;	/* --quantization none|int8|fp8 */
	const char *chat_template;	/* --chat-template FILE */
	int max_queued_requests;	/* --max-queued-requests */
	uint64_t max_request_bytes;	/* --max-request-bytes */
	int max_connections;		/* --max-connections */
	int max_connections_per_ip;	/* --max-connections-per-ip (0 = no limit) */
	int connection_timeout;		/* --connection-timeout seconds */
	int shutdown_timeout;		/* --shutdown-timeout seconds */
	const char *allowed_origins;	/* --allowed-origins (CORS off when NULL) */
	const char *log_level;		/* --log-level */
	const char *log_format;		/* --log-format text|json */
	int64_t seed;			/* --seed (server seed for requests without one) */
};

void srv_config_defaults(struct srv_config *c);
/* Check ranges and combinations; prints one clear line per problem to err.
 * Returns 0 when usable, -1 otherwise. */
int srv_config_validate(const struct srv_config *c, FILE *err);

#endif
