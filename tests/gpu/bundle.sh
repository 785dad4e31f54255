#!/usr/bin/env bash
# tests/gpu/bundle.sh — pack the GPU run's programs for a machine that has a
# GPU and the CUDA toolkit but not this project's build dependencies
# (libmicrohttpd, libuv, cJSON, Check, PCRE2, utf8proc).
#
#   tests/gpu/bundle.sh [BUILD_DIR] [DEST]     (defaults build-gpu, .gpurun)
#
# BUILD_DIR is a CUDA build (meson setup BUILD -Dcuda=enabled -Dgpu_archs=90a
# --buildtype=release). DEST gets bin/ (the CUDA tests, the GPU benchmarks and
# aorta, debug info stripped) and lib/ (every shared library they load except
# the C runtime and CUDA's own, which the GPU machine has). Then, there:
#   AORTA_PREBUILT=DEST tests/gpu/run.sh
# The programs need a glibc at least as new as the one they were built with.
set -eu -o pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
DEST=${2:-.gpurun}
progs="tests/cuda/test_cuda_smoke tests/kernels/test_cuda_gemm tests/kernels/test_cuda_ops
tests/kernels/test_cuda_attn tests/kernels/test_cuda_sample tests/kernels/test_cuda_quant
tests/kernels/test_cuda_gemv tests/kernels/test_cuda_mma tests/bench/bench_cuda_gemv
tests/engine/test_cuda_engine tests/engine/test_engine_quant tests/bench/bench_cuda tests/bench/bench_cuda_quant server/aorta"
rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
for p in $progs; do
	[ -x "$BUILD/$p" ] || { echo "bundle: $BUILD/$p missing (a CUDA build?)" >&2; exit 1; }
	strip -g -o "$DEST/bin/$(basename "$p")" "$BUILD/$p"
	# libraries resolved here, minus glibc's own, the C++ runtime and CUDA's
	ldd "$BUILD/$p" | awk '$3 ~ /^\// { print $3 }' |
		{ grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so|/cuda' || true; } |
		while read -r lib; do cp -nL "$lib" "$DEST/lib/"; done || true
done
du -sh "$DEST/bin" "$DEST/lib"
