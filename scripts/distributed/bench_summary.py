#!/usr/bin/env python3
"""bench.sh's figures from its runs (JSON lines of poketrace_dask.py summaries): throughput a
worker, fixed cost a unit, and what 1 TB of Intel PT takes on 100 machines, on paper."""

import json
import sys

TB = 1e12
MACHINES = 100
CORES = 32  # workers a machine, one a core
UNIT = 8 << 20  # poketrace segments' default --target-bytes


def main(path):
    runs = [json.loads(line) for line in open(path)]
    single = min(r["seconds"] for r in runs if r["name"] == "single")
    big = {w: best(runs, "big", w) for w in sorted({r["workers"] for r in runs if r["name"] == "big"})}
    small = {w: best(runs, "small", w) for w in big}
    mb = big[min(big)]["trace_bytes"] / 1e6
    print(f"one export process: {mb:.1f} MB in {single:.2f} s: {mb / single:.2f} MB/s")
    for w, r in big.items():
        rate = mb / r["seconds"]
        s = small[w]
        fixed = s["seconds"] * w / s["units"]
        print(
            f"{w} worker(s): {mb:.1f} MB in {r['units']} units, {r['seconds']:.2f} s: {rate:.2f} MB/s, "
            f"{rate / w:.2f} MB/s a worker; {s['units']} units of ~{s['trace_bytes'] / s['units'] / 1e3:.1f} KB "
            f"in {s['seconds']:.2f} s: {fixed * 1e3:.0f} ms a unit"
        )
    # Paper: a worker decodes at the 1-worker rate once its units' fixed cost is taken out.
    one, s1 = big[min(big)], small[min(big)]
    fixed = s1["seconds"] / s1["units"]
    decode = (one["seconds"] - one["units"] * fixed) / one["trace_bytes"]
    units = TB / UNIT
    total = TB * decode + units * fixed
    hours = total / (MACHINES * CORES) / 3600
    print(
        f"on paper: 1 TB = {units:,.0f} units of 8 MiB; {decode * 1e9:.2f} s a GB decoding + {fixed * 1e3:.0f} ms a unit "
        f"= {total / 3600:,.0f} worker-hours; on {MACHINES} machines x {CORES} workers: {hours:.2f} h"
    )


def best(runs, name, workers):
    """The fastest run of `name` on `workers` workers (the machine is shared: the least disturbed)."""
    matching = [r for r in runs if r["name"] == name and r["workers"] == workers]
    assert all(r["failed"] == 0 for r in matching), matching
    return min(matching, key=lambda r: r["seconds"])


if __name__ == "__main__":
    main(sys.argv[1])
