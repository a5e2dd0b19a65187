"""The independent units of a trace, as `poketrace segments --json` lists them."""

import json
import subprocess


def list_units(poketrace, trace_dir, target_bytes=None):
    """The units of `trace_dir`, in the listing's order (buffer by buffer, by offset): dicts with
    id, buffer, cpu, tid, start, end, bytes, syncs, time_from, time_to."""
    args = [poketrace, "segments", str(trace_dir), "--json"]
    if target_bytes is not None:
        args += ["--target-bytes", str(target_bytes)]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit status {done.returncode}: {done.stderr.strip()}")
    return [json.loads(line) for line in done.stdout.splitlines() if line]
