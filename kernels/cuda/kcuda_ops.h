/* kernels/cuda/kcuda_ops.h — the elementwise and per-row kernels of the CUDA
 * forward pass: embedding gather, residual add fused with RMSNorm, Q/K/V
 * post-processing fused with RoPE and the paged KV write, SwiGLU, the norm
 * and SwiGLU fused with per-token quantization, the F32 cast.
 *
 * Plain C launchers (no CUDA header here). Each takes a stream (NULL = the
 * default stream), checks its arguments (ERR_INVAL), launches, and checks
 * the launch (ERR_DEVICE, text in k_cuda_last_error()); none synchronizes,
 * so all of them can be captured in a CUDA graph. d_* are device pointers.
 * CPU counterparts: kernels/cpu/ops.h (kops_*_ref) and engine/backend/cpu_forward.c;
 * tests: tests/kernels/test_cuda_ops.c.
 *
 * 16-bit outputs (out_dt DT_F16 or DT_BF16) are rounded to nearest even from
 * the F32 result; DT_F32 outputs are also accepted everywhere out_dt is.
 * Errors: ERR_INVAL for a NULL pointer, a negative count, a zero size or an
 * out-of-range enum; ERR_UNSUPPORTED for a known dtype other than F32, F16,
 * BF16 or a shape past a launch limit. A zero row count launches nothing.
 * Implementation: kernels/cuda/k_ops.cu.
 */
#ifndef AORTA_KERNELS_CUDA_KCUDA_OPS_H
#define AORTA_KERNELS_CUDA_KCUDA_OPS_H

#include <stdint.h>

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* d_x[r, :] = float(table[tokens[r], :]) for r < n_rows; table is
 * [vocab, hidden] in table_dt (DT_F32, DT_F16 or DT_BF16). The caller has
 * checked the token ids. */
int k_embed(void *stream, const void *d_table, enum dtype table_dt, int hidden,
	    const int32_t *d_tokens, int n_rows, float *d_x);

/* For every row r < n_rows: if d_add, d_x[r] += d_add[r]; then
 * d_out[r] = d_x[r] / rms(d_x[r]) * d_w (F32 math, eps inside the sqrt, as
 * kops_rmsnorm_ref; the sum of squares in F32). d_x, d_add: F32
 * [n_rows, hidden]; d_w: F32 [hidden]; d_out: [n_rows, hidden] in out_dt
 * (may equal d_x when out_dt is DT_F32; no other overlap). eps >= 0. */
int k_add_rmsnorm(void *stream, float *d_x, const float *d_add, const float *d_w, int n_rows,
		  int hidden, float eps, void *d_out, enum dtype out_dt);

/* Gathered norm for the LM head: d_out[i] = rmsnorm(d_x[d_rows[i]]) * d_w
 * for i < n_out (no add). The caller has checked the row indices; d_out must
 * not overlap d_x. */
int k_rmsnorm_rows(void *stream, const float *d_x, const int32_t *d_rows, int n_out,
		   const float *d_w, int hidden, float eps, void *d_out, enum dtype out_dt);

/* After the fused QKV GEMM. d_qkv: F32 [n_rows, q_dim + 2 * kv_dim] with
 * q_dim = n_heads * head_dim and kv_dim = n_kv_heads * head_dim, columns
 * q | k | v. Per row, in order (as engine/backend/cpu_forward.c job_qkv_post):
 *   + bias (d_bias F32 [q_dim + 2 kv_dim], may be NULL);
 *   per-head RMSNorm of q (d_q_norm F32 [head_dim]) and k (d_k_norm), both
 *     NULL or both set, eps;
 *   RoPE on q and k at d_positions[r]: angle_i = pos * d_inv_freq[i]
 *     (i < head_dim/2), NEOX pairs (i, i + half), NORM pairs (2i, 2i+1)
 *     (style: 0 = NEOX, 1 = NORM, as enum kops_rope_style); the product is
 *     taken in double (as kops_rope_angles), reduced to [-pi, pi] in double,
 *     then sincosf: cos/sin within ~2e-7 of the CPU's at any position (an F32
 *     product is off by ~4e-3 rad at pos 100000);
 *   q written to d_q (F32 [n_rows, q_dim]);
 *   k and v stored into the layer's paged pools d_k_cache / d_v_cache
 *     (kv_dt: DT_F32, DT_F16 or DT_BF16) at slot d_slots[r], laid out as
 *     kops_kv_offset(slot / block_size, slot % block_size, head, ...); a
 *     negative slot means "do not store" (padding rows of a CUDA graph).
 * The caller has checked every slot against the pool and keeps the slots of
 * one call distinct. head_dim must be even and <= 1024 (ERR_UNSUPPORTED
 * above). */
struct k_qkv_args {
	const float *qkv;
	const float *bias;
	const float *q_norm, *k_norm;
	float eps;
	const float *inv_freq;
	int rope_style;
	const int32_t *positions;
	const int32_t *slots;
	int n_rows, n_heads, n_kv_heads, head_dim, block_size;
	float *q;
	void *k_cache, *v_cache;
	enum dtype kv_dt;      /* DT_F32, DT_F16, DT_BF16, or DT_F8_E4M3 (issue 10): */
	float k_scale, v_scale; /* FP8 only, > 0: the pool stores value / scale,
				 * rounded to nearest even and saturated to +-448
				 * (f32_to_f8e4m3); the attention kernels multiply back */
	/* FP8 only, optional: device [n_kv_heads] scales of each KV head, used
	 * instead of k_scale / v_scale where not NULL (as k_attn_args) */
	const float *k_head_scale, *v_head_scale;
};
int k_qkv_rope_store(void *stream, const struct k_qkv_args *a);

/* d_out[r, i] = silu(gu[r, i]) * gu[r, ffn + i] for i < ffn; d_gu is F32
 * [n_rows, 2 * ffn] (gate columns then up columns, the fused GEMM's output);
 * d_out is [n_rows, ffn] in out_dt. */
int k_silu_mul(void *stream, const float *d_gu, int n_rows, int ffn, void *d_out,
	       enum dtype out_dt);

/* For the W8A8 prefill (kcuda_quant.h): k_add_rmsnorm without d_add (d_x
 * is only read) and k_silu_mul, each followed by per-token quantization of
 * the out_dt rows it would have written. Only the codes d_xq [n_rows, n]
 * (one byte each, n = hidden or ffn) and the row scales d_scale[n_rows] are
 * written: bit for bit what k_quant_rows(rows, out_dt, n_rows, n, q_dt)
 * gives on the rows those kernels write to an aligned buffer, without
 * writing or reading the rows themselves. q_dt DT_F8_E4M3 or DT_I8 (another
 * known dtype: ERR_UNSUPPORTED). k_silu_mul_quant keeps a row in shared
 * memory: ffn * 2 bytes (4 for DT_F32) up to 160 KB, else ERR_UNSUPPORTED. */
int k_rmsnorm_quant(void *stream, const float *d_x, const float *d_w, int n_rows, int hidden,
		    float eps, enum dtype out_dt, enum dtype q_dt, void *d_xq, float *d_scale);
int k_silu_mul_quant(void *stream, const float *d_gu, int n_rows, int ffn, enum dtype out_dt,
		     enum dtype q_dt, void *d_xq, float *d_scale);

/* d_out[i] = (out_dt) d_in[i] for i < n (F32 -> F16/BF16/F32). */
int k_cast_f32(void *stream, const float *d_in, size_t n, void *d_out, enum dtype out_dt);

#ifdef __cplusplus
}
#endif

#endif
