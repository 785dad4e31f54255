/* engine/model/model.c — model_load(): open a GGUF file or an HF directory, build
 * the config (model_config.c), and bind every weight named by the tables in
 * model_names.c to struct model_weights, checking each one's shape and dtype
 * against the config so the engine can trust them. Weights stay in the file
 * mappings; only FP8 scales are converted (to float) and owned here.
 * Tests: tests/models/test_model.c.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/checked.h"
#include "engine/model/gguf.h"
#include "engine/model/model.h"
#include "engine/model/model_internal.h"
#include "engine/model/safetensors.h"

struct name_idx {
	const char *name;
	int idx;
};

struct model_priv {
	struct st_set *st;
	struct name_idx *sorted; /* m->tensors by name */
	float **scales;		 /* FP8 scales converted to float */
	int n_scales;
};

const char *model_arch_name(enum model_arch a)
{
	static const char *const names[ARCH__COUNT] = { "llama", "mistral", "qwen2", "qwen3" };
	return (unsigned)a < ARCH__COUNT ? names[a] : "?";
}

uint64_t model_weight_bytes(const struct model *m)
{
	uint64_t total = 0;
	for (int i = 0; i < m->n_tensors; i++)
		total += m->tensors[i].n_bytes;
	return total;
}

void model_destroy(struct model *m)
{
	if (!m)
		return;
	struct model_priv *p = m->priv;
	if (p) {
		st_set_close(p->st);
		free(p->sorted);
		for (int i = 0; i < p->n_scales; i++)
			free(p->scales[i]);
		free(p->scales);
		free(p);
	}
	gguf_close(m->gguf);
	free(m->w.layers);
	free(m->tensors);
	free(m->cfg.chat_template);
	free(m->path);
	free(m->tokenizer_json_path);
	free(m->tokenizer_config_path);
	free(m);
}

/* ---- tensor lookup --------------------------------------------------------- */

static int name_cmp(const void *a, const void *b)
{
	return strcmp(((const struct name_idx *)a)->name, ((const struct name_idx *)b)->name);
}

static int index_tensors(struct model *m, struct diag *d)
{
	struct model_priv *p = m->priv;
	p->sorted = malloc((size_t)(m->n_tensors ? m->n_tensors : 1) * sizeof *p->sorted);
	if (!p->sorted)
		return diag_set(d, ERR_NOMEM, "out of memory");
	for (int i = 0; i < m->n_tensors; i++)
		p->sorted[i] = (struct name_idx){ m->tensors[i].name, i };
	qsort(p->sorted, (size_t)m->n_tensors, sizeof *p->sorted, name_cmp);
	return 0;
}

static struct tensor *find(struct model *m, const char *name)
{
	struct model_priv *p = m->priv;
	struct name_idx key = { name, 0 };
	const struct name_idx *hit =
		m->n_tensors ? bsearch(&key, p->sorted, (size_t)m->n_tensors, sizeof key, name_cmp) : NULL;
	return hit ? &m->tensors[hit->idx] : NULL;
}

/* ---- binding --------------------------------------------------------------- */

