"""Runs the units of a trace on a Dask cluster and gathers what became of each."""

import time
import uuid
from dataclasses import dataclass, field

from distributed import as_completed

from pokedist.task import export_tables, export_unit

# The shared tables' name among the units in an outcome's failures.
TABLES_ID = "tables"


@dataclass
class Outcome:
    """What a run made of the dataset at `out`."""

    out: str
    units: int
    trace_bytes: int
    done: list = field(default_factory=list)  # export_unit's results, one a unit
    failed: dict = field(default_factory=dict)  # unit ID (or TABLES_ID): why it could not be done
    seconds: float = 0.0

    @property
    def rows(self):
        return sum(d["rows"] for d in self.done)

    @property
    def errors(self):
        return sum(d["errors"] for d in self.done)

    def summary(self):
        return {
            "dataset": self.out,
            "units": self.units,
            "done": len(self.done),
            "failed": len(self.failed),
            "rows": self.rows,
            "error_rows": self.errors,
            "trace_bytes": self.trace_bytes,
            "seconds": round(self.seconds, 3),
            "task_seconds": round(sum(d["seconds"] for d in self.done), 3),
            "task_cpu_seconds": round(sum(d["cpu_seconds"] for d in self.done), 3),
        }


def export_units(client, poketrace, trace_dir, out, units, *, target_bytes=None, extra=(), retries=2, task=export_unit):
    """One `task` a unit on `client`'s workers, and one that writes the shared tables (`units`
    must be those of `target_bytes`). Dask reruns the tasks of a worker that is lost; `retries`
    more tries go to a task that fails. A unit still failing is named in the outcome, never
    dropped."""
    started = time.monotonic()
    run = uuid.uuid4().hex[:8]
    sizing = ["--target-bytes", str(target_bytes)] if target_bytes is not None else []
    futures = {}
    for u in units:
        key = f"poketrace-export-{u['id']}-{run}"
        f = client.submit(task, poketrace, str(trace_dir), str(out), u["id"], tuple(extra), key=key, retries=retries, pure=False)
        futures[f] = u["id"]
    tables = client.submit(export_tables, poketrace, str(trace_dir), str(out), tuple(sizing), key=f"poketrace-tables-{run}", retries=retries, pure=False)
    futures[tables] = TABLES_ID
    outcome = Outcome(out=str(out), units=len(units), trace_bytes=sum(u["bytes"] for u in units))
    for f in as_completed(list(futures)):
        # Dropped once read: a result still held on a worker is computed again when it is lost.
        unit = futures.pop(f)
        if f.status != "finished":
            outcome.failed[unit] = f"{type(f.exception()).__name__}: {f.exception()}"
        elif unit != TABLES_ID:
            outcome.done.append(f.result())
        f.release()
    outcome.done.sort(key=lambda d: d["id"])
    outcome.seconds = time.monotonic() - started
    return outcome
