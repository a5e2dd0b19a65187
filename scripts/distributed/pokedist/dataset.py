"""The Parquet dataset `poketrace export` writes: where a unit's file is, and its row counts
from the file's footer (no data pages read)."""

from pathlib import Path

import pyarrow.parquet as pq


def unit_file(out, unit_id):
    """The one file of unit `unit_id` under `out` (branches/<buffer>=N/seg-<id>.parquet)."""
    found = sorted(Path(out).glob(f"branches/*/seg-{unit_id}.parquet"))
    if len(found) != 1:
        raise FileNotFoundError(f"{out}: {len(found)} files for unit {unit_id} (expected 1): {found}")
    return found[0]


def branch_files(out):
    """Every unit's file under `out`, complete ones only (temporary names do not end in .parquet)."""
    return sorted(Path(out).glob("branches/*/seg-*.parquet"))


def counts(path):
    """(rows, error rows) of one file: error rows are those whose `error` is not null."""
    meta = pq.ParquetFile(path).metadata
    column = meta.schema.names.index("error")
    errors = 0
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(column).statistics
        if stats is None or not stats.has_null_count:
            return meta.num_rows, _count_errors(path)
        errors += meta.row_group(g).num_rows - stats.null_count
    return meta.num_rows, errors


def _count_errors(path):
    return pq.read_table(path, columns=["error"]).column("error").drop_null().length()
