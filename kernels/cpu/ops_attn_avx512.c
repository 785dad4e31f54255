/* kernels/cpu/ops_attn_avx512.c — paged attention on AVX-512: the kernel
 * behind kops_attn_rows and kops_attn_group (ops.h) for head_dim a multiple
 * of 16. A tile is up to kops_attn_tile_rows(n_q) consecutive query rows of
 * one sequence times the n_q heads of one KV head (M <= 64 queries; fewer
 * rows when M scores per position would pass 512 KB), in two passes.
 *
 * Scores: the K rows of 16 positions are transposed once per tile into a
 * [head_dim][16] panel (F16 converted on the way); every query value is
 * broadcast against a panel row, so one FMA adds a term to 16 scores and no
 * horizontal sums are needed (up to 12 queries x 2 panels per pass, in 24
 * registers). Each query's softmax runs over its own row's causal context.
 * Values: per row, up to 4 heads x 64 output columns in registers over the
 * row's positions, each V row loaded (and converted) once for those heads.
 * Blocks are scattered in the pool, so both passes prefetch the next
 * block's rows (decode, one row per sequence, waits on these loads).
 *
 * Batch invariance: in any tile, the score of (query, position) is scale *
 * (FMA chain over d = 0, 1, .., head_dim - 1), its softmax reads that
 * query's scores only, and each output value is (1 / sum) * (FMA chain over
 * positions 0, 1, ..). No operation mixes two queries, so each (row, head)
 * gets the same bits in every tile and alone (decode): tests/kernels/test_ops.c
 * checks that with memcmp, and the values against kops_attn_group_ref.
 */
#include <math.h>

#include "ops_impl.h"

static inline long round16(long n)
{
	return (n + 15) & ~15L;
}

/* Rows of a tile at context ctx0: kops_attn_tile_rows(n_q), fewer when the
 * scores would pass ATTN_SCORES floats (long contexts), at least one. */
#define ATTN_SCORES (64L * 2048) /* 512 KB */
static int tile_rows_at(int n_q, int ctx0, int n_rows)
{
	int n = kops_attn_tile_rows(n_q);
	n = n < n_rows ? n : n_rows;
	while (n > 1 && (long)n_q * n * round16(ctx0 + n - 1) > ATTN_SCORES)
		n--;
	return n;
}

/* A tile's scratch: 64-byte alignment slack, two K panels [2][hd][16], the
 * queries transposed [hd][M], the scores [M][round16(ctx)]. */
size_t kops__attn_tile_scratch(int n_q, int max_ctx, int head_dim)
{
	const long m = n_q > KOPS_ATTN_TILE_Q ? n_q : KOPS_ATTN_TILE_Q;
	long scores = m * round16(max_ctx);
	if (scores > ATTN_SCORES) /* tiles of one row may pass the bound */
		scores =
		    n_q * round16(max_ctx) > ATTN_SCORES ? n_q * round16(max_ctx) : ATTN_SCORES;
	return (size_t)(16 + 32L * head_dim + m * head_dim + scores);
}

#if KOPS_X86

#define INLINE T_AVX512 static inline __attribute__((always_inline))

enum {
	QK_MR = 12, /* queries per score pass: 12 x 2 panels = 24 accumulators */
	PV_GN = 4,  /* heads per value pass: 4 x 4 registers of 16 columns */
};

/* Position t's row (of a->kv_head) in a K or V pool of es-byte values. */
static inline const char *kv_row(const struct kops_attn_args *a, const void *pool, int t, int es)
{
	const int bs = a->block_size;
	return (const char *)pool + kops_kv_offset(a->block_table[t / bs], t % bs, a->kv_head,
	                                           a->n_kv_heads, bs, a->head_dim) *
	                                es;
}

/* r[i] lane j becomes r[j] lane i: interleave pairs of floats, then of
 * float pairs, then of 128-bit lanes, twice. */
