"""A worker process killed mid-run: Dask reruns its units on the other worker and on the one the
nanny starts in its place; the dataset is whole, no unit's rows twice."""

from functools import partial

import duckdb
import pyarrow.parquet as pq

from datasets import TARGET_BYTES, assert_same_dataset
from faults import export_or_die
from pokedist.cluster import connect
from pokedist.driver import export_units


def test_killed_worker_units_are_rerun(poketrace, trace, units, single, tmp_path):
    # One worker dies before its unit's export, one after writing its file and before returning.
    deaths = {units[len(units) // 3]["id"]: "after", units[2 * len(units) // 3]["id"]: "before"}
    markers = tmp_path / "markers"
    markers.mkdir()
    out = tmp_path / "out"
    with connect(local=2) as client:
        task = partial(export_or_die, str(markers), deaths)
        outcome = export_units(client, poketrace, trace, out, units, target_bytes=TARGET_BYTES, task=task, retries=0)
    assert sorted(p.name for p in markers.iterdir()) == sorted(deaths), "both workers died"
    assert not outcome.failed, outcome.failed
    assert sorted(d["id"] for d in outcome.done) == sorted(u["id"] for u in units)
    # The two first workers and at least one started after a death ran units.
    assert len({d["worker"] for d in outcome.done}) >= 3, {d["worker"] for d in outcome.done}
    assert_same_dataset(out, single)
    rows = duckdb.execute(f"SELECT count(*) FROM read_parquet('{out}/branches/*/*.parquet')").fetchone()[0]
    single_rows = sum(pq.ParquetFile(f).metadata.num_rows for f in (single / "branches").rglob("*.parquet"))
    assert rows == outcome.rows == single_rows
