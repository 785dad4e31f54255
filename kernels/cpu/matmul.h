/* kernels/cpu/matmul.h — Y = X · Wᵀ for every weight dtype, the hot path of
 * the CPU backend.
 *
 * W is a weight matrix (rows = output features, cols = input features),
 * row-major in its storage dtype: F32, F16, BF16, Q8_0 (blocks of 32 along a
 * row), I8 or F8_E4M3 (one byte per value, scale per row or per tensor).
 * X is (m, cols) F32 row-major, Y is (m, rows) F32 row-major.
 *
 * kcpu_matmul_ref is the readable reference (no intrinsics, one thread,
 * F32 accumulation, dequantize-then-multiply); kcpu_matmul is the fast path
 * (SIMD chosen at run time, threaded over the pool, GEMV-shaped for small m,
 * cache-blocked for large m; for Q8_0/I8 it quantizes X per row to int8 and
 * uses integer dot products). The fast path must agree with the reference to
 * accumulation-order tolerance; tests/kernels/test_matmul.c checks it on ragged
 * shapes. Stateless apart from the pool; any one thread.
 *
 * Integer path precisely: X rows are quantized to int8 with one F32 scale per
 * 32-block (Q8_0 weights) or per row (I8 weights), so its results differ from
 * kcpu_matmul_ref by that quantization; kcpu_matmul_ref_xq is its reference.
 * Scratch (quantized X, converted or packed weight panels) lives in the pool
 * (kpool_reserve) and grows to the largest call seen: no allocation per call
 * in steady state. Pass the engine's pool; a NULL pool makes (and frees) a
 * one-thread pool on every call. The pool must not be running anything else.
 * Paths are in kernels/cpu/matmul.c (loops, threading), matmul_avx512.c,
 * matmul_avx2.c, matmul_scalar.c (inner kernels); the repacked weight
 * layouts (kcpu_pack below) in pack.c.
 */
#ifndef AORTA_KERNELS_CPU_MATMUL_H
#define AORTA_KERNELS_CPU_MATMUL_H

#include <stdint.h>

#include "kernels/cpu/pool.h"
#include "kernels/dtype.h"

struct kmat {
	enum dtype dtype;
	int64_t rows;	    /* output features */
	int64_t cols;	    /* input features (a multiple of 32 for Q8_0) */
	const void *data;   /* rows * row_bytes(cols) bytes */
	const float *scale; /* I8 / F8_E4M3: n_scale values, else NULL */
	int64_t n_scale;    /* 1 (per tensor) or rows (per row) */
	/* optional: the same weights repacked by kcpu_pack (borrowed; data
	 * stays valid and is what every other reader uses). */
	const void *packed;
};

/* Dequantize row r of w into out[cols] (reference; also used for embedding gathers). */
void kcpu_dequant_row(const struct kmat *w, int64_t r, float *out);

void kcpu_matmul_ref(const struct kmat *w, const float *x, int m, float *y);
void kcpu_matmul(struct kpool *pool, const struct kmat *w, const float *x, int m, float *y);

/* --- additions (fast matmul work); the two calls above are unchanged --- */

/* Reference of the integer path for Q8_0 and I8 weights: quantizes each X
 * row exactly as kcpu_matmul does (kcpu_quantize_act_q8_0 / _i8 in quant.h),
 * takes exact integer dot products per block (Q8_0) or per row (I8) and
 * scales them in F32. For other dtypes it is kcpu_matmul_ref. */
void kcpu_matmul_ref_xq(const struct kmat *w, const float *x, int m, float *y);

/* Instruction-set paths of kcpu_matmul. AUTO picks the best the CPU has
 * (AVX-512 F/BW/DQ/VL + VNNI, else AVX2 + FMA + F16C, else portable C). */
enum kcpu_isa { KCPU_ISA_AUTO = 0, KCPU_ISA_SCALAR, KCPU_ISA_AVX2, KCPU_ISA_AVX512, KCPU_ISA__COUNT };

/* Whether this build and this CPU can run isa (AUTO and SCALAR: always). */
int kcpu_isa_supported(enum kcpu_isa isa);
/* "auto", "scalar", "avx2", "avx512"; the path AUTO resolves to for kcpu_isa_best. */
const char *kcpu_isa_name(enum kcpu_isa isa);
enum kcpu_isa kcpu_isa_best(void);

/* kcpu_matmul with an explicit path (tests and benchmarks compare them).
 * Returns 0, ERR_INVAL (bad shape, dtype or scale count, rows or cols above
 * INT32_MAX; y untouched) or
 * ERR_UNSUPPORTED (isa not available here). Scratch memory comes from the
 * pool (kpool_reserve); with pool == NULL a one-thread pool is made for the
 * call. If scratch cannot be had (ERR_NOMEM), it falls back to a slow path
 * with no scratch and still returns 0.
 * kcpu_matmul(pool, w, x, m, y) is kcpu_matmul_isa(..., KCPU_ISA_AUTO) with
 * the return value dropped: callers must pass valid shapes. */
int kcpu_matmul_isa(struct kpool *pool, const struct kmat *w, const float *x, int m, float *y,
		    enum kcpu_isa isa);

/* Weights repacked for the AVX-512 path (kernels/cpu/pack.c, layouts in
 * matmul_impl.h): 16 rows per panel, so that one aligned 64-byte line (or
 * 32 bytes) holds what one instruction needs for all 16 rows and is loaded
 * once for every X row. Q8_0 and I8: 4 consecutive k of the 16 rows per
 * line, stored + 128 (the unsigned operand of vpdpbusd); Q8_0 keeps its F16
 * block scales beside each pair of blocks (34 bytes per 32 weights, as the
 * file), I8 its per-row scales in the kmat. F16, BF16, F8_E4M3: the 16
 * rows' values at each k. One kernel per dtype then serves decode at any
 * batch and prefill without converting or packing per call (the per-call
 * packers cost more than the arithmetic below ~16 rows), and gives each
 * output the same bits whatever m is.
 * kcpu_matmul uses w->packed on the AVX-512 path and ignores it elsewhere.
 * kcpu_pack_wanted: whether this CPU's best path gains from packing w
 * (AVX-512; not Q8_0 where AMX-INT8 tiles read the blocks in place; I8 up
 * to MM_I8P_MAX_K columns; not F32).
 * kcpu_pack_bytes: size of the copy (0 or ERR_INVAL / ERR_OVERFLOW): the
 * size of the weights, rows rounded up to 16.
 * kcpu_pack: fill out (64-byte aligned, kcpu_pack_bytes long) from w's
 * data, over the pool's threads (pool may be NULL). */
int kcpu_pack_wanted(const struct kmat *w);
int kcpu_pack_bytes(const struct kmat *w, size_t *out);
int kcpu_pack(struct kpool *pool, const struct kmat *w, void *out);

#endif
