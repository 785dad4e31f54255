#!/usr/bin/python3
"""tests/models/ref_forward.py — a plain numpy forward pass over an HF model
directory written by `aorta make-model` (llama / mistral / qwen2 / qwen3;
F32/F16/BF16 safetensors, single file or sharded). A test oracle only, never
used by the server.

    ref_forward.py DIR [--tokens 264,72,101] [--greedy N] [--check-peaked]

Prints the top-5 logits of the last position and, with --greedy N, the
greedy continuation. --check-peaked exits 1 unless the generator's promise
holds on a few prompts: logits are peaked (top-1 probability well above
uniform) but not degenerate (not all prompts continue with one token, and a
greedy run is not a single repeated token).
"""
import json
import os
import struct
import sys

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy not available")
    sys.exit(77)


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    base = 8 + hlen
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        buf = raw[base + b:base + end]
        dt = e["dtype"]
        if dt == "F32":
            a = np.frombuffer(buf, dtype="<f4")
        elif dt == "F16":
            a = np.frombuffer(buf, dtype="<f2").astype(np.float32)
        elif dt == "BF16":
            a = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"{name}: dtype {dt} not handled by the reference")
        out[name] = a.reshape(e["shape"]).astype(np.float32)
    return out


def load_dir(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    idx = os.path.join(d, "model.safetensors.index.json")
    w = {}
    if os.path.exists(idx):
        for f in sorted(set(json.load(open(idx))["weight_map"].values())):
            w.update(load_safetensors(os.path.join(d, f)))
    else:
        w.update(load_safetensors(os.path.join(d, "model.safetensors")))
    return cfg, w


def rmsnorm(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def rope_neox(x, pos, theta):
    # x: (T, H, D); HF rotate_half pairing (i, i + D/2)
    D = x.shape[-1]
    inv = 1.0 / (theta ** (np.arange(0, D, 2, dtype=np.float64) / D))
    ang = np.outer(pos, inv)  # (T, D/2)
    cos = np.cos(ang)[:, None, :].astype(np.float32)
    sin = np.sin(ang)[:, None, :].astype(np.float32)
    x1, x2 = x[..., :D // 2], x[..., D // 2:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def forward(cfg, w, tokens):
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or cfg["hidden_size"] // H
    eps, theta = cfg["rms_norm_eps"], cfg.get("rope_theta", 10000.0)
    if cfg.get("rope_scaling"):
        raise SystemExit("rope scaling not handled by the reference")
    T = len(tokens)
    pos = np.arange(T)
    x = w["model.embed_tokens.weight"][tokens]
    mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
    for il in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{il}."
        h = rmsnorm(x, w[p + "input_layernorm.weight"], eps)
        q = h @ w[p + "self_attn.q_proj.weight"].T
        k = h @ w[p + "self_attn.k_proj.weight"].T
        v = h @ w[p + "self_attn.v_proj.weight"].T
        if p + "self_attn.q_proj.bias" in w:
            q += w[p + "self_attn.q_proj.bias"]
            k += w[p + "self_attn.k_proj.bias"]
            v += w[p + "self_attn.v_proj.bias"]
        q, k, v = q.reshape(T, H, D), k.reshape(T, KV, D), v.reshape(T, KV, D)
        if p + "self_attn.q_norm.weight" in w:
            q = rmsnorm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = rope_neox(q, pos, theta), rope_neox(k, pos, theta)
        rep = H // KV
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        att = np.einsum("thd,shd->hts", q, k) / np.sqrt(D) + mask
        att = np.exp(att - att.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", att, v).reshape(T, H * D)
        x = x + o @ w[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = h @ w[p + "mlp.gate_proj.weight"].T
        u = h @ w[p + "mlp.up_proj.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * u) @ w[p + "mlp.down_proj.weight"].T
    x = rmsnorm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T


def greedy(cfg, w, tokens, n):
    out = list(tokens)
    for _ in range(n):
        out.append(int(np.argmax(forward(cfg, w, out)[-1])))
    return out[len(tokens):]


def main():
    args = sys.argv[1:]
    if not args:
        raise SystemExit(__doc__)
    d = args[0]
    cfg, w = load_dir(d)
    tokens = [264, 72, 101, 108, 108, 111]
    n_greedy = 0
    if "--tokens" in args:
        tokens = [int(t) for t in args[args.index("--tokens") + 1].split(",")]
    if "--greedy" in args:
        n_greedy = int(args[args.index("--greedy") + 1])
    logits = forward(cfg, w, tokens)[-1]
    top = np.argsort(-logits)[:5]
    print("top5:", ", ".join(f"{t}:{logits[t]:.3f}" for t in top))
    if n_greedy:
        print("greedy:", greedy(cfg, w, tokens, n_greedy))
    if "--check-peaked" in args:
        V = logits.shape[0]
        prompts = [[264] + list(s.encode()) for s in ["Hello", "The cat", "1234", "xyz!", "aorta"]]
        firsts, p1s = set(), []
        for pr in prompts:
            lg = forward(cfg, w, pr)[-1].astype(np.float64)
            pr_ = np.exp(lg - lg.max())
            pr_ /= pr_.sum()
            p1s.append(pr_.max())
            firsts.add(int(np.argmax(lg)))
        run = greedy(cfg, w, prompts[0], 12)
        print(f"top-1 probs {[round(float(p), 3) for p in p1s]} (uniform {1 / V:.4f}); "
              f"first tokens {sorted(firsts)}; greedy run {run}")
        ok = min(p1s) > 20.0 / V and len(firsts) >= 2 and len(set(run)) >= 2
        print("peaked and non-degenerate:", "yes" if ok else "NO")
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
