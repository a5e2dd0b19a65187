"""The named DuckDB queries of queries.sql, run over a dataset."""

import re
from pathlib import Path

import duckdb

QUERIES = Path(__file__).resolve().parent.parent / "queries.sql"


def load(path=QUERIES):
    """{name: SQL} of each `-- name: NAME` line and the statement after it."""
    parts = re.split(r"^-- name: *(\w+) *$", Path(path).read_text(), flags=re.M)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2])}


def connect(out):
    """A DuckDB connection whose relative paths are under the dataset `out`."""
    con = duckdb.connect()
    con.execute("SET file_search_path = ?", [str(out)])
    return con


def run(out, name, path=QUERIES):
    """Query `name`'s answer over the dataset `out`: (column names, rows)."""
    rel = connect(out).sql(load(path)[name])
    return rel.columns, rel.fetchall()
