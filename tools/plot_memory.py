#!/usr/bin/env python3
"""Plots the chunk memory curve of a run from its Chrome trace (not a test).

Reads <run.output_dir>/chunk_timeline.json (written by ps_train with chunk.enabled and
chunk.timeline_steps > 0) and draws device and host chunk bytes over time, with the
forward/backward moments as ticks and evictions as marks; saves a PNG.

  python3 -m pip install matplotlib     # once; plotting only, ps_train never needs it
  python3 tools/plot_memory.py runs/quickstart/chunk_timeline.json [-o memory.png] [--budget BYTES]
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("-o", "--output", help="PNG path (default: the trace path with .png)")
    ap.add_argument("--budget", type=float, help="device budget in bytes, drawn as a line")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_memory.py needs matplotlib: python3 -m pip install matplotlib")
    try:
        events = json.load(open(a.trace))["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"{a.trace}: not a Chrome trace written by ps_train ({e})")
    counters = [e for e in events if e.get("ph") == "C"]
    if not counters:
        sys.exit(f"{a.trace}: no chunk byte counters (did the run move any chunk?)")
    t = [e["ts"] / 1e3 for e in counters]
    device = [e["args"]["device"] / 2**20 for e in counters]
    host = [e["args"]["host"] / 2**20 for e in counters]
    evictions = [e["ts"] / 1e3 for e in events if e.get("ph") == "X" and e.get("cat") == "evict"]
    moments = [(e["ts"] / 1e3, e["name"]) for e in events if e.get("ph") == "i"]

    fig, (ax_dev, ax_host) = plt.subplots(2, 1, sharex=True, figsize=(11, 6))
    ax_dev.step(t, device, where="post", label="device chunk MiB")
    if a.budget:
        ax_dev.axhline(a.budget / 2**20, color="red", linestyle="--", label="device budget")
    if evictions:
        ax_dev.plot(evictions, [0] * len(evictions), "|", color="orange", markersize=12, label="eviction")
    for ts, name in moments:
        ax_dev.axvline(ts, color="grey" if name.startswith("forward") else "lightblue", linewidth=0.5)
    ax_dev.set_ylabel("device MiB")
    ax_dev.legend(loc="upper right")
    ax_host.step(t, host, where="post", color="green")
    ax_host.set_ylabel("host MiB")
    ax_host.set_xlabel("time (ms); grey = forward moments, blue = backward moments")
    fig.suptitle(f"chunk memory: {a.trace}")
    out = a.output or a.trace.rsplit(".", 1)[0] + ".png"
    fig.savefig(out, dpi=100, bbox_inches="tight")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
