#!/usr/bin/python3
"""tests/reference/ref_loaded.py — files aorta did not write, loaded the way
the server loads them, against the numpy forward pass.

For each case: random weights (numpy, Hugging Face layout) are written by
indep_files.py (from the GGUF / safetensors specs, not aorta's writer) as a
GGUF file or an HF directory; dump_loaded (C, model_load + the CPU engine)
writes back every tensor it read, dequantized to F32, and the engine's
logits. Checked:
  1. every tensor aorta read equals, bit for bit, the values the file holds
     (names, shapes and data; for GGUF llama the Q/K rows in llama.cpp's
     permuted order), and no tensor is missing or extra;
  2. the engine's logits on the loaded model equal ref_forward.py's float64
     forward pass over the weights Python kept (the file's values): within
     1e-4 * max|logit| for float weights (F32 accumulation only), and for
     Q8_0 within 4e-2 * max|logit| (the engine quantizes activations to int8
     per 32-block: ~1/254 relative per input, ~1% of a logit over the model's
     matmuls) with top-1 agreement >= 90%.

Usage: ref_loaded.py DUMP_LOADED_EXE
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy not available")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import indep_files as fw  # noqa: E402
from ref_forward import forward  # noqa: E402

CASES = [
    # name, format, arch, dtype, shape overrides
    ("gguf-llama-f32", "gguf", "llama", "f32", {}),
    ("gguf-qwen2-f16", "gguf", "qwen2", "f16", {"tied": True, "qkv_bias": True}),
    ("gguf-qwen3-q8_0", "gguf", "qwen3", "q8_0", {"qk_norm": True, "head_dim": 32}),
    ("st-llama-bf16", "hf", "llama", "bf16", {}),
    ("st-qwen3-f16", "hf", "qwen3", "f16", {"qk_norm": True, "head_dim": 32, "tied": True}),
]
TOKENS = [int(t) for t in np.random.default_rng(5).integers(0, 96, 24)]


def config(overrides):
    c = {"n_layers": 2, "hidden": 64, "n_heads": 4, "n_kv_heads": 2, "head_dim": 16,
         "ffn": 96, "vocab": 96, "rope_theta": 10000.0, "rms_eps": 1e-5, "tied": False,
         "qkv_bias": False, "qk_norm": False, "rope_scaling": {"type": "none"}}
    c.update(overrides)
    return c


def weights(c, seed):
    """HF-layout float32 weights under the GGUF names ref_forward.py reads."""
    rng = np.random.default_rng(seed)
    H, hd, nh, nkv = c["hidden"], c["head_dim"], c["n_heads"], c["n_kv_heads"]

    def mat(r, k, scale=None):
        return (rng.standard_normal((r, k)) * (scale or 1 / np.sqrt(k))).astype(np.float32)

    def norm(n):
        return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"token_embd.weight": mat(c["vocab"], H, 4 / np.sqrt(H)), "output_norm.weight": norm(H)}
    if not c["tied"]:
        w["output.weight"] = mat(c["vocab"], H, 4 / np.sqrt(H))
    for l in range(c["n_layers"]):
        p = "blk.%d." % l
        w[p + "attn_norm.weight"] = norm(H)
        w[p + "attn_q.weight"] = mat(nh * hd, H)
        w[p + "attn_k.weight"] = mat(nkv * hd, H)
        w[p + "attn_v.weight"] = mat(nkv * hd, H)
        if c["qkv_bias"]:
            for x, n in (("q", nh), ("k", nkv), ("v", nkv)):
                w[p + "attn_%s.bias" % x] = (0.1 * rng.standard_normal(n * hd)).astype(np.float32)
        if c["qk_norm"]:
            w[p + "attn_q_norm.weight"] = norm(hd)
            w[p + "attn_k_norm.weight"] = norm(hd)
        w[p + "attn_output.weight"] = mat(H, nh * hd)
        w[p + "ffn_norm.weight"] = norm(H)
        w[p + "ffn_gate.weight"] = mat(c["ffn"], H)
        w[p + "ffn_up.weight"] = mat(c["ffn"], H)
        w[p + "ffn_down.weight"] = mat(H, c["ffn"])
    return w


def permute_rows(a, n_heads):
    """HF rotate_half rows (pairs i, i+d/2 per head) -> GGUF llama's
    interleaved pairs (2i, 2i+1): the layout llama.cpp's llama arch reads."""
    r = a.shape[0]
    return a.reshape(n_heads, 2, r // n_heads // 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)


def write_gguf(path, arch, dtype, c, w):
    """Returns {file tensor name: values in the file, as float32} and the
    HF-layout reference weights (the same values, unpermuted)."""
    kv = [("general.architecture", fw.STRING, arch), ("general.name", fw.STRING, "indep"),
          (arch + ".block_count", fw.U32, c["n_layers"]),
          (arch + ".context_length", fw.U32, 256),
          (arch + ".embedding_length", fw.U32, c["hidden"]),
          (arch + ".feed_forward_length", fw.U32, c["ffn"]),
          (arch + ".attention.head_count", fw.U32, c["n_heads"]),
          (arch + ".attention.head_count_kv", fw.U32, c["n_kv_heads"]),
          (arch + ".attention.key_length", fw.U32, c["head_dim"]),
          (arch + ".attention.value_length", fw.U32, c["head_dim"]),
          (arch + ".rope.freq_base", fw.F32, c["rope_theta"]),
          (arch + ".attention.layer_norm_rms_epsilon", fw.F32, c["rms_eps"])]
    tensors, held, ref = [], {}, {}
    for name, a in w.items():
        perm = None
        if arch == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            perm = c["n_heads"] if "attn_q" in name else c["n_kv_heads"]
            a = permute_rows(a, perm)
        # vectors stay F32 (as llama.cpp's converter writes them)
        gt, data, back = fw.encode(a, dtype if a.ndim == 2 else "f32")
        tensors.append((name, a.shape, gt, data))
        held[name] = back
        if perm:  # undo the permutation for the HF-layout reference
            h, d2 = perm, back.shape[0] // perm // 2
            back = back.reshape(h, d2, 2, -1).swapaxes(1, 2).reshape(back.shape)
        ref[name] = back
    fw.write_gguf(path, kv, tensors, alignment=64)
    return held, ref


HF_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
            "output.weight": "lm_head.weight"}
