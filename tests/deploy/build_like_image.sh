#!/usr/bin/env bash
# tests/deploy/build_like_image.sh [cpu|cuda] — builds aorta the way the
# image's build stage does, without Docker: copies exactly the paths the
# Dockerfile COPYs into an empty source dir (so a missing COPY fails the
# build), runs the Dockerfile's own `meson setup ... && ninja ...` command,
# then the runtime-stage steps that need the binary: runtime-packages.sh and
# `aorta version` / `aorta serve --help`. Suite slow (a full release build).
# cuda needs nvcc (exit 77 without it).
set -euo pipefail
root=${AORTA_SOURCE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
variant=${1:-cpu}
df="$root/deploy/docker/Dockerfile.$variant"
if [ "$variant" = cuda ] && ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
	echo "SKIP: no nvcc for the CUDA build"
	exit 77
fi
export PATH=/usr/local/cuda/bin:$PATH
work=$(mktemp -d /tmp/aorta-image-build.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src"

# Dockerfile with continuation lines joined, comments dropped
joined=$(sed -e '/^[[:space:]]*#/d' "$df" | sed -e ':a' -e '/\\$/N; s/\\\n[[:space:]]*/ /; ta')
build_stage=$(printf '%s\n' "$joined" | awk '/^FROM /{n++} n==1')

# COPY (not --from) sources of the build stage, as listed
printf '%s\n' "$build_stage" | awk '/^COPY / && !/--from=/ { for (i = 2; i < NF; i++) print $i }' |
while read -r src; do
	src=${src%/}
	mkdir -p "$work/src/$(dirname "$src")"
	cp -a "$root/$src" "$work/src/$src"
	echo "COPY $src"
done
rm -rf "$work/src"/*/node_modules

# the build RUN: `meson setup /build ... && ninja -C /build && ...`
run=$(printf '%s\n' "$build_stage" | grep -E '^RUN meson setup' | sed -e 's/^RUN //')
[ -n "$run" ] || { echo "FAIL: no 'RUN meson setup' in the build stage of $df"; exit 1; }
GPU_ARCHS=$(printf '%s\n' "$joined" | sed -n 's/^ARG GPU_ARCHS=//p')
export GPU_ARCHS
run=${run//\/build/$work\/build}
echo "+ $run"
(cd "$work/src" && bash -c "$run")

bin="$work/build/server/aorta"
"$bin" version
"$bin" serve --help | grep -q -- '--shutdown-timeout'
echo "runtime packages:"
sh "$root/deploy/docker/runtime-packages.sh" "$bin" | tee "$work/pkgs"
# what the runtime stage installs must be runtime libraries only
if grep -E -- '-dev$|^gcc|^g\+\+' "$work/pkgs"; then
	echo "FAIL: build-time packages in the runtime list"
	exit 1
fi
for lib in libmicrohttpd libuv1 libcjson1 libpcre2-8 libutf8proc; do
	grep -q "^$lib" "$work/pkgs" || { echo "FAIL: $lib missing from the runtime packages"; exit 1; }
done
echo "OK: $variant image build stage reproduced"
