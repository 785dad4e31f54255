// kernels/cuda/k_sample.cu — the sampling chain on the GPU (kernels/sample.h).
//
// One CTA of NT threads per row (rows beyond the grid loop). The chain is
// kernels/sample_seq.h's (the one engine/sample/sampler.c and the reference
// run sequentially); this file owns only its parallel form. Every rule is a
// sample_seq.h call: logit processing, exp and block sums, buckets and the
// top_k / top_p boundary walks, and the sequential decisions that fix the
// order of the final draw, replayed exactly: the top_k heap (a block-parallel
// filter against the heap's root, then thread 0 sifts the few that enter),
// the quickselect of the boundary bucket. Full sorts are replaced by a radix
// select over 64-bit keys (logit order, then id) and a rank sort of at most
// SORT_MAX elements; sums over candidates are per thread over contiguous
// ranges, then a block scan (the one place rounding may differ: sample.h).
// Reference: kernels/cpu/sample_ref.c; test: tests/kernels/test_cuda_sample.c.
#include <cuda_runtime.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "common/err.h"
#include "kernels/sample_seq.h"
#include "kernels/cuda/kcuda_internal.h"
#include "kernels/sample.h"

#define NT 512		 // threads per CTA
#define NW (NT / 32)
#define PER 4		 // consecutive candidates per thread in ordered scans
#define SORT_MAX 1024	 // most elements rank-sorted at once
#define TOP_P_SMALL KS_TOP_P_SMALL
#define TOP_P_HEAD KS_TOP_P_HEAD

typedef unsigned long long u64;

// Static shared memory, about 41 KB (below the 48 KB static limit).
struct smem {
	union {
		struct {
			uint32_t hn[KS_NB];
			double hm[KS_NB];
		} hist;
		struct {
			int32_t heap[KS_HEAP_K];
			int32_t q[NT * PER];
		} heap;
	} u;
	u64 key[SORT_MAX];
	int32_t id[SORT_MAX];
	int32_t sorted[SORT_MAX];
	uint32_t rhist[256];
	int wi[NW];
	float wf[NW];
	double wd[NW];
	// scalars handed from thread 0 to the block (read after a barrier)
	u64 prefix;
	int need, done, cnt, b, n_before, keep, found, last, n_eq;
	double cum;
};

// A candidate list: ids[0..n), or 0..n-1 when ids is NULL.
struct view {
	const int32_t *ids;
	int n;
};

__device__ __forceinline__ int32_t vat(const view &v, int i)
{
	return v.ids ? v.ids[i] : i;
}

// Larger key = earlier in the order (ks_before: logit desc, id asc); -0
// counts as +0, as it compares equal there.
__device__ __forceinline__ u64 ks_key(const float *l, int32_t t)
{
	float x = l[t];
	uint32_t b = x == 0.0f ? 0u : __float_as_uint(x);
	b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
	return ((u64)b << 32) | (u64)(0xFFFFFFFFu - (uint32_t)t);
}

// ---- block primitives (every thread calls; each ends with a barrier) --------

__device__ int block_excl_scan(int v, int *total, smem &s)
{
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	int x = v;
	for (int o = 1; o < 32; o <<= 1) {
		int y = __shfl_up_sync(0xffffffffu, x, o);
		if (lane >= o)
			x += y;
	}
	if (lane == 31)
		s.wi[w] = x;
	__syncthreads();
	if (w == 0) {
		int t = lane < NW ? s.wi[lane] : 0;
		for (int o = 1; o < 32; o <<= 1) {
			int y = __shfl_up_sync(0xffffffffu, t, o);
			if (lane >= o)
				t += y;
		}
		if (lane < NW)
			s.wi[lane] = t;
	}
	__syncthreads();
	int pre = w > 0 ? s.wi[w - 1] : 0;
	*total = s.wi[NW - 1];
	__syncthreads();
	return pre + x - v;
}

