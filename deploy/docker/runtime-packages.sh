#!/bin/sh
# deploy/docker/runtime-packages.sh BINARY — print the Debian/Ubuntu packages
# that provide BINARY's direct shared-library dependencies (ELF NEEDED), one a
# line. The Dockerfiles run it in the build stage and install exactly this
# list in the runtime stage, so the runtime image never drifts from what the
# binary links (and package renames between distributions, e.g. Ubuntu's
# "t64" libraries, need no edit here). Left out: libc6 (every base image has
# it) and the CUDA toolkit packages (the nvidia/cuda runtime base provides
# cudart, cuBLAS and cuBLASLt). Tested by tests/deploy/test_docker.mjs.
set -eu
bin=${1:?usage: runtime-packages.sh BINARY}
[ -x "$bin" ] || { echo "runtime-packages.sh: $bin is not an executable" >&2; exit 1; }

# NEEDED sonames straight from the dynamic section (not ldd's transitive
# closure: apt resolves the libraries' own dependencies).
needed=$(LC_ALL=C readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p')
resolved=$(LC_ALL=C ldd "$bin")

for so in $needed; do
	case "$so" in
	# the CUDA runtime base image has these (a toolkit installed outside dpkg,
	# as on some build hosts, owns no package for them either)
	libcuda.so* | libcudart.so* | libcublas.so* | libcublasLt.so*) continue ;;
	esac
	path=$(printf '%s\n' "$resolved" | awk -v so="$so" '$1 == so && $2 == "=>" { print $3; exit }')
	case "$path" in
	"" | "not")
		echo "runtime-packages.sh: $so is not found by the dynamic loader" >&2
		exit 1
		;;
	esac
	pkg=""
	# dpkg records the path a package shipped, which on merged-/usr systems may
	# be the /usr/lib or the /lib spelling of what ldd printed; try each.
	real=$(readlink -f "$path")
	for p in "$path" "$real" "/usr$path" "/usr$real" "${path#/usr}" "${real#/usr}"; do
		pkg=$(dpkg-query -S "$p" 2>/dev/null | head -n 1 | cut -d: -f1) && [ -n "$pkg" ] && break
	done
	if [ -z "$pkg" ]; then
		echo "runtime-packages.sh: no package owns $path ($so)" >&2
		exit 1
	fi
	case "$pkg" in
	libc6 | cuda-* | libcublas-*) continue ;;
	esac
	echo "$pkg"
done | sort -u
