#!/usr/bin/env bash
# tests/gpu/run.sh — the one GPU run: build with CUDA, run every CUDA test,
# then the GPU benchmarks, and print the figures the issues ask for.
# Sized for under 5 minutes on an H200 (16 host cores).
#
#   tests/gpu/run.sh [BUILD_DIR]          (default build-gpu)
#
# Environment: GPU_ARCHS (default 90a), OUT (if set, the logs go there as
# gpu-logs.tgz),
# QUICK=1 (smaller benchmark shapes, for a first smoke run), AORTA_PREBUILT=DIR
# (run the programs tests/gpu/bundle.sh packed into DIR instead of building:
# for a GPU machine without the build dependencies), TEST_TIMEOUT (per CUDA
# test in that mode, default 120 s), PROFILE=1 (per-kernel times by ncu).
# Exit status: non-zero when the build or any CUDA test failed; benchmark
# failures are reported but do not hide test results.
set -u -o pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gpu}
ARCHS=${GPU_ARCHS:-90a}
LOG=/tmp/aorta-gpu-run
rm -rf "$LOG" && mkdir -p "$LOG"
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
# logs go to $OUT as one archive, refreshed at each stage (a run cut short
# still returns what it had)
save() { [ -n "${OUT:-}" ] && tar czf "$OUT/gpu-logs.tgz" -C /tmp aorta-gpu-run; return 0; }
stamp() { save; echo "== [$(( $(date +%s) - t0 )) s] $*"; }

stamp "device"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true

if [ -n "${AORTA_PREBUILT:-}" ]; then
	# programs packed by tests/gpu/bundle.sh; CUDA's own libraries from the toolkit
	PRE=$(cd "$AORTA_PREBUILT" && pwd)
	export LD_LIBRARY_PATH="$PRE/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	bin() { echo "$PRE/bin/$(basename "$1")"; }
	stamp "CUDA tests (prebuilt, $PRE; in parallel)"
	tests_rc=0
	cuda_tests="test_cuda_smoke test_cuda_gemm test_cuda_ops test_cuda_attn test_cuda_sample
		test_cuda_quant test_cuda_gemv test_cuda_mma test_cuda_engine test_engine_quant_cuda"
	for t in $cuda_tests; do
		( t1=$(date +%s)
		  exe=$t; [ $t = test_engine_quant_cuda ] && exe=test_engine_quant
		  AORTA_TEST_DEVICE=cuda timeout "${TEST_TIMEOUT:-120}" "$PRE/bin/$exe" >"$LOG/$t.log" 2>&1
		  echo "$? $(( $(date +%s) - t1 ))" >"$LOG/$t.rc" ) &
	done
	wait
	n_ok=0
	for t in $cuda_tests; do
		read -r rc secs <"$LOG/$t.rc"
		case $rc in
		0) r=OK; n_ok=$((n_ok + 1)) ;; 77) r=SKIP ;; 124) r=TIMEOUT; tests_rc=1 ;; *) r="FAIL ($rc)"; tests_rc=1 ;;
		esac
		echo "$t: $r ($secs s)"
		[ "$r" = OK ] || [ "$r" = SKIP ] || { grep -m 30 -E "FAIL|rror|mismatch" "$LOG/$t.log"; tail -5 "$LOG/$t.log"; }
	done
	[ $tests_rc -eq 0 ] && [ $n_ok -eq 0 ] && tests_rc=77
else
	bin() { echo "$BUILD/$1"; }
	stamp "build ($ARCHS, release)"
	if [ ! -f "$BUILD/build.ninja" ]; then
		meson setup "$BUILD" -Dcuda=enabled -Dgpu_archs="$ARCHS" --buildtype=release \
			>"$LOG/setup.log" 2>&1 || { tail -30 "$LOG/setup.log"; exit 1; }
	fi
	ninja -C "$BUILD" >"$LOG/build.log" 2>&1 || { grep -B2 -A12 -E "error|FAILED" "$LOG/build.log" | head -80; exit 1; }

	stamp "CUDA tests (suite gpu)"
	meson test -C "$BUILD" --suite gpu --print-errorlogs --num-processes 4 >"$LOG/tests-gpu.log" 2>&1
	tests_rc=$?
	grep -E "^ *[0-9]+/[0-9]+ |Ok:|Fail:|Skipped:|Timeout:" "$LOG/tests-gpu.log"
	[ $tests_rc -ne 0 ] && grep -E "FAIL|MISMATCH|mismatch" "$BUILD/meson-logs/testlog.txt" | head -40
	cp "$BUILD/meson-logs/testlog.txt" "$LOG/testlog-gpu.txt" 2>/dev/null

	stamp "engine tests on the CPU (the references the GPU is compared to)"
	meson test -C "$BUILD" test_engine test_ops test_matmul ref_forward --num-processes 8 \
		>"$LOG/tests-cpu.log" 2>&1
	grep -E "Ok:|Fail:" "$LOG/tests-cpu.log"
