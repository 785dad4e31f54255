/* kernels/cpu/ops_ref.c — the reference versions of the forward-pass ops
 * (see ops.h): plain scalar C, written to be read, not to be fast. Every fast
 * op in ops_fast.c is tested against these in tests/kernels/test_ops.c, and the
 * whole forward pass against a numpy model in tests/reference/.
 */
#include <math.h>
#include <string.h>

#include "ops.h"

void kops_rmsnorm_ref(float *out, const float *x, const float *w, int n, float eps)
{
	double ss = 0.0; /* double: the reference should not lose bits on long rows */
	for (int i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	float inv = (float)(1.0 / sqrt(ss / n + eps));
	for (int i = 0; i < n; i++)
		out[i] = x[i] * inv * w[i];
}

void kops_add_ref(float *x, const float *y, int n)
{
	for (int i = 0; i < n; i++)
		x[i] += y[i];
}

void kops_silu_mul_ref(float *out, const float *gate, const float *up, int n)
{
	for (int i = 0; i < n; i++) {
		float g = gate[i];
		out[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

void kops_rope_angles(int pos, const float *inv_freq, int half, float *cos_out, float *sin_out)
{
	for (int i = 0; i < half; i++) {
		double a = (double)pos * (double)inv_freq[i];
		cos_out[i] = (float)cos(a);
		sin_out[i] = (float)sin(a);
	}
}

void kops_rope_ref(float *x, int n_heads, int head_dim, const float *cos_t, const float *sin_t,
		   enum kops_rope_style style)
{
	const int half = head_dim / 2;
	for (int h = 0; h < n_heads; h++) {
		float *v = x + (long)h * head_dim;
		for (int i = 0; i < half; i++) {
			/* NEOX rotates (i, i+half) — HF rotate_half; NORM rotates (2i, 2i+1). */
			int i0 = style == KOPS_ROPE_NEOX ? i : 2 * i;
			int i1 = style == KOPS_ROPE_NEOX ? i + half : 2 * i + 1;
			float a = v[i0], b = v[i1];
			v[i0] = a * cos_t[i] - b * sin_t[i];
			v[i1] = b * cos_t[i] + a * sin_t[i];
		}
	}
}

void kops_store_row(enum dtype kv, void *dst, const float *src, int n)
{
	if (kv == DT_F16) {
		uint16_t *d = dst;
		for (int i = 0; i < n; i++)
			d[i] = f32_to_f16(src[i]);
	} else {
		memcpy(dst, src, (size_t)n * sizeof(float));
	}
}

static float kv_at(enum dtype kv, const void *base, long idx)
{
	if (kv == DT_F16)
		return f16_to_f32(((const uint16_t *)base)[idx]);
	return ((const float *)base)[idx];
}

void kops_attn_head_ref(const struct kops_attn_args *a)
{
	const int hd = a->head_dim;
	float *s = a->scratch;
	float max = -INFINITY;
	for (int t = 0; t < a->n_ctx; t++) {
		long base = kops_kv_offset(a->block_table[t / a->block_size], t % a->block_size,
					   a->kv_head, a->n_kv_heads, a->block_size, hd);
		float dot = 0.0f;
		for (int i = 0; i < hd; i++)
			dot += a->q[i] * kv_at(a->kv_dtype, a->k_cache, base + i);
		s[t] = dot * a->scale;
		if (s[t] > max)
			max = s[t];
	}
	float sum = 0.0f;
	for (int t = 0; t < a->n_ctx; t++) {
		s[t] = expf(s[t] - max);
		sum += s[t];
	}
	for (int i = 0; i < hd; i++)
		a->out[i] = 0.0f;
	for (int t = 0; t < a->n_ctx; t++) {
		long base = kops_kv_offset(a->block_table[t / a->block_size], t % a->block_size,
					   a->kv_head, a->n_kv_heads, a->block_size, hd);
		float p = s[t] / sum;
		for (int i = 0; i < hd; i++)
			a->out[i] += p * kv_at(a->kv_dtype, a->v_cache, base + i);
	}
}

void kops_attn_group_ref(const struct kops_attn_args *a, int n_q)
{
	for (int g = 0; g < n_q; g++) {
		struct kops_attn_args h = *a;
		h.q = a->q + (long)g * a->head_dim;
		h.out = a->out + (long)g * a->head_dim;
		kops_attn_head_ref(&h);
	}
}

int kops_argmax(const float *x, int n)
{
	if (n <= 0)
		return -1;
	int best = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}
