#!/usr/bin/env python3
"""Prints the answers of queries.sql's named DuckDB queries over a dataset of poketrace_dask.py or
`poketrace export`.

    query.py OUT [NAME ...]      (no NAME: every query)"""

import sys

from pokedist import queries


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out, names = argv[0], argv[1:] or list(queries.load())
    for name in names:
        print(f"-- {name}")
        queries.connect(out).sql(queries.load()[name]).show(max_rows=40)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
