"""tests/emu/test_serve_cuda.py — `aorta serve --device cuda` end to end, with the
CUDA engine running under the host emulator (emu_aorta: the server linked
against tests/emu instead of the CUDA runtime). Guards the GPU serving path
(batcher -> engine_forward_sample -> k_sample on the device, host sampling for
fork steps, graphs, logprobs) on machines without a GPU, which is every CI
run; the numbers themselves are checked by the kernel and engine tests.

Checks: the server starts on the CUDA engine; greedy completions are
deterministic and have the asked length; a streamed chat completion arrives
as SSE chunks ending in [DONE]; n = 2 with sampling and logprobs (a fork,
sampled on the host for the first token, on the device afterwards) returns
two choices with finite logprobs and top candidates; a client that hangs up
mid-stream does not stop the server from answering the next request; SIGTERM
drains and exits 0."""
import json
import math
import os
import signal
import socket
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import aorta_server  # noqa: E402

EMU = os.environ.get("AORTA_EMU_BIN")
if not EMU or not os.path.exists(EMU):
    print("test_serve_cuda: SKIP: AORTA_EMU_BIN (emu_aorta) not built")
    sys.exit(77)
aorta_server.AORTA = EMU

failures = 0


def check(cond, what):
    global failures
    if cond:
        print("ok", what)
    else:
        failures += 1
        print("FAIL", what)


with tempfile.TemporaryDirectory() as d:
    # head_dim 64: the CUDA attention kernels take 64, 128 or 256
    model = aorta_server.make_model(d, "--layers", "2", "--hidden", "128", "--heads", "2",
                                    "--kv-heads", "1", "--head-dim", "64", "--ffn", "256",
                                    "--max-ctx", "512")
    srv = aorta_server.Server(model, "--device", "cuda", "--max-num-seqs", "8",
                              "--served-model-name", "emu")
    try:
        log = srv.logtext()
        check("aorta host emulator" in log and "cuda" in log, "server runs the CUDA engine")

        req = {"model": "emu", "prompt": "hello world", "max_tokens": 6, "temperature": 0,
               "ignore_eos": True}
        st1, r1 = srv.request("POST", "/v1/completions", req)
        st2, r2 = srv.request("POST", "/v1/completions", req)
        check(st1 == 200 and st2 == 200, "greedy completions: 200")
        if st1 == 200 and st2 == 200:
            check(r1["usage"]["completion_tokens"] == 6, "greedy: 6 tokens")
            check(r1["choices"][0]["text"] == r2["choices"][0]["text"],
                  "greedy: the same text twice")

        # streamed chat: SSE chunks, then [DONE]
        c = srv.conn()
        body = json.dumps({"model": "emu", "stream": True, "max_tokens": 5,
                           "messages": [{"role": "user", "content": "hi"}],
                           "ignore_eos": True})
        c.request("POST", "/v1/chat/completions", body=body,
                  headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        raw = resp.read().decode()
        c.close()
        events = [ln[6:] for ln in raw.split("\n") if ln.startswith("data: ")]
        check(resp.status == 200 and events and events[-1] == "[DONE]",
              "streamed chat ends with [DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        check(any(ch["choices"] and ch["choices"][0].get("finish_reason") == "length"
                  for ch in chunks), "streamed chat: finish_reason length")

        # n = 2, sampled, with logprobs: a fork
        st, r = srv.request("POST", "/v1/completions",
                            {"model": "emu", "prompt": "abc", "max_tokens": 5, "n": 2,
                             "temperature": 0.9, "seed": 7, "logprobs": 3,
                             "ignore_eos": True})
        check(st == 200 and len(r["choices"]) == 2, "n = 2: two choices")
        if st == 200:
            ok = True
            for ch in r["choices"]:
                lp = ch["logprobs"]
                ok &= len(lp["token_logprobs"]) == 5
                ok &= all(isinstance(x, float) and math.isfinite(x) and x <= 0
                          for x in lp["token_logprobs"])
                ok &= all(len(t) >= 1 for t in lp["top_logprobs"])
            check(ok, "n = 2: five finite logprobs and top candidates per choice")

        # a client that hangs up mid-stream, then a normal request
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        body = json.dumps({"model": "emu", "prompt": "x", "max_tokens": 200,
                           "stream": True, "ignore_eos": True}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: "
                  + str(len(body)).encode() + b"\r\n\r\n" + body)
        s.recv(256)
        s.close()
        st, r = srv.request("POST", "/v1/completions", req)
        check(st == 200 and r["choices"][0]["text"] == r1["choices"][0]["text"],
              "after a hang-up: the next request answers, same greedy text")
    finally:
        srv.proc.send_signal(signal.SIGTERM)
        rc = srv.proc.wait(timeout=60)
        check(rc == 0, "SIGTERM: exit 0")
        if failures:
            print(srv.logtext()[-3000:])

print(f"{failures} failures")
sys.exit(1 if failures else 0)