INLINE void transpose16(__m512 r[16])
{
	__m512 t[16], u[16];
#pragma GCC unroll 8
	for (int i = 0; i < 8; i++) {
		t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	}
#pragma GCC unroll 4
	for (int g = 0; g < 4; g++) { /* u[4g + k]: lane L holds rows 4g..4g+3 of column 4L + k */
		__m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
		__m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
		u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
		u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
		u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
		u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
	}
#pragma GCC unroll 4
	for (int k = 0; k < 4; k++) {
		__m512 a0 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x88);
		__m512 a1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xdd);
		__m512 b0 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x88);
		__m512 b1 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xdd);
		r[k] = _mm512_shuffle_f32x4(a0, b0, 0x88);
		r[4 + k] = _mm512_shuffle_f32x4(a1, b1, 0x88);
		r[8 + k] = _mm512_shuffle_f32x4(a0, b0, 0xdd);
		r[12 + k] = _mm512_shuffle_f32x4(a1, b1, 0xdd);
	}
}

/* row[j] = K row of position t0 + j, or of ctx - 1 past it (the block
 * table may end there). */
static inline void k_rows(const struct kops_attn_args *a, int t0, int ctx, int es,
                          const char *row[16])
{
	if (a->block_size % 16 == 0 && t0 + 16 <= ctx) { /* one block, consecutive rows */
		const char *base = kv_row(a, a->k_cache, t0, es);
		for (int j = 0; j < 16; j++)
			row[j] = base + (long)j * a->head_dim * es;
	} else {
		for (int j = 0; j < 16; j++)
			row[j] = kv_row(a, a->k_cache, t0 + j < ctx ? t0 + j : ctx - 1, es);
	}
}

/* kt[d * 16 + j] = K[t0 + j][d] for j < 16, d < head_dim. Positions at or
 * past ctx read row ctx - 1 again: their scores are never used, and the
 * block table may end there. */
INLINE void k_panel(const struct kops_attn_args *a, int t0, int ctx, float *kt, const int F16)
{
	const int hd = a->head_dim, es = F16 ? 2 : 4;
	const char *row[16];
	k_rows(a, t0, ctx, es, row);
	if (t0 + 32 < ctx) { /* this panel of the next pair: the blocks are scattered */
		const char *next[16];
		k_rows(a, t0 + 32, ctx, es, next);
		for (int j = 0; j < 16; j++)
			for (int l = 0; l < hd * es; l += 64)
				_mm_prefetch(next[j] + l, _MM_HINT_T0);
	}
	for (int c = 0; c < hd; c += 16) {
		__m512 r[16];
#pragma GCC unroll 16
		for (int j = 0; j < 16; j++)
			r[j] = F16 ? _mm512_cvtph_ps(_mm256_loadu_si256(
			                 (const __m256i *)(row[j] + (long)c * es)))
			           : _mm512_loadu_ps((const float *)row[j] + c);
		transpose16(r);
#pragma GCC unroll 16
		for (int i = 0; i < 16; i++)
			_mm512_storeu_ps(kt + (long)(c + i) * 16, r[i]);
	}
}

/* qt[d * M + m] = Q[m][d]: query m is head m % n_q of row m / n_q. Rows of
 * 16 queries are read whole and transposed (they are often not in L1). */
INLINE void pack_qt(const struct kops_attn_args *a, int n_q, long q_stride, int M, float *qt)
{
	const int hd = a->head_dim;
	for (int m0 = 0; m0 < M; m0 += 16) {
		const int nm = M - m0 < 16 ? M - m0 : 16;
		const __mmask16 keep = (__mmask16)((1u << nm) - 1);
		const float *row[16];
		for (int j = 0; j < 16; j++) {
			const int m = m0 + (j < nm ? j : nm - 1);
			row[j] = a->q + (m / n_q) * q_stride + (long)(m % n_q) * hd;
		}
		for (int c = 0; c < hd; c += 16) {
			__m512 r[16];
#pragma GCC unroll 16
			for (int j = 0; j < 16; j++)
				r[j] = _mm512_loadu_ps(row[j] + c);
			transpose16(r);
#pragma GCC unroll 16
			for (int i = 0; i < 16; i++)
				_mm512_mask_storeu_ps(qt + (long)(c + i) * M + m0, keep, r[i]);
		}
	}
}

