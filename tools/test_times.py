#!/usr/bin/env python3
"""Where the test command's time goes: each test's duration as Bazel recorded it in the
last run's bazel-testlogs/**/test.xml (cached results keep the duration of the run that
made them), longest first, with its share of the sum.

  python3 tools/test_times.py [--testlogs bazel-testlogs] [--top 25]

The sum is the tests' serial time; `bazel test` runs several at once (--jobs), so the
wall time is shorter. Compile times are not here: `bazel build --profile=/tmp/p.json`
then `bazel analyze-profile /tmp/p.json` gives those.
"""
import argparse
import os
import sys
import xml.etree.ElementTree as ET


def durations(testlogs):
    """{test label: seconds} from every test.xml under `testlogs` (sharded tests summed)."""
    out = {}
    for dirpath, _, names in os.walk(testlogs, followlinks=True):
        if "test.xml" not in names:
            continue
        try:
            root = ET.parse(os.path.join(dirpath, "test.xml")).getroot()
        except ET.ParseError as e:
            print(f"{dirpath}/test.xml: unreadable ({e})", file=sys.stderr)
            continue
        for case in root.iter("testcase"):
            seconds = float(case.get("time") or case.get("duration") or 0)
            name = case.get("name") or os.path.relpath(dirpath, testlogs)
            out[name] = out.get(name, 0.0) + seconds
            break  # one testcase per Bazel test; Catch2's own cases are in the log, not here
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--testlogs", default="bazel-testlogs")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    if not os.path.isdir(a.testlogs):
        print(f"{a.testlogs}: no such folder (run bazel test first)", file=sys.stderr)
        return 2
    times = durations(a.testlogs)
    total = sum(times.values())
    print(f"{len(times)} tests, {total:.0f} s in all (serial)")
    for name, s in sorted(times.items(), key=lambda kv: -kv[1])[: a.top]:
        print(f"{s:7.1f} s  {100 * s / total if total else 0:5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
