/* kernels/cpu/probe.h — this machine's limits, measured on the pool's
 * threads, for the benchmarks to report against (aorta bench engine,
 * tests/bench/bench_matmul): memory bandwidth (a STREAM-style triad and a
 * read-only sum over arrays far larger than the caches) and compute peaks
 * (register-only loops of independent FMAs, and of vpdpbusd for the int8
 * paths). Each is the best of a few runs (the machine may be shared).
 * Not used by the server. Any one thread; the pool must be idle.
 */
#ifndef AORTA_KERNELS_CPU_PROBE_H
#define AORTA_KERNELS_CPU_PROBE_H

#include <stddef.h>

#include "kernels/cpu/pool.h"

struct kcpu_mem_bw {
	double triad_gbs; /* a = b + s*c, 3 arrays counted (STREAM's convention) */
	double read_gbs;  /* sum of one array: what a GEMV does */
};

/* Arrays of array_bytes each (3 of them); 0 figures when out of memory. */
struct kcpu_mem_bw kcpu_probe_memory(struct kpool *pool, size_t array_bytes);
/* GFLOP/s of F32 FMA (AVX-512, else AVX2, else scalar), all threads. */
double kcpu_probe_fma_gflops(struct kpool *pool);
/* GOP/s of AVX-512 VNNI vpdpbusd (64 multiply-adds = 128 ops each), all
 * threads; 0 where the CPU has no AVX-512 VNNI. */
double kcpu_probe_int8_gops(struct kpool *pool);

#endif