// Exclusive prefix sum in double (a sum of per-thread partial sums: its
// rounding differs from a sequential sum by ~1e-16 relative).
__device__ double block_excl_scan_d(double v, double *total, smem &s)
{
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	double x = v;
	for (int o = 1; o < 32; o <<= 1) {
		double y = __shfl_up_sync(0xffffffffu, x, o);
		if (lane >= o)
			x = KS_DADD(x, y);
	}
	// exclusive within the warp: the inclusive sum of the lane before
	double e = __shfl_up_sync(0xffffffffu, x, 1);
	if (lane == 0)
		e = 0.0;
	if (lane == 31)
		s.wd[w] = x;
	__syncthreads();
	if (w == 0) {
		double t = lane < NW ? s.wd[lane] : 0.0;
		for (int o = 1; o < 32; o <<= 1) {
			double y = __shfl_up_sync(0xffffffffu, t, o);
			if (lane >= o)
				t = KS_DADD(t, y);
		}
		if (lane < NW)
			s.wd[lane] = t;
	}
	__syncthreads();
	double pre = w > 0 ? s.wd[w - 1] : 0.0;
	*total = s.wd[NW - 1];
	__syncthreads();
	return KS_DADD(pre, e);
}

__device__ double block_sum_d(double v, smem &s)
{
	double t;
	(void)block_excl_scan_d(v, &t, s);
	return t;
}

__device__ int block_sum_i(int v, smem &s)
{
	int t;
	(void)block_excl_scan(v, &t, s);
	return t;
}

__device__ float block_max_f(float v, smem &s)
{
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	if (lane == 0)
		s.wf[w] = v;
	__syncthreads();
	float m = s.wf[0];
	for (int i = 1; i < NW; i++)
		m = fmaxf(m, s.wf[i]);
	__syncthreads();
	return m;
}

__device__ int block_min_i(int v, smem &s)
{
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	for (int o = 16; o > 0; o >>= 1)
		v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
	if (lane == 0)
		s.wi[w] = v;
	__syncthreads();
	int m = s.wi[0];
	for (int i = 1; i < NW; i++)
		m = min(m, s.wi[i]);
	__syncthreads();
	return m;
}

// ---- ordered compaction ------------------------------------------------------

enum pred_kind { P_GE_THR, P_BUCKET_LT, P_BUCKET_EQ };

struct pred {
	int kind;
	float thr, mx;
	int B;
};

__device__ __forceinline__ bool pred_ok(const pred &p, const float *l, int32_t t)
{
	if (p.kind == P_GE_THR)
		return l[t] >= p.thr;
	int b = ks_bucket(p.mx, l[t]);
	return p.kind == P_BUCKET_LT ? b < p.B : b == p.B;
}

// Append the candidates of v passing p, in v's order, to dst[at..). Returns
// how many.
__device__ int compact(const float *l, const view &v, const pred &p, int32_t *dst, int at,
		       smem &s)
{
	int out = 0;
	for (int base = 0; base < v.n; base += NT * PER) {
		int i0 = base + (int)threadIdx.x * PER;
		int32_t ts[PER];
		int c = 0;
		for (int j = 0; j < PER; j++) {
			int i = i0 + j;
			if (i < v.n) {
				int32_t t = vat(v, i);
				if (pred_ok(p, l, t))
					ts[c++] = t;
			}
		}
		int tot;
		int pos = block_excl_scan(c, &tot, s);
		for (int j = 0; j < c; j++)
			dst[at + out + pos + j] = ts[j];
		out += tot;
	}
	__syncthreads(); // dst complete for every thread
	return out;
}

// ---- radix select and rank sort ----------------------------------------------

// Which candidates a selection looks at: bucket B only (B >= 0) and keys
// below `upper`.
struct filt {
	int B;
	float mx;
	u64 upper;
};

__device__ __forceinline__ bool filt_ok(const filt &f, const float *l, int32_t t, u64 k)
{
	return k < f.upper && (f.B < 0 || ks_bucket(f.mx, l[t]) == f.B);
}

