/* kernels/cpu/matmul.c — the fast Y = X·Wᵀ (see matmul.h): checks, picks the
 * instruction-set path, reserves scratch in the pool and runs one of these
 * threaded loops over the per-ISA kernels of matmul_impl.h:
 *   repacked    (w->packed, AVX-512: Q8_0, I8, F16, BF16, F8; kcpu_pack made
 *               the copy at load): X is quantized (Q8_0 per 32-block, I8 per
 *               row) or transposed into 16-row chunks, and one kernel per
 *               dtype takes whole 16-row weight panels against up to 16 X
 *               rows, for every m: decode streams each panel once, prefill
 *               keeps blocks of X in L2 (floats: k in passes), and every
 *               output gets the same F32 operations in the same order at
 *               any m (batch invariance, bit for bit);
 *   float GEMV  (F32/F16/BF16/F8, small m): each thread converts MM_TW weight
 *               rows to F32 once and takes dot tiles against all m X rows, so
 *               each weight byte is read from memory once; for MM_BX_MIN_M <=
 *               m <= 16, X is transposed once and each weight is broadcast
 *               against 16 X rows (gemv_bx: one FMA per weight);
 *   float GEMM  (same dtypes, m > MM_GEMV_MAX_M, when the ISA has a
 *               micro-kernel): a (KC, nr) panel of W is converted and packed
 *               once and reused by every row of X;
 *   integer     (Q8_0, I8): X is quantized per 32-block / per row into pool
 *               scratch (in parallel), then integer dot tiles, blocked over X
 *               so a block of quantized X stays in L2; Q8_0 at 4 <= m <= 16
 *               on a CPU with AMX-INT8: X is also laid out for the tiles
 *               (transpose_xq_worker) and the weight blocks are read in
 *               place by tile loads (gemm_q8_amx), nothing packed per call.
 * Threads split weight rows, so every output element is written by one thread.
 * Tested against kcpu_matmul_ref / kcpu_matmul_ref_xq in tests/kernels/test_matmul.c.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/checked.h"
#include "common/err.h"
#include "matmul.h"
#include "matmul_impl.h"
#include "quant.h"

#define MM_GEMV_MAX_M 16     /* up to here GEMV; above, GEMM when available */
#define MM_BX_MIN_M 13	     /* broadcast GEMV (gemv_bx) from here to MM_BX_LANES: its
					 * cost does not shrink with m, the tiles' does */
#define MM_KC 256	     /* k-depth of a packed GEMM panel */
#define MM_GEMV_KC 512	     /* k-chunk of the GEMV tiles for m > MM_TX */
#define MM_GEMV_ROWS 16	     /* weight rows converted per chunk (32 KiB of F32) */
#define MM_I8_KCHUNK 65536   /* int32 lanes cannot overflow below 2^17 */
#define MM_XBLOCK_BYTES (256 * 1024) /* quantized X kept hot per block */
#define MM_INT_TILE_MAX_M 3  /* integer path: dot tiles up to here, packed GEMM above */
#define MM_I8_PACKED_MAX_K 32768 /* packed I8 keeps whole-row sums in int32 lanes */
_Static_assert(MM_GEMV_ROWS == MM_BX_ROWS, "gemv_worker hands gemv_bx MM_GEMV_ROWS rows");

/* ---- instruction-set selection ------------------------------------------ */

int kcpu_isa_supported(enum kcpu_isa isa)
{
	switch (isa) {
	case KCPU_ISA_AUTO:
	case KCPU_ISA_SCALAR:
		return 1;
#if defined(__x86_64__)
	case KCPU_ISA_AVX2:
		return mm_kernels_avx2() && __builtin_cpu_supports("avx2") &&
		       __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
	case KCPU_ISA_AVX512:
		return mm_kernels_avx512() && __builtin_cpu_supports("avx512f") &&
		       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
		       __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni") &&
		       __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#endif
	default:
		return 0;
	}
}

enum kcpu_isa kcpu_isa_best(void)
{
	if (kcpu_isa_supported(KCPU_ISA_AVX512))
		return KCPU_ISA_AVX512;
	if (kcpu_isa_supported(KCPU_ISA_AVX2))
		return KCPU_ISA_AVX2;
	return KCPU_ISA_SCALAR;
}

const char *kcpu_isa_name(enum kcpu_isa isa)
{
	static const char *const names[KCPU_ISA__COUNT] = { "auto", "scalar", "avx2", "avx512" };
	return (unsigned)isa < KCPU_ISA__COUNT ? names[isa] : "?";
}

static const struct mm_kernels *kernels_for(enum kcpu_isa isa)
{
	switch (isa) {
	case KCPU_ISA_AVX512:
		return mm_kernels_avx512();
	case KCPU_ISA_AVX2:
		return mm_kernels_avx2();
	default:
		return mm_kernels_scalar();
	}
}

/* ---- argument checks ------------------------------------------------------ */

static bool is_float_dtype(enum dtype t)
{
	return t == DT_F32 || t == DT_F16 || t == DT_BF16 || t == DT_F8_E4M3;
}

static int check_args(const struct kmat *w, const float *x, int m, const float *y)
{
	/* Dimensions above 2^31 are rejected, so every product of a row
	 * index and a row length below fits in int64 with room to spare. */
	if (!w || m < 0 || w->rows < 0 || w->cols <= 0 || w->rows > INT32_MAX ||
	    w->cols > INT32_MAX)
		return ERR_INVAL;
	if (!is_float_dtype(w->dtype) && w->dtype != DT_Q8_0 && w->dtype != DT_I8)
		return ERR_INVAL;
	if (w->dtype == DT_Q8_0 && w->cols % Q8_0_BLOCK)
		return ERR_INVAL;
	if ((w->dtype == DT_I8 || w->dtype == DT_F8_E4M3) && w->scale && w->n_scale != 1 &&
	    w->n_scale != w->rows)
		return ERR_INVAL;
	if (m > 0 && w->rows > 0 && (!w->data || !x || !y))
		return ERR_INVAL;
	return 0;
}

