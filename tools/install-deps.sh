#!/usr/bin/env bash
# tools/install-deps.sh — install the Debian packages aorta needs to build,
# test and run, if any are missing. Used by `make run`, `make test` and CI.
set -euo pipefail

pkgs=(meson ninja-build pkg-config gcc g++ libmicrohttpd-dev libuv1-dev libcjson-dev check
      libpcre2-dev libutf8proc-dev python3 python3-numpy curl)
if [ "${AORTA_DEPS_EXTRA:-}" != "" ]; then
	# shellcheck disable=SC2206
	pkgs+=(${AORTA_DEPS_EXTRA})
fi

missing=()
for p in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
	SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
	SUDO=(sudo -n)
else
	echo "install-deps: these Debian packages are missing: ${missing[*]}" >&2
	echo "install-deps: installing them needs root; run as root or: sudo apt-get install ${missing[*]}" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
