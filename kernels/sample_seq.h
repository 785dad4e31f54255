/* kernels/sample_seq.h — the scalar pieces of the sampling chain that the
 * reference (sample_ref.c) and the CUDA kernel (kernels/cuda/k_sample.cu)
 * must compute bit for bit like engine/sample/sampler.c: the order of candidates,
 * the exp approximation, the logit buckets, the 64-token block sums, the CPU
 * heap and quickselect (their layouts decide the order of the final draw).
 *
 * Host and device inline functions (KS_HD). In device code every float
 * operation goes through a _rn intrinsic so nvcc cannot contract a*b+c into an
 * FMA the CPU does not do (sampler.c is C11 without -mfma: no contraction).
 * Any change to sampler.c's chain must be mirrored here; the test that catches
 * a divergence is tests/sampling/test_sample_device.c.
 */
#ifndef AORTA_KERNELS_SAMPLE_SEQ_H
#define AORTA_KERNELS_SAMPLE_SEQ_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KS_HD __host__ __device__
#else
#define KS_HD
#endif

#ifdef __CUDA_ARCH__
#define KS_FMUL(a, b) __fmul_rn((a), (b))
#define KS_FADD(a, b) __fadd_rn((a), (b))
#define KS_FSUB(a, b) __fsub_rn((a), (b))
#define KS_FDIV(a, b) __fdiv_rn((a), (b))
#define KS_DADD(a, b) __dadd_rn((a), (b))
#define KS_DMUL(a, b) __dmul_rn((a), (b))
#else
#define KS_FMUL(a, b) ((a) * (b))
#define KS_FADD(a, b) ((a) + (b))
#define KS_FSUB(a, b) ((a) - (b))
#define KS_FDIV(a, b) ((a) / (b))
#define KS_DADD(a, b) ((a) + (b))
#define KS_DMUL(a, b) ((a) * (b))
#endif

/* Same values as engine/sample/sampler.c's SAMPLER__* constants. */
#define KS_NB 2048	/* logit buckets */
#define KS_NATS 32.0f	/* spanning [max - 32, max] */
#define KS_BLOCK 64	/* tokens per block sum of the untruncated draw */
#define KS_HEAP_K 1024	/* top_k up to this: heap; above: buckets + quickselect */
#define KS_TOP_P_SMALL 256 /* top_p over at most this many: sort them all */
#define KS_TOP_P_HEAD 64   /* otherwise first look for the nucleus in the top 64 */
#define KS_BIAS_MAX 100.0f
#define KS_LOGPROB_MIN -9999.0f

/* The order of candidates: logit descending, then id ascending. */
KS_HD static inline bool ks_before(const float *l, int32_t a, int32_t b)
{
	return l[a] > l[b] || (l[a] == l[b] && a < b);
}

static inline KS_HD float ks_bits_to_float(int32_t b)
{
	union {
		int32_t i;
		float f;
	} u;
	u.i = b;
	return u.f;
}

/* sampler.c's exp_nonpos, one lane: exp(x) for x <= 0, 0 below -87. */
KS_HD static inline float ks_exp_nonpos(float x)
{
	bool small = x < -87.0f;
	float xc = small ? -87.0f : x;
	float kf = KS_FADD(KS_FMUL(xc, 1.44269504f), 12582912.0f);
	kf = KS_FSUB(kf, 12582912.0f);
	float r = KS_FSUB(KS_FSUB(xc, KS_FMUL(kf, 0.693145752f)), KS_FMUL(kf, 1.42860677e-6f));
	float p = KS_FADD(1.0f / 720, 0.0f);
	p = KS_FADD(1.0f / 120, KS_FMUL(r, p));
	p = KS_FADD(1.0f / 24, KS_FMUL(r, p));
	p = KS_FADD(1.0f / 6, KS_FMUL(r, p));
	p = KS_FADD(0.5f, KS_FMUL(r, p));
	p = KS_FADD(1.0f, KS_FMUL(r, p));
	p = KS_FADD(1.0f, KS_FMUL(r, p));
	int32_t bits = ((int32_t)kf + 127) * (1 << 23);
	float e = KS_FMUL(p, ks_bits_to_float(bits));
	return small ? 0.0f : e;
}

/* prob of token t: exp(l[t] - mx). */
KS_HD static inline float ks_prob(const float *l, int32_t t, float mx)
{
	return ks_exp_nonpos(KS_FSUB(l[t], mx));
}

