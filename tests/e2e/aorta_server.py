"""tests/e2e/aorta_server.py — start and stop an `aorta serve` on loopback for
the end-to-end tests, plus a tiny stdlib HTTP client (http.client) with SSE
parsing. Every server listens on 127.0.0.1 with --port 0; the bound port is
read from the line `aorta: listening on port N` on its stdout."""
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

BUILD = os.environ.get("AORTA_BUILD_ROOT", "build")
AORTA = os.path.join(BUILD, "server", "aorta")


def make_model(directory, *args):
    path = os.path.join(directory, "demo.gguf")
    subprocess.run([AORTA, "make-model", "--out", path, *args], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return path


class Server:
    def __init__(self, model, *args, env=None):
        self.log = tempfile.TemporaryFile()
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen(
            [AORTA, "serve", "--model", model, "--port", "0", "--threads", "2", *args],
            stdout=subprocess.PIPE, stderr=self.log, env=e)
        line = self.proc.stdout.readline().decode()
        if "listening on port" not in line:
            self.proc.kill()
            self.proc.wait()
            self.proc.stdout.close()
            raise RuntimeError("server did not start: " + line + self.logtext())
        self.port = int(line.split()[-1])
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        deadline = time.time() + 60
        while time.time() < deadline:
            st, _ = self.get("/health")
            if st == 200:
                return
            if self.proc.poll() is not None:
                self.proc.stdout.close()
                raise RuntimeError(f"server exited ({self.proc.returncode}): " + self.logtext())
            time.sleep(0.05)
        raise RuntimeError("server not ready in 60 s")

    def logtext(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, raw=False):
        c = self.conn()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        if raw:
            return r.status, data, r
        try:
            return r.status, json.loads(data) if data else None
        except ValueError:
            return r.status, data.decode(errors="replace")

    def get(self, path, **kw):
        try:
            return self.request("GET", path, **kw)
        except (ConnectionError, OSError):
            return 0, None

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def stream(self, path, body, headers=None):
        """POST with stream=true; returns (status, [events]) where each event is
        the parsed JSON of a `data:` line, or the string '[DONE]'."""
        c = self.conn()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request("POST", path, body=json.dumps(body), headers=h)
        r = c.getresponse()
        if r.status != 200:
            data = r.read()
            c.close()
            return r.status, json.loads(data)
        events = []
        buf = b""
        while True:
            chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                assert ev.startswith(b"data: "), ev
                payload = ev[6:].decode()
                events.append("[DONE]" if payload == "[DONE]" else json.loads(payload))
        c.close()
        assert buf == b"", buf
        return 200, events

    def metric(self, name, having=""):
        """The first sample of name (whose labels contain having, if given)."""
        st, text = self.request("GET", "/metrics", raw=True)[:2]
        for line in text.decode().splitlines():
            if (line.startswith(name + "{") or line.startswith(name + " ")) and having in line:
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(name)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        return self.proc.returncode

    def __del__(self):
        try:
            self.log.close()
        except Exception:
            pass


def unittest_main():
    """unittest.main, but a skipped case is not silent: each prints
    'SKIP: <test id>: <why>' (tools/test-summary.py lists them; in CI a skip
    not about hardware fails the run). Exit 0 when every case that ran passed."""
    import unittest
    res = unittest.main(verbosity=2, exit=False).result
    for test, why in res.skipped:
        print(f"SKIP: {test.id()}: {why}", flush=True)
    sys.exit(0 if res.wasSuccessful() else 1)
