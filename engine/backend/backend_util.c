/* engine/backend/backend_util.c — what every backend needs the same way: the model
 * config's sanity checks, the RoPE inverse frequencies (with linear,
 * llama3 or GGUF rope_freqs scaling), weight views, and the bytes of one KV
 * block (engine_kv_block_bytes, engine/batch.h: public, for sizing the pool).
 * Pure functions; any thread. Tested through the engines (tests/reference/
 * checks llama3 scaling against numpy; tests/engine/test_engine.c the KV
 * block bytes).
 */
#include <math.h>

#include "common/checked.h"
#include "engine/backend/backend.h"

/* RoPE inverse frequencies with the config's scaling (HF
 * _compute_llama3_parameters for llama3), computed in double. A GGUF file's
 * rope_freqs tensor (llama.cpp's "freq factors", how Llama 3.1+ GGUF files
 * carry their llama3 scaling) divides each frequency instead; it replaces a
 * llama3 scaling from the config rather than stacking on it. */
void backend_rope_inv_freq(const struct model_config *c, const struct tensor *freq_factors,
			  float *out)
{
	const int half = c->head_dim / 2;
	const float *ff = NULL;
	if (tensor_present(freq_factors) && freq_factors->dtype == DT_F32 &&
	    freq_factors->n_bytes >= (uint64_t)half * sizeof(float))
		ff = freq_factors->data;
	for (int i = 0; i < half; i++) {
		double f = pow((double)c->rope_theta, -2.0 * i / (double)c->head_dim);
		if (ff) {
			f /= (double)ff[i];
		} else if (c->rope_scaling.type == ROPE_SCALING_LINEAR && c->rope_scaling.factor > 0) {
			f /= c->rope_scaling.factor;
		} else if (c->rope_scaling.type == ROPE_SCALING_LLAMA3) {
			double factor = c->rope_scaling.factor, lo = c->rope_scaling.low_freq_factor,
			       hi = c->rope_scaling.high_freq_factor,
			       old = c->rope_scaling.original_max_pos;
			double wavelen = 2.0 * M_PI / f;
			double lo_wavelen = old / lo, hi_wavelen = old / hi;
			if (wavelen > lo_wavelen) {
				f /= factor;
			} else if (wavelen >= hi_wavelen) { /* between: blend */
				double smooth = (old / wavelen - lo) / (hi - lo);
				f = (1.0 - smooth) * f / factor + smooth * f;
			}
		}
		out[i] = (float)f;
	}
}

int backend_check_config(const struct model_config *c, struct diag *d)
{
	if (c->n_layers <= 0 || c->hidden <= 0 || c->n_heads <= 0 || c->n_kv_heads <= 0 ||
	    c->head_dim <= 0 || c->ffn <= 0 || c->vocab <= 0)
		return diag_set(d, ERR_FORMAT, "model config has a non-positive size");
	if (c->n_heads % c->n_kv_heads)
		return diag_set(d, ERR_FORMAT, "n_heads %d is not a multiple of n_kv_heads %d",
				c->n_heads, c->n_kv_heads);
	if (c->head_dim % 2)
		return diag_set(d, ERR_FORMAT, "head_dim %d is odd", c->head_dim);
	if (!(c->rope_theta > 0))
		return diag_set(d, ERR_FORMAT, "rope_theta must be positive");
	if (c->rope_scaling.type == ROPE_SCALING_LLAMA3 &&
	    !(c->rope_scaling.factor > 0 && c->rope_scaling.low_freq_factor > 0 &&
	      c->rope_scaling.high_freq_factor > c->rope_scaling.low_freq_factor &&
	      c->rope_scaling.original_max_pos > 0))
		return diag_set(d, ERR_FORMAT, "llama3 rope scaling parameters are invalid");
	/* hidden * n_heads * head_dim products are taken as int64 below; keep
	 * every single dimension in int range and sane. */
	if ((int64_t)c->n_heads * c->head_dim > (1 << 24) || c->hidden > (1 << 24) ||
	    c->ffn > (1 << 26))
		return diag_set(d, ERR_FORMAT, "model dimensions are implausibly large");
	return 0;
}

int backend_matrix_view(const struct tensor *t, int64_t rows, int64_t cols, struct kmat *out,
			struct diag *d)
{
	const char *name = t->name ? t->name : "(unnamed)";
	if (!tensor_present(t))
		return diag_set(d, ERR_FORMAT, "%s: weight missing", name);
	if (t->n_dims != 2 || t->shape[0] != rows || t->shape[1] != cols)
		return diag_set(d, ERR_FORMAT, "%s: shape is not (%lld, %lld)", name, (long long)rows,
				(long long)cols);
	if (!(t->dtype == DT_F32 || t->dtype == DT_F16 || t->dtype == DT_BF16 ||
	      t->dtype == DT_Q8_0 || t->dtype == DT_I8 || t->dtype == DT_F8_E4M3))
		return diag_set(d, ERR_UNSUPPORTED, "%s: weight dtype %s is not supported", name,
				dtype_name(t->dtype));
	uint64_t row_bytes, total;
	if (dtype_row_bytes(t->dtype, (uint64_t)cols, &row_bytes) ||
	    ck_mul_u64(row_bytes, (uint64_t)rows, &total) || t->n_bytes < total)
		return diag_set(d, ERR_FORMAT, "%s: %llu bytes is too small for its shape", name,
				(unsigned long long)t->n_bytes);
	if ((t->dtype == DT_I8 || t->dtype == DT_F8_E4M3) &&
	    (!t->scale || !(t->n_scale == 1 || t->n_scale == rows)))
		return diag_set(d, ERR_FORMAT, "%s: needs 1 or %lld scales", name, (long long)rows);
	*out = (struct kmat){ .dtype = t->dtype, .rows = rows, .cols = cols, .data = t->data,
			      .scale = t->scale, .n_scale = t->n_scale };
	return 0;
}

size_t engine_kv_block_bytes(const struct model_config *cfg, int block_size, enum dtype kv_dtype)
{
	size_t esize = kv_dtype == DT_F16 || kv_dtype == DT_BF16 ? 2
		       : kv_dtype == DT_F32				? 4
		       : kv_dtype == DT_F8_E4M3			? 1
									: 0;
	size_t n;
	if (!cfg || esize == 0 || block_size <= 0 || cfg->n_layers <= 0 || cfg->n_kv_heads <= 0 ||
	    cfg->head_dim <= 0)
		return 0;
	if (ck_mul((size_t)cfg->n_kv_heads, (size_t)cfg->head_dim, &n) || ck_mul(n, esize, &n) ||
	    ck_mul(n, (size_t)block_size, &n) || ck_mul(n, 2 * (size_t)cfg->n_layers, &n))
		return 0; /* overflow: no pool of this shape can exist */
	return n;
}
