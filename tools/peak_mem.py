#!/usr/bin/env python3
"""Runs a command and reports its peak host memory (not a test; for the benchmarks in
docs/benchmarks.md): the largest VmRSS of the process or any of its descendants (so
`peak_mem.py -- timeout 60 ps_train ...` measures ps_train), and the RssAnon / RssFile /
RssShmem components at that moment, polled from /proc every --interval-s, plus
getrusage's ru_maxrss of the children. The last line is JSON.

  python3 tools/peak_mem.py [--interval-s 0.5] -- ps_train --config ...
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem")


def sample(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return {k: int(v.split()[0]) * 1024 for k, v in (l.split(":", 1) for l in f) if k in FIELDS}
    except (OSError, ValueError):
        return None


def descendants(root):
    """root and every process below it, from the parent ids in /proc/<pid>/stat."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, frontier = [root], [root]
    while frontier:
        frontier = [c for c, pp in parent.items() if pp in frontier]
        out += frontier
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interval-s", type=float, default=0.5)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    t0 = time.time()
    p = subprocess.Popen(cmd)
    peak = {}
    while p.poll() is None:
        for pid in descendants(p.pid):
            s = sample(pid)
            if s and s.get("VmRSS", 0) > peak.get("VmRSS", 0):
                peak = dict(s, pid=pid, at_s=round(time.time() - t0, 1))
        time.sleep(a.interval_s)
    out = {"rc": p.returncode, "wall_s": round(time.time() - t0, 1),
           "ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
           "peak": {(k if k in ("at_s", "pid") else "peak_" + k.lower() + "_bytes"): v for k, v in peak.items()}}
    print(json.dumps(out), flush=True)
    sys.exit(p.returncode)


if __name__ == "__main__":
    main()
