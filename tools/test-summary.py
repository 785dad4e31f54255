#!/usr/bin/env python3
"""tools/test-summary.py BUILD_DIR... — read meson's testlog.json from each
build dir and print one closing line: 'N passed, N failed, N skipped'.
Exit status 1 when anything failed or timed out (or no test ran)."""
import json
import sys

passed = failed = skipped = 0
failures = []
for d in sys.argv[1:]:
    try:
        with open(f"{d}/meson-logs/testlog.json", encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                r = json.loads(line)
                res = r.get("result", "")
                if res in ("OK", "EXPECTEDFAIL"):
                    passed += 1
                elif res == "SKIP":
                    skipped += 1
                else:
                    failed += 1
                    failures.append(f"{d}: {r.get('name')} ({res})")
    except FileNotFoundError:
        failed += 1
        failures.append(f"{d}: no test log (did the build fail?)")
for f in failures:
    print("FAILED:", f)
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or passed == 0 else 0)
