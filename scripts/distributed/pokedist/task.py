"""What a worker runs: `poketrace export` for one unit, or for the shared tables, a subprocess."""

import os
import subprocess
import time

from distributed import get_worker

from pokedist import dataset

# The tables written once for the whole dataset (export's --tables), beside the units' files.
TABLES = ("pokes", "ksymbols", "segments")


class UnitFailed(Exception):
    """`poketrace export` could not write its files (not: the unit decoded with errors)."""


def export_unit(poketrace, trace_dir, out, unit_id, extra=()):
    """Exports unit `unit_id` of `trace_dir` into the dataset at `out` (both on storage this
    worker shares) and returns what it wrote: rows and error rows of the unit's file."""
    seconds, cpu = _export(poketrace, trace_dir, out, ["--segment", unit_id, *extra], f"unit {unit_id}")
    rows, errors = dataset.counts(dataset.unit_file(out, unit_id))
    return {"id": unit_id, "rows": rows, "errors": errors, "seconds": seconds, "cpu_seconds": cpu, "worker": get_worker().address}


def export_tables(poketrace, trace_dir, out, extra=()):
    """Writes the dataset's small shared tables (pokes, ksymbols, segments) from `trace_dir`:
    `extra` must give the units' --target-bytes when it is not the default. Returns (wall, CPU)
    seconds."""
    return _export(poketrace, trace_dir, out, ["--tables", ",".join(TABLES), *extra], "tables")


def _export(poketrace, trace_dir, out, args, what):
    """Runs `poketrace export` with `args`: its (wall, CPU) seconds, CPU as user + sys of that
    process alone (wall time on a shared machine says more about the neighbours). Exit status 1
    is a decode with errors, whose rows are in the files: done; any other but 0 raises UnitFailed
    naming `what`."""
    cmd = [poketrace, "export", str(trace_dir), "--format", "parquet", "-o", str(out), *args]
    started = time.monotonic()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = child.stderr.read()
    child.stderr.close()
    _, status, usage = os.wait4(child.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        last = " | ".join(stderr.strip().splitlines()[-5:])
        raise UnitFailed(f"{what}: {' '.join(cmd)}: exit status {code}: {last}")
    return time.monotonic() - started, usage.ru_utime + usage.ru_stime
