// kernels/cuda/k_attn.cu — paged attention on the GPU (kcuda_attn.h):
// split-KV flash-decoding with a log-sum-exp merge (SIMT, F32 math; a kernel
// of its own, or fused into the decode kernel's last split), and a
// flash-attention-2 style prefill over tiles of query vectors: on tensor
// cores (mma.sync via kcuda_mma.h, 16-bit Q/K/P/V, F32 accumulation and softmax) for
// F16, BF16 and FP8 E4M3 (staged as F16) caches, SIMT F32 for F32 caches.
// CPU counterpart: kops_attn_group_ref (kernels/cpu/ops_ref.c);
// test: tests/kernels/test_cuda_attn.c.
#include <cuda_fp8.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "kernels/cuda/kcuda_attn.h"
#include "kernels/cuda/kcuda_internal.h"
#include "kernels/cuda/kcuda_mma.h"

namespace {

// ---- geometry shared by host and device -----------------------------------------

// Decode: each row's context is cut into n_splits splits of equal length
// (rounded up to SPLIT_ROUND positions), computed in the kernels from the
// row's own context, so short contexts get short splits; n_splits depends on
// n_rows, the heads and max_ctx only (enough CTAs to fill the device), so the
// grid of a captured graph stays valid for every context up to max_ctx.
constexpr int SPLIT_ROUND = 32;
constexpr int MIN_SPLIT = 32;	     // max_ctx / MIN_SPLIT bounds the splits
constexpr int MAX_SPLITS = 32;
constexpr int DEC_TARGET_CTAS = 16384; // short splits: a CTA walks its positions in sequence
constexpr int DEC_THREADS = 128;
constexpr int DEC_HEADS = 8; // most query heads of one kv head handled by one decode CTA
constexpr int PF_THREADS = 256;

// Prefill tile per head_dim: QN query vectors (row x head pairs) per CTA,
// BK keys per K/V tile; a 16 x 16 thread grid where each thread owns RQ
// query vectors (ty + 16 i) and RK keys (tx + 16 j) of the score tile.
template <int HD> struct pf_cfg;
template <> struct pf_cfg<64> {
	static constexpr int QN = 64, BK = 64, RQ = 4, RK = 4;
};
template <> struct pf_cfg<128> {
	static constexpr int QN = 64, BK = 32, RQ = 4, RK = 2;
};
template <> struct pf_cfg<256> {
	static constexpr int QN = 32, BK = 32, RQ = 2, RK = 2;
};

struct attn_geo {
	int group;	   // n_heads / n_kv_heads
	int hc;		   // query heads per CTA (a chunk of the group)
	int n_hchunks;	   // chunks per kv head: grid.y = n_kv_heads * n_hchunks
	int n_splits;	   // decode (the split length is per row: split_len_of)
	int rows_per_tile; // prefill
	int ctx_limit;	   // positions past this are never read (table size, max_ctx)
	float k_mul;	   // scale (* k_scale for FP8)
	float v_mul;	   // 1 (v_scale for FP8)
	const float *k_head, *v_head; // FP8 per-KV-head scales, or NULL: k_mul, v_mul
};

// The score and output multipliers of KV head kvh (per-head FP8 scales
// where given; a.scale * scale is the one product the host forms for k_mul).
__device__ __forceinline__ float head_k_mul(const k_attn_args &a, const attn_geo &g, int kvh)
{
	return g.k_head ? a.scale * g.k_head[kvh] : g.k_mul;
}
__device__ __forceinline__ float head_v_mul(const attn_geo &g, int kvh)
{
	return g.v_head ? g.v_head[kvh] : g.v_mul;
}

// Most splits any launch with this max_ctx uses (sizes the workspace).
int max_splits_for(int max_ctx)
{
	const long long units = ((long long)max_ctx + MIN_SPLIT - 1) / MIN_SPLIT;
	return units < MAX_SPLITS ? (int)units : MAX_SPLITS;
}

// Splits of a launch: enough CTAs for the device, at most max_splits_for.
int n_splits_for(int n_rows, int head_ctas, int max_ctx)
{
	const long long ctas = (long long)n_rows * head_ctas;
	const long long want = (DEC_TARGET_CTAS + ctas - 1) / ctas;
	const int cap = max_splits_for(max_ctx);
	return want < 1 ? 1 : want > cap ? cap : (int)want;
}

// ---- device helpers ---------------------------------------------------------------

// Number of positions row r attends: positions[r] + 1, 0 for a negative
// position (padding), never more than limit.
__device__ __forceinline__ int row_ctx(int pos, int limit)
{
	if (pos < 0)
		return 0;
	return pos >= limit ? limit : pos + 1;
}

// Length of each of a row's n_splits splits for n_ctx positions (0 for an
// empty context); the decode and merge kernels must agree on it.
__device__ __forceinline__ int split_len_of(int n_ctx, int n_splits)
{
	const long long per = ((long long)n_ctx + n_splits - 1) / n_splits;
	return (int)((per + SPLIT_ROUND - 1) / SPLIT_ROUND * SPLIT_ROUND);
}

// Element offset of position t of a sequence (its block table) for kv head kvh.
__device__ __forceinline__ size_t kv_off(const int32_t *table, int t, int bs, int n_kv, int kvh,
					 int hd)
{
	const size_t b = (size_t)(uint32_t)table[t / bs];
	return ((b * (size_t)n_kv + (size_t)kvh) * (size_t)bs + (size_t)(t % bs)) * (size_t)hd;
}

// Eight consecutive K/V values as floats; p is aligned to 8 elements.
__device__ __forceinline__ void load8(const float *p, float f[8])
{
	const float4 a = *reinterpret_cast<const float4 *>(p);
	const float4 b = *reinterpret_cast<const float4 *>(p + 4);
	f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
	f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

__device__ __forceinline__ void load8(const __half *p, float f[8])
{
	const uint4 u = *reinterpret_cast<const uint4 *>(p);
	const __half2 *h = reinterpret_cast<const __half2 *>(&u);
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const float2 x = __half22float2(h[i]);
		f[2 * i] = x.x, f[2 * i + 1] = x.y;
	}
}

__device__ __forceinline__ void load8(const __nv_bfloat16 *p, float f[8])
{
	const uint4 u = *reinterpret_cast<const uint4 *>(p);
	const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const float2 x = __bfloat1622float2(h[i]);
		f[2 * i] = x.x, f[2 * i + 1] = x.y;
	}
}

// E4M3 values are exact in F16, so the pairwise FP8 -> F16 conversion loses nothing.
__device__ __forceinline__ void load8(const __nv_fp8_e4m3 *p, float f[8])
{
	const uint2 u = *reinterpret_cast<const uint2 *>(p);
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const unsigned w = ((i < 2 ? u.x : u.y) >> (16 * (i & 1))) & 0xffffu;
		const __half2_raw r =
			__nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)w, __NV_E4M3);
		const float2 x = __half22float2(__half2(r));
		f[2 * i] = x.x, f[2 * i + 1] = x.y;
	}
}

__device__ __forceinline__ void zero8(float f[8])
{
#pragma unroll
	for (int i = 0; i < 8; i++)
		f[i] = 0.0f;
}

// The log-sum-exp merge of one (row, query head)'s n_used split partials,
// shared by attn_merge_kernel and the decode kernel's fused merge (so the two
// give the same bits). One warp, lane i for split i: from the splits'
// (max, sum) pairs ml, the lane's weight exp(m_i - M) in *w; returns the
// total L. Partials are read through L2: other CTAs wrote them.
__device__ __forceinline__ float merge_weight(const float *ml, int n_used, int lane, float *w)
{
	const float mi = lane < n_used ? __ldcg(ml + 2 * lane) : -INFINITY;
	const float li = lane < n_used ? __ldcg(ml + 2 * lane + 1) : 0.0f;
	const float M = kcu_warp_max(mi);
	*w = mi == -INFINITY ? 0.0f : expf(mi - M); // M is finite where used
	return kcu_warp_sum(*w * li);
}

