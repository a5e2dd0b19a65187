"""What a worker runs for one unit: `poketrace export DIR --segment ID -o OUT`, a subprocess."""

import subprocess
import time

from distributed import get_worker

from pokedist import dataset


# The tables written once for the whole dataset (export's --tables), beside the units' files.
TABLES = ("pokes", "ksymbols", "segments")


class UnitFailed(Exception):
    """`poketrace export` could not write a unit's file (not: the unit decoded with errors)."""


def export_unit(poketrace, trace_dir, out, unit_id, extra=()):
    """Exports unit `unit_id` of `trace_dir` into the dataset at `out` (both on storage this
    worker shares) and returns what it wrote: rows and error rows of the unit's file."""
    args = [poketrace, "export", str(trace_dir), "--format", "parquet", "-o", str(out), "--segment", unit_id, *extra]
    started = time.monotonic()
    done = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # 0: complete; 1: the unit has decode errors, which are rows of its file.
    if done.returncode not in (0, 1):
        raise UnitFailed(f"unit {unit_id}: {' '.join(args)}: exit status {done.returncode}: {_last_lines(done.stderr)}")
    rows, errors = dataset.counts(dataset.unit_file(out, unit_id))
    return {
        "id": unit_id,
        "rows": rows,
        "errors": errors,
        "seconds": time.monotonic() - started,
        "worker": get_worker().address,
    }


def export_tables(poketrace, trace_dir, out, extra=()):
    """Writes the dataset's small shared tables (pokes, ksymbols, segments) from `trace_dir`:
    `extra` must give the units' --target-bytes when it is not the default."""
    args = [poketrace, "export", str(trace_dir), "--format", "parquet", "-o", str(out), "--tables", ",".join(TABLES), *extra]
    started = time.monotonic()
    done = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode not in (0, 1):
        raise UnitFailed(f"tables: {' '.join(args)}: exit status {done.returncode}: {_last_lines(done.stderr)}")
    return {"id": "tables", "seconds": time.monotonic() - started, "worker": get_worker().address}


def _last_lines(text, n=5):
    return " | ".join(text.strip().splitlines()[-n:])
