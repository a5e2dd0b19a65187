"""A Dask client ready to run this package's tasks: on a running cluster's scheduler, or on a
cluster of local processes."""

import contextlib
import os
import tempfile
import zipfile
from pathlib import Path

from distributed import Client, LocalCluster

import pokedist


@contextlib.contextmanager
def connect(scheduler=None, local=None):
    """A client of the scheduler at `scheduler` (tcp://host:8786), or of `local` worker
    processes on this machine (default: one a core), one task at a time each, on localhost."""
    if scheduler:
        with Client(scheduler) as client:
            ship_package(client)
            yield client
        return
    workers = local or os.cpu_count() or 1
    with LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0"
    ) as cluster, Client(cluster) as client:
        # (Local workers start with this process's sys.path: they import the package as it is.)
        yield client


def ship_package(client):
    """Sends this package to the scheduler and the workers (also those that join later), which
    unpickle its task functions: they need only Dask, pyarrow and the poketrace binary."""
    source = Path(pokedist.__file__).parent
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "pokedist.zip"
        with zipfile.ZipFile(archive, "w") as z:
            for f in sorted(source.glob("*.py")):
                z.write(f, f"pokedist/{f.name}")
        client.upload_file(str(archive))