/* s[m * ss + 16 * b + j] = scale * sum_d qt[d * M + m] * kt[b][d][j] for
 * m < MR queries and b < NB panels (panel b at kt + b * 16 * hd), the sum
 * one FMA chain over d in order. */
INLINE void qk_pass(const float *qt, int M, const float *kt, int hd, float scale, float *s, long ss,
                    const int MR, const int NB)
{
	__m512 acc[QK_MR][2];
#pragma GCC unroll 12
	for (int m = 0; m < MR; m++) {
		acc[m][0] = _mm512_setzero_ps();
		acc[m][1] = _mm512_setzero_ps();
	}
	const float *kt1 = kt + 16L * hd;
#pragma GCC unroll 2
	for (int d = 0; d < hd; d++) {
		const float *qd = qt + (long)d * M;
		const __m512 k0 = _mm512_loadu_ps(kt + 16L * d);
		const __m512 k1 = NB > 1 ? _mm512_loadu_ps(kt1 + 16L * d) : k0;
#pragma GCC unroll 12
		for (int m = 0; m < MR; m++) {
			const __m512 qb = _mm512_set1_ps(qd[m]);
			acc[m][0] = _mm512_fmadd_ps(qb, k0, acc[m][0]);
			if (NB > 1)
				acc[m][1] = _mm512_fmadd_ps(qb, k1, acc[m][1]);
		}
	}
	const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 12
	for (int m = 0; m < MR; m++) {
		_mm512_storeu_ps(s + m * ss, _mm512_mul_ps(acc[m][0], sc));
		if (NB > 1)
			_mm512_storeu_ps(s + m * ss + 16, _mm512_mul_ps(acc[m][1], sc));
	}
}

typedef void (*qk_fn)(const float *qt, int M, const float *kt, int hd, float scale, float *s,
                      long ss);
#define QK_FN(MR, NB)                                                                              \
	T_AVX512 static void qk_##MR##x##NB(const float *qt, int M, const float *kt, int hd,       \
	                                    float scale, float *s, long ss)                        \
	{                                                                                          \
		qk_pass(qt, M, kt, hd, scale, s, ss, MR, NB);                                      \
	}
#define QK_FNS(NB)                                                                                 \
	QK_FN(1, NB)                                                                               \
	QK_FN(2, NB)                                                                               \
	QK_FN(3, NB)                                                                               \
	QK_FN(4, NB)                                                                               \
	QK_FN(5, NB)                                                                               \
	QK_FN(6, NB)                                                                               \
	QK_FN(7, NB)                                                                               \
	QK_FN(8, NB) QK_FN(9, NB) QK_FN(10, NB) QK_FN(11, NB) QK_FN(12, NB)
QK_FNS(1)
QK_FNS(2)
#define QK_ROW(NB)                                                                                 \
	{                                                                                          \
		qk_1x##NB, qk_2x##NB, qk_3x##NB, qk_4x##NB, qk_5x##NB, qk_6x##NB, qk_7x##NB,       \
		    qk_8x##NB, qk_9x##NB, qk_10x##NB, qk_11x##NB, qk_12x##NB                       \
	}
static const qk_fn qk_fns[2][QK_MR] = {QK_ROW(1), QK_ROW(2)};

/* In place: s[i] = exp(s[i] - max(s)); returns the sum. */
T_AVX512 static float softmax_unnorm(float *s, int n)
{
	__m512 mx = _mm512_set1_ps(-INFINITY);
	int i = 0;
	for (; i + 16 <= n; i += 16)
		mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + i));
	float m = _mm512_reduce_max_ps(mx);
	for (int k = i; k < n; k++)
		m = s[k] > m ? s[k] : m;
	__m512 vm = _mm512_set1_ps(m), sum = _mm512_setzero_ps();
	for (i = 0; i + 16 <= n; i += 16) {
		__m512 e = kops__exp_nonpos16(_mm512_sub_ps(_mm512_loadu_ps(s + i), vm));
		_mm512_storeu_ps(s + i, e);
		sum = _mm512_add_ps(sum, e);
	}
	if (i < n) {
		__mmask16 k = (__mmask16)((1u << (n - i)) - 1);
		__m512 e = kops__exp_nonpos16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), vm));
		_mm512_mask_storeu_ps(s + i, k, e);
		sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(k, e));
	}
	return _mm512_reduce_add_ps(sum);
}

