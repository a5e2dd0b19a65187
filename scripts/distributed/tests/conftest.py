"""Fixtures of the driver's tests: the poketrace binary, a simulated 4-CPU trace with pokes, and
a local Dask cluster of 2 worker processes. Without Dask or the binary the tests skip, except in
CI (CI set), where they fail."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))

# About 40 units of ~6 KB: the 4 CPUs' 60,000 instructions each, with 200 pokes.
SIMULATE = ["--cpus", "4", "--instructions", "60000", "--pokes", "200", "--seed", "11"]
TARGET_BYTES = 6000


def _needed(what):
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI is set: these tests must run)")
    pytest.skip(what)


def pytest_configure(config):
    config.addinivalue_line("markers", "cluster: needs a local Dask cluster")


@pytest.fixture(scope="session")
def poketrace():
    path = Path(os.environ.get("POKETRACE_BIN", REPO / "target" / "debug" / "poketrace"))
    if not path.is_file():
        _needed(f"no poketrace binary at {path} (cargo build -p poketrace, or set POKETRACE_BIN)")
    return str(path)


@pytest.fixture(scope="session")
def dask_modules():
    try:
        import distributed  # noqa: F401
        import duckdb  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError as e:
        _needed(f"{e.name} is not installed (scripts/setup.sh --tests installs it; PYTHONPATH as scripts/test.sh sets it)")


def simulate(poketrace, out):
    done = subprocess.run([poketrace, "simulate", *SIMULATE, "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="session")
def trace(poketrace, tmp_path_factory):
    """A simulated run: 4 CPUs of Intel PT, kernel code patched while it runs."""
    return simulate(poketrace, tmp_path_factory.mktemp("trace") / "run")


@pytest.fixture(scope="session")
def client(dask_modules):
    """A client of 2 local worker processes, shared by the tests that do not kill a worker."""
    from pokedist.cluster import connect

    with connect(local=2) as c:
        yield c