/* Ask for W[r0 .. r0+nrows-1][k0 .. k0+kn-1] to be brought into cache. */
static void prefetch_w(const struct kmat *w, int64_t r0, int nrows, int64_t k0, int64_t kn)
{
	const size_t esize = dtype_block_bytes(w->dtype);
	nrows = r0 + nrows <= w->rows ? nrows : (int)(w->rows - r0);
	kn = k0 + kn <= w->cols ? kn : w->cols - k0;
	for (int i = 0; i < nrows; i++) {
		const char *p = (const char *)w->data + ((r0 + i) * w->cols + k0) * (int64_t)esize;
		for (size_t off = 0; off < (size_t)kn * esize; off += 64)
			__builtin_prefetch(p + off);
	}
}

/* ---- float GEMV ------------------------------------------------------------ */

struct mm_call {
	const struct mm_kernels *k;
	struct kpool *pool;
	const struct kmat *w;
	const float *x;
	const float *xf; /* float paths: X as the tiles read it (padded copy or x) */
	int64_t ldx;     /* and its row stride */
	int m;
	float *y;
	float *xt;    /* broadcast GEMV: X transposed, cols * MM_BX_LANES */
	int8_t *xq;   /* integer paths: quantized X, m rows of ldq bytes */
	float *xd;    /* and its scales, m * n_xd */
	int64_t n_xd; /* scales per X row: cols/32 (Q8_0) or 1 (I8) */
	int64_t ldq;  /* cols rounded up to a multiple of 4 (zero padding) */
	int x_u8;     /* store xq + 128 (the packed GEMM's unsigned operand) */
	int8_t *xqt;  /* AMX path: xq in the tile layout, cols * MM_AMX_LANES */
	float *xdt;   /* and the scales by block, n_xd * MM_AMX_LANES */
	int64_t xblock; /* X rows per block in the integer loops */
};

/* m <= MM_TX: one dot tile per MM_TW weight rows, converting in registers
 * when the ISA can (dot_w), so each weight byte is read once and touched
 * once. */
static void gemv_small_m(const struct mm_call *c, int64_t r0, int nrows, float *buf)
{
	const struct kmat *w = c->w;
	const int64_t cols = w->cols;
	for (int t0 = 0; t0 < nrows; t0 += MM_TW) {
		const int nw = nrows - t0 < MM_TW ? nrows - t0 : MM_TW;
		if (c->k->dot_w) {
			c->k->dot_w(nw, c->m, w, r0 + t0, c->x, cols, c->y + r0 + t0, w->rows);
			continue;
		}
		const float *wp = (const float *)w->data + (r0 + t0) * cols;
		if (w->dtype != DT_F32) {
			for (int i = 0; i < nw; i++)
				c->k->cvt(w, r0 + t0 + i, 0, cols, buf + i * cols);
			wp = buf;
		}
		c->k->dot_f32(nw, c->m, wp, cols, c->x, cols, cols, c->y + r0 + t0, w->rows);
	}
}

/* MM_TX < m <= MM_GEMV_MAX_M: k in chunks; a chunk of MM_GEMV_ROWS weight
 * rows is converted once into L1-sized scratch, and each chunk of 4 X rows
 * (the padded copy) is loaded once and used against all of them. */
static void gemv_chunked(const struct mm_call *c, int64_t r0, int nrows, float *buf)
{
	const struct kmat *w = c->w;
	const int64_t rows = w->rows, cols = w->cols;
	for (int64_t k0 = 0; k0 < cols; k0 += MM_GEMV_KC) {
		const int64_t kn = cols - k0 < MM_GEMV_KC ? cols - k0 : MM_GEMV_KC;
		const float *wp = (const float *)w->data + r0 * cols + k0;
		int64_t ldw = cols;
		if (w->dtype != DT_F32) {
			for (int i = 0; i < nrows; i++)
				c->k->cvt(w, r0 + i, k0, kn, buf + i * MM_GEMV_KC);
			wp = buf;
			ldw = MM_GEMV_KC;
		}
		/* The weights come from memory; fetch the next chunk (or the
		 * next rows' first chunk) while this one is multiplied. */
		if (k0 + MM_GEMV_KC < cols)
			prefetch_w(w, r0, nrows, k0 + MM_GEMV_KC, MM_GEMV_KC);
		else if (r0 + nrows < rows)
			prefetch_w(w, r0 + nrows, MM_GEMV_ROWS, 0, MM_GEMV_KC);
		for (int j0 = 0; j0 < c->m; j0 += MM_TX) {
			const int nx = c->m - j0 < MM_TX ? c->m - j0 : MM_TX;
			for (int t0 = 0; t0 < nrows; t0 += MM_TW) {
				const int nw = nrows - t0 < MM_TW ? nrows - t0 : MM_TW;
				float part[MM_TX * MM_TW];
				c->k->dot_f32(nw, nx, wp + t0 * ldw, ldw,
					      c->xf + (int64_t)j0 * c->ldx + k0, c->ldx, kn, part, MM_TW);
				for (int j = 0; j < nx; j++)
					for (int i = 0; i < nw; i++) {
						float *yo = c->y + (int64_t)(j0 + j) * rows + r0 + t0 + i;
						*yo = k0 ? *yo + part[j * MM_TW + i] : part[j * MM_TW + i];
					}
			}
		}
	}
}

/* xt[k*MM_BX_LANES + j] = X[j][k], zero for j >= m; threads split k. */
static void transpose_x_worker(void *p, int ith, int nth)
{
	const struct mm_call *c = p;
	const int64_t cols = c->w->cols;
	long k0, k1;
	kpool_split((long)cols, ith, nth, &k0, &k1);
	for (long k = k0; k < k1; k++) {
		float *o = c->xt + k * MM_BX_LANES;
		for (int j = 0; j < MM_BX_LANES; j++)
			o[j] = j < c->m ? c->x[(int64_t)j * cols + k] : 0.0f;
	}
}

