/* tests/reference/dump_loaded.c — what aorta read from a model file, for
 * ref_loaded.py: loads MODEL (a GGUF file or an HF directory) with
 * model_load, as the server does, and writes into OUTDIR every tensor of the
 * file dequantized to F32 (NAME.npy, the file's name and shape) and the
 * engine's logits for TOKEN... (logits.npy, one row per position: a prefill
 * of the first half, then one token per step, F32 KV cache).
 *
 * Usage: dump_loaded MODEL OUTDIR TOKEN [TOKEN...]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/engine.h"
#include "kernels/cpu/matmul.h"
#include "tests/engine/tmodel.h"

#define BLOCK 16
#define MAX_TOK 256

static int write_npy(const char *dir, const char *name, const float *data, int n_dims,
		     const int64_t *shape)
{
	char path[1024], hdr[256], shp[128] = "";
	snprintf(path, sizeof path, "%s/%s.npy", dir, name);
	size_t n = 1;
	for (int i = 0; i < n_dims; i++) {
		char t[32];
		snprintf(t, sizeof t, "%lld,", (long long)shape[i]);
		strcat(shp, t);
		n *= (size_t)shape[i];
	}
	int len = snprintf(hdr, sizeof hdr,
			   "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", shp);
	int pad = (64 - (10 + len + 1) % 64) % 64; /* header padded to 64, '\n' last */
	unsigned short hlen = (unsigned short)(len + pad + 1);
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	fwrite("\x93NUMPY\x01\x00", 1, 8, f);
	fputc(hlen & 0xff, f);
	fputc(hlen >> 8, f);
	fwrite(hdr, 1, (size_t)len, f);
	for (int i = 0; i < pad; i++)
		fputc(' ', f);
	fputc('\n', f);
	fwrite(data, sizeof(float), n, f);
	return fclose(f) ? -1 : 0;
}

/* The tensor as F32 through the reference dequantizer, row by row. */
static int dump_tensor(const char *dir, const struct tensor *t)
{
	int64_t cols = t->shape[t->n_dims - 1], rows = 1;
	for (int i = 0; i + 1 < t->n_dims; i++)
		rows *= t->shape[i];
	float *out = malloc((size_t)(rows * cols) * sizeof(float));
	if (!out)
		return -1;
	struct kmat k = { .dtype = t->dtype, .rows = rows, .cols = cols, .data = t->data,
			  .scale = t->scale, .n_scale = t->n_scale };
	for (int64_t r = 0; r < rows; r++)
		kcpu_dequant_row(&k, r, out + r * cols);
	int rc = write_npy(dir, t->name, out, t->n_dims, t->shape);
	free(out);
	return rc;
}

static int engine_logits(const struct model *m, const int32_t *tok, int n_tok, float *logits)
{
	int n_table = (n_tok + BLOCK - 1) / BLOCK;
	struct engine_opts o = { .n_threads = 2, .block_size = BLOCK, .n_kv_blocks = n_table,
				 .kv_dtype = DT_F32, .quantization = DT_F32,
				 .max_batch_tokens = n_tok, .max_seqs = 1,
				 .max_blocks_per_seq = n_table };
	struct engine *e;
	struct diag d = { 0 };
	int rc = engine_create(m, &o, &e, &d);
	if (rc) {
		fprintf(stderr, "engine_create: %s\n", d.msg);
		return rc;
	}
	int32_t table[MAX_TOK / BLOCK];
	for (int i = 0; i < n_table; i++)
		table[i] = n_table - 1 - i;
	for (int a = 0, n = n_tok / 2; a < n_tok && !rc; a += n, n = 1) {
		if ((rc = tmodel_forward_span(e, tok, a, n, table, n_table, BLOCK,
					      logits + (size_t)a * m->cfg.vocab)))
			fprintf(stderr, "engine_forward: %s\n", err_str(rc));
	}
	engine_destroy(e);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 4 || argc - 3 > MAX_TOK) {
		fprintf(stderr, "usage: dump_loaded MODEL OUTDIR TOKEN [TOKEN...] (at most %d)\n",
			MAX_TOK);
		return 2;
	}
	const char *dir = argv[2];
	if (mkdir(dir, 0755) && errno != EEXIST) {
		perror(dir);
		return 1;
	}
	struct model *m = NULL;
	struct diag d = { 0 };
	if (model_load(argv[1], &m, &d)) {
		fprintf(stderr, "%s: %s\n", argv[1], d.msg);
		return 1;
	}
	int n_tok = argc - 3, rc = 0;
	int32_t tok[MAX_TOK];
	for (int i = 0; i < n_tok; i++)
		tok[i] = (int32_t)atoi(argv[3 + i]);
	for (int i = 0; i < m->n_tensors && !rc; i++)
		rc = dump_tensor(dir, &m->tensors[i]);
	float *logits = malloc((size_t)n_tok * (size_t)m->cfg.vocab * sizeof(float));
	if (!rc)
		rc = logits ? engine_logits(m, tok, n_tok, logits) : -1;
	int64_t shp[2] = { n_tok, m->cfg.vocab };
	if (!rc)
		rc = write_npy(dir, "logits", logits, 2, shp);
	free(logits);
	model_destroy(m);
	if (rc) {
		fprintf(stderr, "dump_loaded %s failed\n", argv[1]);
		return 1;
	}
	return 0;
}
