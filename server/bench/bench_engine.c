/* server/bench/bench_engine.c — `aorta bench engine`: the engine alone, no HTTP.
 * In one run: the machine's
 * limits on the same threads (kernels/cpu/probe.h: STREAM-like triad, FMA
 * and int8-dot peaks), prefill tokens/s of one long prompt, reported as
 * matmul GFLOP/s against the FMA peak (float weights) or the int8-dot peak
 * (Q8_0, INT8: the integer-dot path), and decode tokens/s at several batch
 * sizes, with decode reported as achieved bandwidth = weight bytes read per
 * step / step time, as a fraction of the measured triad bandwidth.
 * `--model PATH` loads a GGUF file or HF directory; `--synthetic` builds a
 * random model of a given shape in memory instead (weights tiled from a
 * random pool: timing does not depend on the values).
 * Decode sequences attend over a KV context of --decode-ctx positions that
 * was not prefilled (zeros): the cost is the same, and the run stays short.
 * Smoke-tested by tests/engine/meson.build (bench_engine_smoke).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/bench/bench_serve.h"
#include "server/cli.h"
#include "engine/engine.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/probe.h"
#include "kernels/sample.h"


static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- a synthetic model --------------------------------------------------------- */

struct synth {
	struct model m;
	void **bufs;
	int n_bufs;
};

static void *synth_keep(struct synth *s, size_t n)
{
	void **nb = realloc(s->bufs, (size_t)(s->n_bufs + 1) * sizeof *nb);
	if (!nb)
		return NULL;
	s->bufs = nb;
	void *p = malloc(n ? n : 1);
	if (p)
		s->bufs[s->n_bufs++] = p;
	return p;
}

static void synth_free(struct synth *s)
{
	for (int i = 0; i < s->n_bufs; i++)
		free(s->bufs[i]);
	free(s->bufs);
	free(s->m.w.layers);
}

/* A pool of random encoded values; tensors are tiled from it at shifting
 * offsets. Values are uniform in +-scale. */
#define POOL_BYTES (1u << 22)

static int synth_tensor(struct synth *s, struct tensor *t, const uint8_t *pool, enum dtype dt,
			int64_t rows, int64_t cols, uint64_t *shift)
{
	uint64_t row_bytes, n;
	if (dtype_row_bytes(dt, (uint64_t)cols, &row_bytes))
		return ERR_INVAL;
	n = row_bytes * (uint64_t)(rows > 0 ? rows : 1);
	uint8_t *p = synth_keep(s, n);
	if (!p)
		return ERR_NOMEM;
	size_t unit = dtype_block_bytes(dt);
	for (uint64_t off = 0; off < n;) {
		uint64_t start = (*shift += 4099) % (POOL_BYTES / 2);
		start -= start % unit; /* keep Q8_0 blocks whole */
		uint64_t len = n - off < POOL_BYTES / 2 ? n - off : POOL_BYTES / 2;
		memcpy(p + off, pool + start, len);
		off += len;
	}
	t->dtype = dt;
	t->data = p;
	t->n_bytes = n;
	t->n_dims = rows > 0 ? 2 : 1;
	t->shape[0] = rows > 0 ? rows : cols;
	t->shape[1] = rows > 0 ? cols : 0;
	return 0;
}