static void gemv_worker(void *p, int ith, int nth)
{
	const struct mm_call *c = p;
	const int64_t rows = c->w->rows;
	long g0, g1;
	kpool_split((long)((rows + MM_GEMV_ROWS - 1) / MM_GEMV_ROWS), ith, nth, &g0, &g1);
	float *buf = kpool_scratch(c->pool, ith);
	for (long g = g0; g < g1; g++) {
		const int64_t r0 = (int64_t)g * MM_GEMV_ROWS;
		const int nrows = (int)(rows - r0 < MM_GEMV_ROWS ? rows - r0 : MM_GEMV_ROWS);
		if (c->xt)
			c->k->gemv_bx(c->w, r0, nrows, c->xt, c->m, c->y + r0, rows);
		else if (c->m <= MM_TX)
			gemv_small_m(c, r0, nrows, buf);
		else
			gemv_chunked(c, r0, nrows, buf);
	}
}

/* ---- float GEMM ------------------------------------------------------------ */

/* panel[k*nr + c] = W[r0 + c, k0 + k] for c < nv, 0 for nv <= c < nr. */
static void pack_panel(const struct mm_call *c, int64_t r0, int nv, int64_t k0, int64_t kc,
		       float *panel, float *tmp)
{
	const int nr = c->k->nr;
	for (int col = 0; col < nr; col++) {
		if (col < nv) {
			/* The next panel reads the next kc values of each of these
			 * rows: 32 short streams the hardware prefetcher does not
			 * follow well, so ask for them while this one is packed. */
			if (k0 + kc < c->w->cols)
				prefetch_w(c->w, r0 + col, 1, k0 + kc, kc);
			c->k->cvt(c->w, r0 + col, k0, kc, tmp);
			for (int64_t k = 0; k < kc; k++)
				panel[k * nr + col] = tmp[k];
		} else {
			for (int64_t k = 0; k < kc; k++)
				panel[k * nr + col] = 0.0f;
		}
	}
}

static void gemm_worker(void *p, int ith, int nth)
{
	const struct mm_call *c = p;
	const int64_t rows = c->w->rows, cols = c->w->cols;
	const int nr = c->k->nr, mr = c->k->mr;
	long p0, p1;
	kpool_split((long)((rows + nr - 1) / nr), ith, nth, &p0, &p1);
	float *panel = kpool_scratch(c->pool, ith);
	float *tmp = panel + (size_t)MM_KC * nr;
	for (long pi = p0; pi < p1; pi++) {
		const int64_t r0 = (int64_t)pi * nr;
		const int nv = (int)(rows - r0 < nr ? rows - r0 : nr);
		for (int64_t k0 = 0; k0 < cols; k0 += MM_KC) {
			const int64_t kc = cols - k0 < MM_KC ? cols - k0 : MM_KC;
			pack_panel(c, r0, nv, k0, kc, panel, tmp);
			for (int i0 = 0; i0 < c->m; i0 += mr) {
				const int mi = c->m - i0 < mr ? c->m - i0 : mr;
				c->k->gemm(mi, kc, panel, c->xf + (int64_t)i0 * c->ldx + k0, c->ldx,
					   c->y + (int64_t)i0 * rows + r0, rows, nv, k0 > 0);
			}
		}
	}
}

/* ---- integer paths ---------------------------------------------------------- */

static void quantize_x_worker(void *p, int ith, int nth)
{
	const struct mm_call *c = p;
	const int64_t cols = c->w->cols;
	long j0, j1;
	kpool_split(c->m, ith, nth, &j0, &j1);
	for (long j = j0; j < j1; j++) {
		int8_t *q = c->xq + j * c->ldq;
		const int per_block = c->w->dtype == DT_Q8_0;
		if (c->k->quant_act)
			c->k->quant_act(c->x + j * cols, cols, q, c->xd + j * c->n_xd, per_block);
		else if (per_block)
			kcpu_quantize_act_q8_0(c->x + j * cols, cols, q, c->xd + j * c->n_xd);
		else
			kcpu_quantize_act_i8(c->x + j * cols, cols, q, c->xd + j);
		memset(q + cols, 0, (size_t)(c->ldq - cols));
		if (c->x_u8) /* q + 128 as unsigned: flip the sign bit */
			for (int64_t k = 0; k < c->ldq; k++)
				q[k] = (int8_t)((uint8_t)q[k] ^ 0x80u);
	}
}

/* AMX path: xqt[(k/4)*64 + j*4 + k%4] = xq[j][k] and xdt[b*16 + j] =
 * xd[j][b], zero for j >= m; threads split the blocks. */
static void transpose_xq_worker(void *p, int ith, int nth)
{
	const struct mm_call *c = p;
	long b0, b1;
	kpool_split((long)c->n_xd, ith, nth, &b0, &b1);
	for (long b = b0; b < b1; b++) {
		int8_t *o = c->xqt + b * Q8_0_BLOCK * MM_AMX_LANES;
		for (int g = 0; g < Q8_0_BLOCK / 4; g++)
			for (int j = 0; j < MM_AMX_LANES; j++) {
				int8_t *d = o + (g * MM_AMX_LANES + j) * 4;
				if (j < c->m)
					memcpy(d, c->xq + j * c->ldq + b * Q8_0_BLOCK + g * 4, 4);
				else
					memset(d, 0, 4);
			}
		for (int j = 0; j < MM_AMX_LANES; j++)
			c->xdt[b * MM_AMX_LANES + j] = j < c->m ? c->xd[j * c->n_xd + b] : 0.0f;
	}
}

/* ---- repacked Q8_0 / I8 ----------------------------------------------------------- */

struct pk_call {
	const struct mm_kernels *k;
	struct kpool *pool;
	const struct kmat *w;
	const float *x;
	int m;
	float *y;
	int64_t nb;	/* 32-k blocks per row (I8: the last one zero-padded) */
	int8_t *xq;	/* X in gemm_q8p's chunk layout (matmul_impl.h) */
	float *xd;	/* per block (Q8_0) or per row (I8) */
	int32_t *xc;
	int64_t xblock; /* X rows per pass over the panels (a multiple of 16) */
};

/* Q8_0: the row quantized into row (nb * 32 bytes of thread scratch, then
 * nb scales), then each block copied into its place in the chunk layout
 * with its scale and correction. */