/* sampler.c's bucket_of: (mx - x) * 64, last bucket for -inf and the tail. */
KS_HD static inline int ks_bucket(float mx, float x)
{
	float b = KS_FMUL(KS_FSUB(mx, x), (float)KS_NB / KS_NATS);
	return b < (float)(KS_NB - 1) ? (int)b : KS_NB - 1;
}

/* The mass of tokens [b0, end) (end - b0 <= 64) summed as sampler.c's
 * exp_pass does: eight float lanes over runs of 8, the tail in double, then
 * the lanes pairwise in double. */
KS_HD static inline double ks_block_sum(const float *l, float mx, int b0, int end)
{
	float a0[4] = { 0, 0, 0, 0 }, a1[4] = { 0, 0, 0, 0 };
	int i = b0;
	for (; i + 8 <= end; i += 8)
		for (int k = 0; k < 4; k++) {
			a0[k] = KS_FADD(a0[k], ks_prob(l, i + k, mx));
			a1[k] = KS_FADD(a1[k], ks_prob(l, i + 4 + k, mx));
		}
	double bs = 0.0;
	for (; i < end; i++)
		bs = KS_DADD(bs, (double)ks_prob(l, i, mx));
	double x = KS_DADD((double)a0[0], (double)a0[1]);
	double y = KS_DADD((double)a0[2], (double)a0[3]);
	double z = KS_DADD(KS_DADD((double)a1[0], (double)a1[1]),
			   KS_DADD((double)a1[2], (double)a1[3]));
	return KS_DADD(bs, KS_DADD(KS_DADD(x, y), z));
}

/* Heap of ids whose root is the last of them in the order (sampler.c's). */
KS_HD static inline void ks_heap_sift(int32_t *h, int n, int i, const float *l)
{
	for (;;) {
		int w = i, a = 2 * i + 1, b = a + 1;
		if (a < n && ks_before(l, h[w], h[a]))
			w = a;
		if (b < n && ks_before(l, h[w], h[b]))
			w = b;
		if (w == i)
			return;
		int32_t t = h[i];
		h[i] = h[w];
		h[w] = t;
		i = w;
	}
}

KS_HD static inline void ks_heapify(int32_t *h, int n, const float *l)
{
	for (int i = n / 2 - 1; i >= 0; i--)
		ks_heap_sift(h, n, i, l);
}

KS_HD static inline void ks_insertion_sort(int32_t *v, int n, const float *l)
{
	for (int i = 1; i < n; i++) {
		int32_t x = v[i];
		int j = i;
		while (j > 0 && ks_before(l, x, v[j - 1])) {
			v[j] = v[j - 1];
			j--;
		}
		v[j] = x;
	}
}

/* sampler.c's Lomuto partition with its xorshift pivot. */
KS_HD static inline int ks_partition(int32_t *v, int n, const float *l, uint32_t *pr)
{
	*pr ^= *pr << 13;
	*pr ^= *pr >> 17;
	*pr ^= *pr << 5;
	int pi = (int)(*pr % (uint32_t)n);
	int32_t pivot = v[pi];
	v[pi] = v[n - 1];
	v[n - 1] = pivot;
	int store = 0;
	for (int i = 0; i < n - 1; i++) {
		if (ks_before(l, v[i], pivot)) {
			int32_t t = v[i];
			v[i] = v[store];
			v[store] = t;
			store++;
		}
	}
	v[n - 1] = v[store];
	v[store] = pivot;
	return store;
}

/* sampler.c's select_top: v[0..k) = the k first of v[0..n), in its layout. */
KS_HD static inline void ks_select_top(int32_t *v, int n, int k, const float *l)
{
	uint32_t pr = 0x9E3779B9u;
	while (n > 16 && k > 0 && k < n) {
		int m = ks_partition(v, n, l, &pr);
		if (m == k || m + 1 == k)
			return;
		if (m > k) {
			n = m;
		} else {
			v += m + 1;
			n -= m + 1;
			k -= m + 1;
		}
	}
	if (k > 0 && k < n)
		ks_insertion_sort(v, n, l);
}

KS_HD static inline float ks_lp_clamp(double lp)
{
	return lp > (double)KS_LOGPROB_MIN ? (float)lp : KS_LOGPROB_MIN;
}

#endif