static int synth_build(struct synth *s, const struct model_config *c, enum dtype dt)
{
	memset(s, 0, sizeof *s);
	s->m.cfg = *c;
	uint8_t *wpool = synth_keep(s, POOL_BYTES), *vpool = synth_keep(s, POOL_BYTES);
	s->m.w.layers = calloc((size_t)c->n_layers, sizeof *s->m.w.layers);
	if (!wpool || !vpool || !s->m.w.layers)
		return ERR_NOMEM;
	uint64_t x = 88172645463325252ull;
	const float scale = 1.0f / sqrtf((float)c->hidden);
	size_t ub = dtype_block_bytes(dt), ue = dtype_block_elems(dt);
	for (size_t i = 0; i + ub <= POOL_BYTES; i += ub) {
		float v[32];
		for (size_t k = 0; k < ue; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			v[k] = scale * ((float)(x >> 40) / (float)(1u << 24) * 2.0f - 1.0f);
		}
		uint8_t *o = wpool + i;
		if (dt == DT_F32) {
			memcpy(o, v, 4);
		} else if (dt == DT_F16 || dt == DT_BF16) {
			uint16_t h = dt == DT_F16 ? f32_to_f16(v[0]) : f32_to_bf16(v[0]);
			memcpy(o, &h, 2);
		} else { /* Q8_0 */
			struct q8_0_block b;
			b.d = f32_to_f16(scale / 127.0f);
			for (int k = 0; k < Q8_0_BLOCK; k++)
				b.qs[k] = (int8_t)lrintf(v[k] / scale * 127.0f);
			memcpy(o, &b, sizeof b);
		}
	}
	for (size_t i = 0; i + 4 <= POOL_BYTES; i += 4) { /* norm weights: ~1 */
		float one = 1.0f;
		memcpy(vpool + i, &one, 4);
	}
	uint64_t sh = 0;
	const int64_t H = c->hidden, q = (int64_t)c->n_heads * c->head_dim,
		      kv = (int64_t)c->n_kv_heads * c->head_dim;
	int rc = synth_tensor(s, &s->m.w.tok_embd, wpool, dt, c->vocab, H, &sh);
	rc = rc ? rc : synth_tensor(s, &s->m.w.out_norm, vpool, DT_F32, 0, H, &sh);
	if (!c->tied_embeddings)
		rc = rc ? rc : synth_tensor(s, &s->m.w.lm_head, wpool, dt, c->vocab, H, &sh);
	for (int l = 0; l < c->n_layers && !rc; l++) {
		struct layer_weights *w = &s->m.w.layers[l];
		if ((rc = synth_tensor(s, &w->attn_norm, vpool, DT_F32, 0, H, &sh)) ||
		    (rc = synth_tensor(s, &w->ffn_norm, vpool, DT_F32, 0, H, &sh)) ||
		    (rc = synth_tensor(s, &w->wq, wpool, dt, q, H, &sh)) ||
		    (rc = synth_tensor(s, &w->wk, wpool, dt, kv, H, &sh)) ||
		    (rc = synth_tensor(s, &w->wv, wpool, dt, kv, H, &sh)) ||
		    (rc = synth_tensor(s, &w->wo, wpool, dt, H, q, &sh)) ||
		    (rc = synth_tensor(s, &w->w_gate, wpool, dt, c->ffn, H, &sh)) ||
		    (rc = synth_tensor(s, &w->w_up, wpool, dt, c->ffn, H, &sh)) ||
		    (rc = synth_tensor(s, &w->w_down, wpool, dt, H, c->ffn, &sh)))
			break;
	}
	return rc;
}

/* Bytes of the weight matrices one decode step reads (every projection and
 * the LM head; embedding gathers and norm vectors are negligible). With
 * --quantization, 16/32-bit projections are read as one byte per value. */
static double matrix_bytes(const struct tensor *t, enum dtype quant)
{
	if (quant != DT_F32 && (t->dtype == DT_F32 || t->dtype == DT_F16 || t->dtype == DT_BF16))
		return (double)t->shape[0] * (double)t->shape[1] + 4.0 * (double)t->shape[0];
	return (double)t->n_bytes;
}

static double step_weight_bytes(const struct model *m, enum dtype quant)
{
	double b = (double)(m->cfg.tied_embeddings || !m->w.lm_head.data ? m->w.tok_embd.n_bytes
									  : m->w.lm_head.n_bytes);
	for (int l = 0; l < m->cfg.n_layers; l++) {
		const struct layer_weights *w = &m->w.layers[l];
		const struct tensor *all[] = { &w->wq, &w->wk, &w->wv, &w->wo,
					       &w->w_gate, &w->w_up, &w->w_down };
		for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
			b += matrix_bytes(all[i], quant);
	}
	return b;
}

/* Multiply-adds per token of the same matrices (prefill FLOP/s = 2 x this). */
/* Parameters of the matrices a token passes through: the layers', and the
 * LM head's (which a prefill runs for its last row only). */
