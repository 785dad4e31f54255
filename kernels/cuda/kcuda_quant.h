/* kernels/cuda/kcuda_quant.h — 8-bit weight paths on the GPU (INT8, Q8_0,
 * FP8 E4M3): weight-only GEMV for small batches (and an optional repacked
 * Q8_0 layout for it), W8A8 GEMMs through cuBLASLt for prefill, per-token
 * activation quantization. Launchers never synchronize; plain C.
 *
 * Same shapes as kcuda_gemm.h: Y[T, N] (F32, accumulate != 0 adds) =
 * X[T, K] · dequant(W)[N, K]^T. Weight layouts are those of the CPU engine
 * (engine/model/model.h struct tensor, kernels/cpu/quant.h): DT_I8 and DT_F8_E4M3
 * one byte per value with scale[N] per output row, or one scale for the
 * whole tensor (n_scales == 1); DT_Q8_0 rows of 34-byte blocks (F16 scale +
 * 32 int8). CPU counterparts: kernels/cpu matmul on the same weights;
 * tests: tests/kernels/test_cuda_quant.c.
 */
#ifndef AORTA_KERNELS_CUDA_KCUDA_QUANT_H
#define AORTA_KERNELS_CUDA_KCUDA_QUANT_H

#include <stdint.h>

#include "kernels/cuda/kcuda_gemm.h"
#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Weight-only: reads each weight byte once per call, dequantizes in
 * registers, F32 accumulation; X is 16-bit (x_dt DT_F16 / DT_BF16; DT_F32
 * is accepted too). Built for t <= 16 (one pass over W per 16 tokens, 8 for
 * Q8_0); correct for any t up to 65535 * 8. On stream, asynchronously.
 * DT_I8 / DT_F8_E4M3: k a multiple of 16 and d_w 16-byte aligned (else
 * ERR_UNSUPPORTED); d_scale[n_scales] with n_scales 1 or n (else ERR_INVAL),
 * or d_scale NULL for a scale of 1 (as the CPU). DT_Q8_0: the CPU's 34-byte
 * blocks as they are (no repacked layout), k a multiple of 32 and d_w 2-byte
 * aligned (else ERR_INVAL); d_scale ignored. Other w_dt: ERR_UNSUPPORTED.
 * ERR_INVAL for NULL pointers, n, k or t <= 0, or an x_dt above. */
int k_gemv_w8(void *stream, const void *d_w, enum dtype w_dt, const float *d_scale, int n_scales,
              int n, int k, const void *d_x, enum dtype x_dt, int t, float *d_y, int accumulate);

/* Q8_0 repacked for the GPU (optional, faster): the CPU's 34-byte blocks
 * are only 2-byte aligned, so k_gemv_w8(DT_Q8_0) reads them as halfwords
 * (correct, but well below the bandwidth of I8). k_q8_0_repack splits them,
 * on the device, into codes d_qs [n, k] (int8, n * k bytes, 16-byte aligned)
 * and scales d_d [n, k / 32] (F16, 2-byte aligned); d_src is n * k / 32
 * blocks; no overlap. k_gemv_q8_0r then runs the I8 kernel with a scale per
 * 32 values: same results as k_gemv_w8(DT_Q8_0) up to summation order.
 * Both on stream; ERR_INVAL for NULL or misaligned pointers, n or k <= 0,
 * k not a multiple of 32, or another x_dt. */
int k_q8_0_repack(void *stream, const void *d_src, int n, int k, void *d_qs, void *d_d);
int k_gemv_q8_0r(void *stream, const void *d_qs, const void *d_d, int n, int k, const void *d_x,
                 enum dtype x_dt, int t, float *d_y, int accumulate);

/* Dequantize W [n, k] to 16-bit (out_dt DT_F16 / DT_BF16, or DT_F32), for
 * the weight-only dequantizing GEMM (dequantize, then k_gemm) of prefill
 * steps: DT_I8 / DT_F8_E4M3 with d_scale[n_scales] (1 or n; NULL = 1) and
 * d_q8_d NULL; DT_Q8_0 in the repacked layout of k_q8_0_repack (d_w the
 * codes, d_q8_d the F16 scales, k a multiple of 32). out[r, c] =
 * code * scale, rounded once (the CPU's kcpu_dequant_row then rounding).
 * On stream; ERR_INVAL for NULL pointers or sizes, ERR_UNSUPPORTED for
 * another w_dt / out_dt. */
int k_dequant_w8(void *stream, const void *d_w, enum dtype w_dt, const float *d_scale,
		 int n_scales, const void *d_q8_d, int n, int k, void *d_out, enum dtype out_dt);

/* Per-token (row) quantization of X [t, k] (x_dt 16-bit or F32) to q_dt,
 * codes d_xq [t, k] (one byte each) and scales d_scale[t], bit for bit the
 * CPU's rules (kernels/cpu/quant.c): DT_I8 as kcpu_quantize_act_i8
 * (scale = amax / 127, q = round-to-nearest-even(x * (1 / scale)) clamped to
 * [-127, 127]); DT_F8_E4M3 as kcpu_quantize_f8 per row (scale = amax / 448,
 * q = fp8(x * (1 / scale)), nearest even, saturating). An all-zero row gets scale
 * 0 and codes 0. On stream. ERR_UNSUPPORTED for another q_dt. */
int k_quant_rows(void *stream, const void *d_x, enum dtype x_dt, int t, int k, enum dtype q_dt,
                 void *d_xq, float *d_scale);

/* W8A8 through cuBLASLt: Y[t, n] (+)= (Xq · Wq^T) * x_scale[row] *
 * w_scale[col or 0], on the handle's stream (k_blas_stream), no allocation
 * (capturable). Xq and x_scale come from k_quant_rows with the same dtype
 * (or from k_rmsnorm_quant / k_silu_mul_quant, kcuda_ops.h: the same codes).
 * DT_F8_E4M3 needs FP8 tensor cores (cc >= 8.9, asked once per device; else
 * ERR_UNSUPPORTED); DT_I8 uses the INT32-accumulating integer GEMM. The
 * GEMM runs with unit scales into a 4-byte accumulator (Y itself, or with
 * accumulate != 0 row chunks of the handle's workspace) and a small kernel
 * applies the scales; fewer than 32 tokens are padded to 32 in the
 * workspace. n and k multiples of 16 and d_w, d_xq, d_y 16-byte aligned
 * (cuBLASLt's 8-bit kernels), else ERR_UNSUPPORTED (also when the 32 MiB
 * workspace cannot hold the scratch: accumulate with n > 98304); n_w_scales
 * 1 or n and non-NULL pointers, else ERR_INVAL. */
int k_gemm_w8a8(struct k_blas *h, const void *d_w, enum dtype w_dt, const float *d_w_scale,
                int n_w_scales, int n, int k, const void *d_xq, const float *d_x_scale, int t,
                float *d_y, int accumulate);

#ifdef __cplusplus
}
#endif

#endif