HF_LAYER = {"attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
            "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
            "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
            "attn_v.bias": "self_attn.v_proj.bias", "attn_q_norm.weight": "self_attn.q_norm.weight",
            "attn_k_norm.weight": "self_attn.k_norm.weight", "attn_output.weight": "self_attn.o_proj.weight",
            "ffn_norm.weight": "post_attention_layernorm.weight", "ffn_gate.weight": "mlp.gate_proj.weight",
            "ffn_up.weight": "mlp.up_proj.weight", "ffn_down.weight": "mlp.down_proj.weight"}


def hf_name(n):
    if n in HF_NAMES:
        return HF_NAMES[n]
    _, l, rest = n.split(".", 2)
    return "model.layers.%s.%s" % (l, HF_LAYER[rest])


def write_hf(d, arch, dtype, c, w):
    os.makedirs(d)
    cfg = {"architectures": ["X"], "model_type": arch, "num_hidden_layers": c["n_layers"],
           "hidden_size": c["hidden"], "intermediate_size": c["ffn"],
           "num_attention_heads": c["n_heads"], "num_key_value_heads": c["n_kv_heads"],
           "head_dim": c["head_dim"], "vocab_size": c["vocab"], "max_position_embeddings": 256,
           "rope_theta": c["rope_theta"], "rms_norm_eps": c["rms_eps"],
           "tie_word_embeddings": c["tied"], "attention_bias": c["qkv_bias"]}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    held = fw.write_safetensors(os.path.join(d, "model.safetensors"),
                                [(hf_name(n), a) for n, a in w.items()], dtype)
    ref = {n: held[hf_name(n)] for n in w}
    return held, ref


def check(exe, case, tmp):
    name, fmt, arch, dtype, over = case
    c = config(over)
    w = weights(c, seed=len(name))
    path = os.path.join(tmp, name + (".gguf" if fmt == "gguf" else ""))
    held, ref = (write_gguf if fmt == "gguf" else write_hf)(path, arch, dtype, c, w)
    out = os.path.join(tmp, name + ".out")
    subprocess.run([exe, path, out] + [str(t) for t in TOKENS], check=True)
    fails = []
    got_names = {f[:-4] for f in os.listdir(out) if f.endswith(".npy")} - {"logits"}
    if got_names != set(held):
        fails.append("tensor names: missing %s, extra %s"
                     % (sorted(set(held) - got_names), sorted(got_names - set(held))))
    n_diff = 0
    for n in set(held) & got_names:
        g = np.load(os.path.join(out, n + ".npy"))
        if g.shape != held[n].shape or not np.array_equal(g, held[n]):
            n_diff += 1
            fails.append("%s: shape %s vs %s or values differ" % (n, g.shape, held[n].shape))
    rd = os.path.join(tmp, name + ".ref")
    os.makedirs(rd)
    for n, a in ref.items():
        np.save(os.path.join(rd, n + ".npy"), a)
    want = forward(rd, c, np.array(TOKENS))
    got = np.load(os.path.join(out, "logits.npy")).astype(np.float64)
    err, scale = np.abs(got - want).max(), np.abs(want).max()
    top1 = (got.argmax(-1) == want.argmax(-1)).mean()
    rtol, min_top1 = (4e-2, 0.9) if dtype == "q8_0" else (1e-4, 1.0)
    if err > rtol * scale or top1 < min_top1:
        fails.append("logits: max|err| %.3e > %.0e * %.3f or top-1 %.3f < %.2f"
                     % (err, rtol, scale, top1, min_top1))
    print("%-16s %2d tensors equal  logits max|err| %.3e  max|logit| %.3f  ratio %.2e (tol %.0e)"
          "  top1 %.3f  %s" % (name, len(held) - n_diff, err, scale, err / scale, rtol, top1,
                               "FAIL" if fails else "ok"))
    for f in fails[:6]:
        print("    " + f)
    return not fails


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        results = [check(sys.argv[1], c, tmp) for c in CASES]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
