/* kernels/cpu/matmul_impl.h — internal to kernels/cpu: the per-instruction-set
 * inner kernels behind kcpu_matmul. matmul.c owns the loops, threading and
 * scratch; matmul_scalar.c, matmul_avx2.c and matmul_avx512.c each fill one
 * read-only table. Tile shapes: a "dot tile" is up to MM_TW weight rows times
 * up to MM_TX activation rows, reduced along k; the GEMM micro-kernel is the
 * usual broadcast kernel over a packed (kc, nr) F32 panel of W.
 */
#ifndef AORTA_KERNELS_CPU_MATMUL_IMPL_H
#define AORTA_KERNELS_CPU_MATMUL_IMPL_H

#include <stdint.h>

#include "kernels/cpu/matmul.h"

#define MM_TW 4 /* weight rows per dot tile */
#define MM_TX 4 /* activation rows per dot tile */

struct mm_kernels {
	const char *name;
	/* out[0, n) = W[r, k0 .. k0+n) in F32 with the row scale applied.
	 * Float dtypes only: F32, F16, BF16, F8_E4M3. */
	void (*cvt)(const struct kmat *w, int64_t r, int64_t k0, int64_t n, float *out);
	/* y[j*ldy + i] = sum_k w[i*ldw + k] * x[j*ldx + k], i < nw, j < nx
	 * (1 <= nw <= MM_TW, 1 <= nx <= MM_TX). */
	void (*dot_f32)(int nw, int nx, const float *w, int64_t ldw, const float *x, int64_t ldx,
			int64_t n, float *y, int64_t ldy);
	/* Like dot_f32 over whole rows, but reading W (rows r0 .. r0+nw-1 of w,
	 * a float dtype) in its storage dtype and converting in registers: for
	 * small m, where converting through scratch would cost more than the
	 * dot itself. NULL when the path has none. */
	void (*dot_w)(int nw, int nx, const struct kmat *w, int64_t r0, const float *x, int64_t ldx,
		      float *y, int64_t ldy);
	/* Broadcast GEMV for medium m (MM_TX < m <= MM_BX_LANES), NULL when the
	 * path has none. xt is X transposed and zero-padded to MM_BX_LANES
	 * columns: xt[k*MM_BX_LANES + j] = X[j][k] (0 for j >= m), k < cols.
	 * Each weight of rows r0 .. r0+nv-1 (nv <= MM_BX_ROWS), converted to F32
	 * once, is broadcast against the MM_BX_LANES X values at its k: one FMA
	 * per weight whatever m is, no horizontal sums.
	 * y[j*ldy + i] = sum_k W[r0+i][k] * X[j][k] for j < m, i < nv. */
	void (*gemv_bx)(const struct kmat *w, int64_t r0, int nv, const float *xt, int m, float *y,
			int64_t ldy);
	/* Activation quantization, bit-identical to kcpu_quantize_act_q8_0
	 * (per_block) / kcpu_quantize_act_i8 (same IEEE operations in the same
	 * order); NULL: use those. */
	void (*quant_act)(const float *x, int64_t n, int8_t *q, float *d, int per_block);
	/* Q8_0 x Q8_0-style activations: w is nw rows of nb blocks (row stride
	 * nb); xq has nb*32 int8 per row and xd nb scales per row (row strides
	 * nb*32 and nb). y[j*ldy + i] = sum_b d_w * d_x * (exact int dot of block b). */
	void (*dot_q8)(int nw, int nx, const struct q8_0_block *w, int64_t nb, const int8_t *xq,
		       const float *xd, float *y, int64_t ldy);
	/* I8: isum[j*MM_TW + i] = exact sum_k w[i*ldw + k] * xq[j*ldx + k], n <= 2^16. */
	void (*dot_i8)(int nw, int nx, const int8_t *w, int64_t ldw, const int8_t *xq, int64_t ldx,
		       int64_t n, int32_t *isum);
	/* GEMM micro-kernel (NULL when the path has none): for i < mr, c < nv:
	 * y[i*ldy + c] (+)= sum_{k<kc} x[i*ldx + k] * panel[k*nr + c]; columns
	 * nv..nr of the panel are zero padding and are not stored. */
	int mr, nr;
	void (*gemm)(int mr, int64_t kc, const float *panel, const float *x, int64_t ldx, float *y,
		     int64_t ldy, int nv, int accumulate);
	/* Integer GEMM micro-kernels over a packed int8 panel of MM_QNR weight
	 * rows (NULL when the path has none; see pack_q8/pack_i8 in matmul.c):
	 * panel[(g*MM_QNR + c)*4 + t] = W[r0+c][4g+t], so one 64-byte load holds
	 * 4 consecutive k of 16 rows (the vpdpbusd operand layout). Activations
	 * xu are unsigned: quantized value + 128, rows of ldx bytes; corr[]
	 * holds 128 * (sum of the weights it covers) to take that back out.
	 * Q8_0: nb blocks; dw[b*MM_QNR + c] the weight scales, corr per block;
	 *   y[i*ldy + c] = sum_b dw * xd[i*nb + b] * (exact block dot), c < nv.
	 * I8: ng groups of 4 k; corr per row; isum[i*MM_QNR + c] = exact dot. */
	int qmr;
	/* Pack weight rows r0 .. r0+nv-1 (nv <= MM_QNR; missing rows are zero)
	 * into panel (and dw, corr) in the layout above. */
	void (*pack_q8)(const struct kmat *w, int64_t r0, int nv, uint8_t *panel, float *dw,
			int32_t *corr);
	void (*pack_i8)(const struct kmat *w, int64_t r0, int nv, uint8_t *panel, int32_t *corr);
	void (*gemm_q8)(int mr, int64_t nb, const uint8_t *panel, const float *dw,
			const int32_t *corr, const uint8_t *xu, const float *xd, int64_t ldx,
			float *y, int64_t ldy, int nv);
	void (*gemm_i8)(int mr, int64_t ng, const uint8_t *panel, const int32_t *corr,
			const uint8_t *xu, int64_t ldx, int32_t *isum);
	/* Q8_0 for MM_INT_TILE_MAX_M < m <= MM_AMX_LANES (batched decode) with
	 * AMX-INT8 tile dot products, reading the weight blocks where they lie
	 * (one tile load: 16 rows x the 32 quants of one block), nothing packed.
	 * NULL when the path has none; amx_ok() says whether this CPU and OS
	 * allow it (asks the OS for the tile state once). Weight rows r0 ..
	 * r0+nrows-1 (any count). xt: quantized X, signed (not + 128), in the
	 * tile B layout xt[(k/4)*64 + j*4 + k%4] = X[j][k], 0 for j >= m;
	 * xdt[b*16 + j] = d_x of row j, block b, 0 for j >= m. y[j*ldy + i]
	 * (y at output column r0, i < nrows, j < m) =
	 * sum_b fma-accumulated (dw*dx) * (exact block dot), block by block:
	 * the same F32 operations in the same order as gemm_q8, bit for bit. */
	int (*amx_ok)(void);
	/* Q8_0 repacked by kcpu_pack (NULL when the path has none): one
	 * panel of MM_Q8P_ROWS weight rows (nv of them real) against mr <=
	 * MM_Q8P_MR X rows of one X chunk (layout below), whole rows of nb
	 * blocks. y[j*ldy + c] = sum_b fma-accumulated (dw*dx) * (exact block
	 * dot), block by block: gemm_q8's F32 operations in its order. */
	void (*gemm_q8p)(int mr, int64_t nb, const uint8_t *panel, const int8_t *xq,
			 const float *xd, const int32_t *xc, float *y, int64_t ldy, int nv);
	/* I8 repacked by kcpu_pack, the same shape of call: X quantized
	 * per row (xd, xc: one value per chunk row), ws the panel's 16 row
	 * scales. y[j*ldy + c] = (float)(exact dot) * (ws[c] * xd[j]): the
	 * expression of kcpu_matmul_ref_xq, bit for bit. */
	void (*gemm_i8p)(int mr, int64_t nb, const uint8_t *panel, const int8_t *xq,
			 const float *xd, const int32_t *xc, const float *ws, float *y, int64_t ldy,
			 int nv);
	/* F16 / BF16 / F8_E4M3 repacked by kcpu_pack (NULL when the path has
	 * none): np consecutive panels (1, 2 or 4), panel_bytes apart, against
	 * mr X rows (np * mr <= 16, or np = 2 and mr <= MM_FP_PREFILL_MR) of a
	 * transposed X chunk, for k in [k0, k1): xt[(k - k0)*ldxt + i] =
	 * X[row i][k]. Each weight is converted once and
	 * multiplied into every X row by one FMA; y[i*ldy + p*16 + c] (c < 16,
	 * or < nv in the last panel) starts from 0 or, with acc_in, from y, and
	 * takes one F32 FMA per k in k order (whatever m, np or mr: batch
	 * invariant); with rs (F8: row scale * 256 per output row of the np
	 * panels) the result is multiplied by it before it is stored. */
	void (*gemm_fp)(int np, int mr, enum dtype t, const uint8_t *panel, size_t panel_bytes,
			int64_t k0, int64_t k1, const float *xt, int ldxt, float *y, int64_t ldy,
			int nv, int acc_in, const float *rs);
	/* Lines [0, nk) of an F8_E4M3 panel as the F16 bits gemm_fp converts
	 * them to (times 2^-8), into dst (16 * nk, 32-byte aligned): prefill
	 * runs gemm_fp on that as an F16 panel, the same values. */
	void (*f8_panel_f16)(const uint8_t *src, int64_t nk, uint16_t *dst);
	void (*gemm_q8_amx)(const struct kmat *w, int64_t r0, int64_t nrows, const int8_t *xt,
			    const float *xdt, int m, float *y, int64_t ldy);
};

