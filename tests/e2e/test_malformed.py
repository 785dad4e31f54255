"""tests/e2e/test_malformed.py — generated bad requests against every POST
endpoint: wrong types, missing fields, huge/negative/NaN-like numbers, deep
nesting, huge arrays, invalid UTF-8, truncated bodies, duplicate keys, wrong
content types. Each must get a 4xx with an OpenAI error body (never a 5xx, a
reset or a hang), and a valid request must succeed after every batch.

AORTA_MALFORMED_PER_ENDPOINT sets how many per endpoint (default 2000).
Deterministic: each endpoint's generator is seeded from AORTA_MALFORMED_SEED
(default 1) and its path, never from hash() (randomized per process); body #i
does not depend on the count, and a failure names the seed that reproduces it."""
import http.client
import json
import os
import random
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from aorta_server import Server, make_model, unittest_main  # noqa: E402

PER_ENDPOINT = int(os.environ.get("AORTA_MALFORMED_PER_ENDPOINT", "2000"))
SEED = int(os.environ.get("AORTA_MALFORMED_SEED", "1"))
BATCH = 100

VALID = {
    "/v1/completions": {"prompt": "Hello", "max_tokens": 2, "temperature": 0},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
    "/tokenize": {"prompt": "Hello"},
    "/detokenize": {"tokens": [72, 101]},
}

NOT_NUM = ["NaN", "Infinity", "1e999", "", "x" * 3000, [], {}, [1], True, "\u0000"]
NOT_BOOL = ["yes", "true", 1, 0, [], {}, 1.5, "x"]
NOT_STR = [1, -2.5, True, [], {}, [1], {"a": 1}]

