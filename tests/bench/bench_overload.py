#!/usr/bin/env python3
"""tests/bench/bench_overload.py [BUILD_DIR] [SECONDS] — overload behaviour of
aorta serve on the demo model (a benchmark, not a test).

1. Measures capacity: completed requests/s with 16 closed-loop clients.
2. Offers about 10x that rate open-loop for SECONDS (default 20) with
   --max-queued-requests 32, and reports: how many got 200 / 429 / other, the
   time to a 429 (p50, p99, max), whether every 429 carried Retry-After, the
   largest waiting queue seen in /metrics, RSS before and after, and that every
   accepted request completed. Any 5xx or connection failure is a failure.
Prints one JSON object and exits non-zero on a violation."""
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build-release"
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
AORTA = os.path.join(BUILD, "server", "aorta")
QUEUE = 32

tmp = tempfile.mkdtemp()
model = os.path.join(tmp, "demo.gguf")
subprocess.run([AORTA, "make-model", "--out", model], check=True, stdout=subprocess.DEVNULL)
proc = subprocess.Popen([AORTA, "serve", "--model", model, "--port", "0", "--log-level", "warn",
                         "--max-num-seqs", "16", "--max-queued-requests", str(QUEUE),
                         "--max-model-len", "512"],
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
port = int(proc.stdout.readline().decode().split()[-1])
BODY = json.dumps({"model": model, "prompt": "overload test", "max_tokens": 48,
                   "ignore_eos": True, "temperature": 0})


def request():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=BODY, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    dt = time.perf_counter() - t0
    c.close()
    return r.status, dt, r.getheader("Retry-After")


def rss_kib():
    with open(f"/proc/{proc.pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))


def waiting():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    for line in c.getresponse().read().decode().splitlines():
        if line.startswith("aorta:num_requests_waiting"):
            return float(line.rsplit(" ", 1)[1])
    return -1


for _ in range(600):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", "/health")
        if c.getresponse().status == 200:
            break
    except OSError:
        pass
    time.sleep(0.05)

# 1. capacity, closed loop
done = []
stop = time.time() + 8


def closed_loop():
    while time.time() < stop:
        st, _, _ = request()
        if st == 200:
            done.append(1)


ts = [threading.Thread(target=closed_loop) for _ in range(16)]
for t in ts:
    t.start()
for t in ts:
    t.join()
capacity = len(done) / 8.0
rate = 10 * capacity
rss0 = rss_kib()

# 2. ten times that, open loop
results = []
lock = threading.Lock()
max_wait = 0.0
sem = threading.Semaphore(512)


def one():
    try:
        res = request()
    except OSError as e:
        res = (0, 0.0, repr(e))
    with lock:
        results.append(res)
    sem.release()


t_end = time.time() + SECONDS
next_t = time.time()
threads = []
while time.time() < t_end:
    sem.acquire()
    th = threading.Thread(target=one, daemon=True)
    th.start()
    threads.append(th)
    next_t += 1.0 / rate
    if len(threads) % 50 == 0:
        max_wait = max(max_wait, waiting())
    delay = next_t - time.time()
    if delay > 0:
        time.sleep(delay)
for th in threads:
    th.join(180)
rss1 = rss_kib()

ok = [r for r in results if r[0] == 200]
rej = sorted(r[1] for r in results if r[0] == 429)
bad = [r for r in results if r[0] not in (200, 429)]
no_retry = sum(1 for r in results if r[0] == 429 and not r[2])


def pct(xs, p):
    if not xs:
        return None
    k = (len(xs) - 1) * p
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


out = {
    "capacity_req_s": round(capacity, 1), "offered_req_s": round(rate, 1),
    "offered": len(results), "ok_200": len(ok), "rejected_429": len(rej), "other": len(bad),
    "reject_ms_p50": round(1000 * pct(rej, 0.5), 2) if rej else None,
    "reject_ms_p99": round(1000 * pct(rej, 0.99), 2) if rej else None,
    "reject_ms_max": round(1000 * rej[-1], 2) if rej else None,
    "429_without_retry_after": no_retry, "max_waiting_seen": max_wait, "queue_limit": QUEUE,
    "rss_kib_before": rss0, "rss_kib_after": rss1,
}
proc.send_signal(signal.SIGTERM)
out["server_exit"] = proc.wait(60)
print(json.dumps(out))
problems = bad or no_retry or not rej or out["server_exit"] != 0 or max_wait > QUEUE
sys.exit(1 if problems else 0)
