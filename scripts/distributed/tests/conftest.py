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


@pytest.fixture(scope="session")
def units(poketrace, trace, dask_modules):
    from pokedist.units import list_units

    listed = list_units(poketrace, trace, TARGET_BYTES)
    assert len(listed) >= 16, f"{len(listed)} units"
    assert {u["cpu"] for u in listed} == {0, 1, 2, 3}
    return listed


@pytest.fixture(scope="session")
def single(poketrace, trace, tmp_path_factory):
    """The trace exported by one `poketrace export` process."""
    from datasets import export_single

    return export_single(poketrace, trace, tmp_path_factory.mktemp("single") / "out")


@pytest.fixture(scope="session")
def exported(client, poketrace, trace, units, tmp_path_factory):
    """The trace exported on the 2-worker cluster, and the run's outcome."""
    from pokedist.driver import export_units

    out = tmp_path_factory.mktemp("cluster") / "out"
    outcome = export_units(client, poketrace, trace, out, units)
    assert not outcome.failed, outcome.failed
    return out, outcome