#define MM_QNR 32 /* weight rows per packed int8 panel */
#define MM_BX_LANES 16 /* X rows per broadcast GEMV (one zmm of F32) */
#define MM_BX_ROWS 16  /* weight rows per broadcast GEMV call */
#define MM_AMX_LANES 16 /* X rows per AMX tile (its 16 int32 columns) */
#define MM_Q8P_ROWS 16	/* weight rows per repacked Q8_0 panel (one zmm of int32) */
#define MM_Q8P_MR 16	/* X rows per gemm_q8p call */
/* One pair of blocks of a panel: quants of block 2p (512 bytes: line g holds
 * k = 4g .. 4g+3 of the 16 rows, row-major within the line), of block 2p+1,
 * then their 16 F16 scales each. Panels are nb rounded up to even blocks. */
#define MM_Q8P_PAIR_BYTES (2 * 8 * 64 + 2 * 32)
/* I8 panels: ceil(cols / 32) blocks of 8 such lines, no scales. Its int32
 * sums are exact while 127 * 127 * cols < 2^31 (the + 128 may wrap the
 * running sum; the total does not). */
#define MM_I8P_BLOCK_BYTES (8 * 64)
#define MM_I8P_MAX_K 65536
/* Float panels (F16, BF16, F8_E4M3): for each k the 16 rows' values,
 * row-major within the k: element (k, c) of a panel at (k*16 + c) * size.
 * Decode (up to 16 X rows, X transposed in one chunk of 16) takes
 * mm_fp_panels(mr) panels per call (at least ~16 independent FMA chains,
 * each weight line loaded once); more X rows are transposed in chunks of
 * MM_FP_PREFILL_CHUNK and go MM_FP_PREFILL_MR at a time against 2 panels
 * (24 accumulators: a conversion per 12 FMAs and a broadcast per 2), with
 * k in passes of MM_FP_KC. */
