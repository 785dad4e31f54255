#!/bin/sh
# tests/bench/tokenizer/run.sh [BUILD_DIR] [SECONDS] — encoding throughput of
# aorta's tokenizer vs Hugging Face tokenizers (Rust, npm binding `tokenizers`,
# installed here by `npm ci`) on the same corpus, one thread each, for every
# fixture tokenizer. Build first with a release build for meaningful numbers:
#   meson setup build-rel -Dcuda=disabled -Dbuildtype=release && ninja -C build-rel
#   tests/bench/tokenizer/run.sh build-rel 3
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=${1:-$root/build}
secs=${2:-3}
F=${AORTA_FIXTURES:-/work/shared/fixtures}/tokenizers
corpus=${BENCH_CORPUS:-/tmp/aorta_tok_corpus.jsonl}
[ -d "$here/node_modules/tokenizers" ] || (cd "$here" && npm ci --no-audit --no-fund >/dev/null)
/usr/bin/python3 "$here/gen_corpus.py" "$corpus"
for name in ${TOKENIZERS:-llama3 qwen3 mistral gemma3}; do
	a=$("$build/tests/tokenizer/bench_tok" "$F/$name/tokenizer.json" "$corpus" "$secs")
	h=$(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false UV_THREADPOOL_SIZE=1 \
		node "$here/bench_hf.js" "$F/$name/tokenizer.json" "$corpus" "$secs")
	echo "$name aorta: $a"
	echo "$name hf:    $h"
	/usr/bin/python3 -c '
import json, sys
name, a, h = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
same = "identical ids" if a["ids_fnv1a"] == h["ids_fnv1a"] and a["tokens"] == h["tokens"] else "IDS DIFFER"
ra, rh = a["mb_per_s"], h["mb_per_s"]
ca, ch = a["mb_per_cpu_s"], h["mb_per_cpu_s"]
print("%-8s wall: aorta %7.2f MB/s  hf %7.2f MB/s  (%.2fx)   per CPU-second: aorta %7.2f  hf %7.2f  (%.2fx)   %d tokens, %s"
      % (name, ra, rh, ra / rh, ca, ch, ca / ch, a["tokens"], same))
' "$name" "$a" "$h"
done