// The key T with exactly m eligible candidates at or above it (1 <= m <=
// the number eligible). Keys are distinct, so T exists.
__device__ u64 radix_select(const float *l, const view &v, const filt &f, int m, smem &s)
{
	u64 prefix = 0;
	int need = m;
	for (int shift = 56; shift >= 0; shift -= 8) {
		for (int i = threadIdx.x; i < 256; i += NT)
			s.rhist[i] = 0;
		__syncthreads();
		u64 himask = shift == 56 ? 0ull : (~0ull << (shift + 8));
		// Most candidates share the high bytes, so one bin gets nearly every
		// increment: aggregate per warp first. The loop bound is the same for
		// every thread, so all 32 lanes reach __match_any_sync.
		for (int base = 0; base < v.n; base += NT) {
			int i = base + (int)threadIdx.x, bin = -1;
			if (i < v.n) {
				int32_t t = vat(v, i);
				u64 k = ks_key(l, t);
				if ((k & himask) == prefix && filt_ok(f, l, t, k))
					bin = (int)((k >> shift) & 255u);
			}
			unsigned peers = __match_any_sync(0xffffffffu, bin);
			if (bin >= 0 && (int)(threadIdx.x & 31) == __ffs(peers) - 1)
				atomicAdd(&s.rhist[bin], (unsigned)__popc(peers));
		}
		__syncthreads();
		if (threadIdx.x == 0) {
			uint32_t c = 0;
			int b = 255;
			for (; b > 0; b--) {
				if (c + s.rhist[b] >= (uint32_t)need)
					break;
				c += s.rhist[b];
			}
			s.prefix = prefix | ((u64)b << shift);
			s.need = need - (int)c;
			s.done = s.rhist[b] == (uint32_t)(need - (int)c);
		}
		__syncthreads();
		prefix = s.prefix;
		need = s.need;
		int done = s.done;
		__syncthreads();
		if (done)
			break;
	}
	return prefix;
}

// s.sorted[0..m) = the eligible candidates with key >= T (exactly m of them),
// in the order.
__device__ void gather_sorted(const float *l, const view &v, const filt &f, u64 T, int m,
			      smem &s)
{
	if (threadIdx.x == 0)
		s.cnt = 0;
	__syncthreads();
	for (int i = threadIdx.x; i < v.n; i += NT) {
		int32_t t = vat(v, i);
		u64 k = ks_key(l, t);
		if (k >= T && filt_ok(f, l, t, k)) {
			int p = atomicAdd(&s.cnt, 1);
			if (p < SORT_MAX) {
				s.key[p] = k;
				s.id[p] = t;
			}
		}
	}
	__syncthreads();
	int n = min(min(s.cnt, m), SORT_MAX); // = m; min() only guards the arrays
	for (int i = threadIdx.x; i < n; i += NT) {
		u64 ki = s.key[i];
		int r = 0;
		for (int j = 0; j < n; j++)
			r += s.key[j] > ki;
		s.sorted[r] = s.id[i];
	}
	__syncthreads();
}

// Every candidate of v (n <= SORT_MAX) into s.sorted, in the order.
__device__ void sort_all(const float *l, const view &v, smem &s)
{
	for (int i = threadIdx.x; i < v.n; i += NT) {
		int32_t t = vat(v, i);
		s.key[i] = ks_key(l, t);
		s.id[i] = t;
	}
	__syncthreads();
	for (int i = threadIdx.x; i < v.n; i += NT) {
		u64 ki = s.key[i];
		int r = 0;
		for (int j = 0; j < v.n; j++)
			r += s.key[j] > ki;
		s.sorted[r] = s.id[i];
	}
	__syncthreads();
}

// ---- the chain -----------------------------------------------------------------