# For each endpoint, the fields it reads and values each of them must refuse.
FIELD_BAD = {
    "temperature": NOT_NUM + [-0.5, 3.5, 1e308, -1e308],
    "top_p": NOT_NUM + [0, -0.1, 1.5, 1e308],
    "n": NOT_NUM + [0, -1, 1000000, 2**63, 1.5],
    "max_tokens": NOT_NUM + [0, -1, -(2**63), 2**63, 2**64 + 5, 1.5, 1e308],
    "max_completion_tokens": NOT_NUM + [0, -1, 2**63, 1.5],
    "seed": ["x", [], {}, True, 1.5, 2**64 + 5, 1e308, "NaN"],
    "presence_penalty": NOT_NUM + [-2.5, 2.5, 1e308],
    "frequency_penalty": NOT_NUM + [-2.5, 2.5, -1e308],
    "repetition_penalty": NOT_NUM + [0, -1, 1e308],
    "top_k": NOT_NUM + [-2, -100, 1.5, 2**63],
    "min_p": NOT_NUM + [-0.1, 1.5],
    "min_tokens": NOT_NUM + [-1, 2**63, 1.5],
    "logprobs": None,  # per endpoint below
    "top_logprobs": NOT_NUM + [-1, 21, 1000, 1.5],
    "logit_bias": [1, "x", [], True, {"x": 1}, {"1": "x"}, {"1": 1e9}, {"1": -101},
                   {"-1": 1}, {"999999999999": 5}, {"1.5": 1}, {"": 1}, {"1": None}],
    "stop": [1, True, {}, [1], [None], [""], [[]], ["x"] * 1000, ""],
    "stream": NOT_BOOL,
    "echo": NOT_BOOL,
    "ignore_eos": NOT_BOOL,
    "stream_options": [1, "x", [], True, {"include_usage": "yes"}, {"include_usage": 1}],
    "user": NOT_STR,
    "model": NOT_STR + ["no-such-model", ""],
    "prompt": [None, 1, True, {}, [], [None], [True], [{}], [[None]], [1.5], [-1], [2**40],
               [[1, -5]], [["x"]], [[]], [1, "x"], ["a", 1]],
    "messages": [None, 1, "x", {}, [], [None], [1], [{}], [{"role": "user"}],
                 [{"content": "x"}], [{"role": "wizard", "content": "x"}],
                 [{"role": "user", "content": 5}], [{"role": "user", "content": {}}],
                 [{"role": 1, "content": "x"}],
                 [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
                 [{"role": "user", "content": [{"type": "text", "text": 7}]}],
                 [{"role": "user", "content": [{"type": "text"}]}],
                 [{"role": "user", "content": [1]}]],
    "add_special_tokens": NOT_BOOL,
    "add_generation_prompt": NOT_BOOL,
    "return_token_strs": NOT_BOOL,
    "tokens": [None, 1, "x", {}, [None], ["x"], [1.5], [-1], [2**40], [True], [[1]]],
}

FIELDS = {
    "/v1/completions": ["prompt", "max_tokens", "temperature", "top_p", "n", "stop", "seed",
                        "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "echo",
                        "stream", "stream_options", "user", "top_k", "min_p",
                        "repetition_penalty", "ignore_eos", "min_tokens", "model",
                        "add_special_tokens"],
    "/v1/chat/completions": ["messages", "max_tokens", "max_completion_tokens", "temperature",
                             "top_p", "n", "stop", "seed", "logprobs", "top_logprobs", "stream",
                             "stream_options", "logit_bias", "presence_penalty", "model",
                             "min_tokens", "top_k", "add_special_tokens"],
    "/tokenize": ["prompt", "add_special_tokens", "add_generation_prompt", "model",
                  "return_token_strs"],
    "/detokenize": ["tokens", "model"],
}

LOGPROBS_BAD = {
    "/v1/completions": NOT_NUM + [-1, 21, 1000, 1.5],
    "/v1/chat/completions": NOT_BOOL,
}


def bad_value(path, field, rng):
    if field == "logprobs":
        return rng.choice(LOGPROBS_BAD[path])
    vals = FIELD_BAD[field]
    v = rng.choice(vals)
    if path == "/tokenize" and field == "prompt" and isinstance(v, list):
        v = 1  # /tokenize takes a string prompt only
    return v


def raw_json_numbers():
    # numbers JSON allows but C parsers trip on
    return ["1e999", "-1e999", "123456789012345678901234567890", "1E+400",
            "9223372036854775808", "-9223372036854775809"]


def gen_bodies(path, rng, count):
    """Yield (body_bytes, content_type, label) tuples, all of them invalid."""
    valid = VALID[path]
    fields = FIELDS[path]
    out = []
    kinds = ["wrong_type", "missing", "raw_number", "deep", "huge_array", "utf8", "truncated",
             "dupkey", "content_type", "not_object", "garbage"]
    while len(out) < count:
        kind = rng.choice(kinds)
        body = dict(valid)
        ctype = "application/json"
        if kind == "wrong_type":
            f = rng.choice(fields)
            body[f] = bad_value(path, f, rng)
            if f == "top_logprobs":
                body["logprobs"] = True
            data = json.dumps(body).encode()
        elif kind == "missing":
            key = "messages" if "messages" in valid else ("tokens" if "tokens" in valid else "prompt")
            body.pop(key)
            if rng.random() < 0.5:
                f = rng.choice(fields)
                if f not in ("messages", "prompt", "tokens"):
                    body[f] = bad_value(path, f, rng)
            data = json.dumps(body).encode()
        elif kind == "raw_number":
            f = rng.choice([f for f in fields if f not in ("seed", "user", "model")])
            data = json.dumps(body)[:-1].encode() + b', "' + f.encode() + b'": ' + \
                rng.choice(raw_json_numbers()).encode() + b"}"
        elif kind == "deep":
            depth = rng.choice([70, 200, 1000, 5000])
            f = rng.choice(fields)
            data = json.dumps(body)[:-1].encode() + b', "' + f.encode() + b'": ' + \
                b"[" * depth + b"]" * depth + b"}"
        elif kind == "huge_array":
            f = rng.choice(fields)
            n = rng.choice([10000, 50000])
            elem = rng.choice(["\"a\"", "null", "{}", "99999999", "[1]"])
            if f in ("prompt", "tokens", "messages", "stop"):
                elem = rng.choice(["null", "{}", "-5", "1.5"])
            data = json.dumps(body)[:-1].encode() + b', "' + f.encode() + b'": [' + \
                b",".join([elem.encode()] * n) + b"]}"
        elif kind == "utf8":
            bad = rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf",
                              b"\xe2\x82"])
            text = json.dumps(body).encode()
            pos = text.find(b'"', text.find(b":")) + 1  # inside the first string value
            if pos <= 0:
                pos = 2
            data = text[:pos] + bad + text[pos:]
            if b'"' not in text[text.find(b":"):]:  # no string value: put it in a key
                data = b'{"' + bad + b'": 1, ' + text[1:]
        elif kind == "truncated":
            text = json.dumps(body).encode()
            data = text[:rng.randrange(0, len(text))]
        elif kind == "dupkey":
            key = next(iter(valid))
            text = json.dumps(body).encode()
            data = text[:-1] + b', "' + key.encode() + b'": ' + json.dumps(valid[key]).encode() + b"}"
        elif kind == "content_type":
            data = json.dumps(body).encode()
            ctype = rng.choice(["text/plain", "application/x-www-form-urlencoded",
                                "multipart/form-data; boundary=x", "application/xml"])
        elif kind == "not_object":
            data = rng.choice([b"[]", b"null", b"1", b'"s"', b"true", b"[{}]"])
        else:
            n = rng.randrange(1, 200)
            data = bytes(rng.randrange(0, 256) for _ in range(n))
            if data[:1] == b"{":
                data = b"x" + data
        out.append((data, ctype, kind))
    return out


