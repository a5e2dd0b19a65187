"""Fixtures of the driver's tests: the poketrace binary, a simulated 4-CPU trace with pokes, and
a local Dask cluster of 2 worker processes. Without the Python packages or the binary no test
runs, except in CI (CI set), where they fail."""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))

MISSING = [m for m in ("distributed", "duckdb", "pyarrow") if importlib.util.find_spec(m) is None]
if MISSING and not os.environ.get("CI"):
    pytest.exit(
        f"not installed: {', '.join(MISSING)} (scripts/setup.sh --tests installs them; PYTHONPATH as scripts/test.sh sets it)",
        returncode=pytest.ExitCode.NO_TESTS_COLLECTED,
    )

from datasets import SIMULATE, TARGET_BYTES, damage, export_single  # noqa: E402
from pokedist.cluster import connect  # noqa: E402
from pokedist.driver import export_units  # noqa: E402
from pokedist.units import list_units  # noqa: E402


def _needed(what):
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI is set: these tests must run)")
    pytest.skip(what)


@pytest.fixture(scope="session")
def poketrace():
    path = Path(os.environ.get("POKETRACE_BIN", REPO / "target" / "debug" / "poketrace"))
    if not path.is_file():
        _needed(f"no poketrace binary at {path} (cargo build -p poketrace, or set POKETRACE_BIN)")
    return str(path)


def simulate(poketrace, out):
    done = subprocess.run([poketrace, "simulate", *SIMULATE, "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="session")
def trace(poketrace, tmp_path_factory):
    """A simulated run: 4 CPUs of Intel PT, kernel code patched while it runs."""
    return simulate(poketrace, tmp_path_factory.mktemp("trace") / "run")


@pytest.fixture(scope="session")
def client():
    """A client of 2 local worker processes, shared by the tests that do not kill a worker."""
    with connect(local=2) as c:
        yield c


@pytest.fixture(scope="session")
def units(poketrace, trace):
    listed = list_units(poketrace, trace, TARGET_BYTES)
    assert len(listed) >= 16, f"{len(listed)} units"
    assert {u["cpu"] for u in listed} == {0, 1, 2, 3}
    return listed


@pytest.fixture(scope="session")
def single(poketrace, trace, tmp_path_factory):
    """The trace exported by one `poketrace export` process."""
    return export_single(poketrace, trace, tmp_path_factory.mktemp("single") / "out")


def export_on(client, poketrace, trace, tmp_path_factory, extra=()):
    """`trace` exported on the cluster: the dataset and the run's outcome, every unit done."""
    out = tmp_path_factory.mktemp("cluster") / "out"
    units = list_units(poketrace, trace, TARGET_BYTES)
    outcome = export_units(client, poketrace, trace, out, units, target_bytes=TARGET_BYTES, extra=extra)
    assert not outcome.failed, outcome.failed
    return out, outcome


@pytest.fixture(scope="session")
def exported(client, poketrace, trace, units, tmp_path_factory):
    """The trace exported on the 2-worker cluster (branches and errors), and the run's outcome."""
    return export_on(client, poketrace, trace, tmp_path_factory)


@pytest.fixture(scope="session")
def exported_insns(client, poketrace, trace, units, tmp_path_factory):
    """The same with a row per instruction (--itrace=i)."""
    return export_on(client, poketrace, trace, tmp_path_factory, extra=["--itrace=i"])


@pytest.fixture(scope="session")
def damaged(trace, tmp_path_factory):
    """A copy of the trace with 256 bytes of one unit overwritten."""
    copy = tmp_path_factory.mktemp("damaged") / "run"
    shutil.copytree(trace, copy)
    damage(copy)
    return copy


@pytest.fixture(scope="session")
def exported_damaged(client, poketrace, damaged, tmp_path_factory):
    return export_on(client, poketrace, damaged, tmp_path_factory)
