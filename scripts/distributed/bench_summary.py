#!/usr/bin/env python3
"""bench.sh's figures from its runs (JSON lines: poketrace_dask.py summaries and single-process
times): MB of trace a second a worker, the fixed cost of a unit, and on paper what 1 TB of Intel
PT takes on 100 machines."""

import json
import sys

TB = 1e12
MACHINES = 100
CORES = 32  # workers a machine, one a core
UNIT = 8 << 20  # poketrace segments' default --target-bytes


def main(path):
    runs = [json.loads(line) for line in open(path)]
    big = {w: fastest(runs, "big", w) for w in sorted({r["workers"] for r in runs if r["name"] == "big"})}
    small = {w: fastest(runs, "small", w) for w in big}
    mb = big[min(big)]["trace_bytes"] / 1e6
    single = fastest(runs, "single")
    print(f"one export process: {mb:.1f} MB in {single['seconds']:.2f} s wall ({mb / single['seconds']:.2f} MB/s), {single['cpu_seconds']:.2f} s CPU ({mb / single['cpu_seconds']:.2f} MB a CPU-second)")
    alone = fastest(runs, "one_small_unit_of_big")
    print(f"one single-PSB unit of that trace exported alone: {alone['seconds'] * 1e3:.0f} ms wall, {alone['cpu_seconds'] * 1e3:.0f} ms CPU")
    for w, r in big.items():
        s = small[w]
        print(
            f"{w} worker(s): {mb:.1f} MB in {r['units']} units: {r['seconds']:.2f} s wall, {mb / r['seconds'] / w:.2f} MB/s a worker; "
            f"{r['task_cpu_seconds']:.2f} s CPU, {mb / r['task_cpu_seconds']:.2f} MB a CPU-second; "
            f"{s['units']} units of {s['trace_bytes'] / s['units'] / 1e3:.1f} KB: {s['seconds'] * w / s['units'] * 1e3:.0f} ms wall "
            f"a unit a worker, {s['task_cpu_seconds'] / s['units'] * 1e3:.0f} ms CPU a unit"
        )
    # On paper, in CPU time (what a dedicated core takes): the decode's cost a byte once the
    # units' fixed cost is taken out, and that cost as the larger of its two measures.
    one = big[min(big)]
    fixed = max(alone["cpu_seconds"], small[min(big)]["task_cpu_seconds"] / small[min(big)]["units"])
    per_byte = (one["task_cpu_seconds"] - one["units"] * fixed) / one["trace_bytes"]
    units = TB / UNIT
    total = TB * per_byte + units * fixed
    print(
        f"on paper: 1 TB = {units:,.0f} units of 8 MiB at {per_byte * 1e9:.0f} CPU-s a GB + {fixed * 1e3:.0f} ms a unit "
        f"= {total / 3600:,.0f} core-hours: {total / (MACHINES * CORES) / 3600 * 60:.0f} min on {MACHINES} machines "
        f"x {CORES} workers ({total / MACHINES / 3600:.1f} h with one worker a machine)"
    )


def fastest(runs, name, workers=None):
    """The fastest run of `name` (on `workers` workers): the machine is shared, the least disturbed."""
    matching = [r for r in runs if r["name"] == name and r.get("workers") == workers]
    assert matching, (name, workers)
    assert all(r.get("failed", 0) == 0 for r in matching), matching
    return min(matching, key=lambda r: r["seconds"])


if __name__ == "__main__":
    main(sys.argv[1])
