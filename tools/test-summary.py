#!/usr/bin/env python3
"""tools/test-summary.py BUILD_DIR... — read meson's testlog.json from each
build dir and say what ran and what did not; the last line is
'N passed, N failed, N skipped (N skipped cases)'.

What it reads from each test's output (stdout and stderr):
  'SKIP: <reason>'            a test that exits 77 names its reason this way
                              (the first such line); a test that passes but
                              could not run some of its cases prints one per
                              case ('SKIP: <case>: <reason>'): both are listed.
  'ISA <path>: ran ...'       the CPU instruction-set paths the kernel tests
  'ISA <path>: not run: <why>'   exercised here (tests/kernels); one line sums them.

Strict mode (env CI=true, or AORTA_STRICT_SKIPS=1: CI promises the fixtures in
../shared/fixtures and a reachable npm registry): a skip, of a test or of a
case, for any reason other than the hardware this machine lacks (no GPU
visible, a CPU without the instruction set) fails the run, named.

Exit status 1 when anything failed or timed out, no test ran, or strict mode
found a skip it does not accept."""
import json
import os
import re
import shutil
import sys

# the reasons a skip may have in strict mode: hardware this machine lacks
HARDWARE = re.compile(r"no (CUDA device|GPU) visible|a GPU is visible|this CPU has no"
                      r"|has no FP8 tensor cores")
SKIP_LINE = re.compile(r"(?:^|: )SKIP: (.+?)\s*$")
ISA_LINE = re.compile(r"^ISA (\w+): (ran|not run)(?::? ?(.*?))\s*$")
ISA_ORDER = ["scalar", "avx2", "avx512", "vnni", "amx"]

strict = os.environ.get("CI") == "true" or os.environ.get("AORTA_STRICT_SKIPS") == "1"
dirs = sys.argv[1:]
passed = failed = skipped = 0
failures, refused = [], []
skips = {}        # reason -> [test names]  (whole tests, exit 77)
case_skips = []   # (test, reason)          (passing tests that skipped cases)
isa = {}          # path -> {"ran": [tests], "not": {reason: [tests]}}
fixtures = set()


def label(d, name):
    name = name.split(" / ")[-1]  # "aorta:unit / test_x" -> "test_x"
    return f"{d}: {name}" if len(dirs) > 1 else name


def output_lines(r):
    return ((r.get("stdout") or "") + "\n" + (r.get("stderr") or "")).splitlines()


for d in dirs:
    try:
        f = open(f"{d}/meson-logs/testlog.json", encoding="utf-8")
    except FileNotFoundError:
        failed += 1
        failures.append(f"{d}: no test log (did the build fail?)")
        continue
    with f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            res, name = r.get("result", ""), label(d, r.get("name"))
            if (r.get("env") or {}).get("AORTA_FIXTURES"):
                fixtures.add(r["env"]["AORTA_FIXTURES"])
            lines = output_lines(r)
            reasons = [m.group(1) for m in map(SKIP_LINE.search, lines) if m]
            for ln in lines:
                m = ISA_LINE.match(ln)
                if m:
                    e = isa.setdefault(m.group(1), {"ran": [], "not": {}})
                    if m.group(2) == "ran":
                        e["ran"].append(name)
                    else:
                        e["not"].setdefault(m.group(3) or "?", []).append(name)
            if res in ("OK", "EXPECTEDFAIL"):
                passed += 1
                for why in reasons:
                    case_skips.append((name, why))
                    if strict and not HARDWARE.search(why):
                        refused.append(f"{name}: skipped a case: {why}")
            elif res == "SKIP":
                skipped += 1
                why = reasons[0] if reasons else "(no reason printed: the test should print 'SKIP: <why>')"
                skips.setdefault(why, []).append(name)
                if strict and not HARDWARE.search(why):
                    refused.append(f"{name}: skipped: {why}")
            else:
                failed += 1
                failures.append(f"{name} ({res})")

if skips:
    print(f"== skipped tests ({skipped}), by reason:")
    for why, names in sorted(skips.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"  {why} ({len(names)}): {', '.join(names)}")
if case_skips:
    print(f"== skipped cases in passing tests ({len(case_skips)}):")
    for name, why in case_skips:
        print(f"  {name}: {why}")
if isa:
    print("== CPU ISA paths on this machine (tests/kernels):")
    for path in sorted(isa, key=lambda p: (ISA_ORDER.index(p) if p in ISA_ORDER else 99, p)):
        e = isa[path]
        if e["ran"]:
            print(f"  {path:7} ran      {', '.join(sorted(set(e['ran'])))}")
        else:
            whys = "; ".join(f"{w} ({', '.join(sorted(set(t)))})" for w, t in e["not"].items())
            print(f"  {path:7} NOT RUN  {whys}")
if strict:
    for fx in sorted(fixtures):
        if not os.path.isdir(fx):
            refused.append(f"strict mode, but the fixtures are missing: {fx}")
    if not shutil.which("npm"):
        refused.append("strict mode, but npm is not installed")
for f in failures:
    print("FAILED:", f)
for f in refused:
    print("FAILED (skip not accepted in CI):", f)
print(f"{passed} passed, {failed} failed, {skipped} skipped ({len(case_skips)} skipped cases)"
      + ("; strict: only hardware skips accepted" if strict else ""))
sys.exit(1 if failed or refused or passed == 0 else 0)