// Bans, bias, penalties, 1/T, sanitize; returns the max, *arg its lowest index.
__device__ float process_row(const k_sample_args &a, const k_sample_row &rw, float *l,
			     int32_t *arg, smem &s)
{
	const int vocab = a.vocab;
	if (threadIdx.x == 0) {
		for (int32_t i = rw.ban_begin; i < rw.ban_end; i++) {
			int32_t t = a.ban[i];
			if (t >= 0 && t < vocab)
				l[t] = -INFINITY;
		}
		for (int32_t i = rw.bias_begin; i < rw.bias_end; i++) {
			int32_t t = a.bias[i].token;
			if (t >= 0 && t < vocab)
				l[t] = ks_biased(l[t], a.bias[i].bias);
		}
	}
	__syncthreads();
	for (int32_t i = rw.pen_begin + (int32_t)threadIdx.x; i < rw.pen_end; i += NT) {
		k_sample_pen e = a.pen[i]; // distinct tokens within a row: no race
		if (e.token >= 0 && e.token < vocab)
			l[e.token] = ks_penalized(l[e.token], rw.repetition_penalty,
						  rw.frequency_penalty, rw.presence_penalty,
						  e.in_prompt != 0, e.n_gen);
	}
	__syncthreads();
	// One pass: each value scaled and cleaned (written back for the later
	// passes), the row's max m, and per thread the first index of its own
	// largest value (its values come in increasing index order); the row's
	// first index of m is the least of those whose value equals m. Rows of
	// a multiple of 4 go in float4 steps, RU of them loaded before any is
	// used: a 128K-vocabulary row is read by one CTA, so the loads in
	// flight per thread set the time.
	const float inv_t = rw.greedy ? 1.0f : rw.inv_temperature;
	float m = -INFINITY, best = -INFINITY;
	int first = INT_MAX;
	auto take = [&](float x, int i) {
		x = ks_scaled(x, inv_t);
		m = fmaxf(m, x);
		if (x > best || (x == best && first == INT_MAX)) {
			best = x;
			first = i;
		}
		return x;
	};
	constexpr int RU = 4;
	const int nv = vocab % 4 == 0 && ((uintptr_t)l & 15) == 0 ? vocab / 4 : 0;
	float4 *l4 = (float4 *)l;
	int j = threadIdx.x;
	for (; j + (RU - 1) * NT < nv; j += RU * NT) {
		float4 v[RU];
#pragma unroll
		for (int u = 0; u < RU; u++)
			v[u] = l4[j + u * NT];
#pragma unroll
		for (int u = 0; u < RU; u++) {
			const int i = 4 * (j + u * NT);
			v[u].x = take(v[u].x, i);
			v[u].y = take(v[u].y, i + 1);
			v[u].z = take(v[u].z, i + 2);
			v[u].w = take(v[u].w, i + 3);
			l4[j + u * NT] = v[u];
		}
	}
	for (; j < nv; j += NT) {
		float4 v = l4[j];
		v.x = take(v.x, 4 * j);
		v.y = take(v.y, 4 * j + 1);
		v.z = take(v.z, 4 * j + 2);
		v.w = take(v.w, 4 * j + 3);
		l4[j] = v;
	}
	for (int i = 4 * nv + threadIdx.x; i < vocab; i += NT)
		l[i] = take(l[i], i);
	m = block_max_f(m, s); // its barriers also publish l[]
	first = block_min_i(best == m ? first : INT_MAX, s);
	*arg = first == INT_MAX ? 0 : first;
	return m;
}

// The mass of a candidate list, summed per thread over contiguous ranges.
__device__ double list_mass(const float *l, const view &v, float mx, smem &s)
{
	int per = (v.n + NT - 1) / NT;
	int i0 = (int)threadIdx.x * per, i1 = min(v.n, i0 + per);
	double sum = 0.0;
	for (int i = i0; i < i1; i++)
		sum = KS_DADD(sum, (double)ks_prob(l, vat(v, i), mx));
	return block_sum_d(sum, s);
}

// Sum of the 64-token block sums, per thread over contiguous blocks.
__device__ double total_mass(const float *l, int vocab, float mx, smem &s)
{
	int nblk = (vocab + KS_BLOCK - 1) / KS_BLOCK, per = (nblk + NT - 1) / NT;
	int b_lo = (int)threadIdx.x * per, b_hi = min(nblk, b_lo + per);
	double sum = 0.0;
	for (int blk = b_lo; blk < b_hi; blk++) {
		int b0 = blk * KS_BLOCK;
		sum = KS_DADD(sum, ks_block_sum(l, mx, b0, min(vocab, b0 + KS_BLOCK), NULL));
	}
	return block_sum_d(sum, s);
}

