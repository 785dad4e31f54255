/* tests/bench/tokenizer/bench_tok.c — aorta's tokenizer encoding throughput on
 * the benchmark corpus (gen_corpus.py), one thread, the same way bench_hf.js
 * drives Hugging Face tokenizers: each document encoded on its own, no special
 * tokens added, special-token text parsed. Prints one JSON line: MB/s, token
 * count and an FNV-1a hash of all ids (equal hashes = identical ids).
 * Usage: bench_tok TOKENIZER_JSON CORPUS_JSONL [SECONDS]. Run by run.sh.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/tok/tokenizer.h"

static double clock_s(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double now(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

/* CPU time of the whole process: on a shared machine wall time measures the
 * neighbours too; this is what the encoder itself used. */
static double cpu(void)
{
	return clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: bench_tok TOKENIZER_JSON CORPUS_JSONL [SECONDS]\n");
		return 2;
	}
	double secs = argc > 3 ? atof(argv[3]) : 3.0;
	struct tokenizer *t;
	struct diag d = { 0 };
	double t_load = now();
	if (tok_load_json(argv[1], NULL, &t, &d)) {
		fprintf(stderr, "load: %s\n", d.msg);
		return 1;
	}
	t_load = now() - t_load;
	FILE *f = fopen(argv[2], "rb");
	if (!f) {
		fprintf(stderr, "%s: cannot open\n", argv[2]);
		return 1;
	}
	char **docs = NULL;
	size_t *lens = NULL, n_docs = 0, bytes = 0, cap = 0;
	char *line = NULL;
	size_t lcap = 0;
	ssize_t got;
	while ((got = getline(&line, &lcap, f)) > 0) {
		cJSON *v = cJSON_ParseWithLength(line, (size_t)got);
		if (!cJSON_IsString(v)) {
			cJSON_Delete(v);
			continue;
		}
		if (n_docs == cap) {
			cap = cap ? cap * 2 : 1024;
			docs = realloc(docs, cap * sizeof(*docs));
			lens = realloc(lens, cap * sizeof(*lens));
			if (!docs || !lens)
				return 1;
		}
		lens[n_docs] = strlen(v->valuestring);
		docs[n_docs] = strdup(v->valuestring);
		bytes += lens[n_docs++];
		cJSON_Delete(v);
	}
	free(line);
	fclose(f);
	uint32_t hash = 0x811c9dc5u;
	size_t n_tok = 0;
	/* warm-up pass, which also hashes the ids */
	for (size_t i = 0; i < n_docs; i++) {
		int32_t *ids;
		size_t n;
		if (tok_encode(t, docs[i], lens[i], TOK_PARSE_SPECIAL, &ids, &n))
			return 1;
		for (size_t k = 0; k < n; k++)
			hash = (hash ^ (uint32_t)ids[k]) * 0x01000193u;
		n_tok += n;
		free(ids);
	}
	int passes = 0;
	double t0 = now(), c0 = cpu(), el;
	do {
		for (size_t i = 0; i < n_docs; i++) {
			int32_t *ids;
			size_t n;
			if (tok_encode(t, docs[i], lens[i], TOK_PARSE_SPECIAL, &ids, &n))
				return 1;
			free(ids);
		}
		passes++;
		el = now() - t0;
	} while (el < secs);
	double cpu_s = cpu() - c0;
	printf("{\"impl\":\"aorta\",\"mb_per_s\":%.2f,\"mb_per_cpu_s\":%.2f,\"bytes\":%zu,\"tokens\":%zu,"
	       "\"ids_fnv1a\":\"%x\",\"passes\":%d,\"seconds\":%.2f,\"cpu_seconds\":%.2f,\"load_s\":%.2f}\n",
	       (double)bytes * passes / el / 1e6, (double)bytes * passes / cpu_s / 1e6, bytes, n_tok, hash, passes, el,
	       cpu_s, t_load);
	for (size_t i = 0; i < n_docs; i++)
		free(docs[i]);
	free(docs);
	free(lens);
	tok_destroy(t);
	return 0;
}
