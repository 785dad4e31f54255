#!/usr/bin/env bash
# tests/bench/bench_frontend.sh [BUILD_DIR] — the HTTP front end's numbers on
# the demo model (a benchmark, not a test; run it on a quiet machine):
#   1. GET /health at 64 connections (wrk): requests/s
#   2. a 1-token completion at 64 connections (wrk): requests/s
#   3. 64 concurrent streams (aorta bench serve): streamed tokens/s, and the
#      loop thread's CPU time per streamed token (utime+stime of the server's
#      main thread, which runs the libuv loop: parsing, rendering, SSE writes),
#      next to the whole process's CPU per token (engine included).
# Needs wrk (Debian package). Prints one block of figures.
set -euo pipefail
BUILD=${1:-build-release}
AORTA=$BUILD/server/aorta
DUR=${BENCH_SECONDS:-10}
tmp=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$tmp"' EXIT

command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)"; exit 1; }
"$AORTA" make-model --out "$tmp/demo.gguf" >/dev/null 2>&1
"$AORTA" serve --model "$tmp/demo.gguf" --port 0 --log-level warn --max-num-seqs 64 \
	--max-model-len 1024 >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 200); do grep -q "listening on port" "$tmp/out" 2>/dev/null && break; sleep 0.05; done
port=$(awk '/listening on port/ {print $NF}' "$tmp/out")
base=http://127.0.0.1:$port
for _ in $(seq 200); do curl -sf "$base/health" >/dev/null && break; sleep 0.05; done

ticks=$(getconf CLK_TCK)
thread_cpu() { awk -v t="$ticks" '{print ($14 + $15) / t}' "/proc/$pid/task/$pid/stat"; }
proc_cpu() { awk -v t="$ticks" '{print ($14 + $15) / t}' "/proc/$pid/stat"; }

echo "== GET /health, 64 connections, ${DUR}s"
wrk -t2 -c64 -d"${DUR}s" "$base/health" | grep -E "Requests/sec|Latency|requests in"

cat >"$tmp/post.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model": "$tmp/demo.gguf", "prompt": "Hello", "max_tokens": 1, "temperature": 0}'
EOF
echo "== POST /v1/completions max_tokens=1, 64 connections, ${DUR}s"
wrk -t2 -c64 -d"${DUR}s" -s "$tmp/post.lua" "$base/v1/completions" |
	grep -E "Requests/sec|Latency|requests in|Non-2xx"

echo "== 64 concurrent streams x 256 tokens (aorta bench serve)"
t0=$(thread_cpu)
p0=$(proc_cpu)
"$AORTA" bench serve --base-url "$base" --model "$tmp/demo.gguf" --num-prompts 256 \
	--max-concurrency 64 --input-len 16 --output-len 256 --ignore-eos --no-progress \
	--json "$tmp/bench.json" >"$tmp/bench.txt"
t1=$(thread_cpu)
p1=$(proc_cpu)
grep -iE "output token throughput|request throughput|successful|failed|errors" "$tmp/bench.txt" || cat "$tmp/bench.txt"
tokens=$(/usr/bin/python3 -c "import json; d=json.load(open('$tmp/bench.json')); print(d.get('total_output_tokens') or d.get('output_tokens') or d['summary']['total_output_tokens'])" 2>/dev/null || echo 0)
awk -v t0="$t0" -v t1="$t1" -v p0="$p0" -v p1="$p1" -v n="$tokens" 'BEGIN {
	if (n <= 0) { print "could not read the token count from the bench JSON"; exit }
	printf "streamed tokens: %d\n", n
	printf "loop thread CPU: %.3f s = %.2f us per streamed token\n", t1 - t0, (t1 - t0) * 1e6 / n
	printf "whole process CPU: %.3f s = %.2f us per streamed token (engine included)\n", p1 - p0, (p1 - p0) * 1e6 / n
}'
kill -TERM $pid
wait $pid || true
