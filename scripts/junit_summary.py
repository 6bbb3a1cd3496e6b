"""Summarise nextest's JUnit report (scripts/test.sh): one line per test binary on stderr (tests,
failures, the sum of its tests' times, and the span from its first test's start to its last test's
end, which is shorter than the sum where its tests ran side by side), then "PASSED FAILED" on stdout.

Usage: python scripts/junit_summary.py target/nextest/default/junit.xml
"""

import sys
import xml.etree.ElementTree as ET
from datetime import datetime


def started(case):
    stamp = case.get("timestamp")
    return datetime.fromisoformat(stamp).timestamp() if stamp else None


def main(path):
    root = ET.parse(path).getroot()
    passed = failed = 0
    rows = []
    for suite in root.iter("testsuite"):
        cases = list(suite.iter("testcase"))
        bad = sum(1 for c in cases if c.find("failure") is not None or c.find("error") is not None)
        total = sum(float(c.get("time", 0)) for c in cases)
        spans = [(started(c), float(c.get("time", 0))) for c in cases]
        spans = [(s, t) for s, t in spans if s is not None]
        span = max(s + t for s, t in spans) - min(s for s, _ in spans) if spans else total
        rows.append((span, suite.get("name"), len(cases), bad, total))
        passed += len(cases) - bad
        failed += bad
    print(f"{'test binary':<44} {'tests':>5} {'failed':>6} {'sum s':>8} {'span s':>8}", file=sys.stderr)
    for span, name, n, bad, total in sorted(rows, reverse=True):
        print(f"{name:<44} {n:>5} {bad:>6} {total:>8.1f} {span:>8.1f}", file=sys.stderr)
    print(f"{passed} {failed}")


if __name__ == "__main__":
    main(sys.argv[1])
