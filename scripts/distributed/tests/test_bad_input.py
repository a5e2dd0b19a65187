"""Bad input: a damaged unit gives error rows in its own file and leaves every other unit's file
as it was; a unit whose file cannot be written is named, and the driver exits non-zero."""

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from datasets import TARGET_BYTES, files
from pokedist.dataset import unit_file

DRIVER = Path(__file__).resolve().parents[1] / "poketrace_dask.py"


def test_damaged_unit_has_error_rows_others_unaffected(exported, exported_damaged, units):
    (clean, _), (out, outcome) = exported, exported_damaged
    assert files(out) == files(clean)
    rows = {u["id"]: pq.read_table(unit_file(out, u["id"])).to_pylist() for u in units}
    want = {u["id"]: pq.read_table(unit_file(clean, u["id"])).to_pylist() for u in units}
    hit = [i for i, u in enumerate(units) if any(r["error"] for r in rows[u["id"]])]
    assert len(hit) == 1 and not any(r["error"] for r in want[units[hit[0]]["id"]]), hit
    damaged, after = units[hit[0]], units[hit[0] + 1]
    assert after["buffer"] == damaged["buffer"], "the damage is not in a buffer's last unit"
    # The damaged unit: the clean rows up to the error, then the error; the rest of the unit is lost.
    got = rows[damaged["id"]]
    first = next(i for i, r in enumerate(got) if r["error"])
    assert got[:first] == want[damaged["id"]][:first] and first < len(want[damaged["id"]])
    assert got[first]["kind"] == "error" and all(r["kind"] == "error" for r in got[first:])
    # The next unit: the trace starts again at its PSB (as in the whole decode), then its clean
    # rows (the first one's `insns` counted from the new start).
    restarted, clean_after = got_after_start(rows[after["id"]]), want[after["id"]]
    assert without_insns(restarted[:1]) == without_insns(clean_after[:1]) and restarted[1:] == clean_after[1:]
    # Every other unit: as in the clean trace.
    for u in units:
        if u["id"] not in (damaged["id"], after["id"]):
            assert rows[u["id"]] == want[u["id"]], u["id"]
    assert outcome.errors == len(got) - first


def without_insns(rows):
    return [{k: v for k, v in r.items() if k != "insns"} for r in rows]


def got_after_start(rows):
    """The rows after a first `tr strt` row (a trace starting again with no branch from)."""
    assert rows[0]["kind"] == "tr strt" and rows[0]["ip"] == 0 and rows[0]["addr"] == rows[1]["ip"], rows[:2]
    return rows[1:]


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
