"""The cluster's dataset is the one a single `poketrace export` process writes, file for file and
row for row; and a CPU's rows, its units one after the other, are that CPU's lines of `poketrace
decode --json`, line for line."""

import pyarrow.parquet as pq
import pytest

from datasets import TARGET_BYTES, assert_same_dataset, export_single
from decoded import as_row, lines
from pokedist.dataset import unit_file
from pokedist.units import list_units


def test_same_as_one_export_process(exported, single, units):
    out, outcome = exported
    assert_same_dataset(out, single)
    assert sorted(d["id"] for d in outcome.done) == sorted(u["id"] for u in units)
    assert outcome.rows == sum(pq.ParquetFile(unit_file(out, u["id"])).metadata.num_rows for u in units)


def test_damaged_same_as_one_export_process(exported_damaged, poketrace, damaged, tmp_path):
    out, outcome = exported_damaged
    assert outcome.errors >= 1
    assert_same_dataset(out, export_single(poketrace, damaged, tmp_path / "single"))


@pytest.mark.parametrize("which, itrace", [("exported", "be"), ("exported_damaged", "be"), ("exported_insns", "i")])
def test_rows_are_decode_lines(request, poketrace, which, itrace):
    out, _ = request.getfixturevalue(which)
    trace = request.getfixturevalue("damaged" if which == "exported_damaged" else "trace")
    decoded = lines(poketrace, trace, itrace)
    units = list_units(poketrace, trace, TARGET_BYTES)
    for cpu in sorted({u["cpu"] for u in units}):
        rows = [r for u in units if u["cpu"] == cpu for r in pq.read_table(unit_file(out, u["id"])).drop_columns(["insns"]).to_pylist()]
        want = [as_row(line) for line in decoded if line["cpu"] == cpu]
        assert len(rows) == len(want), f"cpu {cpu}"
        for i, (got, line) in enumerate(zip(rows, want)):
            assert got == line, f"cpu {cpu}, row {i}"
    assert sum(1 for line in decoded if line["cpu"] not in {u["cpu"] for u in units}) == 0
