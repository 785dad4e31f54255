#!/usr/bin/env bash
# tests/e2e/run_openai.sh — install the pinned openai client (npm ci, from the
# lockfile) if needed, then run test_openai.mjs with node's test runner.
# Exit 77 (skipped) when Node.js or the npm registry is not available.
set -u
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	echo "SKIP: node/npm not installed"
	exit 77
fi
if [ ! -d "$here/node_modules/openai" ]; then
	if ! (cd "$here" && npm ci --no-audit --no-fund --silent >/dev/null 2>&1); then
		echo "SKIP: 'npm ci' could not install the openai client"
		exit 77
	fi
fi
cd "$here" && exec node --test test_openai.mjs