static void pk_quantize_q8(const struct pk_call *c, long j, int8_t *row)
{
	const int64_t nb = c->nb;
	const int64_t at = (j / MM_Q8P_MR) * nb * MM_Q8P_MR + j % MM_Q8P_MR;
	const float *x = c->x + j * c->w->cols;
	float *d = (float *)(void *)(row + nb * Q8_0_BLOCK);
	if (c->k->quant_act)
		c->k->quant_act(x, nb * Q8_0_BLOCK, row, d, 1);
	else
		kcpu_quantize_act_q8_0(x, nb * Q8_0_BLOCK, row, d);
	for (int64_t b = 0; b < nb; b++) {
		const int64_t i = at + b * MM_Q8P_MR;
		const int8_t *q = row + b * Q8_0_BLOCK;
		int32_t sum = 0;
		for (int k = 0; k < Q8_0_BLOCK; k++)
			sum += q[k];
		memcpy(c->xq + i * Q8_0_BLOCK, q, Q8_0_BLOCK);
		c->xd[i] = d[b];
		c->xc[i] = -128 * sum;
	}
}

/* I8: the row quantized with one scale into row (nb * 32 bytes of thread
 * scratch), then its blocks copied into place, zeros past cols. */
static void pk_quantize_i8(const struct pk_call *c, long j, int8_t *row)
{
	const int64_t nb = c->nb, cols = c->w->cols;
	const int64_t chunk = j / MM_Q8P_MR, r = j % MM_Q8P_MR;
	float *d = c->xd + chunk * MM_Q8P_MR + r;
	if (c->k->quant_act)
		c->k->quant_act(c->x + j * cols, cols, row, d, 0);
	else
		kcpu_quantize_act_i8(c->x + j * cols, cols, row, d);
	memset(row + cols, 0, (size_t)(nb * Q8_0_BLOCK - cols));
	int32_t sum = 0; /* |sum| <= 127 * MM_I8P_MAX_K */
	for (int64_t k = 0; k < cols; k++)
		sum += row[k];
	c->xc[chunk * MM_Q8P_MR + r] = -128 * sum;
	for (int64_t b = 0; b < nb; b++)
		memcpy(c->xq + ((chunk * nb + b) * MM_Q8P_MR + r) * Q8_0_BLOCK, row + b * Q8_0_BLOCK,
		       Q8_0_BLOCK);
}

/* X rows into the chunk layout; threads split the rows. */
static void pk_quantize_worker(void *p, int ith, int nth)
{
	const struct pk_call *c = p;
	long j0, j1;
	kpool_split(c->m, ith, nth, &j0, &j1);
	for (long j = j0; j < j1; j++) {
		if (c->w->dtype == DT_Q8_0)
			pk_quantize_q8(c, j, kpool_scratch(c->pool, ith));
		else
			pk_quantize_i8(c, j, kpool_scratch(c->pool, ith));
	}
}

/* Threads split the 16-row panels; X goes in blocks of rows that stay in
 * L2 while every panel of the thread passes over them. */
static void pk_worker(void *p, int ith, int nth)
{
	const struct pk_call *c = p;
	const struct kmat *w = c->w;
	const int64_t rows = w->rows, nb = c->nb;
	const bool q8 = w->dtype == DT_Q8_0;
	const size_t panel_bytes = q8 ? (size_t)((nb + 1) / 2) * MM_Q8P_PAIR_BYTES
				      : (size_t)nb * MM_I8P_BLOCK_BYTES;
	/* X values of a chunk: the quants, and the scales / corrections */
	const int64_t chunk_q = nb * MM_Q8P_MR, chunk_d = q8 ? chunk_q : MM_Q8P_MR;
	long p0, p1;
	kpool_split((long)((rows + MM_Q8P_ROWS - 1) / MM_Q8P_ROWS), ith, nth, &p0, &p1);
	for (int64_t b0 = 0; b0 < c->m; b0 += c->xblock) {
		const int64_t b1 = b0 + c->xblock < c->m ? b0 + c->xblock : c->m;
		for (long pi = p0; pi < p1; pi++) {
			const int64_t r0 = (int64_t)pi * MM_Q8P_ROWS;
			const int nv = (int)(rows - r0 < MM_Q8P_ROWS ? rows - r0 : MM_Q8P_ROWS);
			const uint8_t *panel = (const uint8_t *)w->packed + (size_t)pi * panel_bytes;
			float ws[MM_Q8P_ROWS] = { 0 };
			for (int i = 0; !q8 && i < nv; i++)
				ws[i] = mm_row_scale(w, r0 + i);
			for (int64_t j0 = b0; j0 < b1; j0 += MM_Q8P_MR) {
				const int mr = (int)(b1 - j0 < MM_Q8P_MR ? b1 - j0 : MM_Q8P_MR);
				const int64_t ch = j0 / MM_Q8P_MR;
				const int8_t *xq = c->xq + ch * chunk_q * Q8_0_BLOCK;
				float *y = c->y + j0 * rows + r0;
				if (q8)
					c->k->gemm_q8p(mr, nb, panel, xq, c->xd + ch * chunk_d,
						       c->xc + ch * chunk_d, y, rows, nv);
				else
					c->k->gemm_i8p(mr, nb, panel, xq, c->xd + ch * chunk_d,
						       c->xc + ch * chunk_d, ws, y, rows, nv);
			}
		}
	}
}

/* The repacked path: scratch for X in the chunk layout, quantize, run.
 * Returns ERR_NOMEM / ERR_OVERFLOW when scratch cannot be had. */