/* Element i of an F32 / F16 / BF16 tensor (the caller checked the dtype). */
static float tensor_float(const struct tensor *s, uint64_t i)
{
	if (s->dtype == DT_F32) {
		float f;
		memcpy(&f, (const char *)s->data + i * 4, 4);
		return f;
	}
	uint16_t h;
	memcpy(&h, (const char *)s->data + i * 2, 2);
	return s->dtype == DT_F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

static uint64_t tensor_count(const struct tensor *s)
{
	uint64_t n = 1;
	for (int i = 0; i < s->n_dims; i++)
		n *= (uint64_t)s->shape[i];
	return n;
}

/* The values of scale tensor s (F32/F16/BF16) as floats the model owns
 * (freed with it); NULL when out of memory. */
static float *own_floats(struct model *m, const struct tensor *s)
{
	struct model_priv *p = m->priv;
	const uint64_t n = tensor_count(s);
	float **ns = realloc(p->scales, (size_t)(p->n_scales + 1) * sizeof *ns);
	if (!ns)
		return NULL;
	p->scales = ns;
	float *v = malloc((size_t)n * sizeof *v);
	if (!v)
		return NULL;
	p->scales[p->n_scales++] = v;
	for (uint64_t i = 0; i < n; i++)
		v[i] = tensor_float(s, i);
	return v;
}

/* FP8 weights carry "<name>_scale": a scalar (per tensor) or one value per
 * output row, in F32/F16/BF16. */
static int bind_scale(struct model *m, struct tensor *t, struct diag *d)
{
	char sname[300];
	snprintf(sname, sizeof sname, "%s_scale", t->name);
	const struct tensor *s = find(m, sname);
	if (!s)
		return diag_set(d, ERR_FORMAT, "%s: F8_E4M3 weight without %s", t->name, sname);
	const uint64_t n = tensor_count(s);
	if (n != 1 && n != (uint64_t)t->shape[0])
		return diag_set(d, ERR_FORMAT, "%s: %llu scales for %lld rows (want 1 or one per row)",
				sname, (unsigned long long)n, (long long)t->shape[0]);
	if (s->dtype != DT_F32 && s->dtype != DT_F16 && s->dtype != DT_BF16)
		return diag_set(d, ERR_FORMAT, "%s: scales must be F32/F16/BF16, not %s", sname,
				dtype_name(s->dtype));
	float *v = own_floats(m, s);
	if (!v)
		return diag_set(d, ERR_NOMEM, "out of memory");
	t->scale = v;
	t->n_scale = (int64_t)n;
	return 0;
}

static int bind_one(struct model *m, const struct model_tensor_name *e, int il, struct tensor *dst,
		    struct diag *d)
{
	char name[160];
	model_tensor_name(e, m->format, il, name, sizeof name);
	if (!model_tensor_wanted(&m->cfg, e->cond))
		return 0;
	struct tensor *t = find(m, name);
	if (!t)
		return diag_set(d, ERR_FORMAT, "missing tensor %s", name);
	bool ok = t->n_dims == e->n_dims;
	for (int i = 0; ok && i < e->n_dims; i++)
		ok = t->shape[i] == model_dim(&m->cfg, e->dims[i]);
	if (!ok) {
		if (e->n_dims == 2)
			return diag_set(d, ERR_FORMAT, "%s: shape (%lld, %lld) but the config needs (%lld, %lld)",
					name, (long long)t->shape[0], (long long)(t->n_dims > 1 ? t->shape[1] : 0),
					(long long)model_dim(&m->cfg, e->dims[0]),
					(long long)model_dim(&m->cfg, e->dims[1]));
		return diag_set(d, ERR_FORMAT, "%s: shape (%lld%s) but the config needs (%lld)", name,
				(long long)t->shape[0], t->n_dims > 1 ? ", ..." : "",
				(long long)model_dim(&m->cfg, e->dims[0]));
	}
	if (e->n_dims == 1 && t->dtype != DT_F32 && t->dtype != DT_F16 && t->dtype != DT_BF16)
		return diag_set(d, ERR_UNSUPPORTED, "%s: %s vectors are not supported", name,
				dtype_name(t->dtype));
	if (t->dtype == DT_F8_E4M3 && !t->scale) {
		int rc = bind_scale(m, t, d);
		if (rc)
			return rc;
	}
	*dst = *t;
	return 0;
}

/* The FP8 KV cache's scale of layer il for which ("k" or "v"), as vLLM
 * reads llm-compressor checkpoints: self_attn.<which>_scale, else the older
 * self_attn.kv_scale (both K and V). One value, or one per KV head (*head:
 * the values, owned by the model; *out their largest). F32/F16/BF16, finite
 * and > 0. *out stays 0 and *head NULL when the checkpoint has neither. */
static int bind_kv_scale(struct model *m, int il, const char *which, float *out,
			 const float **head, struct diag *d)
{
	char name[160];
	snprintf(name, sizeof name, "model.layers.%d.self_attn.%s_scale", il, which);
	const struct tensor *s = find(m, name);
	if (!s) {
		snprintf(name, sizeof name, "model.layers.%d.self_attn.kv_scale", il);
		if (!(s = find(m, name)))
			return 0;
	}
	const uint64_t n = tensor_count(s);
	if (s->dtype != DT_F32 && s->dtype != DT_F16 && s->dtype != DT_BF16)
		return diag_set(d, ERR_FORMAT, "%s: KV cache scales must be F32/F16/BF16, not %s",
				name, dtype_name(s->dtype));
	if (n != 1 && n != (uint64_t)m->cfg.n_kv_heads)
		return diag_set(d, ERR_FORMAT, "%s: %llu values (want 1, or one per KV head: %d)",
				name, (unsigned long long)n, m->cfg.n_kv_heads);
	float top = 0.0f;
	for (uint64_t i = 0; i < n; i++) {
		const float f = tensor_float(s, i);
		if (!(isfinite(f) && f > 0.0f))
			return diag_set(d, ERR_FORMAT, "%s: scale %g (want finite and > 0)", name,
					(double)f);
		top = fmaxf(top, f);
	}
	float *v = NULL;
	if (n > 1 && !(v = own_floats(m, s)))
		return diag_set(d, ERR_NOMEM, "out of memory");
	*out = top;
	*head = v;
	return 0;
}

static int bind_weights(struct model *m, struct diag *d)
{
	int rc = index_tensors(m, d);
	if (rc)
		return rc;
	m->w.layers = calloc((size_t)m->cfg.n_layers, sizeof *m->w.layers);
	if (!m->w.layers)
		return diag_set(d, ERR_NOMEM, "out of memory");
	for (int i = 0; i < model_n_global_names; i++) {
		const struct model_tensor_name *e = &model_global_names[i];
		if ((rc = bind_one(m, e, 0, (struct tensor *)((char *)&m->w + e->off), d)))
			return rc;
	}
	if (m->cfg.tied_embeddings)
		m->w.lm_head = m->w.tok_embd;
	for (int il = 0; il < m->cfg.n_layers; il++)
		for (int i = 0; i < model_n_layer_names; i++) {
			const struct model_tensor_name *e = &model_layer_names[i];
			if ((rc = bind_one(m, e, il, (struct tensor *)((char *)&m->w.layers[il] + e->off), d)))
				return rc;
		}
	for (int il = 0; il < m->cfg.n_layers && m->format == MODEL_FORMAT_HF; il++) {
		struct layer_weights *L = &m->w.layers[il];
		if ((rc = bind_kv_scale(m, il, "k", &L->k_scale, &L->k_head_scale, d)) ||
		    (rc = bind_kv_scale(m, il, "v", &L->v_scale, &L->v_head_scale, d)))
			return rc;
	}
	const struct tensor *rf = find(m, "rope_freqs.weight");
	if (rf && m->format == MODEL_FORMAT_GGUF) {
		if (rf->dtype != DT_F32 || rf->n_dims != 1 || rf->shape[0] != m->cfg.head_dim / 2)
			return diag_set(d, ERR_FORMAT, "rope_freqs.weight: want F32 (%d)", m->cfg.head_dim / 2);
		m->w.rope_freqs = *rf;
	}
	return 0;
}

/* ---- progress -------------------------------------------------------------- */

/* Touch every page of the weights so the first request does not pay for the
 * page faults, with a progress line when a person is watching. */
static void prefault(const struct model *m)
{
	uint64_t total = model_weight_bytes(m), done = 0;
	if (!isatty(STDERR_FILENO) || total < (256u << 20))
		return;
	long page = sysconf(_SC_PAGESIZE);
	if (page <= 0)
		page = 4096;
	volatile uint8_t sink = 0;
	int last = -1;
	for (int i = 0; i < m->n_tensors; i++) {
		const uint8_t *p = m->tensors[i].data;
		for (uint64_t off = 0; off < m->tensors[i].n_bytes; off += (uint64_t)page)
			sink ^= p[off];
		done += m->tensors[i].n_bytes;
		int pct = (int)(done * 100 / total);
		if (pct != last) {
			fprintf(stderr, "\rloading %s: %3d%% (%llu / %llu MiB)", m->cfg.name, pct,
				(unsigned long long)(done >> 20), (unsigned long long)(total >> 20));
			last = pct;
		}
	}
	fprintf(stderr, "\n");
	(void)sink;
}

/* ---- loaders --------------------------------------------------------------- */

static int load_gguf(struct model *m, struct diag *d)
{
	int rc = gguf_open(m->path, &m->gguf, d);
	if (rc)
		return rc;
	m->format = MODEL_FORMAT_GGUF;
	if ((rc = model_config_from_gguf(m->gguf, &m->cfg, d)) ||
	    (rc = model_config_validate(&m->cfg, d)))
		return rc;
	if (!m->cfg.name[0]) {
		const char *base = strrchr(m->path, '/');
		snprintf(m->cfg.name, sizeof m->cfg.name, "%s", base ? base + 1 : m->path);
	}
	int64_t n = gguf_n_tensors(m->gguf);
	if (n > INT32_MAX)
		return diag_set(d, ERR_FORMAT, "gguf: %lld tensors", (long long)n);
	m->n_tensors = (int)n;
	m->tensors = calloc((size_t)(n ? n : 1), sizeof *m->tensors);
	if (!m->tensors)
		return diag_set(d, ERR_NOMEM, "out of memory");
	for (int64_t i = 0; i < n; i++) {
		const struct gguf_tensor_info *ti = gguf_tensor(m->gguf, i);
		struct tensor *t = &m->tensors[i];
		t->name = ti->name;
		t->dtype = ti->dtype;
		t->n_dims = ti->n_dims;
		memcpy(t->shape, ti->shape, sizeof t->shape);
		t->data = ti->data;
		t->n_bytes = ti->n_bytes;
	}
	return bind_weights(m, d);
}

static char *path_if_exists(const char *dir, const char *file)
{
	char path[4096];
	if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, file) >= sizeof path)
		return NULL;
	return access(path, R_OK) == 0 ? strdup(path) : NULL;
}

