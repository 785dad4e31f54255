#!/bin/sh
# tests/models/test_cli_models.sh AORTA — `aorta make-model` and
# `aorta inspect` end to end: the demo model, an HF directory, a qwen3 Q8_0
# GGUF, and the error paths (bad flags exit 2, a broken model exits 1 with a
# message naming the problem).
set -eu
aorta=$1
dir=$(mktemp -d /tmp/aorta_cli_models_XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$aorta" make-model --out "$dir/demo.gguf" 2>/dev/null || fail "make-model demo (--out, as make run calls it)"
"$aorta" inspect "$dir/demo.gguf" > "$dir/out.txt" || fail "inspect demo"
grep -q '^architecture: llama' "$dir/out.txt" || fail "arch line"
grep -q '^layers:       4' "$dir/out.txt" || fail "layers line"
grep -q 'heads:        8 (kv 4, head_dim 32)' "$dir/out.txt" || fail "heads line"
grep -q '^token_embd.weight  *f16  *(268, 256)  *137216' "$dir/out.txt" || fail "tensor row"
grep -q '^39 tensors' "$dir/out.txt" || fail "totals"

"$aorta" make-model "$dir/hf" --arch qwen2 --dtype bf16 --layers 2 --hidden 64 --heads 4 \
    --kv-heads 2 --ffn 128 --shards 2 --tied 2>/dev/null || fail "make-model hf"
"$aorta" inspect "$dir/hf" > "$dir/hf.txt" || fail "inspect hf"
grep -q '^format:       hf' "$dir/hf.txt" || fail "hf format"
grep -q '^qkv bias:     yes' "$dir/hf.txt" || fail "qwen2 bias default"
grep -q '^tied embd:    yes' "$dir/hf.txt" || fail "tied"
grep -q 'model.layers.1.self_attn.q_proj.bias' "$dir/hf.txt" || fail "bias tensor listed"

"$aorta" make-model "$dir/q.gguf" --arch qwen3 --dtype q8_0 --layers 1 --hidden 64 --heads 2 \
    --head-dim 64 --ffn 64 --no-qk-norm 2>/dev/null || fail "make-model q8_0"
"$aorta" inspect --keys "$dir/q.gguf" > "$dir/q.txt" || fail "inspect q8_0"
grep -q '^q/k norm:     no' "$dir/q.txt" || fail "--no-qk-norm"
grep -q 'q8_0' "$dir/q.txt" || fail "q8_0 tensors"
grep -q 'tokenizer.ggml.tokens .*\[string x 268\]' "$dir/q.txt" || fail "--keys"

set +e
"$aorta" make-model "$dir/x.gguf" --dtype q4_k 2>/dev/null; [ $? -eq 2 ] || fail "bad dtype exit 2"
"$aorta" make-model 2>/dev/null; [ $? -eq 2 ] || fail "missing OUT exit 2"
"$aorta" make-model a.gguf --out b.gguf 2>/dev/null; [ $? -eq 2 ] || fail "OUT twice exit 2"
printf 'GGUF\003\000\000\000' > "$dir/bad.gguf"
"$aorta" inspect "$dir/bad.gguf" 2> "$dir/err.txt"; [ $? -eq 1 ] || fail "bad model exit 1"
grep -q 'truncated\|too small' "$dir/err.txt" || fail "bad model message: $(cat "$dir/err.txt")"
echo "cli_models: ok"
