#!/usr/bin/python3
"""tests/reference/ref_forward.py — an independent numpy forward pass of a
Llama-family model (Hugging Face style: rotate_half RoPE, llama3 / linear
rope scaling, GQA by repeating K/V heads, Qwen2 QKV bias, Qwen3 per-head
Q/K RMSNorm, tied embeddings), in float64, over the weights that
dump_ref.c writes; compares the engine's logits for every position.

Usage: ref_forward.py DUMP_REF_EXE VARIANT [VARIANT...]
Passes when max |engine - ref| <= 1e-4 * max |ref| for every variant.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np


def rope_inv_freq(cfg):
    d = cfg["head_dim"]
    inv = 1.0 / (cfg["rope_theta"] ** (np.arange(0, d, 2, dtype=np.float64) / d))
    rs = cfg["rope_scaling"]
    if rs["type"] == "linear":
        inv = inv / rs["factor"]
    elif rs["type"] == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_pos"]
        lo_wl, hi_wl = old / lo, old / hi
        wl = 2 * math.pi / inv
        scaled = np.where(wl > lo_wl, inv / factor, inv)
        smooth = (old / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wl < hi_wl) & ~(wl > lo_wl)
        inv = np.where(medium, smoothed, scaled)
    return inv


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def forward(d, cfg, tokens):
    def w(name):
        return np.load(os.path.join(d, name + ".npy")).astype(np.float64)

    T, H = len(tokens), cfg["hidden"]
    nh, nkv, hd = cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]
    eps = cfg["rms_eps"]
    emb = w("token_embd.weight")
    x = emb[tokens]
    inv = rope_inv_freq(cfg).astype(np.float32).astype(np.float64)
    ang = np.outer(np.arange(T, dtype=np.float64), inv)
    emb_ang = np.concatenate([ang, ang], axis=-1)  # (T, hd)
    cos, sin = np.cos(emb_ang)[:, None, :], np.sin(emb_ang)[:, None, :]
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    for l in range(cfg["n_layers"]):
        p = "blk.%d." % l
        h = rms_norm(x, w(p + "attn_norm.weight"), eps)
        q = h @ w(p + "attn_q.weight").T
        k = h @ w(p + "attn_k.weight").T
        v = h @ w(p + "attn_v.weight").T
        if cfg["qkv_bias"]:
            q += w(p + "attn_q.bias")
            k += w(p + "attn_k.bias")
            v += w(p + "attn_v.bias")
        q = q.reshape(T, nh, hd)
        k = k.reshape(T, nkv, hd)
        v = v.reshape(T, nkv, hd)
        if cfg["qk_norm"]:
            q = rms_norm(q, w(p + "attn_q_norm.weight"), eps)
            k = rms_norm(k, w(p + "attn_k_norm.weight"), eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = nh // nkv
        k = np.repeat(k, rep, axis=1)
        v = np.repeat(v, rep, axis=1)
        att = np.einsum("thd,shd->hts", q, k) / math.sqrt(hd) + mask
        att = np.exp(att - att.max(axis=-1, keepdims=True))
        att /= att.sum(axis=-1, keepdims=True)
        o = np.einsum("hts,shd->thd", att, v).reshape(T, nh * hd)
        x = x + o @ w(p + "attn_output.weight").T
        h = rms_norm(x, w(p + "ffn_norm.weight"), eps)
        g = h @ w(p + "ffn_gate.weight").T
        u = h @ w(p + "ffn_up.weight").T
        x = x + (g / (1 + np.exp(-g)) * u) @ w(p + "ffn_down.weight").T
    x = rms_norm(x, w("output_norm.weight"), eps)
    head = emb if cfg["tied"] else w("output.weight")
    return x @ head.T


def check(exe, variant):
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([exe, variant, d], check=True)
        cfg = json.load(open(os.path.join(d, "config.json")))
        tokens = np.load(os.path.join(d, "tokens.npy"))
        got = np.load(os.path.join(d, "engine_logits.npy")).astype(np.float64)
        ref = forward(d, cfg, tokens)
    err = np.abs(got - ref).max()
    scale = np.abs(ref).max()
    agree = (got.argmax(-1) == ref.argmax(-1)).mean()
    ok = err <= 1e-4 * scale
    print("%-12s max|err| %.3e  max|logit| %.3e  ratio %.2e  top1 %.3f  %s"
          % (variant, err, scale, err / scale, agree, "ok" if ok else "FAIL"))
    return ok


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    results = [check(sys.argv[1], v) for v in sys.argv[2:]]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
