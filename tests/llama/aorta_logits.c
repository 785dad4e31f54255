/* tests/llama/aorta_logits.c — aorta's side of the llama.cpp comparison
 * (compare.mjs): loads a model FILE the way the server does (model_load), runs
 * a prompt through the CPU engine as one prefill chunk, then N greedy decode
 * steps of one token each, and prints every position's full logits row as
 * JSON on stdout:
 *   {"vocab": V, "n_prompt": P, "tokens": [prompt..., generated...],
 *    "logits": [[V floats] per position 0 .. P+N-1]}
 * Greedy: the lowest id among equal maxima (engine_sample_greedy). The KV
 * cache is F32, so attention adds no rounding of its own; the weights keep
 * the file's dtypes.
 *
 * Usage: aorta_logits MODEL N_GEN TOKEN [TOKEN...]
 */
#include <stdio.h>
#include <stdlib.h>

#include "engine/engine.h"
#include "tests/engine/tmodel.h"

#define BLOCK 16
#define MAX_TOK 512

static void print_row(const float *row, int vocab)
{
	putchar('[');
	for (int i = 0; i < vocab; i++)
		printf(i ? ",%.9g" : "%.9g", (double)row[i]);
	putchar(']');
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: aorta_logits MODEL N_GEN TOKEN [TOKEN...]\n");
		return 2;
	}
	int n_gen = atoi(argv[2]), n_prompt = argc - 3, n_all = n_prompt + n_gen;
	if (n_gen < 0 || n_all > MAX_TOK) {
		fprintf(stderr, "aorta_logits: at most %d tokens in all\n", MAX_TOK);
		return 2;
	}
	struct diag d = { 0 };
	struct model *m = NULL;
	int rc = model_load(argv[1], &m, &d);
	if (rc) {
		fprintf(stderr, "%s: %s\n", argv[1], d.msg);
		return 1;
	}
	int vocab = m->cfg.vocab, n_table = (n_all + BLOCK - 1) / BLOCK;
	int32_t tok[MAX_TOK], table[MAX_TOK / BLOCK];
	for (int i = 0; i < n_prompt; i++)
		tok[i] = (int32_t)atoi(argv[3 + i]);
	for (int i = 0; i < n_table; i++)
		table[i] = n_table - 1 - i; /* out of order, as a server's would be */
	struct engine_opts o = { .n_threads = 2, .block_size = BLOCK, .n_kv_blocks = n_table,
				 .kv_dtype = DT_F32, .quantization = DT_F32,
				 .max_batch_tokens = n_prompt, .max_seqs = 1,
				 .max_blocks_per_seq = n_table };
	struct engine *e = NULL;
	float *logits = malloc((size_t)n_all * (size_t)vocab * sizeof(float));
	if (!logits || (rc = engine_create(m, &o, &e, &d))) {
		fprintf(stderr, "engine_create: %s\n", logits ? d.msg : "out of memory");
		free(logits);
		model_destroy(m);
		return 1;
	}
	rc = tmodel_forward_span(e, tok, 0, n_prompt, table, n_table, BLOCK, logits);
	for (int t = n_prompt; t < n_all && !rc; t++) {
		const float *last = logits + (size_t)(t - 1) * vocab;
		if (!(rc = engine_sample_greedy(e, last, 1, &tok[t])))
			rc = tmodel_forward_span(e, tok, t, 1, table, n_table, BLOCK,
						 logits + (size_t)t * vocab);
	}
	if (rc) {
		fprintf(stderr, "engine: %s\n", err_str(rc));
	} else {
		printf("{\"vocab\": %d, \"n_prompt\": %d, \"tokens\": [", vocab, n_prompt);
		for (int i = 0; i < n_all; i++)
			printf(i ? ",%d" : "%d", tok[i]);
		printf("],\n\"logits\": [");
		for (int i = 0; i < n_all; i++) {
			if (i)
				printf(",\n");
			print_row(logits + (size_t)i * vocab, vocab);
		}
		printf("]}\n");
	}
	engine_destroy(e);
	free(logits);
	model_destroy(m);
	return rc ? 1 : 0;
}