static void step_weight_params(const struct model *m, double *layers, double *head)
{
	const struct tensor *h = m->cfg.tied_embeddings || !m->w.lm_head.data ? &m->w.tok_embd
									      : &m->w.lm_head;
	*head = (double)h->shape[0] * (double)h->shape[1];
	*layers = 0;
	for (int l = 0; l < m->cfg.n_layers; l++) {
		const struct layer_weights *w = &m->w.layers[l];
		const struct tensor *all[] = { &w->wq, &w->wk, &w->wv, &w->wo,
					       &w->w_gate, &w->w_up, &w->w_down };
		for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
			*layers += (double)all[i]->shape[0] * (double)all[i]->shape[1];
	}
}

/* ---- engine runs ------------------------------------------------------------------ */

static int run_prefill(struct engine *e, int n, int vocab, int mb, double *tok_s)
{
	int32_t *tok = malloc((size_t)n * 3 * sizeof(int32_t) + (size_t)mb * sizeof(int32_t));
	float *logits = malloc((size_t)vocab * sizeof(float));
	if (!tok || !logits) {
		free(tok), free(logits);
		return ERR_NOMEM;
	}
	int32_t *pos = tok + n, *slots = pos + n, *table = slots + n;
	for (int j = 0; j < mb; j++) /* blocks 0.. in order: slot i is position i */
		table[j] = j;
	for (int i = 0; i < n; i++) {
		tok[i] = (i * 31 + 7) % vocab;
		pos[i] = i;
		slots[i] = i;
	}
	int32_t start[2] = { 0, n }, ctx = n, row = n - 1;
	struct engine_batch b = { .n_tokens = n, .tokens = tok, .positions = pos,
				  .slot_mapping = slots, .n_seqs = 1, .seq_start = start,
				  .context_len = &ctx, .block_tables = table,
				  .max_blocks_per_seq = mb, .n_logits = 1, .logits_rows = &row };
	double t0 = now_s();
	int rc = engine_forward(e, &b, logits);
	*tok_s = n / (now_s() - t0);
	free(tok), free(logits);
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Decode steps of B sequences; sequence s owns blocks [s*mb, s*mb+mb).
 * *step_s is the median step time (other processes share these cores:
 * the median is steadier than the mean). Where the engine samples on its
 * device (CUDA), a step is what the server runs: engine_forward_sample with
 * greedy rows, only the tokens coming back; elsewhere engine_forward. */
static int run_decode(struct engine *e, int B, int ctx0, int steps, int vocab, int mb,
		      double *step_s)
{
	const int bs = 16;
	const bool dev_sample = engine_samples_on_device(e);
	int32_t *buf = malloc(sizeof(int32_t) * ((size_t)B * (7 + mb) + 1));
	float *logits = dev_sample ? NULL : malloc((size_t)B * vocab * sizeof(float));
	double *times = malloc(sizeof(double) * (size_t)steps);
	struct k_sample_row *srows = calloc((size_t)B, sizeof *srows);
	/* the sampler's other outputs: logprob, rank, top ids and logprobs */
	int32_t *s_rank = malloc((size_t)B * (1 + K_SAMPLE_MAX_TOP) * sizeof(int32_t));
	float *s_lp = malloc((size_t)B * (1 + K_SAMPLE_MAX_TOP) * sizeof(float));
	if (!buf || (!dev_sample && !logits) || !times || !srows || !s_rank || !s_lp) {
		free(buf), free(logits), free(times), free(srows), free(s_rank), free(s_lp);
		return ERR_NOMEM;
	}
	for (int s = 0; s < B; s++) {
		srows[s].greedy = 1;
		srows[s].n_logprobs = -1;
		srows[s].inv_temperature = 1.0f;
		srows[s].top_p = 1.0f;
		srows[s].repetition_penalty = 1.0f;
	}
	int32_t *tok = buf, *pos = tok + B, *slots = pos + B, *ctx = slots + B, *rows = ctx + B,
		*start = rows + B, *table = start + B + 1, *sampled = table + (size_t)B * mb;
	for (int s = 0; s < B; s++)
		for (int j = 0; j < mb; j++)
			table[s * mb + j] = s * mb + j;
	int rc = 0;
	for (int it = 0; it < steps + 1 && !rc; it++) { /* step 0 warms up */
		for (int s = 0; s < B; s++) {
			int p = ctx0 + it;
			tok[s] = (s * 13 + it) % vocab;
			pos[s] = p;
			slots[s] = table[s * mb + p / bs] * bs + p % bs;
			ctx[s] = p + 1;
			rows[s] = s;
			start[s] = s;
		}
		start[B] = B;
		struct engine_batch b = { .n_tokens = B, .tokens = tok, .positions = pos,
					  .slot_mapping = slots, .n_seqs = B, .seq_start = start,
					  .context_len = ctx, .block_tables = table,
					  .max_blocks_per_seq = mb, .n_logits = B, .logits_rows = rows };
		struct k_sample_args sa = { .n_rows = B, .vocab = vocab, .rows = srows,
					    .token = sampled, .logprob = s_lp, .rank = s_rank,
					    .top_ids = s_rank + B, .top_logprobs = s_lp + B };
		double t0 = now_s();
		rc = dev_sample ? engine_forward_sample(e, &b, &sa) : engine_forward(e, &b, logits);
		if (it > 0)
			times[it - 1] = now_s() - t0;
	}
	if (!rc) {
		qsort(times, (size_t)steps, sizeof(double), cmp_double);
		*step_s = steps % 2 ? times[steps / 2] : 0.5 * (times[steps / 2 - 1] + times[steps / 2]);
	}
	free(buf), free(logits), free(times), free(srows), free(s_rank), free(s_lp);
	return rc;
}

/* ---- options ---- */

struct bench_args {
	const char *model_path, *dtype_s, *kv_s, *quant_s, *batches_s, *device_s;
	bool synthetic, probes, eager;
	double hbm_gbs, peak_tflops;
	int threads, layers, hidden, heads, kv_heads, ffn, vocab, prompt, decode_ctx, steps;
	/* resolved by resolve_args */
	enum dtype wdt, kvdt, quant;
	enum engine_device dev;
	bool cuda;
	int mb; /* KV blocks of 16 per sequence */
	int batches[16], n_batches, max_b;
};

/* 0, CLI_HELP, or nonzero for a usage error (printed by cli_parse) */
static int parse_args(int argc, char **argv, struct bench_args *a)
{
	*a = (struct bench_args){ .dtype_s = "f16", .kv_s = "auto", .quant_s = "none",
				  .batches_s = "1,4,16,64", .device_s = "cpu", .probes = true,
				  .hbm_gbs = 4800, .peak_tflops = 989, .layers = 16,
				  .hidden = 2048, .heads = 32, .kv_heads = 8, .ffn = 8192,
				  .vocab = 32000, .prompt = 512, .decode_ctx = 128, .steps = 8 };
	const struct cli_opt opts[] = {
		{ "model", CLI_STR, &a->model_path, "PATH", "model file or directory (needs the loader)" },
		{ "synthetic", CLI_BOOL, &a->synthetic, NULL, "random in-memory model of the shape below" },
		{ "dtype", CLI_STR, &a->dtype_s, "T", "synthetic weight dtype: f32|f16|bf16|q8_0" },
		{ "layers", CLI_INT, &a->layers, "N", "synthetic: layers (16)" },
		{ "hidden", CLI_INT, &a->hidden, "N", "synthetic: hidden size (2048)" },
		{ "heads", CLI_INT, &a->heads, "N", "synthetic: query heads (32)" },
		{ "kv-heads", CLI_INT, &a->kv_heads, "N", "synthetic: KV heads (8)" },
		{ "ffn", CLI_INT, &a->ffn, "N", "synthetic: FFN size (8192)" },
		{ "vocab", CLI_INT, &a->vocab, "N", "synthetic: vocabulary (32000)" },
		{ "threads", CLI_INT, &a->threads, "N", "worker threads (0 = all cores)" },
		{ "kv-cache-dtype", CLI_STR, &a->kv_s, "T",
		  "auto|f32|f16|bf16|fp8 (auto: f32 on CPU, the weights' 16-bit type on CUDA; fp8: "
		  "CUDA)" },
		{ "device", CLI_STR, &a->device_s, "D", "cpu|cuda|auto (default cpu)" },
		{ "enforce-eager", CLI_BOOL, &a->eager, NULL, "CUDA: no CUDA graphs for decode" },
		{ "hbm-gbs", CLI_DOUBLE, &a->hbm_gbs, "GB/s",
		  "CUDA: nominal memory bandwidth to report decode against (4800: H200)" },
		{ "peak-tflops", CLI_DOUBLE, &a->peak_tflops, "TFLOP/s",
		  "CUDA: dense 16-bit peak to report prefill against (989: H100/H200 SXM)" },
		{ "quantization", CLI_STR, &a->quant_s, "Q", "none|int8|fp8 (converts 16-bit weights)" },
		{ "prompt", CLI_INT, &a->prompt, "N", "prefill prompt length (512; up to 8192)" },
		{ "batches", CLI_STR, &a->batches_s, "LIST", "decode batch sizes (1,4,16,64)" },
		{ "decode-ctx", CLI_INT, &a->decode_ctx, "N", "KV positions each decode attends over (128)" },
		{ "steps", CLI_INT, &a->steps, "N", "timed decode steps per batch size (8)" },
		{ "probes", CLI_BOOL, &a->probes, NULL,
		  "measure bandwidth and FMA / int8-dot peaks (default on)" },
	};
	const struct cli_cmd cmd = {
		.name = "bench engine",
		.summary = "Benchmark the engine: bandwidth/FMA probes, prefill and decode.",
		.usage = "aorta bench engine (--model PATH | --synthetic) [options]",
		.opts = opts,
		.n_opts = (int)(sizeof opts / sizeof opts[0]),
	};
	const char *pos[1];
	int n_pos;
	return cli_parse(&cmd, argc, argv, pos, &n_pos, stdout, stderr);
}

/* Check the options and derive the dtypes, device and batch list; prints
 * the reason and returns 2 for a usage error. */
static int resolve_args(struct bench_args *a)
{
	a->kvdt = DT__COUNT;
	a->dev = !strcmp(a->device_s, "cuda")   ? ENGINE_DEVICE_CUDA
		 : !strcmp(a->device_s, "auto") ? ENGINE_DEVICE_AUTO
						: ENGINE_DEVICE_CPU;
	if (a->dev == ENGINE_DEVICE_CPU && strcmp(a->device_s, "cpu")) {
		fprintf(stderr, "bench engine: --device must be cpu, cuda or auto\n");
		return 2;
	}
	if (a->dev == ENGINE_DEVICE_AUTO)
		a->dev = engine_cuda_available() ? ENGINE_DEVICE_CUDA : ENGINE_DEVICE_CPU;
	if (dtype_parse(a->dtype_s, &a->wdt) ||
	    !(a->wdt == DT_F32 || a->wdt == DT_F16 || a->wdt == DT_BF16 || a->wdt == DT_Q8_0) ||
	    (strcmp(a->kv_s, "auto") &&
	     dtype_parse(!strcmp(a->kv_s, "fp8") ? "f8_e4m3" : a->kv_s, &a->kvdt))) {
		fprintf(stderr, "bench engine: bad --dtype or --kv-cache-dtype\n");
		return 2;
	}
	a->cuda = a->dev == ENGINE_DEVICE_CUDA;
	if (a->kvdt == DT__COUNT)
		a->kvdt = !a->cuda ? DT_F32 : a->wdt == DT_BF16 ? DT_BF16 : DT_F16;
	a->quant = !strcmp(a->quant_s, "int8")  ? DT_I8
		   : !strcmp(a->quant_s, "fp8") ? DT_F8_E4M3
						: DT_F32;
	if (a->quant == DT_F32 && strcmp(a->quant_s, "none")) {
		fprintf(stderr, "bench engine: --quantization must be none, int8 or fp8\n");
		return 2;
	}
	if (!!a->model_path == a->synthetic) {
		fprintf(stderr, "bench engine: give exactly one of --model PATH and --synthetic\n");
		return 2;
	}
	if (a->prompt < 1 || a->prompt > 8192 || a->decode_ctx < 0 ||
	    a->decode_ctx + a->steps + 1 > 8192 || a->steps < 1 || a->heads <= 0 ||
	    a->kv_heads <= 0 || a->hidden % a->heads) {
		fprintf(stderr, "bench engine: --prompt 1..8192, --decode-ctx + --steps < 8192, "
				"hidden divisible by heads\n");
		return 2;
	}
	/* blocks of 16 per sequence: enough for the prompt and the decode context */
	const int need = a->prompt > a->decode_ctx + a->steps + 1 ? a->prompt
								   : a->decode_ctx + a->steps + 1;
	a->mb = need <= 1024 ? 64 : (need + 15) / 16;
	a->n_batches = 0;
	a->max_b = 1;
	for (const char *p = a->batches_s; *p && a->n_batches < 16;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p || v < 1 || v > 256) {
			fprintf(stderr, "bench engine: bad --batches\n");
			return 2;
		}
		a->batches[a->n_batches++] = (int)v;
		a->max_b = v > a->max_b ? (int)v : a->max_b;
		p = *end == ',' ? end + 1 : end;
	}
	return 0;
}