static int run_packed(struct kpool *pool, const struct mm_kernels *k, const struct kmat *w,
		      const float *x, int m, float *y)
{
	struct pk_call c = { .k = k, .pool = pool, .w = w, .x = x, .m = m, .y = y,
			     .nb = (w->cols + Q8_0_BLOCK - 1) / Q8_0_BLOCK };
	const size_t n_rows = ((size_t)m + MM_Q8P_MR - 1) / MM_Q8P_MR * MM_Q8P_MR;
	size_t n_blocks, q_bytes, f_bytes, shared;
	int rc = ck_mul(n_rows, (size_t)c.nb, &n_blocks);
	if (!rc)
		rc = ck_mul(n_blocks, Q8_0_BLOCK, &q_bytes);
	if (!rc) /* xd, and xc as many */
		rc = ck_mul(w->dtype == DT_Q8_0 ? n_blocks : n_rows, sizeof(float), &f_bytes);
	if (!rc)
		rc = ck_add(q_bytes, 2 * f_bytes, &shared);
	if (!rc) /* one quantized row per thread (Q8_0: and its scales) */
		rc = kpool_reserve(pool, (size_t)c.nb * (Q8_0_BLOCK + sizeof(float)), shared);
	if (rc)
		return rc;
	c.xq = kpool_shared(pool);
	c.xd = (float *)(void *)(c.xq + q_bytes);
	c.xc = (int32_t *)(void *)((char *)c.xd + f_bytes);
	c.xblock = (int64_t)(MM_XBLOCK_BYTES / (size_t)w->cols) / MM_Q8P_MR * MM_Q8P_MR;
	if (c.xblock < MM_Q8P_MR)
		c.xblock = MM_Q8P_MR;
	kpool_run(pool, pk_quantize_worker, &c);
	kpool_run(pool, pk_worker, &c);
	return 0;
}

/* ---- repacked F16 / BF16 / F8 --------------------------------------------------- */

struct fp_call {
	const struct mm_kernels *k;
	struct kpool *pool;
	const struct kmat *w;
	const float *x;
	int m;
	float *y;
	float *xt;	/* X transposed in chunks of cr rows: xt[(chunk*cols + k)*cr + r];
			 * with m = 1 that is x, which the kernels only read */
	int cr;
	size_t panel_bytes;
	int64_t kc;	/* k per pass */
	int64_t xblock; /* X rows per pass over the panels (a multiple of cr) */
};

/* Threads split k, so each writes whole lines of xt. */
static void fp_transpose_worker(void *p, int ith, int nth)
{
	const struct fp_call *c = p;
	const int64_t cols = c->w->cols;
	long k0, k1;
	kpool_split((long)cols, ith, nth, &k0, &k1);
	for (int64_t j0 = 0; j0 < c->m; j0 += c->cr) {
		const int nr = (int)(c->m - j0 < c->cr ? c->m - j0 : c->cr);
		float *o = c->xt + j0 * cols; /* chunk j0 / cr */
		for (long k = k0; k < k1; k++)
			for (int r = 0; r < nr; r++)
				o[k * c->cr + r] = c->x[(j0 + r) * cols + k];
	}
}

/* One call of the kernel: panels [pi, pi + np) against X rows [j0, j0 + mr)
 * for k in [k0, k1); from conv when given (F8: those panels' lines k0 ..
 * k1-1 as F16, f8_panel_f16), else from the packed weights. */
static void fp_call_tile(const struct fp_call *c, long pi, int np, int64_t j0, int mr,
			 int64_t k0, int64_t k1, const uint16_t *conv)
{
	const struct kmat *w = c->w;
	const int64_t rows = w->rows, cols = w->cols;
	const int64_t r0 = (int64_t)pi * MM_Q8P_ROWS, r_end = r0 + (int64_t)np * MM_Q8P_ROWS;
	const int nv = (int)(rows - (r_end - MM_Q8P_ROWS) < MM_Q8P_ROWS ? rows - (r_end - MM_Q8P_ROWS)
									: MM_Q8P_ROWS);
	float rs[4 * MM_Q8P_ROWS];
	const bool scaled = w->dtype == DT_F8_E4M3 && k1 == cols;
	for (int64_t r = r0; scaled && r < r_end; r++)
		rs[r - r0] = r < rows ? mm_row_scale(w, r) * 256.0f : 0.0f;
	const uint8_t *panel = conv ? (const uint8_t *)conv
				    : (const uint8_t *)w->packed + (size_t)pi * c->panel_bytes;
	const size_t pbytes = conv ? (size_t)c->kc * MM_Q8P_ROWS * 2 : c->panel_bytes;
	c->k->gemm_fp(np, mr, conv ? DT_F16 : w->dtype, panel, pbytes, conv ? 0 : k0,
		      conv ? k1 - k0 : k1,
		      c->xt + (j0 / c->cr * c->cr) * cols + k0 * c->cr + j0 % c->cr, c->cr,
		      c->y + j0 * rows + r0, rows, nv, k0 > 0, scaled ? rs : NULL);
}

/* Threads split the 16-row panels. k goes in passes of kc, X in blocks of
 * rows that stay in L2 while the thread's panels pass over them, two at a
 * time against MM_FP_PREFILL_MR rows (a block of one chunk, decode, takes
 * mm_fp_panels(mr) panels per call instead). */
static void fp_worker(void *p, int ith, int nth)
{
	const struct fp_call *c = p;
	const int64_t cols = c->w->cols;
	long p0, p1;
	kpool_split((long)((c->w->rows + MM_Q8P_ROWS - 1) / MM_Q8P_ROWS), ith, nth, &p0, &p1);
	for (int64_t k0 = 0; k0 < cols; k0 += c->kc) {
		const int64_t k1 = k0 + c->kc < cols ? k0 + c->kc : cols;
		for (int64_t b0 = 0; b0 < c->m; b0 += c->xblock) {
			const int64_t b1 = b0 + c->xblock < c->m ? b0 + c->xblock : c->m;
			if (b1 - b0 <= MM_Q8P_MR) {
				const int mr = (int)(b1 - b0), np = mm_fp_panels(mr);
				for (long pi = p0; pi < p1;) {
					const int n = p1 - pi >= np ? np : 1;
					fp_call_tile(c, pi, n, b0, mr, k0, k1, NULL);
					pi += n;
				}
				continue;
			}
			/* F8: the two panels' lines of this pass as F16 once, for
			 * every row of the block */
			uint16_t *conv = c->w->dtype == DT_F8_E4M3 ? kpool_scratch(c->pool, ith) : NULL;
			for (long pi = p0; pi < p1; pi += 2) {
				const int np = p1 - pi >= 2 ? 2 : 1;
				for (int q = 0; conv && q < np; q++)
					c->k->f8_panel_f16((const uint8_t *)c->w->packed +
								   (size_t)(pi + q) * c->panel_bytes +
								   (size_t)k0 * MM_Q8P_ROWS,
							   k1 - k0, conv + (size_t)q * (size_t)c->kc * MM_Q8P_ROWS);
				for (int64_t j0 = b0; j0 < b1; j0 += MM_FP_PREFILL_MR)
					fp_call_tile(c, pi, np, j0,
						     (int)(b1 - j0 < MM_FP_PREFILL_MR ? b1 - j0
										: MM_FP_PREFILL_MR),
						     k0, k1, conv);
			}
		}
	}
}