fi

stamp "machine limits (bench_cuda)"
q=""; [ "${QUICK:-0}" = 1 ] && q="--quick"
timeout 120 "$(bin tests/bench/bench_cuda)" $q 2>&1 | tee "$LOG/bench_cuda.txt"
if [ -x "$(bin tests/bench/bench_cuda_quant)" ]; then
	stamp "8-bit GEMV/GEMM (bench_cuda_quant)"
	timeout 120 "$(bin tests/bench/bench_cuda_quant)" 2>&1 | tee "$LOG/bench_cuda_quant.txt"
fi

if [ -x "$(bin tests/bench/bench_cuda_gemv)" ]; then
	stamp "decode GEMV (bench_cuda_gemv)"
	timeout 120 "$(bin tests/bench/bench_cuda_gemv)" 2>&1 | tee "$LOG/bench_cuda_gemv.txt" |
		grep -vE "^gemv\."
fi

# Llama-3-8B shape (random weights): hidden 4096, 32 layers, 32/8 heads,
# FFN 14336, vocab 128256, BF16.
shape="--layers 32 --hidden 4096 --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256"
[ "${QUICK:-0}" = 1 ] && shape="--layers 4 --hidden 4096 --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256"
# decode is reported against the nominal 4.8 TB/s (the issue's yardstick);
# bench_cuda's measured bandwidth is printed in the summary beside it
hbm=$(grep -oE '^bw_gbs=[0-9.]+' "$LOG/bench_cuda.txt" | cut -d= -f2)
for q in none fp8 int8; do
	stamp "engine bench: Llama-3-8B shape, bf16, --quantization $q"
	timeout 150 "$(bin server/aorta)" bench engine --device cuda --synthetic $shape --dtype bf16 \
		--quantization $q --prompt 2048 --batches 1,16,64 --decode-ctx 512 --steps 20 \
		--hbm-gbs 4800 --peak-tflops 989 2>&1 | tee "$LOG/bench_engine_$q.txt"
done

