#!/bin/sh
# tests/kernels/attn_emu/run.sh [build-dir] — build test_cuda_attn against a
# CPU emulation of kernels/cuda/k_attn.cu (see emu.h) and run it. Not part of
# the meson build: a check of the kernels' logic for machines without a GPU.
# Takes minutes (the whole case list, one fiber per CUDA thread).
set -e
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
B=${1:-/tmp/attn-emu-build}
mkdir -p "$B/fake"
cp "$SRC/tests/kernels/attn_emu/emu.h" "$B/fake/emu.h"
for h in cuda_runtime.h cuda_fp16.h cuda_bf16.h cuda_fp8.h; do
	printf '#pragma once\n#include "emu.h"\n' > "$B/fake/$h"
done
# <<<grid, block, smem, stream>>> launches and the dynamic shared array
python3 - "$SRC/kernels/cuda/k_attn.cu" "$B/k_attn_emu.cc" <<'PY'
import re, sys
s = open(sys.argv[1]).read()
s = s.replace('extern __shared__ __align__(16) float smem[];', 'float *smem = (float *)emu_dyn_smem;')
s, n = re.subn(r'(\w+(?:<[^<>;]*>)?)<<<(.*?)>>>\((.*?)\);', r'emu_launch(\2, [=]() { \1(\3); });', s)
assert n == 3, n
open(sys.argv[2], 'w').write(s)
PY
CXXF="-std=c++20 -O2 -g -fno-strict-aliasing -Wno-unknown-pragmas -I $B/fake -I $SRC"
CF="-std=c11 -O2 -g -I $SRC -D_GNU_SOURCE"
g++ $CXXF -c "$B/k_attn_emu.cc" -o "$B/k_attn_emu.o"
g++ $CXXF -c "$SRC/tests/kernels/attn_emu/emu.cc" -o "$B/emu.o"
for f in tests/kernels/test_cuda_attn.c tests/kernels/kcheck.c kernels/cpu/ops_ref.c kernels/dtype.c; do
	gcc $CF -c "$SRC/$f" -o "$B/$(basename "$f" .c).o"
done
g++ -o "$B/test_cuda_attn_emu" "$B/test_cuda_attn.o" "$B/kcheck.o" "$B/ops_ref.o" \
	"$B/dtype.o" "$B/k_attn_emu.o" "$B/emu.o" -lm
"$B/test_cuda_attn_emu"
