#!/usr/bin/env bash
# tests/e2e/run_openai.sh — install the pinned openai client (npm ci, from the
# lockfile) if needed, then run test_openai.mjs with node's test runner.
# Exit 77 (skipped) when Node.js or the npm registry is not available (CI
# refuses that skip: tools/test-summary.py). A case node:test skips or marks
# todo passes there quietly: each is named here as 'SKIP: <case>: <why>'.
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
cd "$here" || exit 1
tap=$(mktemp)
trap 'rm -f "$tap"' EXIT
node --test --test-reporter=tap test_openai.mjs | tee "$tap"
rc=${PIPESTATUS[0]}
# TAP: "ok 3 - name # SKIP why" / "# TODO why"
sed -n -E 's/^ *ok [0-9]+ - (.*) # (SKIP|TODO) ?(.*)$/SKIP: test_openai.mjs: \1: \2 \3/p' "$tap"
exit "$rc"
