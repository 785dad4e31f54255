#!/bin/sh
# tests/tokenizer/test_cli_tokenize.sh — `aorta tokenize` end to end on the
# fixture tokenizers: ids out, --decode back, stdin input, GGUF-less errors.
# Usage: test_cli_tokenize.sh AORTA_BINARY (skips without the fixtures).
set -u
AORTA=$1
F=${AORTA_FIXTURES:-/work/shared/fixtures}/tokenizers
[ -f "$F/mistral/tokenizer.json" ] || { echo "SKIP: no tokenizer fixtures"; exit 77; }
fail=0
check() { # name want got
	if [ "$2" != "$3" ]; then echo "FAIL $1: want [$2] got [$3]"; fail=1; else echo "ok   $1"; fi
}
check mistral_ids "1 22557 28725 586 3914 349 17949" "$($AORTA tokenize --model "$F/mistral" 'Hello, my dog is cute')"
check gemma3_json_path "2 9259 236764 1041 4799 563 12864" \
	"$($AORTA tokenize --model "$F/gemma3/tokenizer.json" 'Hello, my dog is cute')"
check no_add_special "22557 28725" "$($AORTA tokenize --model "$F/mistral" --no-add-special 'Hello,')"
check qwen3_special "151644" "$($AORTA tokenize --model "$F/qwen3" '<|im_start|>')"
check qwen3_no_parse "27 91 318 4906 91 29" "$($AORTA tokenize --model "$F/qwen3" --no-parse-special '<|im_start|>')"
check stdin "$($AORTA tokenize --model "$F/llama3" 'héllo wörld')" "$(printf 'héllo wörld' | $AORTA tokenize --model "$F/llama3")"
ids=$($AORTA tokenize --model "$F/llama3" 'Streaming: 中文 and emoji 😀!')
check decode 'Streaming: 中文 and emoji 😀!' "$($AORTA tokenize --model "$F/llama3" --decode $ids)"
check skip_special 'Hello,' "$($AORTA tokenize --model "$F/mistral" --decode --skip-special 1 22557 28725)"
$AORTA tokenize --model "$F/mistral" --decode 99999999 >/dev/null 2>&1
check bad_id_status 1 $?
$AORTA tokenize 'x' >/dev/null 2>&1
check no_model_status 2 $?
$AORTA tokenize --model /nonexistent/tok.json x >/dev/null 2>&1
check missing_file_status 1 $?
exit $fail
