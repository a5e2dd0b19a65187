"""Helpers of the tests: single-process runs of poketrace, and datasets compared file by file."""

import subprocess
from pathlib import Path

import pyarrow.parquet as pq

# About 40 units of ~6 KB: the 4 CPUs' 60,000 instructions each, with 200 pokes.
SIMULATE = ["--cpus", "4", "--instructions", "60000", "--pokes", "200", "--seed", "11"]
TARGET_BYTES = 6000


def run(poketrace, *args, ok=(0,)):
    """`poketrace ARGS`' stdout; its exit status must be one of `ok`."""
    done = subprocess.run([poketrace, *map(str, args)], capture_output=True, text=True)
    assert done.returncode in ok, f"poketrace {args}: exit status {done.returncode}: {done.stderr}"
    return done.stdout


def export_single(poketrace, trace, out):
    """The whole trace exported by one `poketrace export` process, in units of TARGET_BYTES (exit
    status 1: it has decode errors)."""
    run(poketrace, "export", trace, "--format", "parquet", "-o", out, "--target-bytes", TARGET_BYTES, ok=(0, 1))
    return out


def files(out):
    """Every file under `out`, relative to it: temporary ones included."""
    return sorted(str(p.relative_to(out)) for p in Path(out).rglob("*") if p.is_file())


def assert_same_dataset(got, want):
    """The same files with the same rows, in the same order."""
    assert files(got) == files(want)
    for f in files(want):
        a, b = pq.read_table(Path(got) / f), pq.read_table(Path(want) / f)
        assert a.equals(b), f"{f}: {a.num_rows} rows, expected {b.num_rows}"


def damage(trace):
    """Overwrites 256 bytes after the trace's middle PSB with a pattern the decoder reports errors
    for: one unit damaged, the records whole (as the cli tests' damage_trace)."""
    path = Path(trace) / "data"
    data = bytearray(path.read_bytes())
    psb = bytes([0x02, 0x82]) * 8
    at, psbs = data.find(psb), []
    while at >= 0:
        psbs.append(at)
        at = data.find(psb, at + len(psb))
    assert len(psbs) > 12, f"{len(psbs)} PSBs"
    start = psbs[len(psbs) // 2] + 64
    data[start : start + 256] = bytes((i * 151 + 7) % 256 for i in range(256))
    path.write_bytes(data)