// Dim d of the merged output: the splits' accumulators acc (hd apart)
// weighted by sw, over L (0 for an empty context), times v_mul.
__device__ __forceinline__ float merge_dim(const float *sw, const float *acc, int n_used, int hd,
					   int d, float L, float v_mul)
{
	float A = 0.0f;
#pragma unroll 4
	for (int i = 0; i < n_used; i++)
		A = fmaf(sw[i], __ldcg(acc + (size_t)i * hd + d), A);
	return L > 0.0f ? A / L * v_mul : 0.0f;
}

// ---- decode: one CTA per (row, kv head x head chunk, split) ------------------------
//
// A warp covers RPW positions at a time, LPR = HD / 8 lanes per position, each
// lane holding 8 dims of K, V and the accumulators of up to NH (4 or 8) query
// heads (the queries sit in shared memory; K/V are prefetched one step ahead).
// Every subgroup of LPR lanes keeps its own running max/sum per query head;
// the CTA merges its subgroups through shared memory and either writes the
// output (one split) or a partial (max, sum, acc) for attn_merge_kernel.

template <int HD, typename KT, int NH>
__global__ void __launch_bounds__(DEC_THREADS, NH == 4 ? 4 : 3)
	attn_decode_kernel(const k_attn_args a, const attn_geo g)
{
	constexpr int LPR = HD / 8;
	constexpr int RPW = 32 / LPR;
	constexpr int NWARP = DEC_THREADS / 32;
	constexpr int NSG = DEC_THREADS / LPR;
	__shared__ float sm_m[NSG][NH];
	__shared__ float sm_l[NSG][NH];
	__shared__ __align__(16) float sm_acc[NSG][NH][HD];
	__shared__ __align__(16) float sm_q[NH][HD];

	kcu_pdl_trigger(); // PDL: nothing read or written before the wait
	kcu_pdl_wait();
	const int r = blockIdx.x;
	const int kvh = blockIdx.y / g.n_hchunks;
	const float k_mul = head_k_mul(a, g, kvh), v_mul = head_v_mul(g, kvh);
	const int hbeg = (blockIdx.y % g.n_hchunks) * NH; // within the group
	const int h0 = kvh * g.group + hbeg;			  // first query head
	const int ng = min(NH, g.group - hbeg);
	const int split = blockIdx.z;
	const int n_ctx = row_ctx(a.positions[r], g.ctx_limit);
	const int split_len = split_len_of(n_ctx, g.n_splits);
	const long long t_begin_ll = (long long)split * split_len;
	// splits past the context: the merge never reads them (with the merge
	// fused, split 0 of an empty context writes its zeros, as the merge
	// kernel does)
	if (g.n_splits > 1 && t_begin_ll >= n_ctx) {
		if (a.split_counters && n_ctx == 0 && split == 0) {
			const size_t o0 = ((size_t)r * a.n_heads + h0) * HD;
			for (int idx = (int)threadIdx.x; idx < ng * HD; idx += DEC_THREADS)
				kcu_store(a.out, a.out_dt, o0 + idx, 0.0f);
		}
		return;
	}
	const int t_begin = (int)min(t_begin_ll, (long long)n_ctx);
	const int t_end = (int)min((long long)n_ctx, t_begin_ll + split_len);

	const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
	const int sub = lane / LPR, li = lane % LPR, sg = tid / LPR;
	const int d0 = li * 8;
	const size_t qkv_row = (size_t)r * (size_t)a.n_heads * HD; // q and out row start

	// the chunk's queries in shared memory (registers go to acc and the
	// prefetched K/V, so that more CTAs fit on an SM)
	for (int e = tid; e < NH * (HD / 4); e += DEC_THREADS) {
		const int h = e / (HD / 4), d = (e % (HD / 4)) * 4;
		float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		if (h < ng)
			x = *reinterpret_cast<const float4 *>(a.q + qkv_row + (size_t)(h0 + h) * HD + d);
		*reinterpret_cast<float4 *>(&sm_q[h][d]) = x;
	}
	__syncthreads();

	float acc[NH][8], m[NH], l[NH];
#pragma unroll
	for (int h = 0; h < NH; h++) {
		m[h] = -INFINITY;
		l[h] = 0.0f;
		zero8(acc[h]);
	}

	const int32_t *table = a.block_tables + (size_t)a.row_seq[r] * a.max_blocks_per_seq;
	const KT *kc = (const KT *)a.k_cache;
	const KT *vc = (const KT *)a.v_cache;
	constexpr int STEP = NWARP * RPW;
	// K/V of position t into k, v (zeros past the split's end)
	auto load_kv = [&](int t, float k[8], float v[8]) {
		if (t < t_end) {
			const size_t off = kv_off(table, t, a.block_size, a.n_kv_heads, kvh, HD) + d0;
			load8(kc + off, k);
			load8(vc + off, v);
		} else {
			zero8(k);
			zero8(v);
		}
	};
	// one position of the subgroup: the running softmax of every head
	auto visit = [&](int t, const float k[8], const float v[8]) {
		const bool valid = t < t_end;
#pragma unroll
		for (int h = 0; h < NH; h++) {
			if (h >= ng) // uniform over the CTA
				continue;
			const float4 qa = *reinterpret_cast<const float4 *>(&sm_q[h][d0]);
			const float4 qb = *reinterpret_cast<const float4 *>(&sm_q[h][d0 + 4]);
			float dot = qa.x * k[0];
			dot = fmaf(qa.y, k[1], dot);
			dot = fmaf(qa.z, k[2], dot);
			dot = fmaf(qa.w, k[3], dot);
			dot = fmaf(qb.x, k[4], dot);
			dot = fmaf(qb.y, k[5], dot);
			dot = fmaf(qb.z, k[6], dot);
			dot = fmaf(qb.w, k[7], dot);
#pragma unroll
			for (int o = LPR / 2; o > 0; o >>= 1)
				dot += __shfl_xor_sync(0xffffffffu, dot, o);
			const float s = valid ? dot * k_mul : -INFINITY;
			const float m_new = fmaxf(m[h], s);
			if (m_new == -INFINITY)
				continue;
			const float alpha = expf(m[h] - m_new); // 0 while m[h] is -inf
			const float p = expf(s - m_new);	// 0 for an invalid position
			l[h] = l[h] * alpha + p;
#pragma unroll
			for (int i = 0; i < 8; i++)
				acc[h][i] = fmaf(p, v[i], acc[h][i] * alpha);
			m[h] = m_new;
		}
	};
	// Two steps per iteration, the next two loaded before either is used:
	// two K/V loads in flight per lane while the current pair is scored.
	float ka[8], va[8], kb[8], vb[8];
	load_kv(t_begin + warp * RPW + sub, ka, va);
	load_kv(t_begin + warp * RPW + sub + STEP, kb, vb);
	// t0 is warp-uniform, so every lane of a warp runs the same iterations
	// and the full-mask shuffles in visit always see 32 active lanes.
	for (int t0 = t_begin + warp * RPW; t0 < t_end; t0 += 2 * STEP) {
		float k0[8], v0[8], k1[8], v1[8];
#pragma unroll
		for (int i = 0; i < 8; i++) {
			k0[i] = ka[i], v0[i] = va[i];
			k1[i] = kb[i], v1[i] = vb[i];
		}
		load_kv(t0 + sub + 2 * STEP, ka, va);
		load_kv(t0 + sub + 3 * STEP, kb, vb);
		visit(t0 + sub, k0, v0);
		visit(t0 + sub + STEP, k1, v1);
	}

#pragma unroll
	for (int h = 0; h < NH; h++) {
		if (li == 0) {
			sm_m[sg][h] = m[h];
			sm_l[sg][h] = l[h];
		}
		float4 *dst = reinterpret_cast<float4 *>(&sm_acc[sg][h][d0]);
		dst[0] = make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
		dst[1] = make_float4(acc[h][4], acc[h][5], acc[h][6], acc[h][7]);
	}
	__syncthreads();

	float *ws = (float *)a.workspace;
	const size_t n_part = (size_t)a.n_rows * a.n_heads * g.n_splits;
	for (int idx = tid; idx < ng * HD; idx += DEC_THREADS) {
		const int h = idx / HD, d = idx % HD;
		float M = -INFINITY;
		for (int i = 0; i < NSG; i++)
			M = fmaxf(M, sm_m[i][h]);
		float L = 0.0f, A = 0.0f;
		if (M != -INFINITY) {
			for (int i = 0; i < NSG; i++) {
				const float mi = sm_m[i][h];
				if (mi == -INFINITY)
					continue;
				const float w = expf(mi - M);
				L = fmaf(w, sm_l[i][h], L);
				A = fmaf(w, sm_acc[i][h][d], A);
			}
		}
		const size_t hrow = (size_t)r * a.n_heads + h0 + h; // (row, query head)
		if (g.n_splits == 1) {
			kcu_store(a.out, a.out_dt, hrow * HD + d, L > 0.0f ? A / L * v_mul : 0.0f);
		} else {
			const size_t part = hrow * g.n_splits + split;
			ws[n_part * 2 + part * HD + d] = A;
			if (d == 0) {
				ws[part * 2] = M;
				ws[part * 2 + 1] = L;
			}
		}
	}
	if (g.n_splits == 1 || !a.split_counters)
		return;

	// The merge, fused: the last of the row's used splits to finish merges
	// the chunk's heads with attn_merge_kernel's merge_weight / merge_dim.
	// Every thread fences its partials, then one counts the CTA in.
	__shared__ int s_last;
	__shared__ float s_w[NH][MAX_SPLITS];
	__shared__ float s_L[NH];
	const int n_used = min(g.n_splits, (n_ctx + split_len - 1) / split_len); // n_ctx > 0 here
	unsigned *cnt = a.split_counters + (size_t)r * gridDim.y + blockIdx.y;
	__threadfence();
	__syncthreads();
	// atomicInc wraps to 0 at the last split: ready for the next launch
	if (tid == 0)
		s_last = atomicInc(cnt, (unsigned)(n_used - 1)) == (unsigned)(n_used - 1);
	__syncthreads();
	if (!s_last)
		return;
	__threadfence();
	for (int h = warp; h < ng; h += NWARP) {
		const size_t hrow = (size_t)r * a.n_heads + h0 + h;
		const float L = merge_weight(ws + hrow * g.n_splits * 2, n_used, lane, &s_w[h][lane]);
		if (lane == 0)
			s_L[h] = L;
	}
	__syncthreads();
	for (int idx = tid; idx < ng * HD; idx += DEC_THREADS) {
		const int h = idx / HD, d = idx % HD;
		const size_t hrow = (size_t)r * a.n_heads + h0 + h;
		const float *acc = ws + n_part * 2 + hrow * g.n_splits * HD;
		kcu_store(a.out, a.out_dt, hrow * HD + d,
			  merge_dim(s_w[h], acc, n_used, HD, d, s_L[h], v_mul));
	}
}