/* ---- the run ---- */

/* The synthetic model of the options' shape, or the loaded one; *m points
 * into s or *loaded. Prints the reason on failure. */
static int get_model(struct bench_args *a, struct synth *s, struct model **loaded,
		     const struct model **m)
{
	struct model_config c = { .arch = ARCH_LLAMA, .n_layers = a->layers, .hidden = a->hidden,
				  .n_heads = a->heads, .n_kv_heads = a->kv_heads,
				  .head_dim = a->hidden / a->heads, .ffn = a->ffn,
				  .vocab = a->vocab, .rope_theta = 10000.0f, .rms_eps = 1e-5f,
				  .max_ctx = 4096, .bos_id = -1, .eos_id = -1 };
	snprintf(c.name, sizeof c.name, "synthetic");
	struct diag d = { 0 };
	const double t0 = now_s();
	int rc;
	if (a->synthetic) {
		if ((rc = synth_build(s, &c, a->wdt))) {
			fprintf(stderr, "bench engine: building the model: %s\n", err_str(rc));
			return rc;
		}
		*m = &s->m;
	} else {
		if ((rc = model_load(a->model_path, loaded, &d))) {
			fprintf(stderr, "bench engine: %s: %s\n", a->model_path, d.msg);
			return rc;
		}
		*m = *loaded;
		c = (*m)->cfg;
		a->vocab = c.vocab;
	}
	printf("model: %s: %s, %d layers, hidden %d, heads %d/%d, ffn %d, vocab %d, %s; "
	       "%.2f GB of matrices (ready in %.1f s)\n",
	       a->synthetic ? "synthetic" : a->model_path, model_arch_name(c.arch), c.n_layers,
	       c.hidden, c.n_heads, c.n_kv_heads, c.ffn, c.vocab,
	       dtype_name((*m)->w.layers[0].w_up.dtype), step_weight_bytes(*m, a->quant) / 1e9,
	       now_s() - t0);
	return 0;
}