# A/B in the same run, batch 1 and the 2048-token prefill only: fusion off
# (AORTA_CUDA_FUSION=0: norms, SwiGLU and the decode split merge as kernels
# of their own, and the W8A8 activation quantization after the
# norm / SwiGLU instead of inside them) and programmatic dependent launch
# off (AORTA_CUDA_PDL=0); both off is the engine as it was before them
for ab in "nopdl:AORTA_CUDA_PDL=0" "base:AORTA_CUDA_FUSION=0 AORTA_CUDA_PDL=0"; do
	for q in none fp8; do
		stamp "engine bench, ${ab#*:}: Llama-3-8B shape, bf16, --quantization $q"
		env ${ab#*:} timeout 150 "$(bin server/aorta)" bench engine --device cuda --synthetic \
			$shape --dtype bf16 --quantization $q --prompt 2048 --batches 1 --decode-ctx 512 \
			--steps 20 --hbm-gbs 4800 --peak-tflops 989 2>&1 | tee "$LOG/bench_${ab%%:*}_$q.txt"
	done
done

# PROFILE=1: per-kernel device times (Nsight Compute, clocks left alone) of a
# 2-layer model of the same shapes, eager: prefill of 2048 tokens, then decode
if [ "${PROFILE:-0}" = 1 ]; then
	stamp "per-kernel times (ncu)"
	NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
	if [ -n "$NCU" ]; then
		timeout 150 "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv \
			"$(bin server/aorta)" bench engine --device cuda \
			--synthetic --layers 2 --hidden 4096 --heads 32 --kv-heads 8 --ffn 14336 \
			--vocab 128256 --dtype bf16 --prompt 2048 --batches 1 --decode-ctx 512 \
			--steps 3 --enforce-eager >"$LOG/ncu.csv" 2>"$LOG/ncu.err"
		# totals per kernel, then the last 45 launches (the last decode step)
		python3 - "$LOG/ncu.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1], errors="replace")) if len(r) > 14]
hdr = rows[0]; ki = hdr.index("Kernel Name"); vi = hdr.index("Metric Value"); ui = hdr.index("Metric Unit")
runs = []
for r in rows[1:]:
    try: v = float(r[vi].replace(",", ""))
    except ValueError: continue
    v *= {"nsecond": 1e-3, "usecond": 1, "msecond": 1e3}.get(r[ui], 1)
    runs.append((r[ki].split("(")[0][:70], v))
tot = collections.defaultdict(lambda: [0, 0.0])
for n, v in runs: tot[n][0] += 1; tot[n][1] += v
print("kernel launches: %d, %.1f us in all" % (len(runs), sum(v for _, v in runs)))
for n, (c, t) in sorted(tot.items(), key=lambda x: -x[1][1])[:25]:
    print("%9.1f us %5d x  %s" % (t, c, n))
print("-- last 45 launches (us):")
for n, v in runs[-45:]: print("%9.1f  %s" % (v, n))
PY
	else
		echo "no ncu"
	fi
fi

# the whole server on the GPU: a 1B-shaped random model (make-model's own
# small tokenizer and vocabulary), streaming clients through the
# continuous batcher with sampling on the device; 0 failed requests expected
stamp "serve on the GPU: aorta serve --device cuda + aorta bench serve"
"$(bin server/aorta)" make-model --out /tmp/aorta-gpu-1b.gguf --layers 16 --hidden 2048 \
	--heads 16 --kv-heads 8 --head-dim 128 --ffn 8192 --dtype bf16 \
	--max-ctx 4096 --name gpu-1b >"$LOG/make_model.txt" 2>&1 || tail -3 "$LOG/make_model.txt"
"$(bin server/aorta)" serve --model /tmp/aorta-gpu-1b.gguf --device cuda --port 18080 --served-model-name gpu-1b \
	--max-num-seqs 128 >"$LOG/serve.txt" 2>&1 &
srv=$!
for _ in $(seq 1 120); do
	python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:18080/health', timeout=1)" \
		2>/dev/null && break
	sleep 0.5
done
timeout 120 "$(bin server/aorta)" bench serve --base-url http://127.0.0.1:18080 --model gpu-1b \
	--num-prompts 256 --max-concurrency 128 --input-len 256 --output-len 128 --ignore-eos \
	--temperature 0.8 --no-progress 2>&1 | tee "$LOG/bench_serve.txt" | tail -25
kill $srv 2>/dev/null; wait $srv 2>/dev/null
grep -E "ERROR|error|cuda" "$LOG/serve.txt" | head -5

stamp "summary"
echo "CUDA tests: $(case $tests_rc in 0) echo all passed ;; 77) echo skipped, no GPU ;; *) echo FAILED ;; esac)"
[ -n "$hbm" ] && echo "measured device bandwidth: $hbm GB/s (bench_cuda; the engine lines use 4800)"
grep -hE "^(prefill|decode)" "$LOG"/bench_engine_*.txt
for ab in nopdl base; do
	echo "$ab ($( [ $ab = nopdl ] && echo AORTA_CUDA_PDL=0 || echo AORTA_CUDA_FUSION=0 AORTA_CUDA_PDL=0 )), none then fp8:"
	grep -hE "^(prefill|decode)" "$LOG"/bench_${ab}_none.txt "$LOG"/bench_${ab}_fp8.txt
done
# #10's goals, from this run's own lines: 8-bit over BF16 tokens/s at
# batch 1 (goal: FP8 >= 1.8x) and for the 2048-token prefill (>= 1.6x)
tps() { # tps LOG prefill|decode: that line's tokens/s (batch 1 for decode)
	case $2 in
	prefill) sed -nE 's/^prefill: [0-9]+ tokens: +([0-9.]+) tokens\/s.*/\1/p' "$1" ;;
	decode) sed -nE 's/^decode: batch +1: +([0-9.]+) tokens\/s.*/\1/p' "$1" ;;
	esac 2>/dev/null | head -1
}
goals() { # goals LABEL BF16_LOG 8BIT_LOG
	local d0 d1 p0 p1
	d0=$(tps "$2" decode) d1=$(tps "$3" decode) p0=$(tps "$2" prefill) p1=$(tps "$3" prefill)
	[ -n "$d0" ] && [ -n "$d1" ] && [ -n "$p0" ] && [ -n "$p1" ] &&
		awk -v l="$1" -v d0="$d0" -v d1="$d1" -v p0="$p0" -v p1="$p1" 'BEGIN {
			printf "%s: decode b1 %.2fx BF16, prefill 2048 %.2fx BF16\n", l, d1 / d0, p1 / p0 }'
	return 0
}
goals "fp8 (goals 1.8x, 1.6x)" "$LOG"/bench_engine_none.txt "$LOG"/bench_engine_fp8.txt
goals "int8" "$LOG"/bench_engine_none.txt "$LOG"/bench_engine_int8.txt
goals "fp8, AORTA_CUDA_PDL=0" "$LOG"/bench_nopdl_none.txt "$LOG"/bench_nopdl_fp8.txt
goals "fp8, AORTA_CUDA_FUSION=0 AORTA_CUDA_PDL=0" "$LOG"/bench_base_none.txt "$LOG"/bench_base_fp8.txt
grep -hE "^quant\.producer\." "$LOG"/bench_cuda_quant.txt 2>/dev/null
grep -hE "quant \(cuda\)" "$LOG"/test_engine_quant_cuda.log 2>/dev/null
save
exit $tests_rc
