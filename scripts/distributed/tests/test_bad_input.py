"""Bad input: a damaged unit gives error rows in its own file and leaves every other unit's file
as it was; a unit whose file cannot be written is named, and the driver exits non-zero."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from conftest import TARGET_BYTES
from datasets import damage, files
from pokedist.driver import export_units
from pokedist.units import list_units

DRIVER = Path(__file__).resolve().parents[1] / "poketrace_dask.py"


def test_damaged_unit_has_error_rows_others_unaffected(client, poketrace, trace, exported, tmp_path):
    clean, _ = exported
    damaged = tmp_path / "damaged"
    shutil.copytree(trace, damaged)
    damage(damaged)
    units = list_units(poketrace, damaged, TARGET_BYTES)
    out = tmp_path / "out"
    outcome = export_units(client, poketrace, damaged, out, units)
    assert not outcome.failed, outcome.failed
    branches = [f for f in files(clean) if f.startswith("branches/")]
    assert [f for f in files(out) if f.startswith("branches/")] == branches
    differ = [f for f in branches if not pq.read_table(out / f).equals(pq.read_table(clean / f))]
    assert len(differ) == 1, differ
    errors = {f: pq.read_table(out / f, columns=["error"]).column("error").drop_null().length() for f in branches}
    assert errors[differ[0]] >= 1
    assert sum(errors.values()) == errors[differ[0]] == outcome.errors


def test_unit_that_cannot_be_written_fails_the_run(poketrace, trace, units, tmp_path):
    out = tmp_path / "out"
    # A file where CPU 1's directory of unit files goes: its units cannot be written.
    (out / "branches").mkdir(parents=True)
    (out / "branches" / "cpu=1").write_text("in the way")
    done = subprocess.run(
        [sys.executable, DRIVER, trace, "-o", out, "--local", "2", "--target-bytes", str(TARGET_BYTES), "--poketrace", poketrace, "--retries", "0"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stderr
    summary = json.loads(done.stdout)
    of_cpu1 = sorted(u["id"] for u in units if u["cpu"] == 1)
    assert summary["failed"] == len(of_cpu1) and summary["done"] == len(units) - len(of_cpu1)
    named = sorted(line.split()[2] for line in done.stderr.splitlines() if line.startswith("poketrace_dask: unit "))
    assert named == of_cpu1