/* out[g * hd + c + i] = inv[g] * sum_{t < n_ctx} s[g * ss + t] * V[t][c + i]
 * for g < GN heads and i < 16 * CZ columns, the sum one FMA chain over t in
 * order; each V row is loaded once for the GN heads. */
INLINE void pv_pass(const struct kops_attn_args *a, const float *s, long ss, const float *inv,
                    float *out, int n_ctx, int c, const int GN, const int CZ, const int F16)
{
	const int hd = a->head_dim, bs = a->block_size, es = F16 ? 2 : 4;
	const long blk = (long)a->n_kv_heads * bs * hd * es; /* bytes between a head's blocks */
	const char *v0 = (const char *)a->v_cache + ((long)a->kv_head * bs * hd + c) * es;
	__m512 acc[PV_GN][4];
#pragma GCC unroll 4
	for (int g = 0; g < GN; g++)
#pragma GCC unroll 4
		for (int i = 0; i < CZ; i++)
			acc[g][i] = _mm512_setzero_ps();
	for (int t0 = 0, b = 0; t0 < n_ctx; t0 += bs, b++) {
		const int n = n_ctx - t0 < bs ? n_ctx - t0 : bs;
		const char *v = v0 + a->block_table[b] * blk;
		/* the next block's rows are fetched while this one is used: the
		 * blocks are scattered, the hardware prefetcher stops at each */
		const char *vn = t0 + bs < n_ctx ? v0 + a->block_table[b + 1] * blk : v;
		const float *st = s + t0;
		for (int j = 0; j < n; j++, v += (long)hd * es, vn += (long)hd * es) {
			for (int l = 0; l < CZ * 16 * es; l += 64)
				_mm_prefetch(vn + l, _MM_HINT_T0);
			__m512 vv[4];
#pragma GCC unroll 4
			for (int i = 0; i < CZ; i++)
				vv[i] = F16 ? _mm512_cvtph_ps(_mm256_loadu_si256(
				                  (const __m256i *)(v + 32L * i)))
				            : _mm512_loadu_ps((const float *)v + 16 * i);
#pragma GCC unroll 4
			for (int g = 0; g < GN; g++) {
				const __m512 p = _mm512_set1_ps(st[g * ss + j]);
#pragma GCC unroll 4
				for (int i = 0; i < CZ; i++)
					acc[g][i] = _mm512_fmadd_ps(p, vv[i], acc[g][i]);
			}
		}
	}
#pragma GCC unroll 4
	for (int g = 0; g < GN; g++) {
		const __m512 sc = _mm512_set1_ps(inv[g]); /* normalize once, not per position */
#pragma GCC unroll 4
		for (int i = 0; i < CZ; i++)
			_mm512_storeu_ps(out + (long)g * hd + c + 16 * i,
			                 _mm512_mul_ps(acc[g][i], sc));
	}
}

typedef void (*pv_fn)(const struct kops_attn_args *a, const float *s, long ss, const float *inv,
                      float *out, int n_ctx, int c);
#define PV_FN(GN, CZ, F16)                                                                         \
	T_AVX512 static void pv_##GN##x##CZ##_##F16(const struct kops_attn_args *a,                \
	                                            const float *s, long ss, const float *inv,     \
	                                            float *out, int n_ctx, int c)                  \
	{                                                                                          \
		pv_pass(a, s, ss, inv, out, n_ctx, c, GN, CZ, F16);                                \
	}
#define PV_FNS(CZ, F16) PV_FN(1, CZ, F16) PV_FN(2, CZ, F16) PV_FN(3, CZ, F16) PV_FN(4, CZ, F16)
PV_FNS(1, 0)
PV_FNS(2, 0)
PV_FNS(4, 0)
PV_FNS(1, 1)
PV_FNS(2, 1)
PV_FNS(4, 1)
#define PV_ROW(CZ, F16)                                                                            \
	{                                                                                          \
		pv_1x##CZ##_##F16, pv_2x##CZ##_##F16, pv_3x##CZ##_##F16, pv_4x##CZ##_##F16         \
	}