// top_k <= KS_HEAP_K: sampler.c's heap, replayed. A candidate can only enter
// if it precedes the root, and the root only moves forward in the order, so
// filtering a chunk against the root seen at its start drops nothing.
__device__ void top_k_heap(const float *l, view &v, int k, int32_t *dst, smem &s)
{
	int32_t *h = s.u.heap.heap;
	if (threadIdx.x == 0) {
		for (int i = 0; i < k; i++)
			h[i] = vat(v, i);
		ks_heapify(h, k, l);
	}
	__syncthreads();
	for (int base = k; base < v.n; base += NT * PER) {
		const int32_t root = h[0];
		int i0 = base + (int)threadIdx.x * PER;
		int32_t ts[PER];
		int c = 0;
		for (int j = 0; j < PER; j++) {
			int i = i0 + j;
			if (i < v.n) {
				int32_t t = vat(v, i);
				if (ks_before(l, t, root))
					ts[c++] = t;
			}
		}
		if (!__syncthreads_or(c))
			continue;
		int tot;
		int pos = block_excl_scan(c, &tot, s);
		for (int j = 0; j < c; j++)
			s.u.heap.q[pos + j] = ts[j];
		__syncthreads();
		if (threadIdx.x == 0)
			for (int j = 0; j < tot; j++) {
				int32_t t = s.u.heap.q[j];
				if (ks_before(l, t, h[0])) {
					h[0] = t;
					ks_heap_sift(h, k, 0, l);
				}
			}
		__syncthreads();
	}
	for (int i = threadIdx.x; i < k; i += NT)
		dst[i] = h[i];
	__syncthreads();
	v.ids = dst;
	v.n = k;
}

// top_k > KS_HEAP_K: buckets before the boundary bucket in v's order, then
// sampler.c's quickselect of the boundary bucket (thread 0).
__device__ void top_k_hist(const float *l, view &v, int k, float mx, int32_t *dst, smem &s)
{
	uint32_t *hn = s.u.hist.hn;
	for (int i = threadIdx.x; i < KS_NB; i += NT)
		hn[i] = 0;
	__syncthreads();
	for (int i = threadIdx.x; i < v.n; i += NT)
		atomicAdd(&hn[ks_bucket(mx, l[vat(v, i)])], 1u);
	__syncthreads();
	if (threadIdx.x == 0) {
		int nb;
		s.b = ks_top_k_bucket(hn, k, &nb);
		s.n_before = nb;
	}
	__syncthreads();
	const int B = s.b, nb = s.n_before;
	pred p = { P_BUCKET_LT, 0.0f, mx, B };
	compact(l, v, p, dst, 0, s);
	p.kind = P_BUCKET_EQ;
	int n_eq = compact(l, v, p, dst, nb, s);
	if (threadIdx.x == 0)
		ks_select_top(dst + nb, n_eq, k - nb, l);
	__syncthreads();
	v.ids = dst;
	v.n = k;
}

// thread 0: walk sorted[0..m) adding to s.cum (ks_top_p's walk), writing them to dst[at..);
// s.keep = at + j + 1 at the first j where the sum reaches target, else -1.
__device__ void walk_sorted(const float *l, float mx, int m, double target, int32_t *dst,
			    int at, smem &s)
{
	if (threadIdx.x == 0) {
		double cum = s.cum;
		int keep = -1;
		for (int j = 0; j < m; j++) {
			int32_t t = s.sorted[j];
			dst[at + j] = t;
			cum = KS_DADD(cum, (double)ks_prob(l, t, mx));
			if (cum >= target) {
				keep = at + j + 1;
				break;
			}
		}
		s.cum = cum;
		s.keep = keep;
	}
	__syncthreads();
}

