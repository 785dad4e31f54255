#!/usr/bin/env python3
"""tests/bench_serve/bench_aorta_e2e.py — `aorta bench serve` against a real
local `aorta serve` on the demo model (written by `aorta make-model`).

Checks that the numbers add up against aorta itself: every request succeeds,
usage comes from the server, and with --ignore-eos every request yields exactly
--output-len tokens. Exits 77 (skipped) when `aorta serve` does not come up —
until the HTTP server (issue 7) is integrated it exits at once.

Usage: bench_aorta_e2e.py PATH/TO/aorta
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(proc, port, timeout_s):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.2)
    return False


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
            if not wait_listening(srv, port, 60):
                log.seek(0)
                tail = log.read()[-400:].strip().replace("\n", " | ")
                print(f"SKIP: aorta serve did not start listening: {tail}")
                return SKIP
            out = os.path.join(tmp, "bench.json")
            n, out_len = 8, 8
            r = subprocess.run([aorta, "bench", "serve", "--base-url", f"http://127.0.0.1:{port}",
                                "--model", "aorta-demo", "--num-prompts", str(n),
                                "--input-len", "16", "--output-len", str(out_len), "--ignore-eos",
                                "--max-concurrency", "4", "--request-timeout", "120",
                                "--json", out], capture_output=True, text=True, timeout=300)
            print(r.stdout)
            print(r.stderr, file=sys.stderr)
            assert r.returncode == 0, f"bench serve exited {r.returncode}"
            res = json.load(open(out))
            assert res["completed"] == n and res["failed"] == 0, res["errors"]
            assert res["total_output_tokens"] == n * out_len, res["total_output_tokens"]
            for q in res["requests"]:
                assert q["result"] == "ok" and q["usage_from_server"], q
                assert q["output_tokens"] == out_len and q["prompt_tokens"] > 0, q
                assert 0 < q["ttft_ms"] <= q["e2e_ms"], q
            print("OK: counts add up against aorta serve")
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
