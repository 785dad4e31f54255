#!/usr/bin/env bash
# tools/fuzz.sh SECONDS [TARGET...] — build every tests/fuzz/fuzz_*.c target
# (or only the named ones, e.g. "gguf safetensors") with clang's
# libFuzzer (+ ASan/UBSan) in its own build dir (build-fuzz/, or $FUZZ_BUILD)
# and run each for SECONDS. The seed corpus in tests/fuzz/corpus/<target>/ is
# read but never written; new inputs go to $FUZZ_BUILD/corpus/<target>/ and
# crashes to $FUZZ_BUILD/artifacts/<target>/. Exit status: 0 when no target
# found a crash, 1 otherwise. Example: nice -n 10 tools/fuzz.sh 600
# libFuzzer's seed is fixed (AORTA_FUZZ_SEED, default 1; libFuzzer's own
# default is the clock), so runs take the same path (how far depends on the
# machine's speed); a crash's artifact replays it exactly.
set -euo pipefail

secs=${1:?usage: tools/fuzz.sh SECONDS}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${FUZZ_BUILD:-$root/build-fuzz}
cc=${CC_FUZZ:-clang}
seed=${AORTA_FUZZ_SEED:-1}
mkdir -p "$out"

# The reader code under test plus what it needs from common/ and kernels/.
lib_src=(
  "$root/engine/model/gguf.c" "$root/engine/model/safetensors.c" "$root/engine/model/model_config.c"
  "$root/common/err.c" "$root/common/buf.c" "$root/common/mapfile.c" "$root/common/utf8.c" "$root/kernels/dtype.c"
  # api/ (fuzz_api): parsers, renderers, chat templates
  "$root/api/json.c" "$root/api/errors.c" "$root/api/request.c" "$root/api/request_fields.c" "$root/api/response.c"
  "$root/api/chat_template.c" "$root/common/arena.c"
  # tokenizer (fuzz_tokenizer; loads the fixture tokenizers from $AORTA_FIXTURES)
  "$root"/engine/tok/tok_*.c "$root/engine/model/gguf_write.c"
)
cflags=(-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -I"$root"
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)

status=0
shift
for src in "$root"/tests/fuzz/fuzz_*.c; do
  name=$(basename "$src" .c)          # fuzz_gguf
  target=${name#fuzz_}                # gguf
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$target"; then
    continue
  fi
  echo "== building $name"
  "$cc" "${cflags[@]}" "$src" "${lib_src[@]}" -lcjson -lpcre2-8 -lutf8proc -lm -o "$out/$name"
  mkdir -p "$out/corpus/$target" "$out/artifacts/$target"
  echo "== running $name for ${secs}s (seed $seed)"
  start=$(date +%s)
  if ! UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
       "$out/$name" -seed="$seed" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$out/artifacts/$target/" \
       "$out/corpus/$target" "$root/tests/fuzz/corpus/$target" \
       > "$out/$name.log" 2>&1; then
    echo "!! $name found a problem; see $out/$name.log and $out/artifacts/$target/"
    echo "!! reproduce: $out/$name $out/artifacts/$target/<file> (or AORTA_FUZZ_SEED=$seed tools/fuzz.sh $secs $target)"
    status=1
  fi
  end=$(date +%s)
  grep -E "stat::number_of_executed_units|Done [0-9]+ runs" "$out/$name.log" | tail -2 || true
  echo "== $name ran $((end - start))s; corpus: $(ls "$out/corpus/$target" | wc -l) files"
done
exit $status