// One CTA per (row, query head), one thread per dim: log-sum-exp merge of
// the splits that hold part of the row's context. Warp 0 turns the splits'
// (max, sum) into weights exp(m_i - M) and the total L with warp collectives
// (n_splits <= 32, one lane each); then each dim sums its splits' weighted
// accumulators, loads independent of each other.
__global__ void attn_merge_kernel(const k_attn_args a, const attn_geo g)
{
	__shared__ float sw[MAX_SPLITS];
	__shared__ float s_l;
	kcu_pdl_trigger(); // PDL: nothing read or written before the wait
	kcu_pdl_wait();
	const int r = blockIdx.x, h = blockIdx.y, hd = a.head_dim;
	const float v_mul = head_v_mul(g, h / g.group);
	const int n_ctx = row_ctx(a.positions[r], g.ctx_limit);
	const int len = split_len_of(n_ctx, g.n_splits);
	const int n_used = len > 0 ? min(g.n_splits, (n_ctx + len - 1) / len) : 0;
	const size_t hrow = (size_t)r * a.n_heads + h;
	const size_t n_part = (size_t)a.n_rows * a.n_heads * g.n_splits;
	const float *ws = (const float *)a.workspace;
	const float *ml = ws + hrow * g.n_splits * 2;
	const float *acc = ws + n_part * 2 + hrow * g.n_splits * hd;
	if (threadIdx.x < 32) { // blockDim.x = head_dim >= 64: warp 0 is whole
		const float L = merge_weight(ml, n_used, (int)threadIdx.x, &sw[threadIdx.x]);
		if (threadIdx.x == 0)
			s_l = L;
	}
	__syncthreads();
	for (int d = threadIdx.x; d < hd; d += blockDim.x)
		kcu_store(a.out, a.out_dt, hrow * hd + d, merge_dim(sw, acc, n_used, hd, d, s_l, v_mul));
}

// ---- prefill: one CTA per (query tile of one sequence, kv head x head chunk) ----
//
// Query vector qv of the tile is (row row0 + qv / hc, head hbeg + qv % hc).
// Per K/V tile of BK positions: K -> shared (F32), scores in registers, masked
// per query by its own position, online softmax, P -> shared; then V into the
// same buffer and acc += P V. Dynamic shared memory, in floats:
//   Qs[QN][HD] | KVs[BK][HD + 4] | Ps[QN][BK + 16] | qlast[QN] (int)
// (the pads keep float4 rows 16-byte aligned and spread the banks).

template <int HD> constexpr size_t pf_smem_bytes()
{
	using C = pf_cfg<HD>;
	return sizeof(float) * ((size_t)C::QN * HD + (size_t)C::BK * (HD + 4) +
				(size_t)C::QN * (C::BK + 16) + C::QN);
}

template <int HD, typename KT>
__device__ __forceinline__ void pf_load_tile(const KT *pool, const int32_t *table, int kt0,
					     int n_kv, const k_attn_args &a, int kvh, float *dst)
{
	using C = pf_cfg<HD>;
	constexpr int KS = HD + 4, V8 = HD / 8;
	for (int e = threadIdx.x; e < C::BK * V8; e += PF_THREADS) {
		const int k = e / V8, d = (e % V8) * 8;
		const int t = kt0 + k;
		float f[8];
		if (t < n_kv)
			load8(pool + kv_off(table, t, a.block_size, a.n_kv_heads, kvh, HD) + d, f);
		else
			zero8(f); // zeros, not garbage: P = 0 times NaN would be NaN
		float4 *o = reinterpret_cast<float4 *>(dst + k * KS + d);
		o[0] = make_float4(f[0], f[1], f[2], f[3]);
		o[1] = make_float4(f[4], f[5], f[6], f[7]);
	}
}