// sampler.c's truncate_top_p over v (mass = its mass), result in dst. spare:
// a list of vocab ids that is neither dst nor, unless it is v.ids itself,
// in use (v.ids may be overwritten once v is no longer needed).
__device__ void top_p(const float *l, view &v, float p, double mass, float mx, int32_t *dst,
		      int32_t *spare, smem &s)
{
	const double target = ks_target((double)p, mass);
	const filt all = { -1, mx, ~0ull };
	if (v.n <= TOP_P_SMALL) {
		sort_all(l, v, s);
		if (threadIdx.x == 0)
			s.cum = 0.0;
		__syncthreads();
		walk_sorted(l, mx, v.n, target, dst, 0, s);
		int keep = s.keep;
		__syncthreads();
		v.ids = dst;
		v.n = keep > 0 ? keep : v.n;
		return;
	}
	// the nucleus among the 64 most likely?
	u64 T = radix_select(l, v, all, TOP_P_HEAD, s);
	gather_sorted(l, v, all, T, TOP_P_HEAD, s);
	if (threadIdx.x == 0)
		s.cum = 0.0;
	__syncthreads();
	walk_sorted(l, mx, TOP_P_HEAD, target, dst, 0, s);
	int keep = s.keep;
	__syncthreads();
	if (keep > 0) {
		v.ids = dst;
		v.n = keep;
		return;
	}
	// buckets: whole ones until the one where the mass reaches target
	uint32_t *hn = s.u.hist.hn;
	double *hm = s.u.hist.hm;
	for (int i = threadIdx.x; i < KS_NB; i += NT) {
		hn[i] = 0;
		hm[i] = 0.0;
	}
	__syncthreads();
	for (int i = threadIdx.x; i < v.n; i += NT) {
		int32_t t = vat(v, i);
		int b = ks_bucket(mx, l[t]);
		atomicAdd(&hn[b], 1u);
		atomicAdd(&hm[b], (double)ks_prob(l, t, mx));
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		double cum;
		int nb;
		int B = ks_top_p_bucket(hn, hm, target, &cum, &nb);
		s.b = B;
		s.n_before = nb;
		s.n_eq = B < KS_NB ? (int)hn[B] : 0;
		s.cum = cum;
	}
	__syncthreads();
	const int B = s.b, nb = s.n_before, n_eq = s.n_eq;
	__syncthreads();
	if (B == KS_NB)
		return; // rounding: the whole set is the nucleus
	pred pr = { P_BUCKET_LT, 0.0f, mx, B };
	compact(l, v, pr, dst, 0, s);
	// the boundary bucket alone (any order: it is selected by key), in place
	// when spare is v's own list (safe: compact writes each chunk at or
	// before where it read it, after reading it)
	pr.kind = P_BUCKET_EQ;
	const view seg = { spare, compact(l, v, pr, spare, 0, s) };
	// its candidates in order, SORT_MAX at a time, until target
	keep = nb + n_eq;
	u64 upper = ~0ull;
	for (int taken = 0; taken < n_eq;) {
		int m = min(SORT_MAX, n_eq - taken);
		filt f = { B, mx, upper };
		T = radix_select(l, seg, f, m, s);
		gather_sorted(l, seg, f, T, m, s);
		walk_sorted(l, mx, m, target, dst, nb + taken, s);
		int k = s.keep;
		__syncthreads();
		if (k > 0) {
			keep = k;
			break;
		}
		taken += m;
		upper = T;
	}
	v.ids = dst;
	v.n = keep;
}

// Inverse CDF over a list in its order: first position where the running
// mass exceeds target, else the last with weight.
__device__ int32_t draw_list(const float *l, const view &v, float mx, double target, smem &s)
{
	int per = (v.n + NT - 1) / NT;
	int i0 = (int)threadIdx.x * per, i1 = min(v.n, i0 + per);
	double sum = 0.0;
	for (int i = i0; i < i1; i++)
		sum = KS_DADD(sum, (double)ks_prob(l, vat(v, i), mx));
	if (threadIdx.x == 0) {
		s.found = INT_MAX;
		s.last = -1;
	}
	double tot;
	double cum = block_excl_scan_d(sum, &tot, s);
	int f = -1, last = -1;
	for (int i = i0; i < i1; i++) {
		double w = (double)ks_prob(l, vat(v, i), mx);
		if (w <= 0.0)
			continue;
		cum = KS_DADD(cum, w);
		last = i;
		if (cum > target) {
			f = i;
			break;
		}
	}
	if (f >= 0)
		atomicMin(&s.found, f);
	if (last >= 0)
		atomicMax(&s.last, last);
	__syncthreads();
	int pos = s.found != INT_MAX ? s.found : s.last;
	__syncthreads();
	return pos >= 0 ? vat(v, pos) : -1;
}

