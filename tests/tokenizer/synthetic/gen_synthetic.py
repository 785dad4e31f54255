#!/usr/bin/python3
"""tests/tokenizer/synthetic/gen_synthetic.py — writes small tokenizer.json files
that exercise the pipeline pieces the four real fixtures do not: added tokens with
lstrip/rstrip/single_word, ByteLevel with add_prefix_space and its own regex,
TemplateProcessing with BOS and EOS, Split behaviours (Removed, MergedWithNext,
Contiguous, invert), Metaspace pre-tokenizer/decoder, NFKC + Lowercase, Strip at
both ends, unk without byte fallback. The expected ids/decodes come from Hugging
Face tokenizers itself (expected.js, npm `tokenizers` in tests/bench/tokenizer).
"""
import json


def bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def bpe_from_merges(base, merges):
    vocab = {}
    for t in base:
        vocab.setdefault(t, len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab


def added(id_, content, special, lstrip=False, rstrip=False, single_word=False, normalized=False):
    return {"id": id_, "content": content, "single_word": single_word, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": normalized, "special": special}


def bytelevel():
    b2u = bytes_to_unicode()
    base = [b2u[b] for b in range(256)]
    words = ["Ġthe", "Ġcat", "Ġsat", "Ġon", "Ġmat", "ing", "Ġis", "he", "ll", "llo", "Ġhello", "ĠHello", "Ċ", "ĊĊ"]
    merges = []
    seen = set(base)
    for w in words:  # left-to-right merges building each word
        cur = w[0]
        for ch in w[1:]:
            if cur + ch not in seen:
                merges.append((cur, ch))
                seen.add(cur + ch)
            cur += ch
    vocab = bpe_from_merges(base, merges)
    n = len(vocab)
    toks = [added(n, "<s>", True), added(n + 1, "</s>", True), added(n + 2, "<|sep|>", True, lstrip=True, rstrip=True),
            added(n + 3, "[MASK]", False, lstrip=True), added(n + 4, "<w>", True, single_word=True),
            added(n + 5, "hello", False), added(n + 6, "xyz", False, normalized=True)]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": toks,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [n], "tokens": ["<s>"]},
                                              "</s>": {"id": "</s>", "ids": [n + 1], "tokens": ["</s>"]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [a + " " + b for a, b in merges]},
    }


def metaspace():
    base = ["<unk>"] + list("abcdefghijklmnopqrstuvwxyz0123456789▁.,!-") + ["é", "ß"]
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("▁", "a"), ("i", "n"), ("▁", "c"), ("▁c", "a"), ("▁ca", "t"),
              ("o", "n"), ("▁", "o"), ("▁o", "n"), ("1", "2")]
    vocab = bpe_from_merges(base, merges)
    n = len(vocab)
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(0, "<unk>", True), added(n, "[CLS]", True), added(n + 1, "<eot>", True, rstrip=True),
                         added(n + 2, "WORLD", False, normalized=True), added(n + 3, "[Sep]", True, normalized=True)],
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"},
                                                            {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": "-"}, "behavior": "Removed", "invert": False},
            {"type": "Split", "pattern": {"Regex": "\\d+"}, "behavior": "MergedWithNext", "invert": False},
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True}]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [n], "tokens": ["[CLS]"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }


def splits():
    base = ["<unk>"] + [chr(c) for c in range(32, 127)]
    merges = [("a", "b"), ("ab", "c"), ("1", "2"), ("x", "y")]
    vocab = bpe_from_merges(base, merges)
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(0, "<unk>", True), added(len(vocab), "ab", False, normalized=True)],
        "normalizer": {"type": "Prepend", "prepend": "_"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "[0-9]"}, "behavior": "Contiguous", "invert": False},
            {"type": "Split", "pattern": {"Regex": "[a-z]+"}, "behavior": "Isolated", "invert": True},
            {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False}]},
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "Strip", "content": "_", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": [a + " " + b for a, b in merges]},
    }


TEXTS = [
    "", " ", "hello", "Hello world", " the cat sat on the mat", "the  cat\n\nsat\ton   the mat  ",
    "a <|sep|>   b", "a<|sep|>b", "  <|sep|>", "x [MASK] y", "x[MASK]y", "  [MASK]", "<w> word<w> <w>w <w>",
    "<s>hello</s>", "hellohello hello", "ＦＵＬＬ－ｗｉｄｔｈ １２３", "The CAT-sat on-the mat", "abc 123 xyz 4567 ab",
    "12abc34 xy", "ÉCOLE straße", "on12 12on the 1 2", "cat<eot>   the", "[CLS]the<eot>", "héllo wörld 中文 😀!",
    "what!!", "!!the!!", "a-b--c", "-", "_x", "   leading", "trailing   ", "\u3000ideographic\u3000space",
    "Hello WORLD world", "[SEP]x[sep] [Sep]", "xyz axyzb <s>xyz", "ab cab abab", "WORLD<eot>world",
]


def main():
    for name, fn in [("bytelevel", bytelevel), ("metaspace", metaspace), ("splits", splits)]:
        with open(f"{name}.json", "w", encoding="utf-8") as f:
            json.dump(fn(), f, ensure_ascii=False, indent=1)
    with open("texts.json", "w", encoding="utf-8") as f:
        json.dump(TEXTS, f, ensure_ascii=False, indent=1)


main()