/* What decode and prefill are reported against: the CPU's measured limits on
 * the same threads, or the GPU's nominal ones. */
struct limits {
	double bw, peak;
	const char *peak_name;
};

static void get_limits(const struct bench_args *a, const struct model *m, struct kpool *pool,
		       struct limits *l)
{
	*l = (struct limits){ .peak_name = a->cuda ? "16-bit" : "FMA" };
	if (a->cuda) {
		/* GPU limits are nominal here; tests/bench/bench_cuda measures them
		 * (copy bandwidth, cuBLAS GEMM) in the same tests/gpu/run.sh */
		l->bw = a->hbm_gbs;
		l->peak = a->peak_tflops * 1e3;
		printf("engine: cuda; reporting against %.0f GB/s and %.0f TFLOP/s (nominal)\n",
		       a->hbm_gbs, a->peak_tflops);
	} else if (a->probes) {
		l->bw = kcpu_probe_memory(pool, (size_t)128 << 20).triad_gbs;
		const double fma = kcpu_probe_fma_gflops(pool), dot = kcpu_probe_int8_gops(pool);
		printf("machine: %d threads; triad bandwidth %.1f GB/s; FMA peak %.1f GFLOP/s; "
		       "int8-dot peak %.1f GOP/s\n",
		       kpool_size(pool), l->bw, fma, dot);
		/* the CPU's Q8_0 / INT8 matmuls are integer dot products */
		const enum dtype shown = m->w.layers[0].w_up.dtype;
		const bool int_path = shown == DT_Q8_0 || shown == DT_I8 || a->quant == DT_I8;
		l->peak = int_path && dot > 0 ? dot : fma;
		l->peak_name = int_path && dot > 0 ? "int8-dot" : "FMA";
	}
}