template <int HD, typename KT>
__global__ void __launch_bounds__(PF_THREADS)
	attn_prefill_kernel(const k_attn_args a, const attn_geo g)
{
	using C = pf_cfg<HD>;
	constexpr int QN = C::QN, BK = C::BK, RQ = C::RQ, RK = C::RK;
	constexpr int KS = HD + 4, PS = BK + 16, NC = HD / 64;
	static_assert(QN == 16 * RQ && BK == 16 * RK && PF_THREADS == 256, "16 x 16 thread grid");
	extern __shared__ __align__(16) float smem[];
	float *Qs = smem;
	float *KVs = Qs + QN * HD;
	float *Ps = KVs + BK * KS;
	int *qlast = reinterpret_cast<int *>(Ps + QN * PS);

	const int s = blockIdx.z;
	const int kvh = blockIdx.y / g.n_hchunks;
	const float k_mul = head_k_mul(a, g, kvh), v_mul = head_v_mul(g, kvh);
	const int hbeg = (blockIdx.y % g.n_hchunks) * g.hc;
	const int ng = min(g.hc, g.group - hbeg);
	const int row0 = a.seq_start[s] + (int)blockIdx.x * g.rows_per_tile;
	const int row_end = min(a.seq_start[s + 1], row0 + g.rows_per_tile);
	if (row0 >= row_end) // uniform: the whole CTA leaves before any barrier
		return;
	const int tid = threadIdx.x;

	// Q tile (unused query vectors are zero) and each query's last position
	for (int e = tid; e < QN * (HD / 4); e += PF_THREADS) {
		const int qv = e / (HD / 4), d = (e % (HD / 4)) * 4;
		const int row = row0 + qv / g.hc, h = qv % g.hc;
		float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		if (row < row_end && h < ng)
			x = *reinterpret_cast<const float4 *>(
				a.q + ((size_t)row * a.n_heads + kvh * g.group + hbeg + h) * HD + d);
		*reinterpret_cast<float4 *>(Qs + qv * HD + d) = x;
	}
	for (int qv = tid; qv < QN; qv += PF_THREADS) {
		const int row = row0 + qv / g.hc, h = qv % g.hc;
		qlast[qv] = row < row_end && h < ng ? row_ctx(a.positions[row], g.ctx_limit) - 1 : -1;
	}
	__syncthreads();
	int tmax = -1;
	for (int i = 0; i < QN; i++)
		tmax = max(tmax, qlast[i]);
	const int n_kv = tmax + 1; // positions the tile reads: 0 .. tmax

	const int ty = tid / 16, tx = tid % 16;
	int my_last[RQ];
	float m[RQ], l[RQ], o[RQ][NC][4];
#pragma unroll
	for (int i = 0; i < RQ; i++) {
		my_last[i] = qlast[ty + 16 * i];
		m[i] = -INFINITY;
		l[i] = 0.0f;
#pragma unroll
		for (int c = 0; c < NC; c++)
			o[i][c][0] = o[i][c][1] = o[i][c][2] = o[i][c][3] = 0.0f;
	}

	const int32_t *table = a.block_tables + (size_t)s * a.max_blocks_per_seq;
	for (int kt0 = 0; kt0 < n_kv; kt0 += BK) {
		pf_load_tile<HD>((const KT *)a.k_cache, table, kt0, n_kv, a, kvh, KVs);
		__syncthreads();

		float sc[RQ][RK];
#pragma unroll
		for (int i = 0; i < RQ; i++)
#pragma unroll
			for (int j = 0; j < RK; j++)
				sc[i][j] = 0.0f;
#pragma unroll 4
		for (int d = 0; d < HD; d += 4) {
			float4 qa[RQ], kb[RK];
#pragma unroll
			for (int i = 0; i < RQ; i++)
				qa[i] = *reinterpret_cast<const float4 *>(Qs + (ty + 16 * i) * HD + d);
#pragma unroll
			for (int j = 0; j < RK; j++)
				kb[j] = *reinterpret_cast<const float4 *>(KVs + (tx + 16 * j) * KS + d);
#pragma unroll
			for (int i = 0; i < RQ; i++)
#pragma unroll
				for (int j = 0; j < RK; j++) {
					float x = sc[i][j];
					x = fmaf(qa[i].x, kb[j].x, x);
					x = fmaf(qa[i].y, kb[j].y, x);
					x = fmaf(qa[i].z, kb[j].z, x);
					x = fmaf(qa[i].w, kb[j].w, x);
					sc[i][j] = x;
				}
		}

		// online softmax; the 16 lanes of a half-warp share query rows ty + 16 i
#pragma unroll
		for (int i = 0; i < RQ; i++) {
			float mx = -INFINITY;
#pragma unroll
			for (int j = 0; j < RK; j++) {
				const int t = kt0 + tx + 16 * j;
				sc[i][j] = t <= my_last[i] ? sc[i][j] * k_mul : -INFINITY;
				mx = fmaxf(mx, sc[i][j]);
			}
#pragma unroll
			for (int off = 8; off > 0; off >>= 1)
				mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
			const float m_new = fmaxf(m[i], mx);
			float alpha = 1.0f, rs = 0.0f;
			if (m_new != -INFINITY) {
				alpha = expf(m[i] - m_new); // 0 while m[i] is -inf
#pragma unroll
				for (int j = 0; j < RK; j++) {
					sc[i][j] = expf(sc[i][j] - m_new); // masked: exp(-inf) = 0
					rs += sc[i][j];
				}
			} else {
#pragma unroll
				for (int j = 0; j < RK; j++)
					sc[i][j] = 0.0f;
			}
#pragma unroll
			for (int off = 8; off > 0; off >>= 1)
				rs += __shfl_xor_sync(0xffffffffu, rs, off);
			l[i] = l[i] * alpha + rs;
			m[i] = m_new;
#pragma unroll
			for (int c = 0; c < NC; c++) {
				o[i][c][0] *= alpha;
				o[i][c][1] *= alpha;
				o[i][c][2] *= alpha;
				o[i][c][3] *= alpha;
			}
#pragma unroll
			for (int j = 0; j < RK; j++)
				Ps[(ty + 16 * i) * PS + tx + 16 * j] = sc[i][j];
		}
		__syncthreads(); // K no longer read; P visible

		pf_load_tile<HD>((const KT *)a.v_cache, table, kt0, n_kv, a, kvh, KVs);
		__syncthreads();

#pragma unroll 4
		for (int k = 0; k < BK; k++) {
			float p[RQ];
#pragma unroll
			for (int i = 0; i < RQ; i++)
				p[i] = Ps[(ty + 16 * i) * PS + k];
#pragma unroll
			for (int c = 0; c < NC; c++) {
				const float4 v =
					*reinterpret_cast<const float4 *>(KVs + k * KS + c * 64 + tx * 4);
#pragma unroll
				for (int i = 0; i < RQ; i++) {
					o[i][c][0] = fmaf(p[i], v.x, o[i][c][0]);
					o[i][c][1] = fmaf(p[i], v.y, o[i][c][1]);
					o[i][c][2] = fmaf(p[i], v.z, o[i][c][2]);
					o[i][c][3] = fmaf(p[i], v.w, o[i][c][3]);
				}
			}
		}
		__syncthreads(); // before the next tile overwrites KVs and Ps
	}

#pragma unroll
	for (int i = 0; i < RQ; i++) {
		const int qv = ty + 16 * i;
		const int row = row0 + qv / g.hc, h = qv % g.hc;
		if (row >= row_end || h >= ng)
			continue;
		const float inv = l[i] > 0.0f ? v_mul / l[i] : 0.0f;
		const size_t base = ((size_t)row * a.n_heads + kvh * g.group + hbeg + h) * HD;
#pragma unroll
		for (int c = 0; c < NC; c++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				kcu_store(a.out, a.out_dt, base + c * 64 + tx * 4 + e, o[i][c][e] * inv);
	}
}

// ---- prefill on tensor cores: one CTA per (query tile, kv head x head chunk) ----
//
// Same tiles as the SIMT prefill: query vector qv of the tile is (row
// row0 + qv / hc, head hbeg + qv % hc), TC_BM of them, so a GQA group fills
// the MMA rows even when a chunk has few rows. Warp w owns query vectors
// 16 w .. 16 w + 15, flash-attention-2 style with mma.sync m16n8k16
// (kcuda_mma.h, whose per-lane layout is known): S = Q K^T stays in
// registers, lane (g, t) holding rows g and g + 8 of the warp, columns
// 8 j + 2 t, +1 of each 8-key slice j; the online softmax runs on those
// registers (row max over the four lanes of a row by two shuffles, the row
// sum kept per lane and added up at the end); the accumulator layout of S is
// the A-operand layout of P, so P is rounded to the 16-bit type in registers
// and O += P V accumulates in registers (O: 16 x HD per warp, F32). Q
// fragments stay in registers for HD <= 128 (read once with ldmatrix), K with
// ldmatrix, V with ldmatrix.trans. K/V tiles of BN positions are
// double-buffered in shared memory: cp.async for F16/BF16 caches, load and
// convert for FP8 (staged as F16); positions past the tile's last are zeros
// (P = 0 times a NaN would be NaN). Dynamic shared memory (bytes):
//   K0 | V0 | K1 | V1 (each [BN][HD + 8] 16-bit) | Q [TC_BM][HD + 8] (16-bit;
//   placed on K1 V1 when Q goes to registers) | qlast[TC_BM] (int; on K1
//   when Q stays in shared memory, HD 256: 99 KB in all, an sm_89 CTA's most)
// K1 V1 are first written by tile 1, after the prologue's last barrier.
// The + 8 pad makes rows 16-byte aligned and the eight rows of an ldmatrix
// or of a cp.async row of lanes fall in distinct banks.

constexpr int TC_THREADS = 128; // four warps
constexpr int TC_BM = 64;	// query vectors per CTA, 16 per warp

template <int HD> struct tc_cfg {
	static constexpr int BN = HD <= 128 ? 64 : 32; // positions per K/V tile
	static constexpr bool QREG = HD <= 128;	       // Q fragments in registers
	static constexpr int LD = HD + 8;
	static constexpr size_t TILE = (size_t)BN * LD * 2; // one K or V tile
	static constexpr size_t QB = (size_t)TC_BM * LD * 2;
	static constexpr size_t Q = QREG ? 2 * TILE : 4 * TILE;
	static constexpr size_t QL = QREG ? 4 * TILE : 2 * TILE;
	static constexpr size_t bytes = QREG ? QL + (size_t)TC_BM * 4 : 4 * TILE + QB;
	static constexpr int MIN_CTAS = HD <= 128 ? 3 : 2; // per SM (registers, shared memory)
	static_assert(!QREG || QB <= 2 * TILE, "Q fits on the second K/V buffer");
	static_assert(QREG || TC_BM * 4 <= 2 * TILE, "qlast fits on the second K/V buffer");
	static_assert(bytes <= 99 * 1024, "fits an sm_89 CTA (99 KB)");
	static_assert(TILE % 16 == 0 && QB % 16 == 0, "16-byte aligned regions");
};

// The MMA input type of a KV type: F16 / BF16 as stored; FP8 E4M3 as F16
// (every E4M3 value is exact in F16).
template <typename KT> struct tc_mt {
	typedef KT type;
};
template <> struct tc_mt<__nv_fp8_e4m3> {
	typedef __half type;
};

__device__ __forceinline__ void tc_from_f(float x, __half *y)
{
	*y = __float2half_rn(x);
}
__device__ __forceinline__ void tc_from_f(float x, __nv_bfloat16 *y)
{
	*y = __float2bfloat16_rn(x);
}

// Eight consecutive cache values (src, 8-element aligned) into shared memory
// as eight 16-bit MMA inputs: an asynchronous copy for F16 / BF16, a load and
// conversion for FP8.
__device__ __forceinline__ void tc_stage(__half *dst, const __half *src)
{
	kmma_cp16(dst, src);
}
__device__ __forceinline__ void tc_stage(__nv_bfloat16 *dst, const __nv_bfloat16 *src)
{
	kmma_cp16(dst, src);
}
__device__ __forceinline__ void tc_stage(__half *dst, const __nv_fp8_e4m3 *src)
{
	const uint2 u = *reinterpret_cast<const uint2 *>(src);
	unsigned w[4];
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const unsigned pair = ((i < 2 ? u.x : u.y) >> (16 * (i & 1))) & 0xffffu;
		const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)pair, __NV_E4M3);
		w[i] = (unsigned)h.x | ((unsigned)h.y << 16);
	}
	*reinterpret_cast<uint4 *>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
}