class Malformed(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = make_model(cls.tmp.name)
        cls.srv = Server(cls.model, "--max-model-len", "256", "--max-request-bytes", "1M")

    @classmethod
    def tearDownClass(cls):
        rc = cls.srv.stop()
        cls.tmp.cleanup()
        assert rc == 0, cls.srv.logtext()

    def send(self, conn, path, data, ctype):
        conn.request("POST", path, body=data, headers={"Content-Type": ctype})
        r = conn.getresponse()
        return r.status, r.read()

    def run_endpoint(self, path):
        # a str seed goes through SHA-512: the same bodies in every process
        rng = random.Random(f"{SEED}:{path}")
        bodies = gen_bodies(path, rng, PER_ENDPOINT)
        conn = self.srv.conn(timeout=30)
        counts = {}
        for i, (data, ctype, kind) in enumerate(bodies):
            at = (f"{path} #{i} ({kind}; reproduce: AORTA_MALFORMED_SEED={SEED} "
                  f"AORTA_MALFORMED_PER_ENDPOINT={i + 1})")
            try:
                status, resp = self.send(conn, path, data, ctype)
            except (ConnectionError, http.client.HTTPException) as e:
                self.fail(f"{at}: connection failed: {e!r} body={data[:200]!r}\n"
                          + self.srv.logtext()[-2000:])
            self.assertTrue(400 <= status < 500,
                            f"{at}: status {status} for {data[:300]!r}: {resp[:300]!r}")
            err = json.loads(resp)["error"]
            for k in ("message", "type", "param", "code"):
                self.assertIn(k, err, f"{at}: {resp[:300]!r}")
            counts[kind] = counts.get(kind, 0) + 1
            if (i + 1) % BATCH == 0:
                st, _ = self.send(conn, path, json.dumps(VALID[path]).encode(), "application/json")
                self.assertEqual(st, 200, f"{path}: valid request failed after {at}")
        conn.close()
        print(f"{path}: {len(bodies)} bad requests (seed {SEED}), all 4xx with error bodies: "
              + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), file=sys.stderr)

    def test_completions(self):
        self.run_endpoint("/v1/completions")

    def test_chat(self):
        self.run_endpoint("/v1/chat/completions")

    def test_tokenize(self):
        self.run_endpoint("/tokenize")

    def test_detokenize(self):
        self.run_endpoint("/detokenize")


if __name__ == "__main__":
    unittest_main()