// sampler.c's draw_all: block sums first, the tokens of the crossing block.
__device__ int32_t draw_all(const float *l, int vocab, float mx, double target, smem &s)
{
	int nblk = (vocab + KS_BLOCK - 1) / KS_BLOCK, per = (nblk + NT - 1) / NT;
	int b_lo = (int)threadIdx.x * per, b_hi = min(nblk, b_lo + per);
	double sum = 0.0;
	for (int blk = b_lo; blk < b_hi; blk++) {
		int b0 = blk * KS_BLOCK;
		sum = KS_DADD(sum, ks_block_sum(l, mx, b0, min(vocab, b0 + KS_BLOCK), NULL));
	}
	if (threadIdx.x == 0) {
		s.found = INT_MAX;
		s.last = -1;
	}
	double tot;
	double cum = block_excl_scan_d(sum, &tot, s);
	int f = -1, last_blk = -1;
	for (int blk = b_lo; blk < b_hi && f < 0; blk++) {
		int b0 = blk * KS_BLOCK, end = min(vocab, b0 + KS_BLOCK);
		double bs = ks_block_sum(l, mx, b0, end, NULL);
		if (bs <= 0.0)
			continue;
		last_blk = blk;
		if (KS_DADD(cum, bs) > target) {
			double c = cum;
			for (int i = b0; i < end; i++) {
				double w = (double)ks_prob(l, i, mx);
				if (w <= 0.0)
					continue;
				c = KS_DADD(c, w);
				if (c > target) {
					f = i;
					break;
				}
			}
		}
		cum = KS_DADD(cum, bs);
	}
	if (f >= 0)
		atomicMin(&s.found, f);
	if (last_blk >= 0)
		atomicMax(&s.last, last_blk);
	__syncthreads();
	if (threadIdx.x == 0 && s.found == INT_MAX && s.last >= 0) {
		int b0 = s.last * KS_BLOCK, end = min(vocab, b0 + KS_BLOCK);
		for (int i = end - 1; i >= b0; i--)
			if (ks_prob(l, i, mx) > 0.0f) {
				s.found = i;
				break;
			}
	}
	__syncthreads();
	int tok = s.found != INT_MAX ? s.found : -1;
	__syncthreads();
	return tok;
}

// Steps 6-9: min_p, top_k, top_p, the draw.
__device__ int32_t sample_truncated(const float *l, const k_sample_row &rw, int vocab, float mx,
				    double total, int32_t *buf0, int32_t *buf1, smem &s)
{
	view v = { NULL, vocab };
	if (rw.min_p > 0.0f) {
		pred p = { P_GE_THR, ks_min_p_thr(mx, rw.log_min_p), mx, 0 };
		v.n = compact(l, v, p, buf0, 0, s);
		v.ids = buf0;
	}
	if (rw.top_k > 0 && rw.top_k < v.n) {
		int32_t *dst = v.ids == buf0 ? buf1 : buf0;
		if (rw.top_k <= KS_HEAP_K)
			top_k_heap(l, v, rw.top_k, dst, s);
		else
			top_k_hist(l, v, rw.top_k, mx, dst, s);
	}
	double mass = v.ids ? list_mass(l, v, mx, s) : total;
	if (rw.top_p < 1.0f && v.n > 1) {
		int32_t *dst = v.ids == buf0 ? buf1 : buf0;
		int32_t *spare = v.ids ? (int32_t *)v.ids : (dst == buf0 ? buf1 : buf0);
		top_p(l, v, rw.top_p, mass, mx, dst, spare, s);
		mass = list_mass(l, v, mx, s);
	}
	double target = ks_target(rw.u, mass);
	if (!v.ids)
		return draw_all(l, vocab, mx, target, s);
	return draw_list(l, v, mx, target, s);
}