#define MM_FP_KC 256
#define MM_FP_PREFILL_MR 12
#define MM_FP_PREFILL_CHUNK 24
static inline int mm_fp_panels(int mr)
{
	return mr <= 4 ? 4 : mr <= 8 ? 2 : 1;
}
/* X for gemm_q8p, quantized per 32-block, in chunks of MM_Q8P_MR rows
 * (row j of X is row j % 16 of chunk j / 16); per chunk and block b:
 *   xq[b*16*32 + r*32 + k]  the signed quants of row r,
 *   xd[b*16 + r]            its F32 scale,
 *   xc[b*16 + r]            -128 * (sum of those quants): the panel holds
 *                           w + 128, so this takes 128 * sum(x) back out,
 * so one pointer and constant offsets reach all of a chunk's rows. For
 * gemm_i8p the quants are laid out the same (zero past cols) but X is
 * quantized per row: xd[r], xc[r] per chunk, the correction over the whole
 * row. */


const struct mm_kernels *mm_kernels_scalar(void);
/* NULL when not built for this architecture. */
const struct mm_kernels *mm_kernels_avx2(void);
const struct mm_kernels *mm_kernels_avx512(void);

static inline float mm_row_scale(const struct kmat *w, int64_t r)
{
	if (!w->scale)
		return 1.0f;
	return w->n_scale == 1 ? w->scale[0] : w->scale[r];
}

/* Calls fn(NW, NX, args...) with compile-time tile sizes for runtime nw, nx
 * (1..4 each), so SIMD files can write a tile once as an always_inline
 * function and get 16 register-allocated instances. */
#define MM_TILE_DISPATCH(fn, nw, nx, ...)                                          \
	do {                                                                       \
		switch ((nw) * 8 + (nx)) {                                         \
		case 011: fn(1, 1, __VA_ARGS__); break;                            \
		case 012: fn(1, 2, __VA_ARGS__); break;                            \
		case 013: fn(1, 3, __VA_ARGS__); break;                            \
		case 014: fn(1, 4, __VA_ARGS__); break;                            \
		case 021: fn(2, 1, __VA_ARGS__); break;                            \
		case 022: fn(2, 2, __VA_ARGS__); break;                            \
		case 023: fn(2, 3, __VA_ARGS__); break;                            \
		case 024: fn(2, 4, __VA_ARGS__); break;                            \
		case 031: fn(3, 1, __VA_ARGS__); break;                            \
		case 032: fn(3, 2, __VA_ARGS__); break;                            \
		case 033: fn(3, 3, __VA_ARGS__); break;                            \
		case 034: fn(3, 4, __VA_ARGS__); break;                            \
		case 041: fn(4, 1, __VA_ARGS__); break;                            \
		case 042: fn(4, 2, __VA_ARGS__); break;                            \
		case 043: fn(4, 3, __VA_ARGS__); break;                            \
		case 044: fn(4, 4, __VA_ARGS__); break;                            \
		default: break;                                                    \
		}                                                                  \
	} while (0)

#endif
