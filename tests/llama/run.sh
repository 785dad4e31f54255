#!/usr/bin/env bash
# tests/llama/run.sh SCRIPT.mjs ARGS... — install node-llama-cpp 3.21.1 and its
# prebuilt llama.cpp CPU library (@node-llama-cpp/linux-x64) from
# package-lock.json into tests/llama/node_modules when missing or stale, then
# run one script with node. The install is `npm ci --omit=optional
# --ignore-scripts` with NODE_LLAMA_CPP_SKIP_DOWNLOAD=true: the CUDA/Vulkan
# packages are skipped, and nothing downloads or builds llama.cpp from source
# (compare.mjs also asks getLlama for build: "never"). Several build dirs may
# start at once: the install runs under a lock.
# Without Node.js >= 20, npm or the registry: exit 77 (skipped) with the
# reason, except under CI (CI=true), where the reference must run: exit 1.
set -u
here=$(cd "$(dirname "$0")" && pwd)
script=${1:?usage: run.sh SCRIPT.mjs ARGS...}
shift
unavailable() {
	if [ "${CI:-}" = "true" ]; then
		echo "FAIL: $1 (CI=true: the llama.cpp reference must run in CI)"
		exit 1
	fi
	echo "SKIP: $1"
	exit 77
}
if [ "$(uname -sm)" != "Linux x86_64" ]; then
	unavailable "the pinned llama.cpp binaries are linux-x64 only (this is $(uname -sm))"
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	unavailable "node/npm not installed (the llama.cpp reference needs Node.js >= 20)"
fi
if [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
	unavailable "Node.js $(node --version) is older than 20"
fi

stamp="$here/node_modules/.aorta-lock-stamp"
install() {
	# installed from this very lockfile already?
	if [ -f "$stamp" ] && cmp -s "$stamp" "$here/package-lock.json"; then
		return 0
	fi
	echo "npm ci in $here"
	(cd "$here" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --omit=optional --ignore-scripts \
		--no-audit --no-fund --loglevel=error) || return 1
	cp "$here/package-lock.json" "$stamp"
}
if command -v flock >/dev/null 2>&1; then
	(flock 9 && install) 9>"$here/.npm-install.lock"
else
	install
fi
if [ $? -ne 0 ]; then
	unavailable "'npm ci' could not install node-llama-cpp (no registry access?)"
fi
# no cd: the arguments may be paths relative to the caller (meson passes them
# relative to the build dir); node finds node_modules from the script's folder.
exec node "$here/$script" "$@"
