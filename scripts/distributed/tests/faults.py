"""A task for the fault test: `export_unit`, except that the first attempt at some units kills
its own worker process (SIGKILL: no goodbye to the scheduler), as a crashed machine would."""

import os
import signal
from pathlib import Path

from pokedist.task import export_unit


def export_or_die(markers, deaths, poketrace, trace_dir, out, unit_id, extra=()):
    """`deaths` maps unit IDs to when the worker dies on the first attempt: "before" the export,
    or "after" it (its file written, its result not yet returned). A file in `markers` tells
    later attempts that the first one happened."""
    when = deaths.get(unit_id)
    marker = Path(markers) / unit_id
    if when and not marker.exists():
        marker.touch()
        if when == "after":
            export_unit(poketrace, trace_dir, out, unit_id, extra)
        os.kill(os.getpid(), signal.SIGKILL)
    return export_unit(poketrace, trace_dir, out, unit_id, extra)