static int load_hf(struct model *m, struct diag *d)
{
	m->format = MODEL_FORMAT_HF;
	struct model_priv *p = m->priv;
	int rc = model_config_from_hf(m->path, &m->cfg, d);
	if (rc || (rc = model_config_validate(&m->cfg, d)))
		return rc;
	if ((rc = st_set_open(m->path, &p->st, d)))
		return rc;
	int64_t n = st_set_n_tensors(p->st);
	if (n > INT32_MAX)
		return diag_set(d, ERR_FORMAT, "safetensors: %lld tensors", (long long)n);
	m->n_tensors = (int)n;
	m->tensors = calloc((size_t)(n ? n : 1), sizeof *m->tensors);
	if (!m->tensors)
		return diag_set(d, ERR_NOMEM, "out of memory");
	for (int64_t i = 0; i < n; i++) {
		const struct st_tensor *st = st_set_tensor_at(p->st, i);
		struct tensor *t = &m->tensors[i];
		t->name = st->name;
		t->dtype = st->dtype;
		t->n_dims = st->n_dims;
		memcpy(t->shape, st->shape, sizeof t->shape);
		t->data = st->data;
		t->n_bytes = st->n_bytes;
	}
	m->tokenizer_json_path = path_if_exists(m->path, "tokenizer.json");
	m->tokenizer_config_path = path_if_exists(m->path, "tokenizer_config.json");
	return bind_weights(m, d);
}

int model_load(const char *path, struct model **out, struct diag *d)
{
	struct stat st;
	if (stat(path, &st))
		return diag_set(d, ERR_NOTFOUND, "%s: %s", path, strerror(errno));
	struct model *m = calloc(1, sizeof *m);
	struct model_priv *p = calloc(1, sizeof *p);
	if (!m || !p) {
		free(m);
		free(p);
		return diag_set(d, ERR_NOMEM, "out of memory");
	}
	m->priv = p;
	m->path = strdup(path);
	int rc;
	if (!m->path)
		rc = diag_set(d, ERR_NOMEM, "out of memory");
	else if (S_ISDIR(st.st_mode))
		rc = load_hf(m, d);
	else
		rc = load_gguf(m, d);
	if (rc) {
		model_destroy(m);
		return rc;
	}
	prefault(m);
	*out = m;
	return 0;
}
