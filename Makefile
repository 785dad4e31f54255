# aorta — thin orchestration over meson/ninja. The two commands a new user needs:
#   make run   install deps, build (release), create the demo model, serve it on 127.0.0.1:8080
#   make test  install deps, build (-O2 -g with assertions; CUDA sources too where nvcc exists),
#              run every suite
# plus: make asan (unit and e2e suites under AddressSanitizer + UBSan), make fuzz SECONDS=N,
# make soak MINUTES=N, make clean.

SHELL := /bin/bash
export PATH := /usr/local/cuda/bin:$(PATH)

HOST ?= 127.0.0.1
PORT ?= 8080
DEMO_MODEL ?= models/demo.gguf
SECONDS ?= 60
MESON_SETUP = meson setup --reconfigure

.PHONY: all deps build run test test-build asan fuzz soak clean

all: build

deps:
	@tools/install-deps.sh

build-release/build.ninja:
	meson setup build-release --buildtype=release -Dtests=false

build: deps build-release/build.ninja
	ninja -C build-release

$(DEMO_MODEL): | build
	@mkdir -p $(dir $(DEMO_MODEL))
	./build-release/server/aorta make-model --out $(DEMO_MODEL)

run: build $(DEMO_MODEL)
	./build-release/server/aorta serve --model $(DEMO_MODEL) --host $(HOST) --port $(PORT)

# The test build compiles the CUDA sources wherever nvcc exists (for every
# architecture when no GPU is visible), so they are checked even on CPU-only
# machines; `make run` builds them only where a GPU is visible (meson's
# cuda=auto).
CUDA_TEST := $(if $(shell PATH="$(PATH)" command -v nvcc 2>/dev/null),enabled,disabled)
build-debug/build.ninja:
	meson setup build-debug --buildtype=debugoptimized -Dcuda=$(CUDA_TEST) $(MESON_EXTRA)

test-build: deps build-debug/build.ninja
	ninja -C build-debug

test: test-build
	@meson test -C build-debug --print-errorlogs --num-processes 2 --no-suite slow || true
	@tools/test-summary.py build-debug

build-asan/build.ninja:
	meson setup build-asan --buildtype=debugoptimized -Dcuda=disabled \
		-Db_sanitize=address,undefined -Db_lundef=false

asan: deps build-asan/build.ninja
	ninja -C build-asan
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		AORTA_MALFORMED_PER_ENDPOINT=500 \
		meson test -C build-asan --print-errorlogs --num-processes 2 --suite unit --suite e2e || true
	@tools/test-summary.py build-asan

fuzz: deps
	tools/fuzz.sh $(SECONDS)

# 64 streaming clients, 10% hanging up mid-stream, for MINUTES minutes
MINUTES ?= 30
soak: test-build
	/usr/bin/python3 tests/soak/soak.py $(MINUTES) build-debug

clean:
	rm -rf build-release build-debug build-asan build-fuzz