static int run_packed_fp(struct kpool *pool, const struct mm_kernels *k, const struct kmat *w,
			 const float *x, int m, float *y)
{
	struct fp_call c = { .k = k, .w = w, .x = x, .m = m, .y = y };
	/* decode: one chunk of exactly m rows (m = 1 reads x itself), so the
	 * kernel's broadcasts read m floats per k, not a line of 16 */
	c.cr = m <= MM_Q8P_MR ? m : MM_FP_PREFILL_CHUNK;
	const size_t n_rows = ((size_t)m + (size_t)c.cr - 1) / (size_t)c.cr * (size_t)c.cr;
	size_t xt_bytes;
	int rc = ck_mul(n_rows * sizeof(float), (size_t)w->cols, &xt_bytes);
	if (!rc) /* per thread (F8 prefill): two panels' lines of one pass as F16 */
		rc = kpool_reserve(pool, 2 * (size_t)MM_FP_KC * MM_Q8P_ROWS * 2, xt_bytes);
	if (rc)
		return rc;
	c.pool = pool;
	c.xt = m == 1 ? (float *)(uintptr_t)x : kpool_shared(pool);
	c.panel_bytes = (size_t)w->cols * MM_Q8P_ROWS * (w->dtype == DT_F8_E4M3 ? 1 : 2);
	/* decode (one chunk): whole rows per pass; else MM_FP_KC and blocks of
	 * X that fit in L2 */
	c.kc = m <= MM_Q8P_MR ? w->cols : MM_FP_KC;
	c.xblock = (int64_t)(MM_XBLOCK_BYTES / ((size_t)MM_FP_KC * sizeof(float))) / c.cr * c.cr;
	if (c.xblock < c.cr)
		c.xblock = c.cr;
	if (m > 1)
		kpool_run(pool, fp_transpose_worker, &c);
	kpool_run(pool, fp_worker, &c);
	return 0;
}

/* Threads take whole groups of 16 weight rows (one tile's worth). */
static void q8_amx_worker(void *p, int ith, int nth)
{
	const struct mm_call *c = p;
	const int64_t rows = c->w->rows;
	long g0, g1;
	kpool_split((long)((rows + 15) / 16), ith, nth, &g0, &g1);
	const int64_t r0 = (int64_t)g0 * 16, r1 = (int64_t)g1 * 16 < rows ? (int64_t)g1 * 16 : rows;
	if (r1 > r0)
		c->k->gemm_q8_amx(c->w, r0, r1 - r0, c->xqt, c->xdt, c->m, c->y + r0, rows);
}

static void q8_worker(void *p, int ith, int nth)
{
	const struct mm_call *c = p;
	const int64_t rows = c->w->rows, cols = c->w->cols, nb = cols / Q8_0_BLOCK;
	const struct q8_0_block *wb = c->w->data;
	long g0, g1;
	kpool_split((long)((rows + MM_TW - 1) / MM_TW), ith, nth, &g0, &g1);
	for (int64_t b0 = 0; b0 < c->m; b0 += c->xblock) {
		const int64_t b1 = b0 + c->xblock < c->m ? b0 + c->xblock : c->m;
		for (long g = g0; g < g1; g++) {
			const int64_t r0 = (int64_t)g * MM_TW;
			const int nw = (int)(rows - r0 < MM_TW ? rows - r0 : MM_TW);
			for (int64_t j0 = b0; j0 < b1; j0 += MM_TX) {
				const int nx = (int)(b1 - j0 < MM_TX ? b1 - j0 : MM_TX);
				c->k->dot_q8(nw, nx, wb + r0 * nb, nb, c->xq + j0 * c->ldq,
					     c->xd + j0 * nb, c->y + j0 * rows + r0, rows);
			}
		}
	}
}

static void i8_worker(void *p, int ith, int nth)
{
	const struct mm_call *c = p;
	const int64_t rows = c->w->rows, cols = c->w->cols;
	const int8_t *wq = c->w->data;
	long g0, g1;
	kpool_split((long)((rows + MM_TW - 1) / MM_TW), ith, nth, &g0, &g1);
	for (int64_t b0 = 0; b0 < c->m; b0 += c->xblock) {
		const int64_t b1 = b0 + c->xblock < c->m ? b0 + c->xblock : c->m;
		for (long g = g0; g < g1; g++) {
			const int64_t r0 = (int64_t)g * MM_TW;
			const int nw = (int)(rows - r0 < MM_TW ? rows - r0 : MM_TW);
			for (int64_t j0 = b0; j0 < b1; j0 += MM_TX) {
				const int nx = (int)(b1 - j0 < MM_TX ? b1 - j0 : MM_TX);
				int64_t total[MM_TX * MM_TW] = { 0 };
				for (int64_t k0 = 0; k0 < cols; k0 += MM_I8_KCHUNK) {
					const int64_t kn = cols - k0 < MM_I8_KCHUNK ? cols - k0
										    : MM_I8_KCHUNK;
					int32_t isum[MM_TX * MM_TW];
					c->k->dot_i8(nw, nx, wq + r0 * cols + k0, cols,
						     c->xq + j0 * c->ldq + k0, c->ldq, kn, isum);
					for (int t = 0; t < MM_TX * MM_TW; t++)
						total[t] += isum[t];
				}
				for (int j = 0; j < nx; j++)
					for (int i = 0; i < nw; i++) {
						float s = mm_row_scale(c->w, r0 + i) * c->xd[j0 + j];
						c->y[(j0 + j) * rows + r0 + i] =
							(float)total[j * MM_TW + i] * s;
					}
			}
		}
	}
}

/* ---- packed integer GEMM ---------------------------------------------------- */

