#!/usr/bin/env python3
"""tests/bench_serve/bench_aorta_e2e.py — `aorta bench serve` against a real
local `aorta serve` on the demo model (written by `aorta make-model`).

Checks that the numbers add up against aorta itself: every request succeeds,
usage comes from the server, and with --ignore-eos every request yields exactly
--output-len tokens; then the chat endpoint, a shared-prefix workload, and prompts of exact
token lengths built with the model's own tokenizer (--tokenizer).
A server that does not become ready (GET /health 200) within 60 s is a
failure, with the tail of its log: aorta serve is built with every build.

Usage: bench_aorta_e2e.py PATH/TO/aorta
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(proc, port, timeout_s):
    """Until GET /health (or /v1/models) answers 200: aorta listens while the
    model loads and answers 503 meanwhile."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        for path in ("/health", "/v1/models"):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                    if r.status == 200:
                        return True
            except (OSError, urllib.error.HTTPError):
                pass
        time.sleep(0.2)
    return False


def bench(aorta, args, n, out_len, out):
    r = subprocess.run([aorta, "bench", "serve", "--num-prompts", str(n), "--output-len",
                        str(out_len), "--json", out] + args,
                       capture_output=True, text=True, timeout=300)
    print(r.stdout)
    print(r.stderr, file=sys.stderr)
    assert r.returncode == 0, f"bench serve {args} exited {r.returncode}"
    res = json.load(open(out))
    assert res["completed"] == n and res["failed"] == 0, res["errors"]
    assert res["total_output_tokens"] == n * out_len, res["total_output_tokens"]
    assert res["total_input_tokens"] == sum(q["prompt_tokens"] for q in res["requests"])
    if "--tokenizer" in args:  # prompts of exact length: 20 tokens, plus BOS if any
        lens = {q["prompt_tokens"] for q in res["requests"]}
        assert lens <= {20, 21}, lens
    for q in res["requests"]:
        assert q["result"] == "ok" and q["usage_from_server"], q
        assert q["output_tokens"] == out_len and q["prompt_tokens"] > 0, q
        assert 0 < q["ttft_ms"] <= q["e2e_ms"], q


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    aorta = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "demo.gguf")
        subprocess.run([aorta, "make-model", model, "--layers", "2", "--hidden", "128",
                        "--ffn", "256", "--heads", "4", "--kv-heads", "2"],
                       check=True, capture_output=True)
        port = free_port()
        log = open(os.path.join(tmp, "serve.log"), "w+")
        srv = subprocess.Popen([aorta, "serve", "--model", model, "--port", str(port),
                                "--served-model-name", "aorta-demo", "--device", "cpu"],
                               stdout=log, stderr=subprocess.STDOUT)
        try:
            if not wait_ready(srv, port, 60):
                log.seek(0)
                tail = log.read()[-400:].strip().replace("\n", " | ")
                print(f"FAIL: aorta serve did not become ready in 60 s "
                      f"(exit {srv.poll()}): {tail}")
                return 1
            base = ["--base-url", f"http://127.0.0.1:{port}", "--model", "aorta-demo",
                    "--ignore-eos", "--request-timeout", "120"]
            runs = [
                (8, 8, ["--input-len", "16", "--max-concurrency", "4"]),
                (6, 5, ["--endpoint", "chat", "--input-len", "12", "--max-concurrency", "3"]),
                (8, 4, ["--input-len", "8", "--prefix-len", "32", "--num-prefix-groups", "2",
                        "--request-rate", "40", "--seed", "5"]),
                (6, 4, ["--input-len", "20", "--tokenizer", model, "--max-concurrency", "2"]),
            ]
            sent = 0
            try:
                for n, out_len, extra in runs:
                    bench(aorta, base + extra, n, out_len, os.path.join(tmp, "bench.json"))
                    sent += n
            except AssertionError:
                log.flush()
                log.seek(0)
                print("---- aorta serve log (tail) ----\n" + log.read()[-3000:], file=sys.stderr)
                raise
            log.flush()
            log.seek(0)
            seen = sum(1 for line in log if "[access]" in line and "POST /v1/" in line)
            assert seen == sent, f"the server logged {seen} requests, the client sent {sent}"
            print(f"OK: counts add up against aorta serve ({sent} requests)")
            return 0
        finally:
            srv.terminate()
            try:
                srv.wait(timeout=30)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait()
            log.close()


if __name__ == "__main__":
    sys.exit(main())