static int report_prefill(struct engine *e, const struct bench_args *a, const struct model *m,
			  const struct limits *l)
{
	double ptps;
	/* the first step faults in the activation buffers and KV pages: time the
	 * second, the steady state a server sees */
	int rc;
	if ((rc = run_prefill(e, a->prompt, a->vocab, a->mb, &ptps)) ||
	    (rc = run_prefill(e, a->prompt, a->vocab, a->mb, &ptps))) {
		fprintf(stderr, "bench engine: prefill failed: %s\n", err_str(rc));
		return rc;
	}
	/* the LM head runs for the last row only */
	double p_layers, p_head;
	step_weight_params(m, &p_layers, &p_head);
	const double gflops = 2.0 * (p_layers + p_head / a->prompt) * ptps / 1e9;
	printf("prefill: %d tokens: %.1f tokens/s, %.1f GFLOP/s of matmul", a->prompt, ptps,
	       gflops);
	if (l->peak > 0)
		printf(" (%.0f%% of %s peak)", 100.0 * gflops / l->peak, l->peak_name);
	printf("\n");
	return 0;
}

static int report_decode(struct engine *e, const struct bench_args *a, const struct model *m,
			 const struct limits *l)
{
	const double wbytes = step_weight_bytes(m, a->quant);
	double tps1 = 0;
	for (int i = 0; i < a->n_batches; i++) {
		double step;
		int rc = run_decode(e, a->batches[i], a->decode_ctx, a->steps, a->vocab, a->mb, &step);
		if (rc) {
			fprintf(stderr, "bench engine: decode failed: %s\n", err_str(rc));
			return rc;
		}
		const double tps = a->batches[i] / step, abw = wbytes / step / 1e9;
		if (a->batches[i] == 1)
			tps1 = tps;
		printf("decode: batch %3d: %8.1f tokens/s, step %7.2f ms, weights %.1f GB/s",
		       a->batches[i], tps, step * 1e3, abw);
		if (l->bw > 0)
			printf(" = %3.0f%% of %s", 100.0 * abw / l->bw, a->cuda ? "HBM" : "triad");
		if (tps1 > 0 && a->batches[i] > 1)
			printf(", %.1fx batch 1", tps / tps1);
		printf("\n");
	}
	return 0;
}