// Starts staging K and V at positions kt0 .. kt0 + BN - 1 into Ks, Vs (zeros
// from n_kv on); the caller commits and waits.
template <int HD, typename KT, typename MT>
__device__ __forceinline__ void tc_load(const k_attn_args &a, const int32_t *table, int kvh,
					int kt0, int n_kv, MT *Ks, MT *Vs)
{
	constexpr int V8 = HD / 8, RPP = TC_THREADS / V8, BN = tc_cfg<HD>::BN;
	constexpr int LD = tc_cfg<HD>::LD;
	static_assert(RPP * V8 == TC_THREADS && BN % RPP == 0, "whole rows per pass");
	const int d = ((int)threadIdx.x % V8) * 8;
#pragma unroll
	for (int i = 0; i < BN / RPP; i++) {
		const int k = (int)threadIdx.x / V8 + i * RPP, t = kt0 + k;
		MT *kd = Ks + k * LD + d, *vd = Vs + k * LD + d;
		if (t < n_kv) {
			const size_t off = kv_off(table, t, a.block_size, a.n_kv_heads, kvh, HD) + d;
			tc_stage(kd, (const KT *)a.k_cache + off);
			tc_stage(vd, (const KT *)a.v_cache + off);
		} else {
			*reinterpret_cast<uint4 *>(kd) = make_uint4(0u, 0u, 0u, 0u);
			*reinterpret_cast<uint4 *>(vd) = make_uint4(0u, 0u, 0u, 0u);
		}
	}
}

