#!/usr/bin/python3
"""tests/bench/tokenizer/gen_corpus.py OUT.jsonl — the tokenizer benchmark corpus.

One JSON string per line, each a document of about 8 KB:
  - the 280 fixture texts ($AORTA_FIXTURES/tokenizers/llama3/vectors.jsonl: every
    script, emoji, code, whitespace, special-token-looking text), joined by newlines
    and repeated until they make about 1 MB;
  - about 3 MB of long text: English prose and code-heavy documentation that ships
    on the machine (Rust release notes, Vim help, Node.js API docs, licences),
    cut at line ends. Files that are absent are skipped; the summary says what was used.
Deterministic: the same files give the same corpus.
"""
import json, os, sys

FIXTURES = os.environ.get("AORTA_FIXTURES", "/work/shared/fixtures")
LONG = [
    "/root/.rustup/toolchains/stable-x86_64-unknown-linux-gnu/share/doc/rust/html/releases.md",
    "/usr/share/vim/vim90/doc/options.txt",
    "/usr/share/vim/vim90/doc/builtin.txt",
    "/usr/share/doc/nodejs/api/fs.md",
    "/usr/share/doc/nodejs/api/n-api.md",
    "/usr/share/vim/vim90/doc/syntax.txt",
    "/usr/share/vim/vim90/doc/version8.txt",
    "/usr/share/vim/vim90/doc/version9.txt",
    "/usr/share/common-licenses/GPL-3",
    "/usr/share/common-licenses/Apache-2.0",
]
DOC = 8192


def chunks(text):
    out, cur, n = [], [], 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        n += len(line.encode())
        if n >= DOC:
            out.append("".join(cur))
            cur, n = [], 0
    if cur:
        out.append("".join(cur))
    return out


def main():
    out = sys.argv[1]
    texts = [json.loads(l)["text"] for l in open(os.path.join(FIXTURES, "tokenizers/llama3/vectors.jsonl"), encoding="utf-8")]
    fixture = "\n".join(texts) + "\n"
    reps = max(1, (1 << 20) // len(fixture.encode()))
    docs = chunks(fixture * reps)
    used, long_bytes = [], 0
    for p in LONG:
        if long_bytes >= 3 << 20 or not os.path.exists(p):
            continue
        t = open(p, encoding="utf-8", errors="replace").read()
        t = t[: (3 << 20) - long_bytes]
        docs += chunks(t)
        long_bytes += len(t.encode())
        used.append(p)
    with open(out, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    total = sum(len(d.encode()) for d in docs)
    print(f"corpus: {len(docs)} docs, {total} bytes (fixture texts x{reps}: {len(fixture.encode()) * reps} bytes; "
          f"long text {long_bytes} bytes from {len(used)} files: {', '.join(os.path.basename(u) for u in used)})")


main()