/* Bytes of one thread's packed-panel scratch: the interleaved quants, then
 * F32 block scales (Q8_0), then int32 corrections, then int32 sums (I8). */
static int qpanel_bytes(const struct kmat *w, int qmr, size_t *out)
{
	const size_t cols4 = ((size_t)w->cols + 3) / 4 * 4;
	size_t q, extra;
	int rc = ck_mul(cols4, MM_QNR, &q);
	if (rc)
		return rc;
	if (w->dtype == DT_Q8_0)
		extra = (size_t)w->cols / Q8_0_BLOCK * MM_QNR * (sizeof(float) + sizeof(int32_t));
	else
		extra = (size_t)MM_QNR * sizeof(int32_t) * (size_t)(1 + qmr);
	return ck_add(q, extra, out);
}

static void qgemm_worker(void *p, int ith, int nth)
{
	const struct mm_call *c = p;
	const struct kmat *w = c->w;
	const int64_t rows = w->rows, cols = w->cols, nb = cols / Q8_0_BLOCK;
	const int64_t ng = (cols + 3) / 4;
	const int qmr = c->k->qmr;
	long p0, p1;
	kpool_split((long)((rows + MM_QNR - 1) / MM_QNR), ith, nth, &p0, &p1);
	uint8_t *panel = kpool_scratch(c->pool, ith);
	uint8_t *after = panel + (size_t)ng * 4 * MM_QNR;
	const uint8_t *xu = (const uint8_t *)c->xq;
	for (long pi = p0; pi < p1; pi++) {
		const int64_t r0 = (int64_t)pi * MM_QNR;
		const int nv = (int)(rows - r0 < MM_QNR ? rows - r0 : MM_QNR);
		if (w->dtype == DT_Q8_0) {
			float *dw = (float *)(void *)after;
			int32_t *corr = (int32_t *)(void *)(dw + nb * MM_QNR);
			c->k->pack_q8(w, r0, nv, panel, dw, corr);
			for (int i0 = 0; i0 < c->m; i0 += qmr) {
				const int mi = c->m - i0 < qmr ? c->m - i0 : qmr;
				c->k->gemm_q8(mi, nb, panel, dw, corr, xu + i0 * c->ldq,
					      c->xd + i0 * nb, c->ldq, c->y + (int64_t)i0 * rows + r0,
					      rows, nv);
			}
		} else {
			int32_t *corr = (int32_t *)(void *)after;
			int32_t *isum = corr + MM_QNR;
			c->k->pack_i8(w, r0, nv, panel, corr);
			for (int i0 = 0; i0 < c->m; i0 += qmr) {
				const int mi = c->m - i0 < qmr ? c->m - i0 : qmr;
				c->k->gemm_i8(mi, ng, panel, corr, xu + i0 * c->ldq, c->ldq, isum);
				for (int i = 0; i < mi; i++)
					for (int col = 0; col < nv; col++) {
						float s = mm_row_scale(w, r0 + col) * c->xd[i0 + i];
						c->y[(int64_t)(i0 + i) * rows + r0 + col] =
							(float)(int64_t)isum[i * MM_QNR + col] * s;
					}
			}
		}
	}
}

/* ---- no-scratch fallback ------------------------------------------------- */

/* One weight value as F32, for the path taken when scratch memory cannot be
 * had: slow, but it needs no memory and gives the float reference's answer. */
static float weight_at(const struct kmat *w, int64_t r, int64_t k)
{
	const int64_t idx = r * w->cols + k;
	switch (w->dtype) {
	case DT_F32:
		return ((const float *)w->data)[idx];
	case DT_F16:
		return f16_to_f32(((const uint16_t *)w->data)[idx]);
	case DT_BF16:
		return bf16_to_f32(((const uint16_t *)w->data)[idx]);
	case DT_Q8_0: {
		const struct q8_0_block *b = (const struct q8_0_block *)w->data + idx / Q8_0_BLOCK;
		return f16_to_f32(b->d) * (float)b->qs[idx % Q8_0_BLOCK];
	}
	case DT_I8:
		return mm_row_scale(w, r) * (float)((const int8_t *)w->data)[idx];
	case DT_F8_E4M3:
		return mm_row_scale(w, r) * f8e4m3_to_f32(((const uint8_t *)w->data)[idx]);
	default:
		return 0.0f;
	}
}

static void fallback_worker(void *p, int ith, int nth)
{
	const struct mm_call *c = p;
	long r0, r1;
	kpool_split((long)c->w->rows, ith, nth, &r0, &r1);
	for (long r = r0; r < r1; r++)
		for (int j = 0; j < c->m; j++) {
			const float *xj = c->x + (int64_t)j * c->w->cols;
			float acc = 0.0f;
			for (int64_t k = 0; k < c->w->cols; k++)
				acc += weight_at(c->w, r, k) * xj[k];
			c->y[(int64_t)j * c->w->rows + r] = acc;
		}
}

/* ---- entry points ---------------------------------------------------------- */