__global__ void __launch_bounds__(NT) sample_kernel(k_sample_args a, size_t ws_stride)
{
	__shared__ smem s;
	int32_t *buf0 = (int32_t *)((char *)a.workspace + (size_t)blockIdx.x * ws_stride);
	int32_t *buf1 = buf0 + ws_stride / (2 * sizeof(int32_t));
	const int vocab = a.vocab;
	for (int r = blockIdx.x; r < a.n_rows; r += gridDim.x) {
		const k_sample_row rw = a.rows[r];
		float *l = a.logits + (size_t)r * (size_t)vocab;
		int32_t *top_ids = a.top_ids + (size_t)r * K_SAMPLE_MAX_TOP;
		float *top_lp = a.top_logprobs + (size_t)r * K_SAMPLE_MAX_TOP;
		for (int i = threadIdx.x; i < K_SAMPLE_MAX_TOP; i += NT) {
			top_ids[i] = -1;
			top_lp[i] = 0.0f;
		}
		int32_t tok;
		float mx = process_row(a, rw, l, &tok, s);
		if (mx == -INFINITY) {
			if (threadIdx.x == 0) {
				a.token[r] = -1;
				a.logprob[r] = 0.0f;
				a.rank[r] = 0;
			}
			continue;
		}
		const int n_lp = min(rw.n_logprobs, K_SAMPLE_MAX_TOP);
		// the whole mass: for logprobs, and for the draw when nothing truncates
		double total = n_lp >= 0 || !rw.greedy ? total_mass(l, vocab, mx, s) : 0.0;
		if (!rw.greedy)
			tok = sample_truncated(l, rw, vocab, mx, total, buf0, buf1, s);
		float lp = 0.0f;
		int rank = 0;
		if (tok >= 0 && n_lp >= 0) {
			double logz = ks_logz(mx, total);
			float lt = l[tok];
			int c = 0;
			for (int i = threadIdx.x; i < vocab; i += NT)
				c += l[i] > lt;
			rank = 1 + block_sum_i(c, s);
			lp = ks_lp_clamp((double)lt - logz);
			int m = min(n_lp, vocab);
			if (m > 0) {
				const view all_v = { NULL, vocab };
				const filt all = { -1, mx, ~0ull };
				u64 T = radix_select(l, all_v, all, m, s);
				gather_sorted(l, all_v, all, T, m, s);
				for (int i = threadIdx.x; i < m; i += NT) {
					int32_t t = s.sorted[i];
					top_ids[i] = t;
					top_lp[i] = ks_lp_clamp((double)l[t] - logz);
				}
			}
		}
		if (threadIdx.x == 0) {
			a.token[r] = tok;
			a.logprob[r] = lp;
			a.rank[r] = rank;
		}
		__syncthreads(); // s is reused by the next row
	}
}

static size_t ws_stride_bytes(int vocab)
{
	size_t list = ((size_t)vocab * sizeof(int32_t) + 255) & ~(size_t)255;
	return 2 * list;
}

static int n_ctas(int n_rows)
{
	return n_rows < K_SAMPLE_MAX_CTAS ? n_rows : K_SAMPLE_MAX_CTAS;
}

extern "C" size_t k_sample_workspace_bytes(int n_rows, int vocab)
{
	if (n_rows <= 0 || vocab <= 0)
		return 0;
	return (size_t)n_ctas(n_rows) * ws_stride_bytes(vocab);
}

extern "C" int k_sample(void *stream, const struct k_sample_args *a)
{
	if (!a || a->n_rows < 0 || a->vocab <= 0)
		return ERR_INVAL;
	if (a->n_rows == 0)
		return 0;
	if (!a->logits || !a->rows || !a->token || !a->logprob || !a->rank || !a->top_ids ||
	    !a->top_logprobs || !a->workspace ||
	    a->workspace_bytes < k_sample_workspace_bytes(a->n_rows, a->vocab))
		return ERR_INVAL;
	sample_kernel<<<(unsigned)n_ctas(a->n_rows), NT, 0, (cudaStream_t)stream>>>(
		*a, ws_stride_bytes(a->vocab));
	return kcu_launched("k_sample");
}
