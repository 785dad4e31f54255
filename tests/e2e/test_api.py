"""tests/e2e/test_api.py — aorta serve over loopback, on a generated demo model:
every endpoint, the OpenAI error bodies, streaming protocol, seeds, stop
strings, n > 1, disconnects, concurrency and graceful shutdown. After each bad
request a good one must still succeed. Run by meson (suite e2e)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from aorta_server import AORTA, Server, make_model, unittest_main  # noqa: E402

TMP = tempfile.TemporaryDirectory()
MODEL = None
SRV = None


def setUpModule():
    global MODEL, SRV
    MODEL = make_model(TMP.name)
    SRV = Server(MODEL, "--max-model-len", "512", "--max-request-bytes", "65536",
                 "--kv-cache-memory", "64M")


def tearDownModule():
    if SRV:
        rc = SRV.stop()
        assert rc == 0, f"exit {rc}\n" + SRV.logtext()


def completion(**kw):
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 8, "temperature": 0}
    body.update(kw)
    return body


def chat(**kw):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi there"}],
            "max_tokens": 8, "temperature": 0}
    body.update(kw)
    return body


def stream_text(events, chat_mode=False):
    texts = {}
    finishes = {}
    usage = None
    for ev in events:
        if ev == "[DONE]":
            continue
        assert "error" not in ev, ev
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev["choices"]:
            i = ch["index"]
            t = ch["delta"].get("content", "") if chat_mode else ch["text"]
            texts[i] = texts.get(i, "") + (t or "")
            if ch.get("finish_reason"):
                assert i not in finishes, "finish_reason sent twice"
                finishes[i] = ch["finish_reason"]
    return texts, finishes, usage


class Basics(unittest.TestCase):
    def assert_error(self, status, body, want_status, param=None):
        self.assertEqual(status, want_status, body)
        self.assertIn("error", body)
        err = body["error"]
        for k in ("message", "type", "param", "code"):
            self.assertIn(k, err)
        if param is not None:
            self.assertEqual(err["param"], param, body)
        # and the server still serves a good request
        st, good = SRV.post("/v1/completions", completion(max_tokens=2))
        self.assertEqual(st, 200, good)

    def test_health_models(self):
        self.assertEqual(SRV.get("/health")[0], 200)
        st, body = SRV.get("/v1/models")
        self.assertEqual(st, 200)
        self.assertEqual(body["object"], "list")
        self.assertEqual(body["data"][0]["id"], MODEL)

    def test_completion_shape(self):
        # "created" is the request's time, not the server's start (which
        # /v1/models shows): ask in a later second than that
        started = SRV.get("/v1/models")[1]["data"][0]["created"]
        while int(time.time()) <= started:
            time.sleep(0.05)
        t0 = int(time.time())
        st, body = SRV.post("/v1/completions", completion())
        self.assertEqual(st, 200, body)
        self.assertEqual(body["object"], "text_completion")
        self.assertRegex(body["id"], r"^cmpl-[0-9a-f]{32}$")
        self.assertGreaterEqual(body["created"], t0)
        self.assertLessEqual(body["created"], int(time.time()))
        self.assertNotEqual(SRV.post("/v1/completions", completion())[1]["id"], body["id"])
        ch = body["choices"][0]
        self.assertIn(ch["finish_reason"], ("length", "stop"))
        u = body["usage"]
        self.assertEqual(u["total_tokens"], u["prompt_tokens"] + u["completion_tokens"])
        self.assertLessEqual(u["completion_tokens"], 8)

    def test_greedy_is_deterministic(self):
        a = SRV.post("/v1/completions", completion(max_tokens=16))[1]
        b = SRV.post("/v1/completions", completion(max_tokens=16))[1]
        self.assertEqual(a["choices"][0]["text"], b["choices"][0]["text"])

    def test_seed_reproducible(self):
        body = completion(temperature=1.0, seed=1234, max_tokens=16)
        a = SRV.post("/v1/completions", body)[1]["choices"][0]["text"]
        b = SRV.post("/v1/completions", body)[1]["choices"][0]["text"]
        self.assertEqual(a, b)
        texts = {SRV.post("/v1/completions", completion(temperature=1.0, seed=s,
                                                        max_tokens=16))[1]["choices"][0]["text"]
                 for s in range(6)}
        self.assertGreater(len(texts), 1, "different seeds gave identical samples")
        # seeds past 2^53 stay distinct (read exactly, not through a double),
        # up to INT64_MAX
        big = {SRV.post("/v1/completions", completion(temperature=1.0, seed=s, max_tokens=16))
               [1]["choices"][0]["text"] for s in (2**62, 2**62 + 1, 2**62 + 2, 2**63 - 1)}
        self.assertGreater(len(big), 1, "seeds past 2^53 collapsed")

    def test_stream_equals_nonstream(self):
        for kw in ({"temperature": 0}, {"temperature": 1.0, "seed": 7}):
            body = completion(max_tokens=20, **kw)
            plain = SRV.post("/v1/completions", body)[1]
            st, events = SRV.stream("/v1/completions", dict(body, stream=True,
                                                           stream_options={"include_usage": True}))
            self.assertEqual(st, 200)
            self.assertEqual(events[-1], "[DONE]")
            texts, fin, usage = stream_text(events)
            self.assertEqual(texts[0], plain["choices"][0]["text"])
            self.assertEqual(fin[0], plain["choices"][0]["finish_reason"])
            self.assertEqual(usage, plain["usage"])
            self.assertEqual(events[-2]["choices"], [])  # the usage chunk

    def test_chat(self):
        st, body = SRV.post("/v1/chat/completions", chat())
        self.assertEqual(st, 200, body)
        self.assertEqual(body["object"], "chat.completion")
        msg = body["choices"][0]["message"]
        self.assertEqual(msg["role"], "assistant")
        st, events = SRV.stream("/v1/chat/completions", chat(stream=True))
        self.assertEqual(st, 200)
        first = events[0]["choices"][0]["delta"]
        # the first chunk is the role alone, as OpenAI and vLLM send it
        self.assertEqual(first, {"role": "assistant", "content": ""})
        self.assertTrue(all("role" not in ev["choices"][0]["delta"] for ev in events[1:]
                            if ev != "[DONE]" and ev["choices"]))
        texts, fin, _ = stream_text(events, chat_mode=True)
        self.assertEqual(texts[0], msg["content"])
        self.assertEqual(fin[0], body["choices"][0]["finish_reason"])

    def test_n_and_multiple_prompts(self):
        st, body = SRV.post("/v1/completions", completion(prompt=["a", "b"], n=2,
                                                          temperature=1.0, seed=3))
        self.assertEqual(st, 200, body)
        self.assertEqual([c["index"] for c in body["choices"]], [0, 1, 2, 3])
        st, events = SRV.stream("/v1/completions", completion(n=3, stream=True, temperature=1.0,
                                                              seed=3))
        texts, fin, _ = stream_text(events)
        self.assertEqual(sorted(fin), [0, 1, 2])

    def test_stop_string(self):
        full = SRV.post("/v1/completions", completion(max_tokens=24))[1]["choices"][0]["text"]
        # the demo model is deterministic (greedy, fixed weights): too little
        # text would leave the stop check untested, so it fails, not skips
        self.assertGreaterEqual(len(full), 4, f"demo model produced too little text: {full!r}")
        stop = full[2:4]
        st, body = SRV.post("/v1/completions", completion(max_tokens=24, stop=[stop]))
        self.assertEqual(st, 200, body)
        ch = body["choices"][0]
        self.assertEqual(ch["finish_reason"], "stop")
        self.assertEqual(ch["text"], full[:full.index(stop)])
        st, events = SRV.stream("/v1/completions", completion(max_tokens=24, stop=[stop],
                                                              stream=True))
        texts, fin, _ = stream_text(events)
        self.assertEqual(texts[0], ch["text"])
        self.assertEqual(fin[0], "stop")

    def test_logprobs(self):
        st, body = SRV.post("/v1/completions", completion(logprobs=3, max_tokens=4))
        self.assertEqual(st, 200, body)
        lp = body["choices"][0]["logprobs"]
        self.assertEqual(len(lp["tokens"]), body["usage"]["completion_tokens"])
        for i, top in enumerate(lp["top_logprobs"]):
            self.assertLessEqual(len(top), 3)
            # greedy: the chosen token is the most likely one
            self.assertAlmostEqual(max(top.values()), lp["token_logprobs"][i], places=4)
        # sampled: the chosen token is always among top_logprobs (up to
        # logprobs + 1 entries), and logprobs 0 gives it alone
        for n_lp in (0, 2):
            st, body = SRV.post("/v1/completions", completion(logprobs=n_lp, max_tokens=12,
                                                              temperature=1.5, seed=5))
            self.assertEqual(st, 200, body)
            lp = body["choices"][0]["logprobs"]
            for tok, tlp, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
                self.assertIn(tok, top)
                # keyed by text: another id of the same text may hold the
                # key first, with a larger logprob
                self.assertGreaterEqual(top[tok], tlp - 1e-4)
                self.assertLessEqual(len(top), n_lp + 1)
            # text_offset: characters, each token's text after the one before
            offs = [0]
            for tok in lp["tokens"][:-1]:
                offs.append(offs[-1] + len(tok))
            self.assertEqual(lp["text_offset"], offs)
        # streamed, the offsets run on over the chunks: the same as above
        st, events = SRV.stream("/v1/completions", completion(logprobs=2, max_tokens=12,
                                                              temperature=1.5, seed=5,
                                                              stream=True))
        self.assertEqual(st, 200)
        streamed = [o for ev in events if ev != "[DONE]" for ch in ev["choices"]
                    if ch.get("logprobs") for o in ch["logprobs"]["text_offset"]]
        self.assertEqual(streamed, lp["text_offset"])
        st, body = SRV.post("/v1/chat/completions", chat(logprobs=True, top_logprobs=2))
        self.assertEqual(st, 200, body)
        content = body["choices"][0]["logprobs"]["content"]
        self.assertEqual(len(content), body["usage"]["completion_tokens"])
        self.assertEqual(len(content[0]["top_logprobs"]), 2)
        # "bytes" are each token's own bytes: together they are the text,
        # even where a token holds part of a character (the random model's
        # text has invalid sequences too: U+FFFD in content, as in Python)
        st, body = SRV.post("/v1/chat/completions", chat(
            messages=[{"role": "user", "content": "na\u00efve"}], max_tokens=16, logprobs=True))
        self.assertEqual(st, 200, body)
        content = body["choices"][0]["logprobs"]["content"]
        got = bytes(b for t in content for b in t["bytes"])
        self.assertEqual(got.decode(errors="replace"), body["choices"][0]["message"]["content"],
                         content)

    def test_tokenize_detokenize(self):
        st, body = SRV.post("/tokenize", {"model": MODEL, "prompt": "Hello"})
        self.assertEqual(st, 200, body)
        self.assertEqual(body["count"], len(body["tokens"]))
        st, back = SRV.post("/detokenize", {"model": MODEL, "tokens": body["tokens"]})
        self.assertEqual(st, 200, back)
        self.assertTrue(back["prompt"].endswith("Hello"))
        # /tokenize counts what the generation endpoints feed the model, with
        # add_special_tokens (default true) alike on all three
        msgs = chat()["messages"]
        for add in (True, False):
            st, tk = SRV.post("/tokenize", {"messages": msgs, "add_special_tokens": add})
            self.assertEqual(st, 200, tk)
            st, ch = SRV.post("/v1/chat/completions", chat(max_tokens=1, add_special_tokens=add))
            self.assertEqual(st, 200, ch)
            self.assertEqual(ch["usage"]["prompt_tokens"], tk["count"], add)
            st, tk = SRV.post("/tokenize", {"prompt": "Hello", "add_special_tokens": add})
            st, co = SRV.post("/v1/completions", completion(max_tokens=1, add_special_tokens=add))
            self.assertEqual(st, 200, co)
            self.assertEqual(co["usage"]["prompt_tokens"], tk["count"], add)
        st, tk = SRV.post("/tokenize", {"prompt": "Hello world", "return_token_strs": True})
        self.assertEqual(st, 200, tk)
        self.assertEqual(len(tk["token_strs"]), tk["count"])
        self.assertTrue(all(isinstance(t, str) and t for t in tk["token_strs"]), tk)
        self.assertIsNone(SRV.post("/tokenize", {"prompt": "Hello"})[1]["token_strs"])
        # add_generation_prompt: the same on /tokenize and chat
        for agp in (True, False):
            st, tk = SRV.post("/tokenize", {"messages": msgs, "add_generation_prompt": agp})
            st, ch = SRV.post("/v1/chat/completions", chat(max_tokens=1, add_generation_prompt=agp))
            self.assertEqual(st, 200, ch)
            self.assertEqual(ch["usage"]["prompt_tokens"], tk["count"], agp)
        st, tk = SRV.post("/tokenize", {"messages": msgs})
        self.assertEqual(SRV.post("/v1/chat/completions", chat(max_tokens=1))[1]["usage"]
                         ["prompt_tokens"], tk["count"])

    def test_bad_requests(self):
        self.assert_error(*SRV.post("/v1/completions", b"{not json"), 400)
        self.assert_error(*SRV.post("/v1/completions", b""), 400)
        self.assert_error(*SRV.post("/v1/completions", completion(temperature="hot")), 400,
                          "temperature")
        self.assert_error(*SRV.post("/v1/completions", completion(max_tokens=-1)), 400,
                          "max_tokens")
        self.assert_error(*SRV.post("/v1/completions", completion(n=0)), 400, "n")
        self.assert_error(*SRV.post("/v1/completions", {"model": MODEL}), 400, "prompt")
        self.assert_error(*SRV.post("/v1/chat/completions", chat(messages=[])), 400)
        self.assert_error(*SRV.post("/v1/chat/completions",
                                    chat(messages=[{"role": "wizard", "content": "x"}])), 400)
        self.assert_error(*SRV.post("/v1/completions", completion(prompt=[[1, 2, 99999999]])), 400)
        self.assert_error(*SRV.post("/v1/completions", completion(logit_bias={"x": 1})), 400)
        self.assert_error(*SRV.post("/v1/completions", completion(model="no-such-model")), 404)
        self.assert_error(*SRV.post("/v1/completions", b'{"prompt": "\xff\xfe"}'), 400)
        self.assert_error(*SRV.post("/v1/completions", "[" * 100000 + "]" * 100000), 413)
        self.assert_error(*SRV.post("/v1/completions", "[" * 5000 + "]" * 5000), 400)

    def test_unimplemented_fields_are_refused_not_ignored(self):
        for body, param in ((completion(best_of=3), "best_of"),
                            (completion(best_of=1, n=2, temperature=1.0), "best_of"),
                            (completion(use_beam_search=True), "use_beam_search"),
                            (completion(include_stop_str_in_output=True, stop=["x"]),
                             "include_stop_str_in_output"),
                            (completion(guided_json={"type": "object"}), "guided_json"),
                            (chat(guided_choice=["a", "b"]), "guided_choice"),
                            (chat(tool_choice="required"), "tool_choice"),
                            (chat(continue_final_message=True), "continue_final_message")):
            path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
            self.assert_error(*SRV.post(path, body), 400, param)
        # the engine's limits are the API's: a 400 that names the field
        self.assert_error(*SRV.post("/v1/completions", completion(stop=["x" * 300])), 400,
                          "stop[0]")
        self.assertEqual(SRV.post("/v1/completions", completion(repetition_penalty=2.5))[0], 200)
        # values that ask for nothing we lack are fine
        for path, body in (("/v1/completions", completion(best_of=2, n=2, temperature=1.0)),
                           ("/v1/completions", completion(use_beam_search=False,
                                                          guided_json=None)),
                           ("/v1/chat/completions", chat(tool_choice="none")),
                           ("/v1/chat/completions", chat(tool_choice="auto", tools=[]))):
            st, got = SRV.post(path, body)
            self.assertEqual(st, 200, got)

    def test_context_overflow(self):
        st, body = SRV.post("/v1/completions", completion(max_tokens=100000))
        self.assert_error(st, body, 400, "max_tokens")
        self.assertIn("512", body["error"]["message"])
        st, body = SRV.post("/v1/completions", completion(prompt="word " * 600, max_tokens=1))
        self.assertEqual(st, 400, body)

    def test_routes(self):
        self.assert_error(*SRV.get("/no/such/route"), 404)
        st, body, resp = SRV.request("GET", "/v1/completions", raw=True)
        self.assertEqual(st, 405)
        self.assertEqual(resp.getheader("Allow"), "POST")

    def test_disconnect_mid_stream_frees_the_request(self):
        base = SRV.metric("aorta:kv_cache_usage_perc")
        s = socket.create_connection(("127.0.0.1", SRV.port))
        body = json.dumps(completion(max_tokens=400, stream=True, ignore_eos=True)).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = s.recv(4096)
        self.assertIn(b"200", got.split(b"\r\n")[0])
        s.close()
        deadline = time.time() + 1.0
        while time.time() < deadline:
            if SRV.metric("aorta:num_requests_running") == 0 and \
                    SRV.metric("aorta:kv_cache_usage_perc") <= base:
                break
            time.sleep(0.05)
        self.assertEqual(SRV.metric("aorta:num_requests_running"), 0)
        self.assertLessEqual(SRV.metric("aorta:kv_cache_usage_perc"), base)

    def test_disconnect_while_waiting_cancels_a_non_streaming_request(self):
        # the connection is parked (no bytes go out until the whole answer),
        # so only the socket check can see the client go
        gen0 = SRV.metric("aorta:generation_tokens_total")
        abort0 = SRV.metric("aorta:request_success_total", 'finished_reason="abort"')
        s = socket.create_connection(("127.0.0.1", SRV.port))
        body = json.dumps(completion(max_tokens=480, ignore_eos=True, n=16, temperature=1.0,
                                     seed=3)).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        for _ in range(500):  # until the engine is generating it
            if SRV.metric("aorta:num_requests_running") > 0:
                break
            time.sleep(0.01)
        self.assertGreater(SRV.metric("aorta:num_requests_running"), 0)
        s.close()
        deadline = time.time() + 2.0
        while time.time() < deadline and SRV.metric("aorta:num_requests_running") > 0:
            time.sleep(0.02)
        self.assertEqual(SRV.metric("aorta:num_requests_running"), 0)
        # cancelled, not run to the end: fewer than the 16 x 480 tokens asked for
        made = SRV.metric("aorta:generation_tokens_total") - gen0
        print(f"disconnected non-streaming request: {made:.0f} of {16 * 480} tokens made")
        self.assertLess(made, 16 * 480)
        for _ in range(100):  # the choices report back as aborted
            if SRV.metric("aorta:request_success_total", 'finished_reason="abort"') > abort0:
                break
            time.sleep(0.02)
        self.assertGreater(SRV.metric("aorta:request_success_total", 'finished_reason="abort"'),
                           abort0)
        st, good = SRV.post("/v1/completions", completion(max_tokens=2))
        self.assertEqual(st, 200, good)

    def test_concurrent_streams_match_solo(self):
        prompts = [f"client {i} says" for i in range(64)]
        solo = [SRV.post("/v1/completions", completion(prompt=p, max_tokens=12))[1]
                ["choices"][0]["text"] for p in prompts[:8]]
        results = [None] * len(prompts)

        def run(i):
            st, events = SRV.stream("/v1/completions", completion(prompt=prompts[i], max_tokens=12,
                                                                  stream=True))
            results[i] = stream_text(events)[0][0] if st == 200 else None

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertTrue(all(r is not None for r in results), results)
        self.assertEqual(results[:8], solo)

    def test_metrics(self):
        SRV.post("/v1/completions", completion(max_tokens=2))
        st, text, resp = SRV.request("GET", "/metrics", raw=True)
        self.assertEqual(st, 200)
        text = text.decode()
        for name in ("aorta:num_requests_running", "aorta:num_requests_waiting",
                     "aorta:kv_cache_usage_perc", "aorta:prompt_tokens_total",
                     "aorta:generation_tokens_total", "aorta:num_preemptions_total",
                     "aorta:prefix_cache_queries_total", "aorta:prefix_cache_hits_total",
                     "aorta:time_to_first_token_seconds_bucket",
                     "aorta:inter_token_latency_seconds_count",
                     "aorta:e2e_request_latency_seconds_sum",
                     "aorta:request_queue_time_seconds_bucket"):
            self.assertIn(name, text)
        self.assertGreater(SRV.metric("aorta:generation_tokens_total"), 0)
        # request_success_total{finished_reason}: one per finished choice
        fin = "aorta:request_success_total"
        before = [SRV.metric(fin, f'finished_reason="{r}"') for r in ("stop", "length", "abort")]
        st, body = SRV.post("/v1/completions", completion(max_tokens=2, ignore_eos=True, n=2,
                                                          temperature=1.0))
        self.assertEqual(st, 200, body)
        after = [SRV.metric(fin, f'finished_reason="{r}"') for r in ("stop", "length", "abort")]
        self.assertEqual([a - b for a, b in zip(after, before)], [0, 2, 0])
        # TTFT, end-to-end and queue time each count a prompt, as vLLM counts
        # an engine request: a request of 2 prompts adds 2 to each
        names = ("aorta:time_to_first_token_seconds_count",
                 "aorta:e2e_request_latency_seconds_count",
                 "aorta:request_queue_time_seconds_count")
        before = [SRV.metric(n) for n in names]
        st, body = SRV.post("/v1/completions", completion(prompt=["one", "two"], max_tokens=2))
        self.assertEqual(st, 200, body)
        self.assertEqual([SRV.metric(n) - b for n, b in zip(names, before)], [2, 2, 2])


class Auth(unittest.TestCase):
    def test_api_key(self):
        srv = Server(MODEL, "--api-key", "sekrit", "--max-model-len", "256")
        try:
            self.assertEqual(srv.get("/health")[0], 200)  # health needs no key
            st, body = srv.post("/v1/completions", completion(max_tokens=2))
            self.assertEqual(st, 401, body)
            self.assertEqual(body["error"]["type"], "authentication_error")
            st, body = srv.post("/v1/completions", completion(max_tokens=2),
                                headers={"Authorization": "Bearer wrong"})
            self.assertEqual(st, 401)
            st, body = srv.post("/v1/completions", completion(max_tokens=2),
                                headers={"Authorization": "Bearer sekrit"})
            self.assertEqual(st, 200, body)
            self.assertEqual(srv.get("/metrics")[0], 401)
        finally:
            self.assertEqual(srv.stop(), 0)


class Cors(unittest.TestCase):
    def test_cors_off_by_default(self):
        st, _, resp = SRV.request("GET", "/v1/models", headers={"Origin": "http://a.example"},
                                  raw=True)
        self.assertEqual(st, 200)
        self.assertIsNone(resp.getheader("Access-Control-Allow-Origin"))

    def test_allowed_origins(self):
        srv = Server(MODEL, "--max-model-len", "256", "--allowed-origins",
                     "http://a.example, http://b.example")
        try:
            st, _, resp = srv.request("GET", "/v1/models", headers={"Origin": "http://b.example"},
                                      raw=True)
            self.assertEqual(resp.getheader("Access-Control-Allow-Origin"), "http://b.example")
            st, _, resp = srv.request("GET", "/v1/models", headers={"Origin": "http://c.example"},
                                      raw=True)
            self.assertIsNone(resp.getheader("Access-Control-Allow-Origin"))
            st, _, resp = srv.request("OPTIONS", "/v1/completions",
                                      headers={"Origin": "http://a.example",
                                               "Access-Control-Request-Method": "POST"}, raw=True)
            self.assertEqual(st, 204)
            self.assertIn("POST", resp.getheader("Access-Control-Allow-Methods"))
            # errors carry the header too, 405 included
            for method, path, want in (("GET", "/v1/completions", 405), ("GET", "/nope", 404),
                                       ("POST", "/v1/completions", 400)):
                st, _, resp = srv.request(method, path, body=b"{" if method == "POST" else None,
                                          headers={"Origin": "http://a.example"}, raw=True)
                self.assertEqual(st, want)
                self.assertEqual(resp.getheader("Access-Control-Allow-Origin"),
                                 "http://a.example", (method, path))
        finally:
            self.assertEqual(srv.stop(), 0)


class HostileClients(unittest.TestCase):
    def test_slowloris_times_out_and_others_are_served(self):
        srv = Server(MODEL, "--max-model-len", "256", "--connection-timeout", "2")
        try:
            slow = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(20)]
            for s_ in slow:
                s_.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            self.assertEqual(srv.post("/v1/completions", completion(max_tokens=2))[0], 200)
            time.sleep(3.5)
            for s_ in slow:  # the server hung up on every one of them
                s_.settimeout(2)
                try:
                    self.assertEqual(s_.recv(100), b"")
                except ConnectionResetError:
                    pass
                s_.close()
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_connections_per_ip_limit(self):
        srv = Server(MODEL, "--max-model-len", "256", "--max-connections-per-ip", "2")
        try:
            def hold():
                # a connection the server keeps open (its headers never end);
                # retried while connections closed earlier are still counted
                for _ in range(50):
                    c = socket.create_connection(("127.0.0.1", srv.port))
                    c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
                    c.settimeout(0.2)
                    try:
                        c.recv(1)
                    except socket.timeout:
                        return c
                    except ConnectionResetError:
                        pass
                    c.close()
                self.fail("could not hold a connection open")

            held = [hold(), hold()]
            refused = False
            for _ in range(20):  # the held ones may take a moment to be accepted
                time.sleep(0.2)
                extra = socket.create_connection(("127.0.0.1", srv.port))
                extra.settimeout(5)
                try:
                    extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                    refused = extra.recv(100) == b""  # closed without an answer
                except (ConnectionResetError, BrokenPipeError):
                    refused = True
                extra.close()
                if refused:
                    break
            self.assertTrue(refused, "a third connection from the same address was served")
            for s_ in held:
                s_.close()
            time.sleep(0.2)
            self.assertEqual(srv.get("/health")[0], 200)  # a slot is free again
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_client_that_stops_reading_does_not_block_others(self):
        s_ = socket.create_connection(("127.0.0.1", SRV.port))
        s_.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        body = json.dumps(completion(max_tokens=300, ignore_eos=True, stream=True,
                                     logprobs=5)).encode()
        s_.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        t0 = time.time()
        for _ in range(5):  # never read s_; others are served meanwhile
            st, _ = SRV.post("/v1/completions", completion(max_tokens=4))
            self.assertEqual(st, 200)
        self.assertLess(time.time() - t0, 30)
        s_.close()


class Overload(unittest.TestCase):
    def test_queue_full_gets_429_with_retry_after(self):
        srv = Server(MODEL, "--max-model-len", "512", "--max-num-seqs", "1",
                     "--max-queued-requests", "2")
        statuses = []
        retry = []
        lock = threading.Lock()

        def run():
            st, body, resp = srv.request("POST", "/v1/completions",
                                         completion(max_tokens=64, ignore_eos=True), raw=True)
            with lock:
                statuses.append(st)
                if st == 429:
                    retry.append(resp.getheader("Retry-After"))
                    self.assertIn("message", json.loads(body)["error"])

        try:
            threads = [threading.Thread(target=run) for _ in range(12)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            self.assertIn(429, statuses, statuses)
            self.assertIn(200, statuses, statuses)
            self.assertTrue(set(statuses) <= {200, 429}, statuses)
            self.assertTrue(all(r and int(r) >= 1 for r in retry), retry)
            # the queue drains and the server serves again
            self.assertEqual(srv.post("/v1/completions", completion(max_tokens=2))[0], 200)
        finally:
            self.assertEqual(srv.stop(), 0)


class AccessLog(unittest.TestCase):
    def test_json_log_lines(self):
        srv = Server(MODEL, "--max-model-len", "256", "--log-format", "json")
        try:
            self.assertEqual(srv.post("/v1/completions", completion(max_tokens=2))[0], 200)
        finally:
            self.assertEqual(srv.stop(), 0)
        lines = [json.loads(l) for l in srv.logtext().splitlines() if l.strip()]
        access = [l for l in lines if l["module"] == "access" and "/v1/completions" in l["msg"]]
        self.assertEqual(len(access), 1, lines)
        for field in ("status=200", "prompt_tokens=", "completion_tokens=2", "ttft_ms=",
                      "time_ms="):
            self.assertIn(field, access[0]["msg"])


class Shutdown(unittest.TestCase):
    def test_sigterm_during_stream(self):
        srv = Server(MODEL, "--max-model-len", "512", "--shutdown-timeout", "20")
        result = {}

        def run():
            # 8 choices x 480 tokens: long enough to still be running after the signal
            result["r"] = srv.stream("/v1/completions",
                                     completion(max_tokens=480, ignore_eos=True, stream=True,
                                                n=8, temperature=1.0, seed=1))

        t = threading.Thread(target=run)
        t.start()
        for _ in range(200):  # wait until the engine is generating it
            if srv.metric("aorta:num_requests_running") > 0:
                break
            time.sleep(0.01)
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.05)
        st, body = srv.post("/v1/completions", completion(max_tokens=2))
        self.assertEqual(st, 503, body)
        self.assertEqual(srv.get("/health")[0], 503)
        t.join(120)
        st, events = result["r"]
        self.assertEqual(st, 200)
        texts, fin, _ = stream_text(events)
        self.assertEqual(sorted(fin), list(range(8)))
        self.assertTrue(all(f == "length" for f in fin.values()), fin)
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual(srv.proc.wait(30), 0)
        self.assertEqual(srv.stop(), 0)

    def test_drain_timeout_cancels_and_exits_cleanly(self):
        # the drain ends with requests still running and queued: they are
        # cancelled while the engine thread is busy with them; the process
        # must still exit 0 (it aborted in libuv: a wake of a closed handle)
        for timeout in ("1", "0"):
            srv = Server(MODEL, "--max-model-len", "2048", "--max-num-seqs", "1",
                         "--shutdown-timeout", timeout)
            body = json.dumps(completion(max_tokens=2000, ignore_eos=True)).encode()
            socks = []
            for _ in range(6):
                c = socket.create_connection(("127.0.0.1", srv.port))
                c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Type: application/json\r\nContent-Length: " +
                          str(len(body)).encode() + b"\r\n\r\n" + body)
                socks.append(c)
            for _ in range(300):
                if srv.metric("aorta:num_requests_running") > 0:
                    break
                time.sleep(0.01)
            srv.proc.send_signal(signal.SIGTERM)
            rc = srv.proc.wait(60)
            for c in socks:
                c.close()
            log = srv.logtext()
            self.assertEqual(rc, 0, log[-2000:])
            self.assertIn("cancelling", log, log[-2000:])
            self.assertEqual(srv.stop(), 0)

    def test_bad_model_exits_nonzero(self):
        bad = os.path.join(TMP.name, "bad.gguf")
        with open(bad, "wb") as f:
            f.write(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64)
        with self.assertRaises(RuntimeError):
            Server(bad)

    def test_chat_template_it_cannot_render_refuses_to_start(self):
        # no Jinja interpreter: a template of no known family, an empty file
        # or a directory must stop start-up, not fall back to another format
        jinja = os.path.join(TMP.name, "custom.jinja")
        with open(jinja, "w") as f:
            f.write("{% for m in messages %}[{{ m['role'] | upper }}]: {{ m['content'] | trim }}"
                    "\n{% endfor %}")
        empty = os.path.join(TMP.name, "empty.jinja")
        open(empty, "w").close()
        for path, why in ((jinja, "not a template of a family"), (empty, "empty"),
                          (TMP.name, "not a regular file")):
            p = subprocess.run([AORTA, "serve", "--model", MODEL, "--port", "0",
                                "--chat-template", path],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("--chat-template", p.stderr)
            self.assertIn(why, p.stderr)
        # a ChatML template of its own is served as ChatML
        chatml = os.path.join(TMP.name, "chatml.jinja")
        with open(chatml, "w") as f:
            f.write("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>"
                    "assistant\n{% endif %}")
        srv = Server(MODEL, "--chat-template", chatml)
        try:
            self.assertEqual(srv.post("/v1/chat/completions", chat(max_tokens=2))[0], 200)
            self.assertIn("chat template: chatml", srv.logtext())
        finally:
            self.assertEqual(srv.stop(), 0)

    def test_device_cuda_without_a_gpu_refuses_clearly(self):
        # where a GPU is visible this is the CUDA engine's job (tests/gpu/run.sh)
        if shutil.which("nvidia-smi") and subprocess.run(
                ["nvidia-smi", "-L"], capture_output=True).returncode == 0:
            self.skipTest("a GPU is visible")
        p = subprocess.run([AORTA, "serve", "--model", MODEL, "--device", "cuda", "--port", "0"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--device cuda", p.stderr)
        self.assertTrue("no CUDA device" in p.stderr or "no CUDA backend" in p.stderr, p.stderr)


if __name__ == "__main__":
    unittest_main()