template <int HD, typename KT>
__global__ void __launch_bounds__(TC_THREADS, tc_cfg<HD>::MIN_CTAS)
	attn_prefill_tc_kernel(const k_attn_args a, const attn_geo g)
{
	typedef typename tc_mt<KT>::type MT;
	typedef tc_cfg<HD> C;
	constexpr int BM = TC_BM, BN = C::BN, LD = C::LD;
	constexpr int KC = HD / 16; // 16-dim slices of Q K^T
	constexpr int NT = BN / 8;  // 8-key slices of S
	constexpr int OT = HD / 8;  // 8-dim slices of O
	static_assert(BM == 16 * (TC_THREADS / 32), "16 query vectors per warp");
	extern __shared__ __align__(128) float tc_smem[];
	unsigned char *base = reinterpret_cast<unsigned char *>(tc_smem);
	MT *Qs = reinterpret_cast<MT *>(base + C::Q);
	int *qlast = reinterpret_cast<int *>(base + C::QL);

	const int s = blockIdx.z;
	const int kvh = blockIdx.y / g.n_hchunks;
	const float k_mul = head_k_mul(a, g, kvh), v_mul = head_v_mul(g, kvh);
	const int hbeg = (blockIdx.y % g.n_hchunks) * g.hc;
	const int ng = min(g.hc, g.group - hbeg);
	// the last tiles of a sequence (the most positions, causal) start first
	const int tile = (int)(gridDim.x - 1 - blockIdx.x);
	const int row0 = a.seq_start[s] + tile * g.rows_per_tile;
	const int row_end = min(a.seq_start[s + 1], row0 + g.rows_per_tile);
	if (row0 >= row_end) // uniform: the whole CTA leaves before any barrier
		return;
	const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
	const int g8 = lane / 4, t4 = lane % 4; // the MMA layout's row group and pair
	const int32_t *table = a.block_tables + (size_t)s * a.max_blocks_per_seq;

	// each query's last position; tile 0 starts loading before Q
	for (int qv = tid; qv < BM; qv += TC_THREADS) {
		const int row = row0 + qv / g.hc, h = qv % g.hc;
		qlast[qv] = row < row_end && h < ng ? row_ctx(a.positions[row], g.ctx_limit) - 1 : -1;
	}
	__syncthreads();
	int tmax = -1, wlast = -1;
	for (int i = 0; i < BM; i++)
		tmax = max(tmax, qlast[i]);
	for (int i = 0; i < 16; i++)
		wlast = max(wlast, qlast[warp * 16 + i]); // uniform over the warp
	const int n_kv = tmax + 1; // positions the tile reads: 0 .. tmax
	const int last0 = qlast[warp * 16 + g8], last1 = qlast[warp * 16 + g8 + 8];
	if (n_kv > 0) { // into buffer 0 (neither Q's nor qlast's place)
		MT *K0 = reinterpret_cast<MT *>(base);
		tc_load<HD, KT>(a, table, kvh, 0, n_kv, K0, K0 + BN * LD);
	}
	kmma_commit();

	// Q tile rounded to MT (unused query vectors are zero)
	for (int e = tid; e < BM * (HD / 4); e += TC_THREADS) {
		const int qv = e / (HD / 4), d = (e % (HD / 4)) * 4;
		const int row = row0 + qv / g.hc, h = qv % g.hc;
		float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		if (row < row_end && h < ng)
			x = *reinterpret_cast<const float4 *>(
				a.q + ((size_t)row * a.n_heads + kvh * g.group + hbeg + h) * HD + d);
		MT *dst = Qs + qv * LD + d;
		tc_from_f(x.x, dst);
		tc_from_f(x.y, dst + 1);
		tc_from_f(x.z, dst + 2);
		tc_from_f(x.w, dst + 3);
	}
	__syncthreads(); // Q is in shared memory

	// ldmatrix row addresses: lane l reads row l % 8 of 8x8 matrix l / 8.
	// A-style 16x16 blocks (Q; V transposed): matrices (rows 0-7, cols 0-7),
	// (8-15, 0-7), (0-7, 8-15), (8-15, 8-15); K blocks: (keys 0-7, dims 0-7),
	// (0-7, 8-15), (8-15, 0-7), (8-15, 8-15), i.e. b[0], b[1] of two 8-key slices.
	const int arow = (lane & 7) + ((lane >> 3) & 1) * 8, acol = (lane >> 4) * 8;
	const int krow = (lane & 7) + (lane >> 4) * 8, kcol = ((lane >> 3) & 1) * 8;
	const MT *Qw = Qs + (warp * 16 + arow) * LD + acol;
	uint32_t qf[C::QREG ? KC : 1][4];
	if (C::QREG) {
#pragma unroll
		for (int kc = 0; kc < KC; kc++)
			kmma_ldsm4<false>(qf[C::QREG ? kc : 0], Qw + kc * 16);
	}
	__syncthreads(); // Q (QREG) and qlast are read before tile 1 overwrites K1 V1

	float o[OT][4];
#pragma unroll
	for (int c = 0; c < OT; c++)
		o[c][0] = o[c][1] = o[c][2] = o[c][3] = 0.0f;
	float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; // rows g8, g8 + 8

	int buf = 0;
	for (int kt0 = 0; kt0 < n_kv; kt0 += BN, buf ^= 1) {
		const MT *Ks = reinterpret_cast<const MT *>(base + (size_t)buf * 2 * C::TILE);
		const MT *Vs = Ks + BN * LD;
		if (kt0 + BN < n_kv) { // next tile in flight during this one's math
			MT *Kn = reinterpret_cast<MT *>(base + (size_t)(buf ^ 1) * 2 * C::TILE);
			tc_load<HD, KT>(a, table, kvh, kt0 + BN, n_kv, Kn, Kn + BN * LD);
			kmma_commit();
			kmma_wait<1>();
		} else {
			kmma_wait<0>();
		}
		__syncthreads(); // tile kt0 is visible
		if (wlast >= kt0) { // uniform over the warp: some row sees the tile
			float sc[NT][4];
#pragma unroll
			for (int j = 0; j < NT; j++)
				sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
			for (int kc = 0; kc < KC; kc++) {
				uint32_t qa[4];
				if (C::QREG) {
#pragma unroll
					for (int r = 0; r < 4; r++)
						qa[r] = qf[C::QREG ? kc : 0][r];
				} else {
					kmma_ldsm4<false>(qa, Qw + kc * 16);
				}
#pragma unroll
				for (int j = 0; j < NT; j += 2) {
					uint32_t kb[4];
					kmma_ldsm4<false>(kb, Ks + (j * 8 + krow) * LD + kc * 16 + kcol);
					kmma_16816<MT>(sc[j], qa, kb, sc[j]);
					kmma_16816<MT>(sc[j + 1], qa, kb + 2, sc[j + 1]);
				}
			}

			// online softmax of rows g8 (sc[j][0..1]) and g8 + 8 (sc[j][2..3])
			float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
			for (int j = 0; j < NT; j++)
#pragma unroll
				for (int e = 0; e < 2; e++) {
					const int t = kt0 + j * 8 + 2 * t4 + e;
					sc[j][e] = t <= last0 ? sc[j][e] * k_mul : -INFINITY;
					sc[j][2 + e] = t <= last1 ? sc[j][2 + e] * k_mul : -INFINITY;
					mx0 = fmaxf(mx0, sc[j][e]);
					mx1 = fmaxf(mx1, sc[j][2 + e]);
				}
			mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
			mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
			mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
			mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
			const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
			// a row that has seen nothing yet (max -inf) keeps O = l = 0 and
			// gets p = exp(-inf) = 0; otherwise alpha = 0 while m is -inf.
			// __expf (ex2.approx, a few ulp): far inside P's 16-bit rounding
			const float a0 = n0 == -INFINITY ? 1.0f : __expf(m0 - n0);
			const float a1 = n1 == -INFINITY ? 1.0f : __expf(m1 - n1);
			const float s0 = n0 == -INFINITY ? 0.0f : n0, s1 = n1 == -INFINITY ? 0.0f : n1;
			m0 = n0;
			m1 = n1;
			float r0 = 0.0f, r1 = 0.0f;
#pragma unroll
			for (int j = 0; j < NT; j++)
#pragma unroll
				for (int e = 0; e < 2; e++) {
					sc[j][e] = __expf(sc[j][e] - s0);
					sc[j][2 + e] = __expf(sc[j][2 + e] - s1);
					r0 += sc[j][e];
					r1 += sc[j][2 + e];
				}
			l0 = l0 * a0 + r0; // this lane's part of the row sum
			l1 = l1 * a1 + r1;
#pragma unroll
			for (int c = 0; c < OT; c++) {
				o[c][0] *= a0;
				o[c][1] *= a0;
				o[c][2] *= a1;
				o[c][3] *= a1;
			}

			// O += P V, P from the S registers (slices 2 kk, 2 kk + 1 = keys 16 kk ..)
#pragma unroll
			for (int kk = 0; kk < BN / 16; kk++) {
				uint32_t pa[4];
				pa[0] = kmma_pack(sc[2 * kk][0], sc[2 * kk][1], (const MT *)0);
				pa[1] = kmma_pack(sc[2 * kk][2], sc[2 * kk][3], (const MT *)0);
				pa[2] = kmma_pack(sc[2 * kk + 1][0], sc[2 * kk + 1][1], (const MT *)0);
				pa[3] = kmma_pack(sc[2 * kk + 1][2], sc[2 * kk + 1][3], (const MT *)0);
#pragma unroll
				for (int c = 0; c < OT; c += 2) {
					uint32_t vb[4];
					kmma_ldsm4<true>(vb, Vs + (kk * 16 + arow) * LD + c * 8 + acol);
					kmma_16816<MT>(o[c], pa, vb, o[c]);
					kmma_16816<MT>(o[c + 1], pa, vb + 2, o[c + 1]);
				}
			}
		}
		__syncthreads(); // this buffer is free for the tile after next
	}

	// out = O / l (* v_scale); the four lanes of a row add up their sums
	l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
	l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
#pragma unroll
	for (int hr = 0; hr < 2; hr++) {
		const int qv = warp * 16 + g8 + 8 * hr;
		const int row = row0 + qv / g.hc, h = qv % g.hc;
		const float l = hr ? l1 : l0;
		const float inv = l > 0.0f ? v_mul / l : 0.0f; // 0 for padding rows
		if (row >= row_end || h >= ng)
			continue;
		const size_t ob = ((size_t)row * a.n_heads + kvh * g.group + hbeg + h) * HD + 2 * t4;
#pragma unroll
		for (int c = 0; c < OT; c++) {
			kcu_store(a.out, a.out_dt, ob + c * 8, o[c][2 * hr] * inv);
			kcu_store(a.out, a.out_dt, ob + c * 8 + 1, o[c][2 * hr + 1] * inv);
		}
	}
}