static int run(struct kpool *pool, const struct mm_call *proto)
{
	struct mm_call c = *proto;
	c.pool = pool;
	const struct kmat *w = c.w;
	const bool fp_packed = w->dtype == DT_F16 || w->dtype == DT_BF16 ||
			       (w->dtype == DT_F8_E4M3 && c.k->f8_panel_f16);
	if (w->packed && ((w->dtype == DT_Q8_0 && c.k->gemm_q8p) ||
			  (w->dtype == DT_I8 && c.k->gemm_i8p && w->cols <= MM_I8P_MAX_K) ||
			  (fp_packed && c.k->gemm_fp))) {
		int rc = fp_packed ? run_packed_fp(pool, c.k, w, c.x, c.m, c.y)
				   : run_packed(pool, c.k, w, c.x, c.m, c.y);
		if (rc != ERR_NOMEM && rc != ERR_OVERFLOW)
			return rc;
		kpool_run(pool, fallback_worker, &c);
		return 0;
	}
	const size_t cols = (size_t)w->cols, m = (size_t)c.m;
	size_t per_thread = 0, shared = 0;
	int rc = 0;
	kpool_fn fn = fallback_worker;

	const bool bx = is_float_dtype(w->dtype) && c.k->gemv_bx && c.m >= MM_BX_MIN_M &&
			c.m > MM_TX && c.m <= MM_BX_LANES && MM_BX_LANES <= MM_GEMV_MAX_M;
	if (bx) {
		fn = gemv_worker;
		rc = ck_mul(cols, (size_t)MM_BX_LANES * sizeof(float), &shared);
	} else if (is_float_dtype(w->dtype)) {
		c.xf = c.x;
		c.ldx = (int64_t)cols;
		if (c.m > MM_TX) {
			/* Copy X with a row stride that is not a multiple of 4 KiB:
			 * the tiles walk several X rows at the same k, and rows
			 * 8 or 32 KiB apart all land in the same L1 sets. */
			c.ldx = (int64_t)((cols + 15) / 16 * 16 + 16);
			rc = ck_mul(m * (size_t)c.ldx, sizeof(float), &shared);
		}
		if (c.m > MM_GEMV_MAX_M && c.k->gemm) {
			fn = gemm_worker;
			per_thread = (size_t)MM_KC * (size_t)(c.k->nr + 1) * sizeof(float);
		} else {
			fn = gemv_worker;
			if (c.m > MM_TX)
				per_thread = (size_t)MM_GEMV_KC * MM_GEMV_ROWS * sizeof(float);
			else if (!c.k->dot_w && w->dtype != DT_F32)
				rc = ck_mul(cols, (size_t)MM_TW * sizeof(float), &per_thread);
		}
	} else {
		/* the packers (and the AMX path's scale gather) reach 16 rows
		 * with int32 byte offsets */
		const bool q8_gather_ok =
			cols / Q8_0_BLOCK * sizeof(struct q8_0_block) * 16 < (size_t)INT32_MAX;
		const bool amx = w->dtype == DT_Q8_0 && c.k->gemm_q8_amx && q8_gather_ok &&
				 c.m > MM_INT_TILE_MAX_M && c.m <= MM_AMX_LANES && c.k->amx_ok();
		const bool packed =
			!amx && c.k->gemm_q8 && c.m > MM_INT_TILE_MAX_M &&
			(w->dtype == DT_Q8_0 ? q8_gather_ok : w->cols <= MM_I8_PACKED_MAX_K);
		fn = amx ? q8_amx_worker
			 : packed ? qgemm_worker : w->dtype == DT_Q8_0 ? q8_worker : i8_worker;
		c.x_u8 = packed;
		c.n_xd = w->dtype == DT_Q8_0 ? (int64_t)cols / Q8_0_BLOCK : 1;
		c.ldq = (int64_t)(cols + 3) / 4 * 4;
		if (packed)
			rc = qpanel_bytes(w, c.k->qmr, &per_thread);
		size_t q_bytes = 0, d_bytes;
		if (!rc)
			rc = ck_mul(m, (size_t)c.ldq, &q_bytes);
		if (!rc)
			rc = ck_align_up(q_bytes, 64, &q_bytes);
		if (!rc)
			rc = ck_mul(m * (size_t)c.n_xd, sizeof(float), &d_bytes);
		if (!rc)
			rc = ck_add(q_bytes, d_bytes, &shared);
		size_t xt_at = 0, xdt_at = 0;
		if (amx && !rc) /* then xqt and xdt, 64-byte aligned */
			rc = ck_align_up(shared, 64, &xt_at);
		if (amx && !rc)
			rc = ck_add(xt_at, cols * MM_AMX_LANES, &xdt_at);
		if (amx && !rc)
			rc = ck_add(xdt_at, (size_t)c.n_xd * MM_AMX_LANES * sizeof(float), &shared);
		c.xblock = (int64_t)(MM_XBLOCK_BYTES / cols) / MM_TX * MM_TX;
		if (c.xblock < MM_TX)
			c.xblock = MM_TX;
		if (!rc && (rc = kpool_reserve(pool, 0, shared)) == 0) {
			c.xq = kpool_shared(pool);
			c.xd = (float *)(void *)((char *)c.xq + q_bytes);
			kpool_run(pool, quantize_x_worker, &c);
			if (amx) {
				c.xqt = c.xq + xt_at;
				c.xdt = (float *)(void *)((char *)c.xq + xdt_at);
				kpool_run(pool, transpose_xq_worker, &c);
			}
		}
	}
	if (!rc)
		rc = kpool_reserve(pool, per_thread, shared);
	if (rc == ERR_NOMEM || rc == ERR_OVERFLOW)
		fn = fallback_worker;
	else if (rc)
		return rc;
	else if (bx) {
		c.xt = kpool_shared(pool);
		kpool_run(pool, transpose_x_worker, &c);
	} else if (c.xf && c.ldx != (int64_t)cols) {
		float *xs = kpool_shared(pool);
		for (size_t j = 0; j < m; j++)
			memcpy(xs + j * (size_t)c.ldx, c.x + j * cols, cols * sizeof(float));
		c.xf = xs;
	}
	kpool_run(pool, fn, &c);
	return 0;
}

int kcpu_matmul_isa(struct kpool *pool, const struct kmat *w, const float *x, int m, float *y,
		    enum kcpu_isa isa)
{
	int rc = check_args(w, x, m, y);
	if (rc)
		return rc;
	if ((unsigned)isa >= KCPU_ISA__COUNT || !kcpu_isa_supported(isa))
		return ERR_UNSUPPORTED;
	if (isa == KCPU_ISA_AUTO)
		isa = kcpu_isa_best();
	if (m == 0 || w->rows == 0)
		return 0;
	struct mm_call c = { .k = kernels_for(isa), .w = w, .x = x, .m = m, .y = y };
	if (pool)
		return run(pool, &c);
	struct kpool *one;
	if (kpool_create(1, &one)) {
		kpool_run(NULL, fallback_worker, &c);
		return 0;
	}
	rc = run(one, &c);
	kpool_destroy(one);
	return rc;
}

void kcpu_matmul(struct kpool *pool, const struct kmat *w, const float *x, int m, float *y)
{
	(void)kcpu_matmul_isa(pool, w, x, m, y, KCPU_ISA_AUTO);
}
