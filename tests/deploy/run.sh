#!/usr/bin/env bash
# tests/deploy/run.sh TEST.mjs — install the pinned checkers (npm ci from
# package-lock.json: kubernetes-models, @kubernetes-models/prometheus-operator,
# yaml, dockerfilelint) into tests/deploy/node_modules when missing or stale,
# then run one deploy test with node. Several tests (and build dirs) may start
# at once: the install runs under a lock. Exit 77 (skipped) when Node.js/npm
# are not installed or the registry cannot be reached.
set -u
here=$(cd "$(dirname "$0")" && pwd)
test=${1:?usage: run.sh TEST.mjs}
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	echo "SKIP: node/npm not installed (the deploy checks need Node.js >= 20)"
	exit 77
fi
if [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
	echo "SKIP: Node.js $(node --version) is older than 20"
	exit 77
fi

stamp="$here/node_modules/.aorta-lock-stamp"
install() {
	# installed from this very lockfile already?
	if [ -f "$stamp" ] && cmp -s "$stamp" "$here/package-lock.json"; then
		return 0
	fi
	echo "npm ci in $here"
	(cd "$here" && npm ci --no-audit --no-fund --loglevel=error) || return 1
	cp "$here/package-lock.json" "$stamp"
}
if command -v flock >/dev/null 2>&1; then
	(flock 9 && install) 9>"$here/.npm-install.lock"
else
	install
fi
if [ $? -ne 0 ]; then
	echo "SKIP: 'npm ci' could not install the deploy checkers (no registry access?)"
	exit 77
fi
cd "$here" && exec node "$test"