// ---- self-test of kcuda_mma.h (tests/kernels/test_cuda_mma.c) -------------------
//
// One warp. a, bt, v: 16 x 16 row-major 16-bit matrices (bt holds B^T: row n
// is column n of B), c: 16 x 16 F32. Staged with kmma_cp16 into shared rows
// of 24 elements; out (3 x 16 x 16 F32, row-major):
//   [0] c + a bt^T  with a and bt read by ldmatrix,
//   [1] c + a v     with v read by ldmatrix.trans,
//   [2] c + a bt^T  with the fragments read element by element from global
//                   memory by the documented layout (checks mma alone).
__global__ void __launch_bounds__(32)
	mma_selftest_kernel(const uint16_t *a, const uint16_t *bt, const uint16_t *v, const float *c,
			    float *out, int bf16)
{
	__shared__ __align__(16) uint16_t sm[3][16][24];
	const int lane = threadIdx.x, g8 = lane / 4, t4 = lane % 4;
	for (int e = lane; e < 3 * 32; e += 32) {
		const int m = e / 32, r = (e % 32) / 2, col = (e % 2) * 8;
		const uint16_t *src = (m == 0 ? a : m == 1 ? bt : v) + r * 16 + col;
		kmma_cp16(&sm[m][r][col], src);
	}
	kmma_commit();
	kmma_wait<0>();
	__syncwarp();
	const int arow = (lane & 7) + ((lane >> 3) & 1) * 8, acol = (lane >> 4) * 8;
	const int krow = (lane & 7) + (lane >> 4) * 8, kcol = ((lane >> 3) & 1) * 8;
	uint32_t af[4], bf[4], vf[4], ae[4], be[4];
	kmma_ldsm4<false>(af, &sm[0][arow][acol]);
	kmma_ldsm4<false>(bf, &sm[1][krow][kcol]);
	kmma_ldsm4<true>(vf, &sm[2][arow][acol]);
	// the layout by hand: a[i] rows g, g + 8, g, g + 8 and columns 2t, 2t, 2t + 8, 2t + 8
	for (int i = 0; i < 4; i++) {
		const int r = g8 + (i & 1) * 8, col = 2 * t4 + (i >> 1) * 8;
		ae[i] = (uint32_t)a[r * 16 + col] | ((uint32_t)a[r * 16 + col + 1] << 16);
	}
	// b[0], b[1] of the 8-column slices n = 0, 1: B[k][n] = bt[n][k], k = 2t (+ 8)
	for (int i = 0; i < 4; i++) {
		const int n = (i >> 1) * 8 + g8, k = 2 * t4 + (i & 1) * 8;
		be[i] = (uint32_t)bt[n * 16 + k] | ((uint32_t)bt[n * 16 + k + 1] << 16);
	}
	for (int m = 0; m < 3; m++)
		for (int n = 0; n < 2; n++) {
			float d[4];
			for (int i = 0; i < 4; i++)
				d[i] = c[(g8 + (i >> 1) * 8) * 16 + n * 8 + 2 * t4 + (i & 1)];
			const uint32_t *A = m == 2 ? ae : af;
			const uint32_t *B = (m == 0 ? bf : m == 1 ? vf : be) + 2 * n;
			if (bf16)
				kmma_16816<__nv_bfloat16>(d, A, B, d);
			else
				kmma_16816<__half>(d, A, B, d);
			for (int i = 0; i < 4; i++)
				out[m * 256 + (g8 + (i >> 1) * 8) * 16 + n * 8 + 2 * t4 + (i & 1)] = d[i];
		}
}

// ---- host side ------------------------------------------------------------------

bool kv_dt_ok(enum dtype dt)
{
	return kcu_is_16bit_or_f32(dt) || dt == DT_F8_E4M3;
}

bool aligned16(const void *p)
{
	return ((uintptr_t)p & 15u) == 0;
}

// Checks shared by both launchers; fills the parts of g they share.
// *empty: nothing to launch (n_rows == 0).
int check_common(const k_attn_args *a, attn_geo *g, bool *empty)
{
	*empty = false;
	if (!a)
		return ERR_INVAL;
	if (a->head_dim != 64 && a->head_dim != 128 && a->head_dim != 256)
		return ERR_UNSUPPORTED;
	if (!kv_dt_ok(a->kv_dt) || !kcu_is_16bit_or_f32(a->out_dt))
		return ERR_UNSUPPORTED;
	if (a->n_rows < 0 || a->n_heads <= 0 || a->n_kv_heads <= 0 ||
	    a->n_heads % a->n_kv_heads != 0 || a->block_size <= 0 || a->max_blocks_per_seq <= 0 ||
	    a->n_seqs <= 0 || !isfinite(a->scale))
		return ERR_INVAL;
	const bool fp8 = a->kv_dt == DT_F8_E4M3;
	if (fp8 && !(isfinite(a->k_scale) && isfinite(a->v_scale) && a->k_scale > 0.0f &&
		     a->v_scale > 0.0f))
		return ERR_INVAL;
	if (a->n_rows == 0) {
		*empty = true;
		return 0;
	}
	if (!a->q || !a->out || !a->k_cache || !a->v_cache || !a->block_tables || !a->positions)
		return ERR_INVAL;
	// float4 / 16-byte vector loads of q and the pools
	if (!aligned16(a->q) || !aligned16(a->k_cache) || !aligned16(a->v_cache))
		return ERR_INVAL;
	g->group = a->n_heads / a->n_kv_heads;
	long long limit = (long long)a->max_blocks_per_seq * a->block_size;
	g->ctx_limit = limit > INT32_MAX ? INT32_MAX : (int)limit;
	g->k_mul = fp8 ? a->scale * a->k_scale : a->scale;
	g->v_mul = fp8 ? a->v_scale : 1.0f;
	g->k_head = fp8 ? a->k_head_scale : NULL;
	g->v_head = fp8 ? a->v_head_scale : NULL;
	g->n_splits = 1;
	g->rows_per_tile = 1;
	return 0;
}

template <int HD, typename KT> int launch_decode(cudaStream_t st, const k_attn_args &a, const attn_geo &g)
{
	dim3 grid((unsigned)a.n_rows, (unsigned)(a.n_kv_heads * g.n_hchunks), (unsigned)g.n_splits);
	// NH = g.hc: 4 query heads per CTA for GQA groups up to 4 (half the
	// accumulators and shared memory of 8: more CTAs per SM), else 8
	// (PDL launches: the kernels wait before their first read)
	int rc = g.hc == 4 ? kcu_launch_pdl("attn_decode_kernel", attn_decode_kernel<HD, KT, 4>, grid,
					    dim3(DEC_THREADS), 0, st, a, g)
			   : kcu_launch_pdl("attn_decode_kernel",
					    attn_decode_kernel<HD, KT, DEC_HEADS>, grid,
					    dim3(DEC_THREADS), 0, st, a, g);
	if (rc || g.n_splits == 1 || a.split_counters) // merged by the kernel's last split
		return rc;
	return kcu_launch_pdl("attn_merge_kernel", attn_merge_kernel,
			      dim3((unsigned)a.n_rows, (unsigned)a.n_heads), dim3(HD), 0, st, a, g);
}

