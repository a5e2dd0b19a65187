#!/usr/bin/env python3
"""Decodes a perf.data directory's trace into a Parquet dataset on a Dask cluster: one
`poketrace export --segment` task per unit of `poketrace segments`.

    poketrace_dask.py DIR -o OUT [--scheduler tcp://HOST:8786 | --local N]
                      [--target-bytes N] [--poketrace PATH] [--itrace=i]

DIR and OUT must be on storage every worker shares, at the same paths, and PATH (default:
`poketrace` on the PATH) must run on every worker. Prints the summary as JSON on stdout; exit
status 1 when a unit could not be exported (each one is named on stderr)."""

import argparse
import json
import os
import sys

from pokedist.cluster import connect
from pokedist.driver import TABLES_ID, export_units
from pokedist.units import list_units


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace_dir", metavar="DIR")
    p.add_argument("-o", "--output", required=True, metavar="OUT")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDR", help="a running Dask scheduler, e.g. tcp://host:8786")
    where.add_argument("--local", type=int, metavar="N", help="N worker processes on this machine (default: one a core)")
    p.add_argument("--target-bytes", type=int, metavar="N", help="bytes of trace a unit holds about")
    p.add_argument("--poketrace", default="poketrace", metavar="PATH", help="the poketrace binary on the workers")
    p.add_argument("--itrace", metavar="OPTS", help="passed to export (i: a row per instruction)")
    p.add_argument("--retries", type=int, default=2, help="more tries for a unit whose export fails")
    return p.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    # Absolute paths: a worker's working directory is not the client's.
    poketrace = os.path.abspath(args.poketrace) if os.sep in args.poketrace else args.poketrace
    trace_dir, out = os.path.abspath(args.trace_dir), os.path.abspath(args.output)
    units = list_units(poketrace, trace_dir, args.target_bytes)
    extra = [f"--itrace={args.itrace}"] if args.itrace else []
    with connect(args.scheduler, args.local) as client:
        outcome = export_units(client, poketrace, trace_dir, out, units, target_bytes=args.target_bytes, extra=extra, retries=args.retries)
    for unit, why in sorted(outcome.failed.items()):
        what = unit if unit == TABLES_ID else f"unit {unit}"
        print(f"poketrace_dask: {what} not exported: {why}", file=sys.stderr)
    print(json.dumps(outcome.summary()))
    return 1 if outcome.failed else 0


if __name__ == "__main__":
    sys.exit(main())