int bench_engine_main(int argc, char **argv)
{
	struct bench_args a;
	int rc = parse_args(argc, argv, &a);
	if (rc == CLI_HELP)
		return 0;
	if (rc || resolve_args(&a))
		return 2;
	struct synth s = { 0 };
	struct model *loaded = NULL;
	const struct model *m;
	if (get_model(&a, &s, &loaded, &m)) {
		synth_free(&s);
		return 1;
	}
	const int tokens = a.prompt > a.max_b ? a.prompt : a.max_b;
	struct engine_opts eo = { .n_threads = a.threads, .block_size = 16,
				  .n_kv_blocks = (a.max_b > 16 ? a.max_b : 16) * a.mb,
				  .kv_dtype = a.kvdt, .quantization = a.quant,
				  .max_batch_tokens = tokens, .max_seqs = a.max_b,
				  .max_blocks_per_seq = a.mb, .device = a.dev,
				  .enforce_eager = a.eager };
	struct engine *e = NULL;
	struct kpool *pool = NULL;
	struct diag d = { 0 };
	const double t0 = now_s();
	if ((rc = engine_create(m, &eo, &e, &d)) || (rc = kpool_create(a.threads, &pool))) {
		fprintf(stderr, "bench engine: %s\n", e ? err_str(rc) : d.msg);
		engine_destroy(e);
		synth_free(&s);
		model_destroy(loaded);
		return 1;
	}
	printf("engine: %s ready in %.1f s\n", engine_backend_name(e), now_s() - t0);
	struct limits l;
	get_limits(&a, m, pool, &l);
	kpool_destroy(pool);
	rc = report_prefill(e, &a, m, &l);
	if (!rc)
		rc = report_decode(e, &a, m, &l);
	engine_destroy(e);
	synth_free(&s);
	model_destroy(loaded);
	return rc ? 1 : 0;
}