/* [F16][log2 CZ][GN - 1] */
static const pv_fn pv_fns[2][3][PV_GN] = {
    {PV_ROW(1, 0), PV_ROW(2, 0), PV_ROW(4, 0)},
    {PV_ROW(1, 1), PV_ROW(2, 1), PV_ROW(4, 1)},
};

/* One tile: n_rows * n_q <= KOPS__ATTN_MAX_Q queries (see ops_impl.h). */
INLINE void attn_tile(const struct kops_attn_args *a, int n_q, int n_rows, long q_stride,
                      long out_stride, const int F16)
{
	const int hd = a->head_dim, M = n_q * n_rows, ctx = a->n_ctx + n_rows - 1;
	const long ss = round16(ctx);
	float *kt = (float *)(((uintptr_t)a->scratch + 63) & ~(uintptr_t)63);
	float *qt = kt + 32L * hd, *s = qt + (long)M * hd;
	pack_qt(a, n_q, q_stride, M, qt);
	/* scores, 32 positions (two panels) at a time; the passes over the M
	 * queries are as even as possible */
	const int n_pass = (M + QK_MR - 1) / QK_MR;
	for (int t0 = 0; t0 < ctx; t0 += 32) {
		const int nb = ctx - t0 > 16 ? 2 : 1;
		k_panel(a, t0, ctx, kt, F16);
		if (nb > 1)
			k_panel(a, t0 + 16, ctx, kt + 16L * hd, F16);
		for (int p = 0, m0 = 0; p < n_pass; p++) {
			const int mr = (M - m0 + n_pass - p - 1) / (n_pass - p);
			qk_fns[nb - 1][mr - 1](qt + m0, M, kt, hd, a->scale, s + m0 * ss + t0, ss);
			m0 += mr;
		}
	}
	float inv[KOPS__ATTN_MAX_Q];
	for (int m = 0; m < M; m++)
		inv[m] = 1.0f / softmax_unnorm(s + m * ss, a->n_ctx + m / n_q);
	for (int r = 0; r < n_rows; r++) {
		float *out = a->out + r * out_stride;
		for (int c = 0; c < hd;) {
			const int lz = hd - c >= 64 ? 2 : hd - c >= 32 ? 1 : 0; /* log2 registers */
			for (int g0 = 0; g0 < n_q; g0 += PV_GN) {
				const int gn = n_q - g0 < PV_GN ? n_q - g0 : PV_GN;
				const int m = r * n_q + g0;
				pv_fns[F16][lz][gn - 1](a, s + m * ss, ss, inv + m,
				                        out + (long)g0 * hd, a->n_ctx + r, c);
			}
			c += 16 << lz;
		}
	}
}

T_AVX512 static void attn_tile_f32(const struct kops_attn_args *a, int n_q, int n_rows,
                                   long q_stride, long out_stride)
{
	attn_tile(a, n_q, n_rows, q_stride, out_stride, 0);
}

T_AVX512 static void attn_tile_f16(const struct kops_attn_args *a, int n_q, int n_rows,
                                   long q_stride, long out_stride)
{
	attn_tile(a, n_q, n_rows, q_stride, out_stride, 1);
}

void kops__attn_rows_avx512(const struct kops_attn_args *a, int n_q, int n_rows, long q_stride,
                            long out_stride)
{
	struct kops_attn_args t = *a;
	for (int r = 0, n; r < n_rows; r += n) {
		n = tile_rows_at(n_q, a->n_ctx + r, n_rows - r);
		t.q = a->q + r * q_stride;
		t.out = a->out + r * out_stride;
		t.n_ctx = a->n_ctx + r;
		if (a->kv_dtype == DT_F16)
			attn_tile_f16(&t, n_q, n, q_stride, out_stride);
		else
			attn_tile_f32(&t, n_q, n, q_stride, out_stride);
	}
}

#endif