// Prefill tiles of qn query vectors (row x head): a GQA group split into
// chunks of at most qn heads, qn / hc rows per tile. false when the grid
// would pass CUDA's y/z limits.
bool prefill_grid(const k_attn_args &a, int qn, attn_geo *g, unsigned *gx, unsigned *gy)
{
	g->hc = g->group < qn ? g->group : qn;
	g->n_hchunks = (g->group + g->hc - 1) / g->hc;
	g->rows_per_tile = qn / g->hc;
	const long long y = (long long)a.n_kv_heads * g->n_hchunks;
	if (y > 65535 || a.n_seqs > 65535)
		return false;
	*gy = (unsigned)y;
	*gx = (unsigned)((a.max_rows_per_seq + g->rows_per_tile - 1) / g->rows_per_tile);
	return true;
}

template <int HD, typename KT>
int launch_prefill(cudaStream_t st, const k_attn_args &a, attn_geo g)
{
	unsigned gx, gy;
	if (!prefill_grid(a, pf_cfg<HD>::QN, &g, &gx, &gy))
		return ERR_INVAL;
	const size_t smem = pf_smem_bytes<HD>();
	int rc = kcu_check(kcu_smem_optin(attn_prefill_kernel<HD, KT>, smem), "attn_prefill_kernel smem");
	if (rc)
		return rc;
	attn_prefill_kernel<HD, KT><<<dim3(gx, gy, (unsigned)a.n_seqs), PF_THREADS, smem, st>>>(a, g);
	return kcu_launched("attn_prefill_kernel");
}

template <int HD, typename KT>
int launch_prefill_tc(cudaStream_t st, const k_attn_args &a, attn_geo g)
{
	unsigned gx, gy;
	if (!prefill_grid(a, TC_BM, &g, &gx, &gy))
		return ERR_INVAL;
	const size_t smem = tc_cfg<HD>::bytes;
	int rc = kcu_check(kcu_smem_optin(attn_prefill_tc_kernel<HD, KT>, smem), "attn_prefill_tc_kernel smem");
	if (rc)
		return rc;
	attn_prefill_tc_kernel<HD, KT><<<dim3(gx, gy, (unsigned)a.n_seqs), TC_THREADS, smem, st>>>(a, g);
	return kcu_launched("attn_prefill_tc_kernel");
}

enum attn_kind { ATTN_DECODE, ATTN_PREFILL, ATTN_PREFILL_SIMT };

// Prefill of a 16-bit or FP8 cache runs on tensor cores unless SIMT is asked for.
template <int HD, typename KT>
int launch(attn_kind kind, cudaStream_t st, const k_attn_args &a, const attn_geo &g)
{
	if (kind == ATTN_DECODE)
		return launch_decode<HD, KT>(st, a, g);
	// (the conditional only keeps an F32 TC kernel from being instantiated)
	if (kind == ATTN_PREFILL && !std::is_same<KT, float>::value)
		return launch_prefill_tc<HD, typename std::conditional<std::is_same<KT, float>::value,
								       __half, KT>::type>(st, a, g);
	return launch_prefill<HD, KT>(st, a, g);
}

template <int HD>
int dispatch_kv(attn_kind kind, cudaStream_t st, const k_attn_args &a, const attn_geo &g)
{
	switch (a.kv_dt) {
	case DT_F32:
		return launch<HD, float>(kind, st, a, g);
	case DT_F16:
		return launch<HD, __half>(kind, st, a, g);
	case DT_BF16:
		return launch<HD, __nv_bfloat16>(kind, st, a, g);
	case DT_F8_E4M3:
		return launch<HD, __nv_fp8_e4m3>(kind, st, a, g);
	default:
		return ERR_UNSUPPORTED;
	}
}

int dispatch(attn_kind kind, cudaStream_t st, const k_attn_args &a, const attn_geo &g)
{
	switch (a.head_dim) {
	case 64:
		return dispatch_kv<64>(kind, st, a, g);
	case 128:
		return dispatch_kv<128>(kind, st, a, g);
	case 256:
		return dispatch_kv<256>(kind, st, a, g);
	default:
		return ERR_UNSUPPORTED;
	}
}

int prefill(attn_kind kind, void *stream, const k_attn_args *a)
{
	attn_geo g;
	bool empty;
	int rc = check_common(a, &g, &empty);
	if (rc || empty)
		return rc;
	if (!a->seq_start || a->max_rows_per_seq <= 0)
		return ERR_INVAL;
	return dispatch(kind, (cudaStream_t)stream, *a, g);
}

} // namespace

extern "C" size_t k_attn_workspace_bytes(int max_rows, int n_heads, int head_dim, int max_ctx)
{
	if (max_rows <= 0 || n_heads <= 0 || head_dim <= 0 || max_ctx <= 0)
		return 0;
	// max_splits_for(max_ctx) bounds n_splits_for(any rows, max_ctx) and
	// grows with max_ctx, so a workspace sized for a larger max_ctx or more
	// rows serves every smaller launch.
	const size_t splits = (size_t)max_splits_for(max_ctx);
	if (splits <= 1)
		return 0; // one split writes the output directly
	return (size_t)max_rows * (size_t)n_heads * splits * ((size_t)head_dim + 2) * sizeof(float);
}

extern "C" int k_attn_decode(void *stream, const struct k_attn_args *a)
{
	attn_geo g;
	bool empty;
	int rc = check_common(a, &g, &empty);
	if (rc || empty)
		return rc;
	if (!a->row_seq || a->max_ctx <= 0)
		return ERR_INVAL;
	g.hc = g.group <= 4 ? 4 : DEC_HEADS;
	g.n_hchunks = (g.group + g.hc - 1) / g.hc;
	if ((long long)a->n_kv_heads * g.n_hchunks > 65535)
		return ERR_INVAL;
	g.n_splits = n_splits_for(a->n_rows, a->n_kv_heads * g.n_hchunks, a->max_ctx);
	if (a->max_ctx < g.ctx_limit)
		g.ctx_limit = a->max_ctx;
	if (g.n_splits > 1) {
		const size_t need =
			k_attn_workspace_bytes(a->n_rows, a->n_heads, a->head_dim, a->max_ctx);
		if (!a->workspace || a->workspace_bytes < need || ((uintptr_t)a->workspace & 3u))
			return ERR_INVAL;
	}
	return dispatch(ATTN_DECODE, (cudaStream_t)stream, *a, g);
}

extern "C" int k_attn_prefill(void *stream, const struct k_attn_args *a)
{
	return prefill(ATTN_PREFILL, stream, a);
}

extern "C" int k_attn_prefill_simt(void *stream, const struct k_attn_args *a)
{
	return prefill(ATTN_PREFILL_SIMT, stream, a);
}

// Self-test of kcuda_mma.h (tests/kernels/test_cuda_mma.c): see mma_selftest_kernel.
extern "C" int k_mma_selftest(void *stream, int bf16, const void *a, const void *bt,
			      const void *v, const float *c, float *out)
{
	if (!a || !bt || !v || !c || !out || !aligned16(a) || !aligned16(bt) || !aligned16(v))
		return ERR_INVAL;
	mma_selftest_kernel<<<1, 32, 0, (cudaStream_t)stream>>>((const uint16_t *)a,
								(const uint16_t *)bt,
								(const uint16_t *)v, c, out, bf16);
	return kcu_launched("mma_selftest_kernel");
}
